"""Notebook 09's runs and pictures, checked against hand-worked numbers."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from chunkprefill.course.panels.prefix import prefix_panel_update
from chunkprefill.course.plots.prefix import plot_hash_chain, plot_hit_staircase, prompt_blocks
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
