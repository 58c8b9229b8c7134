"""Every widget a stored notebook shows has its state stored with it. The web page (and a
reader's JupyterLab before the kernel runs) draws a widget output from
``metadata.widgets``; an output whose model id is not there renders as nothing. A generated
edition notebook must store the state of its own run, not the English run's."""

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "zh-TW").glob("[0-9][0-9]_*.ipynb"))
VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"


def _shown_model_ids(nb) -> list[str]:
    return [out["data"][VIEW]["model_id"] for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if VIEW in out.get("data", {})]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_every_shown_widget_has_its_state_stored(path: Path):
    nb = nbformat.read(path, as_version=4)
    shown = _shown_model_ids(nb)
    state = nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {})
    missing = [m for m in shown if m not in state]
    assert not missing, (f"{len(missing)} of {len(shown)} widget outputs have no stored state "
                         f"(first: {missing[:3]}); re-execute the notebook")
