"""Notebook 06's exercises (the attention kernel). Metadata answers come from the package's
``build_attention_metadata``; the timing exercise is checked for its structure, since a time
measured on the reader's machine has no single right value."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from chunkprefill.attention import build_attention_metadata
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.lab.stats import median_ci

# Exercise 06.1/05.2's step: three decodes and a 9-token prompt chunk, block_size 16.
QUERY_LENS = [1, 1, 1, 9]
NUM_COMPUTED = [4, 7, 15, 16]
BLOCK_TABLES = [[0], [1], [2, 3], [4, 5]]


def _meta():  # type: ignore[no-untyped-def]
    meta, _ = build_attention_metadata(QUERY_LENS, NUM_COMPUTED, BLOCK_TABLES, block_size=16)
    return meta


def check_query_start_loc(answer: list[int] | None) -> str:
    """Exercise 06.1: ``query_lens = [1, 1, 1, 9]``. What is ``query_start_loc``?"""
    return _verdict(None if answer is None else list(answer), _meta().query_start_loc.tolist(),
                    "B + 1 entries: 0, then the running sum of the query lengths")


def check_seq_lens(answer: list[int] | None) -> str:
    """Exercise 06.2: the same step with ``num_computed_tokens = [4, 7, 15, 16]``. What is
    ``seq_lens``, the keys each sequence's attention reads?"""
    return _verdict(None if answer is None else list(answer), _meta().seq_lens.tolist(),
                    "the keys already in the cache plus this step's tokens")


def check_timing(timings: Mapping[str, Sequence[float]] | None) -> str:
    """Exercise 06.3 (measure): time ``ref_paged_attention`` and ``paged_attention`` (torch
    backend) on the notebook's batch with ``timing.time_fn`` and pass
    ``{"reference": [...], "torch": [...]}`` (seconds, >= 5 repeats each). Checked for its
    structure; the verdict reports the measured ratio of medians with their intervals."""
    hint = ('pass {"reference": time_fn(...), "torch": time_fn(...)} with iters >= 5: '
            "lists of positive seconds")
    if not isinstance(timings, Mapping) or set(timings) != {"reference", "torch"}:
        return f"Not yet ({timings!r}). Hint: {hint}"
    for name, xs in timings.items():
        if len(xs) < 5 or not all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in xs):
            return f"Not yet ({name}: {list(xs)!r}). Hint: {hint}"
    ref, torch_ = median_ci(timings["reference"]), median_ci(timings["torch"])
    return (f"Right: measured here, reference {ref.fmt()} vs torch backend {torch_.fmt()} "
            f"(ratio of medians {ref.median / torch_.median:.2f}).")
