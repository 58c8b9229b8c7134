"""Plain-text tables whose columns line up in every edition of the course. A monospace font
draws a CJK character two columns wide, so ``str.ljust`` (which counts characters) misaligns
a translated row; these helpers count display columns instead."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospace font: 2 for wide and full-width characters."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_table(rows: Sequence[Sequence[str]], align: str, gap: int = 2) -> str:
    """``rows`` (the first may be a header) as lines, each column padded to its widest cell;
    ``align`` holds one ``<`` (left) or ``>`` (right) per column."""
    if not rows:
        raise ValueError("rows must hold at least one row")
    if any(a not in "<>" for a in align):
        raise ValueError(f"align must hold only '<' and '>', got {align!r}")
    if any(len(r) != len(align) for r in rows):
        raise ValueError(f"every row must have len(align) = {len(align)} cells, got lengths "
                         f"{sorted({len(r) for r in rows})}")
    if gap < 1:
        raise ValueError(f"gap must be >= 1, got {gap}")
    widths = [max(display_width(r[j]) for r in rows) for j in range(len(align))]
    lines = []
    for r in rows:
        cells = []
        for cell, w, a in zip(r, widths, align, strict=True):
            pad = " " * (w - display_width(cell))
            cells.append(pad + cell if a == ">" else cell + pad)
        lines.append((" " * gap).join(cells).rstrip())
    return "\n".join(lines)
