"""Each exercise's reference answer (worked by hand, below) passes its checker; a wrong one
gets a hint."""

from __future__ import annotations

from chunkprefill.course.exercises import prefix_caching as exercises


def test_09_hit():
    # 70 shared tokens hold 4 whole blocks of 16 (64 tokens); the 5th is only partly shared.
    assert exercises.check_hit(64).startswith("Right")
    assert exercises.check_hit(70).startswith("Not yet") and "whole" in \
        exercises.check_hit(70)


def test_09_full_prompt():
    # cap 63 tokens -> 3 whole blocks (48 tokens) -> 64 - 48 = 16 tokens computed.
    assert exercises.check_full_prompt(16).startswith("Right")
    assert exercises.check_full_prompt(1).startswith("Not yet")


def test_09_chunks():
    # on: 100 - 64 = 36 owed -> 16, 16, 4 = 3 chunks; off: 100 -> 7 chunks of at most 16.
    assert exercises.check_chunks((3, 7)).startswith("Right")
    assert exercises.check_chunks((7, 7)).startswith("Not yet")


def test_11_block_size():
    # 100 shared tokens: 6 whole blocks of 16 (96 tokens); 25 whole blocks of 4 (all 100).
    assert exercises.check_block_size((96, 100)).startswith("Right")
    assert exercises.check_block_size((100, 100)).startswith("Not yet")
