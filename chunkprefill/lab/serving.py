"""A small serving workload on the toy model (Poisson arrivals of short chat-like requests and a
few long prompts), measured: the chunk-size dashboard's runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.checks import cdiv, check_int
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine, RequestOutput, StepRecord
from chunkprefill.metrics import pooled_itl
from chunkprefill.request import SamplingParams
from chunkprefill.timing import gc_paused


@dataclass
class BudgetPoint:
    """One run of a serving workload as a point of the dashboard's budget sweep (seconds)."""

    budget: int | None  # None: chunking off
    p50_itl: float
    p99_itl: float
    ttft_p50: float  # over every request
    ttft_p99: float
    long_ttft: float = float("nan")  # median over the long prompts only


@dataclass
class MixedWorkload:
    """A small serving workload for the toy model: ``num_decodes`` short chat-like requests
    (short prompts, many output tokens: they stream) and ``num_long`` long prompts of
    ``long_prompt_len`` tokens (few output tokens), all arriving as one Poisson process of
    ``rate`` requests per second. Lengths of the short requests are uniform on [1/2, 3/2] x
    their means. The long prompts take random places in the arrival order after the first
    quarter, so decodes are already streaming when they come; with ``long_burst=True`` they
    arrive one after another (documents pasted together) in the first half, so several long
    prompts are in flight at once and short requests keep arriving behind them.
    Deterministic in ``seed``: the same seed gives the same requests at every rate (only the
    arrival times scale), so a rate slider compares like with like. The defaults keep several
    short requests streaming whenever a long prompt runs, so its steps show in their P99 ITL
    (at a light load a long step stalls too few gaps to reach the P99).

    The arrival times are on a **nominal clock**, not this machine's: ``run_mixed`` advances
    it by ``nominal_step_time(tokens)`` = ``nominal_step_s + nominal_token_s x`` the step's
    tokens after every step (about the small toy's step time on a laptop CPU) and admits a
    request before the first step that starts at or after its arrival. So the schedule (which
    request runs how many tokens in which step) is the same on every machine, however fast;
    only the step durations, hence TTFT and ITL, are measured."""

    num_decodes: int = 16
    decode_prompt_len: int = 32
    decode_output_len: int = 48
    num_long: int = 3
    long_prompt_len: int = 512
    long_output_len: int = 4
    rate: float = 40.0
    long_burst: bool = False
    vocab_size: int = 2048
    seed: int = 0
    nominal_step_s: float = 0.002
    nominal_token_s: float = 0.0001

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
        for name, allowed, ok in (("nominal_step_s", "> 0", lambda v: v > 0),
                                  ("nominal_token_s", ">= 0", lambda v: v >= 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, int | float) and np.isfinite(v)
                                           and ok(v)):
                raise ValueError(f"{name} must be a finite number {allowed} (seconds), "
                                 f"got {v!r}")

    def nominal_step_time(self, num_tokens: int) -> float:
        """How far one step of ``num_tokens`` tokens advances the arrival clock (seconds):
        a fixed model of the step, so arrivals do not depend on this machine's speed."""
        return self.nominal_step_s + self.nominal_token_s * num_tokens

    @property
    def max_seq_len(self) -> int:
        """The longest sequence (prompt + outputs) any request can reach."""
        lens = []
        if self.num_long:
            lens.append(self.long_prompt_len + self.long_output_len)
        if self.num_decodes:
            lens.append(_hi(self.decode_prompt_len) + _hi(self.decode_output_len))
        return max(lens)

    def scheduler_config(self, budget: int, threshold: int = 0, chunked: bool = True,
                         max_model_len: int = 2048) -> SchedulerConfig:
        """The ``SchedulerConfig`` for a run of this workload (``SchedulerConfig.for_budget``).
        With chunking off the context window is the workload's longest sequence (the
        smallest that serves every request), so a budget below it gets vLLM's config error,
        the article's point: without chunking, a prompt longer than the budget cannot be
        scheduled at all. Raises that ``ValueError``."""
        return SchedulerConfig.for_budget(
            budget, max_model_len=max_model_len if chunked else self.max_seq_len,
            chunked=chunked, threshold=threshold)

    def requests(self) -> list[tuple[str, float, int, int]]:
        """``(request_id, arrival_s, prompt_len, output_len)`` in arrival order, ``arrival_s``
        on the nominal arrival clock; ids are ``d0, d1, ...`` for the short requests and
        ``L0, L1, ...`` for the long prompts."""
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
        """``{request_id: RequestMetrics}`` in arrival order (what ``course.plots`` draws)."""
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
    """Run ``workload`` on ``model`` (measured step times). Arrivals are placed by the
    workload's nominal clock (``MixedWorkload.nominal_step_time``), never by the measured
    one: a request is added right before the first step that starts at or after its
    arrival, so its TTFT counts from that step's start on the engine's (measured) clock.
    When nothing runs, both clocks jump to the next arrival. The default KV cache holds the
    whole workload, so nothing is preempted."""
    import time

    reqs = workload.requests()
    prompts = workload.prompts()
    cache_config = cache_config or CacheConfig(
        block_size=16, num_blocks=sum(cdiv(p + o, 16) for _, _, p, o in reqs) + 16)
    eng = LLMEngine(model, scheduler_config, cache_config, attention_backend, device)
    pending = list(reqs)  # in arrival order
    nominal = 0.0  # the arrival clock
    t0 = time.perf_counter()
    with gc_paused():
        while pending or eng.has_unfinished_requests():
            gap = 0.0
            if not eng.has_unfinished_requests() and pending[0][1] > nominal:
                gap, nominal = pending[0][1] - nominal, pending[0][1]  # idle
            while pending and pending[0][1] <= nominal:
                rid, _, _, o = pending.pop(0)
                eng.add_request(prompts[rid], SamplingParams(max_tokens=o), request_id=rid,
                                arrival_time=eng.clock + gap)
            before = len(eng.step_log)
            eng.step()
            nominal += sum(workload.nominal_step_time(s.num_tokens)
                           for s in eng.step_log[before:])
        outs = eng.run()  # nothing left to run: every request's output, in arrival order
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
