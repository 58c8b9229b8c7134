"""All checks over the real edition, grouped the way the tests parametrize them."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import polib

from . import checks
from .catalog import Article, Layout, allowed_terms
from .notebook import META
from .segments import segments

PENDING = "pending_figure_texts.json"


def pending_figure_texts(layout: Layout) -> dict[str, list[str]]:
    path = layout.root / "i18n" / layout.language / PENDING
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def entry_problems(entry: polib.POEntry, article: Article, terms: checks.Terms,
                   runtime: bool) -> list[str]:
    """Faithful, Taiwan usage and typography for one translated catalog entry."""
    if entry.obsolete or not entry.msgstr:
        return [] if runtime else checks.faithful_prose(entry, article)
    found = checks.faithful_runtime(entry) if runtime else checks.faithful_prose(entry, article)
    found += checks.taiwan(entry.msgstr, terms, allowed_terms(entry))
    found += checks.kept_english(entry.msgid, entry.msgstr, terms)
    found += checks.typography(entry.msgstr)
    return [f"{p} [msgid {entry.msgid[:50]!r}]" for p in found]


def catalog_text_problems(layout: Layout, po_path: Path, runtime: bool) -> list[str]:
    article, terms = Article.load(layout), checks.load_terms(layout.terms)
    return [f"{layout.rel(po_path)}: {p}" for e in polib.pofile(str(po_path))
            for p in entry_problems(e, article, terms, runtime)]


def markdown_text_problems(layout: Layout, path: Path) -> list[str]:
    """Taiwan usage and typography of a zh markdown file, segment by segment."""
    terms, article = checks.load_terms(layout.terms), Article.load(layout)
    found = []
    for seg in segments(path.read_text(encoding="utf-8"), article.quotes, path.name):
        found += checks.taiwan(seg.text, terms) + checks.typography(seg.text)
    return [f"{layout.rel(path)}: {p}" for p in found]


def notebook_problems(layout: Layout, edition: Path) -> list[str]:
    """Fresh rendering, same experiment, same numbers, figures, for one edition notebook."""
    english = layout.english / edition.name
    rel = layout.rel(edition)
    if not english.exists() or not layout.catalog_for(english).exists():
        return [f"{rel}: no English notebook or catalog to generate it from"]
    en, zh = nbformat.read(english, 4), nbformat.read(edition, 4)
    if META not in zh.metadata:
        return [f"{rel}: not generated (no metadata.{META}): run make zh-TW"]
    terms = checks.load_terms(layout.terms)
    return (checks.fresh_render(layout, english, edition) + checks.same_experiment(en, zh, rel)
            + checks.no_relative_paths(en, layout.rel(english))
            + checks.same_numbers(en, zh, rel)
            + checks.figure_problems(zh, terms, pending_figure_texts(layout).get(edition.name, []),
                                     rel))


def all_problems(layout: Layout) -> list[str]:
    found = checks.complete(layout) + checks.fresh_catalogs(layout)
    for po in [*sorted(layout.catalogs.glob("*.po")), layout.runtime_po]:
        if po.exists():
            found += catalog_text_problems(layout, po, runtime=po == layout.runtime_po)
    for edition in sorted(layout.edition.glob("*.ipynb")):
        found += notebook_problems(layout, edition)
    missing = [nb for nb in layout.edition_notebooks() if not (layout.edition / nb.name).exists()]
    found += [f"{layout.rel(nb)}: its catalog exists but no {layout.language} notebook (run "
              f"make zh-TW)" for nb in missing]
    for path in checks.edition_text_files(layout):
        found += markdown_text_problems(layout, path)
    return found
