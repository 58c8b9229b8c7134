"""Invariants of the scheduler over thousands of random workloads (hypothesis)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from chunkprefill import CacheConfig, Request, Scheduler, SchedulerConfig
from chunkprefill.checks import cdiv

MAX_EXAMPLES = int(os.environ.get("CHUNKPREFILL_HYPOTHESIS_EXAMPLES", "2000"))


@st.composite
def workloads(draw):
    batching = draw(st.sampled_from(["mixed", "mixed", "prefill_first"]))
    chunked = draw(st.booleans())
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    max_model_len = draw(st.integers(8, 64))
    whole = not chunked or batching == "prefill_first"
    budget = draw(st.integers(max_model_len if whole else 1, 80))
    max_num_seqs = draw(st.integers(1, min(budget, 8)))
    threshold = draw(st.integers(0, max_model_len))
    reqs = draw(st.lists(st.tuples(st.integers(1, max_model_len - 1),  # prompt
                                   st.integers(1, 12),                   # max_tokens
                                   st.integers(0, 6)),                   # arrival step
                         min_size=1, max_size=8))
    # The cache can hold the largest request (else add_request rightly refuses it).
    largest = max(min(p + o - 1, max_model_len - 1) for p, o, _ in reqs)
    num_blocks = draw(st.integers(cdiv(largest, block_size), cdiv(largest, block_size) * 4))
    if batching == "prefill_first":
        threshold = 0
    return (SchedulerConfig(budget, max_num_seqs, chunked, threshold, max_model_len,
                            batching=batching),
            CacheConfig(block_size, num_blocks), reqs)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(workloads())
def test_scheduler_invariants(w):
    sc, cc, reqs = w
    sched = Scheduler(sc, cc)
    kv = sched.kv_cache_manager
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    all_reqs: dict[str, Request] = {}
    max_steps = 200 * sum(p + o for p, o, _ in reqs)  # generous bound: no livelock
    step = 0
    while pending or sched.has_unfinished_requests():
        assert step < max_steps, "livelock"
        while pending and pending[0][1][2] == step:
            i, (p, o, _) = pending.pop(0)
            r = Request(f"r{i}", [0] * p, max_tokens=o)
            all_reqs[r.request_id] = r
            sched.add_request(r)
        before = {rid: r.num_owed_tokens for rid, r in sched.requests.items()}
        nreq = len(sched.requests)
        out = sched.schedule()
        n = out.num_scheduled_tokens
        assert sum(n.values()) <= sc.max_num_batched_tokens
        assert len(sched.running) <= sc.max_num_seqs
        for rid, k in n.items():
            assert 1 <= k <= before[rid]  # never more than owed
            if nreq > 1 and sc.long_prefill_token_threshold:
                assert k <= sc.long_prefill_token_threshold
            assert out.num_computed_tokens[rid] + k <= sc.max_model_len - 1
        assert not set(out.preempted_req_ids) & set(n)
        if out.preempted_req_ids:  # the waiting pass is skipped after a preemption
            assert not out.scheduled_new_req_ids and not out.scheduled_resumed_req_ids
        if sc.batching == "prefill_first":  # a step is all prompts or all decodes
            admitted = set(out.scheduled_new_req_ids) | set(out.scheduled_resumed_req_ids)
            assert not admitted or set(n) == admitted
            assert all(k == before[rid] for rid, k in n.items())
        elif not sc.enable_chunked_prefill and not sc.long_prefill_token_threshold:
            assert all(k == before[rid] for rid, k in n.items())
        for r in sched.running:  # a request holds exactly the blocks its KV needs
            assert len(kv.get_block_table(r.request_id)) == cdiv(r.num_computed_tokens,
                                                                   cc.block_size)
        for r in sched.waiting:
            assert kv.get_block_table(r.request_id) == [] and r.num_computed_tokens == 0
        held = [b for t in kv.block_tables.values() for b in t]
        assert len(held) == len(set(held)) and len(held) + kv.num_free_blocks == cc.num_blocks
        sampled = {rid: 1 for rid in n if sched.requests[rid].num_owed_tokens == 0}
        sched.update_from_output(out, sampled)
        step += 1
    assert kv.num_free_blocks == cc.num_blocks and not kv.block_tables
    for i, (p, o, _) in enumerate(reqs):
        r = all_reqs[f"r{i}"]
        assert r.is_finished
        assert r.num_output_tokens == min(o, sc.max_model_len - p)


@st.composite
def mixed_workloads(draw):
    """vLLM's own style (mixed, chunked, fcfs), where every chunk is exactly the min rule."""
    block_size = draw(st.sampled_from([1, 4, 16]))
    max_model_len = draw(st.integers(8, 64))
    budget = draw(st.integers(1, 48))
    max_num_seqs = draw(st.integers(1, min(budget, 8)))
    threshold = draw(st.integers(0, max_model_len))
    reqs = draw(st.lists(st.tuples(st.integers(1, max_model_len - 1), st.integers(1, 12),
                                   st.integers(0, 6)), min_size=1, max_size=8))
    largest = max(min(p + o - 1, max_model_len - 1) for p, o, _ in reqs)
    num_blocks = draw(st.integers(cdiv(largest, block_size), cdiv(largest, block_size) * 4))
    return (SchedulerConfig(budget, max_num_seqs, True, threshold, max_model_len),
            CacheConfig(block_size, num_blocks), reqs)


@settings(max_examples=MAX_EXAMPLES // 4, deadline=None)
@given(mixed_workloads())
def test_every_chunk_is_the_min_rule(w):
    """n == min(owed, threshold (when others are present), budget left, max_model_len - 1 -
    computed) for every scheduled request, budget left read off the dict's order (notebook
    03 section 4; vLLM's scheduler.py L839-857). Worked out here from the rule, not from the
    scheduler's helpers."""
    sc, cc, reqs = w
    sched = Scheduler(sc, cc)
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    step = 0
    while pending or sched.has_unfinished_requests():
        assert step < 5000, "livelock"
        while pending and pending[0][1][2] == step:
            i, (p, o, _) = pending.pop(0)
            sched.add_request(Request(f"r{i}", [0] * p, max_tokens=o))
        owed = {rid: r.num_owed_tokens for rid, r in sched.requests.items()}
        alone = len(sched.running) + len(sched.waiting) == 1
        out = sched.schedule()
        left = sc.max_num_batched_tokens
        for rid, n in out.num_scheduled_tokens.items():
            terms = [owed[rid], left, sc.max_model_len - 1 - out.num_computed_tokens[rid]]
            if sc.long_prefill_token_threshold and not alone:
                terms.append(sc.long_prefill_token_threshold)
            assert n == min(terms), (step, rid, n, terms)
            left -= n
        sched.update_from_output(out, {rid: 1 for rid in out.num_scheduled_tokens
                                       if sched.requests[rid].num_owed_tokens == 0})
        step += 1
