"""Measured experiments shared by notebooks and benchmarks (so neither re-implements them).

``run_stall``: requests decode on the toy model while long prompts arrive at fixed *steps*
(not seconds), so the workload's shape is the same on every machine and only the step
times are measured here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.checks import cdiv, check_int
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine, RequestOutput, StepRecord
from chunkprefill.lab.progress import Progress
from chunkprefill.lab.stats import Estimate, interleaved, median_ci, ratio_ci
from chunkprefill.metrics import pooled_itl
from chunkprefill.request import SamplingParams
from chunkprefill.timing import gc_paused
from chunkprefill.trace import TraceRequest, prompt_chunks


@dataclass
class StallWorkload:
    """``num_decodes`` short requests start together; ``len(long_arrival_steps)`` long
    prompts of ``long_prompt_len`` tokens arrive at those engine steps."""

    num_decodes: int = 32
    decode_prompt_len: int = 16
    decode_output_len: int = 80
    long_prompt_len: int = 1024
    long_output_len: int = 4
    long_arrival_steps: Sequence[int] = (10, 25, 40, 55)
    vocab_size: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_decodes", "decode_prompt_len", "decode_output_len", "long_prompt_len",
                     "long_output_len", "vocab_size"):
            check_int(name, getattr(self, name), 1)
        if any(s < 0 for s in self.long_arrival_steps):
            raise ValueError("long_arrival_steps must be >= 0")

    def cache_config(self, block_size: int = 16) -> CacheConfig:
        """A KV cache that holds the whole workload at once: nothing is ever preempted."""
        need = self.num_decodes * (self.decode_prompt_len + self.decode_output_len) \
            + len(self.long_arrival_steps) * (self.long_prompt_len + self.long_output_len)
        return CacheConfig(block_size=block_size, num_blocks=cdiv(need, block_size) + 64)

    def trace_requests(self) -> list[TraceRequest]:
        """The same workload for ``run_trace`` (no model, no timing): ``run_stall``'s ids,
        lengths and arrival steps, so its schedule can be checked against the trace's."""
        dec = [TraceRequest(f"d{i}", self.decode_prompt_len, self.decode_output_len, 0)
               for i in range(self.num_decodes)]
        arrivals = sorted(zip(self.long_arrival_steps, range(len(self.long_arrival_steps))))
        return dec + [TraceRequest(f"long{i}", self.long_prompt_len, self.long_output_len, step)
                      for step, i in arrivals]

    def prompts(self) -> tuple[list[list[int]], list[list[int]]]:
        rng = np.random.default_rng(self.seed)
        dec = [rng.integers(0, self.vocab_size, self.decode_prompt_len).tolist()
               for _ in range(self.num_decodes)]
        long = [rng.integers(0, self.vocab_size, self.long_prompt_len).tolist()
                for _ in self.long_arrival_steps]
        return dec, long


@dataclass
class StallResult:
    label: str
    decode_outputs: list[RequestOutput]
    long_outputs: list[RequestOutput]
    step_log: list[StepRecord] = field(repr=False)
    step_clock: str = "thread"

    @property
    def decode_itl(self) -> np.ndarray:
        """Every inter-token gap of the decoding requests, pooled (seconds)."""
        return pooled_itl(o.metrics for o in self.decode_outputs)

    @property
    def p99_itl(self) -> float:
        return float(np.percentile(self.decode_itl, 99))

    @property
    def max_itl(self) -> float:
        return float(self.decode_itl.max())

    @property
    def long_ttft_median(self) -> float:
        return float(np.median([o.metrics.ttft for o in self.long_outputs]))

    @property
    def p50_itl(self) -> float:
        return float(np.percentile(self.decode_itl, 50))

    @property
    def mean_tpot(self) -> float:
        """The decodes' TPOT averaged over requests: ``vllm bench serve``'s Mean TPOT."""
        return float(np.mean([o.metrics.tpot for o in self.decode_outputs]))

    def decode_itl_split(self) -> tuple[np.ndarray, np.ndarray]:
        """The decodes' gaps in two pools: those ending in a step that carried a long
        prompt's prefill tokens (a chunk, or a whole prompt), and all the others (seconds).
        A gap ends when its step ends, so each gap is matched to its step by end time."""
        long_ids = {o.request_id for o in self.long_outputs}
        prefill_ends = {s.end_s for s in self.step_log
                        if any(s.token_splits[r].prefill for r in long_ids & set(s.token_splits))}
        during: list[float] = []
        other: list[float] = []
        for o in self.decode_outputs:
            t = o.metrics.token_times
            for a, b in zip(t, t[1:], strict=False):
                (during if b in prefill_ends else other).append(b - a)
        return np.asarray(during), np.asarray(other)

    @property
    def itl_during_prefill(self) -> float:
        """Median gap of the decodes in the steps that carry a long prompt's prefill."""
        return float(np.median(self.decode_itl_split()[0]))

    @property
    def itl_outside_prefill(self) -> float:
        """Median gap of the decodes in every other step."""
        return float(np.median(self.decode_itl_split()[1]))


