"""Attention over the paged KV cache for one flattened, mixed batch.

A step's batch is a concatenation of sequences: some are prefill chunks (many tokens, at any
offset into their prompt), most are decodes (one token). All of them are described by one
``AttentionMetadata`` (vLLM's names), so one attention call per layer serves the whole batch:

    query_start_loc  [B+1] int32  sequence b owns query rows query_start_loc[b]:query_start_loc[b+1]
    seq_lens         [B]   int32  KV length of sequence b *including* this step's tokens
    block_table      [B, max_blocks] int32  logical block j of sequence b -> physical block
    slot_mapping     [T]   int64  where token t's K/V is written: block * block_size + offset

Causality inside a chunk is aligned to the *end* of each sequence's KV: query i of a sequence
with query_len q and seq_len L sits at absolute position L - q + i and sees keys [0, L - q + i].

Backends: ``"torch"`` (vectorised PyTorch, the CPU default) and ``"triton"`` (the kernels in
``chunkprefill.kernels``, imported lazily so importing this module never imports Triton).
``ref_paged_attention`` is the slow loop-over-sequences ground truth the tests use.
"""

from __future__ import annotations

import bisect
import importlib.util
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from chunkprefill.checks import cdiv

BACKENDS = ("torch", "triton")


@dataclass
class AttentionMetadata:
    """Everything an attention backend needs to find each query's keys in the paged cache.

    Built once per step (``build_attention_metadata``) and shared by all layers.
    """

    query_start_loc: torch.Tensor  # (B + 1,) int32, cumulative query lengths, starts at 0
    seq_lens: torch.Tensor  # (B,) int32, KV length incl. this step's tokens
    block_table: torch.Tensor  # (B, max_blocks) int32, padded with 0
    slot_mapping: torch.Tensor  # (T,) int64, cache slot of each new token (negative = skip)
    max_query_len: int
    max_seq_len: int
    # Host copies of the two length arrays, as lists (vLLM keeps ``query_start_loc_cpu`` and
    # ``seq_lens_cpu`` too): Python that needs a length reads these. ``.tolist()`` on a GPU
    # tensor would wait for the GPU to finish everything queued before it, every layer.
    query_start_loc_cpu: list[int] | None = None
    seq_lens_cpu: list[int] | None = None
    block_table_cpu: list[list[int]] | None = None  # vLLM's BlockTable keeps one too
    # What a backend derives from this metadata once per step and every layer reuses (the
    # torch backend's gather plan); filled on the first layer's call.
    per_step: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.query_start_loc_cpu is None:  # built by hand: copy once, here, not per layer
            self.query_start_loc_cpu = [int(x) for x in self.query_start_loc.tolist()]
        if self.seq_lens_cpu is None:
            self.seq_lens_cpu = [int(x) for x in self.seq_lens.tolist()]
        if self.block_table_cpu is None:
            self.block_table_cpu = self.block_table.tolist()

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.slot_mapping.shape[0]

    def for_rows(self, rows: list[int]) -> AttentionMetadata:
        """The metadata for attending with only these query rows (ascending), each as its own
        1-token query that sees the keys up to its own position, as a decode does. What the
        last layer needs when only some rows' outputs are read (the rows that sample)."""
        starts, seq_lens = self.query_start_loc_cpu, self.seq_lens_cpu
        assert starts is not None and seq_lens is not None  # set in __post_init__
        seqs, lens = [], []
        for r in rows:
            b = bisect.bisect_right(starts, r) - 1  # the sequence row r belongs to
            if not 0 <= b < len(seq_lens) or r >= starts[-1]:
                raise ValueError(f"row {r} is outside the batch's {starts[-1]} query rows")
            seqs.append(b)
            lens.append(seq_lens[b] - (starts[b + 1] - 1 - r))  # its position + 1
        if not rows:
            raise ValueError("rows is empty: attend with at least one query row")
        dev = self.seq_lens.device
        idx = torch.tensor(seqs, dtype=torch.long, device=dev)
        return AttentionMetadata(
            query_start_loc=torch.arange(len(rows) + 1, dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(lens, dtype=torch.int32, device=dev),
            block_table=self.block_table.index_select(0, idx),
            slot_mapping=self.slot_mapping[torch.tensor(rows, dtype=torch.long, device=dev)],
            max_query_len=1, max_seq_len=max(lens),
            query_start_loc_cpu=list(range(len(rows) + 1)), seq_lens_cpu=lens,
            block_table_cpu=[self.block_table_cpu[b] for b in seqs])  # type: ignore[index]


def build_attention_metadata(
    query_lens: list[int],
    num_computed_tokens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    device: torch.device | str | None = None,
) -> tuple[AttentionMetadata, torch.Tensor]:
    """Turn the scheduler's per-request bookkeeping into tensors (pure bookkeeping, no model).

    Sequence b schedules ``query_lens[b]`` tokens at positions
    ``num_computed_tokens[b] ... num_computed_tokens[b] + query_lens[b] - 1``; its block table
    must already cover them. Returns the metadata and ``positions`` (T,) int64 for RoPE.
    """
    num_seqs = len(query_lens)
    if num_seqs == 0:
        raise ValueError("query_lens is empty: a step needs at least one scheduled sequence")
    if len(num_computed_tokens) != num_seqs or len(block_tables) != num_seqs:
        raise ValueError(
            f"query_lens ({num_seqs}), num_computed_tokens ({len(num_computed_tokens)}) and "
            f"block_tables ({len(block_tables)}) must have one entry per sequence"
        )
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    per_seq = zip(query_lens, num_computed_tokens, block_tables, strict=True)
    for b, (q, c, table) in enumerate(per_seq):
        if q < 1:
            raise ValueError(f"query_lens[{b}] must be >= 1, got {q}")
        if c < 0:
            raise ValueError(f"num_computed_tokens[{b}] must be >= 0, got {c}")
        if len(table) * block_size < c + q:
            raise ValueError(
                f"block_tables[{b}] has {len(table)} blocks ({len(table) * block_size} slots) "
                f"but sequence {b} needs {c + q} slots (num_computed_tokens + query_len)"
            )
        if table and min(table) < 0:
            raise ValueError(f"block_tables[{b}] holds a negative block id: {table}")

    # Built on the CPU (host bookkeeping), moved to the device once at the end.
    starts_cpu = list(itertools.accumulate(query_lens, initial=0))  # (B + 1,) host copy
    seq_lens_cpu = [c + q for c, q in zip(num_computed_tokens, query_lens)]  # (B,) host copy
    q_lens = torch.tensor(query_lens, dtype=torch.int64)  # (B,)
    computed = torch.tensor(num_computed_tokens, dtype=torch.int64)  # (B,)
    query_start_loc = torch.zeros(num_seqs + 1, dtype=torch.int64)  # (B + 1,)
    torch.cumsum(q_lens, 0, out=query_start_loc[1:])
    seq_lens = computed + q_lens  # (B,)

    max_blocks = max(1, max(len(t) for t in block_tables))
    block_table = torch.tensor([list(t) + [0] * (max_blocks - len(t)) for t in block_tables],
                               dtype=torch.int64)  # (B, max_blocks), one copy for all rows

    num_tokens = starts_cpu[-1]
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs), q_lens)  # (T,)
    offset_in_chunk = torch.arange(num_tokens) - query_start_loc[seq_of_token]  # (T,)
    positions = computed[seq_of_token] + offset_in_chunk  # (T,)
    physical_block = block_table[seq_of_token, positions // block_size]  # (T,)
    slot_mapping = physical_block * block_size + positions % block_size  # (T,)

    meta = AttentionMetadata(
        query_start_loc=query_start_loc.to(device=device, dtype=torch.int32),
        seq_lens=seq_lens.to(device=device, dtype=torch.int32),
        block_table=block_table.to(device=device, dtype=torch.int32),
        slot_mapping=slot_mapping.to(device=device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens_cpu),
        query_start_loc_cpu=starts_cpu,
        seq_lens_cpu=seq_lens_cpu,
        block_table_cpu=[list(t) for t in block_tables],
    )
    return meta, positions.to(device=device)


def default_backend(device: torch.device | str | None = None) -> str:
    """``"triton"`` on CUDA when Triton is installed, else ``"torch"`` (the CPU has no compiler
    for Triton; the interpreter is for tests, far too slow to serve)."""
    device = torch.device(device if device is not None else "cpu")
    if device.type == "cuda" and importlib.util.find_spec("triton") is not None:
        return "triton"
    return "torch"


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _check_cache_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(
            "k_cache and v_cache must both be (num_blocks, block_size, num_kv_heads, head_dim), "
            f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache dtype {k_cache.dtype} != v_cache dtype {v_cache.dtype}")


# --------------------------------------------------------------------------- write K/V


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str = "torch",
    check: bool = True,
) -> None:
    """Store this step's K/V (T, num_kv_heads, head_dim) in the paged caches, token t at flat
    slot ``slot_mapping[t]`` (negative = padding, skipped). In place; same on every backend.
    ``check=False`` skips the argument checks (the model checks its first layer's, once)."""
    _check_backend(backend)
    if backend == "triton":
        from chunkprefill.kernels.kv_store import reshape_and_cache

        reshape_and_cache(key, value, k_cache, v_cache, slot_mapping, check=check)
        return
    if check:
        _check_write_inputs(key, value, k_cache, v_cache, slot_mapping)
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    k_flat = k_cache.view(num_blocks * block_size, num_kv_heads, head_dim)  # (slots, Hkv, D)
    v_flat = v_cache.view(num_blocks * block_size, num_kv_heads, head_dim)  # (slots, Hkv, D)
    if slot_mapping.device.type == "cpu" and (slot_mapping.numel() == 0
                                              or int(slot_mapping.min()) >= 0):  # no padding
        k_flat.index_copy_(0, slot_mapping, key)  # (on a GPU, min() would be a sync)
        v_flat.index_copy_(0, slot_mapping, value)
        return
    keep = slot_mapping >= 0  # (T,)
    slots = slot_mapping[keep]  # (T_kept,)
    k_flat[slots] = key[keep]
    v_flat[slots] = value[keep]


def _check_write_inputs(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                        v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    _check_cache_pair(k_cache, v_cache)
    if key.shape != value.shape or key.dim() != 3 or key.shape[1:] != k_cache.shape[2:]:
        raise ValueError(
            f"key/value must be (T, {k_cache.shape[2]}, {k_cache.shape[3]}) to match the cache, "
            f"got {tuple(key.shape)} and {tuple(value.shape)}"
        )
    if key.dtype != k_cache.dtype or value.dtype != v_cache.dtype:
        raise ValueError(f"key/value dtype {key.dtype} must equal the cache dtype {k_cache.dtype}")
    if slot_mapping.dtype != torch.int64 or slot_mapping.shape != (key.shape[0],):
        raise ValueError(
            f"slot_mapping must be int64 of shape ({key.shape[0]},), "
            f"got {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
        )


# --------------------------------------------------------------------------- attention


def _check_attention_inputs(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata
) -> None:
    _check_cache_pair(k_cache, v_cache)
    if query.dim() != 3 or query.shape[2] != k_cache.shape[3]:
        raise ValueError(
            f"query must be (T, num_q_heads, {k_cache.shape[3]}), got {tuple(query.shape)}"
        )
    if query.shape[1] % k_cache.shape[2]:
        raise ValueError(
            f"num_q_heads ({query.shape[1]}) must be a multiple of num_kv_heads "
            f"({k_cache.shape[2]})"
        )
    if query.dtype != k_cache.dtype:
        raise ValueError(f"query dtype {query.dtype} must equal the cache dtype {k_cache.dtype}")
    if meta.query_start_loc.shape != (meta.num_seqs + 1,):
        raise ValueError(
            f"query_start_loc must have num_seqs + 1 = {meta.num_seqs + 1} entries, "
            f"got {tuple(meta.query_start_loc.shape)}"
        )
    if meta.block_table.dim() != 2 or meta.block_table.shape[0] != meta.num_seqs:
        raise ValueError(
            f"block_table must be (num_seqs={meta.num_seqs}, max_blocks), "
            f"got {tuple(meta.block_table.shape)}"
        )


def paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    backend: str = "torch",
    check: bool = True,
) -> torch.Tensor:
    """Causal attention of every query row (T, num_q_heads, head_dim) over its own sequence's
    keys, read from the paged cache through ``meta.block_table``. Returns (T, num_q_heads,
    head_dim). This step's K/V must already be in the cache (``write_kv`` first).
    ``check=False`` skips the argument checks (the model checks its first layer's, once)."""
    _check_backend(backend)
    if backend == "triton":
        from chunkprefill.kernels.unified_attention import unified_attention

        return unified_attention(
            query, k_cache, v_cache,
            query_start_loc=meta.query_start_loc,
            seq_lens=meta.seq_lens,
            block_table=meta.block_table,
            max_query_len=meta.max_query_len,
            scale=scale,
            check=check,
        )
    if check:
        _check_attention_inputs(query, k_cache, v_cache, meta)
    return _torch_paged_attention(query, k_cache, v_cache, meta, scale)


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


def _torch_paged_attention(
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


def ref_paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_lens: list[int],
    kv_lens: list[int],
    block_tables: list[list[int]] | torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Ground truth for tests (vLLM's ``ref_paged_attn`` idea): one sequence at a time, gather
    its keys block by block, repeat K/V heads for GQA, dense causal softmax in float32.
    Slow and obvious on purpose; independent of ``AttentionMetadata``."""
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    group = query.shape[1] // num_kv_heads
    outputs = []
    start = 0
    for b, (q_len, kv_len) in enumerate(zip(query_lens, kv_lens, strict=True)):
        q = query[start : start + q_len].float()  # (q, Hq, D)
        start += q_len
        n_blk = cdiv(kv_len, block_size)
        table = [int(x) for x in block_tables[b][:n_blk]]
        k = torch.cat([k_cache[blk] for blk in table])[:kv_len].float()  # (L, Hkv, D)
        v = torch.cat([v_cache[blk] for blk in table])[:kv_len].float()  # (L, Hkv, D)
        k = k.repeat_interleave(group, dim=1)  # (L, Hq, D)
        v = v.repeat_interleave(group, dim=1)  # (L, Hq, D)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale  # (Hq, q, L)
        # Query i sits at position kv_len - q_len + i: keep keys k <= that (a shifted tril).
        mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)
        scores = scores.masked_fill(~mask.to(scores.device), float("-inf"))
        o = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v)  # (q, Hq, D)
        outputs.append(o.to(query.dtype))
    return torch.cat(outputs)
