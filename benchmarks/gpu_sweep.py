"""Notebook 08's sweeps (live GPU timing) as a script: writes CSV + PNG + JSON under a folder.

1. step time vs tokens in the step (flat while reading the weights dominates, then rising
   with the arithmetic);
2. chunking overhead: total prefill time chunked / unchunked, for chunk sizes 256..2048;
3. tile effect: chunk sizes around a multiple of 64/128 (240..272);
4. the trade-off: the long prompt's TTFT and the decodes' P99 ITL vs the budget, with only
   the budget changing (``lab.tradeoff_sweep``).
Every value is a median over interleaved repeats, with its 95% bootstrap interval in the CSV.

On a GPU: the Triton backend, the GPU's 16-bit dtype (bf16 from Ampere on, else fp16), and a
model sized from the GPU's roofline (``chunkprefill.gpu.size_weight_bound_model``) so that a
1-token step reads its weights for longer than the host takes to launch it: the flat region
is then the memory, not Python. Engines warm up before the timed steps. On a CPU the same code
runs with the stepping thread's CPU time on the small toy model, in ``--dtype`` (float32 by
default; ``--dtype bfloat16`` runs the 16-bit path), and says so; ``--smoke`` shrinks every
size to check the script in seconds. ``OUT/environment.json`` names the device and the torch,
Triton and CUDA versions.

Run: python benchmarks/gpu_sweep.py OUT_DIR [--dtype auto|float32|bfloat16|float16] [--smoke]"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import torch

from chunkprefill import ModelConfig, ToyTransformer
from chunkprefill.gpu import describe, environment, gpu_peaks, half_dtype, size_weight_bound_model
from chunkprefill.lab.stall import (
    TRADEOFF_BUDGETS,
    TRADEOFF_WORKLOAD,
    StallWorkload,
    tradeoff_sweep,
)
from chunkprefill.lab.step_cost import chunking_overhead, step_time_vs_tokens
from chunkprefill.timing import clock_label

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["auto", *DTYPES], default="auto",
                    help="auto: the GPU's 16-bit dtype on CUDA, float32 on a CPU")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.set_num_threads(a.threads)
    dtype = DTYPES[a.dtype] if a.dtype != "auto" else half_dtype(device) if cuda else torch.float32
    env = environment(device)
    env.update(dtype=str(dtype), clock=clock_label(device))
    label = (f"GPU {env['device']} ({clock_label(device)}, triton backend, {dtype})" if cuda
             else f"CPU ({clock_label(device)}, torch backend, {dtype})")
    print(describe(env))
    if cuda and not a.smoke:  # a model whose 1-token step is bound by reading its weights
        try:
            sizing = size_weight_bound_model(gpu_peaks(torch.cuda.get_device_name()))
            cfg = sizing.config
            print(sizing.explain())
            env["sizing"] = sizing.explain()
        except ValueError as err:  # a GPU without datasheet peaks here: the old fixed model
            print(f"{err}; using hidden 2048")
            cfg = ModelConfig(vocab_size=32000, hidden_size=2048, num_hidden_layers=8,
                              num_attention_heads=16, num_key_value_heads=4,
                              intermediate_size=5632, max_position_embeddings=8192)
        model = ToyTransformer(cfg, seed=0, device=device, dtype=dtype)
        tokens = [1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096]
        prompt, chunks = 4096, [256, 512, 1024, 2048]
        tiles = list(range(240, 273, 8))
        # 32 decodes beside one 4,096-token prompt: chunks of 64 ... 2048 tokens.
        budgets = [96, 160, 288, 544, 1056, 2080]
        wl = StallWorkload(num_decodes=32, long_prompt_len=4096, vocab_size=cfg.vocab_size,
                           decode_output_len=96, long_output_len=2, long_arrival_steps=(4,))
        max_len = 8192
    elif a.smoke:
        model = ToyTransformer(ModelConfig.tiny(), seed=0, device=device, dtype=dtype)
        tokens, prompt, chunks, tiles = [1, 8, 32], 64, [16, 32], [24, 32]
        budgets = [12, 24]
        wl = StallWorkload(num_decodes=4, decode_prompt_len=8, decode_output_len=8,
                           long_prompt_len=48, long_output_len=2, long_arrival_steps=(2,),
                           vocab_size=ModelConfig.tiny().vocab_size)
        max_len = 128
    else:
        model = ToyTransformer(ModelConfig.small(), seed=0, dtype=dtype)
        tokens = [1, 8, 32, 64, 128, 256, 512]
        prompt, chunks = 1024, [256, 512]
        tiles = [240, 256, 272]
        budgets, wl = list(TRADEOFF_BUDGETS), TRADEOFF_WORKLOAD
        max_len = 2048
    (a.out / "environment.json").write_text(json.dumps(env, indent=1))
    st = step_time_vs_tokens(model, tokens, device=device)
    write_csv(a.out / "step_time.csv", ["tokens", "seconds", "low", "high"],
              [[n, t.median, t.low, t.high] for n, t in zip(tokens, st)])
    oh = chunking_overhead(model, prompt, chunks, device=device)
    write_csv(a.out / "chunking_overhead.csv", ["chunk", "chunked_over_unchunked", "low", "high"],
              [[c, r.median, r.low, r.high] for c, r in oh.items()])
    tt = step_time_vs_tokens(model, tiles, device=device)
    write_csv(a.out / "tile_effect.csv", ["tokens", "seconds", "seconds_per_token"],
              [[n, t.median, t.median / n] for n, t in zip(tiles, tt)])
    bs = tradeoff_sweep(model, wl, budgets, max_model_len=max_len, device=device)
    write_csv(a.out / "tradeoff.csv", ["budget", "chunks", "long_ttft", "long_ttft_low",
                                        "long_ttft_high", "p99_itl", "p99_itl_low", "p99_itl_high"],
              [[p.budget, p.num_chunks, p.long_ttft_ci.median, p.long_ttft_ci.low,
                p.long_ttft_ci.high,
                p.p99_itl_ci.median, p.p99_itl_ci.low, p.p99_itl_ci.high] for p in bs])
    import matplotlib

    matplotlib.use("Agg")  # a script writing files, not a notebook
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    ax[0, 0].plot(tokens, [t.median * 1e3 for t in st], "o-")
    ax[0, 0].set(xscale="log", xlabel="tokens in step", ylabel="ms", title="step time vs tokens")
    ax[0, 1].bar([str(c) for c in oh], [r.median for r in oh.values()])
    ax[0, 1].axhline(1.0, color="k", lw=0.8)
    ax[0, 1].set(xlabel="chunk size", ylabel="chunked / unchunked",
                 title=f"chunking overhead ({prompt}-token prompt)")
    ax[1, 0].plot(tiles, [t.median / n * 1e6 for n, t in zip(tiles, tt)], "o-")
    ax[1, 0].set(xlabel="tokens in step", ylabel="us per token", title="tile effect")
    names = [str(p.budget) for p in bs]
    ax[1, 1].plot(names, [p.p99_itl_ci.median * 1e3 for p in bs], "o-", label="decodes' P99 ITL")
    ax[1, 1].plot(names, [p.long_ttft_ci.median * 1e3 for p in bs], "s-",
                  label="long prompt's TTFT")
    ax[1, 1].set(xlabel="budget", ylabel="ms", title="the trade-off: only the budget changes")
    ax[1, 1].legend()
    fig.suptitle(f"{label}\n{describe(environment(device))}", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out / "gpu_sweep.png", dpi=110)
    print(f"wrote {a.out / 'gpu_sweep.png'}")
    for n, t in zip(tokens, st):
        print(f"step tokens={n:5d}  {t.fmt(1e3, 'ms', 2)}")
    for c, r in oh.items():
        print(f"chunk={c:5d}  chunked/unchunked={r.fmt(1, 'x', 3)}")
    for p in bs:
        print(f"budget={p.budget} ({p.num_chunks} chunks)  p99_itl={p.p99_itl_ci.fmt()}  "
              f"long_ttft={p.long_ttft_ci.fmt()}")


if __name__ == "__main__":
    main()
