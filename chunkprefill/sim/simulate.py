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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.checks import check_positive
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine, RequestOutput
from chunkprefill.metrics import pooled_itl
from chunkprefill.request import Request
from chunkprefill.scheduler import SchedulerOutput
from chunkprefill.sim.cost_model import CostModel, batch_from_output
from chunkprefill.trace import FAKE_TOKEN_ID
from chunkprefill.workload import WorkloadRequest, run_workload


class CostModelExecutor:
    """An ``Executor`` without tensors: every request that owes nothing after the step
    "samples" ``FAKE_TOKEN_ID``, and the step lasts what the cost model predicts.
    ``LLMEngine(CostModelExecutor(cost_model), scheduler_config, cache_config)`` is the
    simulator; the ``Scheduler`` inside is the one that drives the toy model.
    ``noise_sigma`` > 0 multiplies each step by a seeded lognormal factor (median 1): the
    jitter a calibration measured on a real machine, so tail latencies are comparable.
    It can price decode steps without a ``SchedulerOutput``, so the engine fast-forwards."""

    fake_token_id = FAKE_TOKEN_ID

    def __init__(self, cost_model: CostModel, noise_sigma: float = 0.0, seed: int = 0) -> None:
        self.cost_model = cost_model
        self.noise_sigma = check_positive("noise_sigma", noise_sigma, allow_zero=True)
        self._rng = np.random.default_rng(seed) if noise_sigma > 0 else None
        self.num_steps = 0

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float]:
        sampled = {rid: FAKE_TOKEN_ID for rid in scheduler_output.num_scheduled_tokens
                   if requests[rid].num_owed_tokens == 0}  # its last owed token ran
        self.num_steps += 1
        return sampled, self._jitter(self.cost_model.step_time(batch_from_output(
            scheduler_output)))

    def decode_step_times(self, context_lens: Sequence[int],
                          steps_left: Sequence[int]) -> Iterator[float]:
        """Consecutive plain decode steps' durations, the same numbers (noise draws
        included) as ``execute`` one step at a time; drawn only as the engine takes them."""
        for d in self.cost_model.decode_step_times(context_lens, steps_left):
            self.num_steps += 1
            yield self._jitter(d)

    def _jitter(self, duration: float) -> float:
        if self._rng is None:
            return duration
        return duration * math.exp(self.noise_sigma * self._rng.standard_normal())


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

    @classmethod
    def of(cls, engine: LLMEngine, outputs: list[RequestOutput], wall_s: float) -> SimResult:
        """A finished run's result: every request's scheduling delay from its metrics."""
        delays = np.asarray([o.metrics.scheduling_delay for o in outputs])
        return cls(engine, engine.summary(), delays, wall_s, outputs)

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
    outputs = run_workload(engine, workload)
    return SimResult.of(engine, outputs, time.perf_counter() - t0)
