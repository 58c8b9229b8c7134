"""Exercises on the V1 scheduler's core rules (seats, the preemption victim, the three settings
together). The right answers come from runs of the real scheduler; exercise 2's broken
scheduler is built here on purpose (``FirstVictimScheduler``, clearly not the package's) so
the reader can find the bug with a trace. vLLM's other knobs have theirs in ``knobs``."""

from __future__ import annotations

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.course.scenarios import knob_grid as trace_knob_grid
from chunkprefill.i18n import tr
from chunkprefill.request import Request
from chunkprefill.scheduler import Scheduler
from chunkprefill.trace import (
    TraceRequest,
    TraceStep,
    article_trace_requests,
    run_trace,
)


class FirstVictimScheduler(Scheduler):
    """BROKEN ON PURPOSE (exercise 2): on a KV shortage it preempts the *first* running
    request (the oldest) instead of vLLM's last (the newest)."""

    def _pick_victim(self, req_index: int) -> tuple[Request, int]:
        return self.running.pop(0), req_index - 1  # the real one pops the last


# Exercise 2's workload: the notebook's small cache, three 8-token prompts.
BUG_REQUESTS = [TraceRequest(r, prompt_len=8, output_len=20) for r in "ABC"]
BUG_CONFIG = SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=8, max_model_len=64)
BUG_CACHE = CacheConfig(block_size=4, num_blocks=12)


def run_buggy(requests: list[TraceRequest], scheduler_config: SchedulerConfig,
              cache_config: CacheConfig) -> list[TraceStep]:
    """``run_trace`` with ``FirstVictimScheduler`` in place of the real one."""
    return run_trace(requests, scheduler_config, cache_config,
                     scheduler_cls=FirstVictimScheduler)


def check_max_num_seqs(answer: int | None) -> str:
    """Exercise 1: the article's workload (budget 16) with ``max_num_seqs=6``. In which step
    does P get its first tokens?"""
    steps = run_trace(article_trace_requests(), SchedulerConfig(16, 6), CacheConfig(16, 1000))
    first = next(s.step for s in steps if "P" in s.num_scheduled_tokens)
    return _verdict(answer, first,
                    tr("six decodes hold all six seats; a seat frees only when a decode has "
                       "sampled its 20 tokens"))


def check_bug(answer: tuple[int, str] | None) -> str:
    """Exercise 2: run ``BUG_REQUESTS`` through the real scheduler and through
    ``run_buggy``. At which step do the two schedules first differ, and which request does
    the broken one preempt there? Answer ``(step, request_id)``."""
    real = run_trace(BUG_REQUESTS, BUG_CONFIG, BUG_CACHE)
    bad = run_buggy(BUG_REQUESTS, BUG_CONFIG, BUG_CACHE)
    k = next(i for i, (a, b) in enumerate(zip(real, bad, strict=False))
             if (a.num_scheduled_tokens, a.preempted) != (b.num_scheduled_tokens, b.preempted))
    return _verdict(None if answer is None else tuple(answer), (k, bad[k].preempted[0]),
                    tr("the first preemption is where they part; vLLM pops the last running "
                       "request, the broken one the first"))


def knob_grid() -> dict[tuple[bool, int, int], int]:
    """Exercise 3's grid: ``(enable_chunked_prefill, max_num_batched_tokens,
    long_prefill_token_threshold) -> number of chunks of P's prompt`` on the article's workload
    (``max_model_len=64``); a combination the config refuses maps to 0."""
    grid = trace_knob_grid(article_trace_requests(), "P", budgets=(16, 64), thresholds=(0, 8),
                           max_model_len=64, cache_config=CacheConfig(16, 1000))
    return {k: 0 if isinstance(v, str) else len(v) for k, v in grid.items()}


def check_three_knobs(answer: dict[tuple[bool, int, int], int] | None) -> str:
    """Exercise 3: fill ``knob_grid``'s table yourself: for each of the 8 combinations,
    in how many chunks is P's prompt computed (0 if the configuration is refused)?"""
    return _verdict(None if answer is None else dict(answer), knob_grid(),
                    tr("chunking on: min(owed, threshold, budget left after 6 decodes); "
                       "chunking off: the whole prompt in one step, or the config is refused "
                       "if the budget is below max_model_len; does a threshold apply with "
                       "chunking off?"))
