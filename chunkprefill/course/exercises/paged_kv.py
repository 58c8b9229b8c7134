"""Exercises on the paged KV cache (slot mapping, new blocks per chunk, K/V positions loaded).
The right answers come from the package's ``KVCacheManager`` and a run of the real
scheduler, never typed in here."""

from __future__ import annotations

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.kv_cache import KVCacheManager
from chunkprefill.request import Request
from chunkprefill.trace import TraceRequest, run_trace


def slot_scenario() -> KVCacheManager:
    """Exercise 1's cache (block_size 4, 8 blocks, fresh): A computes a 5-token chunk,
    then B a 9-token one, then A 4 more tokens."""
    kvm = KVCacheManager(CacheConfig(block_size=4, num_blocks=8))
    a = Request("A", prompt_token_ids=list(range(9)), max_tokens=1)
    b = Request("B", prompt_token_ids=list(range(9)), max_tokens=1)
    for req, n in ((a, 5), (b, 9), (a, 4)):
        kvm.allocate_slots(req, n)
        req.num_computed_tokens += n
    return kvm


def check_slot(answer: int | None) -> str:
    """Exercise 1: in ``slot_scenario()``, which flat cache slot does A's position 8 (its
    9th token) write its K and V to?"""
    return _verdict(answer, slot_scenario().slot_mapping("A", 8, 9)[0],
                    tr("a fresh pool hands out blocks 0, 1, 2, ... in order; find A's block "
                       "table, then block_table[p // 4] * 4 + p % 4"))


def new_blocks_per_chunk(prompt_len: int, chunk: int, block_size: int) -> list[int]:
    """How many new blocks each chunk of a ``prompt_len`` prompt takes from a fresh pool."""
    kvm = KVCacheManager(CacheConfig(block_size=block_size, num_blocks=prompt_len))
    req = Request("P", prompt_token_ids=list(range(prompt_len)), max_tokens=1)
    out = []
    while req.num_computed_tokens < prompt_len:
        n = min(chunk, prompt_len - req.num_computed_tokens)
        out.append(len(kvm.allocate_slots(req, n) or []))
        req.num_computed_tokens += n
    return out


def check_new_blocks(answer: list[int] | None) -> str:
    """Exercise 2: a 45-token prompt, chunks of 7, block_size 4. How many new blocks does
    each chunk take? Answer a list, one number per chunk."""
    return _verdict(None if answer is None else list(answer), new_blocks_per_chunk(45, 7, 4),
                    tr("after a chunk the request needs ceil(computed / 4) blocks; a chunk "
                       "takes the difference from the last one"))


def kv_read(prompt_len: int, budget: int) -> int:
    """K/V positions attention loads from the cache to prefill one ``prompt_len`` prompt alone
    with ``budget`` tokens a step: the sum over its steps of ``seq_len`` (where the step's
    tokens start, ``num_computed_tokens``, plus the step's own tokens)."""
    steps = run_trace([TraceRequest("P", prompt_len=prompt_len, output_len=1)],
                      SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=1,
                                      max_model_len=max(2 * prompt_len, budget)),
                      CacheConfig(block_size=16, num_blocks=64))
    return sum(s.num_computed_tokens["P"] + s.num_scheduled_tokens["P"] for s in steps
               if "P" in s.num_scheduled_tokens)


def check_kv_read(answer: tuple[int, int] | None) -> str:
    """Exercise 3 (count with the scheduler): a 45-token prompt alone, budget 7 and then
    budget 64. How many K/V positions does attention load over its whole prefill in each
    case? Answer ``(budget_7, budget_64)``."""
    return _verdict(None if answer is None else tuple(answer), (kv_read(45, 7), kv_read(45, 64)),
                    tr("each chunk loads the K/V of everything computed so far plus its own: "
                       "7 + 14 + ... + 42 + 45 with budget 7"))
