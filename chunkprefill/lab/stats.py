"""Statistics for measured lessons: repeat, interleave, report a median with its interval.

One run on a busy machine is an anecdote. The measured notebooks and benchmarks therefore
repeat each configuration, interleave the configurations (A B C, C B A, A B C, ...) so that a
slow spell of the machine hits all of them alike, and report the **median** with a bootstrap
confidence interval (``scipy.stats.bootstrap``, percentile method, seeded so a notebook's
text is reproducible from its numbers). A claim is asserted only where the intervals allow it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from chunkprefill.checks import check_int

T = TypeVar("T")


@dataclass(frozen=True)
class Estimate:
    """A median of ``n`` repeats and its bootstrap interval ``[low, high]``."""

    median: float
    low: float
    high: float
    n: int

    def fmt(self, scale: float = 1e3, unit: str = "ms", digits: int = 1) -> str:
        """``"145.2 ms [143.0-147.9]"``: the median, then the interval, in ``unit``."""
        m, lo, hi = (f"{v * scale:.{digits}f}" for v in (self.median, self.low, self.high))
        return f"{m} {unit} [{lo}-{hi}]" if self.n > 1 else f"{m} {unit} (1 run)"

    def clearly_below(self, other: Estimate) -> bool:
        """The two intervals do not overlap and this one is lower."""
        return self.high < other.low


def median_ci(samples: Sequence[float] | np.ndarray, confidence: float = 0.95,
              seed: int = 0) -> Estimate:
    """Median of ``samples`` and its percentile-bootstrap interval (``scipy.stats``)."""
    x = np.asarray(samples, dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"samples must be a non-empty 1-D list of finite numbers, got {x!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    med = float(np.median(x))
    if x.size == 1 or np.all(x == x[0]):
        return Estimate(med, med, med, int(x.size))
    from scipy.stats import bootstrap

    res = bootstrap((x,), np.median, confidence_level=confidence, n_resamples=2000,
                    method="percentile", random_state=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Estimate(med, float(ci.low), float(ci.high), int(x.size))


def ratio_ci(numerator: Sequence[float], denominator: Sequence[float],
             confidence: float = 0.95, seed: int = 0) -> Estimate:
    """Median of the per-repeat ratios ``numerator[i] / denominator[i]`` and its interval.
    Repeats are paired: run i of both came from the same round of an interleaved run."""
    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"numerator and denominator need one value per repeat each, "
                         f"got {a.size} and {b.size}")
    if np.any(b == 0):
        raise ValueError("denominator values must be non-zero")
    return median_ci(a / b, confidence, seed)


def interleaved(runs: Mapping[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """Call every run ``repeats`` times, alternating the order each round (forward, then
    backward), so drift in the machine's load falls on every run alike."""
    check_int("repeats", repeats, 1)
    out: dict[str, list[T]] = {k: [] for k in runs}
    order = list(runs)
    for r in range(repeats):
        for k in (order if r % 2 == 0 else order[::-1]):
            out[k].append(runs[k]())
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (``scipy.stats.spearmanr``): +1 when y rises with x."""
    if len(x) != len(y) or len(x) < 3:
        raise ValueError(f"need at least 3 (x, y) pairs of equal length, got {len(x)}, {len(y)}")
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)
