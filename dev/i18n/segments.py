"""Markdown cells cut into translation segments, and put back together from their translations.

A segment is one unit a translator reads whole (markdown-it-py block tokens, with source lines):

- a heading; a paragraph (top level, in a list item or in a blockquote); one table cell (header
  or body); the text of a ``<summary>``;
- container markers (``#``, ``- ``, ``1. ``, ``> ``, the table's ``|``) stay outside the text;
- a segment without words (``00``, `` `max_num_seqs` ``, ``|---|``) is not extracted;
- fenced code and other HTML are copied as they are (prose inside other HTML is an error);
- an article quote (the whole segment is the article's text) is copied, never translated.

The msgid is the segment unwrapped to one line (``text.unwrap``), so re-wrapping English changes
nothing; a rendered segment is one line too (no hard wraps, no CJK soft breaks)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from markdown_it import MarkdownIt

from .text import IDEOGRAPH, unwrap

OMIT = object()  # a translation that drops its (top-level) paragraph from the edition
_MD = MarkdownIt("commonmark").enable("table")
_PREFIX = re.compile(r"[ \t>*+\-#\d.)]*")
_WORDS = re.compile(f"[A-Za-z]{{2,}}|[{IDEOGRAPH}]")
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.S)
_PIPE = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Segment:
    kind: str           # heading | paragraph | list item | blockquote | table header | table cell
                        # | summary
    text: str           # the msgid
    line: int           # its first source line in the cell, 0-based
    verbatim: bool      # an article quote: rendered as it is
    end: int            # block: the lines [line, end) it replaces
    prefix: str = ""    # block: the container markers before it
    suffix: str = ""    # block: a heading's closing hashes
    column: int = -1    # table cell: its column
    span: tuple[int, int] = (0, 0)  # summary: character offsets in lines [line, end)

    @property
    def omittable(self) -> bool:
        return self.kind == "paragraph"


def has_words(text: str) -> bool:
    """Is there prose to translate once code spans, links' targets and tags are removed?"""
    rest = re.sub(r"`+[^`]*`+|\]\([^)]*\)|<[^>]*>", " ", text)
    return _WORDS.search(rest) is not None


def _check_soft_breaks(content: str, where: str) -> None:
    for line in content.split("\n")[:-1]:
        if line.endswith(("  ", "\\")):
            raise ValueError(f"{where}: a hard line break inside a segment is not supported "
                             f"(line {line!r}); make it two paragraphs or a list")


def _cells(line: str) -> list[tuple[int, int]]:
    """Character spans of a table row's cells (between unescaped pipes, outer pipes optional)."""
    pipes = [m.start() for m in _PIPE.finditer(line)]
    bounds = [-1, *pipes, len(line)]
    spans = [(bounds[i] + 1, bounds[i + 1]) for i in range(len(bounds) - 1)]
    if pipes and not line[:pipes[0]].strip():
        spans = spans[1:]
    if pipes and not line[pipes[-1] + 1:].strip():
        spans = spans[:-1]
    return spans


def segments(source: str, is_article: Callable[[str], bool], where: str = "") -> list[Segment]:
    """The segments of one markdown cell, in reading order."""
    lines = source.split("\n")
    out: list[Segment] = []
    stack: list[str] = []
    column, row = -1, -1
    for tok in _MD.parse(source):
        if tok.nesting == 1:
            stack.append(tok.type)
        elif tok.nesting == -1:
            stack.pop()
        if tok.type == "tr_open":
            column, row = -1, tok.map[0] if tok.map else row
        elif tok.type in ("th_open", "td_open"):
            column += 1
        elif tok.type == "html_block":
            out += _summaries(tok.content, tok.map or (0, 0), lines, is_article, where)
        if tok.type != "inline":
            continue
        text = unwrap(tok.content)
        if not has_words(text):
            continue
        _check_soft_breaks(tok.content, where)
        verbatim = is_article(text)
        parent = stack[-1]
        if parent in ("th_open", "td_open"):
            kind = "table header" if parent == "th_open" else "table cell"
            out.append(Segment(kind, text, row, verbatim, row + 1, column=column))
            continue
        start, end = tok.map or (0, 0)
        kind = "heading" if parent == "heading_open" else (
            "list item" if "list_item_open" in stack else
            "blockquote" if "blockquote_open" in stack else "paragraph")
        if kind == "heading" and end - start > 1:  # setext: keep the underline
            end -= 1
        first = tok.content.split("\n")[0]
        at = lines[start].find(first)
        if at < 0 or not _PREFIX.fullmatch(lines[start][:at]):
            raise ValueError(f"{where}: cannot locate segment {first!r} on line {start + 1}")
        suffix = lines[start][at + len(first):] if kind == "heading" else ""
        out.append(Segment(kind, text, start, verbatim, end, lines[start][:at], suffix))
    return out


def _summaries(block: str, span: tuple[int, int], lines: list[str],
               is_article: Callable[[str], bool], where: str) -> list[Segment]:
    start, end = span
    raw = "\n".join(lines[start:end])
    found = []
    for m in _SUMMARY.finditer(raw):
        text = unwrap(m.group(1))
        if has_words(text):
            found.append(Segment("summary", text, start, is_article(text), end, span=m.span(1)))
    if has_words(re.sub(r"<[^>]*>", " ", _SUMMARY.sub(" ", block))):
        raise ValueError(f"{where}: prose inside an HTML block (line {start + 1}) is not "
                         f"extracted; leave a blank line after the tag so it is markdown")
    return found


Lookup = Callable[[Segment], "str | object | None"]


def render(source: str, segs: list[Segment], lookup: Lookup) -> str:
    """``source`` with each segment replaced by ``lookup(segment)``: a string, ``OMIT``, or
    ``None`` (no translation: the English, unwrapped)."""
    lines = source.split("\n")
    by_line: dict[int, list[Segment]] = {}
    for seg in segs:
        by_line.setdefault(seg.line, []).append(seg)
    for line in sorted(by_line, reverse=True):
        group = by_line[line]
        first = group[0]
        texts = [seg.text if seg.verbatim else lookup(seg) for seg in group]
        texts = [seg.text if t is None else t for seg, t in zip(group, texts)]
        if first.kind in ("table header", "table cell"):
            lines[line] = _render_row(lines[line], group, texts)  # type: ignore[arg-type]
        elif first.kind == "summary":
            raw = "\n".join(lines[first.line:first.end])
            for seg, text in sorted(zip(group, texts), key=lambda p: -p[0].span[0]):
                raw = raw[:seg.span[0]] + str(text) + raw[seg.span[1]:]
            lines[first.line:first.end] = raw.split("\n")
        elif texts[0] is OMIT:
            if not first.omittable:
                raise ValueError(f"only a top-level paragraph may be omitted, not the "
                                 f"{first.kind} {first.text[:60]!r}")
            start, stop = first.line, first.end
            if stop < len(lines) and not lines[stop]:
                stop += 1  # the blank line after it
            elif start and not lines[start - 1]:
                start -= 1  # the last block: the blank line before it
            del lines[start:stop]
        else:
            lines[first.line:first.end] = [first.prefix + str(texts[0]) + first.suffix]
    return "\n".join(lines)


def _render_row(line: str, cells: list[Segment], texts: list[object]) -> str:
    spans = _cells(line)
    for seg, text in sorted(zip(cells, texts), key=lambda p: -p[0].column):
        if text is OMIT or _PIPE.search(str(text)):
            raise ValueError(f"a table cell's translation may not be omitted or hold an "
                             f"unescaped '|': {text!r}")
        a, b = spans[seg.column]
        line = line[:a] + f" {text} " + line[b:]
    return line
