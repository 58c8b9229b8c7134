"""Measuring the toy model for the simulator's calibration: the measured side.

Runs workloads on the toy model (``ModelExecutor``, torch), times every step, and hands the
steps to ``sim.fit_cost_model`` as plain data: each step's batch of (query_len,
context_len) and its duration. The simulator itself never imports torch; this module does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunkprefill.checks import check_int
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine
from chunkprefill.executor import ModelExecutor
from chunkprefill.request import Request
from chunkprefill.scheduler import SchedulerOutput
from chunkprefill.sim import (
    SimResult,
    batches_from_step_log,
)
from chunkprefill.workload import LengthDist, WorkloadRequest, make_workload, run_workload


def toy_profile_workloads(seed: int = 0) -> list[tuple[SchedulerConfig, list[WorkloadRequest]]]:
    """Vidur-style profiling runs for the toy model, covering the operating range the
    held-out workload uses (budgets 32-256, up to 16 requests, contexts up to ~900):
    prefill chunks of many sizes at many depths, decode batches of many sizes. All
    requests arrive at once, so each run sweeps the batch size up and back down. A fit is
    only as good as the range it was profiled on: a CPU's caches make long contexts
    disproportionately slow, so do not extrapolate far past it."""
    rng = np.random.default_rng([seed, 7])
    runs = []
    for budget, n_req, plo, phi, out in ((32, 6, 16, 400, 24), (64, 10, 8, 600, 16),
                                          (128, 16, 4, 800, 24), (256, 8, 64, 800, 12)):
        sc = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=16,
                             max_model_len=2048)
        lens = rng.integers(plo, phi + 1, size=n_req)
        reqs = [WorkloadRequest(f"b{budget}r{i}", 0.0, int(p), out)
                for i, p in enumerate(lens)]
        runs.append((sc, reqs))
    # Plus one Poisson run (other seed, rate and budget than the held-out workload): decode
    # batches whose requests are at different depths, as in serving.
    runs.append((SchedulerConfig(max_num_batched_tokens=96, max_num_seqs=16, max_model_len=2048),
                 toy_heldout_workload(seed=seed + 100, num_requests=24, qps=3.0)))
    return runs


def toy_heldout_workload(seed: int = 1, num_requests: int = 64,
                         qps: float = 2.0) -> list[WorkloadRequest]:
    """A Poisson workload the calibration never saw: lognormal prompts (median 160, P90
    480 tokens, at most 1000) and outputs (median 24, P90 48)."""
    return make_workload(num_requests, qps, LengthDist.lognormal(160, p90=480),
                         LengthDist.lognormal(24, p90=48), seed=seed, max_prompt_len=1000,
                         max_output_len=128)


class ThreadTimeExecutor:
    """Wraps the toy model's executor and reports each step's *thread CPU time* as its
    duration. On a shared machine, wall-clock time also counts the time this process
    waited for a core while others ran; CPU time does not. With torch pinned to one
    thread (``torch.set_num_threads(1)``) all of a step's compute runs on this thread,
    so its CPU time is what the step costs this machine. Measured, not predicted.

    ``min_of`` > 1 runs each step that many times and keeps the fastest (timeit's rule:
    the least disturbed run). Re-running a step is harmless: it rewrites the same K/V
    into the same slots and greedy sampling picks the same tokens."""

    def __init__(self, inner: Any, min_of: int = 1) -> None:
        self.inner = inner
        self.min_of = check_int("min_of", min_of, 1)

    def check_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.inner.check_prompt(prompt_token_ids)

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float]:
        best = math.inf
        for _ in range(self.min_of):
            t0 = time.thread_time()
            sampled, _ = self.inner.execute(scheduler_output, requests)
            best = min(best, time.thread_time() - t0)
        return sampled, best


def measure_toy(model: Any, workload: Sequence[WorkloadRequest],
                scheduler_config: SchedulerConfig, cache_config: CacheConfig | None = None,
                clock: str = "thread", min_of: int = 1) -> SimResult:
    """Run ``workload`` on the toy model and measure every step: the same driver as
    ``simulate``, with the model executor instead of the cost model. ``clock="thread"``
    times steps by thread CPU time, fastest of ``min_of`` runs (see
    ``ThreadTimeExecutor``); ``"wall"`` by the engine's wall clock."""
    cache_config = cache_config or CacheConfig(block_size=16, num_blocks=4096)
    if clock not in ("thread", "wall"):
        raise ValueError(f"clock must be 'thread' or 'wall', got {clock!r}")
    executor: Any = ModelExecutor(model, cache_config, "torch")
    if clock == "thread":
        executor = ThreadTimeExecutor(executor, min_of)
    engine = LLMEngine(executor, scheduler_config, cache_config)
    t0 = time.perf_counter()
    outputs = run_workload(engine, workload)
    return SimResult.of(engine, outputs, time.perf_counter() - t0)


def profile_toy(model: Any, runs: Sequence[tuple[SchedulerConfig, Sequence[WorkloadRequest]]],
                clock: str = "thread", min_of: int = 1,
                ) -> tuple[list[list[tuple[int, int]]], list[float]]:
    """Measure ``runs`` on the toy model; return every step's batch and duration."""
    batches: list[list[tuple[int, int]]] = []
    durations: list[float] = []
    for sc, reqs in runs:
        log = measure_toy(model, reqs, sc, clock=clock, min_of=min_of).step_log
        batches += batches_from_step_log(log)
        durations += [rec.duration_s for rec in log]
    return batches, durations


def warm_up_toy(model: Any, clock: str = "thread") -> None:
    """One short run first: the first forward passes pay one-off allocation costs."""
    measure_toy(model, [WorkloadRequest("warmup", 0.0, 64, 4)],
                SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=2048),
                clock=clock)


