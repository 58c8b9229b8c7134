"""Fast-forward (``chunkprefill.fast_forward`` / ``LLMEngine.step_fast_forward``)
must be invisible: every workload run with it and without it (one ``schedule()`` +
``update_from_output()`` per step) gives the same step log, bit for bit, the same token
times, outputs and final KV state."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from chunkprefill import CacheConfig, Request, Scheduler, SchedulerConfig, fast_forward
from chunkprefill.checks import cdiv
from chunkprefill.engine import LLMEngine
from chunkprefill.request import SamplingParams
from chunkprefill.sim import (
    CostModel,
    CostModelExecutor,
    HardwareSpec,
    ModelSpec,
    simulate,
)
from chunkprefill.trace import FAKE_TOKEN_ID
from chunkprefill.workload import WorkloadRequest, sharegpt_like


def ff_steps(sched, max_steps, token_id):
    """How many steps ``fast_forward.plan`` certifies as plain decode steps (0: none)."""
    p = fast_forward.plan(sched, max_steps, token_id)
    return 0 if p is None else p.num_steps


MAX_EXAMPLES = int(os.environ.get("CHUNKPREFILL_HYPOTHESIS_EXAMPLES", "2000")) // 4
LLAMA3, H100 = ModelSpec.llama3_8b(), HardwareSpec.h100_sxm()


def _engine_state(engine: LLMEngine) -> tuple:
    kv = engine.scheduler.kv_cache_manager
    return (list(kv.block_pool._free), {k: list(v) for k, v in kv.block_tables.items()},
            engine.clock, engine.executor.num_steps)


def _run(requests, sc, cc, fast_forward, noise_sigma=0.0, decode_attention="ragged"):
    cm = CostModel(LLAMA3, H100, decode_attention=decode_attention)
    engine = LLMEngine(CostModelExecutor(cm, noise_sigma, seed=7), sc, cc,
                       fast_forward=fast_forward)
    for rid, prompt, max_tokens, eos, arrival in requests:
        engine.add_request([0] * prompt, SamplingParams(max_tokens, eos_token_id=eos), rid,
                           arrival_time=arrival)
    outputs = engine.run()
    return engine, outputs


def _assert_same(a: tuple, b: tuple) -> None:
    (ea, oa), (eb, ob) = a, b
    assert ea.step_log == eb.step_log  # every field of every step, floats exactly
    assert [(o.request_id, o.output_token_ids, o.finished, o.metrics.token_times)
            for o in oa] == [(o.request_id, o.output_token_ids, o.finished,
                              o.metrics.token_times) for o in ob]
    assert _engine_state(ea) == _engine_state(eb)


@st.composite
def workloads(draw):
    batching = draw(st.sampled_from(["mixed", "mixed", "prefill_first", "prefill_or_decode"]))
    chunked = draw(st.booleans())
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    max_model_len = draw(st.integers(8, 96))
    whole = not chunked or batching == "prefill_first"
    budget = draw(st.integers(max_model_len if whole else 1, 100))
    max_num_seqs = draw(st.integers(1, min(budget, 8)))
    threshold = 0 if batching == "prefill_first" else draw(st.integers(0, max_model_len))
    reqs = draw(st.lists(st.tuples(st.integers(1, max_model_len - 1),  # prompt
                                   st.integers(1, 40),                   # max_tokens
                                   st.booleans(),                        # eos on token 1
                                   st.floats(0.0, 0.2)),                 # arrival, s
                         min_size=1, max_size=8))
    largest = max(min(p + o - 1, max_model_len - 1) for p, o, _, _ in reqs)
    num_blocks = draw(st.integers(cdiv(largest, block_size), cdiv(largest, block_size) * 4))
    requests = [(f"r{i}", p, o, FAKE_TOKEN_ID if eos and i % 3 == 0 else None, t)
                for i, (p, o, eos, t) in enumerate(reqs)]
    knobs = {"batching": batching,
             "long_prefill_token_threshold_adaptive": draw(st.booleans()),
             "prefill_schedule_interval": 1 if batching != "mixed" else draw(st.integers(1, 3)),
             "max_num_active_seqs": draw(st.integers(1, max_num_seqs)),
             "watermark": draw(st.sampled_from([0.0, 0.1])),
             "scheduler_reserve_full_isl": draw(st.booleans())}
    return (SchedulerConfig(budget, max_num_seqs, chunked, threshold, max_model_len, **knobs),
            CacheConfig(block_size, num_blocks), requests,
            draw(st.sampled_from([0.0, 0.3])), draw(st.sampled_from(["ragged", "padded"])))


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(workloads())
def test_fast_forward_changes_nothing(w):
    """Tight caches (preemptions), max_model_len caps, eos on the first token, arrivals in
    the middle of decode stretches, both policies, step-time noise, padded attention."""
    sc, cc, requests, noise, attention = w
    fast = _run(requests, sc, cc, True, noise, attention)
    _assert_same(fast, _run(requests, sc, cc, False, noise, attention))
    event(f"fast path took {'some' if fast[0].num_fast_forward_steps else 'no'} steps")


def test_fast_forward_on_a_served_workload_is_exact_and_does_the_work():
    """A ShareGPT-like run at 2 QPS with a KV cache small enough to preempt: identical
    results, and most steps went through the fast path (it is not a no-op)."""
    cm = CostModel(LLAMA3, H100)
    wl = sharegpt_like(150, 2.0, seed=3, max_model_len=4096)
    sc = SchedulerConfig.for_budget(512, max_model_len=4096, max_num_seqs=32)
    cc = CacheConfig(block_size=16, num_blocks=2000)
    fast, slow = (simulate(wl, cm, sc, cc, fast_forward=ff) for ff in (True, False))
    assert fast.step_log == slow.step_log
    assert [o.metrics.token_times for o in fast.outputs] == [
        o.metrics.token_times for o in slow.outputs]
    assert list(fast.scheduling_delays) == list(slow.scheduling_delays)
    assert fast.summary == slow.summary
    assert any(s.preempted for s in fast.step_log)
    assert fast.engine.num_fast_forward_steps > 0.5 * len(fast.step_log)
    assert slow.engine.num_fast_forward_steps == 0


# ----------------------------------------------------------------------------- scheduler level


def _decoding_scheduler(num_blocks: int = 64, block_size: int = 4,
                        max_tokens: tuple[int, ...] = (9, 30, 4)) -> Scheduler:
    sched = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64),
                      CacheConfig(block_size=block_size, num_blocks=num_blocks))
    for i, m in enumerate(max_tokens):
        sched.add_request(Request(f"r{i}", [0] * (5 + 3 * i), max_tokens=m))
    while any(r.num_owed_tokens != 1 for r in sched.requests.values()) or sched.waiting:
        out = sched.schedule()
        sched.update_from_output(out, {rid: FAKE_TOKEN_ID for rid in out.num_scheduled_tokens
                                       if sched.requests[rid].num_owed_tokens == 0})
    return sched


def _step(sched: Scheduler, n: int) -> list[list[str]]:
    finished = []
    for _ in range(n):
        out = sched.schedule()
        sampled = {rid: FAKE_TOKEN_ID for rid in out.num_scheduled_tokens
                   if sched.requests[rid].num_owed_tokens == 0}
        assert out.num_scheduled_tokens == dict.fromkeys(sampled, 1)  # plain decode
        finished.append(sched.update_from_output(out, sampled))
    return finished


def _state(sched: Scheduler) -> tuple:
    kv = sched.kv_cache_manager
    return (list(kv.block_pool._free), {k: list(v) for k, v in kv.block_tables.items()},
            [(r.request_id, r.num_computed_tokens, r.num_tokens, r.status)
             for r in sched.running])


@pytest.mark.parametrize("num_steps", [1, 3, 4, 5, 16, 29])
def test_apply_equals_stepping(num_steps):
    """Requests stop inside the run (max_tokens 9, 30, 4 after one sampled token each):
    same tokens, block tables block for block, free-list order and finished steps."""
    a, b = _decoding_scheduler(), _decoding_scheduler()
    assert ff_steps(a, 1000, FAKE_TOKEN_ID) == 29  # until the last one stops
    run = fast_forward.apply(a, fast_forward.plan(a, 1000, FAKE_TOKEN_ID), num_steps,
                             FAKE_TOKEN_ID)
    assert run.finished == _step(b, num_steps)
    assert _state(a) == _state(b)
    assert run.num_free_blocks[-1] == b.kv_cache_manager.num_free_blocks


def test_the_plan_stops_before_the_kv_cache_runs_out():
    """9 free blocks of 4 slots: the run ends before the step whose allocation would fail
    (that step preempts; the normal path must handle it)."""
    a = _decoding_scheduler(num_blocks=16, max_tokens=(40, 40, 40))
    b = _decoding_scheduler(num_blocks=16, max_tokens=(40, 40, 40))
    k = ff_steps(a, 1000, FAKE_TOKEN_ID)
    assert 1 <= k < 40
    fast_forward.apply(a, fast_forward.plan(a, k, FAKE_TOKEN_ID), k, FAKE_TOKEN_ID)
    _step(b, k)
    assert _state(a) == _state(b)
    assert ff_steps(a, 1000, FAKE_TOKEN_ID) == 0
    assert b.schedule().preempted_req_ids  # the next step does preempt


def test_no_fast_forward_while_anything_waits_or_prefills():
    sched = _decoding_scheduler()
    sched.add_request(Request("late", [0] * 10, max_tokens=3))
    assert fast_forward.plan(sched, 100, FAKE_TOKEN_ID) is None
    fresh = Scheduler(SchedulerConfig(max_num_batched_tokens=4, max_num_seqs=4), CacheConfig())
    fresh.add_request(Request("a", [0] * 10, max_tokens=3))
    fresh.update_from_output(fresh.schedule(), {})  # 4 of 10 prompt tokens done
    assert ff_steps(fresh, 100, FAKE_TOKEN_ID) == 0


def test_eos_on_the_next_token_ends_the_run_after_one_step():
    sched = Scheduler(SchedulerConfig(), CacheConfig())
    sched.add_request(Request("a", [0] * 5, max_tokens=50))
    sched.add_request(Request("b", [0] * 5, max_tokens=50, eos_token_id=FAKE_TOKEN_ID))
    out = sched.schedule()
    sched.update_from_output(out, {"a": 2, "b": 2})  # first tokens, not eos
    p = fast_forward.plan(sched, 100, FAKE_TOKEN_ID)
    run = fast_forward.apply(sched, p, p.num_steps, FAKE_TOKEN_ID)
    assert run.num_steps == 49 and run.finished[0] == ["b"] and run.finished[-1] == ["a"]
    assert run.num_steps_each == [49, 1]


@pytest.mark.parametrize("bad", [0, 4, -1, 2.0, None])
def test_apply_takes_only_steps_the_plan_certified(bad):
    sched = _decoding_scheduler(max_tokens=(4, 4, 4))
    p = fast_forward.plan(sched, 100, FAKE_TOKEN_ID)
    with pytest.raises(ValueError, match=r"num_steps must be an integer in \[1, 3\]"):
        fast_forward.apply(sched, p, bad, FAKE_TOKEN_ID)


def test_max_steps_must_be_positive():
    with pytest.raises(ValueError, match="max_steps"):
        fast_forward.plan(_decoding_scheduler(), 0, FAKE_TOKEN_ID)


# ----------------------------------------------------------------------------- edges a review found


@pytest.mark.parametrize("cm", [CostModel.preset("Llama-3-8B", "H100-SXM", 2),
                                CostModel.preset("Llama-2-70B", "A100-80GB", 8,
                                                 decode_attention="padded")])
def test_decode_step_times_are_step_time_bit_for_bit_under_tensor_parallelism(cm):
    """With TP > 1 the all-reduce term is non-zero: the sum must be associated exactly as
    step_time's, or the clocks drift apart in the last bits."""
    rng = random.Random(0)
    for _ in range(50):
        n = rng.randint(1, 20)
        ctx = [rng.randint(1, 4000) for _ in range(n)]
        left = [rng.randint(1, 60) for _ in range(n)]
        assert list(cm.decode_step_times(ctx, left)) == [
            cm.step_time([(1, c + k - 1) for c, s in zip(ctx, left, strict=True) if k <= s])
            for k in range(1, max(left) + 1)]


