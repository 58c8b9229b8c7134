"""Unified paged attention: ONE launch per layer for a whole mixed batch.

Why one kernel: with chunked prefill a step mixes a few prefill chunks (tens to thousands of
query tokens, starting anywhere in their prompt) with many decodes (one query token each). A
prefill-only kernel plus a decode-only kernel would need two launches and a split batch; this
kernel treats a decode as a chunk of length 1, so every sequence is handled the same way.

The grid, read left to right::

    grid = (num_seqs, cdiv(max_query_len, BLOCK_Q), num_kv_heads)
             seq          q_tile                       kv_head

Program (seq, q_tile, kv_head) computes the output of query tokens
``q_tile * BLOCK_Q ... q_tile * BLOCK_Q + BLOCK_Q - 1`` of sequence ``seq`` for *all* query
heads that share ``kv_head`` (grouped-query attention: the group of ``GROUP`` query heads reads
each K/V tile once). Programs whose tile starts past the sequence's query_len exit at once --
a decode uses only q_tile 0.

The program's rows pack (token, head-in-group) pairs, ``BLOCK_M = BLOCK_Q * GROUP_PADDED``::

    row r  ->  token q_tile * BLOCK_Q + r // GROUP_PADDED,  head kv_head * GROUP + r % GROUP_PADDED

It then walks the sequence's keys in tiles of ``BLOCK_N`` positions. Each key position n finds
its physical slot through the block table (the slot_mapping formula, read backwards):
``block_table[seq, n // BLOCK_SIZE] * BLOCK_SIZE + n % BLOCK_SIZE``. Scores are masked by
``kv_in_seq_mask`` (n < seq_len) and ``causal_mask`` (n <= the query's absolute position
``context_len + i``, where ``context_len = seq_len - query_len`` tokens were cached before this
step), and folded into the output with the online softmax (running max ``m_i``, running sum
``l_i``, rescaled accumulator ``acc``), so no (query x key) matrix is ever stored.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from chunkprefill.kernels._common import INTERPRET, _require, check_triton_device
from chunkprefill.kernels.launch import attention_launch_config, launch_target

__all__ = ["INTERPRET", "unified_attention", "unified_attention_args", "unified_attention_kernel"]


# The JIT compiles one variant per specialisation of its int arguments (== 1, divisible by
# 16, other). The block table's row stride is the step's longest block table, which grows
# during a run: specialising on it would recompile the kernel inside a timed step.
@triton.jit(do_not_specialize=["stride_bt_seq"])
def unified_attention_kernel(
    out_ptr,  # (T, num_q_heads, HEAD_DIM) output, same layout as query
    q_ptr,  # (T, num_q_heads, HEAD_DIM) queries of all sequences, concatenated
    k_cache_ptr,  # (num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM)
    v_cache_ptr,  # (num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM)
    block_table_ptr,  # (num_seqs, max_blocks) int32
    query_start_loc_ptr,  # (num_seqs + 1,) int32
    seq_lens_ptr,  # (num_seqs,) int32, KV length incl. this step's tokens
    scale,  # float32, 1 / sqrt(HEAD_DIM)
    stride_q_tok, stride_q_head,  # query strides (head_dim stride is 1)
    stride_o_tok, stride_o_head,  # output strides (head_dim stride is 1)
    stride_k_blk, stride_k_slot, stride_k_head,  # k_cache strides (head_dim stride is 1)
    stride_v_blk, stride_v_slot, stride_v_head,  # v_cache strides (head_dim stride is 1)
    stride_bt_seq,  # block_table row stride
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,  # next power of two >= HEAD_DIM (tl.arange needs it)
    GROUP: tl.constexpr,  # query heads per kv head
    GROUP_PADDED: tl.constexpr,  # next power of two >= GROUP
    BLOCK_Q: tl.constexpr,  # query tokens per program
    BLOCK_M: tl.constexpr,  # rows per program = BLOCK_Q * GROUP_PADDED
    BLOCK_N: tl.constexpr,  # key positions per inner-loop iteration
    BLOCK_SIZE: tl.constexpr,  # tokens per paged-cache block
    DOT_IN_FP32: tl.constexpr,  # upcast tiles before tl.dot (fp32 caches, the interpreter)
    DOT_PRECISION: tl.constexpr,  # tl.dot input_precision for fp32 tiles
):
    seq = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)

    # ---- where this sequence's queries live, and how much KV it has
    q_start = tl.load(query_start_loc_ptr + seq)  # scalar: first query row of the sequence
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start  # scalar: tokens this step
    seq_len = tl.load(seq_lens_ptr + seq)  # scalar: KV length incl. this step
    context_len = seq_len - q_len  # scalar: tokens cached before this step
    q_tile_start = q_tile * BLOCK_Q
    if q_tile_start >= q_len:  # e.g. a decode's tiles beyond the first
        return

    # ---- load the query tile: rows are (token, head-in-group) pairs
    rows = tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    q_idx = q_tile_start + rows // GROUP_PADDED  # (BLOCK_M,) token index within the chunk
    head_in_group = rows % GROUP_PADDED  # (BLOCK_M,)
    q_head = kv_head * GROUP + head_in_group  # (BLOCK_M,) query head of each row
    dims = tl.arange(0, HEAD_DIM_PADDED)  # (HEAD_DIM_PADDED,)

    q_in_seq_mask = q_idx < q_len  # (BLOCK_M,) row is a real token of this sequence
    head_in_group_mask = head_in_group < GROUP  # (BLOCK_M,) row is a real query head
    row_mask = q_in_seq_mask & head_in_group_mask  # (BLOCK_M,)
    dim_mask = dims < HEAD_DIM  # (HEAD_DIM_PADDED,) lane is a real head_dim element

    q_row = (q_start + q_idx).to(tl.int64)  # (BLOCK_M,) row in the flattened batch
    q_offsets = q_row[:, None] * stride_q_tok + q_head[:, None] * stride_q_head + dims[None, :]
    q = tl.load(q_ptr + q_offsets, mask=row_mask[:, None] & dim_mask[None, :], other=0.0)
    if DOT_IN_FP32:
        q = q.to(tl.float32)  # (BLOCK_M, HEAD_DIM_PADDED)

    q_abs_pos = context_len + q_idx  # (BLOCK_M,) absolute position = last key it may see

    # ---- online-softmax state (float32). -1e30, not -inf: exp(-inf - -inf) would be NaN.
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)  # (BLOCK_M,) running max score
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # (BLOCK_M,) running sum of exp
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], dtype=tl.float32)  # (BLOCK_M, HEAD_DIM_PADDED)

    # The last row of this tile sees keys up to context_len + its index: stop there.
    kv_end = tl.minimum(seq_len, context_len + q_tile_start + BLOCK_Q)
    for kv_start in range(0, kv_end, BLOCK_N):
        kv_pos = kv_start + tl.arange(0, BLOCK_N)  # (BLOCK_N,) logical key positions
        kv_in_seq_mask = kv_pos < seq_len  # (BLOCK_N,) key exists in this sequence
        physical_block = tl.load(
            block_table_ptr + seq * stride_bt_seq + kv_pos // BLOCK_SIZE,
            mask=kv_in_seq_mask, other=0,
        ).to(tl.int64)  # (BLOCK_N,) int64: block * stride can pass 2**31 on big caches
        slot_in_block = kv_pos % BLOCK_SIZE  # (BLOCK_N,)
        k_offsets = (physical_block * stride_k_blk + slot_in_block * stride_k_slot
                     + kv_head * stride_k_head)  # (BLOCK_N,)
        v_offsets = (physical_block * stride_v_blk + slot_in_block * stride_v_slot
                     + kv_head * stride_v_head)  # (BLOCK_N,)
        # K is loaded transposed so the score tile is a plain q @ k_t.
        k_t = tl.load(k_cache_ptr + k_offsets[None, :] + dims[:, None],
                      mask=dim_mask[:, None] & kv_in_seq_mask[None, :],
                      other=0.0)  # (HEAD_DIM_PADDED, BLOCK_N)
        v = tl.load(v_cache_ptr + v_offsets[:, None] + dims[None, :],
                    mask=kv_in_seq_mask[:, None] & dim_mask[None, :],
                    other=0.0)  # (BLOCK_N, HEAD_DIM_PADDED)
        if DOT_IN_FP32:
            k_t = k_t.to(tl.float32)
            v = v.to(tl.float32)

        scores = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale  # (BLOCK_M, BLOCK_N)
        causal_mask = kv_pos[None, :] <= q_abs_pos[:, None]  # (BLOCK_M, BLOCK_N)
        scores = tl.where(causal_mask & kv_in_seq_mask[None, :], scores, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(scores, axis=1))  # (BLOCK_M,)
        alpha = tl.exp(m_i - m_new)  # (BLOCK_M,) rescales what was summed so far
        p = tl.exp(scores - m_new[:, None])  # (BLOCK_M, BLOCK_N), 0 where masked
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)  # padding rows never saw a key; avoid 0 / 0
    out = acc / l_safe[:, None]  # (BLOCK_M, HEAD_DIM_PADDED)
    o_offsets = q_row[:, None] * stride_o_tok + q_head[:, None] * stride_o_head + dims[None, :]
    tl.store(out_ptr + o_offsets, out.to(out_ptr.dtype.element_ty),
             mask=row_mask[:, None] & dim_mask[None, :])


def unified_attention_args(out: torch.Tensor, query: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, block_table: torch.Tensor,
                           query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                           scale: float) -> tuple[object, ...]:
    """The kernel's positional arguments (what the wrapper launches and ``aot`` compiles)."""
    return (out, query, k_cache, v_cache, block_table, query_start_loc, seq_lens, float(scale),
            query.stride(0), query.stride(1),
            out.stride(0), out.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            block_table.stride(0))


