"""Extraction (English notebooks and package -> message templates), merging (GNU msgmerge, which
marks a changed message fuzzy and keeps its old msgid as ``#| msgid``), and the compiled runtime
catalog (JSON, read by ``chunkprefill.i18n`` with the standard library).

Files, for language L (``zh-TW``):

- ``i18n/L/notebooks/<notebook stem>.po``: one per notebook of the edition, its markdown segments;
- ``i18n/L/runtime.po``: every ``tr("...")``/``N_("...")`` literal of the package and of the
  edition notebooks' code cells (found with ``ast``, IPython magics transformed first);
- ``chunkprefill/locale/L.json``: runtime.po's translated, non-fuzzy messages (package data).

The English text is the key (no msgctxt): one English segment, one translation, wherever it
sits. Locations (``#: notebooks/00_course_map.ipynb#<cell id>:<line>``) and the segment's kind
(``#. heading``) are for the translator; a translator comment ``# i18n: omit`` drops a top-level
paragraph from the edition (a gloss the zh reader does not need), ``# i18n-allow: TERM`` allows a
listed term in its legitimate Taiwan sense."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib

from .segments import Segment, segments
from .text import has_cjk, squash

OMIT_COMMENT = "i18n: omit"
ALLOW_COMMENT = "i18n-allow:"
BRACE_FLAG = "python-brace-format"
GETTEXT_LANG = {"zh-TW": "zh_TW"}


@dataclass(frozen=True)
class Layout:
    """Where an edition's files live, relative to a repository root (tests use a tmp root)."""
    root: Path
    language: str = "zh-TW"

    @property
    def english(self) -> Path:
        return self.root / "notebooks"

    @property
    def edition(self) -> Path:
        return self.english / self.language

    @property
    def catalogs(self) -> Path:
        return self.root / "i18n" / self.language / "notebooks"

    @property
    def runtime_po(self) -> Path:
        return self.root / "i18n" / self.language / "runtime.po"

    @property
    def runtime_json(self) -> Path:
        return self.root / "chunkprefill" / "locale" / f"{self.language}.json"

    @property
    def package(self) -> Path:
        return self.root / "chunkprefill"

    @property
    def site_live(self) -> Path:
        """The course site's live trace page's Python (it prints through the package's tr)."""
        return self.root / "site" / "live"

    @property
    def quotes(self) -> Path:
        return self.root / "i18n" / "article.txt"

    @property
    def terms(self) -> Path:
        return self.root / "i18n" / self.language / "terms.md"

    def catalog_for(self, notebook: Path) -> Path:
        return self.catalogs / f"{notebook.stem}.po"

    def edition_notebooks(self) -> list[Path]:
        """The English notebooks that have a catalog: the edition's notebooks."""
        return [self.english / f"{po.stem}.ipynb" for po in sorted(self.catalogs.glob("*.po"))]

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


class Article:
    """The article the course follows (``i18n/article.txt``: its lines, verbatim, in order, the
    reference list left out). A segment or 「quote」 is the article's when its text, whitespace
    aside, is a substring of the article (a quote may join consecutive lines, and ``…`` may skip
    between pieces that each are)."""

    def __init__(self, lines: Iterable[str]):
        self.lines = [line.strip() for line in lines if line.strip()]
        self.text = squash(" ".join(self.lines))

    @classmethod
    def load(cls, layout: Layout) -> Article:
        return cls(layout.quotes.read_text(encoding="utf-8").splitlines())

    def quotes(self, text: str) -> bool:
        pieces = [squash(p) for p in text.split("…") if p.strip()]
        return has_cjk(text) and bool(pieces) and all(p in self.text for p in pieces)


# ---- prose ---------------------------------------------------------------------------------

def notebook_segments(path: Path, article: Article) -> list[tuple[str, int, Segment]]:
    """(cell id, cell index, segment) for every markdown segment of a notebook."""
    nb = nbformat.read(path, as_version=4)
    out = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            where = f"{path.name} cell {index}"
            out += [(cell.get("id", str(index)), index, seg)
                    for seg in segments(cell.source, article.quotes, where)]
    return out


