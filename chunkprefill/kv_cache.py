"""Paged KV cache bookkeeping (no tensors: the model executor owns those).

The cache is ``num_blocks`` fixed-size blocks of ``block_size`` token slots. A request's
``block_table`` lists the blocks holding its tokens in order, so its KV need not be
contiguous and grows one block at a time: that is what lets a prefill be cut into
chunks whose KV stays in the cache for later chunks to read."""

from __future__ import annotations

from collections import deque

from chunkprefill.config import CacheConfig, cdiv
from chunkprefill.request import Request

__all__ = ["BlockPool", "KVCacheManager", "cdiv"]


class BlockPool:
    """Free list of block ids. FIFO, like vLLM's free-block queue: a freed block goes to
    the back, so recently freed blocks are reused last."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def get_new_blocks(self, n: int) -> list[int]:
        if n > len(self._free):
            raise ValueError(f"cannot take {n} blocks: only {len(self._free)} free")
        take = self._free.popleft
        return [take() for _ in range(n)]

    def free_blocks(self, block_ids: list[int]) -> None:
        self._free.extend(block_ids)


class KVCacheManager:
    """Owns every request's ``block_table``; the scheduler asks it for room."""

    def __init__(self, cache_config: CacheConfig) -> None:
        self.block_size = cache_config.block_size
        self.block_pool = BlockPool(cache_config.num_blocks)
        self.block_tables: dict[str, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks in use."""
        pool = self.block_pool
        return 1.0 - pool.num_free_blocks / pool.num_blocks

    def num_blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables.get(request_id, [])

    def can_fit_full_sequence(self, request: Request) -> bool:
        """Admission gate (vLLM's ``full_sequence_must_fit``): admit a waiting request
        only if its *whole* current sequence fits, not just this step's chunk, so that
        chunked prefill does not over-admit and then thrash through preemptions."""
        held = len(self.get_block_table(request.request_id))
        need = self.num_blocks_needed(request.num_tokens) - held
        return need <= self.num_free_blocks

    def allocate_slots(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Grow ``request``'s block table to cover ``num_computed_tokens + num_new_tokens``
        tokens. Returns the newly taken block ids, or None (taking nothing) if the pool
        is short."""
        if num_new_tokens <= 0:
            raise ValueError(f"num_new_tokens must be >= 1, got {num_new_tokens}")
        table = self.block_tables.get(request.request_id)
        if table is None:
            table = self.block_tables[request.request_id] = []
        need = cdiv(request.num_computed_tokens + num_new_tokens, self.block_size) - len(table)
        if need <= 0:  # the common decode case: the last block still has room
            return []
        if need > self.block_pool.num_free_blocks:
            if not table:
                del self.block_tables[request.request_id]
            return None
        new_blocks = self.block_pool.get_new_blocks(need)
        table.extend(new_blocks)
        return new_blocks

    def append_blocks(self, request_ids: list[str]) -> None:
        """Take one free block per entry, front of the free list first, and append it to
        that request's table: for a driver that knows the order in which ``schedule()``
        would have allocated them (the simulator's bulk decode steps)."""
        for rid, block in zip(request_ids, self.block_pool.get_new_blocks(len(request_ids)),
                              strict=True):
            self.block_tables[rid].append(block)

    def free(self, request: Request) -> None:
        """Return all of a request's blocks (finish or preemption). Tail blocks first,
        as vLLM does, so a future prefix cache would evict the tail first."""
        table = self.block_tables.pop(request.request_id, [])
        self.block_pool.free_blocks(list(reversed(table)))

    def slot_mapping(self, request_id: str, start: int, end: int) -> list[int]:
        """Flat cache slot of each token position in ``[start, end)`` of a request:
        ``block_table[p // block_size] * block_size + p % block_size``."""
        table = self.block_tables[request_id]
        bs = self.block_size
        if end > len(table) * bs:
            raise ValueError(
                f"positions up to {end} need {cdiv(end, bs)} blocks; request "
                f"{request_id!r} holds {len(table)}"
            )
        return [table[p // bs] * bs + p % bs for p in range(start, end)]
