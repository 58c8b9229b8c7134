"""Serving workloads: seeded Poisson arrivals and request lengths, real or parametric.

A workload is a list of ``WorkloadRequest`` (arrival time, prompt length, output length),
nothing more: the simulator feeds it to the same engine loop as the toy model.

``sharegpt`` draws (prompt, output) pairs of real requests, uniformly with replacement, from
the ShareGPT trace Sarathi-Serve serves (30,731 requests, Llama-2 tokens, filtered to 8K;
shipped in ``chunkprefill.data`` with its attribution and license). ``WORKLOADS`` names
every choice, real and parametric.

Lengths come from a ``LengthDist``: fixed, uniform, or lognormal fitted to a median and a
P90. The two presets follow the length statistics that Sarathi-Serve (Agrawal et al., OSDI
2024, arXiv:2403.02310, Table 2) reports for its two datasets, in Llama-2 tokens:

    openchat_sharegpt4 (chat):           prompt median 1730, P90 5696; output median 415, P90 834
    arxiv_summarization (long prompts):  prompt median 7059, P90 12985; output median 208, P90 371

(The two prompt medians are confirmed by a second, independent summary of the paper; the
P90s and the output statistics have not been cross-checked: verify them against Table 2
before quoting them as the paper's.)

A lognormal with median m and P90 p has mu = ln m and sigma = ln(p / m) / z_0.9, z_0.9 =
1.2816. Only the median and P90 are matched; the real distributions are not lognormal,
so these are "ShareGPT-like" and "arXiv-like", not the datasets. Arrivals are a Poisson
process: exponential gaps of mean 1/qps. Lengths and arrivals use separate random
streams of the same seed, so changing ``qps`` rescales the arrival times of *the same*
requests (common random numbers: a capacity search then compares like with like).
Imports numpy only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chunkprefill.checks import check_int, check_positive
from chunkprefill.engine import LLMEngine, RequestOutput
from chunkprefill.request import SamplingParams
from chunkprefill.timing import gc_paused

Z90 = 1.2815515655446004  # standard normal quantile at 0.9


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts (>= 1). Build with ``fixed``, ``uniform`` or
    ``lognormal``; draw with ``sample(rng, n)``."""

    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "lognormal"):
            raise ValueError(f"kind must be 'fixed', 'uniform' or 'lognormal', got {self.kind!r}")

    @classmethod
    def fixed(cls, n: int) -> LengthDist:
        return cls("fixed", check_int("length", n, 1))

    @classmethod
    def uniform(cls, lo: int, hi: int) -> LengthDist:
        """Integers uniform on [lo, hi], both included."""
        lo, hi = check_int("lo", lo, 1), check_int("hi", hi, 1)
        if hi < lo:
            raise ValueError(f"hi must be >= lo, got lo={lo}, hi={hi}")
        return cls("uniform", lo, hi)

    @classmethod
    def lognormal(cls, median: float, p90: float | None = None,
                  sigma: float | None = None) -> LengthDist:
        """Lognormal with the given median and either its P90 or its log-space sigma."""
        median = check_positive("median", median)
        if (p90 is None) == (sigma is None):
            raise ValueError("give exactly one of p90 or sigma")
        if p90 is not None:
            p90 = check_positive("p90", p90)
            if p90 <= median:
                raise ValueError(f"p90 must be > median ({median}), got {p90}")
            sigma = math.log(p90 / median) / Z90
        sigma = check_positive("sigma", sigma)
        return cls("lognormal", median, sigma)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths >= 1 (int64)."""
        if self.kind == "fixed":
            out = np.full(n, self.a)
        elif self.kind == "uniform":
            out = rng.integers(int(self.a), int(self.b) + 1, size=n)
        else:
            out = np.rint(rng.lognormal(math.log(self.a), self.b, size=n))
        return np.maximum(out, 1).astype(np.int64)

    def median(self) -> float:
        return self.a if self.kind != "uniform" else (self.a + self.b) / 2


# Sarathi-Serve Table 2 (arXiv:2403.02310): see the module docstring.
SHAREGPT_PROMPT = LengthDist.lognormal(1730, p90=5696)
SHAREGPT_OUTPUT = LengthDist.lognormal(415, p90=834)
ARXIV_PROMPT = LengthDist.lognormal(7059, p90=12985)
ARXIV_OUTPUT = LengthDist.lognormal(208, p90=371)


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload: when it arrives (seconds) and how long it is (tokens)."""

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int


def poisson_arrivals(num_requests: int, qps: float, seed: int = 0) -> np.ndarray:
    """Arrival times (seconds, sorted, first one after one gap) of a Poisson process with
    rate ``qps``. The gaps come from the seed alone, divided by ``qps``."""
    n = check_int("num_requests", num_requests, 1)
    qps = check_positive("qps", qps)
    gaps = np.random.default_rng([int(seed), 1]).exponential(1.0, size=n)
    return np.cumsum(gaps) / qps


def make_workload(num_requests: int, qps: float, prompt: LengthDist, output: LengthDist,
                  seed: int = 0, max_prompt_len: int | None = None,
                  max_output_len: int | None = None) -> list[WorkloadRequest]:
    """``num_requests`` requests with Poisson arrivals at ``qps`` and lengths drawn from
    ``prompt`` / ``output``, clipped to ``max_prompt_len`` / ``max_output_len``.
    Deterministic in ``seed``; the lengths do not depend on ``qps``."""
    n = check_int("num_requests", num_requests, 1)
    arrivals = poisson_arrivals(n, qps, seed)
    rng = np.random.default_rng([int(seed), 2])
    p = prompt.sample(rng, n)
    o = output.sample(rng, n)
    if max_prompt_len is not None:
        p = np.minimum(p, check_int("max_prompt_len", max_prompt_len, 1))
    if max_output_len is not None:
        o = np.minimum(o, check_int("max_output_len", max_output_len, 1))
    return [WorkloadRequest(f"r{i}", float(t), int(a), int(b))
            for i, (t, a, b) in enumerate(zip(arrivals, p, o, strict=True))]


