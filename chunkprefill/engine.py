"""The engine loop: scheduler -> executor -> scheduler, with per-request latency metrics.

``LLMEngine`` keeps a clock that advances by each step's duration (measured for the toy
model, predicted for the cost model) and jumps over idle gaps to the next arrival. A
token's time is the end of the step that produced it, so TTFT and ITL come out with
``vllm bench serve``'s definitions whether the step was real or simulated."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chunkprefill import fast_forward
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.metrics import RequestMetrics, summarize
from chunkprefill.request import Request, SamplingParams
from chunkprefill.scheduler import Scheduler, SchedulerOutput, TokenSplit
from chunkprefill.timing import Timer, resolve_clock

DECODE = TokenSplit(0, 1, 0)  # one fed-back token: every request's work in a plain decode step


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
    """One engine step, for timelines, step-time plots and the cost model: the scheduler's
    facts per request as ``SchedulerOutput`` has them (``num_computed_tokens``: where each
    request's tokens start; ``token_splits``: what they compute; ``num_cached_tokens``:
    prefix-cache hits at admission), and when the step ran on the engine's clock."""

    step: int
    num_scheduled_tokens: dict[str, int]
    num_computed_tokens: dict[str, int]
    token_splits: dict[str, TokenSplit]
    start_s: float
    duration_s: float
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    kv_usage: float = 0.0
    num_cached_tokens: dict[str, int] = field(default_factory=dict)
    # on a GPU: the forward's GPU time (CUDA events around it); duration_s is the step's
    # host time, longer when launching the kernels takes longer than running them
    forward_gpu_s: float | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def num_prefill_tokens(self) -> int:
        """Prompt work, recomputation included: everything but decodes."""
        return sum(s.prefill + s.recompute for s in self.token_splits.values())

    @property
    def num_decode_tokens(self) -> int:
        return sum(s.decode for s in self.token_splits.values())

    @property
    def num_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


class Executor(Protocol):
    """Runs one scheduled step. Returns the sampled token of each request that owes
    nothing more after this step, and the step's duration in seconds (None: let the
    engine measure it with its step clock)."""

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float | None]: ...


class FastForwardExecutor(Executor, Protocol):
    """An executor that can price plain decode steps without running them (the cost model
    can; a real model must run every step), so the engine can fast-forward: it samples
    ``fake_token_id`` for every request, and ``decode_step_times(context_lens,
    steps_left)`` yields the durations of consecutive decode steps, the same numbers
    (noise included) ``execute`` would give one step at a time; the engine takes what it
    needs. Such an executor sees no ``SchedulerOutput`` for fast-forwarded steps; the next
    one's ``finished_req_ids`` names every request finished since the previous one."""

    fake_token_id: int

    def decode_step_times(self, context_lens: Sequence[int],
                          steps_left: Sequence[int]) -> Iterator[float]: ...


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
        # Decode-only stretches in bulk (``step_fast_forward``), if the executor can price them.
        self.fast_forward = fast_forward and hasattr(self.executor, "decode_step_times")
        self.num_fast_forward_steps = 0  # steps of step_log that step_fast_forward made
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
        for rid in out.scheduled_new_req_ids:  # vLLM's scheduled_ts: the first time only
            metrics[rid].first_scheduled_time = start
        for rid in sampled:
            metrics[rid].token_times.append(clock)
        self.step_log.append(StepRecord(
            step=len(self.step_log), num_scheduled_tokens=out.num_scheduled_tokens,
            num_computed_tokens=out.num_computed_tokens, token_splits=out.token_splits,
            start_s=start, duration_s=self.clock - start, preempted=out.preempted_req_ids,
            finished=finished, kv_usage=self.scheduler.kv_cache_manager.usage,
            num_cached_tokens=out.num_cached_tokens,
            forward_gpu_s=None if out.is_empty else getattr(self.executor,
                                                            "last_forward_gpu_s", None)))
        return [self._output(rid) for rid in finished]

    def step_fast_forward(self, stop_at: float = math.inf,
                          max_steps: int = 1_000_000) -> list[RequestOutput] | None:
        """Fast-forward: run the next plain decode steps in bulk, exactly as ``step()``
        would one by one (same step log, token times and scheduler state; a test checks
        it), or return None (nothing done) if the next step is not a plain decode step or
        fast-forward is off. Stops after the first step that ends at or after ``stop_at``
        or the next pending arrival, so arrivals are admitted where ``step()`` would
        admit them. Why: a simulated decode-only stretch costs one pass over the running
        requests instead of one per step, which lets 10,000 requests simulate in seconds."""
        if not self.fast_forward:
            return None
        self._admit_arrivals()
        if self._pending:
            stop_at = min(stop_at, self._pending[0].arrival_time)
        if self.clock >= stop_at:
            return None
        executor: FastForwardExecutor = self.executor  # type: ignore[assignment]
        p = fast_forward.plan(self.scheduler, max_steps, executor.fake_token_id)
        if p is None:
            return None
        durations, t = [], self.clock
        for d in executor.decode_step_times(p.context_lens, p.steps_left):
            durations.append(d)
            t += d
            if t >= stop_at or len(durations) == p.num_steps:
                break
        run = fast_forward.apply(self.scheduler, p, len(durations), executor.fake_token_id)
        ids, log, times, clock = p.request_ids, self.step_log, [], self.clock
        num_blocks = self.scheduler.kv_cache_manager.block_pool.num_blocks
        # request -> (num_computed_tokens at the start, steps it runs); shrinks as some stop
        active = dict(zip(ids, zip(p.context_lens, run.num_steps_each, strict=True)))
        for k, (d, finished, free) in enumerate(zip(durations, run.finished,
                                                    run.num_free_blocks, strict=True)):
            start, clock = clock, clock + d  # the same float arithmetic as step()
            times.append(clock)
            log.append(StepRecord(
                step=len(log), num_scheduled_tokens=dict.fromkeys(active, 1),
                num_computed_tokens={rid: c + k for rid, (c, _) in active.items()},
                token_splits=dict.fromkeys(active, DECODE), start_s=start,
                duration_s=clock - start, finished=finished, kv_usage=1.0 - free / num_blocks))
            if finished:
                active = {rid: cn for rid, cn in active.items() if cn[1] > k + 1}
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
            if self.step_fast_forward(max_steps=max_steps - steps) is None:
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
