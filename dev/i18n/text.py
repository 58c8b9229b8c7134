"""Character classes and small text rules shared by the extractor, the renderer and the checks.

"Wide" characters are those a CJK line break may sit between without a space: ideographs,
CJK punctuation (。「」、) and full-width forms (，：（）). Ideographs alone decide spacing:
the article writes a space between an ideograph and Latin letters or digits ("token budget 是 16")
but none beside full-width punctuation ("Prefill：", "（OSDI 2024）")."""

from __future__ import annotations

import re
from collections import Counter

IDEOGRAPH = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
WIDE = IDEOGRAPH + "\u3000-\u303f\uff00-\uffef"
IDEO_RE = re.compile(f"[{IDEOGRAPH}]")
_BREAK = re.compile(r"[ \t]*\n[ \t]*")
_SPACES = re.compile(r"\s+")
_WIDE_CHAR = re.compile(f"[{WIDE}]")


def has_cjk(text: str) -> bool:
    return IDEO_RE.search(text) is not None


def _join(text: str, pattern: re.Pattern[str]) -> str:
    """Join the pieces ``pattern`` splits on: nothing between two wide characters (a CJK soft
    break renders as a stray space otherwise), one space elsewhere."""
    def repl(m: re.Match[str]) -> str:
        before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 1]
        return "" if _WIDE_CHAR.match(before) and _WIDE_CHAR.match(after) else " "
    return pattern.sub(repl, text)


def unwrap(text: str) -> str:
    """A segment's lines as one line (its msgid): soft breaks joined as a renderer shows them."""
    return _join(text.strip(), _BREAK)


def squash(text: str) -> str:
    """Whitespace-insensitive form for comparing quotes with the article (which wraps nowhere)."""
    return _join(text.strip(), _SPACES)


def corner_quotes(text: str) -> list[str]:
    """The outermost 「…」 spans of ``text``, brackets included (the article nests 「」 too)."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "「":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "」" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans


def article_quotes(text: str) -> list[str]:
    """The quotes in an English segment that quote the article: 「…」 spans holding ideographs
    (「in corner brackets」 is English about quoting, not a quote)."""
    return [q for q in corner_quotes(text) if has_cjk(q)]


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers(text: str) -> Counter[str]:
    """The numbers in an output, as written (``42``, ``0.32``, ``1e-05``), counted: a
    translation may move a number within its sentence but must not drop or reformat it."""
    return Counter(_NUMBER.findall(text))


def digit_runs(text: str) -> Counter[str]:
    return Counter(re.findall(r"\d+", text))
