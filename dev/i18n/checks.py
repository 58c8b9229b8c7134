"""The checks that keep an edition honest. Each returns a list of problems (empty: it holds),
written so the message says what to run or fix; tests assert the lists are empty, and the
synthetic tests assert each check also finds a planted problem."""

from __future__ import annotations

import functools
import re
import string
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import polib
from markdown_it import MarkdownIt

from .catalog import (
    BRACE_FLAG,
    Article,
    Layout,
    compile_runtime,
    entry_view,
    merge,
    omitted,
    prose_template,
    runtime_template,
)
from .notebook import META, deterministic_numbers, is_setup, render_notebook, stale_fields
from .text import IDEOGRAPH, WIDE, article_quotes, corner_quotes, digit_runs, has_cjk

_MD = MarkdownIt("commonmark")


# ---- Complete and Fresh --------------------------------------------------------------------

def catalog_problems(po_path: Path, expected: list[polib.POEntry], rel: str) -> list[str]:
    """Complete: every expected message translated (or omitted), none fuzzy, none obsolete."""
    po = polib.pofile(str(po_path)) if po_path.exists() else polib.POFile()
    entries = {e.msgid: e for e in po if not e.obsolete}
    problems = []
    for want in expected:
        e = entries.get(want.msgid)
        if e is None:
            problems.append(f"{rel}: not in the catalog (run make i18n): {want.msgid[:70]!r}")
        elif e.fuzzy:
            was = f" (was {e.previous_msgid[:50]!r})" if e.previous_msgid else ""
            problems.append(f"{rel}: fuzzy, the English changed{was}: update the translation "
                            f"and remove the fuzzy flag: {e.msgid[:70]!r}")
        elif not e.msgstr and not omitted(e):
            problems.append(f"{rel}: untranslated: {e.msgid[:70]!r}")
    problems += [f"{rel}: obsolete entry left (delete it once reused): {e.msgid[:60]!r}"
                 for e in po.obsolete_entries()]
    return problems


def complete(layout: Layout) -> list[str]:
    article = Article.load(layout)
    problems = []
    for notebook in layout.edition_notebooks():
        po = layout.catalog_for(notebook)
        problems += catalog_problems(po, prose_template(layout, notebook, article),
                                     layout.rel(po))
    return problems + catalog_problems(layout.runtime_po, runtime_template(layout),
                                       layout.rel(layout.runtime_po))


def fresh_catalogs(layout: Layout) -> list[str]:
    """Fresh: each catalog is what ``make i18n`` makes from today's English (entry by entry,
    wrapping and header aside), and the runtime JSON is runtime.po compiled."""
    article = Article.load(layout)
    jobs = [(layout.catalog_for(nb), prose_template(layout, nb, article))
            for nb in layout.edition_notebooks() if nb.exists()]
    jobs.append((layout.runtime_po, runtime_template(layout)))
    problems = [f"{layout.rel(layout.catalog_for(nb))}: no English notebook {layout.rel(nb)}"
                for nb in layout.edition_notebooks() if not nb.exists()]
    with tempfile.TemporaryDirectory() as tmp:
        for po, template in jobs:
            if not po.exists():
                problems.append(f"{layout.rel(po)}: missing (run make i18n)")
                continue
            out = Path(tmp) / po.name
            merge(po, template, layout.language, out=out)
            now = [entry_view(e) for e in polib.pofile(str(po))]
            want = [entry_view(e) for e in polib.pofile(str(out))]
            if now != want:
                added = {v[0] for v in want} - {v[0] for v in now}
                gone = {v[0] for v in now} - {v[0] for v in want}
                problems.append(f"{layout.rel(po)}: not what make i18n makes from the current "
                                f"English (run make i18n); new: {sorted(added)[:3]}, "
                                f"gone: {sorted(gone)[:3]}")
    if layout.runtime_po.exists():
        compiled = layout.runtime_json.read_text(encoding="utf-8") \
            if layout.runtime_json.exists() else ""
        if compiled != compile_runtime(layout.runtime_po):
            problems.append(f"{layout.rel(layout.runtime_json)}: not runtime.po compiled "
                            f"(run make i18n)")
    return problems


def fresh_render(layout: Layout, english: Path, stored_path: Path) -> list[str]:
    """Fresh: rendering now reproduces every stored cell (type, id, source, tags), and the
    stored outputs were computed from today's code, runtime catalog and English numbers."""
    rel = layout.rel(stored_path)
    fresh = render_notebook(layout, english, Article.load(layout))
    stored = nbformat.read(stored_path, as_version=4)
    problems = [f"{rel}: stale outputs, {f} changed (run make zh-TW)"
                for f in stale_fields(fresh, stored)]

    def view(nb: Any) -> list[tuple[str, str, str, list[str]]]:
        return [(c.cell_type, c.get("id", ""), c.source, c.metadata.get("tags", []))
                for c in nb.cells]
    want, have = view(fresh), view(stored)
    if len(want) != len(have):
        problems.append(f"{rel}: {len(have)} cells, rendering makes {len(want)} (run make zh-TW)")
    problems += [f"{rel}: cell {i} differs from its rendering (run make zh-TW; never edit the "
                 f"generated notebook): {h[2][:60]!r}" for i, (w, h) in enumerate(zip(want, have))
                 if w != h]
    return problems


