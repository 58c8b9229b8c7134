"""The article's trade-off, measured as a controlled experiment on the `small` toy model:
32 requests decode while one 1,024-token prompt arrives; only the token budget changes.

    較大的 chunk → 長 prompt 較快完成 Prefill → 該 request 的 TTFT 可能更好
                 → 其他 requests 的 inter-token latency 可能變差

Every budget cuts the prompt into pieces (32 < budget < 32 + 1024). Each point is the median
of ``--repeats`` interleaved runs (step clock: the stepping thread's CPU time on a CPU), with
its 95% bootstrap interval. The last line is Spearman's rank correlation of the budget with
the long prompt's own TTFT and with the decodes' P99 ITL:
``rho_long_ttft=X rho_p99_itl=Y`` (the lesson holds when X <= -0.9 and Y >= 0.9)."""

from __future__ import annotations

import argparse

import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.lab.stall import (
    TRADEOFF_BUDGETS,
    TRADEOFF_WORKLOAD,
    StallWorkload,
    run_stall,
    tradeoff_sweep,
)
from chunkprefill.lab.stats import spearman
from chunkprefill.timing import clock_label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = ToyTransformer(ModelConfig.small(), seed=0)
    run_stall(model, StallWorkload(num_decodes=4, decode_output_len=8, long_prompt_len=64,
                                   long_arrival_steps=(2,)),
              SchedulerConfig.for_budget(None, max_model_len=2048, chunked=False))  # warm-up
    points = tradeoff_sweep(model, TRADEOFF_WORKLOAD, TRADEOFF_BUDGETS, repeats=a.repeats)
    print(f"step clock: {clock_label('cpu')}; {a.repeats} interleaved repeats; "
          "median [95% bootstrap interval]")
    print(f"{'budget':>6} {'chunks':>6} {'long prompt TTFT':>26} {'decodes P99 ITL':>24}")
    for p in points:
        print(f"{p.budget:6d} {p.num_chunks:6d} {p.long_ttft_ci.fmt():>26} "
              f"{p.p99_itl_ci.fmt():>24}")
    budgets = [p.budget for p in points]
    rho_ttft = spearman(budgets, [p.long_ttft_ci.median for p in points])
    rho_itl = spearman(budgets, [p.p99_itl_ci.median for p in points])
    print(f"rho_long_ttft={rho_ttft:.2f} rho_p99_itl={rho_itl:.2f}")


if __name__ == "__main__":
    main()