def run_stall(model: Any, workload: StallWorkload, scheduler_config: SchedulerConfig,
              cache_config: CacheConfig | None = None, label: str = "",
              attention_backend: str | None = None, device: Any = None) -> StallResult:
    """Run the workload; long prompt i is added right before step ``long_arrival_steps[i]``."""
    dec, long = workload.prompts()
    cache_config = cache_config or workload.cache_config()
    eng = LLMEngine(model, scheduler_config, cache_config, attention_backend, device)
    dec_ids = [eng.add_request(p, SamplingParams(max_tokens=workload.decode_output_len),
                               request_id=f"d{i}") for i, p in enumerate(dec)]
    arrivals = sorted(zip(workload.long_arrival_steps, range(len(long))))
    long_ids: list[str] = []
    step = 0
    with gc_paused():
        while eng.has_unfinished_requests() or arrivals:
            while arrivals and arrivals[0][0] <= step:
                _, i = arrivals.pop(0)
                long_ids.append(eng.add_request(long[i], SamplingParams(
                    max_tokens=workload.long_output_len), request_id=f"long{i}"))
            eng.step()
            step += 1
    outs = {o.request_id: o for o in eng.run()}
    return StallResult(label, [outs[r] for r in dec_ids], [outs[r] for r in long_ids],
                       eng.step_log, eng.step_clock)


# -- controlled comparisons: repeats, interleaved, medians with intervals ------------------

@dataclass
class StallComparison:
    """Several scheduler configurations run on the same ``StallWorkload``, ``repeats`` times
    each, interleaved (``stats.interleaved``). Every statistic is a median over the repeats
    with its bootstrap interval; ratios are paired by repeat."""

    workload: StallWorkload
    configs: dict[str, SchedulerConfig]
    runs: dict[str, list[StallResult]] = field(repr=False)
    step_clock: str = "thread"

    def p99_itl_ci(self, label: str) -> Estimate:
        """The decodes' P99 ITL (seconds)."""
        return median_ci([r.p99_itl for r in self.runs[label]])

    def p50_itl_ci(self, label: str) -> Estimate:
        return median_ci([float(np.percentile(r.decode_itl, 50)) for r in self.runs[label]])

    def long_ttft_ci(self, label: str) -> Estimate:
        """The long prompts' TTFT (median over the long prompts of a run; seconds)."""
        return median_ci([r.long_ttft_median for r in self.runs[label]])

    def ci(self, metric: str, label: str) -> Estimate:
        """``metric`` (one of ``METRICS``) of one configuration: median over the repeats."""
        return median_ci([_metric(metric)(r) for r in self.runs[label]])

    def ratio(self, metric: str, numerator: str, denominator: str) -> Estimate:
        """``metric`` (one of ``METRICS``) of one configuration over another's: the median of
        the per-repeat ratios (paired by round), not the ratio of the two medians."""
        f = _metric(metric)
        return ratio_ci([f(r) for r in self.runs[numerator]],
                        [f(r) for r in self.runs[denominator]])

    def split_ratio(self, label: str) -> Estimate:
        """The decodes' median gap in steps that carry a long prompt's prefill over their
        median gap in the other steps, per repeat (median and interval of the ratios)."""
        rs = self.runs[label]
        return ratio_ci([r.itl_during_prefill for r in rs], [r.itl_outside_prefill for r in rs])


