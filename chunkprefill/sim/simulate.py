"""The simulator: ``LLMEngine`` with an executor that predicts step times instead of
running tensors.

Nobody runs Llama-3-8B on a laptop, but the scheduler never asks whether a step was real.
``CostModelExecutor`` plugs into the same ``LLMEngine`` loop as the toy model's executor:
the same ``Scheduler`` decides every step's ``{request_id: num_tokens}``, and instead of
running tensors the executor returns the step time the cost model predicts for that batch.
TTFT, ITL (= Sarathi-Serve's TBT) and the step log come out exactly as for the toy model,
in simulated seconds. This is how Sarathi-Serve chose its token budgets (with the Vidur
simulator). ``run_workload`` drives any engine, measured or simulated."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.checks import check_positive
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine, RequestOutput
from chunkprefill.fast_forward import DecodeRun, advance_decode_run
from chunkprefill.metrics import pooled_itl
from chunkprefill.request import Request
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.sim.cost_model import CostModel
from chunkprefill.trace import FAKE_TOKEN_ID
from chunkprefill.workload import WorkloadRequest, run_workload


class CostModelExecutor:
    """An ``Executor`` without tensors: every request that owes nothing after the step
    "samples" ``FAKE_TOKEN_ID``, and the step lasts what the cost model predicts.
    ``LLMEngine(CostModelExecutor(cost_model), scheduler_config, cache_config)`` is the
    simulator; the ``Scheduler`` inside is the one that drives the toy model.
    ``noise_sigma`` > 0 multiplies each step by a seeded lognormal factor (median 1): the
    jitter a calibration measured on a real machine, so tail latencies are comparable."""

    def __init__(self, cost_model: CostModel, noise_sigma: float = 0.0, seed: int = 0) -> None:
        self.cost_model = cost_model
        self.noise_sigma = check_positive("noise_sigma", noise_sigma, allow_zero=True)
        self._rng = np.random.default_rng(seed) if noise_sigma > 0 else None
        self.last_new_req_ids: list[str] = []  # admitted by the latest step
        self.num_steps = 0

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float]:
        start = scheduler_output.num_computed_tokens
        batch, sampled = [], {}
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            batch.append((n, start[rid]))
            r = requests[rid]
            if r.num_owed_tokens == 0:  # its last owed token ran: it samples
                sampled[rid] = FAKE_TOKEN_ID
        self.last_new_req_ids = scheduler_output.scheduled_new_req_ids
        self.num_steps += 1
        duration = self.cost_model.step_time(batch)
        if self._rng is not None:  # a measured machine's step-to-step jitter (lognormal)
            duration *= math.exp(self.noise_sigma * self._rng.standard_normal())
        return sampled, duration

    def decode_run(self, scheduler: Scheduler, max_steps: int, clock: float,
                   stop_at: float) -> tuple[DecodeRun, list[float]]:
        """Up to ``max_steps`` plain decode steps at once (``LLMEngine.step_decode_run``),
        stopping after the first that ends at or after ``stop_at``: the scheduler advanced
        by ``fast_forward.advance_decode_run`` and the steps' durations, the same numbers,
        noise draws included, as ``execute`` one step at a time."""
        durations: list[float] = []

        def choose(k: int, context_lens: list[int], steps_left: list[int]) -> int:
            self.last_new_req_ids = []
            t = clock
            for d in self.cost_model.decode_step_times(context_lens, steps_left):
                if self._rng is not None:
                    d *= math.exp(self.noise_sigma * self._rng.standard_normal())
                durations.append(d)
                t += d
                if t >= stop_at or len(durations) == k:
                    break
            self.num_steps += len(durations)
            return len(durations)  # up to the next arrival

        return advance_decode_run(scheduler, max_steps, FAKE_TOKEN_ID, choose), durations


@dataclass
class SimResult:
    """One simulated (or measured) run: the engine (its ``step_log``), the latency summary
    (``engine.summary()``: TTFT / ITL / TPOT / E2EL in seconds) and each request's
    scheduling delay (first time scheduled - arrival, Sarathi-Serve's definition)."""

    engine: LLMEngine
    summary: dict[str, dict[str, float]]
    scheduling_delays: np.ndarray
    wall_s: float
    outputs: list[RequestOutput] = field(default_factory=list)  # in finishing order

    @property
    def p99_itl(self) -> float:
        """P99 time between tokens (pooled ITL), seconds."""
        return self.summary["itl"].get("p99", 0.0)

    @property
    def median_ttft(self) -> float:
        return self.summary["ttft"]["p50"]

    @property
    def median_scheduling_delay(self) -> float:
        return float(np.median(self.scheduling_delays))

    @property
    def step_log(self) -> list[Any]:
        return self.engine.step_log

    @property
    def itls(self) -> np.ndarray:
        """Every inter-token gap, seconds."""
        return pooled_itl(o.metrics for o in self.outputs)




def simulate(workload: Sequence[WorkloadRequest], cost_model: CostModel,
             scheduler_config: SchedulerConfig | None = None,
             cache_config: CacheConfig | None = None, noise_sigma: float = 0.0,
             seed: int = 0, fast_forward: bool = True) -> SimResult:
    """Run ``workload`` through ``LLMEngine(CostModelExecutor(cost_model), ...)``.
    ``cache_config`` defaults to the KV cache that fits the GPU next to the weights;
    ``noise_sigma``/``seed``: see ``CostModelExecutor``. ``fast_forward=False`` steps every
    decode-only stretch one step at a time (same result, slower: a test compares them).
    ``wall_s`` covers the whole call, metrics included."""
    if not workload:
        raise ValueError("workload is empty: need at least one request")
    scheduler_config = scheduler_config or SchedulerConfig(
        max_model_len=cost_model.model.max_model_len)
    cache_config = cache_config or cost_model.kv_cache_config()
    t0 = time.perf_counter()
    executor = CostModelExecutor(cost_model, noise_sigma, seed)
    engine = LLMEngine(executor, scheduler_config, cache_config, fast_forward=fast_forward)
    first_scheduled: dict[str, float] = {}

    def on_step(eng: LLMEngine) -> None:
        if executor.last_new_req_ids:
            t = eng.step_log[-1].start_s
            for rid in executor.last_new_req_ids:
                first_scheduled.setdefault(rid, t)
            executor.last_new_req_ids = []

    outputs = run_workload(engine, workload, on_step)
    arrival = {r.request_id: r.arrival_time for r in workload}
    delays = np.asarray([first_scheduled[rid] - arrival[rid] for rid in arrival])
    summary = engine.summary()
    return SimResult(engine, summary, delays, time.perf_counter() - t0, outputs)
