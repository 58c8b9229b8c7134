"""Probes that only look: what the KV manager held between ``schedule()`` and the model call,
the terms of the chunk-size rule as the scheduler saw them, what went through the model
(PyTorch forward hooks), the Triton kernels' launches, and random paged batches to time
attention on. None of them changes what the engine computes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from chunkprefill.checks import cdiv
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.trace import TraceRequest, run_trace


@dataclass
class PoolSnapshot:
    """The KV manager's bookkeeping during one step (after ``schedule()``, before the model
    runs and before finished requests free their blocks).

    ``block_tables``: every request holding blocks -> its physical block ids, in logical
    order. ``kv_lens``: tokens each holder will have in the cache once this step's KV is
    written. ``num_scheduled_tokens`` / ``num_computed_tokens``: this step's work (n tokens
    starting at position c). ``slot_mapping``: per scheduled request, the flat cache slot of
    each of its new tokens, from ``KVCacheManager.slot_mapping``."""

    step: int
    block_tables: dict[str, list[int]]
    kv_lens: dict[str, int]
    num_scheduled_tokens: dict[str, int]
    num_computed_tokens: dict[str, int]
    slot_mapping: dict[str, list[int]]
    waiting: list[str] = field(default_factory=list)
    num_free_blocks: int = 0


def snapshot_step(step: int, scheduler: Scheduler, out: SchedulerOutput) -> PoolSnapshot:
    """Copy the pool's state right after ``scheduler.schedule()`` returned ``out``."""
    kvm = scheduler.kv_cache_manager
    tables = {rid: list(t) for rid, t in kvm.block_tables.items()}
    slots = {rid: kvm.slot_mapping(rid, c, c + out.num_scheduled_tokens[rid])
             for rid, c in out.num_computed_tokens.items()}
    return PoolSnapshot(
        step=step,
        block_tables=tables,
        kv_lens={rid: scheduler.requests[rid].num_computed_tokens for rid in tables},
        num_scheduled_tokens=dict(out.num_scheduled_tokens),
        num_computed_tokens=dict(out.num_computed_tokens),
        slot_mapping=slots,
        waiting=[r.request_id for r in scheduler.waiting],
        num_free_blocks=kvm.num_free_blocks,
    )


def block_owners(snapshot: PoolSnapshot, num_blocks: int) -> list[tuple[str, int] | None]:
    """Physical block id -> (request, logical block index) or None when free. Raises if two
    requests claim one block (the pool must never hand a block out twice)."""
    owners: list[tuple[str, int] | None] = [None] * num_blocks
    for rid, table in snapshot.block_tables.items():
        for j, blk in enumerate(table):
            if owners[blk] is not None:
                raise ValueError(f"block {blk} is held by both {owners[blk][0]!r} and {rid!r}")
            owners[blk] = (rid, j)
    return owners


@dataclass(frozen=True)
class ChunkTerms:
    """One scheduled (step, request): the ``n`` tokens it got and the terms of
    ``min(owed, threshold, budget left, max_model_len - 1 - computed)`` as they stood when
    the scheduler reached it (``threshold`` only where it was in force and below ``owed``)."""

    step: int
    request_id: str
    n: int
    terms: dict[str, int]


def chunk_terms(requests: Sequence[TraceRequest], scheduler_config: SchedulerConfig,
                cache_config: CacheConfig) -> list[ChunkTerms]:
    """``run_trace`` with a scheduler that notes, before each ``schedule()``, what every
    request owes and the threshold the scheduler itself puts in force; "budget left" is the
    budget minus the tokens of those scheduled before it (the dict is in scheduling order)."""
    noted: list[ChunkTerms] = []
    calls = [0]  # schedule() calls so far: the step number

    class Noting(Scheduler):
        def schedule(self) -> SchedulerOutput:
            threshold = self._long_prefill_threshold()
            owed = {rid: r.num_owed_tokens for rid, r in self.requests.items()}
            out = super().schedule()
            left, step = self.scheduler_config.max_num_batched_tokens, calls[0]
            calls[0] += 1
            for rid, n in out.num_scheduled_tokens.items():
                terms = {"owed": owed[rid], "budget left": left,
                         "max_model_len": self.max_model_len - 1 - out.num_computed_tokens[rid]}
                if 0 < threshold < owed[rid]:
                    terms["threshold"] = threshold
                noted.append(ChunkTerms(step, rid, n, terms))
                left -= n
            return out

    run_trace(requests, scheduler_config, cache_config, scheduler_cls=Noting)
    return noted


