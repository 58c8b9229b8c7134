"""Cost of the scheduler itself: schedule() + update_from_output() per step with many
running decodes and a queue of long prompts (no model). Prints microseconds per step and
per running request. Run: python benchmarks/scheduler_overhead.py [--decodes 256]"""

from __future__ import annotations

import argparse
import statistics
import time

from chunkprefill import CacheConfig, Request, Scheduler, SchedulerConfig


def run(num_decodes: int, num_prompts: int, prompt_len: int, steps: int, budget: int) -> None:
    sc = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=num_decodes + 8,
                         max_model_len=8192)
    sched = Scheduler(sc, CacheConfig(block_size=16, num_blocks=200_000))
    for i in range(num_decodes):  # long outputs: they stay running throughout
        sched.add_request(Request(f"d{i}", [0] * 16, max_tokens=100_000 // 16))
    for _ in range(3):  # warm up: admit and prefill the decodes
        out = sched.schedule()
        sched.update_from_output(out, {r: 1 for r in out.num_scheduled_tokens
                                       if sched.requests[r].num_owed_tokens == 0})
    for i in range(num_prompts):
        sched.add_request(Request(f"p{i}", [0] * prompt_len, max_tokens=4))
    per_step, n_running = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = sched.schedule()
        sampled = {r: 1 for r in out.num_scheduled_tokens
                   if sched.requests[r].num_owed_tokens == 0}
        sched.update_from_output(out, sampled)
        per_step.append(time.perf_counter() - t0)
        n_running.append(len(sched.running))
    us = statistics.median(per_step) * 1e6
    per_req = statistics.median(t / n * 1e6 for t, n in zip(per_step, n_running, strict=True))
    print(f"decodes={num_decodes} prompt_queue={num_prompts}x{prompt_len} budget={budget} "
          f"steps={steps}")
    print(f"median us/step = {us:.1f}")
    print(f"median us/running request/step = {per_req:.2f}  (target <= 10)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--decodes", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--budget", type=int, default=2048)
    a = ap.parse_args()
    run(a.decodes, a.prompts, a.prompt_len, a.steps, a.budget)


if __name__ == "__main__":
    main()