# ---- Same experiment, same numbers ---------------------------------------------------------

def same_experiment(english: Any, edition: Any, rel: str) -> list[str]:
    """Code cells identical to the English ones, apart from one setup cell, the first code."""
    code = [c for c in edition.cells if c.cell_type == "code"]
    setups = [i for i, c in enumerate(code) if is_setup(c)]
    problems = [] if setups == [0] else [f"{rel}: the setup cell must be the one first code "
                                         f"cell (found at code cells {setups})"]
    en = [c.source for c in english.cells if c.cell_type == "code"]
    zh = [c.source for c in code if not is_setup(c)]
    if len(en) != len(zh):
        problems.append(f"{rel}: {len(zh)} code cells besides the setup, English has {len(en)}")
    problems += [f"{rel}: code cell {i} differs from the English: {z[:60]!r}"
                 for i, (e, z) in enumerate(zip(en, zh)) if e != z]
    return problems


def no_relative_paths(english: Any, rel: str) -> list[str]:
    """The edition runs one folder deeper: a code cell reading ``"../x"`` would read another
    file there (use a package helper, e.g. importlib.resources)."""
    return [f"{rel}: code cell {i} uses a path relative to notebooks/: {m.group(0)!r}"
            for i, c in enumerate(x for x in english.cells if x.cell_type == "code")
            for m in re.finditer(r"""["']\.\./[^"']*["']""", c.source)]


def same_numbers(english: Any, edition: Any, rel: str) -> list[str]:
    """The numbers of each compared (deterministic) output equal the English output's."""
    problems = []
    pairs = zip(deterministic_numbers(english), deterministic_numbers(edition))
    for i, (en, zh) in enumerate(pairs):
        if en is not None and zh is not None and en != zh:
            diff = (Counter(en) - Counter(zh)) + (Counter(zh) - Counter(en))
            problems.append(f"{rel}: code cell {i} prints other numbers than the English "
                            f"(differing: {dict(diff)})")
    return problems


# ---- Faithful segments ---------------------------------------------------------------------

def _features(text: str) -> dict[str, Counter[str]]:
    feats: dict[str, Counter[str]] = {"code spans": Counter(), "link targets": Counter(),
                                      "HTML tags": Counter(), "digits": Counter()}
    for block in _MD.parse(text):
        for tok in block.children or []:
            if tok.type == "code_inline":
                feats["code spans"][tok.content] += 1
            elif tok.type in ("link_open", "image"):
                feats["link targets"][str(tok.attrs.get("href", tok.attrs.get("src")))] += 1
            elif tok.type == "html_inline":
                feats["HTML tags"][tok.content] += 1
            elif tok.type == "text":
                feats["digits"] += digit_runs(tok.content)
    return feats


# The edition lives one folder below the English notebooks: a translation may add a link to
# its English original (``../00_course_map.ipynb``), the one link the English cannot have.
EDITION_LINK = re.compile(r"\.\./\d\d_\w+\.ipynb")


def faithful_prose(entry: polib.POEntry, article: Article) -> list[str]:
    """Inline code, link targets, HTML tags and digits survive; each article quote of the
    English is the article's (verbatim) and stands byte for byte in the translation. A
    translation may add links to English notebooks (``EDITION_LINK``), no other link."""
    problems = [f"English quotes the article inexactly: {q}" for q in article_quotes(entry.msgid)
                if not article.quotes(q[1:-1])]
    if omitted(entry) or not entry.msgstr:
        return problems
    en, zh = _features(entry.msgid), _features(entry.msgstr)
    zh["link targets"] = Counter({t: n for t, n in zh["link targets"].items()
                                  if t in en["link targets"] or not EDITION_LINK.fullmatch(t)})
    problems += [f"{k} differ: English {dict(en[k])}, translation {dict(zh[k])}"
                 for k in en if en[k] != zh[k]]
    problems += [f"article quote not kept verbatim: {q}" for q in article_quotes(entry.msgid)
                 if q not in entry.msgstr]
    return problems


def _fields(message: str) -> Counter[tuple[str, str, str]]:
    return Counter((f, s or "", c or "") for _, f, s, c in string.Formatter().parse(message)
                   if f is not None)


