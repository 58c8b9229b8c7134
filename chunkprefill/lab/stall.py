"""Measured experiments shared by notebooks and benchmarks (so neither re-implements them).

``run_stall``: requests decode on the toy model while long prompts arrive at fixed *steps*
(not seconds), so the workload's shape is the same on every machine and only the step
times are measured here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.config import CacheConfig, SchedulerConfig, check_int
from chunkprefill.engine import LLMEngine, RequestOutput, SamplingParams, StepRecord
from chunkprefill.kv_cache import cdiv
from chunkprefill.metrics import pooled_itl
from chunkprefill.stats import Estimate, interleaved, median_ci, ratio_ci
from chunkprefill.timing import gc_paused
from chunkprefill.trace import TraceRequest


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

def prefill_chunks(step_log: Sequence[StepRecord], request_id: str, prompt_len: int
                   ) -> list[int]:
    """The sizes of the pieces a request's prompt was computed in, step by step (its
    decode steps after the prompt are not chunks)."""
    chunks: list[int] = []
    for s in step_log:
        n = s.num_scheduled_tokens.get(request_id, 0)
        if n:
            chunks.append(n)
            if sum(chunks) >= prompt_len:
                break
    return chunks


@dataclass
class StallComparison:
    """Several scheduler configurations run on the same ``StallWorkload``, ``repeats`` times
    each, interleaved (``stats.interleaved``). Every statistic is a median over the repeats
    with its bootstrap interval; ratios are paired by repeat."""

    workload: StallWorkload
    configs: dict[str, SchedulerConfig]
    runs: dict[str, list[StallResult]] = field(repr=False)
    step_clock: str = "thread"

    def p99_itl(self, label: str) -> Estimate:
        """The decodes' P99 ITL (seconds)."""
        return median_ci([r.p99_itl for r in self.runs[label]])

    def p50_itl(self, label: str) -> Estimate:
        return median_ci([float(np.percentile(r.decode_itl, 50)) for r in self.runs[label]])

    def long_ttft(self, label: str) -> Estimate:
        """The long prompts' TTFT (median over the long prompts of a run; seconds)."""
        return median_ci([r.long_ttft_median for r in self.runs[label]])

    def ratio(self, metric: str, numerator: str, denominator: str) -> Estimate:
        """``metric`` ("p99_itl" or "long_ttft") of one configuration over another's."""
        get = {"p99_itl": lambda r: r.p99_itl, "long_ttft": lambda r: r.long_ttft_median}
        if metric not in get:
            raise ValueError(f"metric must be one of {sorted(get)}, got {metric!r}")
        f = get[metric]
        return ratio_ci([f(r) for r in self.runs[numerator]],
                        [f(r) for r in self.runs[denominator]])


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
    long_ttft: Estimate
    p99_itl: Estimate
    runs: list[StallResult] = field(repr=False)


def stall_config(budget: int | None, max_model_len: int, max_num_seqs: int = 64
                 ) -> SchedulerConfig:
    """Chunked prefill at ``budget`` tokens per step, or chunking off (``budget=None``: the
    budget is ``max_model_len``, as vLLM demands without chunking)."""
    if budget is None:
        return SchedulerConfig(max_model_len, max_num_seqs, enable_chunked_prefill=False,
                               max_model_len=max_model_len)
    return SchedulerConfig(budget, min(max_num_seqs, budget), max_model_len=max_model_len)


# The trade-off experiment of notebook 06 and benchmarks/tradeoff.py: 32 decodes stream while
# one 1,024-token prompt arrives at step 4; the budgets give chunks of 32 ... 256 tokens
# (32 down to 4 chunks), so the prompt is chunked at every point.
TRADEOFF_WORKLOAD = StallWorkload(num_decodes=32, decode_output_len=48, long_prompt_len=1024,
                                  long_output_len=2, long_arrival_steps=(4,))
TRADEOFF_BUDGETS = (64, 80, 96, 128, 160, 224, 288)