def sharegpt_like(num_requests: int, qps: float, seed: int = 0,
                  max_model_len: int = 8192) -> list[WorkloadRequest]:
    """Chat-like lengths (median prompt 1730, output 415), fitted into ``max_model_len``:
    prompts are clipped so that prompt + output < max_model_len."""
    return _fit(make_workload(num_requests, qps, SHAREGPT_PROMPT, SHAREGPT_OUTPUT, seed),
                max_model_len)


def arxiv_like(num_requests: int, qps: float, seed: int = 0,
               max_model_len: int = 16384) -> list[WorkloadRequest]:
    """Summarisation-like lengths (median prompt 7059, output 208), fitted into
    ``max_model_len`` like ``sharegpt_like``."""
    return _fit(make_workload(num_requests, qps, ARXIV_PROMPT, ARXIV_OUTPUT, seed),
                max_model_len)


def sharegpt(num_requests: int, qps: float, seed: int = 0,
             max_model_len: int = 8192) -> list[WorkloadRequest]:
    """Real ShareGPT requests: each draws one request of the trace (its prompt and output
    length together, uniformly, with replacement), Poisson arrivals at ``qps``; fitted into
    ``max_model_len`` like ``sharegpt_like`` (the trace's own cap is 8K: at 8192 only the
    requests whose prompt + output exceed it are clipped). Deterministic in ``seed``; the
    requests do not depend on ``qps``."""
    from chunkprefill.data import sharegpt_lengths

    n = check_int("num_requests", num_requests, 1)
    arrivals = poisson_arrivals(n, qps, seed)
    prompt, output = sharegpt_lengths()
    idx = np.random.default_rng([int(seed), 3]).integers(0, len(prompt), size=n)
    return _fit([WorkloadRequest(f"r{i}", float(t), int(prompt[j]), int(output[j]))
                 for i, (t, j) in enumerate(zip(arrivals, idx, strict=True))], max_model_len)


WORKLOADS = {"sharegpt": sharegpt, "sharegpt_like": sharegpt_like, "arxiv_like": arxiv_like}


def named_workload(name: str, num_requests: int, qps: float, seed: int = 0,
                   max_model_len: int = 8192) -> list[WorkloadRequest]:
    """A workload by name: ``"sharegpt"`` (the real trace's lengths), ``"sharegpt_like"``
    or ``"arxiv_like"`` (lognormal lengths with the paper's medians and P90s)."""
    if name not in WORKLOADS:
        raise ValueError(f"workload must be one of {sorted(WORKLOADS)}, got {name!r}")
    return WORKLOADS[name](num_requests, qps, seed=seed, max_model_len=max_model_len)


def _fit(reqs: list[WorkloadRequest], max_model_len: int) -> list[WorkloadRequest]:
    """Clip outputs to half the context, then prompts to what is left (minus one)."""
    max_model_len = check_int("max_model_len", max_model_len, 1)
    if max_model_len < 4:
        raise ValueError(f"max_model_len must be >= 4, got {max_model_len}")
    out = []
    for r in reqs:
        o = min(r.output_len, max_model_len // 2)
        p = min(r.prompt_len, max_model_len - 1 - o)
        out.append(WorkloadRequest(r.request_id, r.arrival_time, p, o))
    return out


def run_workload(engine: LLMEngine, workload: Sequence[WorkloadRequest]) -> list[RequestOutput]:
    """Feed ``workload`` to ``engine`` as its clock reaches each arrival and step until
    every request has finished. A request is added (with its true arrival time) right
    before the first step that starts at or after its arrival, which is what
    ``LLMEngine.step`` does with future arrivals itself; adding them just in time keeps
    the engine's pending list short. Works for any executor, measured or simulated;
    decode-only stretches are fast-forwarded where the executor can price them.
    Returns the finished requests' outputs, in finishing order."""
    reqs = sorted(workload, key=lambda r: r.arrival_time)
    params_cache: dict[int, SamplingParams] = {}
    i, n = 0, len(reqs)
    outputs: list[RequestOutput] = []

    def add(r: WorkloadRequest) -> None:
        sp = params_cache.get(r.output_len)
        if sp is None:
            sp = params_cache[r.output_len] = SamplingParams(max_tokens=r.output_len)
        engine.add_request([0] * r.prompt_len, sp, request_id=r.request_id,
                           arrival_time=r.arrival_time)

    # A run allocates millions of small objects that live until the end; Python's cyclic
    # GC would rescan all of them (and every token list) again and again for cycles this
    # loop never makes. Paused for the run, restored after: a third of the time saved.
    with gc_paused():
        while i < n or engine.has_unfinished_requests():
            while i < n and reqs[i].arrival_time <= engine.clock:
                add(reqs[i])
                i += 1
            if not engine.has_unfinished_requests():
                add(reqs[i])  # idle: a future arrival; the engine's clock jumps to it
                i += 1
            # Decode-only stretches until the next arrival in bulk (if the executor can).
            run = engine.step_fast_forward(reqs[i].arrival_time if i < n else math.inf)
            outputs += engine.step() if run is None else run
    return outputs
