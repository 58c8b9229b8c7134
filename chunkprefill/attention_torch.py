"""The ``"torch"`` backend of ``paged_attention``: vectorised PyTorch for the CPU (and a GPU
without Triton). It plans once per step (the plan is shared by every layer through
``AttentionMetadata.per_step``), gathers each sequence's KV out of the paged cache into
reused buffers, and runs ``scaled_dot_product_attention`` per group of similar lengths:
decodes batched by KV length, prefill chunks one by one with the causal mask aligned to the
end of their KV."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from chunkprefill.checks import cdiv

if TYPE_CHECKING:
    from chunkprefill.attention import AttentionMetadata


def _length_buckets(seqs: list[int], seq_lens: list[int]) -> list[list[int]]:
    """Group decodes of similar KV length, so a padded batch never pads 32 short sequences
    to one long one's length (that padding, not attention, would then dominate the step).
    A bucket holds lengths up to 1.25x its shortest plus one block: measured on 64 decodes of
    30-640 tokens, 8 buckets ran a decode step in 21 ms where 3 buckets (up to 2x + 64) took
    30 ms and one padded batch 105 ms."""
    groups: list[list[int]] = []
    for b in sorted(seqs, key=lambda b: seq_lens[b]):
        if groups and seq_lens[b] <= seq_lens[groups[-1][0]] * 5 // 4 + 16:
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


class _Scratch(threading.local):
    """Gather buffers reused across layers and steps, one per (device, dtype), grown to the
    largest gather seen. A fresh multi-MB tensor per layer costs the CPU more than the copy
    into it: the allocator maps new pages and the kernel faults each one in (measured here,
    36 decodes x 4 layers: 19 ms of attention with fresh buffers, 8 ms reusing them)."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def take(self, numel: int, like: torch.Tensor) -> torch.Tensor:
        key = (like.device, like.dtype)
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < numel:
            with torch.inference_mode(False):  # usable inside and outside inference mode
                buf = torch.empty(numel, dtype=like.dtype, device=like.device)
            self.buffers[key] = buf
        return buf[:numel]


_scratch = _Scratch()


@dataclass
class _DecodeGroup:
    """Decodes of similar length, attended as one padded batch of ``n`` rows of ``L`` keys;
    rows ``start:start + n`` of the step's decodes in bucket order."""

    start: int
    n: int
    length: int  # L = max_blocks * block_size
    blocks: torch.Tensor  # (n * max_blocks,) physical block per (row, logical block)
    stale: torch.Tensor | None  # rows of the gathered (n * L) keys to zero (see below)
    mask: torch.Tensor  # (n, 1, 1, L) key position < seq_len


@dataclass
class _Prefill:
    start: int  # first query row
    q_len: int
    kv_len: int
    blocks: torch.Tensor  # (cdiv(kv_len, block_size),) physical blocks


@dataclass
class _TorchPlan:
    decode_rows: torch.Tensor | None  # (N,) query row of every decode, in bucket order
    decodes: list[_DecodeGroup]
    prefills: list[_Prefill]


def _torch_plan(meta: AttentionMetadata, block_size: int, device: torch.device) -> _TorchPlan:
    """Everything the torch backend derives from the metadata, once per step (every layer has
    the same sequences): decode buckets, their gather indices and masks, the prefill chunks.
    Built from the host lists in a handful of tensors, so a step pays a few copies to the
    device, not a few per bucket.

    K/V are gathered a whole block at a time (one index per ``block_size`` tokens, a few
    times faster than one per token). A padded row's surplus blocks repeat the sequence's own
    first block, and the slots past ``seq_len`` in its last block (or in a repeated partial
    block) are zeroed after the gather: a slot no sequence owns may hold anything, even NaN,
    and a masked NaN still poisons the softmax sum (0 * NaN)."""
    starts, seq_lens, tables = meta.query_start_loc_cpu, meta.seq_lens_cpu, meta.block_table_cpu
    assert starts is not None and seq_lens is not None and tables is not None  # __post_init__
    num_seqs = len(seq_lens)
    decodes = [b for b in range(num_seqs) if starts[b + 1] - starts[b] == 1]
    rows, lens, blocks, stale, spans = [], [], [], [], []
    for group in _length_buckets(decodes, seq_lens):
        width = max(cdiv(seq_lens[b], block_size) for b in group)
        length = width * block_size
        first_block, first_stale = len(blocks), len(stale)
        for i, b in enumerate(group):
            kv_len = seq_lens[b]
            nb = cdiv(kv_len, block_size)
            own = tables[b][:nb]
            blocks += own + own[:1] * (width - nb)  # padding repeats the first block
            base = i * length
            stale += range(base + kv_len, base + nb * block_size)  # past the end, last block
            if kv_len < block_size:  # the surplus copies of a partial first block too
                stale += [base + j * block_size + p
                          for j in range(nb, width) for p in range(kv_len, block_size)]
            rows.append(starts[b])
            lens.append(kv_len)
        spans.append((len(rows) - len(group), len(group), length, first_block, len(blocks),
                      first_stale, len(stale)))
    plan = _TorchPlan(None, [], [])
    if rows:
        plan.decode_rows = torch.tensor(rows, device=device)
        blocks_t = torch.tensor(blocks, device=device)
        stale_t = torch.tensor(stale, dtype=torch.long, device=device)
        lens_t = torch.tensor(lens, device=device)
        positions = torch.arange(max(span[2] for span in spans), device=device)
        for start, n, length, b0, b1, s0, s1 in spans:
            mask = positions[:length][None, :] < lens_t[start:start + n, None]  # (n, L)
            plan.decodes.append(_DecodeGroup(start, n, length, blocks_t[b0:b1],
                                             stale_t[s0:s1] if s1 > s0 else None,
                                             mask[:, None, None, :]))
    plan.prefills = [
        _Prefill(starts[b], starts[b + 1] - starts[b], seq_lens[b],
                 torch.tensor(tables[b][: cdiv(seq_lens[b], block_size)], device=device))
        for b in range(num_seqs) if starts[b + 1] - starts[b] > 1]
    return plan


