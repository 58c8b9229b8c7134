"""Notebook 03's exercises (inside the V1 scheduler). The right answers come from runs of the
real scheduler; exercise 03.2's broken scheduler is built here on purpose (``FirstVictimScheduler``,
clearly not the package's) so the reader can find the bug with a trace."""

from __future__ import annotations

from typing import Any
from unittest import mock

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.course.scenarios import knob_grid as trace_knob_grid
from chunkprefill.scheduler import Scheduler
from chunkprefill.trace import (
    TraceRequest,
    TraceStep,
    article_trace_requests,
    prompt_chunks,
    run_trace,
)


class _PopsFirst(list):  # type: ignore[type-arg]
    """A running list whose ``pop()`` takes the FIRST request: the planted bug."""

    def pop(self, index: Any = 0) -> Any:  # the real list pops the last (index -1)
        return super().pop(index)


class FirstVictimScheduler(Scheduler):
    """BROKEN ON PURPOSE (exercise 03.2): on a KV shortage it preempts the *first* running
    request (the oldest) instead of vLLM's last (the newest)."""

    def _schedule_running(self, *args: Any, **kwargs: Any) -> None:
        self.running = _PopsFirst(self.running)
        super()._schedule_running(*args, **kwargs)


# Exercise 03.2's workload: notebook 03's small cache, three 8-token prompts.
BUG_REQUESTS = [TraceRequest(r, prompt_len=8, output_len=20) for r in "ABC"]
BUG_CONFIG = SchedulerConfig(max_num_batched_tokens=32, max_num_seqs=8, max_model_len=64)
BUG_CACHE = CacheConfig(block_size=4, num_blocks=12)


def run_buggy(requests: list[TraceRequest], scheduler_config: SchedulerConfig,
              cache_config: CacheConfig) -> list[TraceStep]:
    """``run_trace`` with ``FirstVictimScheduler`` in place of the real one."""
    with mock.patch("chunkprefill.trace.Scheduler", FirstVictimScheduler):
        return run_trace(requests, scheduler_config, cache_config)


def check_max_num_seqs(answer: int | None) -> str:
    """Exercise 03.1: the seed's workload (budget 16) with ``max_num_seqs=6``. In which step
    does P get its first tokens?"""
    steps = run_trace(article_trace_requests(), SchedulerConfig(16, 6), CacheConfig(16, 1000))
    first = next(s.step for s in steps if "P" in s.num_scheduled_tokens)
    return _verdict(answer, first,
                    "six decodes hold all six seats; a seat frees only when a decode has "
                    "sampled its 20 tokens")


def check_bug(answer: tuple[int, str] | None) -> str:
    """Exercise 03.2: run ``BUG_REQUESTS`` through the real scheduler and through
    ``run_buggy``. At which step do the two schedules first differ, and which request does
    the broken one preempt there? Answer ``(step, request_id)``."""
    real = run_trace(BUG_REQUESTS, BUG_CONFIG, BUG_CACHE)
    bad = run_buggy(BUG_REQUESTS, BUG_CONFIG, BUG_CACHE)
    k = next(i for i, (a, b) in enumerate(zip(real, bad, strict=False))
             if (a.num_scheduled_tokens, a.preempted) != (b.num_scheduled_tokens, b.preempted))
    return _verdict(None if answer is None else tuple(answer), (k, bad[k].preempted[0]),
                    "the first preemption is where they part; vLLM pops the last running "
                    "request, the broken one the first")


def knob_grid() -> dict[tuple[bool, int, int], int]:
    """Exercise 03.3's grid: ``(enable_chunked_prefill, max_num_batched_tokens,
    long_prefill_token_threshold) -> number of chunks of P's prompt`` on the seed's workload
    (``max_model_len=64``); a combination the config refuses maps to 0."""
    grid = trace_knob_grid(article_trace_requests(), "P", budgets=(16, 64), thresholds=(0, 8),
                           max_model_len=64, cache_config=CacheConfig(16, 1000))
    return {k: 0 if isinstance(v, str) else len(v) for k, v in grid.items()}


def check_three_knobs(answer: dict[tuple[bool, int, int], int] | None) -> str:
    """Exercise 03.3: fill ``knob_grid``'s table yourself: for each of the 8 combinations,
    in how many chunks is P's prompt computed (0 if the configuration is refused)?"""
    return _verdict(None if answer is None else dict(answer), knob_grid(),
                    "chunking on: min(owed, threshold, budget left after 6 decodes); chunking "
                    "off: the whole prompt in one step, or the config is refused if the "
                    "budget is below max_model_len; does a threshold apply with chunking off?")


def check_interval(answer: list[int] | None) -> str:
    """Exercise 03.4 (one of vLLM's newer knobs): the seed's workload (budget 16) with
    ``prefill_schedule_interval=2``. In which steps does P get prompt tokens? Answer the list
    of step numbers."""
    steps = run_trace(article_trace_requests(),
                      SchedulerConfig(16, 16, max_model_len=1024, prefill_schedule_interval=2),
                      CacheConfig(16, 1000))
    chunks = prompt_chunks(steps, "P", 40)
    p_steps = [s.step for s in steps if "P" in s.num_scheduled_tokens][:len(chunks)]
    return _verdict(None if answer is None else list(answer), p_steps,
                    "a step may carry prefill only if the last one that did is at least 2 "
                    "executed steps back while something decodes; the decodes run every step")
