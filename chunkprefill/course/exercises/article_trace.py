"""Notebook 02's exercises (the 16-token budget trace). Every right answer comes from a run
of the real scheduler (``run_trace`` on the article's workload), never typed in here."""

from __future__ import annotations

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.trace import TraceStep, article_trace_requests, prompt_chunks, run_trace

CACHE = CacheConfig(block_size=16, num_blocks=1000)


def _seed(config: SchedulerConfig, prompt_len: int = 40) -> list[TraceStep]:
    return run_trace(article_trace_requests(num_decodes=6, prompt_len=prompt_len), config, CACHE)


def check_budget24(answer: int | None) -> str:
    """Exercise 02.1: budget 24, six decodes, the 40-token prompt P. In how many steps is P's
    prompt computed?"""
    chunks = prompt_chunks(_seed(SchedulerConfig(max_num_batched_tokens=24, max_num_seqs=16)),
                           "P")
    return _verdict(answer, len(chunks),
                    tr("the decodes go first and take 1 token each; P gets what is left of 24, "
                       "until it owes less than that"))


def check_threshold(answer: list[int] | None) -> str:
    """Exercise 02.2: budget 16, six decodes, ``long_prefill_token_threshold=6``. List the
    sizes of P's prompt chunks, in order."""
    config = SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16,
                             long_prefill_token_threshold=6)
    return _verdict(None if answer is None else list(answer),
                    prompt_chunks(_seed(config), "P"),
                    tr("the threshold caps one request's tokens per step below the 10 left "
                       "after the decodes; the last chunk is what remains of 40"))


def check_no_chunking(answer: tuple[int, int] | None) -> str:
    """Exercise 02.3: chunking off, budget 64, ``max_model_len=64``. In which step does P's
    whole prompt run, and how many tokens does that step carry in all? Answer
    ``(step, tokens)``."""
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16,
                             enable_chunked_prefill=False, max_model_len=64)
    step = next(s for s in _seed(config) if "P" in s.num_scheduled_tokens)
    return _verdict(None if answer is None else tuple(answer),
                    (step.step, sum(step.num_scheduled_tokens.values())),
                    tr("P arrives at step 2; 40 prompt tokens and the six decodes all fit in 64"))


def check_prefill_first(answer: int | None) -> str:
    """Exercise 02.4: the same as 02.3 but ``batching="prefill_first"`` (vLLM V0 with
    chunking off). How many decode tokens run in the step that prefills P?"""
    config = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16,
                             enable_chunked_prefill=False, max_model_len=64,
                             batching="prefill_first")
    step = next(s for s in _seed(config) if "P" in s.num_scheduled_tokens)
    return _verdict(answer, sum(n for rid, n in step.num_scheduled_tokens.items() if rid != "P"),
                    tr("prefill first: a step that admits a prompt runs no decodes"))
