"""Prefix caching's invariants over random workloads that share prefixes (hypothesis), and the
block hash's properties. Schedules themselves are checked against vLLM in test_vs_vllm_prefix."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from chunkprefill import (
    CacheConfig,
    Request,
    RequestStatus,
    Scheduler,
    SchedulerConfig,
    fast_forward,
)
from chunkprefill.checks import cdiv
from chunkprefill.kv_cache import block_hashes_of, hash_block_tokens

MAX_EXAMPLES = int(os.environ.get("CHUNKPREFILL_HYPOTHESIS_EXAMPLES", "2000")) // 2


@st.composite
def shared_workloads(draw):
    chunked = draw(st.booleans())
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    max_model_len = draw(st.integers(8, 64))
    budget = draw(st.integers(1 if chunked else max_model_len, 80))
    max_num_seqs = draw(st.integers(1, min(budget, 8)))
    threshold = draw(st.sampled_from([0, 0, 1, 3, 8]))
    # a few "system prompts" made of 2-3 distinct tokens, so equal blocks are common
    systems = draw(st.lists(st.lists(st.integers(2, 4), min_size=1, max_size=40),
                            min_size=1, max_size=3))
    reqs = []
    for _ in range(draw(st.integers(1, 8))):
        head = draw(st.sampled_from(systems + [[]]))
        tail = draw(st.lists(st.integers(2, 4), min_size=0 if head else 1, max_size=10))
        prompt = (head + tail)[: max_model_len - 1]
        reqs.append((prompt, draw(st.integers(1, 12)), draw(st.integers(0, 6))))
    largest = max(min(len(p) + o - 1, max_model_len - 1) for p, o, _ in reqs)
    num_blocks = draw(st.integers(cdiv(largest, block_size), cdiv(largest, block_size) * 4))
    return (SchedulerConfig(budget, max_num_seqs, chunked, threshold, max_model_len),
            block_size, num_blocks, reqs)


def _run(sc, cache_config, reqs, check=None):
    """Drive the scheduler (every request samples token 1); returns the requests."""
    sched = Scheduler(sc, cache_config)
    pending = sorted(enumerate(reqs), key=lambda x: x[1][2])
    all_reqs: dict[str, Request] = {}
    step = 0
    while pending or sched.has_unfinished_requests():
        assert step < 20_000, "livelock"
        while pending and pending[0][1][2] == step:
            i, (p, o, _) = pending.pop(0)
            all_reqs[f"r{i}"] = r = Request(f"r{i}", p, max_tokens=o)
            sched.add_request(r)
        before = {rid: (r.num_tokens, r.num_owed_tokens) for rid, r in sched.requests.items()}
        out = sched.schedule()
        if check is not None:
            check(sched, out, before)
        sched.update_from_output(out, {rid: 1 for rid in out.num_scheduled_tokens
                                       if sched.requests[rid].num_owed_tokens == 0})
        step += 1
    return sched, all_reqs


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(shared_workloads())
def test_prefix_caching_invariants(w):
    sc, bs, num_blocks, reqs = w
    content: dict[int, list[int | None]] = {}  # what each block's slots hold (a shadow)
    hits_seen = []

    def check(sched, out, before):
        kv, pool = sched.kv_cache_manager, sched.kv_cache_manager.block_pool
        users: dict[int, list[tuple[str, int]]] = {}  # block -> (request, index in its table)
        for rid, table in kv.block_tables.items():
            for j, b in enumerate(table):
                users.setdefault(b, []).append((rid, j))
        # reference counts are the number of tables holding a block; free == unused
        assert all(pool.ref_cnt[b] == len(users.get(b, ())) for b in range(num_blocks))
        assert set(pool.free_block_ids()) == {b for b in range(num_blocks) if b not in users}
        start = {rid: r.num_computed_tokens for rid, r in sched.requests.items()}
        start.update(out.num_computed_tokens)
        for rid, n in out.num_scheduled_tokens.items():  # in scheduling order, as the model
            r, c = sched.requests[rid], out.num_computed_tokens[rid]
            table = kv.block_tables[rid]
            if rid in out.num_cached_tokens:
                hit = out.num_cached_tokens[rid]
                num_tokens, owed = before[rid]
                assert hit % bs == 0 and hit <= num_tokens - 1  # whole blocks, 1 token left
                assert c == hit == num_tokens - owed + hit
                # the adopted blocks hold exactly this request's leading tokens (written in
                # an earlier step or earlier in this one: the model writes a layer's KV for
                # the whole step before any request reads it)
                for i, b in enumerate(table[: hit // bs]):
                    assert content[b] == r.all_token_ids[i * bs:(i + 1) * bs]
                hits_seen.append(hit)
            assert len(table) == cdiv(c + n, bs)
            for p in range(c, c + n):
                b = table[p // bs]
                # every other holder of b has all of it computed already: it only reads
                assert all((j + 1) * bs <= start[u] for u, j in users[b] if u != rid)
                slots = content.setdefault(b, [None] * bs)
                if p % bs == 0:
                    slots[:] = [None] * bs  # a reused block starts over
                slots[p % bs] = r.all_token_ids[p]
        for h, ids in pool.cached_block_hash_to_block.items():  # cached = full, hashed right
            for b in ids:
                assert pool.block_hash[b] == h and None not in content[b]

    sched, done = _run(sc, CacheConfig(bs, num_blocks, enable_prefix_caching=True), reqs, check)
    pool = sched.kv_cache_manager.block_pool
    assert pool.num_free_blocks == num_blocks and not sched.kv_cache_manager.block_tables
    assert set(pool.ref_cnt) == {0}
    # the same requests finish with the same outputs as with caching off
    _, plain = _run(sc, CacheConfig(bs, num_blocks), reqs)
    assert {rid: r.output_token_ids for rid, r in done.items()} == {
        rid: r.output_token_ids for rid, r in plain.items()}
    stats = sched.kv_cache_manager.prefix_cache_stats
    assert stats.requests == len(reqs)
    assert stats.hits + stats.preempted_hits == sum(hits_seen)


def test_block_hash_chains_the_prefix():
    a = block_hashes_of([5, 6, 7, 8, 9, 10, 11], 2)
    assert len(a) == 3  # the 7th token is in a partial block: no hash
    b = block_hashes_of([5, 6, 7, 8, 9, 10], 2)
    assert a == b  # equal prefixes, equal hashes
    c = block_hashes_of([4, 6, 7, 8, 9, 10], 2)
    assert all(x != y for x, y in zip(a, c, strict=True))  # one token changes all later hashes
    # the same tokens under another parent are another block
    assert hash_block_tokens(a[0], [7, 8]) == a[1] != hash_block_tokens(None, [7, 8])
    assert hash_block_tokens(None, [1, 23]) != hash_block_tokens(None, [12, 3])


def test_block_hash_is_stable_across_processes():
    code = ("from chunkprefill.kv_cache import block_hashes_of; "
            "print(block_hashes_of(list(range(40)), 16)[-1].hex())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert len(outs) == 1


def test_decode_fast_path_declines_with_prefix_caching():
    """Plain decode steps in bulk would skip the hashing of blocks that decodes fill."""
    for caching, expected in ((False, 4), (True, 0)):
        sched = Scheduler(SchedulerConfig(16, 4, max_model_len=64),
                          CacheConfig(4, 64, enable_prefix_caching=caching))
        sched.add_request(Request("a", [5, 6, 7], max_tokens=5))
        out = sched.schedule()
        sched.update_from_output(out, {"a": 1})
        p = fast_forward.plan(sched, 100, 1)
        assert (0 if p is None else p.num_steps) == expected


def test_free_queue_order_hits_and_eviction_by_hand():
    """vLLM's rules worked by hand on 6 blocks of 4: a freed request's unhashed (partial)
    block goes to the front of the free queue, its cached blocks to the back, tail first; a
    hit takes free cached blocks back; an allocation evicts the hashes it reuses."""
    from chunkprefill.kv_cache import KVCacheManager

    kv = KVCacheManager(CacheConfig(4, 6, enable_prefix_caching=True))
    pool = kv.block_pool
    a = Request("a", list(range(10)), max_tokens=1)
    assert kv.allocate_slots(a, 10) == [0, 1, 2]  # blocks 0, 1 full (hashed), 2 partial
    assert [pool.block_hash[b] is not None for b in (0, 1, 2)] == [True, True, False]
    a.status = RequestStatus.FINISHED_LENGTH_CAPPED  # finished: free() drops its hashes too
    kv.free(a)
    assert pool.free_block_ids() == [2, 3, 4, 5, 1, 0] and kv.num_free_blocks == 6
    b = Request("b", list(range(8)) + [50, 51, 52], max_tokens=1)
    hit, n = kv.get_computed_blocks(b)
    assert (hit, n) == ([0, 1], 8)
    assert kv.can_fit_full_sequence(b, hit)
    assert kv.allocate_slots(b, 3, hit) == [2]  # 1 new block, from the front
    assert kv.get_block_table("b") == [0, 1, 2] and pool.free_block_ids() == [3, 4, 5]
    assert [pool.ref_cnt[x] for x in range(6)] == [1, 1, 1, 0, 0, 0]
    b.status = RequestStatus.FINISHED_LENGTH_CAPPED
    kv.free(b)
    assert pool.free_block_ids() == [2, 3, 4, 5, 1, 0]
    d = Request("d", list(range(100, 120)), max_tokens=1)
    assert kv.allocate_slots(d, 20) == [2, 3, 4, 5, 1]  # evicts block 1's hash
    again = Request("e", list(range(10)), max_tokens=1)
    assert kv.get_computed_blocks(again) == ([0], 4)  # the chain breaks at block 1
