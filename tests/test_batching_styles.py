"""Each batching style's defining property, and the knobs' and ``policy``'s invariants, over
random workloads (hypothesis). What is checked is read off the schedules, not the code: a
request is *decoding* once it has sampled a token since it was last admitted; anything else
it is scheduled for is prefill (its prompt, or the recomputation of a preempted request)."""

from __future__ import annotations

import dataclasses
import os

from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler_properties import workloads as base_workloads

from chunkprefill import CacheConfig, Request, Scheduler, SchedulerConfig, fast_forward

MAX_EXAMPLES = int(os.environ.get("CHUNKPREFILL_HYPOTHESIS_EXAMPLES", "2000"))


@st.composite
def workloads(draw):
    """test_scheduler_properties' workloads, plus a style, vLLM's knobs and priorities."""
    sc, cc, reqs = draw(base_workloads())
    batching = (sc.batching if sc.batching == "prefill_first"
                else draw(st.sampled_from(["mixed", "prefill_or_decode"])))
    knobs = {
        "policy": draw(st.sampled_from(["fcfs", "priority"])),
        "batching": batching,
        "long_prefill_token_threshold_adaptive": draw(st.booleans()),
        "prefill_schedule_interval": 1 if batching != "mixed" else draw(st.sampled_from([1, 1,
                                                                                         2, 4])),
        "max_num_active_seqs": draw(st.none() | st.integers(1, sc.max_num_seqs)),
        "watermark": draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
        "scheduler_reserve_full_isl": draw(st.booleans()),
    }
    priorities = draw(st.lists(st.integers(-2, 2), min_size=len(reqs), max_size=len(reqs)))
    return (dataclasses.replace(sc, **knobs), cc,
            [(p, o, t, prio) for (p, o, t), prio in zip(reqs, priorities, strict=True)])


