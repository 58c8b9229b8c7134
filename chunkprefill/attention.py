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
``chunkprefill.kernels``, imported lazily so importing this module never imports Triton);
the torch backend lives in ``chunkprefill.attention_torch``.
``ref_paged_attention`` is the slow loop-over-sequences ground truth the tests use.
"""

from __future__ import annotations

import bisect
import importlib.util
import itertools
from dataclasses import dataclass, field
from typing import Any

import torch

from chunkprefill.attention_torch import torch_paged_attention
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
    return torch_paged_attention(query, k_cache, v_cache, meta, scale)


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
