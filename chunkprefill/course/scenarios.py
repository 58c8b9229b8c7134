"""Workloads the course runs through the real scheduler (``run_trace``): the three settings
over a grid, and a shared system prompt with prefix caching on or off."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chunkprefill.checks import cdiv, check_int
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.trace import TraceRequest, TraceStep, prompt_chunks, run_trace


# ------------------------------------------------------------- a shared system prompt, run
def system_prompt_tokens(n: int, start: int = 1000) -> list[int]:
    """A stand-in system prompt: ``n`` distinct token ids."""
    return list(range(start, start + n))


@dataclass(frozen=True)
class PrefixRun:
    """What the second prompt ``P`` of ``shared_prompt_run`` did."""

    prefix_len: int  # tokens P shares with the first request's prompt
    prompt_len: int
    block_size: int
    budget: int
    enable_prefix_caching: bool
    num_cached_tokens: int  # found in the cache at admission
    chunks: tuple[int, ...]  # the prompt tokens P computed, step by step
    first_token_steps: int  # steps from P's arrival to its first token, both included
    steps: tuple[TraceStep, ...]

    @property
    def num_computed_prompt_tokens(self) -> int:
        return sum(self.chunks)


def shared_prompt_run(prefix_len: int, block_size: int = 16, budget: int = 32,
                      prompt_len: int = 160, enable_prefix_caching: bool = True,
                      threshold: int = 0) -> PrefixRun:
    """Request ``S`` (the system prompt: ``prefix_len`` tokens, one output token) runs and
    finishes; then ``P`` (the same ``prefix_len`` tokens followed by its own, ``prompt_len``
    in all) arrives alone. P's chunks and first-token step come from the trace."""
    check_int("prefix_len", prefix_len, 1, prompt_len)
    check_int("prompt_len", prompt_len, 1)
    check_int("budget", budget, 1)
    shared = system_prompt_tokens(prefix_len)
    own = system_prompt_tokens(prompt_len - prefix_len, start=5000)
    arrival = cdiv(prefix_len, budget) + 1  # after S has finished
    reqs = [TraceRequest("S", prefix_len, 1, 0, tuple(shared)),
            TraceRequest("P", prompt_len, 1, arrival, tuple(shared + own))]
    steps = run_trace(reqs, SchedulerConfig(budget, min(budget, 8),
                                            long_prefill_token_threshold=threshold,
                                            max_model_len=prompt_len + 1),
                      CacheConfig(block_size, 2 * cdiv(prompt_len, block_size) + 2,
                                  enable_prefix_caching=enable_prefix_caching))
    chunks = tuple(s.num_scheduled_tokens["P"] for s in steps if "P" in s.num_scheduled_tokens)
    first = next(s.step for s in steps if "P" in s.finished)  # output_len 1: done = 1st token
    cached = next((s.num_cached_tokens["P"] for s in steps if "P" in s.num_cached_tokens), 0)
    return PrefixRun(prefix_len, prompt_len, block_size, budget, enable_prefix_caching, cached,
                     chunks, first - arrival + 1, tuple(steps))


def knob_grid(requests: Sequence[TraceRequest], request_id: str,
              budgets: Sequence[int], thresholds: Sequence[int], max_model_len: int,
              cache_config: CacheConfig, max_num_seqs: int = 16,
              ) -> dict[tuple[bool, int, int], list[int] | str]:
    """The three settings that act together on one long prompt: for every
    ``(enable_chunked_prefill, max_num_batched_tokens, long_prefill_token_threshold)``, the
    chunks ``request_id``'s prompt is computed in, or the config's refusal (its
    ``ValueError`` text) where the combination could never run."""
    out: dict[tuple[bool, int, int], list[int] | str] = {}
    for chunked in (True, False):
        for budget in budgets:
            for threshold in thresholds:
                try:
                    config = SchedulerConfig(budget, max_num_seqs, enable_chunked_prefill=chunked,
                                             long_prefill_token_threshold=threshold,
                                             max_model_len=max_model_len)
                except ValueError as e:
                    out[chunked, budget, threshold] = str(e)
                    continue
                steps = run_trace(requests, config, cache_config)
                out[chunked, budget, threshold] = prompt_chunks(steps, request_id)
    return out