def test_an_arrival_exactly_at_a_step_end_is_admitted_by_the_next_step():
    cm = CostModel(LLAMA3, H100)
    sc, cc = SchedulerConfig(256, 8, max_model_len=1024), CacheConfig(16, 400)
    base = [WorkloadRequest("a", 0.0, 100, 300), WorkloadRequest("b", 0.0, 50, 200)]
    ends = [s.end_s for s in simulate(base, cm, sc, cc, fast_forward=False).step_log]
    for k in (3, 120, 250):
        wl = base + [WorkloadRequest("c", ends[k], 30, 20)]
        fast, slow = (simulate(wl, cm, sc, cc, fast_forward=ff) for ff in (True, False))
        assert fast.step_log == slow.step_log
        assert fast.engine.num_fast_forward_steps > 0


@pytest.mark.parametrize("max_steps", [1, 5, 37, 100, 101, 1000])
def test_run_max_steps_counts_every_fast_forwarded_step(max_steps):
    def run(fast_forward: bool) -> tuple:
        engine = LLMEngine(CostModelExecutor(CostModel(LLAMA3, H100)),
                           SchedulerConfig(64, 4, max_model_len=512), CacheConfig(16, 64),
                           fast_forward=fast_forward)
        for i in range(4):
            engine.add_request([0] * 20, SamplingParams(100), f"r{i}", arrival_time=0.001 * i)
        try:
            engine.run(max_steps=max_steps)
        except RuntimeError:
            return True, engine.step_log, engine.clock
        return False, engine.step_log, engine.clock

    fast = run(True)
    assert fast == run(False)
    # r0 prefills in step 1, the others (arriving meanwhile) in step 2, then 99 decode steps
    assert fast[0] == (max_steps < 101)


