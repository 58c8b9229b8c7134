"""The measured experiments on the tiny model: workloads are deterministic and valid, runs
account for every token, and the sweeps return one value per setting. Timing values are
machine-specific, so only their structure (and exact clock identities) is checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.lab.serving import BudgetPoint, MixedWorkload, run_mixed
from chunkprefill.lab.stall import (
    StallWorkload,
    compare_stall,
    run_stall,
    tradeoff_sweep,
)
from chunkprefill.lab.stats import Estimate
from chunkprefill.lab.step_cost import (
    chunking_overhead,
    fit_step_time,
    step_time_vs_tokens,
    time_prefill_step,
)
from chunkprefill.trace import prompt_chunks

SMALL = dict(num_decodes=4, decode_prompt_len=6, decode_output_len=5, num_long=2,
             long_prompt_len=40, vocab_size=512, rate=500.0)


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return ToyTransformer(ModelConfig.tiny(), seed=0)


# ----------------------------------------------------------------------------- workload


def test_mixed_workload_is_deterministic_and_mixed():
    wl = MixedWorkload(**SMALL)
    reqs = wl.requests()
    assert reqs == MixedWorkload(**SMALL).requests()
    assert [r[0] for r in reqs if r[0].startswith("L")] == ["L0", "L1"]
    assert sorted(r[0] for r in reqs if r[0].startswith("d")) == [f"d{i}" for i in range(4)]
    arrivals = [r[1] for r in reqs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    for rid, _, p, o in reqs:
        if rid.startswith("L"):
            assert (p, o) == (40, 4)
        else:
            assert 3 <= p <= 9 and 2 <= o <= 7  # uniform on [1/2, 3/2] x the mean
    assert reqs[0][0].startswith("d")  # decodes are streaming before a long prompt comes
    assert wl.max_seq_len == 44 >= max(p + o for _, _, p, o in reqs)  # 40 + 4
    prompts = wl.prompts()
    assert {len(v) for k, v in prompts.items() if k.startswith("L")} == {40}
    assert all(0 <= t < 512 for v in prompts.values() for t in v)


def test_rate_rescales_the_same_requests():
    slow, fast = MixedWorkload(**{**SMALL, "rate": 10.0}), MixedWorkload(**{**SMALL, "rate": 40.0})
    for a, b in zip(slow.requests(), fast.requests(), strict=True):
        assert (a[0], a[2], a[3]) == (b[0], b[2], b[3])
        assert a[1] == pytest.approx(4 * b[1])


def test_long_burst_puts_long_prompts_back_to_back():
    wl = MixedWorkload(num_decodes=12, num_long=3, long_burst=True, seed=3)
    ids = [r[0] for r in wl.requests()]
    at = [i for i, r in enumerate(ids) if r.startswith("L")]
    assert at == list(range(at[0], at[0] + 3)) and at[0] >= len(ids) // 4


@pytest.mark.parametrize("bad", [
    {"num_decodes": -1}, {"num_long": 1.5}, {"long_prompt_len": 0}, {"rate": 0},
    {"rate": float("inf")}, {"num_decodes": 0, "num_long": 0}, {"decode_output_len": True},
])
def test_mixed_workload_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        MixedWorkload(**{**SMALL, **bad})


def test_mixed_scheduler_config():
    wl = MixedWorkload(**SMALL)
    on = wl.scheduler_config(32, threshold=8)
    assert (on.max_num_batched_tokens, on.max_num_seqs, on.max_model_len) == (32, 32, 2048)
    assert on.long_prefill_token_threshold == 8 and on.enable_chunked_prefill
    off = wl.scheduler_config(64, chunked=False)
    assert off.max_model_len == wl.max_seq_len and not off.enable_chunked_prefill
    with pytest.raises(ValueError, match="enable_chunked_prefill"):
        wl.scheduler_config(16, chunked=False)  # a 40-token prompt cannot fit


# ----------------------------------------------------------------------------- runs


def test_run_mixed_accounts_for_every_token(tiny):
    wl = MixedWorkload(**SMALL)
    r = run_mixed(tiny, wl, wl.scheduler_config(16))
    reqs = {rid: (t, p, o) for rid, t, p, o in wl.requests()}
    assert [o.request_id for o in r.outputs] == list(reqs)
    starts = {s.start_s for s in r.step_log}
    for o in r.outputs:
        t, p, n = reqs[o.request_id]
        # admitted right before a step: its TTFT counts from that step's start
        assert len(o.output_token_ids) == n and o.metrics.arrival_time in starts
        assert len(o.metrics.token_times) == n and o.metrics.ttft > 0
    assert sum(s.num_tokens for s in r.step_log) == sum(p + o - 1 for _, p, o in reqs.values())
    assert max(s.num_tokens for s in r.step_log) <= 16
    assert r.itl.size == sum(o - 1 for _, _, o in reqs.values())
    assert r.long_ids == ["L0", "L1"] and r.long_ttft.size == 2
    p = r.point()
    assert isinstance(p, BudgetPoint) and p.budget == 16
    assert p.p50_itl <= p.p99_itl and p.ttft_p50 <= p.ttft_p99
    assert r.device == "cpu" and r.backend == "torch" and "budget 16" in r.label


def _nominal_admissions(wl, step_log):
    """The docstring's rule, by hand: the nominal clock starts at 0, jumps to the next
    arrival when nothing runs, and advances by ``nominal_step_time(tokens)`` after each
    step; a request is admitted right before the first step that starts at or after its
    arrival. Returns ``{request_id: index of that step}``."""
    pending, clock, at, live = list(wl.requests()), 0.0, {}, set()
    for k, s in enumerate(step_log):
        if not live and pending and pending[0][1] > clock:
            clock = pending[0][1]
        while pending and pending[0][1] <= clock:
            rid = pending.pop(0)[0]
            at[rid], live = k, live | {rid}
        clock += wl.nominal_step_time(s.num_tokens)
        live -= set(s.finished)
    return at


def test_run_mixed_admits_by_the_nominal_clock(tiny):
    wl = MixedWorkload(**{**SMALL, "rate": 200.0})
    r = run_mixed(tiny, wl, wl.scheduler_config(16))
    at = _nominal_admissions(wl, r.step_log)
    assert len(at) == len(r.outputs)
    assert {o.request_id: o.metrics.arrival_time for o in r.outputs} == \
        {rid: r.step_log[k].start_s for rid, k in at.items()}
    assert len(set(at.values())) > 3  # the arrivals really are spread over the run


class SlowExecutor:
    """A model executor that burns ``burn_s`` of CPU time before every step: this machine
    made slower, on the clock the engine measures (a thread's CPU time)."""

    def __init__(self, model, cache_config, burn_s):
        from chunkprefill.executor import ModelExecutor

        self.inner = ModelExecutor(model, cache_config, "torch", "cpu")
        self.burn_s = burn_s

    def execute(self, out, requests):
        import time

        end = time.thread_time() + self.burn_s
        while time.thread_time() < end:
            pass
        return self.inner.execute(out, requests)

    def check_prompt(self, token_ids):
        return self.inner.check_prompt(token_ids)


@pytest.mark.parametrize("kind", ["mixed", "stall"])
def test_a_slower_machine_gets_the_identical_schedule(tiny, kind):
    """Issue 18, "true on every machine": arrivals are placed by step (StallWorkload) or by
    a nominal clock (MixedWorkload), so a machine several times slower measures longer
    steps but schedules exactly the same tokens in every step."""
    from chunkprefill import CacheConfig

    cache = CacheConfig(block_size=16, num_blocks=64)
    if kind == "mixed":
        wl = MixedWorkload(**{**SMALL, "rate": 300.0, "long_burst": True})
        sc = wl.scheduler_config(24, threshold=8)

        def run(m):
            return run_mixed(m, wl, sc, cache)
    else:
        wl = TRADE

        def run(m):
            return run_stall(m, wl, SchedulerConfig.for_budget(12, max_model_len=64), cache)
    fast = run(tiny)
    slow = run(SlowExecutor(tiny, cache, burn_s=0.004))
    assert [s.num_scheduled_tokens for s in slow.step_log] == \
        [s.num_scheduled_tokens for s in fast.step_log]
    # ... while the durations really differ: each slow step took at least the burn
    assert min(s.duration_s for s in slow.step_log) >= 0.004
    assert sum(s.duration_s for s in slow.step_log) > 2 * sum(s.duration_s
                                                                for s in fast.step_log)


def test_run_mixed_without_chunking_runs_each_long_prompt_in_one_step(tiny):
    wl = MixedWorkload(**SMALL)
    r = run_mixed(tiny, wl, wl.scheduler_config(64, chunked=False))
    assert r.point().budget is None and r.label.startswith("no chunking")
    for rid in r.long_ids:
        chunks = [s.num_scheduled_tokens[rid] for s in r.step_log
                  if s.num_scheduled_tokens.get(rid, 0) > 1]
        assert chunks == [40]


def test_run_mixed_threshold_caps_each_long_prompt(tiny):
    wl = MixedWorkload(**{**SMALL, "long_burst": True, "rate": 1e4})
    r = run_mixed(tiny, wl, wl.scheduler_config(64, threshold=8))
    for s in r.step_log:
        if len(s.num_scheduled_tokens) > 1:
            assert max(s.num_scheduled_tokens.values()) <= 8


def test_run_stall_itl_of_each_decode_is_the_step_time(tiny):
    wl = StallWorkload(num_decodes=4, decode_prompt_len=4, decode_output_len=10,
                       long_prompt_len=48, long_arrival_steps=(3,), vocab_size=512)
    r = run_stall(tiny, wl, SchedulerConfig(64, 16, enable_chunked_prefill=False,
                                            max_model_len=64))
    long_step = next(s for s in r.step_log if s.num_prefill_tokens == 48)
    assert set(long_step.num_scheduled_tokens) == {"long0", "d0", "d1", "d2", "d3"}
    for o in r.decode_outputs:  # every decode's gap at that step is the step's duration
        t = o.metrics.token_times
        k = t.index(long_step.end_s)
        assert t[k] - t[k - 1] == pytest.approx(long_step.duration_s)
    assert r.max_itl >= long_step.duration_s - 1e-12


# ----------------------------------------------------------------------------- sweeps


def test_sweeps_return_one_estimate_per_setting(tiny):
    times = step_time_vs_tokens(tiny, [1, 8, 32], repeats=2, warmup=0)
    assert len(times) == 3 and all(isinstance(t, Estimate) and t.n == 2 for t in times)
    assert all(0 < t.low <= t.median <= t.high for t in times)
    assert time_prefill_step(tiny, 16, kv_len=16, num_decodes=2, decode_kv_len=8,
                             iters=1, warmup=0) > 0
    oh = chunking_overhead(tiny, 48, [16, 48], repeats=2, warmup=0)
    assert set(oh) == {16, 48} and all(v.median > 0 and v.n == 2 for v in oh.values())
    with pytest.raises(ValueError, match="chunk size"):
        chunking_overhead(tiny, 48, [0])


TRADE = StallWorkload(num_decodes=2, decode_prompt_len=4, decode_output_len=24,
                      long_prompt_len=36, long_output_len=2, long_arrival_steps=(2,),
                      vocab_size=512)


def test_tradeoff_sweep_changes_only_the_budget(tiny):
    pts = tradeoff_sweep(tiny, TRADE, [8, 14], repeats=2, max_model_len=64)
    assert [p.budget for p in pts] == [8, 14]
    # Hand-derived: 2 decodes leave budget - 2 tokens per step for the 36-token prompt.
    assert [p.num_chunks for p in pts] == [6, 3]
    for p in pts:
        assert len(p.runs) == 2 and p.long_ttft_ci.n == p.p99_itl_ci.n == 2
        assert p.long_ttft_ci.median == pytest.approx(np.median([r.long_ttft_median
                                                              for r in p.runs]))
        chunks = prompt_chunks(p.runs[0].step_log, "long0")
        assert sum(chunks) == 36 and max(chunks) == p.budget - 2
    for bad in (2, 38, 0):  # no room beside the decodes / not chunked / not a budget
        with pytest.raises(ValueError, match="budget"):
            tradeoff_sweep(tiny, TRADE, [bad], repeats=1, max_model_len=64)


def test_compare_stall_pairs_ratios_by_repeat(tiny):
    configs = {"off": SchedulerConfig.for_budget(None, max_model_len=64, chunked=False),
               "on": SchedulerConfig.for_budget(8, max_model_len=64)}
    cmp = compare_stall(tiny, TRADE, configs, repeats=3)
    assert {k: len(v) for k, v in cmp.runs.items()} == {"off": 3, "on": 3}
    ratios = [a.p99_itl / b.p99_itl for a, b in zip(cmp.runs["off"], cmp.runs["on"])]
    assert cmp.ratio("p99_itl", "off", "on").median == pytest.approx(np.median(ratios))
    assert cmp.step_clock == "thread"  # one torch thread: the stepping thread's CPU time
    with pytest.raises(ValueError, match="metric"):
        cmp.ratio("ttft", "off", "on")


def test_fit_step_time_recovers_a_line_over_the_whole_range():
    n = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    t = 0.010 + 0.0002 * n  # 10 ms fixed, 0.2 ms/token: the parts are equal at 50 tokens
    fixed, per_token = fit_step_time(n, t)
    assert fixed == pytest.approx(0.010) and per_token == pytest.approx(0.0002)
    assert fixed / per_token == pytest.approx(50)
    # Relative errors: a 10% error on the smallest step weighs like 10% on the largest.
    t_noisy = t * np.where(n == 1, 1.1, 1.0)
    f2, _ = fit_step_time(n, t_noisy)
    assert 0.010 < f2 < 0.0105
    with pytest.raises(ValueError):
        fit_step_time([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="> 0"):
        fit_step_time([1, 2, 3], [0.1, 0.0, 0.2])


def test_stall_workload_as_a_trace_schedules_like_the_engine(tiny):
    from chunkprefill import run_trace

    sc = SchedulerConfig.for_budget(12, max_model_len=64)
    r = run_stall(tiny, TRADE, sc)
    steps = run_trace(TRADE.trace_requests(), sc, TRADE.cache_config())
    assert [s.num_scheduled_tokens for s in steps] == [s.num_scheduled_tokens
                                                       for s in r.step_log]