METRICS = ("p99_itl", "p50_itl", "long_ttft", "mean_tpot", "itl_during_prefill",
           "itl_outside_prefill")
"""The per-run statistics ``StallComparison.ci`` and ``ratio`` accept (seconds)."""


def _metric(metric: str) -> Any:
    get = {"p99_itl": lambda r: r.p99_itl, "p50_itl": lambda r: r.p50_itl,
           "long_ttft": lambda r: r.long_ttft_median, "mean_tpot": lambda r: r.mean_tpot,
           "itl_during_prefill": lambda r: r.itl_during_prefill,
           "itl_outside_prefill": lambda r: r.itl_outside_prefill}
    if metric not in get:
        raise ValueError(f"metric must be one of {sorted(get)}, got {metric!r}")
    return get[metric]


def compare_stall(model: Any, workload: StallWorkload, configs: dict[str, SchedulerConfig],
                  repeats: int = 3, **kw: Any) -> StallComparison:
    """Run each configuration ``repeats`` times on ``workload``, interleaved."""
    runs = interleaved({label: (lambda sc=sc, label=label: run_stall(
        model, workload, sc, label=label, **kw)) for label, sc in configs.items()}, repeats)
    clocks = {r.step_clock for rs in runs.values() for r in rs}
    return StallComparison(workload, dict(configs), runs, "/".join(sorted(clocks)))


@dataclass
class TradeoffPoint:
    """One budget of a trade-off sweep: the long prompt's own TTFT and the decodes' P99 ITL,
    each a median over repeats with its interval, and how many chunks the prompt took."""

    budget: int
    num_chunks: int
    long_ttft_ci: Estimate
    p99_itl_ci: Estimate
    runs: list[StallResult] = field(repr=False)


# The trade-off experiment of the course and benchmarks/tradeoff.py: 32 decodes stream while
# one 1,024-token prompt arrives at step 12, once every decode's 16-token prompt is done (at
# budget 64 the last one finishes in step 10), so the prompt is scheduled at once and beside
# all 32 decodes at every budget: ceil(1024 / (budget - 32)) chunks, from 32 chunks of 32
# tokens to 4 of 256, and the decodes (48 outputs) still run when its prefill ends.
TRADEOFF_WORKLOAD = StallWorkload(num_decodes=32, decode_output_len=48, long_prompt_len=1024,
                                  long_output_len=2, long_arrival_steps=(12,))
TRADEOFF_BUDGETS = (64, 80, 96, 128, 160, 224, 288)


def tradeoff_sweep(model: Any, workload: StallWorkload, budgets: Sequence[int],
                   repeats: int = 3, max_model_len: int = 2048, progress: bool = False,
                   **kw: Any) -> list[TradeoffPoint]:
    """The article's trade-off as a controlled experiment: only the budget changes. For each
    budget (interleaved over ``repeats`` rounds), the long prompt's TTFT and the decodes' P99
    ITL. Budgets must leave the prompt room beside the decodes and still cut it in pieces
    (``num_decodes < budget < num_decodes + long_prompt_len``)."""
    for b in budgets:
        check_int("budget", b, 1)
        lo, hi = workload.num_decodes, workload.num_decodes + workload.long_prompt_len
        if not lo < b < hi:
            raise ValueError(f"budget must be in ({lo}, {hi}) so the {workload.long_prompt_len}"
                             f"-token prompt is chunked beside {lo} decodes, got {b}")
    tasks = {b: (lambda b=b: run_stall(model, workload,
                                       SchedulerConfig.for_budget(b, max_model_len=max_model_len),
                                       label=str(b), **kw)) for b in budgets}
    bar = Progress(len(tasks) * repeats) if progress else None
    if bar is not None:
        tasks = {b: (lambda f=f: (f(), bar.update())[0]) for b, f in tasks.items()}
    runs = interleaved(tasks, repeats)
    if bar is not None:
        bar.close()
    points = []
    for b, rs in runs.items():
        chunks = [len(prompt_chunks(rs[0].step_log, o.request_id))
                  for o in rs[0].long_outputs]
        points.append(TradeoffPoint(b, max(chunks), median_ci([r.long_ttft_median for r in rs]),
                                    median_ci([r.p99_itl for r in rs]), rs))
    return points
