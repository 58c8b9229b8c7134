"""Calibrate the cost model on this machine, then predict a workload it never saw.

1. Profile: run the toy model (``ModelConfig.small()``, PyTorch attention backend) through
   the engine over ``lab.calibrate_toy.toy_profile_workloads`` (prefill chunks of many sizes
   and depths, decode batches of many sizes) and fit the cost model's five terms to the
   measured step times (``sim.fit_cost_model``).
2. Held out: a Poisson workload with other lengths and arrivals
   (``lab.calibrate_toy.toy_heldout_workload``), run ``--repeats`` times on the toy model
   (measured) and once through the same engine with ``CostModelExecutor`` (predicted; step
   jitter drawn with the spread the calibration measured).
3. Print measured (median over repeats) and predicted P99 ITL and median TTFT; the last
   line is ``p99_itl_err=<relative error> ttft_err=<relative error>``.

A shared CPU drifts: the same step can take 30% longer a minute later. So profiling runs
and held-out repeats alternate in time (both see the same mix of conditions), and
steps are timed by thread CPU time with torch pinned to one thread (``--clock thread``,
see ``lab.calibrate_toy.ThreadTimeExecutor``): wall-clock time would also count waiting for a core.
``--clock wall`` uses the engine's wall clock instead.
Run: python benchmarks/sim_vs_measured.py [--repeats 5] [--seed 0] [--clock thread]
(about two minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from chunkprefill import CacheConfig, ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.lab.calibrate_toy import (
    measure_toy,
    profile_toy,
    toy_heldout_workload,
    toy_profile_workloads,
    warm_up_toy,
)
from chunkprefill.sim import ModelSpec, fit_cost_model, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-of", type=int, default=1, help="time each step as the fastest of N")
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = ToyTransformer(ModelConfig.small(), seed=0)
    sc = SchedulerConfig(max_num_batched_tokens=a.budget, max_num_seqs=16, max_model_len=2048)
    cc = CacheConfig(block_size=16, num_blocks=4096)
    wl = toy_heldout_workload(seed=a.seed + 1)

    t0 = time.perf_counter()
    warm_up_toy(model, a.clock)
    profile = toy_profile_workloads(a.seed)
    batches, durations, runs = [], [], []
    for k in range(max(len(profile), a.repeats)):  # interleave profiling and held-out runs
        if k < len(profile):
            b, d = profile_toy(model, profile[k:k + 1], a.clock, a.min_of)
            batches += b
            durations += d
        if k < a.repeats:
            runs.append(measure_toy(model, wl, sc, cc, clock=a.clock, min_of=a.min_of))
    cal = fit_cost_model(ModelSpec.from_model_config(model.config), batches, durations)
    cm = cal.cost_model
    print(f"measured {cal.num_steps} profiling steps and {a.repeats} held-out runs "
          f"({a.clock} clock, fastest of {a.min_of}) in {time.perf_counter() - t0:.1f} s")
    print(f"fit: median |pred/meas - 1| = {cal.median_abs_error:.3f}; step jitter sigma = "
          f"{cal.noise_sigma:.3f}")
    print(f"fitted: {cm.describe()}")
    print(f"  peak {cm.hardware.peak_flops / 1e9:.1f} GFLOP/s, bandwidth "
          f"{cm.hardware.mem_bandwidth / 1e9:.1f} GB/s")

    predicted = simulate(wl, cm, sc, cc, noise_sigma=cal.noise_sigma, seed=a.seed)
    print(f"held-out: {len(wl)} requests, Poisson, budget {a.budget}; measured "
          f"~{len(runs[0].step_log)} steps per run, simulated {len(predicted.step_log)} steps "
          f"in {predicted.wall_s:.3f} s")

    rows = [("P99 ITL", lambda r: r.p99_itl),
            ("median TTFT", lambda r: r.median_ttft),
            ("median ITL", lambda r: r.summary["itl"]["p50"]),
            ("P99 TTFT", lambda r: r.summary["ttft"]["p99"])]
    print(f"{'metric (ms)':<13}{'measured':>9}  {'(each run)':<30}{'predicted':>9}{'rel err':>9}")
    errs = {}
    for name, f in rows:
        m = statistics.median(f(r) for r in runs)
        p = f(predicted)
        each = " ".join(f"{f(r) * 1e3:.1f}" for r in runs)
        errs[name] = abs(p / m - 1)
        print(f"{name:<13}{m * 1e3:>9.1f}  {'(' + each + ')':<30}{p * 1e3:>9.1f}{p / m - 1:>+9.3f}")
    print(f"p99_itl_err={errs['P99 ITL']:.3f} ttft_err={errs['median TTFT']:.3f}")


if __name__ == "__main__":
    main()
