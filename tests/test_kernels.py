"""Triton kernels against the torch backend and the loop-over-sequences reference, on odd
sizes: 1-token decodes, 17-token chunks at nonzero offsets, GQA, head_dim 24, non-power-of-two
groups, scrambled block tables, NaN-filled unused cache slots (a kernel reading past its masks
poisons its output). On a CPU they run under TRITON_INTERPRET=1; on a CUDA machine compiled,
on the GPU, with the launch configurations picked for it."""

from __future__ import annotations

import os
import sys

import torch

# Triton picks interpreter vs compiler when @triton.jit runs, i.e. at the kernels' first
# import: set the switch before anything imports chunkprefill.kernels. With a GPU, compile.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton  # noqa: E402,F401  (dev extra: a missing triton must fail, not skip)

from chunkprefill.attention import (
    build_attention_metadata,
    default_backend,
    paged_attention,
    ref_paged_attention,
    write_kv,
)
from chunkprefill.config import ModelConfig  # noqa: E402
from chunkprefill.kernels import INTERPRET, unified_attention
from chunkprefill.kernels.kv_store import reshape_and_cache  # noqa: E402
from chunkprefill.model import ToyTransformer  # noqa: E402

DEVICE = "cpu"
if not INTERPRET:  # kernels were imported earlier without the interpreter
    if not torch.cuda.is_available():
        raise RuntimeError(
            "chunkprefill.kernels was imported before TRITON_INTERPRET=1 was set (by "
            f"{sorted(m for m in sys.modules if m.startswith('chunkprefill'))}): run this module "
            "on its own or set TRITON_INTERPRET=1 in the environment")
    DEVICE = "cuda"
# 16-bit dtypes this device runs: bfloat16 needs compute capability 8.0 on a GPU.
HALF_DTYPES = [torch.float16] + ([torch.bfloat16] if DEVICE == "cpu"
                                 or torch.cuda.get_device_capability() >= (8, 0) else [])