def _key(r: Request) -> tuple[int, float, str]:
    return r.priority, r.arrival_time, r.request_id


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(workloads())
def test_batching_styles_and_knobs(w):
    sc, cc, reqs = w
    sched = Scheduler(sc, cc)
    kv = sched.kv_cache_manager
    watermark_blocks = int(sc.watermark * (cc.num_blocks + 1))  # vLLM counts its null block
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    decoding: set[str] = set()
    max_steps = 200 * sum(p + o for p, o, _, _ in reqs)
    step = 0
    while pending or sched.has_unfinished_requests():
        assert step < max_steps, "livelock"
        while pending and pending[0][1][2] == step:
            i, (p, o, t, prio) = pending.pop(0)
            # Distinct arrival times: with equal (priority, arrival) vLLM preempts the first
            # of equals, the longest-running, and two such requests can evict each other
            # forever (vLLM 0.33.0 does too); distinct keys always let the best one finish.
            sched.add_request(Request(f"r{i}", [0] * p, max_tokens=o,
                                      arrival_time=t + i / 100, priority=prio))
        running_before = list(sched.running)
        waiting_before = list(sched.waiting)
        owed = {rid: r.num_owed_tokens for rid, r in sched.requests.items()}
        computed = {rid: r.num_computed_tokens for rid, r in sched.requests.items()}
        nreq = len(sched.requests)
        out = sched.schedule()
        n = out.num_scheduled_tokens
        admitted_ids = set(out.scheduled_new_req_ids) | set(out.scheduled_resumed_req_ids)
        admitted = [rid for rid in n if rid in admitted_ids]  # in admission order
        prefill = [rid for rid in n if rid not in decoding]
        decode = [rid for rid in n if rid in decoding]

        # -- the knobs ------------------------------------------------------------------
        assert len(sched.running) <= sc.max_num_active_reqs <= sc.max_num_seqs
        cap = sc.long_prefill_token_threshold if nreq > 1 else 0
        if cap and sc.long_prefill_token_threshold_adaptive:
            cap = max(cap, sc.max_num_batched_tokens // nreq)
        if cap:
            assert all(k <= cap for k in n.values())
        if admitted and (running_before or len(admitted) > 1):
            # the last admission kept the watermark free, and nothing was allocated after it
            assert kv.num_free_blocks >= watermark_blocks
        # -- policy: queue order and preemption victim ------------------------------------
        if admitted:
            order = (sorted(waiting_before, key=_key) if sc.policy == "priority"
                     else waiting_before)
            assert admitted == [r.request_id for r in order[:len(admitted)]]
        if out.preempted_req_ids:
            victim = (max(running_before, key=lambda r: (r.priority, r.arrival_time))
                      if sc.policy == "priority" else running_before[-1])
            assert out.preempted_req_ids[0] == victim.request_id
            assert not admitted  # the waiting pass is skipped after a preemption
        # -- the batching styles ----------------------------------------------------------
        if sc.batching == "prefill_first":  # admissions alone, whole; else decodes alone
            assert not admitted or set(n) == set(admitted)
            assert all(n[rid] == owed[rid] for rid in admitted)
        elif sc.batching == "prefill_or_decode":  # never both in one step; prefill first
            assert not (prefill and decode)
            mid_prefill = [r for r in running_before if r.request_id not in decoding]
            if mid_prefill and not out.preempted_req_ids:
                assert prefill and not decode
        elif sc.prefill_schedule_interval == 1 and admitted:
            # mixed (stall-free): new prompts only get budget after every running request
            for r in running_before:
                if (r.request_id not in out.preempted_req_ids
                        and computed[r.request_id] < sc.max_model_len - 1):
                    assert r.request_id in n
        sampled = {rid: 1 for rid in n if sched.requests[rid].num_owed_tokens == 0}
        sched.update_from_output(out, sampled)
        decoding -= set(out.preempted_req_ids)
        decoding |= set(sampled)
        step += 1
    assert kv.num_free_blocks == cc.num_blocks and not kv.block_tables


def test_the_three_styles_on_the_article_trace():
    """Hand-derived from each style's rule: six 1-token decodes, P (40 tokens) at step 2,
    budget 64, max_model_len 64. mixed: P's whole prompt joins the decodes at step 2;
    prefill_or_decode and prefill_first: step 2 is P alone, the decodes wait a step."""
    from chunkprefill import run_trace
    from chunkprefill.trace import article_trace_requests

    decodes = {f"D{i}": 1 for i in range(1, 7)}
    expect = {"mixed": [decodes, decodes, {**decodes, "P": 40}, {**decodes, "P": 1}],
              "prefill_or_decode": [decodes, decodes, {"P": 40}, {**decodes, "P": 1}],
              "prefill_first": [decodes, decodes, {"P": 40}, {**decodes, "P": 1}]}
    for style, first_steps in expect.items():
        sc = SchedulerConfig(64, 16, max_model_len=64, batching=style)
        steps = run_trace(article_trace_requests(), sc, CacheConfig(16, 100))
        assert [s.num_scheduled_tokens for s in steps[:4]] == first_steps, style


def test_prefill_or_decode_chunks_without_decodes():
    """Budget 16: P's 40 tokens run as 16 + 16 + 8 in three prefill-only steps (the decodes
    stall for all three), where mixed would run 10 + 10 + 10 + 10 beside the decodes."""
    from chunkprefill import run_trace
    from chunkprefill.trace import article_trace_requests

    decodes = {f"D{i}": 1 for i in range(1, 7)}
    sc = SchedulerConfig(16, 16, max_model_len=1024, batching="prefill_or_decode")
    steps = run_trace(article_trace_requests(), sc, CacheConfig(16, 100))
    assert [s.num_scheduled_tokens for s in steps[:6]] == [
        decodes, decodes, {"P": 16}, {"P": 16}, {"P": 8}, {**decodes, "P": 1}]


def test_no_fast_forward_while_a_resumed_request_still_recomputes():
    """A preempted request recomputing its prompt + output in chunks can owe exactly one
    token and look like a decode. Under prefill_or_decode that token is prefill work: the
    next step runs it alone. The simulator's decode fast path must not take it for a plain
    decode step (found by a random search; the state is reachable)."""
    sc = SchedulerConfig(16, 2, long_prefill_token_threshold=2, max_model_len=32,
                         batching="prefill_or_decode")
    sched = Scheduler(sc, CacheConfig(block_size=4, num_blocks=6))
    arrivals = {0: [("r2", 2, 7)], 2: [("r0", 10, 8), ("r1", 8, 9), ("r3", 8, 11)]}
    for k in range(22):
        for rid, p, o in arrivals.get(k, []):
            sched.add_request(Request(rid, [0] * p, max_tokens=o))
        out = sched.schedule()
        sched.update_from_output(out, {rid: 1 for rid in out.num_scheduled_tokens
                                       if sched.requests[rid].num_owed_tokens == 0})
    r1, r3 = sched.running
    assert not sched.waiting and r1.num_preemptions and r1.num_owed_tokens == 1
    assert r1.output_token_ids and r3.num_owed_tokens == 1 and r3.output_token_ids
    assert fast_forward.plan(sched, 10, token_id=1) is None
    assert sched.schedule().num_scheduled_tokens == {"r1": 1}  # prefill alone; r3 waits


def test_styles_at_scale_with_the_cost_model():
    """Simulated Llama-3-8B on an H100, ShareGPT-like load: the two styles that keep prefill
    and decode apart stall decodes while prompts prefill (no step carries both), so their
    worst inter-token gap is far above the mixed style's; mixed keeps P99 TBT lowest."""
    from chunkprefill.sim import (
        CostModel,
        budget_from_profiling,
        simulate,
        tbt_slo,
    )
    from chunkprefill.workload import sharegpt_like

    cm = CostModel.preset("Llama-3-8B", "H100-SXM")
    wl = sharegpt_like(150, 4.0, seed=0)
    budget = budget_from_profiling(cm, tbt_slo(cm))
    res = {style: simulate(wl, cm, SchedulerConfig.for_budget(
        None if style == "prefill_first" else budget, max_model_len=8192, batching=style))
           for style in ("mixed", "prefill_or_decode", "prefill_first")}
    for style in ("prefill_or_decode", "prefill_first"):
        log = res[style].engine.step_log
        assert not any(s.num_prefill_tokens and s.num_decode_tokens for s in log)
        assert res[style].summary["itl"]["max"] > 2 * res["mixed"].summary["itl"]["max"]
        assert res[style].p99_itl > res["mixed"].p99_itl
    assert any(s.num_prefill_tokens and s.num_decode_tokens for s in res["mixed"].engine.step_log)