def unified_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_query_len: int,
    scale: float,
    out: torch.Tensor | None = None,
    check: bool = True,
) -> torch.Tensor:
    """Attention of the flattened mixed batch ``query`` (T, num_q_heads, head_dim) over the
    paged caches (num_blocks, block_size, num_kv_heads, head_dim); one kernel launch.

    ``query_start_loc`` (B+1,) int32, ``seq_lens`` (B,) int32, ``block_table`` (B, max_blocks)
    int32 as in ``chunkprefill.attention.AttentionMetadata``. Returns ``out`` (T, num_q_heads,
    head_dim) in the query dtype. ``check=False`` skips the argument checks: the model checks
    the first layer's arguments once per step, and every layer's are alike.
    """
    if check:
        _check_inputs(query, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                      max_query_len)
    if out is None:
        out = torch.empty_like(query)
    elif check:
        _require(out.shape == query.shape and out.dtype == query.dtype and out.stride(-1) == 1,
                 "out must match query in shape and dtype, with a contiguous last dimension")
    if check:
        check_triton_device(query, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                            out)
    num_tokens, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out

    group = num_q_heads // num_kv_heads
    # Tile sizes, warps and stages come from the GPU's limits (chunkprefill.kernels.launch).
    cfg = attention_launch_config(num_q_heads, num_kv_heads, head_dim, query.dtype,
                                  max_query_len == 1, launch_target(query.device))
    grid = (num_seqs, triton.cdiv(max_query_len, cfg.block_q), num_kv_heads)
    unified_attention_kernel[grid](
        *unified_attention_args(out, query, k_cache, v_cache, block_table, query_start_loc,
                                seq_lens, scale),
        **cfg.kernel_kwargs(head_dim, group, block_size),
    )
    return out