def faithful_runtime(entry: polib.POEntry) -> list[str]:
    """A printed sentence keeps its placeholders (name, format spec, conversion) and digits."""
    if not entry.msgstr:
        return []
    if BRACE_FLAG not in entry.flags:
        return [] if digit_runs(entry.msgid) == digit_runs(entry.msgstr) else \
            [f"digits differ in {entry.msgid[:60]!r}"]
    try:
        have = _fields(entry.msgstr)
    except ValueError as e:
        return [f"translation is not a valid format string ({e}): {entry.msgstr[:60]!r}"]
    problems = [] if have == _fields(entry.msgid) else [
        f"placeholders differ: English {sorted(_fields(entry.msgid))}, translation "
        f"{sorted(have)}"]
    strip = re.compile(r"\{[^{}]*\}")
    if digit_runs(strip.sub("", entry.msgid)) != digit_runs(strip.sub("", entry.msgstr)):
        problems.append(f"digits differ outside the placeholders in {entry.msgid[:60]!r}")
    return problems


# ---- Taiwan usage --------------------------------------------------------------------------

@dataclass(frozen=True)
class Terms:
    kept: tuple[tuple[str, bool], ...]       # (English term, must it survive translation)
    avoid: tuple[tuple[str, str, str], ...]  # (mainland form, Taiwan form, error | warn)


def load_terms(path: Path) -> Terms:
    """The two tables of terms.md whose headings say "(checked)"."""
    tables: dict[str, list[list[str]]] = {}
    heading = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = line if "(checked)" in line else ""
        elif heading and line.startswith("|") and not re.match(r"\|\s*-", line):
            tables.setdefault(heading, []).append([c.strip() for c in line.strip("|").split("|")])
    kept, avoid = [], []
    for head, rows in tables.items():
        body = rows[1:]
        if "English" in head:
            kept += [(r[0].strip("`"), r[1] == "yes") for r in body]
        else:
            avoid += [(r[0], r[1], r[2]) for r in body]
    return Terms(tuple(kept), tuple(avoid))


@functools.lru_cache(maxsize=1)
def non_taiwan_characters() -> dict[str, str]:
    """Characters a Taiwan text never uses, from OpenCC's tables (opencc-python-reimplemented):
    a Simplified-only character is a key of STCharacters that is no Traditional form (not among
    any mapping's targets, not a key of TSCharacters); a variant is a key of TWVariants (the
    standard form where Taiwan writes another, 爲 -> 為). A Taiwan form (a TWVariants target, 峰 群)
    is never flagged, though STCharacters maps it to its standard form. Value: what to write."""
    import opencc

    folder = Path(opencc.__file__).parent / "dictionary"

    def table(name: str) -> dict[str, list[str]]:
        rows = (line.rstrip("\n").split("\t") for line in
                (folder / name).read_text(encoding="utf-8").splitlines() if line.strip())
        return {k: v.split() for k, v in rows}
    st, ts, tw = table("STCharacters.txt"), table("TSCharacters.txt"), table("TWVariants.txt")
    # a TWVariants target is the form Taiwan writes (峯 -> 峰, 羣 -> 群): never flag it
    traditional = set(ts) | {c for table_ in (st, tw) for targets in table_.values()
                             for c in targets}
    bad = {k: "/".join(tw.get(c, [c])[0] for c in v) for k, v in st.items()
           if k not in traditional}
    bad.update({k: "/".join(v) for k, v in tw.items()})
    return bad


def _prose(text: str) -> str:
    """Text without code spans, link targets, placeholders and tags (words only)."""
    return re.sub(r"`+[^`]*`+|\]\([^)]*\)|<[^>]*>|\{[^{}]*\}", " ", text)


def taiwan(text: str, terms: Terms, allowed: set[str] = frozenset()) -> list[str]:
    """No Simplified-only or non-Taiwan variant characters; no mainland term (a ``warn`` term is
    allowed where a translator comment ``# i18n-allow: TERM`` says it is meant so)."""
    bad = non_taiwan_characters()
    problems = [f"{c!r} is not Taiwan usage (write {bad[c]})" for c in dict.fromkeys(text)
                if c in bad]
    prose = _prose(text)
    for term, use, level in terms.avoid:
        if term in prose and not (level == "warn" and term in allowed):
            problems.append(f"mainland term {term!r}: write {use}")
    return problems


def kept_english(msgid: str, msgstr: str, terms: Terms) -> list[str]:
    """Terms the article keeps in English stay English in the translation."""
    en, zh = _prose(msgid).lower(), _prose(msgstr).lower()
    return [f"{term!r} must stay in English, as the article writes it" for term, must in
            terms.kept if must and re.search(rf"\b{re.escape(term.lower())}", en)
            and term.lower() not in zh]


