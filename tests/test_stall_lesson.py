"""Notebook 01's lesson (the stall), checked where a learner does not have to read it: its
workload's schedule (hand-derived), the identities the notebook states, the statistics it
prints, and the rule that makes it true on every machine: arrivals by step, so a slower
machine measures longer steps but runs the same schedule."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer, run_trace
from chunkprefill.lab.stall import StallWorkload, compare_stall, run_stall
from chunkprefill.lab.step_cost import time_prefill_step
from chunkprefill.trace import prompt_chunks

# Notebook 01's workload and its two configurations.
WORKLOAD = StallWorkload(num_decodes=32, decode_prompt_len=16, decode_output_len=40,
                         long_prompt_len=2048, long_output_len=4, long_arrival_steps=(8, 24))
ONE_STEP = SchedulerConfig.for_budget(4096, max_model_len=4096)
CHUNKED = SchedulerConfig.for_budget(288, max_model_len=4096)

# A small workload for the measured parts: 2 decodes, a 36-token prompt at step 2.
SMALL = StallWorkload(num_decodes=2, decode_prompt_len=4, decode_output_len=24,
                      long_prompt_len=36, long_output_len=2, long_arrival_steps=(2,),
                      vocab_size=512)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return ToyTransformer(ModelConfig.tiny(), seed=0)


def test_budget_4096_schedules_exactly_like_chunking_off():
    off = SchedulerConfig.for_budget(None, max_model_len=4096, chunked=False)
    whole, unchunked = (run_trace(WORKLOAD.trace_requests(), sc, WORKLOAD.cache_config())
                        for sc in (ONE_STEP, off))
    assert [s.num_scheduled_tokens for s in whole] == [s.num_scheduled_tokens for s in unchunked]
    # Hand-derived: each long prompt runs whole in the step it arrives, beside the 32 decodes.
    for rid, step in (("long0", 8), ("long1", 24)):
        assert whole[step].num_scheduled_tokens[rid] == 2048
        assert sum(1 for r in whole[step].num_scheduled_tokens if r.startswith("d")) == 32


def test_budget_288_cuts_each_prompt_into_eight_chunks_of_256():
    steps = run_trace(WORKLOAD.trace_requests(), CHUNKED, WORKLOAD.cache_config())
    for rid in ("long0", "long1"):  # 32 decodes leave 288 - 32 = 256; 2048 / 256 = 8
        assert prompt_chunks(steps, rid) == [256] * 8
    assert max(sum(s.num_scheduled_tokens.values()) for s in steps) <= 288
    # 16 chunk steps among the 39 gaps of each decode: the share 01 prints (41%).
    chunk_steps = [s for s in steps if any(s.token_splits[r].prefill for r in ("long0", "long1")
                                           if r in s.token_splits)]
    assert len(chunk_steps) == 16
    assert all(sum(1 for r in s.num_scheduled_tokens if r.startswith("d")) == 32
               for s in chunk_steps)


def test_a_decode_only_step_can_be_timed(tiny):
    assert time_prefill_step(tiny, 0, num_decodes=4, decode_kv_len=8, iters=1, warmup=0) > 0
    with pytest.raises(ValueError, match="num_tokens"):
        time_prefill_step(tiny, 0, num_decodes=0)
    with pytest.raises(ValueError, match="num_tokens"):
        time_prefill_step(tiny, -1, num_decodes=2)


def test_itl_split_matches_the_steps_that_carry_the_prompt(tiny):
    r = run_stall(tiny, SMALL, SchedulerConfig.for_budget(12, max_model_len=64))
    during, other = r.decode_itl_split()
    chunk_steps = [s for s in r.step_log if s.token_splits.get("long0") is not None
                   and s.token_splits["long0"].prefill]
    # Hand-derived: 2 decodes leave 10 tokens a step, so 36 = 10 + 10 + 10 + 6, four chunk
    # steps, both decodes in each: 8 gaps during the prefill, the other 2 x 23 - 8 outside.
    assert [s.token_splits["long0"].prefill for s in chunk_steps] == [10, 10, 10, 6]
    assert len(during) == 8 and len(other) == 2 * 23 - 8
    assert sorted(during) == pytest.approx(sorted([s.duration_s for s in chunk_steps] * 2))
    assert np.concatenate([during, other]).size == r.decode_itl.size
    assert r.itl_during_prefill == pytest.approx(np.median(during))
    assert r.mean_tpot == pytest.approx(np.mean([o.metrics.tpot for o in r.decode_outputs]))


def test_compare_stall_statistics_are_medians_of_runs_and_of_paired_ratios(tiny):
    configs = {"off": SchedulerConfig.for_budget(None, max_model_len=64, chunked=False),
               "on": SchedulerConfig.for_budget(8, max_model_len=64)}
    cmp = compare_stall(tiny, SMALL, configs, repeats=3)
    for metric, f in (("mean_tpot", lambda r: r.mean_tpot), ("p50_itl", lambda r: r.p50_itl)):
        assert cmp.ci(metric, "on").median == pytest.approx(np.median([f(r) for r in
                                                                       cmp.runs["on"]]))
        per_run = [f(a) / f(b) for a, b in zip(cmp.runs["on"], cmp.runs["off"], strict=True)]
        assert cmp.ratio(metric, "on", "off").median == pytest.approx(np.median(per_run))
    split = [r.itl_during_prefill / r.itl_outside_prefill for r in cmp.runs["on"]]
    assert cmp.split_ratio("on").median == pytest.approx(np.median(split))
    with pytest.raises(ValueError, match="metric"):
        cmp.ci("tpot", "on")


class SlowToy(ToyTransformer):
    """The toy model on a slower machine: every forward burns extra CPU time first."""

    def forward(self, *args, **kwargs):
        end = time.thread_time() + 0.004
        while time.thread_time() < end:
            pass
        return super().forward(*args, **kwargs)


def test_a_slower_machine_runs_the_same_schedule(tiny):
    """Issue 18, "true on every machine": arrivals are placed by step, so only durations
    change when every step is slower."""
    slow = SlowToy(ModelConfig.tiny(), seed=0)
    config = SchedulerConfig.for_budget(12, max_model_len=64)
    fast_run, slow_run = run_stall(tiny, SMALL, config), run_stall(slow, SMALL, config)
    assert ([s.num_scheduled_tokens for s in fast_run.step_log]
            == [s.num_scheduled_tokens for s in slow_run.step_log])
    assert ([s.token_splits for s in fast_run.step_log]
            == [s.token_splits for s in slow_run.step_log])
    # ... and the slower machine really was slower: every step took the extra 4 ms.
    assert min(s.duration_s for s in slow_run.step_log) >= 0.004
    assert (sum(s.duration_s for s in slow_run.step_log)
            > sum(s.duration_s for s in fast_run.step_log))