def prose_template(layout: Layout, notebook: Path, article: Article) -> list[polib.POEntry]:
    entries: dict[str, polib.POEntry] = {}
    for cell_id, _, seg in notebook_segments(notebook, article):
        if seg.verbatim:
            continue
        where = (f"{layout.rel(notebook)}#{cell_id}", str(seg.line + 1))
        entry = entries.setdefault(seg.text, polib.POEntry(msgid=seg.text, msgstr=""))
        entry.occurrences.append(where)
        kinds = entry.comment.split(", ") if entry.comment else []
        entry.comment = ", ".join(dict.fromkeys([*kinds, seg.kind]))
    return list(entries.values())


# ---- runtime strings -----------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    message: str
    line: int
    formatted: bool  # called with fields: a format string


class ExtractError(ValueError):
    pass


def _aliases(trees: Iterable[ast.AST]) -> tuple[set[str], set[str]]:
    """Local names bound to ``tr``/``N_`` and to the ``chunkprefill.i18n`` module."""
    funcs, modules = set(), set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                for alias in node.names:
                    if mod.endswith("i18n") and alias.name in ("tr", "N_"):
                        funcs.add(alias.asname or alias.name)
                    elif mod in ("chunkprefill", "") and alias.name == "i18n":
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "chunkprefill.i18n" and alias.asname:
                        modules.add(alias.asname)
    return funcs, modules


def tr_calls(tree: ast.AST, funcs: set[str], modules: set[str], where: str) -> list[Call]:
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) and f.id in funcs else (
            f.attr if isinstance(f, ast.Attribute) and f.attr in ("tr", "N_")
            and isinstance(f.value, ast.Name) and f.value.id in modules else None)
        if name is None:
            continue
        if not node.args:
            raise ExtractError(f"{where}:{node.lineno}: {name}() needs the message")
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            formatted = bool(node.keywords) if name == "tr" else _looks_formatted(arg.value)
            calls.append(Call(arg.value, node.lineno, formatted))
        elif isinstance(arg, (ast.JoinedStr, ast.BinOp, ast.Call)):
            raise ExtractError(f"{where}:{node.lineno}: {name}() takes a literal message with "
                               f"named fields (tr('{{n}} tokens', n=n)), not an f-string or a "
                               f"formatted string: the lookup must see the sentence")
        # a name or subscript: a constant marked N_ where it is defined
    return calls


def _looks_formatted(message: str) -> bool:
    from chunkprefill.i18n import field_names
    try:
        return bool(field_names(message))
    except ValueError:
        return False


def _code_cells(path: Path) -> list[tuple[str, str]]:
    from IPython.core.inputtransformer2 import TransformerManager
    nb = nbformat.read(path, as_version=4)
    manager = TransformerManager()
    return [(cell.get("id", str(i)), manager.transform_cell(cell.source))
            for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]


def runtime_template(layout: Layout) -> list[polib.POEntry]:
    """Every runtime message: the package's modules, the site's live page (site/live/*.py, which
    runs the package in the reader's browser), then each edition notebook's code cells."""
    found: list[tuple[Call, tuple[str, str]]] = []
    for path in [*sorted(layout.package.rglob("*.py")), *sorted(layout.site_live.glob("*.py"))]:
        if path.name == "i18n.py" and path.parent == layout.package:
            continue
        where = layout.rel(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), where)
        funcs, modules = _aliases([tree])
        found += [(c, (where, str(c.line))) for c in tr_calls(tree, funcs, modules, where)]
    for notebook in layout.edition_notebooks():
        cells = [(cid, ast.parse(src, f"{notebook.name}#{cid}")) for cid, src in
                 _code_cells(notebook)]
        funcs, modules = _aliases(tree for _, tree in cells)
        for cid, tree in cells:
            where = f"{layout.rel(notebook)}#{cid}"
            found += [(c, (where, str(c.line))) for c in tr_calls(tree, funcs, modules, where)]
    entries: dict[str, polib.POEntry] = {}
    for call, where in found:
        entry = entries.setdefault(call.message, polib.POEntry(msgid=call.message, msgstr=""))
        entry.occurrences.append(where)
        if call.formatted and BRACE_FLAG not in entry.flags:
            entry.flags.append(BRACE_FLAG)
    return list(entries.values())


