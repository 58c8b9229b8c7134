"""Latency metrics with the definitions of ``vllm bench serve``.

TTFT = first token time - arrival. ITL = every gap between consecutive output tokens,
pooled over requests. TPOT = (E2EL - TTFT) / (n_out - 1), per request with n_out > 1.
E2EL = last token time - arrival. Percentiles use linear interpolation (numpy's default,
as vLLM does). Imports no torch."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass(slots=True)
class RequestMetrics:
    """Arrival and per-token times (seconds on the engine's clock) of one request, and when
    it was first scheduled (vLLM's ``scheduled_ts``; None until it is)."""

    arrival_time: float
    token_times: list[float] = field(default_factory=list)
    first_scheduled_time: float | None = None

    @property
    def scheduling_delay(self) -> float | None:
        """First scheduled - arrival: the time in the queue (Sarathi-Serve's criterion)."""
        t = self.first_scheduled_time
        return None if t is None else t - self.arrival_time

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.arrival_time if self.token_times else None

    @property
    def itl(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]

    @property
    def e2el(self) -> float | None:
        return self.token_times[-1] - self.arrival_time if self.token_times else None

    @property
    def tpot(self) -> float | None:
        n = len(self.token_times)
        if n < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (n - 1)


def pooled_itl(metrics: Iterable[RequestMetrics]) -> np.ndarray:
    """Every inter-token gap of every request, pooled in request order (the ITL sample
    of ``vllm bench serve``). One concatenation and one ``np.diff`` instead of a Python
    loop per token: a simulated run has millions of tokens."""
    lists = [m.token_times for m in metrics]
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    total = int(lens.sum())
    if total < 2:
        return np.empty(0)
    times = np.fromiter(itertools.chain.from_iterable(lists), dtype=float, count=total)
    keep = np.ones(total - 1, dtype=bool)
    starts = np.cumsum(lens)[:-1]  # where each request after the first begins
    starts = starts[(starts > 0) & (starts < total)]
    keep[starts - 1] = False  # the gap from one request's last token to the next's first
    return np.diff(times)[keep]


def summarize(metrics: Iterable[RequestMetrics],
              percentiles: Sequence[float] = PERCENTILES) -> dict[str, dict[str, float]]:
    """``{"ttft"|"itl"|"tpot"|"e2el": {"mean", "p50", "p90", "p99", "max", "n"}}`` in seconds;
    ITL pooled over all requests, the others one value per request."""
    ms = list(metrics)
    samples = {
        "ttft": [m.ttft for m in ms if m.ttft is not None],
        "itl": pooled_itl(ms),
        "tpot": [m.tpot for m in ms if m.tpot is not None],
        "e2el": [m.e2el for m in ms if m.e2el is not None],
    }
    out: dict[str, dict[str, float]] = {}
    for name, vals in samples.items():
        if len(vals) == 0:
            out[name] = {"n": 0}
            continue
        arr = np.asarray(vals, dtype=float)
        row = {"n": float(arr.size), "mean": float(arr.mean()), "max": float(arr.max())}
        qs = np.percentile(arr, list(percentiles))  # one partition for all of them
        row.update({f"p{q:g}": float(v) for q, v in zip(percentiles, qs, strict=True)})
        out[name] = row
    return out
