"""Rendering an edition notebook from its English notebook and catalog, and executing it.

The rendered notebook has the English cells in the English order, with the same ids: markdown
translated segment by segment (relative links re-pointed from one folder deeper, ``relink``),
code cells copied byte for byte, plus one generated setup cell
(tag ``i18n-setup``) just before the first code cell. Its metadata ``chunkprefill_i18n`` records
what its outputs were computed from; ``make zh-TW`` re-executes a notebook only when one of them
changed (its code cells, the runtime catalog, or the numbers of the English deterministic
outputs), and otherwise keeps its stored outputs and only refreshes the prose."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
import polib

from .catalog import Article, Layout, omitted
from .segments import OMIT, Segment, render, segments
from .text import numbers

SETUP_TAG = "i18n-setup"
META = "chunkprefill_i18n"
IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}
IGNORE_COMMENTS = ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP")
KEY_FIELDS = ("code_sha256", "runtime_sha256", "english_outputs_sha256")
SETUP_NOTE = {  # the generated cell's comment, in the edition's language
    "zh-TW": "# 這份筆記本由英文版 {source} 與 {catalog} 產生，請勿直接修改：\n"
             "# 改英文版或 .po 之後執行 make zh-TW。下一行讓之後印出的句子與圖都用繁體中文。\n",
}


def setup_source(language: str, source: str, catalog: str) -> str:
    note = SETUP_NOTE.get(language, "").format(source=source, catalog=catalog)
    return f'{note}from chunkprefill.i18n import set_language; set_language("{language}")'


def is_setup(cell: Any) -> bool:
    return cell.cell_type == "code" and SETUP_TAG in cell.metadata.get("tags", [])


def output_ignored(cell: Any) -> bool:
    tags = set(cell.metadata.get("tags", []))
    return bool(tags & IGNORE_TAGS) or any(c in cell.source for c in IGNORE_COMMENTS)


def output_text(cell: Any) -> str:
    """The text a reader sees in a code cell's outputs: stdout, and per display the markdown or
    plain text (images have none; the figure's own texts are checked from their audit)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream" and out.name == "stdout":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            data = out.get("data", {})
            parts.append(data.get("text/markdown", data.get("text/plain", "")))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def deterministic_numbers(nb: Any) -> list[dict[str, int] | None]:
    """Per code cell (the setup cell left out): the numbers of its outputs, or None where its
    output is not compared (tagged or marked nbval-ignore-output / nbval-skip)."""
    return [None if output_ignored(c) else dict(sorted(numbers(output_text(c)).items()))
            for c in nb.cells if c.cell_type == "code" and not is_setup(c)]


def _sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^\s*(```|~~~)")


def relink(source: str, layout: Layout) -> str:
    """A rendered cell's relative links, for a notebook one folder below the English ones: a
    link the English resolves (``../chunkprefill/x.py``, ``07_x.ipynb``) points at the same
    file (``../../chunkprefill/x.py``, ``../07_x.ipynb``), except a link to a notebook of the
    edition, which means its translation (same name, same folder). URLs, anchors and links the
    English cannot resolve (a translation's ``../00_x.ipynb``, its English original) stay."""
    edition = {nb.name for nb in layout.edition_notebooks()}

    def target(m: re.Match[str]) -> str:
        link = m.group(2)
        path, hash_, anchor = link.partition("#")
        if not path or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:|/", path) or path in edition:
            return m.group(0)
        english = layout.english / path
        if not english.exists():
            return m.group(0)
        moved = os.path.relpath(english, layout.edition).replace(os.sep, "/")
        return f"{m.group(1)}{moved}{hash_}{anchor}{m.group(3)}"

    lines, fenced = source.split("\n"), False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines[i] = _LINK.sub(target, line)
    return "\n".join(lines)


def lookup_for(po: polib.POFile, untranslated: list[str] | None = None):
    """Segment -> translation, ``OMIT``, or None (English: fuzzy or missing, noted)."""
    entries = {e.msgid: e for e in po if not e.obsolete}

    def lookup(seg: Segment) -> object:
        e = entries.get(seg.text)
        if e is None or e.fuzzy or not (e.msgstr or omitted(e)):
            if untranslated is not None:
                untranslated.append(seg.text)
            return None
        if omitted(e):
            return OMIT
        return e.msgstr or None
    return lookup


def render_notebook(layout: Layout, english: Path, article: Article,
                    untranslated: list[str] | None = None) -> Any:
    """The edition notebook's cells and metadata (no outputs) from the English notebook;
    segments without a finished translation stay English (listed in ``untranslated``)."""
    nb = nbformat.read(english, as_version=4)
    po_path = layout.catalog_for(english)
    lookup = lookup_for(polib.pofile(str(po_path)), untranslated)
    cells, setup_done = [], False
    for index, cell in enumerate(nb.cells):
        new = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            segs = segments(cell.source, article.quotes, f"{english.name} cell {index}")
            new.source = relink(render(cell.source, segs, lookup), layout)
        elif cell.cell_type == "code":
            if not setup_done:
                source = setup_source(layout.language, f"../{english.name}", layout.rel(po_path))
                setup = nbformat.v4.new_code_cell(source, id=SETUP_TAG)
                setup.metadata["tags"] = [SETUP_TAG]
                cells.append(setup)
                setup_done = True
            new.outputs, new.execution_count = [], None
            new.metadata.pop("execution", None)
        cells.append(new)
    nb.cells = cells
    # The English run's widget state names the English run's widget ids: an edition notebook
    # stores its own (written by its execution, or kept with its outputs).
    nb.metadata.pop("widgets", None)
    runtime = layout.runtime_json.read_bytes() if layout.runtime_json.exists() else b""
    nb.metadata[META] = {
        "language": layout.language,
        "source": f"../{english.name}",
        "catalog": layout.rel(po_path),
        "code_sha256": _sha([c.source for c in cells if c.cell_type == "code"]),
        "runtime_sha256": hashlib.sha256(runtime).hexdigest(),
        "english_outputs_sha256": _sha(deterministic_numbers(nbformat.read(english, 4))),
    }
    return nb


def stale_fields(fresh: Any, stored: Any) -> list[str]:
    old = stored.metadata.get(META, {})
    return [k for k in KEY_FIELDS if old.get(k) != fresh.metadata[META][k]]


def _keep_outputs(fresh: Any, stored: Any) -> None:
    if "widgets" in stored.metadata:  # the state the kept outputs' widget ids refer to
        fresh.metadata["widgets"] = stored.metadata["widgets"]
    old = {c.get("id"): c for c in stored.cells if c.cell_type == "code"}
    for cell in fresh.cells:
        if cell.cell_type == "code" and cell.get("id") in old:
            prev = old[cell.get("id")]
            cell.outputs, cell.execution_count = prev.outputs, prev.execution_count
            cell.metadata = prev.metadata


def execute(nb: Any, cwd: Path, timeout: int = 600) -> None:
    """Run every cell (strict: a missing runtime translation fails) and store, per code cell,
    the texts of the figures it drew (``metadata.chunkprefill_i18n.figures``)."""
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory() as tmp:
        audit = Path(tmp) / "figures.jsonl"
        audit.touch()
        seen = [0]

        def collect(cell: Any, **_: Any) -> None:
            lines = audit.read_text(encoding="utf-8").splitlines()[seen[0]:]
            seen[0] += len(lines)
            figures = list(dict.fromkeys(lines))
            if figures:
                cell.metadata[META] = {"figures": [json.loads(f) for f in figures]}

        env = {"CHUNKPREFILL_I18N_STRICT": "1", "CHUNKPREFILL_I18N_AUDIT": str(audit)}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", on_cell_executed=collect,
                           resources={"metadata": {"path": str(cwd)}}).execute()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def build(layout: Layout, run: bool = True, force: bool = False,
          only: Sequence[str] = ()) -> list[str]:
    """``make zh-TW``: render every edition notebook; execute those whose outputs are stale.
    ``only`` (file names or their number prefixes, ``"06"``) limits it to those notebooks; the
    edition stays whole, so links to the others keep pointing at their translations."""
    article = Article.load(layout)
    layout.edition.mkdir(parents=True, exist_ok=True)
    notebooks = layout.edition_notebooks()
    unknown = [o for o in only if not any(e.name == o or e.name.startswith(f"{o}_")
                                          for e in notebooks)]
    if unknown:
        raise ValueError(f"only must name edition notebooks (a file name or its number), got "
                         f"{unknown}; the edition has {[e.name for e in notebooks]}")
    report = []
    for english in notebooks:
        if only and not any(english.name == o or english.name.startswith(f"{o}_") for o in only):
            continue
        target = layout.edition / english.name
        english_left: list[str] = []
        fresh = render_notebook(layout, english, article, english_left)
        stored = nbformat.read(target, 4) if target.exists() else None
        stale = KEY_FIELDS if stored is None or force else stale_fields(fresh, stored)
        if stale and not run:
            report.append(f"{layout.rel(target)}: stale ({', '.join(stale)}), not executed")
            continue
        if stale:
            execute(fresh, layout.edition)
            verdict = f"executed ({', '.join(stale)} changed)"
        else:
            _keep_outputs(fresh, stored)
            verdict = "prose refreshed, outputs kept"
        text = nbformat.writes(fresh) + "\n"
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        else:
            verdict = "unchanged"
        if english_left:
            verdict += (f"; {len(english_left)} segments still English (make i18n, then "
                        f"translate them in {layout.rel(layout.catalog_for(english))})")
        report.append(f"{layout.rel(target)}: {verdict}")
    return report
