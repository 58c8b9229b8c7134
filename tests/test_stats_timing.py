"""The measurement method: the step clock and the statistics every measured lesson uses."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from chunkprefill.lab.stats import Estimate, interleaved, median_ci, ratio_ci, spearman
from chunkprefill.timing import Timer, clock_label, gc_paused, resolve_clock, time_fn


def test_thread_clock_does_not_count_time_spent_waiting():
    # Sleeping is a stand-in for "the OS ran another program": wall time passes, this
    # thread's CPU time does not. The wall clock sees it; the step clock must not.
    with Timer("cpu", "thread") as step, Timer("cpu", "wall") as wall:
        time.sleep(0.05)
    assert wall.elapsed_s >= 0.05 and step.elapsed_s < 0.01
    with Timer("cpu", "thread") as busy:
        x = 0
        for i in range(300_000):
            x += i
    assert busy.elapsed_s > 0


def test_auto_clock_follows_torch_threads():
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert resolve_clock("cpu") == "thread" and "thread" in clock_label("cpu")
        torch.set_num_threads(2)
        assert resolve_clock("cpu") == "process"
    finally:
        torch.set_num_threads(n)
    assert resolve_clock("cuda:0") == "cuda-events" and "CUDA events" in clock_label("cuda")


@pytest.mark.parametrize("device, clock", [("cpu", "sundial"), ("cpu", "cuda-events"),
                                           ("cuda", "thread")])
def test_bad_clocks_are_refused(device, clock):
    with pytest.raises(ValueError, match="clock"):
        resolve_clock(device, clock)


def test_time_fn_counts_and_validates():
    calls = []
    out = time_fn(lambda: calls.append(1), warmup=2, iters=3)
    assert len(out) == 3 and len(calls) == 5
    with pytest.raises(ValueError, match="iters"):
        time_fn(lambda: None, iters=0)


def test_gc_paused_restores_the_collector():
    import gc

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_median_ci_is_the_median_and_a_bootstrap_interval_inside_the_data():
    x = [10.0, 11.0, 12.0, 13.0, 50.0]
    e = median_ci(x)
    assert e.median == 12.0 and e.n == 5
    # A bootstrap median can only be one of the samples: the interval lies within them.
    assert 10.0 <= e.low <= 12.0 <= e.high <= 50.0
    assert median_ci(x) == e  # seeded: the notebook's text is reproducible
    assert median_ci([3.0]) == Estimate(3.0, 3.0, 3.0, 1)
    assert median_ci([2.0, 2.0, 2.0]) == Estimate(2.0, 2.0, 2.0, 3)
    assert e.fmt(1, "s", 0) == f"12 s [{e.low:.0f}-{e.high:.0f}]"
    assert Estimate(1.0, 0.5, 0.9, 3).clearly_below(Estimate(2.0, 1.0, 3.0, 3)) is True
    for bad in ([], [1.0, float("nan")], [[1.0]]):
        with pytest.raises(ValueError, match="samples"):
            median_ci(bad)
    with pytest.raises(ValueError, match="confidence"):
        median_ci([1.0, 2.0], confidence=1.0)


def test_ratio_ci_pairs_repeats():
    e = ratio_ci([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])  # per-repeat ratios 2, 2, 3
    assert e.median == 2.0 and e.n == 3
    with pytest.raises(ValueError, match="one value per repeat"):
        ratio_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="non-zero"):
        ratio_ci([1.0], [0.0])


def test_interleaved_alternates_the_order_each_round():
    order: list[str] = []
    runs = {k: (lambda k=k: order.append(k) or k) for k in "abc"}
    out = interleaved(runs, 3)
    assert order == list("abccbaabc")
    assert out == {"a": ["a"] * 3, "b": ["b"] * 3, "c": ["c"] * 3}
    with pytest.raises(ValueError, match="repeats"):
        interleaved(runs, 0)


def test_spearman_is_rank_correlation():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [9, 1, 0.5, 0.1]) == pytest.approx(-1.0)
    # One adjacent swap among 5: 1 - 6 * 2 / (5 * 24) = 0.9 (hand-derived).
    assert spearman([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="3"):
        spearman([1, 2], [1, 2])
    assert np.isfinite(spearman([1, 2, 3], [3, 1, 2]))