def make_batch(query_lens: list[int], kv_lens: list[int], num_q_heads: int, num_kv_heads: int,
               head_dim: int, block_size: int, num_blocks: int = 24, seed: int = 0):
    """Random queries plus caches holding each sequence's keys under a scrambled block table;
    every slot no sequence owns is NaN."""
    gen = torch.Generator().manual_seed(seed)
    free = torch.randperm(num_blocks, generator=gen).tolist()
    block_tables = [[free.pop() for _ in range(-(-kv // block_size))] for kv in kv_lens]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"))
    v_cache = torch.full(shape, float("nan"))
    for table, kv in zip(block_tables, kv_lens, strict=True):
        for pos in range(kv):
            blk, off = table[pos // block_size], pos % block_size
            k_cache[blk, off] = torch.randn(num_kv_heads, head_dim, generator=gen)
            v_cache[blk, off] = torch.randn(num_kv_heads, head_dim, generator=gen)
    query = torch.randn(sum(query_lens), num_q_heads, head_dim, generator=gen)
    computed = [kv - q for q, kv in zip(query_lens, kv_lens, strict=True)]
    meta, positions = build_attention_metadata(query_lens, computed, block_tables, block_size,
                                               DEVICE)
    return (query.to(DEVICE), k_cache.to(DEVICE), v_cache.to(DEVICE), meta, positions,
            block_tables)


# (query_lens, kv_lens, num_q_heads, num_kv_heads, head_dim, block_size)
ATTENTION_CASES = {
    "mixed_gqa": ([1, 17, 1, 17, 5], [33, 37, 1, 40, 5], 4, 2, 16, 16),
    "head_dim_24_group_3": ([1, 17, 3], [50, 17, 3], 6, 2, 24, 16),
    "decode_only_mqa": ([1, 1, 1, 1], [40, 3, 17, 16], 4, 1, 32, 16),
    "mha_odd_block_size": ([17, 1, 9], [20, 29, 9], 2, 2, 16, 5),
    "long_chunk_many_tiles": ([70, 1], [85, 64], 2, 1, 16, 16),
}


@pytest.mark.parametrize("case", ATTENTION_CASES.values(), ids=ATTENTION_CASES.keys())
def test_unified_attention_matches_references(case: tuple) -> None:
    query_lens, kv_lens, hq, hkv, d, bs = case
    query, k_cache, v_cache, meta, _, tables = make_batch(query_lens, kv_lens, hq, hkv, d, bs)
    scale = d**-0.5
    expected = ref_paged_attention(query, k_cache, v_cache, query_lens, kv_lens, tables, scale)
    assert torch.isfinite(expected).all()
    for backend in ("torch", "triton"):
        got = paged_attention(query, k_cache, v_cache, meta, scale, backend=backend)
        assert got.shape == query.shape and got.dtype == query.dtype
        err = (got - expected).abs().max().item()
        assert err <= 1e-4, f"{backend}: max abs err {err}"


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("case", ATTENTION_CASES.values(), ids=ATTENTION_CASES.keys())
def test_16bit_kernels_match_the_reference(case: tuple, dtype: torch.dtype) -> None:
    """16-bit caches and queries (on a GPU: 16-bit tensor-core tiles): within a few 16-bit
    roundings of the float32 reference. Outputs are averages of V rows of size ~1-3, and
    bfloat16 rounds to 2^-9 relative, so errors are ~1e-2; float16 (2^-12) far less."""
    query_lens, kv_lens, hq, hkv, d, bs = case
    query, k_cache, v_cache, meta, _, tables = make_batch(query_lens, kv_lens, hq, hkv, d, bs)
    scale = d**-0.5
    expected = ref_paged_attention(query, k_cache, v_cache, query_lens, kv_lens, tables, scale)
    got = paged_attention(query.to(dtype), k_cache.to(dtype), v_cache.to(dtype), meta, scale,
                          backend="triton")
    assert got.dtype == dtype
    err = (got.float() - expected).abs().max().item()
    assert err <= 3e-2, err


def test_unified_attention_causal_mask_is_aligned_to_the_end_of_kv() -> None:
    """With a 17-token chunk after 20 cached tokens, query i must see exactly keys 0..20+i:
    make V one-hot in position so the output reveals which keys got weight."""
    q_len, kv_len, bs = 17, 37, 16
    query, k_cache, v_cache, meta, _, tables = make_batch([q_len], [kv_len], 1, 1, 64, bs)
    for pos in range(kv_len):  # V[pos] = e_pos, K = 0 -> uniform weights over visible keys
        blk, off = tables[0][pos // bs], pos % bs
        k_cache[blk, off] = 0.0
        v_cache[blk, off] = torch.nn.functional.one_hot(torch.tensor(pos), 64).float()
    out = paged_attention(query, k_cache, v_cache, meta, 1.0, backend="triton")[:, 0]  # (q, 64)
    for i in range(q_len):
        visible = kv_len - q_len + i + 1
        expected = torch.zeros(64)
        expected[:visible] = 1.0 / visible
        torch.testing.assert_close(out[i].cpu(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("num_kv_heads", "head_dim", "block_size"), [(2, 16, 16), (3, 24, 5)])
def test_reshape_and_cache_matches_index_put(num_kv_heads: int, head_dim: int,
                                              block_size: int) -> None:
    gen = torch.Generator().manual_seed(0)
    num_blocks, num_tokens = 6, 13
    key = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:num_tokens]
    slots[4] = -1  # a padding token: must not be written
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    keep = slots >= 0
    k_ref.view(-1, num_kv_heads, head_dim).index_put_((slots[keep],), key[keep])
    v_ref.view(-1, num_kv_heads, head_dim).index_put_((slots[keep],), value[keep])

    k_tri, v_tri = k_cache.clone().to(DEVICE), v_cache.clone().to(DEVICE)
    reshape_and_cache(key.to(DEVICE), value.to(DEVICE), k_tri, v_tri, slots.to(DEVICE))
    assert torch.equal(k_tri.cpu(), k_ref) and torch.equal(v_tri.cpu(), v_ref)

    k_torch, v_torch = k_cache.clone(), v_cache.clone()
    write_kv(key, value, k_torch, v_torch, slots, backend="torch")
    assert torch.equal(k_torch, k_ref) and torch.equal(v_torch, v_ref)


def test_model_step_triton_matches_torch_backend() -> None:
    """A whole ToyTransformer step (write K/V + attend, 2 layers) on a mixed batch."""
    model = ToyTransformer(ModelConfig.tiny(), seed=0).to(DEVICE)
    prompts = [list(range(3, 23)), list(range(100, 131)), [7]]
    bs = 16
    tables = [[5, 2], [0, 7], [3]]
    # Sequence B's first 14 tokens are already cached (computed by the torch path).
    prefix_kv = model.allocate_kv_cache(num_blocks=8, block_size=bs)
    meta0, pos0 = build_attention_metadata([14], [0], [tables[1]], bs, DEVICE)
    model.forward(torch.tensor(prompts[1][:14], device=DEVICE), pos0, prefix_kv, meta0)
    # One step: A's whole 20-token prompt, B's 17-token chunk at offset 14, C's single token.
    meta, pos = build_attention_metadata([20, 17, 1], [0, 14, 0], tables, bs, DEVICE)
    ids = torch.tensor(prompts[0] + prompts[1][14:] + prompts[2], device=DEVICE)
    hidden = {}
    for backend in ("torch", "triton"):
        kv = [(k.clone(), v.clone()) for k, v in prefix_kv]
        hidden[backend] = model.forward(ids, pos, kv, meta, backend=backend)
    err = (hidden["triton"] - hidden["torch"]).abs().max().item()
    assert err <= 1e-4, err
    reference = model.forward_reference(prompts[1])[14:]
    torch.testing.assert_close(model.compute_logits(hidden["triton"][20:37]), reference,
                               atol=1e-4, rtol=0)


def _valid_inputs():
    query, k_cache, v_cache, meta, _, _ = make_batch([3, 1], [3, 9], 4, 2, 16, 16)
    return dict(query=query, k_cache=k_cache, v_cache=v_cache,
                query_start_loc=meta.query_start_loc, seq_lens=meta.seq_lens,
                block_table=meta.block_table, max_query_len=meta.max_query_len, scale=0.25)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: a.update(query=a["query"][:, :3]), "multiple of num_kv_heads"),
        (lambda a: a.update(query=a["query"][..., :8]), "head_dim"),
        (lambda a: a.update(query=a["query"].double()), "dtype"),
        (lambda a: a.update(seq_lens=a["seq_lens"].long()), "seq_lens"),
        (lambda a: a.update(query_start_loc=a["query_start_loc"][:2]), "query_start_loc"),
        (lambda a: a.update(block_table=a["block_table"][:1]), "block_table"),
        (lambda a: a.update(v_cache=a["v_cache"][:3]), "v_cache"),
    ],
    ids=["heads", "head_dim", "dtype", "seq_lens", "query_start_loc", "block_table", "v_cache"],
)
def test_unified_attention_validates_inputs(change, match: str) -> None:
    args = _valid_inputs()
    unified_attention(**args)  # the untouched inputs are fine
    change(args)
    with pytest.raises(ValueError, match=match):
        unified_attention(**args)


def test_reshape_and_cache_validates_inputs() -> None:
    key = torch.zeros(4, 2, 16)
    cache = torch.zeros(3, 16, 2, 16)
    with pytest.raises(ValueError, match="slot_mapping"):
        reshape_and_cache(key, key, cache, cache.clone(), torch.arange(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="cache holds"):
        reshape_and_cache(key[:, :1], key[:, :1], cache, cache.clone(), torch.arange(4))
    with pytest.raises(ValueError, match="dtype"):
        reshape_and_cache(key.half(), key.half(), cache, cache.clone(), torch.arange(4))


def test_unknown_backend_lists_allowed_values() -> None:
    query, k_cache, v_cache, meta, _, _ = make_batch([1], [4], 2, 2, 16, 16)
    with pytest.raises(ValueError, match=r"\('torch', 'triton'\)"):
        paged_attention(query, k_cache, v_cache, meta, 1.0, backend="flash")
    with pytest.raises(ValueError, match=r"\('torch', 'triton'\)"):
        write_kv(query, query, k_cache, v_cache, meta.slot_mapping, backend="flash")


def test_default_backend() -> None:
    assert default_backend("cpu") == "torch"
    assert default_backend(torch.device("cuda", 0)) == "triton"


def test_build_attention_metadata_bookkeeping() -> None:
    meta, positions = build_attention_metadata([3, 1, 2], [0, 5, 4], [[2], [0, 7], [1, 3]], 4)
    assert meta.query_start_loc.tolist() == [0, 3, 4, 6]
    assert meta.seq_lens.tolist() == [3, 6, 6]
    assert meta.block_table.tolist() == [[2, 0], [0, 7], [1, 3]]
    assert positions.tolist() == [0, 1, 2, 5, 4, 5]
    # slot = block_table[p // 4] * 4 + p % 4
    assert meta.slot_mapping.tolist() == [8, 9, 10, 29, 12, 13]
    assert (meta.max_query_len, meta.max_seq_len) == (3, 6)
    assert meta.query_start_loc.dtype == meta.seq_lens.dtype == torch.int32
    assert meta.block_table.dtype == torch.int32
    assert meta.slot_mapping.dtype == positions.dtype == torch.int64


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([2], [3], [[0]], 4), "block_tables\\[0\\] has 1 blocks"),
        (([0], [0], [[0]], 4), "query_lens\\[0\\]"),
        (([1, 1], [0], [[0], [1]], 4), "one entry per sequence"),
        (([], [], [], 4), "empty"),
        (([1], [0], [[0]], 0), "block_size"),
    ],
)
def test_build_attention_metadata_rejects_bad_input(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_attention_metadata(*args)
