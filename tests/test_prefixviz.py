"""Notebook 11's runs and pictures, checked against hand-worked numbers."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest
from chunkprefill.course.panels.prefix import prefix_panel_update
from chunkprefill.course.plots.prefix import (
    plot_free_queue,
    plot_hash_chain,
    plot_hit_staircase,
    prompt_blocks,
    trace_with_pool,
)
from chunkprefill.course.scenarios import shared_prompt_run
from chunkprefill.kv_cache import block_hashes_of


@pytest.mark.parametrize("prefix_len, block_size, budget, cached, chunks, ttft", [
    # 100 shared, bs 16 -> 6 blocks = 96 cached; 160 - 96 = 64 owed at budget 32: 2 chunks
    (100, 16, 32, 96, (32, 32), 2),
    # whole prompt shared: cap 159 -> 9 blocks = 144; the last block's 16 tokens recomputed
    (160, 16, 32, 144, (16,), 1),
    # 37 shared at bs 4 -> 9 blocks = 36; 124 owed: 32, 32, 32, 28
    (37, 4, 32, 36, (32, 32, 32, 28), 4),
    # fewer shared tokens than one block: no hit
    (15, 16, 32, 0, (32, 32, 32, 32, 32), 5),
])
def test_shared_prompt_run_by_hand(prefix_len, block_size, budget, cached, chunks, ttft):
    on = shared_prompt_run(prefix_len, block_size, budget, prompt_len=160)
    assert (on.num_cached_tokens, on.chunks, on.first_token_steps) == (cached, chunks, ttft)
    off = shared_prompt_run(prefix_len, block_size, budget, 160, enable_prefix_caching=False)
    assert (off.num_cached_tokens, off.chunks, off.first_token_steps) == (0, (32,) * 5, 5)


def test_prompt_blocks_and_pictures():
    blocks = prompt_blocks(list(range(10)), 4, num_cached_tokens=4)
    assert [b.token_ids for b in blocks] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    assert [b.hit for b in blocks] == [True, False, False]
    assert blocks[2].block_hash is None
    assert blocks[1].block_hash == block_hashes_of(list(range(8)), 4)[1].hex()[:6]
    for fig in (plot_hash_chain({"A": list(range(10)), "B": list(range(6))}, 4, {"B": 4}),
                plot_hit_staircase(20, [4]), prefix_panel_update(160, 16, 32)[1]):
        assert isinstance(fig, Figure)
    text = prefix_panel_update(160, 16, 32)[0]
    assert "num_tokens - 1 = 159" in text and "last 16 tokens" in text


def _eviction(num_blocks):
    # A (14 tokens) finishes at step 0; X (30) arrives at step 3; B shares A's first 14.
    a = list(range(14))
    reqs = [TraceRequest("A", 14, 1, 0, tuple(a)), TraceRequest("X", 30, 1, 3),
            TraceRequest("B", 17, 1, 6, tuple(a + [900, 901, 902]))]
    return trace_with_pool(reqs, SchedulerConfig(16, 8, max_model_len=64),
                           CacheConfig(4, num_blocks, enable_prefix_caching=True))


def test_free_queue_orders_blocks_as_vllm_frees_them():
    steps, pool = _eviction(10)
    # After A finishes: its partial block 3 (no hash) at the front, then the never-used blocks
    # 4..9, then its cached blocks tail first (2, 1, 0) at the back.
    assert pool[2].free_queue == ((3, "A3", False), *((b, "", False) for b in range(4, 10)),
                                  (2, "A2", True), (1, "A1", True), (0, "A0", True))
    # X takes the first 8: A's tail block 2 among them, so B hits blocks 0 and 1 only.
    assert pool[3].block_tables["X"][:4] == (3, 4, 5, 6)
    assert next(s.num_cached_tokens["B"] for s in steps if "B" in s.num_cached_tokens) == 8
    fig = plot_free_queue({"10 blocks": pool[2].free_queue}, taken=8, taker="X")
    hatched = [p for p in fig.axes[0].patches if p.get_hatch() == "///"]
    assert len(hatched) == 8
