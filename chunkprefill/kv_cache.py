"""Paged KV cache bookkeeping (no tensors: the model executor owns those).

The cache is ``num_blocks`` fixed-size blocks of ``block_size`` token slots. A request's
``block_table`` lists the blocks holding its tokens in order, so its KV need not be
contiguous and grows one block at a time: that is what lets a prefill be cut into
chunks whose KV stays in the cache for later chunks to read.

Prefix caching (vLLM V1's automatic prefix caching, ``enable_prefix_caching=True``): a
*full* block is named by a hash that chains its parent block's hash and its own token
ids, so equal hashes mean equal prefixes up to and including the block, hence equal KV.
A waiting request looks up its leading blocks by hash and adopts the ones found instead
of computing them. Blocks are reference-counted; a freed block keeps its hash in the
free queue (it still counts as free) until an allocation reuses it and evicts the hash."""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from chunkprefill.checks import cdiv
from chunkprefill.config import CacheConfig
from chunkprefill.request import Request

BlockHash = bytes

__all__ = ["BlockPool", "KVCacheManager"]


def hash_block_tokens(parent_hash: BlockHash | None, token_ids: Sequence[int]) -> BlockHash:
    """sha256 over a canonical encoding of (parent hash, token ids). Stable across runs and
    processes, unlike Python's salted ``hash()``; the parent makes the hash name the
    whole prefix, not just this block's tokens."""
    h = hashlib.sha256(parent_hash or b"root")
    h.update(b"|" + ",".join(map(str, token_ids)).encode())
    return h.digest()


