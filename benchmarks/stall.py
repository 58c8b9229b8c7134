"""The stall, measured: 32 requests decode on the `small` toy model while long prompts
arrive. Without chunking each long prompt's prefill is one long step that every decode
waits for; with a chunk budget it is spread over many short steps.
Prints P99/max ITL of the decodes and the long prompts' median TTFT for each, then
``p99_itl_ratio=<no-chunk / chunk> ttft_ratio=<chunk / no-chunk>``."""

from __future__ import annotations

import argparse

import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.experiments import StallWorkload, run_stall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=int, default=192, help="chunked budget (default 192)")
    ap.add_argument("--long-len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a busy 2-core machine, OpenMP barrier "
                    "waits make 2-thread step times erratic)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = ToyTransformer(ModelConfig.small(), seed=0)
    wl = StallWorkload(long_prompt_len=a.long_len)
    max_len = 2048
    configs = {
        "no-chunk": SchedulerConfig(max_num_batched_tokens=max_len, max_num_seqs=64,
                                    enable_chunked_prefill=False, max_model_len=max_len),
        f"chunk-{a.budget}": SchedulerConfig(max_num_batched_tokens=a.budget, max_num_seqs=64,
                                             max_model_len=max_len),
    }
    run_stall(model, StallWorkload(num_decodes=4, decode_output_len=8, long_prompt_len=64,
                                   long_arrival_steps=(2,)), configs["no-chunk"])  # warm-up
    res = {}
    for _ in range(a.repeats):  # interleaved, so drift in machine load hits both alike
        for label, sc in configs.items():
            r = run_stall(model, wl, sc, label=label)
            if label not in res or r.p99_itl < res[label].p99_itl:
                res[label] = r
    print(f"{'config':>12} {'p99 ITL ms':>11} {'max ITL ms':>11} {'long TTFT p50 ms':>17}")
    for label, r in res.items():
        print(f"{label:>12} {r.p99_itl * 1e3:11.1f} {r.max_itl * 1e3:11.1f} "
              f"{r.long_ttft_median * 1e3:17.1f}")
    nc, ch = res["no-chunk"], res[f"chunk-{a.budget}"]
    print(f"p99_itl_ratio={nc.p99_itl / ch.p99_itl:.2f} "
          f"ttft_ratio={ch.long_ttft_median / nc.long_ttft_median:.2f}")


if __name__ == "__main__":
    main()