def tradeoff_sweep(model: Any, workload: StallWorkload, budgets: Sequence[int],
                   repeats: int = 3, max_model_len: int = 2048, progress: bool = False,
                   **kw: Any) -> list[TradeoffPoint]:
    """The seed's trade-off as a controlled experiment: only the budget changes. For each
    budget (interleaved over ``repeats`` rounds), the long prompt's TTFT and the decodes' P99
    ITL. Budgets must leave the prompt room beside the decodes and still cut it in pieces
    (``num_decodes < budget < num_decodes + long_prompt_len``)."""
    for b in budgets:
        check_int("budget", b, 1)
        lo, hi = workload.num_decodes, workload.num_decodes + workload.long_prompt_len
        if not lo < b < hi:
            raise ValueError(f"budget must be in ({lo}, {hi}) so the {workload.long_prompt_len}"
                             f"-token prompt is chunked beside {lo} decodes, got {b}")
    tasks = {b: (lambda b=b: run_stall(model, workload, stall_config(b, max_model_len),
                                       label=str(b), **kw)) for b in budgets}
    if progress:
        from tqdm.std import tqdm  # plain text: a stored notebook keeps its final state

        bar = tqdm(total=len(tasks) * repeats, desc="measured runs", unit="run")
        tasks = {b: (lambda f=f: (f(), bar.update())[0]) for b, f in tasks.items()}
    runs = interleaved(tasks, repeats)
    if progress:
        bar.close()
    points = []
    for b, rs in runs.items():
        chunks = [len(prefill_chunks(rs[0].step_log, o.request_id, workload.long_prompt_len))
                  for o in rs[0].long_outputs]
        points.append(TradeoffPoint(b, max(chunks), median_ci([r.long_ttft_median for r in rs]),
                                    median_ci([r.p99_itl for r in rs]), rs))
    return points


# -- sweeps for the timing notebook (07) and benchmarks/gpu_sweep.py ----------------------