def torch_paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Vectorised reference. Decodes (query_len 1) are the many, so they go as padded
    batches of similar KV length; prefill chunks are few per step (the token budget caps
    them), so each is one masked attention. Both gather K/V through the block table with
    ``index_select`` and call ``scaled_dot_product_attention``."""
    # Imported here: torch.nn.attention.bias pulls in Triton, which importing this module
    # must not (tests/test_model.py checks it).
    from torch.nn.attention.bias import causal_lower_right

    _, num_q_heads, head_dim = query.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group_size = num_q_heads // num_kv_heads
    # Gathers read 2-D views, one row per block: index_select copies a 2-D row as one
    # memcpy, while on the 4-D cache it walks every element (about 5x slower here).
    k_rows, v_rows = k_cache.view(num_blocks, -1), v_cache.view(num_blocks, -1)
    key = ("torch", block_size, query.device)
    plan = meta.per_step.get(key)
    if plan is None:
        plan = meta.per_step[key] = _torch_plan(meta, block_size, query.device)
    out = torch.empty_like(query)

    if plan.decode_rows is not None:  # one gather of the decodes' queries, one scatter back
        q_all = query.index_select(0, plan.decode_rows)  # (N, Hq, D), bucket order
        o_all = torch.empty_like(q_all)
    for g in plan.decodes:
        shape = (g.n, g.length, num_kv_heads, head_dim)
        rows = g.blocks.shape[0]
        buf = _scratch.take(2 * rows * k_rows.shape[1], k_cache)  # K then V, reused
        k = torch.index_select(k_rows, 0, g.blocks, out=buf[:buf.numel() // 2].view(rows, -1))
        v = torch.index_select(v_rows, 0, g.blocks, out=buf[buf.numel() // 2:].view(rows, -1))
        k, v = k.view(shape), v.view(shape)  # (n, L, Hkv, D) each
        if g.stale is not None:
            k.view(-1, num_kv_heads, head_dim).index_fill_(0, g.stale, 0.0)
            v.view(-1, num_kv_heads, head_dim).index_fill_(0, g.stale, 0.0)
        q = q_all[g.start : g.start + g.n].view(g.n, num_kv_heads, group_size, head_dim)
        o = F.scaled_dot_product_attention(
            q, k.transpose(1, 2), v.transpose(1, 2),  # (n, Hkv, g, D) x (n, Hkv, L, D)
            attn_mask=g.mask, scale=scale)  # (n, Hkv, g, D)
        o_all[g.start : g.start + g.n] = o.view(g.n, num_q_heads, head_dim)
    if plan.decode_rows is not None:
        out.index_copy_(0, plan.decode_rows, o_all)

    for p in plan.prefills:
        q_len, kv_len = p.q_len, p.kv_len
        k = k_rows.index_select(0, p.blocks).view(-1, num_kv_heads, head_dim)[:kv_len]  # (L,Hkv,D)
        v = v_rows.index_select(0, p.blocks).view(-1, num_kv_heads, head_dim)[:kv_len]  # (L,Hkv,D)
        q = query[p.start : p.start + q_len].view(q_len, num_kv_heads, group_size, head_dim)
        # Query i sits at position kv_len - q_len + i: the causal mask is aligned to the
        # *lower right* (the end of the sequence's KV). ``causal_lower_right`` says so without
        # materialising a (q, L) mask, which lets SDPA pick its fused causal kernel: it skips
        # the masked upper triangle instead of computing and discarding it. (A dense boolean
        # mask would take the unfused path and make one whole-prompt step cost more than the
        # same prompt in chunks: a CPU artefact, not physics.)
        # A whole prompt (q_len == kv_len) is plain causal: the same kernel, no mask object.
        causal = {"is_causal": True} if q_len == kv_len else {
            "attn_mask": causal_lower_right(q_len, kv_len)}
        o = F.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3),  # (Hkv, g, q, D)
            k.transpose(0, 1)[:, None].expand(-1, group_size, -1, -1),  # (Hkv, g, L, D)
            v.transpose(0, 1)[:, None].expand(-1, group_size, -1, -1),  # (Hkv, g, L, D)
            scale=scale, **causal)  # (Hkv, g, q, D)
        out[p.start : p.start + q_len] = o.permute(2, 0, 1, 3).reshape(
            q_len, num_q_heads, head_dim).to(query.dtype)  # (q, Hq, D)
    return out