@dataclass
class ForwardCall:
    """What one ``model.forward`` call (one engine step) put through the model."""

    input_ids: Any  # (T,) int64: the tokens computed this step
    positions: Any  # (T,) int64: their absolute positions (what RoPE saw)
    hidden: Any  # (T, hidden): final-norm hidden states (logits = model.compute_logits)


@contextmanager
def capture_forward(model: Any) -> Iterator[list[ForwardCall]]:
    """Record every forward of a ``ToyTransformer`` with forward hooks on its token
    embedding, rotary table and final norm (public ``nn.Module`` hooks: nothing changes in
    what the model computes). Yields a list that grows by one ``ForwardCall`` per call."""
    calls: list[ForwardCall] = []
    pending: dict[str, Any] = {}

    def on_embed(_mod: Any, args: tuple, _out: Any) -> None:
        pending["ids"] = args[0].detach().clone()

    def on_rotary(_mod: Any, args: tuple, _out: Any) -> None:
        pending["pos"] = args[0].detach().clone()

    def on_norm(_mod: Any, _args: tuple, out: Any) -> None:
        if "ids" in pending and "pos" in pending:  # the final norm (layer norms are inside)
            calls.append(ForwardCall(pending.pop("ids"), pending.pop("pos"),
                                     out.detach().clone()))

    handles = [model.embed_tokens.register_forward_hook(on_embed),
               model.rotary.register_forward_hook(on_rotary),
               model.norm.register_forward_hook(on_norm)]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


def random_paged_batch(query_lens: Sequence[int], kv_lens: Sequence[int], num_q_heads: int,
                       num_kv_heads: int, head_dim: int, block_size: int, dtype: Any = None,
                       device: Any = "cpu", seed: int = 0) -> dict[str, Any]:
    """A random mixed batch for timing attention: queries (T, Hq, D), K/V caches whose blocks
    are handed out in a shuffled order (block tables are not ranges, as in a live run), the
    block tables and the ``AttentionMetadata``. Unused cache slots hold zeros."""
    import torch

    from chunkprefill.attention import build_attention_metadata

    dtype = dtype or torch.float32
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(cdiv(kv, block_size) for kv in kv_lens) + 1
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [[order.pop() for _ in range(cdiv(kv, block_size))] for kv in kv_lens]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    query = torch.randn(sum(query_lens), num_q_heads, head_dim, generator=gen)
    computed = [kv - q for q, kv in zip(query_lens, kv_lens, strict=True)]
    meta, _ = build_attention_metadata(list(query_lens), computed, tables, block_size, device)
    return {"query": query.to(device=device, dtype=dtype), "k_cache": k_cache,
            "v_cache": v_cache, "block_tables": tables, "meta": meta,
            "scale": head_dim ** -0.5}


class _CountedKernel:
    """Stands in for a ``triton.jit`` kernel in its module: ``kernel[grid](...)`` launches the
    real kernel and counts one launch; every other attribute is the real kernel's."""

    def __init__(self, kernel: Any, name: str, counts: dict[str, int]) -> None:
        self._kernel, self._name, self._counts = kernel, name, counts

    def __getitem__(self, grid: Any) -> Any:
        launch = self._kernel[grid]

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[self._name] += 1
            return launch(*args, **kwargs)

        return counted

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._kernel, attr)


@contextmanager
def count_kernel_launches() -> Iterator[dict[str, int]]:
    """Count the launches of the two Triton kernels while the block runs: ``{"store": n,
    "attention": m}`` (``reshape_and_cache_kernel``, ``unified_attention_kernel``). The
    wrappers look their kernel up in their module at every call, so the kernel is swapped
    there for a counting stand-in and put back afterwards; what runs is unchanged."""
    import importlib

    kv_store = importlib.import_module("chunkprefill.kernels.kv_store")
    attention = importlib.import_module("chunkprefill.kernels.unified_attention")
    counts = {"store": 0, "attention": 0}
    slots = ((kv_store, "reshape_and_cache_kernel", "store"),
             (attention, "unified_attention_kernel", "attention"))
    originals = [getattr(module, attr) for module, attr, _ in slots]
    for (module, attr, name), kernel in zip(slots, originals, strict=True):
        setattr(module, attr, _CountedKernel(kernel, name, counts))
    try:
        yield counts
    finally:
        for (module, attr, _), kernel in zip(slots, originals, strict=True):
            setattr(module, attr, kernel)
