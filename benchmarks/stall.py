"""The stall, measured: 32 requests decode on the `small` toy model while long prompts
arrive. Without chunking each long prompt's prefill is one long step that every decode
waits for; with a chunk budget it is spread over several shorter steps.

Only the scheduler configuration changes between the two; each runs ``--repeats`` times,
interleaved, timed with the step clock (the stepping thread's CPU time on a CPU, see
``chunkprefill.timing``). Prints each configuration's P99 / P50 ITL of the decodes and the
long prompts' median TTFT as medians over repeats with 95% bootstrap intervals, then
``p99_itl_ratio=<no-chunk / chunk> ttft_ratio=<chunk / no-chunk>`` (medians of the paired
per-repeat ratios).

Physics says ``ttft_ratio >= 1``: the chunked prompt does the same token work in more steps,
each also carrying the decodes and re-reading the earlier chunks' KV. And
``p99_itl_ratio * ttft_ratio`` is about the number of chunks: a chunked step is about
1/n of the long step plus the per-step overhead."""

from __future__ import annotations

import argparse

import torch

from chunkprefill import ModelConfig, SchedulerConfig, ToyTransformer
from chunkprefill.lab.stall import StallWorkload, compare_stall, run_stall
from chunkprefill.timing import clock_label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=int, default=288,
                    help="chunked budget (default 288: 32 decodes + 256-token chunks)")
    ap.add_argument("--long-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: the step clock is then the stepping "
                    "thread's CPU time, which a busy machine does not stretch)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = ToyTransformer(ModelConfig.small(), seed=0)
    wl = StallWorkload(long_prompt_len=a.long_len)
    max_len = 2 * a.long_len
    configs = {"no-chunk": SchedulerConfig.for_budget(None, max_model_len=max_len, chunked=False),
               f"chunk-{a.budget}": SchedulerConfig.for_budget(a.budget, max_model_len=max_len)}
    run_stall(model, StallWorkload(num_decodes=4, decode_output_len=8, long_prompt_len=64,
                                   long_arrival_steps=(2,)), configs["no-chunk"])  # warm-up
    cmp = compare_stall(model, wl, configs, repeats=a.repeats)
    print(f"step clock: {clock_label('cpu')}; {a.repeats} interleaved repeats; "
          "median [95% bootstrap interval]")
    for label in configs:
        print(f"{label:>10}  P99 ITL {cmp.p99_itl_ci(label).fmt():>24}  P50 ITL "
              f"{cmp.p50_itl_ci(label).fmt():>20}  long TTFT {cmp.long_ttft_ci(label).fmt():>26}")
    chunked = f"chunk-{a.budget}"
    p99 = cmp.ratio("p99_itl", "no-chunk", chunked)
    ttft = cmp.ratio("long_ttft", chunked, "no-chunk")
    print(f"P99 ITL no-chunk / chunked: {p99.fmt(1, 'x', 2)};  "
          f"long TTFT chunked / no-chunk: {ttft.fmt(1, 'x', 2)}")
    print(f"p99_itl_ratio={p99.median:.2f} ttft_ratio={ttft.median:.2f}")


if __name__ == "__main__":
    main()
