"""How fast is the simulator? Simulate N requests (default 10,000) of Llama-3-8B on an
H100 (cost-model presets) through the real engine loop and the real ``Scheduler``.

The simulator's cost is per *request-step* (one request scheduled in one step): the
scheduler visits every running request every step. A request costs about (prompt chunks
+ output tokens) request-steps, so the time for N requests depends on the workload:
ShareGPT-like requests (median output 415 tokens) cost ~5x more than arXiv-like ones
(median output 208) and far more than short chats. Both numbers are printed: seconds for
the N requests and microseconds per request-step (the rate to compare across changes).

Run: python benchmarks/sim_speed.py [--requests 10000] [--workload sharegpt|arxiv]
     [--qps 4] [--budget 2048] [--profile]
The last line is ``sim_s=<seconds> requests=<N> us_per_request_step=<us>``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from chunkprefill.sim import CostModel, scheduler_config_for, simulate
from chunkprefill.workload import arxiv_like, sharegpt_like

TARGET_S = 5.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--workload", choices=("sharegpt", "arxiv"), default="sharegpt")
    ap.add_argument("--qps", type=float, default=4.0)
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--policy", choices=("chunked", "prefill_first"), default="chunked")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    a = ap.parse_args()
    cm = CostModel.preset("Llama-3-8B", "H100-SXM")
    mml = cm.model.max_model_len
    make = sharegpt_like if a.workload == "sharegpt" else arxiv_like
    wl = make(a.requests, a.qps, seed=0, max_model_len=mml)
    sc = scheduler_config_for(a.policy, a.budget, mml)
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
    res = simulate(wl, cm, sc)
    if a.profile:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    steps = res.step_log
    req_steps = sum(len(s.num_scheduled_tokens) for s in steps)
    sim_time = steps[-1].end_s
    print(f"{cm.describe()}")
    print(f"workload: {a.requests} {a.workload}-like requests at {a.qps:g} QPS, policy "
          f"{a.policy}, budget {a.budget}: {len(steps)} steps, {req_steps} request-steps, "
          f"{sim_time:.0f} s simulated")
    print(f"P99 TBT {res.p99_tbt * 1e3:.1f} ms, median TTFT {res.median_ttft * 1e3:.0f} ms, "
          f"median scheduling delay {res.median_scheduling_delay:.3f} s")
    us = res.wall_s / req_steps * 1e6
    print(f"wall {res.wall_s:.2f} s ({'meets' if res.wall_s <= TARGET_S else 'misses'} the "
          f"{TARGET_S:g} s target); {us:.2f} us per request-step, "
          f"{res.wall_s / len(steps) * 1e6:.0f} us per step")
    print(f"sim_s={res.wall_s:.2f} requests={a.requests} us_per_request_step={us:.2f}")


if __name__ == "__main__":
    main()
