"""format_table lines columns up by display width, so a zh-TW table reads like the English."""

import pytest

from chunkprefill.course.text_table import display_width, format_table


def test_display_width_counts_cjk_twice():
    assert display_width("peak") == 4
    assert display_width("峰值") == 4
    assert display_width("記憶體頻寬（實測）") == 18  # full-width parentheses are wide too
    assert display_width("GB/s 複製") == 9


def test_columns_start_at_the_same_display_column():
    rows = [("", "CPU（本機）", "A100"), ("峰值 FLOP/s", "97 G（矩陣乘法，實測）", "312 T"),
            ("ridge point", "2.7 FLOP/byte", "161 FLOP/byte")]
    lines = format_table(rows, "><<").splitlines()
    # the third column starts where the widest second cell ends plus the gap, on every line
    starts = [display_width(line[: line.index(third)]) for line, third in
              zip(lines, ("A100", "312 T", "161 FLOP/byte"), strict=True)]
    assert len(set(starts)) == 1
    # right-aligned first column: every first cell ends at the same display column
    ends = [display_width(line[: line.index(first) + len(first)]) for line, first in
            zip(lines[1:], ("峰值 FLOP/s", "ridge point"), strict=True)]
    assert len(set(ends)) == 1


@pytest.mark.parametrize(("rows", "align", "word"), [
    ([], "<", "rows"), ([("a", "b")], "<", "row"), ([("a",)], "^", "align")])
def test_bad_input_names_the_parameter(rows, align, word):
    with pytest.raises(ValueError, match=word):
        format_table(rows, align)
