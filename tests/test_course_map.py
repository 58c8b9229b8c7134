"""Notebook 00 (the course map) stays true of the package and of the course: its glossary's
package names exist (a rename breaks this test instead of leaving the table stale), and its
course table links every notebook of the course."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chunkprefill import CacheConfig, KVCacheManager, Request, Scheduler, SchedulerConfig
from chunkprefill.scheduler_output import SchedulerOutput

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
COURSE_MAP = NOTEBOOKS / "00_course_map.ipynb"


def markdown_cells() -> list[str]:
    nb = json.loads(COURSE_MAP.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def section(heading: str) -> str:
    """The markdown from ``## heading`` to the next level-2 heading."""
    text = "\n".join(markdown_cells())
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"00 has no '## {heading}' section"
    return m.group(1)


def glossary_rows() -> list[list[str]]:
    rows = [line.strip().strip("|").split("|") for line in
            section("Glossary (the article's words)").splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row] for row in rows[1:]]  # the header row dropped


def instances() -> dict[str, object]:
    sched = Scheduler(SchedulerConfig(), CacheConfig())
    return {"Request": Request("x", [1]), "SchedulerConfig": SchedulerConfig(),
            "CacheConfig": CacheConfig(), "Scheduler": sched,
            "KVCacheManager": sched.kv_cache_manager, "SchedulerOutput": sched.schedule()}


def test_glossary_has_its_rows_once_each():
    english = [row[0] for row in glossary_rows()]
    assert len(english) >= 20 and len(english) == len(set(english))
    assert all(len(row) == 3 and row[1] for row in glossary_rows())


def test_every_package_name_in_the_glossary_exists():
    objs = instances()
    assert isinstance(objs["KVCacheManager"], KVCacheManager)
    assert isinstance(objs["SchedulerOutput"], SchedulerOutput)
    names = [n for row in glossary_rows() for n in re.findall(r"`([A-Za-z_]\w*\.\w+)`", row[2])]
    assert len(names) >= 15
    for name in names:
        cls, attr = name.split(".")
        assert cls in objs, f"glossary names {name}: {cls} is not one of the package's classes"
        assert hasattr(objs[cls], attr), f"glossary names {name}, which does not exist"


def test_glossary_values_it_states():
    """The rows that state a value: stall-free batching is the default style, prefix caching
    is off in the course's own CacheConfig (00's deployment section says so too)."""
    rows = {row[0]: row[2] for row in glossary_rows()}
    assert '`"mixed"`, the default' in rows["stall-free batching"]
    assert SchedulerConfig().batching == "mixed"
    assert CacheConfig().enable_prefix_caching is False
    assert "off in `chunkprefill.CacheConfig`" in section("In your vLLM deployment")


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_the_course_table_links_every_notebook(path):
    table = section("The notebooks")
    if path == COURSE_MAP:
        assert re.search(r"^\| 00 \| course map \|", table, re.M)
        return
    number = path.name[:2]
    assert re.search(rf"^\| {number} \| \[[^\]]+\]\({re.escape(path.name)}\) \|.*\| \d+ min \|$",
                     table, re.M), f"00's course table has no row linking {path.name} with its time"
