"""dev/check_vllm_citations.py: a quoted vLLM excerpt must be exactly the lines its link names
(checked here on a small fake source tree; the real check runs by hand against vLLM 0.33.0)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "check_vllm_citations", Path(__file__).parent.parent / "dev" / "check_vllm_citations.py")
assert SPEC is not None and SPEC.loader is not None
checker = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(checker)


def _notebook(tmp_path: Path, lines: str, quoted: str) -> Path:
    md = (f"[lines]({'https://github.com/vllm-project/vllm/blob/v0.33.0/'}vllm/x.py#{lines}) "
          f"(quoted):\n\n```python\n{quoted}\n```\n")
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": [md]}]}))
    return nb


def test_citations_match_exact_lines(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "x.py").write_text("a = 1\nif a:\n    b = 2\nc = 3\n")
    assert checker.check(tmp_path, [_notebook(tmp_path, "L2-L3", "if a:\n    b = 2")]) == []
    wrong = checker.check(tmp_path, [_notebook(tmp_path, "L1-L2", "if a:\n    b = 2")])
    assert len(wrong) == 1 and "L1-L2" in wrong[0]
    past = checker.check(tmp_path, [_notebook(tmp_path, "L4-L9", "c = 3")])
    assert len(past) == 1 and "has 4 lines" in past[0]
