"""The engine loop: scheduler -> executor -> scheduler, with per-request latency metrics.

``LLMEngine`` keeps a clock that advances by each step's duration (measured for the toy
model, predicted for the cost model) and jumps over idle gaps to the next arrival. A
token's time is the end of the step that produced it, so TTFT and ITL come out with
``vllm bench serve``'s definitions whether the step was real or simulated."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.metrics import RequestMetrics, summarize
from chunkprefill.request import Request, SamplingParams
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.timing import Timer, resolve_clock


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    metrics: RequestMetrics
    finished: bool = False
    num_cached_tokens: int = 0  # prompt tokens the prefix cache supplied at admission


@dataclass(slots=True)
class StepRecord:
    """One engine step, for timelines and the step-time plots."""

    step: int
    num_scheduled_tokens: dict[str, int]
    num_prefill_tokens: int
    num_decode_tokens: int
    start_s: float
    duration_s: float
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    kv_usage: float = 0.0
    # prefix caching on: tokens each request admitted this step found in the cache
    num_cached_tokens: dict[str, int] = field(default_factory=dict)
    # on a GPU: the forward's GPU time (CUDA events around it); duration_s is the step's
    # host time, longer when launching the kernels takes longer than running them
    forward_gpu_s: float | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens


class Executor(Protocol):
    """Runs one scheduled step. Returns the sampled token of each request that owes
    nothing more after this step, and the step's duration in seconds (None: let the
    engine measure wall time)."""

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float | None]: ...


class DecodeRunExecutor(Executor, Protocol):
    """An executor that can also run many plain decode steps at once (the cost model
    can; a real model cannot: it has to run every step). ``decode_run(scheduler,
    max_steps, clock, stop_at)`` advances ``scheduler`` by up to ``max_steps`` plain
    decode steps, stopping after the first that ends at or after ``stop_at`` (from
    ``clock``), since the step after it would admit arrivals; it returns what the steps
    did (``sim.fast_forward.DecodeRun``: request ids, steps each, finished per step, free
    blocks per step) and their durations. Nothing was done if the run has 0 steps. Such
    an executor sees no ``SchedulerOutput`` for the steps of a run; the next one's
    ``finished_req_ids`` names every request finished since the previous one."""

    def decode_run(self, scheduler: Scheduler, max_steps: int, clock: float,
                   stop_at: float) -> tuple[Any, list[float]]: ...


class LLMEngine:
    """Scheduler + executor + metrics.

    ``LLMEngine(model, scheduler_config, cache_config, attention_backend=...)`` runs the
    toy model (a ``ToyTransformer``) on a paged KV cache; passing any ``Executor`` instead
    of a model (e.g. ``sim.CostModelExecutor``) runs the same loop without tensors.
    """

    def __init__(self, model: Any, scheduler_config: SchedulerConfig | None = None,
                 cache_config: CacheConfig | None = None, attention_backend: str | None = None,
                 device: Any = None, fast_forward: bool = True,
                 step_clock: str = "auto") -> None:
        self.scheduler_config = scheduler_config or SchedulerConfig()
        self.cache_config = cache_config or CacheConfig()
        if hasattr(model, "execute"):
            self.executor: Executor = model
            self.device = "cpu"
        else:
            from chunkprefill.executor import ModelExecutor  # torch: imported lazily

            self.executor = ModelExecutor(model, self.cache_config, attention_backend, device)
            self.device = self.executor.device
        self.scheduler = Scheduler(self.scheduler_config, self.cache_config)
        # What a measured step's duration means (``timing.resolve_clock``): on a CPU the
        # stepping thread's own CPU time, so a busy machine does not stretch the steps.
        self.step_clock = resolve_clock(self.device, step_clock)
        # Decode-only stretches in bulk (``step_decode_run``), if the executor can.
        self.fast_forward = fast_forward and hasattr(self.executor, "decode_run")
        self.num_fast_forward_steps = 0  # steps of step_log that step_decode_run made
        self.clock = 0.0
        self.step_log: list[StepRecord] = []
        self._pending: list[Request] = []  # arrival_time still in the future
        self._metrics: dict[str, RequestMetrics] = {}
        self._all: dict[str, Request] = {}
        self._ids = itertools.count()

    # -- requests ---------------------------------------------------------------------
    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams | None = None,
                    request_id: str | None = None, arrival_time: float | None = None,
                    priority: int = 0) -> str:
        """Queue a prompt; ``arrival_time`` (engine clock, seconds) defaults to now;
        ``priority`` (vLLM's: lower first) matters with ``SchedulerConfig(policy="priority")``."""
        params = params or SamplingParams()
        rid = request_id if request_id is not None else str(next(self._ids))
        if rid in self._all:
            raise ValueError(f"request_id {rid!r} was already added (duplicate)")
        check = getattr(self.executor, "check_prompt", None)
        if check is not None:
            check(prompt_token_ids)
        t = self.clock if arrival_time is None else float(arrival_time)
        if t < 0:
            raise ValueError(f"arrival_time must be >= 0, got {t}")
        req = Request(rid, prompt_token_ids, max_tokens=params.max_tokens, arrival_time=t,
                      eos_token_id=params.eos_token_id, sampling_params=params,
                      priority=priority)
        if t <= self.clock:
            self.scheduler.add_request(req)
        else:
            self.scheduler.check_request(req)  # fail now, not when it arrives
            bisect.insort(self._pending, req, key=lambda r: r.arrival_time)
        self._all[rid] = req
        self._metrics[rid] = RequestMetrics(arrival_time=t)
        return rid

    def has_unfinished_requests(self) -> bool:
        return bool(self._pending) or self.scheduler.has_unfinished_requests()

    # -- one step ---------------------------------------------------------------------
    def _admit_arrivals(self) -> None:
        while self._pending and self._pending[0].arrival_time <= self.clock:
            self.scheduler.add_request(self._pending.pop(0))  # in arrival order

    def step(self) -> list[RequestOutput]:
        """Admit arrivals, schedule, execute, update. Returns requests finished now."""
        self._admit_arrivals()
        if not self.scheduler.has_unfinished_requests():
            if self._pending:  # idle: jump to the next arrival
                self.clock = self._pending[0].arrival_time
                return self.step()
            return []
        with Timer(self.device, self.step_clock) as timer:
            out = self.scheduler.schedule()
            sampled, duration = (({}, 0.0) if out.is_empty else
                                 self.executor.execute(out, self.scheduler.requests))
            finished = self.scheduler.update_from_output(out, sampled)
        start = self.clock
        self.clock += timer.elapsed_s if duration is None else duration
        clock, metrics = self.clock, self._metrics
        for rid in sampled:
            metrics[rid].token_times.append(clock)
        self.step_log.append(StepRecord(
            step=len(self.step_log), num_scheduled_tokens=dict(out.num_scheduled_tokens),
            num_prefill_tokens=out.num_prefill_tokens, num_decode_tokens=out.num_decode_tokens,
            start_s=start, duration_s=self.clock - start, preempted=list(out.preempted_req_ids),
            finished=finished, kv_usage=self.scheduler.kv_cache_manager.usage,
            num_cached_tokens=out.num_cached_tokens,
            forward_gpu_s=None if out.is_empty else getattr(self.executor,
                                                            "last_forward_gpu_s", None)))
        return [self._output(rid) for rid in finished]

    def step_decode_run(self, stop_at: float = math.inf,
                        max_steps: int = 1_000_000) -> list[RequestOutput] | None:
        """Run the next plain decode steps in bulk, exactly as ``step()`` would one by one
        (same step log, token times and scheduler state; a test checks it), or return
        None (nothing done) if the next step is not a plain decode step or fast-forward is
        off. Stops before a step that would start at or after ``stop_at`` or at the next
        pending arrival, so arrivals are admitted where ``step()`` would admit them. Why:
        a simulated decode-only stretch costs one pass over the running requests instead
        of one per step, which is what lets 10,000 requests simulate in seconds."""
        if not self.fast_forward:
            return None
        self._admit_arrivals()
        if self.scheduler.waiting or not self.scheduler.running:
            return None  # the next step admits a request (or there is nothing to run)
        if self._pending:
            stop_at = min(stop_at, self._pending[0].arrival_time)
        executor: DecodeRunExecutor = self.executor  # type: ignore[assignment]
        if self.clock >= stop_at:
            return None
        run, durations = executor.decode_run(self.scheduler, max_steps, self.clock, stop_at)
        if run.num_steps == 0:
            return None
        ids = run.request_ids
        scheduled = dict.fromkeys(ids, 1)  # rebuilt whenever a request stops
        num_blocks = self.scheduler.kv_cache_manager.block_pool.num_blocks
        log, times, clock = self.step_log, [], self.clock
        for k, (d, finished, free) in enumerate(zip(durations, run.finished,
                                                    run.num_free_blocks, strict=True)):
            start, clock = clock, clock + d  # the same float arithmetic as step()
            times.append(clock)
            log.append(StepRecord(len(log), scheduled.copy(), 0, len(scheduled), start,
                                  clock - start, [], finished, 1.0 - free / num_blocks))
            if finished:
                scheduled = {rid: 1 for rid, n in zip(ids, run.num_steps_each, strict=True)
                             if n > k + 1}
        self.clock = clock
        self.num_fast_forward_steps += run.num_steps
        metrics = self._metrics
        for rid, n in zip(ids, run.num_steps_each, strict=True):
            metrics[rid].token_times.extend(times if n == run.num_steps else times[:n])
        return [self._output(rid) for step in run.finished for rid in step]

    def _output(self, rid: str) -> RequestOutput:
        r = self._all[rid]
        finished = r.is_finished  # a finished request's tokens never change: no copy
        return RequestOutput(rid, r.prompt_token_ids,
                             r.output_token_ids if finished else list(r.output_token_ids),
                             self._metrics[rid], finished, r.num_cached_tokens)

    def run(self, max_steps: int = 1_000_000) -> list[RequestOutput]:
        """Step until every added request has finished (at most ``max_steps`` steps, else
        ``RuntimeError``); outputs in the order added."""
        steps = 0
        while self.has_unfinished_requests():
            if steps >= max_steps:
                raise RuntimeError(f"engine did not finish within max_steps={max_steps}")
            before = len(self.step_log)
            if self.step_decode_run(max_steps=max_steps - steps) is None:
                self.step()
            steps += max(len(self.step_log) - before, 1)
        return [self._output(rid) for rid in self._all]

    def generate(self, prompts: Sequence[Sequence[int]],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 priority: Sequence[int] | None = None) -> list[RequestOutput]:
        """Offline batch: all prompts arrive now; returns outputs in prompt order.
        ``priority``: one per prompt (vLLM's ``LLM.generate`` argument), default all 0."""
        if isinstance(sampling_params, SamplingParams) or sampling_params is None:
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"sampling_params has {len(params)} entries for "
                                 f"{len(prompts)} prompts; allowed: one, or one per prompt")
        prios = [0] * len(prompts) if priority is None else list(priority)
        if len(prios) != len(prompts):
            raise ValueError(f"priority has {len(prios)} entries for {len(prompts)} prompts; "
                             "allowed: one per prompt")
        ids = [self.add_request(p, sp, priority=pr)
               for p, sp, pr in zip(prompts, params, prios, strict=True)]
        self.run()
        return [self._output(rid) for rid in ids]

    def summary(self) -> dict[str, dict[str, float]]:
        """TTFT / ITL / TPOT / E2EL percentiles over every request added so far."""
        return summarize(self._metrics.values())