def time_prefill_step(model: Any, num_tokens: int, kv_len: int = 0, num_decodes: int = 0,
                      decode_kv_len: int = 512, backend: str | None = None, device: Any = None,
                      block_size: int = 16, warmup: int = 1, iters: int = 3) -> float:
    """Median seconds of one forward step holding a ``num_tokens`` prefill chunk that
    starts at offset ``kv_len`` (it attends to ``kv_len`` cached tokens) plus
    ``num_decodes`` decodes of ``decode_kv_len`` context. Times the model forward alone
    (CUDA events on GPU), on the same metadata path the engine uses."""
    import torch

    from chunkprefill.attention import build_attention_metadata, default_backend
    from chunkprefill.timing import time_fn

    if num_tokens < 1 or kv_len < 0 or num_decodes < 0:
        raise ValueError("num_tokens must be >= 1, kv_len and num_decodes >= 0")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    backend = backend or default_backend(device)
    lens = [(num_tokens, kv_len)] + [(1, decode_kv_len - 1)] * num_decodes
    tables, nb = [], 0
    for q, c in lens:
        n = -(-(q + c) // block_size)
        tables.append(list(range(nb, nb + n)))
        nb += n
    kv = model.allocate_kv_cache(nb, block_size, device=device,
                                 dtype=next(model.parameters()).dtype)
    meta, pos = build_attention_metadata([q for q, _ in lens], [c for _, c in lens], tables,
                                         block_size, device)
    ids = torch.randint(0, model.config.vocab_size, (meta.num_tokens,), device=device,
                        generator=torch.Generator().manual_seed(0)) if device.type == "cpu" \
        else torch.randint(0, model.config.vocab_size, (meta.num_tokens,), device=device)
    with torch.inference_mode():
        times = time_fn(lambda: model.forward(ids, pos, kv, meta, backend=backend), device,
                        warmup=warmup, iters=iters)
    return float(np.median(times))


def step_time_vs_tokens(model: Any, token_counts: Sequence[int], repeats: int = 3,
                        **kw: Any) -> list[Estimate]:
    """Step time for each token count, median of ``repeats`` interleaved rounds with its
    interval: flat while fixed per-step costs dominate, then growing with the arithmetic."""
    runs = interleaved({n: (lambda n=n: time_prefill_step(model, n, iters=1, **kw))
                        for n in token_counts}, repeats)
    return [median_ci(runs[n]) for n in token_counts]


def chunking_overhead(model: Any, prompt_len: int, chunk_sizes: Sequence[int],
                      repeats: int = 3, **kw: Any) -> dict[int, Estimate]:
    """Total prefill time of one ``prompt_len`` prompt cut into chunks of each size,
    divided by the unchunked prefill time measured in the same round; median over
    ``repeats`` rounds with its interval. Above 1.0: later chunks re-read the KV of earlier
    chunks and each step pays fixed costs again."""
    for c in chunk_sizes:
        check_int("chunk size", c, 1)

    def chunked(c: int) -> float:
        return sum(time_prefill_step(model, min(c, prompt_len - off), kv_len=off, iters=1,
                                     **kw) for off in range(0, prompt_len, c))

    runs = interleaved({"whole": lambda: time_prefill_step(model, prompt_len, iters=1, **kw),
                        **{c: (lambda c=c: chunked(c)) for c in chunk_sizes}}, repeats)
    return {c: ratio_ci(runs[c], runs["whole"]) for c in chunk_sizes}


def fit_step_time(token_counts: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """``(fixed_s, per_token_s)`` of the line ``t(n) = fixed + per_token * n`` fitted over the
    whole range by least squares on *relative* errors (a 1 ms step and a 1 s step count
    alike). ``fixed / per_token`` is the step size whose arithmetic costs as much as the
    fixed part: below it a step is about as dear whatever its size, above it time grows
    with the tokens."""
    n = np.asarray(token_counts, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.size < 3 or n.size != t.size:
        raise ValueError("need at least 3 (tokens, seconds) pairs of equal length")
    if np.any(t <= 0):
        raise ValueError("seconds must all be > 0")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]  # rows scaled by 1 / t
    (fixed, per_token), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(fixed), float(per_token)


@dataclass
class BudgetPoint:
    """One run of a serving workload as a point of the dashboard's budget sweep (seconds)."""

    budget: int | None  # None: chunking off
    p50_itl: float
    p99_itl: float
    ttft_p50: float  # over every request
    ttft_p99: float
    long_ttft: float = float("nan")  # median over the long prompts only


# -- a measured serving workload: Poisson arrivals of mixed prompts (notebook 06) ----------

@dataclass
class MixedWorkload:
    """A small serving workload for the toy model: ``num_decodes`` short chat-like requests
    (short prompts, many output tokens: they stream) and ``num_long`` long prompts of
    ``long_prompt_len`` tokens (few output tokens), all arriving as one Poisson process of
    ``rate`` requests per second on the engine's clock. Lengths of the short requests are
    uniform on [1/2, 3/2] x their means. The long prompts take random places in the arrival
    order after the first quarter, so decodes are already streaming when they come; with
    ``long_burst=True`` they arrive one after another (documents pasted together) in the
    first half, so several long prompts are in flight at once and short requests keep
    arriving behind them.
    Deterministic in ``seed``: the same seed gives the same requests at every rate (only the
    arrival times scale), so a rate slider compares like with like."""

    num_decodes: int = 16
    decode_prompt_len: int = 32
    decode_output_len: int = 24
    num_long: int = 3
    long_prompt_len: int = 512
    long_output_len: int = 4
    rate: float = 20.0
    long_burst: bool = False
    vocab_size: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("decode_prompt_len", "decode_output_len", "long_prompt_len",
                     "long_output_len", "vocab_size"):
            check_int(name, getattr(self, name), 1)
        for name in ("num_decodes", "num_long"):
            check_int(name, getattr(self, name), 0)
        if self.num_decodes + self.num_long == 0:
            raise ValueError("the workload is empty: num_decodes + num_long must be >= 1")
        if isinstance(self.rate, bool) or not (isinstance(self.rate, int | float)
                                               and np.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate must be a finite number > 0 (requests/s), got {self.rate!r}")

    @property
    def max_seq_len(self) -> int:
        """The longest sequence (prompt + outputs) any request can reach."""
        lens = []
        if self.num_long:
            lens.append(self.long_prompt_len + self.long_output_len)
        if self.num_decodes:
            lens.append(_hi(self.decode_prompt_len) + _hi(self.decode_output_len))
        return max(lens)

    @property
    def total_tokens(self) -> int:
        return sum(r[2] + r[3] for r in self.requests())

    def requests(self) -> list[tuple[str, float, int, int]]:
        """``(request_id, arrival_s, prompt_len, output_len)`` in arrival order; ids are
        ``d0, d1, ...`` for the short requests and ``L0, L1, ...`` for the long prompts."""
        n = self.num_decodes + self.num_long
        gaps = np.random.default_rng([self.seed, 1]).exponential(1.0, n)
        arrivals = (np.cumsum(gaps) - gaps[0]) / self.rate  # the first request at t = 0
        rng = np.random.default_rng([self.seed, 2])
        first = min(n - self.num_long, max(1, n // 4)) if self.num_decodes else 0
        if self.long_burst:
            start = int(rng.integers(first, max(first, n // 2 - self.num_long) + 1))
            long_at = set(range(start, start + self.num_long))
        else:
            long_at = set(rng.choice(np.arange(first, n), self.num_long, replace=False).tolist())
        out, d, k = [], 0, 0
        for i in range(n):
            if i in long_at:
                out.append((f"L{k}", float(arrivals[i]), self.long_prompt_len,
                            self.long_output_len))
                k += 1
            else:
                out.append((f"d{d}", float(arrivals[i]), _draw(rng, self.decode_prompt_len),
                            _draw(rng, self.decode_output_len)))
                d += 1
        return out

    def prompts(self) -> dict[str, list[int]]:
        """Token ids of every prompt (random, seeded), by request id."""
        rng = np.random.default_rng([self.seed, 3])
        return {rid: rng.integers(0, self.vocab_size, p).tolist()
                for rid, _, p, _ in self.requests()}


def _hi(mean: int) -> int:
    return max(1, (3 * mean) // 2)


def _draw(rng: np.random.Generator, mean: int) -> int:
    return int(rng.integers(max(1, mean // 2), _hi(mean) + 1))


def mixed_scheduler_config(workload: MixedWorkload, budget: int, threshold: int = 0,
                           chunked: bool = True, max_model_len: int = 2048,
                           max_num_seqs: int = 128) -> SchedulerConfig:
    """The ``SchedulerConfig`` for a run of ``workload``: ``max_num_seqs = min(max_num_seqs,
    budget)``. With chunking on, ``max_model_len`` as given; with chunking off it is the
    workload's longest sequence (the smallest context window that serves every request), so
    a budget below it gets vLLM's config error, the seed's point: without chunking, a prompt
    longer than the budget cannot be scheduled at all. Raises that ``ValueError``."""
    return SchedulerConfig(
        max_num_batched_tokens=budget, max_num_seqs=min(max_num_seqs, budget),
        enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold,
        max_model_len=max_model_len if chunked else workload.max_seq_len)


@dataclass
class MixedResult:
    """One measured run of a ``MixedWorkload``: every request's output (with its
    ``RequestMetrics``), in arrival order, and the engine's step log."""

    label: str
    scheduler_config: SchedulerConfig
    outputs: list[RequestOutput] = field(repr=False)
    step_log: list[StepRecord] = field(repr=False)
    device: str = "cpu"
    backend: str = "torch"
    wall_s: float = 0.0

    @property
    def metrics(self) -> dict[str, Any]:
        """``{request_id: RequestMetrics}`` in arrival order (what ``viz`` plots)."""
        return {o.request_id: o.metrics for o in self.outputs}

    @property
    def long_ids(self) -> list[str]:
        return [o.request_id for o in self.outputs if o.request_id.startswith("L")]

    @property
    def itl(self) -> np.ndarray:
        """Every inter-token gap of every request, pooled (``vllm bench serve``), seconds."""
        return pooled_itl(o.metrics for o in self.outputs)

    @property
    def ttft(self) -> np.ndarray:
        """TTFT of every request, seconds."""
        return np.array([o.metrics.ttft for o in self.outputs])

    @property
    def long_ttft(self) -> np.ndarray:
        return np.array([o.metrics.ttft for o in self.outputs if o.request_id.startswith("L")])

    def point(self) -> BudgetPoint:
        """This run as one point of a budget sweep (``budget`` None: chunking off)."""
        itl, ttft = self.itl, self.ttft
        sc = self.scheduler_config
        return BudgetPoint(sc.max_num_batched_tokens if sc.enable_chunked_prefill else None,
                           _pct(itl, 50), _pct(itl, 99), _pct(ttft, 50), _pct(ttft, 99),
                           _pct(self.long_ttft, 50))


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def run_mixed(model: Any, workload: MixedWorkload, scheduler_config: SchedulerConfig,
              cache_config: CacheConfig | None = None, label: str = "",
              attention_backend: str | None = None, device: Any = None) -> MixedResult:
    """Run ``workload`` on ``model`` (measured step times): every request is added up front
    with its arrival time; the engine admits it once its clock reaches it. The default KV
    cache holds the whole workload, so nothing is preempted."""
    import time

    reqs = workload.requests()
    prompts = workload.prompts()
    cache_config = cache_config or CacheConfig(
        block_size=16, num_blocks=sum(-(-(p + o) // 16) for _, _, p, o in reqs) + 16)
    eng = LLMEngine(model, scheduler_config, cache_config, attention_backend, device)
    for rid, t, _, o in reqs:
        eng.add_request(prompts[rid], SamplingParams(max_tokens=o), request_id=rid,
                        arrival_time=t)
    t0 = time.perf_counter()
    with gc_paused():
        outs = eng.run()
    wall = time.perf_counter() - t0
    executor = eng.executor
    return MixedResult(label or _config_label(scheduler_config), scheduler_config, outs,
                       eng.step_log, str(eng.device),
                       getattr(executor, "attention_backend", "?"), wall)


def _config_label(sc: SchedulerConfig) -> str:
    if not sc.enable_chunked_prefill:
        return f"no chunking (budget {sc.max_num_batched_tokens})"
    t = sc.long_prefill_token_threshold
    return f"chunked, budget {sc.max_num_batched_tokens}" + (f", threshold {t}" if t else "")