# ---- catalogs on disk ----------------------------------------------------------------------

def _header(language: str) -> dict[str, str]:
    return {"Project-Id-Version": "chunkprefill", "Language": GETTEXT_LANG.get(language, language),
            "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
            "Content-Transfer-Encoding": "8bit", "Plural-Forms": "nplurals=1; plural=0;"}


def write_template(entries: list[polib.POEntry], path: Path, language: str) -> None:
    pot = polib.POFile(wrapwidth=79)
    pot.metadata = _header(language)
    pot.extend(entries)
    pot.save(str(path))


def msgmerge() -> str:
    found = shutil.which("msgmerge")
    if found is None:
        raise RuntimeError("GNU gettext's msgmerge is missing: `make i18n-tools` (as root) or "
                           "`sudo apt-get install gettext`")
    return found


def merge(po: Path, entries: list[polib.POEntry], language: str, out: Path | None = None) -> None:
    """msgmerge ``po`` with a fresh template into ``out`` (default: ``po`` itself); a missing
    ``po`` starts empty. Changed English becomes fuzzy with ``#| msgid`` the old English."""
    with tempfile.TemporaryDirectory() as tmp:
        pot, start = Path(tmp) / "t.pot", po
        write_template(entries, pot, language)
        if not po.exists() or not po.stat().st_size:
            start = Path(tmp) / "empty.po"
            write_template([], start, language)
        result = Path(tmp) / "merged.po"
        subprocess.run([msgmerge(), "--quiet", "--previous", "--width=79", "-o", str(result),
                        str(start), str(pot)], check=True)
        if not result.exists():  # msgmerge writes nothing for a catalog with no messages
            write_template([], result, language)
        target = out or po
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result, target)


def compile_runtime(po: Path) -> str:
    """runtime.po's usable messages as the JSON the runtime reads (sorted, so diffs are small)."""
    cat = polib.pofile(str(po))
    messages = {e.msgid: e.msgstr for e in cat if e.msgstr and not e.fuzzy and not e.obsolete}
    return json.dumps(messages, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def entry_view(entry: polib.POEntry) -> tuple[object, ...]:
    """What makes two catalog entries the same (ignoring line wrapping and the header)."""
    return (entry.msgid, entry.msgctxt, entry.msgstr, entry.obsolete, sorted(entry.flags),
            entry.previous_msgid, list(entry.occurrences), entry.comment, entry.tcomment)


def omitted(entry: polib.POEntry) -> bool:
    return OMIT_COMMENT in (entry.tcomment or "").splitlines()


def allowed_terms(entry: polib.POEntry) -> set[str]:
    return {line[len(ALLOW_COMMENT):].strip() for line in (entry.tcomment or "").splitlines()
            if line.startswith(ALLOW_COMMENT)}


def update_all(layout: Layout) -> list[str]:
    """``make i18n``: merge every edition catalog and the runtime catalog, compile the runtime
    JSON; returns one summary line per catalog."""
    article = Article.load(layout)
    report = []
    for notebook in layout.edition_notebooks():
        po = layout.catalog_for(notebook)
        merge(po, prose_template(layout, notebook, article), layout.language)
        report.append(stats(layout, po))
    merge(layout.runtime_po, runtime_template(layout), layout.language)
    layout.runtime_json.parent.mkdir(parents=True, exist_ok=True)
    layout.runtime_json.write_text(compile_runtime(layout.runtime_po), encoding="utf-8")
    report.append(stats(layout, layout.runtime_po))
    return report


def stats(layout: Layout, po: Path) -> str:
    cat = polib.pofile(str(po))
    active = [e for e in cat if not e.obsolete]
    done = sum(1 for e in active if (e.msgstr or omitted(e)) and not e.fuzzy)
    fuzzy = sum(1 for e in active if e.fuzzy)
    return (f"{layout.rel(po)}: {done} translated, {fuzzy} fuzzy, "
            f"{len(active) - done - fuzzy} untranslated, {len(cat.obsolete_entries())} obsolete")
