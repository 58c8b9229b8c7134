"""The package's layers import in one direction only: core <- sim <- lab <- course.

core is ``chunkprefill/*.py`` with ``kernels/`` and ``data/`` (the engine a vLLM reader
expects); ``sim`` predicts step times; ``lab`` measures the toy model; ``course`` is what only
the notebooks use. A layer may import its own and the layers before it, never one after it.
Every import counts, a lazy one inside a function too: the rule is about what depends on
what, not about import time. ``__main__`` (the CLI) is an application on top of core and sim.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "chunkprefill"
ORDER = ("core", "sim", "lab", "course")
ALLOWED = {layer: set(ORDER[: i + 1]) for i, layer in enumerate(ORDER)}
ALLOWED["cli"] = {"core", "sim"}


def layer_of(module: str) -> str:
    """The layer of a ``chunkprefill...`` module name."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("sim", "lab", "course"):
        return parts[1]
    if len(parts) > 1 and parts[1] == "__main__":
        return "cli"
    return "core"


def module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import of the package in ``path``, absolute or relative."""
    out = []
    me = module_of(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base == "chunkprefill":  # from chunkprefill import sim, lab, ...: submodules
                out += [(node.lineno, f"chunkprefill.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return [(line, m) for line, m in out if m == "chunkprefill" or m.startswith("chunkprefill.")]


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_layers(path: Path) -> None:
    me = layer_of(module_of(path))
    bad = [f"line {line}: {m} ({layer_of(m)})" for line, m in imported_modules(path)
           if layer_of(m) not in ALLOWED[me]]
    assert not bad, f"{path.relative_to(PACKAGE)} is in layer {me!r}, which may import only " \
                    f"{sorted(ALLOWED[me])}; it imports: {bad}"


def test_the_checker_sees_each_kind_of_import(tmp_path: Path) -> None:
    """The walk itself: absolute, from-package, relative and lazy imports are all found."""
    assert layer_of("chunkprefill.scheduler") == "core"
    assert layer_of("chunkprefill.course.plots.schedule") == "course"
    assert layer_of("chunkprefill.__main__") == "cli"
    src = ("import chunkprefill.lab.stats\nfrom chunkprefill import course\n"
           "def f():\n    from chunkprefill.sim.cost_model import CostModel\n")
    path = PACKAGE / "_layers_probe.py"
    path.write_text(src)
    try:
        found = [m for _, m in imported_modules(path)]
    finally:
        path.unlink()
    assert found == ["chunkprefill.lab.stats", "chunkprefill.course",
                     "chunkprefill.sim.cost_model"]
