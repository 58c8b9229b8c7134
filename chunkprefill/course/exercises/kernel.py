"""Notebook 06's exercises (the attention kernel). Metadata answers come from the package's
``build_attention_metadata``; the timing exercise is checked for its structure, since a time
measured on the reader's machine has no single right value."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from chunkprefill.attention import build_attention_metadata
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.lab.stats import median_ci

# Exercise 06.1/06.2's step: three decodes and a 9-token prompt chunk, block_size 16.
QUERY_LENS = [1, 1, 1, 9]
NUM_COMPUTED = [4, 7, 15, 16]
BLOCK_TABLES = [[0], [1], [2, 3], [4, 5]]


def _meta():  # type: ignore[no-untyped-def]
    meta, _ = build_attention_metadata(QUERY_LENS, NUM_COMPUTED, BLOCK_TABLES, block_size=16)
    return meta


def check_query_start_loc(answer: list[int] | None) -> str:
    """Exercise 06.1: ``query_lens = [1, 1, 1, 9]``. What is ``query_start_loc``?"""
    return _verdict(None if answer is None else list(answer), _meta().query_start_loc.tolist(),
                    tr("B + 1 entries: 0, then the running sum of the query lengths"))


def check_seq_lens(answer: list[int] | None) -> str:
    """Exercise 06.2: the same step with ``num_computed_tokens = [4, 7, 15, 16]``. What is
    ``seq_lens``, the keys each sequence's attention reads?"""
    return _verdict(None if answer is None else list(answer), _meta().seq_lens.tolist(),
                    tr("the keys already in the cache plus this step's tokens"))


def check_timing(timings: Mapping[str, Sequence[float]] | None) -> str:
    """Exercise 06.3 (measure): time ``ref_paged_attention`` and ``paged_attention`` (torch
    backend) on the notebook's batch with ``timing.time_fn`` and pass
    ``{"reference": [...], "torch": [...]}`` (seconds, >= 5 repeats each). Checked for its
    structure; the verdict reports the measured ratio of medians with their intervals."""
    hint = tr('pass {"reference": time_fn(...), "torch": time_fn(...)} with iters >= 5: '
              "lists of positive seconds")
    if not isinstance(timings, Mapping) or set(timings) != {"reference", "torch"}:
        return tr("Not yet ({answer}). Hint: {hint}", answer=repr(timings), hint=hint)
    for name, xs in timings.items():
        if len(xs) < 5 or not all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in xs):
            return tr("Not yet ({answer}). Hint: {hint}", answer=f"{name}: {list(xs)!r}", hint=hint)
    ref, torch_ = median_ci(timings["reference"]), median_ci(timings["torch"])
    return tr("Right: measured here, reference {ref} vs torch backend {torch} (ratio of medians "
              "{ratio:.2f}).", ref=ref.fmt(), torch=torch_.fmt(), ratio=ref.median / torch_.median)


# Exercise 06.4's step: the notebook's D1, D2 (decodes) and P (a 17-token chunk at offset 17).
BREAK_NAMES = ("D1", "D2", "P")
BREAK_QUERY_LENS = [1, 1, 17]
BREAK_KV_LENS = [5, 17, 34]


def forget_the_context(query, k_cache, v_cache, query_lens, kv_lens, block_tables,  # type: ignore[no-untyped-def]
                       scale):
    """The reference with one bug: each sequence gets only ``query_len`` keys, as if nothing
    were cached before this step (``context_len = 0``), so query ``i`` sees keys ``0..i``:
    the causal mask aligned to the start of the KV instead of its end. ``kv_lens`` is
    ignored, which is the bug."""
    from chunkprefill.attention import ref_paged_attention

    return ref_paged_attention(query, k_cache, v_cache, list(query_lens), list(query_lens),
                               block_tables, scale)


def _changed_by_the_bug() -> set[str]:
    from chunkprefill.attention import ref_paged_attention
    from chunkprefill.course.probes import random_paged_batch

    b = random_paged_batch(BREAK_QUERY_LENS, BREAK_KV_LENS, 6, 2, 24, 16)
    args = (b["query"], b["k_cache"], b["v_cache"], BREAK_QUERY_LENS, BREAK_KV_LENS,
            b["block_tables"], b["scale"])
    right, wrong = ref_paged_attention(*args), forget_the_context(*args)
    starts = [0, *itertools.accumulate(BREAK_QUERY_LENS)]
    return {name for name, a, z in zip(BREAK_NAMES, starts, starts[1:], strict=False)
            if not right[a:z].allclose(wrong[a:z], atol=1e-4)}


def check_break(answer: set[str] | None) -> str:
    """Exercise 06.4 (break it): with ``forget_the_context`` in place of the reference, which
    of D1, D2 and P get a different output? Answer a set of names, e.g. ``{"P"}``."""
    return _verdict(None if answer is None else sorted(answer), sorted(_changed_by_the_bug()),
                    tr("a decode is a chunk of one query token: without its context, which keys "
                       "does it see?"))