def _check_inputs(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                  block_table: torch.Tensor, max_query_len: int) -> None:
    _require(query.dim() == 3,
             f"query must be (T, num_q_heads, head_dim), got {tuple(query.shape)}")
    _require(k_cache.dim() == 4 and k_cache.shape == v_cache.shape,
             "k_cache and v_cache must both be (num_blocks, block_size, num_kv_heads, head_dim), "
             f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    _, num_q_heads, head_dim = query.shape
    _, _, num_kv_heads, cache_head_dim = k_cache.shape
    _require(head_dim == cache_head_dim,
             f"query head_dim {head_dim} != cache head_dim {cache_head_dim}")
    _require(num_q_heads % num_kv_heads == 0,
             f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    _require(query.dtype == k_cache.dtype == v_cache.dtype,
             f"query, k_cache, v_cache dtypes must match, got {query.dtype}, {k_cache.dtype}, "
             f"{v_cache.dtype}")
    _require(query.dtype in (torch.float32, torch.float16, torch.bfloat16),
             f"dtype must be float32, float16 or bfloat16, got {query.dtype}")
    num_seqs = seq_lens.shape[0] if seq_lens.dim() == 1 else -1
    _require(seq_lens.dim() == 1 and seq_lens.dtype == torch.int32,
             f"seq_lens must be (B,) int32, got {seq_lens.dtype} {tuple(seq_lens.shape)}")
    _require(query_start_loc.shape == (num_seqs + 1,) and query_start_loc.dtype == torch.int32,
             f"query_start_loc must be ({num_seqs + 1},) int32, got {query_start_loc.dtype} "
             f"{tuple(query_start_loc.shape)}")
    _require(block_table.dim() == 2 and block_table.shape[0] == num_seqs
             and block_table.dtype == torch.int32,
             f"block_table must be ({num_seqs}, max_blocks) int32, got {block_table.dtype} "
             f"{tuple(block_table.shape)}")
    _require(isinstance(max_query_len, int) and max_query_len >= 1,
             f"max_query_len must be an int >= 1, got {max_query_len!r}")
    for name, t in (("query", query), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("block_table", block_table)):
        _require(t.stride(-1) == 1, f"{name} must have a contiguous last dimension")
