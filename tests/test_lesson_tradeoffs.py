"""The schedules notebook 07 (chunk-size trade-offs) teaches, checked on the real scheduler
(``run_trace``, no timing) against numbers derived by hand in the comments. The notebook
prints these schedules; the asserts that only re-check them live here."""

from __future__ import annotations

import dataclasses
import math

import pytest

from chunkprefill import CacheConfig, SchedulerConfig, run_trace
from chunkprefill.lab import TRADEOFF_BUDGETS, TRADEOFF_WORKLOAD, StallWorkload
from chunkprefill.trace import TraceRequest, prompt_chunks

WL = TRADEOFF_WORKLOAD


def _trace(workload, config):
    return run_trace(workload.trace_requests(), config, workload.cache_config())


def _decodes(step) -> int:
    return sum(rid.startswith("d") for rid in step.num_scheduled_tokens)


@pytest.mark.parametrize("budget", [*TRADEOFF_BUDGETS, 100])
def test_part1_the_prompt_is_cut_in_ceil_1024_over_b_minus_32_chunks(budget):
    # 32 decodes take one token each; the prompt gets the rest, b - 32 tokens a step, from the
    # step it arrives (12: every 16-token prompt is done by step 10 even at budget 64).
    steps = _trace(WL, SchedulerConfig.for_budget(budget, max_model_len=2048))
    chunks = prompt_chunks(steps, "long0")
    share = budget - 32
    assert chunks == [share] * (1024 // share) + ([1024 % share] if 1024 % share else [])
    assert len(chunks) == math.ceil(1024 / share)
    prefill = [s for s in steps if s.num_scheduled_tokens.get("long0", 0) > 1]
    assert prefill[0].step == 12 == WL.long_arrival_steps[0]
    assert all(_decodes(s) == 32 for s in prefill)
    assert _decodes(steps[prefill[-1].step + 1]) == 32  # 48 outputs: still decoding after it


def test_part1_budget_100_exercise_gives_68_then_4():
    steps = _trace(WL, SchedulerConfig.for_budget(100, max_model_len=2048))
    assert prompt_chunks(steps, "long0") == [68] * 15 + [4]  # 15 x 68 = 1020, then 4


def test_part3_threshold_puts_three_long_prompts_side_by_side():
    three = dataclasses.replace(WL, long_arrival_steps=(12, 12, 12))
    capped = _trace(three, SchedulerConfig.for_budget(1024, max_model_len=2048, threshold=128))
    free = _trace(three, SchedulerConfig.for_budget(1024, max_model_len=2048))

    def long_steps(steps):
        return [s for s in steps if any(rid.startswith("long") and n > 1
                                        for rid, n in s.num_scheduled_tokens.items())]

    # With the cap: 3 x 1024 tokens at 3 x 128 a step = 8 steps of 32 + 384 = 416 tokens.
    assert [sum(s.num_scheduled_tokens.values()) for s in long_steps(capped)] == [416] * 8
    assert all(n <= 128 for s in capped for rid, n in s.num_scheduled_tokens.items()
               if rid.startswith("long"))
    # Without: the first takes 1024 - 32 = 992, the rest goes to the next prompt, and so on.
    assert [s.num_scheduled_tokens.get("long0", 0) for s in long_steps(free)][:2] == [992, 32]
    assert max(sum(s.num_scheduled_tokens.values()) for s in long_steps(free)) == 1024


def test_part5_alone_the_prompt_has_nothing_to_protect():
    alone = StallWorkload(num_decodes=1, decode_prompt_len=16, decode_output_len=1,
                          long_prompt_len=1024, long_output_len=2, long_arrival_steps=(1,))
    whole = _trace(alone, SchedulerConfig.for_budget(None, max_model_len=2048, chunked=False))
    cut = _trace(alone, SchedulerConfig.for_budget(64, max_model_len=2048))
    assert prompt_chunks(whole, "long0") == [1024]
    assert prompt_chunks(cut, "long0") == [64] * 16
    for steps in (whole, cut):  # the other request is gone before the prompt arrives
        assert not any(s.num_scheduled_tokens.get("d0") for s in steps[1:])


def _two_long(chunked: bool, budget: int, threshold: int) -> tuple[int, int, int]:
    reqs = [TraceRequest(f"d{i}", 16, 24, 0) for i in range(8)] + \
        [TraceRequest(f"p{i}", 512, 2, 2) for i in range(2)]
    sc = SchedulerConfig(budget, 16, enable_chunked_prefill=chunked,
                         long_prefill_token_threshold=threshold, max_model_len=1024)
    steps = run_trace(reqs, sc, CacheConfig(block_size=16, num_blocks=128))
    chunks = [n for p in ("p0", "p1") for n in prompt_chunks(steps, p)]
    done = next(k for k, s in enumerate(steps)
                if k >= 2 and all(s.num_computed_tokens_after.get(p, 512) >= 512
                                  for p in ("p0", "p1"))) - 1
    return max(sum(s.num_scheduled_tokens.values()) for s in steps), max(chunks), done


def test_part6_the_three_settings_row_by_row():
    # Chunking off: one whole prompt a step, beside 8 decodes and the other's first decode.
    assert _two_long(False, 1024, 0)[:2] == (512 + 8 + 1, 512)
    # Budget 1,024: the second prompt fills the first one's step.
    assert _two_long(True, 1024, 0)[0] == 1024
    # Budget 256 bounds the step, with the threshold or without.
    assert all(_two_long(True, 256, t)[0] <= 256 for t in (0, 128))
    # Threshold 128 bounds each request: 8 decodes + 2 x 128 a step, 512 / 128 = 4 steps.
    assert _two_long(True, 1024, 128) == (8 + 2 * 128, 128, 4)