@settings(max_examples=MAX_EXAMPLES // 5, deadline=None)
@given(n=st.integers(1, 30), qps=st.floats(0.5, 20.0), seed=st.integers(0, 10_000),
       budget=st.sampled_from([64, 256, 2048]), blocks=st.integers(260, 2000))
def test_simulate_is_the_same_with_and_without_the_fast_path(n, qps, seed, budget, blocks):
    """``simulate`` (``run_workload`` adding requests just in time) on ShareGPT-like
    requests, caches from barely one request to roomy."""
    wl = sharegpt_like(n, qps, seed=seed, max_model_len=4096)
    sc = SchedulerConfig.for_budget(budget, max_model_len=4096, max_num_seqs=16)
    cc = CacheConfig(block_size=16, num_blocks=blocks)
    cm = CostModel(LLAMA3, H100)
    fast, slow = (simulate(wl, cm, sc, cc, fast_forward=ff) for ff in (True, False))
    assert fast.step_log == slow.step_log
    assert list(fast.scheduling_delays) == list(slow.scheduling_delays)


def _finish_a_then_decode() -> Scheduler:
    """A (max_tokens 2) finishes in the second update_from_output; B (max_tokens 5)
    and C (max_tokens 40) keep decoding."""
    sched = Scheduler(SchedulerConfig(), CacheConfig())
    for rid, m in (("A", 2), ("B", 5), ("C", 40)):
        sched.add_request(Request(rid, [0] * 5, max_tokens=m))
    for _ in range(2):
        out = sched.schedule()
        finished = sched.update_from_output(out, dict.fromkeys(out.num_scheduled_tokens, 2))
    assert finished == ["A"]
    return sched


@pytest.mark.parametrize("num_steps", [1, 3, 6])
def test_a_fast_forward_reports_every_finished_request_exactly_once(num_steps):
    """The executor must hear of every finished request once, in some SchedulerOutput's
    ``finished_req_ids`` (an executor with per-request state frees it then): stepping
    reports A in the run's first step and B in the step after B stops; a run makes no
    SchedulerOutput of its own, so the next one must report both."""
    a, b = _finish_a_then_decode(), _finish_a_then_decode()
    run = fast_forward.apply(a, fast_forward.plan(a, num_steps, FAKE_TOKEN_ID), num_steps,
                             FAKE_TOKEN_ID)
    assert run.num_steps == num_steps
    reported_fast = a.schedule().finished_req_ids
    reported_step = []
    for _ in range(num_steps):
        out = b.schedule()
        reported_step += out.finished_req_ids
        b.update_from_output(out, dict.fromkeys(out.num_scheduled_tokens, FAKE_TOKEN_ID))
    reported_step += b.schedule().finished_req_ids
    assert sorted(reported_fast) == sorted(reported_step) == (
        ["A", "B"] if num_steps >= 3 else ["A"])


def test_stop_requests_refuses_a_request_that_is_not_done():
    sched = _finish_a_then_decode()  # B has 2 of its 5 tokens
    (b,) = [r for r in sched.running if r.request_id == "B"]
    with pytest.raises(ValueError, match="'B' is not done: it has 2 of 5 tokens"):
        sched.stop_requests([b])