def block_hashes_of(token_ids: Sequence[int], block_size: int,
                    start: Sequence[BlockHash] = ()) -> list[BlockHash]:
    """The chained hashes of every full block of ``token_ids`` (a partial last block has
    none). ``start``: hashes already known for the leading blocks, extended in place."""
    hashes = list(start)
    for i in range(len(hashes), len(token_ids) // block_size):
        parent = hashes[-1] if hashes else None
        hashes.append(hash_block_tokens(parent, token_ids[i * block_size:(i + 1) * block_size]))
    return hashes


@dataclass
class PrefixCacheStats:
    """vLLM's ``PrefixCacheStats``: recorded once per admission from the waiting queue.
    ``queries`` counts the request's tokens (``num_tokens``), ``hits`` its cached tokens;
    requests coming back from preemption are counted apart, as vLLM does."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits


class BlockPool:
    """Blocks, their reference counts and hashes, and the free queue.

    The free queue is in eviction order: allocation takes from the front. With prefix
    caching on it follows vLLM: a freed block with no hash goes to the front (nothing to
    lose), a cached one to the back, so the least recently freed cached blocks are
    evicted first; a hit on a free cached block takes it out of the queue (an ordered
    dict: O(1) removal from the middle). Without prefix caching the queue is a plain
    FIFO deque, freed blocks go to the back (only counts are observable then), and
    reference counts are not kept (every held block has exactly one user): the
    simulator's hot path pays nothing for the feature."""

    def __init__(self, num_blocks: int, enable_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._free: OrderedDict[int, None] | deque[int] = (
            OrderedDict.fromkeys(range(num_blocks)) if enable_caching
            else deque(range(num_blocks)))
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        # hash -> the block ids cached under it, oldest first (two requests can compute
        # the same block before either is cached; block tables never change, so both stay)
        self.cached_block_hash_to_block: dict[BlockHash, dict[int, None]] = {}

    @property
    def num_free_blocks(self) -> int:
        """Free blocks, cached ones with no user included (they can be reused)."""
        return len(self._free)

    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be taken) first."""
        return list(self._free)

    def get_cached_block(self, block_hash: BlockHash) -> int | None:
        ids = self.cached_block_hash_to_block.get(block_hash)
        return next(iter(ids)) if ids else None

    def get_new_blocks(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, evicting their hashes."""
        free = self._free
        if n > len(free):
            raise ValueError(f"cannot take {n} blocks: only {len(free)} free")
        if not self.enable_caching:
            take = free.popleft  # type: ignore[union-attr]
            return [take() for _ in range(n)]
        pop, ref = free.popitem, self.ref_cnt  # type: ignore[union-attr]
        taken = [pop(last=False)[0] for _ in range(n)]
        for b in taken:
            ref[b] = 1
            self._evict(b)
        return taken

    def _evict(self, block_id: int) -> None:
        h = self.block_hash[block_id]
        if h is None:
            return
        ids = self.cached_block_hash_to_block[h]
        del ids[block_id]
        if not ids:
            del self.cached_block_hash_to_block[h]
        self.block_hash[block_id] = None

    def touch(self, block_ids: Sequence[int]) -> None:
        """A prefix hit: one more user; a free cached block leaves the free queue."""
        for b in block_ids:
            if self.ref_cnt[b] == 0:
                del self._free[b]
            self.ref_cnt[b] += 1

    def cache_block(self, block_id: int, block_hash: BlockHash) -> None:
        self.block_hash[block_id] = block_hash
        self.cached_block_hash_to_block.setdefault(block_hash, {})[block_id] = None

    def free_blocks(self, ordered_block_ids: Sequence[int]) -> None:
        """One user fewer for each block, given in eviction order (first evicted first)."""
        if not self.enable_caching:
            self._free.extend(ordered_block_ids)  # type: ignore[union-attr]
            return
        ref, free = self.ref_cnt, self._free
        evict_first: list[int] = []
        for b in ordered_block_ids:
            ref[b] -= 1
            if ref[b] == 0:
                if self.block_hash[b] is None:
                    evict_first.append(b)
                else:
                    free[b] = None  # cached: to the back, evicted last
        for b in reversed(evict_first):  # to the front, keeping their order
            free[b] = None
            free.move_to_end(b, last=False)  # type: ignore[union-attr]


class KVCacheManager:
    """Owns every request's ``block_table``; the scheduler asks it for room."""

    def __init__(self, cache_config: CacheConfig) -> None:
        self.block_size = cache_config.block_size
        self.enable_caching = cache_config.enable_prefix_caching
        self.block_pool = BlockPool(cache_config.num_blocks, self.enable_caching)
        self.block_tables: dict[str, list[int]] = {}
        self.prefix_cache_stats = PrefixCacheStats()
        self._block_hashes: dict[str, list[BlockHash]] = {}  # per request, full blocks
        self._num_cached_block: dict[str, int] = {}  # leading blocks of a table with a hash

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (free cached blocks count as free)."""
        pool = self.block_pool
        return 1.0 - pool.num_free_blocks / pool.num_blocks

    def num_blocks_needed(self, num_tokens: int) -> int:
        return cdiv(num_tokens, self.block_size)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables.get(request_id, [])

    def block_hashes(self, request: Request) -> list[BlockHash]:
        """Hashes of the full blocks of the request's tokens (prompt + outputs so far),
        extended as tokens are appended."""
        known = self._block_hashes.get(request.request_id, [])
        if len(known) < request.num_tokens // self.block_size:
            known = block_hashes_of(request.all_token_ids, self.block_size, known)
            self._block_hashes[request.request_id] = known
        return known

    # -- prefix caching ---------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """The longest run of leading cached blocks and the tokens they hold, capped at
        ``num_tokens - 1`` tokens (vLLM's ``max_cache_hit_length``): the last token must
        run through the model to give logits, and hits are whole blocks, so a fully
        cached prompt recomputes its whole last block. Looks only; takes nothing."""
        if not self.enable_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        pool, hit = self.block_pool, []
        for h in self.block_hashes(request)[:max_blocks]:
            b = pool.get_cached_block(h)
            if b is None:
                break  # chained hashes: no later block can hit either
            hit.append(b)
        return hit, len(hit) * self.block_size

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        if self.enable_caching:
            self.prefix_cache_stats.record(request.num_tokens, num_hits,
                                           preempted=request.num_preemptions > 0)

    def _num_evictable(self, block_ids: Sequence[int]) -> int:
        """Hit blocks that are free now: adopting them takes them from the free queue."""
        ref = self.block_pool.ref_cnt
        return sum(1 for b in block_ids if ref[b] == 0)

    def can_fit_full_sequence(self, request: Request,
                              new_computed_blocks: Sequence[int] = (), reserve: int = 0) -> bool:
        """Admission gate (vLLM's ``full_sequence_must_fit``): admit a waiting request
        only if its *whole* current sequence fits, not just this step's chunk, so that
        chunked prefill does not over-admit and then thrash through preemptions. Hit
        blocks need no new block, except free ones, which leave the free queue.
        ``reserve``: blocks that must stay free besides (the watermark)."""
        held = len(self.get_block_table(request.request_id)) + len(new_computed_blocks)
        need = max(self.num_blocks_needed(request.num_tokens) - held, 0)
        if new_computed_blocks:
            need += self._num_evictable(new_computed_blocks)
        return need + reserve <= self.num_free_blocks

    def num_new_blocks(self, request: Request, num_new_tokens: int,
                       new_computed_blocks: Sequence[int] = ()) -> int:
        """How many blocks ``allocate_slots(request, num_new_tokens, new_computed_blocks)``
        would take from the free queue (a hit on a free cached block takes that block)."""
        held = len(self.get_block_table(request.request_id)) + len(new_computed_blocks)
        total = (request.num_computed_tokens + len(new_computed_blocks) * self.block_size
                 + num_new_tokens)
        need = max(0, self.num_blocks_needed(total) - held)
        return need + (self._num_evictable(new_computed_blocks) if new_computed_blocks else 0)

    def allocate_slots(self, request: Request, num_new_tokens: int,
                       new_computed_blocks: Sequence[int] = (), *,
                       full_sequence_must_fit: bool = False,
                       watermark_blocks: int = 0) -> list[int] | None:
        """Grow ``request``'s block table to cover ``num_computed_tokens`` + the hit
        (``new_computed_blocks``, whole blocks) + ``num_new_tokens`` tokens. Returns the
        newly taken block ids, or None (taking nothing) if the pool is short. With
        prefix caching on, every block full once this step's tokens are in is cached
        now, so a request scheduled later in the same step can hit it. Admission gates
        (vLLM's arguments): ``full_sequence_must_fit`` (``can_fit_full_sequence``), and
        ``watermark_blocks`` that must stay free after this allocation."""
        if num_new_tokens <= 0:
            raise ValueError(f"num_new_tokens must be >= 1, got {num_new_tokens}")
        if full_sequence_must_fit and not self.can_fit_full_sequence(
                request, new_computed_blocks, reserve=watermark_blocks):
            return None
        if watermark_blocks and (self.num_new_blocks(request, num_new_tokens, new_computed_blocks)
                                 + watermark_blocks > self.num_free_blocks):
            return None
        rid = request.request_id
        table = self.block_tables.get(rid)
        if table is None:
            table = self.block_tables[rid] = []
        # Hits are whole blocks, so they add as many tokens as table entries: the new
        # blocks needed are those of the tokens past them.
        total = request.num_computed_tokens + num_new_tokens
        need = cdiv(total, self.block_size) - len(table)
        if need <= 0 and not new_computed_blocks:  # a decode whose last block has room
            if self.enable_caching:
                self._cache_full_blocks(request, table, min(total, request.num_tokens))
            return []
        # a hit on a free cached block takes it from the free queue: count it as taken
        taken = need + (self._num_evictable(new_computed_blocks) if new_computed_blocks else 0)
        if taken > self.block_pool.num_free_blocks:
            if not table:
                del self.block_tables[rid]
            return None
        if new_computed_blocks:  # adopt the hit first, so the allocation cannot evict it
            total += len(new_computed_blocks) * self.block_size
            self.block_pool.touch(new_computed_blocks)
            table.extend(new_computed_blocks)
            self._num_cached_block[rid] = len(table)
        new_blocks = self.block_pool.get_new_blocks(need) if need > 0 else []
        table.extend(new_blocks)
        if self.enable_caching:
            self._cache_full_blocks(request, table, min(total, request.num_tokens))
        return new_blocks

    def _cache_full_blocks(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Give a hash to every block that ``num_tokens`` tokens fill and has none yet."""
        rid = request.request_id
        num_cached = self._num_cached_block.get(rid, 0)
        num_full = num_tokens // self.block_size
        if num_full <= num_cached:
            return
        hashes = self.block_hashes(request)
        for i in range(num_cached, num_full):
            self.block_pool.cache_block(table[i], hashes[i])
        self._num_cached_block[rid] = num_full

    def append_blocks(self, request_ids: list[str]) -> None:
        """Take one free block per entry, front of the free list first, and append it to
        that request's table: for a driver that knows the order in which ``schedule()``
        would have allocated them (the simulator's bulk decode steps)."""
        for rid, block in zip(request_ids, self.block_pool.get_new_blocks(len(request_ids)),
                              strict=True):
            self.block_tables[rid].append(block)

    def free(self, request: Request) -> None:
        """Let go of all of a request's blocks (finish or preemption). Tail blocks first,
        as vLLM does, so the tail of a prefix is evicted before its head."""
        rid = request.request_id
        table = self.block_tables.pop(rid, [])
        self._num_cached_block.pop(rid, None)
        if request.is_finished:
            self._block_hashes.pop(rid, None)
        self.block_pool.free_blocks(table[::-1])

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