# ---- Typography ----------------------------------------------------------------------------

_IDEO = f"[{IDEOGRAPH}]"
_TYPO = [
    (re.compile(f"[{WIDE}]\n[{WIDE}]"), "a line break between two CJK characters"),
    (re.compile("[“”‘’]"), "curly quotes: use 「」 (『』 inside)"),
    (re.compile(f'"[^"\n]*{_IDEO}[^"\n]*"'), 'straight quotes around Chinese: use 「」'),
    (re.compile(f"{_IDEO}[,.:;?!]|[,:;?!] ?{_IDEO}"),
     "half-width punctuation in a Chinese sentence: use ，。：；？！"),
    (re.compile(f"\\([^()]*{_IDEO}[^()]*\\)"), "half-width parentheses around Chinese: use （）"),
    (re.compile(f"{_IDEO}[A-Za-z0-9`%]|[A-Za-z0-9`%]{_IDEO}"),
     "no space between Chinese and Latin text or digits"),
]


def typography(text: str) -> list[str]:
    """The article's typography: one line per paragraph, 「」 quotes, full-width punctuation,
    a space between ideographs and Latin letters or digits. Article quotes are the article's
    own text and are not re-checked; code spans count as Latin, link targets do not count."""
    masked = text
    for q in corner_quotes(text):
        if has_cjk(q):
            masked = masked.replace(q, "「引」")
    masked = re.sub(r"`+[^`]*`+", "`x`", masked)
    masked = re.sub(r"\]\([^)]*\)", "]", masked)
    masked = re.sub(r"<https?:[^>]*>|<[^>]*>", "", masked)
    masked = re.sub(r"\{[^{}]*\}", "9", masked)
    masked = re.sub(r"\*\*|~~|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])", "", masked)
    problems = []
    for pattern, why in _TYPO:
        for m in pattern.finditer(masked):
            problems.append(f"{why}: …{masked[max(0, m.start() - 8):m.end() + 8]!r}…")
    return problems


# ---- Plots ---------------------------------------------------------------------------------

UNITS = {"ms", "us", "µs", "ns", "s", "x", "GB", "MB", "KB", "GiB", "MiB", "KiB", "tok"}
TC_FONTS = {"Noto Sans CJK TC", "Noto Sans Mono CJK TC", "Noto Serif CJK TC"}


def english_words(text: str, terms: Terms) -> list[str]:
    """English words a zh reader would have to read: letters outside the kept terms, acronyms,
    units, single letters and code-like tokens (``Scheduler.schedule()``, ``num_tokens``)."""
    code = re.compile(r"[_.]\w|\(\)|[a-z][A-Z]|\d|=")
    # words end at spaces, slashes and CJK punctuation ("V1，不切段，token budget" is three)
    rest = " ".join(" " if code.search(c) else c
                    for c in re.split(r"[\s/\u3000-\u303f\uff00-\uffef]+", text))
    for term, _ in sorted(terms.kept, key=lambda t: -len(t[0])):
        rest = re.sub(rf"(?i)(?<![A-Za-z]){re.escape(term)}(?![A-Za-z])", " ", rest)
    return [w for w in re.findall(r"[A-Za-zµ]+", rest)
            if len(w) > 1 and not w.isupper() and w not in UNITS]


def figure_problems(edition: Any, terms: Terms, pending: list[str], rel: str) -> list[str]:
    """Figures drawn in the edition: each text drawn first by a Traditional-Chinese CJK font,
    no glyph missing, and no English words, except texts listed as pending (the package draws
    them, not yet through tr); a pending text no longer drawn must leave the list."""
    problems, english = [], []
    for cell in edition.cells:
        for fig in cell.metadata.get(META, {}).get("figures", []):
            for t in fig:
                if t["missing"]:
                    problems.append(f"{rel}: no font has {t['missing']!r} in {t['text']!r}")
                if t["font"] not in TC_FONTS and "$" not in t["text"]:
                    problems.append(f"{rel}: {t['text']!r} drawn in {t['font']!r}, not a "
                                    f"Traditional-Chinese CJK font")
                if english_words(t["text"], terms):
                    english.append(t["text"])
    problems += [f"{rel}: English figure text {t!r} (words {english_words(t, terms)}): wrap it "
                 f"in tr, or list it as pending" for t in dict.fromkeys(english)
                 if t not in pending]
    problems += [f"{rel}: pending text {t!r} is no longer drawn: remove it from the list"
                 for t in pending if t not in english]
    return problems


def edition_text_files(layout: Layout) -> list[Path]:
    """zh prose outside the catalogs that the Taiwan and typography checks read too."""
    readme = layout.root / f"README.{layout.language}.md"
    return [readme] if readme.exists() else []

