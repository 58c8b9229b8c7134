"""Throughput of our engine against Hugging Face ``generate``: same weights, same prompts, CPU.

64 requests of mixed lengths (seeded): prompts of 16-512 tokens, each asking for its own
number of new tokens (uniform in ``--min-tokens``..``--max-tokens``, as requests do),
generated greedily:

* **ours**: ``LLMEngine`` -- every prompt is added at once; continuous batching with chunked
  prefill under one token budget, paged KV cache, torch attention backend. A request that
  finishes frees its seat and blocks for the next; nothing is ever padded.
* **HF**: ``LlamaForCausalLM.generate`` on static batches of ``--hf-batch-size`` prompts in the
  order given: left padding to the longest prompt of the batch, ``attention_mask``, greedy,
  the batch generates as many tokens as its longest request asks for (``min_new_tokens =
  max_new_tokens``, no EOS) and each request keeps the first tokens it asked for. Padding
  tokens are computed too, and a batch runs until its last member is done: that waste is
  what continuous batching removes. ``--min-tokens == --max-tokens`` gives the equal-length
  case, where only prompt padding is wasted (about 1.7x here).

Both models hold the weights of one random ``LlamaForCausalLM`` (``ToyTransformer.from_hf``),
float32. Prints generated tokens/s for each and the ratio, and checks that outputs agree:
ours against HF's unpadded batch-of-one greedy run for the first ``--check`` prompts (must be
identical), and ours against HF's padded batches (reported; left padding changes float sums
slightly, which may flip a near-tied argmax in a random model).

Measured on this machine's CPU (one torch thread by default: ``--threads``): wall time
(``perf_counter``) and process CPU time, best of ``--repeats`` interleaved runs.
``--profile`` adds a torch-profiler table of where our engine's time goes.

Run: python benchmarks/engine_vs_hf.py [--min-tokens 8 --max-tokens 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from chunkprefill import CacheConfig, LLMEngine, SamplingParams, SchedulerConfig, ToyTransformer


class Clock:
    """Wall time (``perf_counter``) and this process's CPU time (``process_time``). On a
    shared machine the wall clock also counts time spent waiting for a core; with one torch
    thread, CPU time is the work itself, so both are printed."""

    def __enter__(self) -> Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


def best(clocks: list[Clock]) -> Clock:
    """Fastest of repeated runs (least disturbed by other processes), per clock."""
    out = Clock()
    out.wall = min(c.wall for c in clocks)
    out.cpu = min(c.cpu for c in clocks)
    return out


def make_hf_model(args: argparse.Namespace):
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size, num_hidden_layers=args.num_layers,
        num_attention_heads=args.num_heads, num_key_value_heads=args.num_kv_heads,
        max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, attn_implementation=args.hf_attn)
    torch.manual_seed(args.seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def make_prompts(args: argparse.Namespace) -> list[list[int]]:
    g = torch.Generator().manual_seed(args.seed + 1)
    lens = torch.randint(args.min_len, args.max_len + 1, (args.num_prompts,), generator=g)
    return [torch.randint(0, args.vocab_size, (int(n),), generator=g).tolist() for n in lens]


def make_output_lens(args: argparse.Namespace) -> list[int]:
    g = torch.Generator().manual_seed(args.seed + 2)
    return torch.randint(args.min_tokens, args.max_tokens + 1, (args.num_prompts,),
                         generator=g).tolist()


def run_ours(model: ToyTransformer, prompts: list[list[int]], out_lens: list[int],
             args: argparse.Namespace) -> tuple[list[list[int]], float, LLMEngine]:
    longest = max(map(len, prompts)) + args.max_tokens
    block_size = 16
    sc = SchedulerConfig(max_num_batched_tokens=args.budget, max_num_seqs=args.max_num_seqs,
                         max_model_len=longest + 1)
    num_blocks = sum(-(-(len(p) + args.max_tokens) // block_size) for p in prompts)
    cc = CacheConfig(block_size=block_size, num_blocks=num_blocks)
    engine = LLMEngine(model, sc, cc, attention_backend="torch")
    params = [SamplingParams(max_tokens=n, temperature=0.0) for n in out_lens]
    with Clock() as clock:
        outs = engine.generate(prompts, params)
    return [o.output_token_ids for o in outs], clock, engine


@torch.no_grad()
def hf_generate(hf, batch: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy, exactly ``max_tokens`` new tokens per prompt, left-padded batch."""
    width = max(map(len, batch))
    ids = torch.zeros(len(batch), width, dtype=torch.long)  # pad id 0, masked out
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=max_tokens,
                      min_new_tokens=max_tokens, do_sample=False, pad_token_id=0,
                      eos_token_id=None)
    return out[:, width:].tolist()


def run_hf(hf, prompts: list[list[int]], out_lens: list[int], args: argparse.Namespace
           ) -> tuple[list[list[int]], Clock]:
    """Static batches: each generates its longest request's length; rows keep their own."""
    outs: list[list[int]] = []
    with Clock() as clock:
        for i in range(0, len(prompts), args.hf_batch_size):
            lens = out_lens[i: i + args.hf_batch_size]
            rows = hf_generate(hf, prompts[i: i + args.hf_batch_size], max(lens))
            outs += [row[:n] for row, n in zip(rows, lens, strict=True)]
    return outs, clock


def profile_ours(model: ToyTransformer, prompts: list[list[int]], out_lens: list[int],
                 args: argparse.Namespace) -> None:
    """Run our engine under the torch profiler, with the engine's phases labelled by
    wrapping the functions where they are looked up (restored afterwards)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    import chunkprefill.executor as executor_mod
    import chunkprefill.model as model_mod
    import chunkprefill.scheduler as scheduler_mod

    targets = [(scheduler_mod.Scheduler, "schedule"),
               (scheduler_mod.Scheduler, "update_from_output"),
               (executor_mod, "build_attention_metadata"),
               (model_mod, "write_kv"), (model_mod, "paged_attention"),
               (model_mod.ToyTransformer, "compute_logits")]
    saved = [(obj, name, getattr(obj, name)) for obj, name in targets]

    def labelled(fn, label):
        def wrapper(*a, **kw):
            with record_function(label):
                return fn(*a, **kw)
        return wrapper

    for obj, name, fn in saved:
        setattr(obj, name, labelled(fn, f"## {name}"))
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _, clock, _ = run_ours(model, prompts, out_lens, args)
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
    print(f"\n--profile: our engine under the profiler ({clock.wall:.2f} s wall, "
          "profiler overhead included)")
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--min-len", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--min-tokens", type=int, default=8, help="fewest new tokens a request asks")
    ap.add_argument("--max-tokens", type=int, default=128, help="most new tokens a request asks")
    ap.add_argument("--hf-batch-size", type=int, default=16)
    ap.add_argument("--hf-attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--budget", type=int, default=2048, help="our max_num_batched_tokens")
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each; the best counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", type=int, default=4,
                    help="prompts whose outputs must equal HF's unpadded greedy run")
    ap.add_argument("--profile", action="store_true", help="torch-profile our engine")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--hidden-size", type=int, default=256)
    ap.add_argument("--intermediate-size", type=int, default=768)
    ap.add_argument("--num-layers", type=int, default=4)
    ap.add_argument("--num-heads", type=int, default=4)
    ap.add_argument("--num-kv-heads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    hf = make_hf_model(args)
    model = ToyTransformer.from_hf(hf)
    if not 1 <= args.min_tokens <= args.max_tokens:
        ap.error("need 1 <= --min-tokens <= --max-tokens")
    prompts = make_prompts(args)
    out_lens = make_output_lens(args)
    n_prompt = sum(map(len, prompts))
    n_gen = sum(out_lens)
    print(f"model: hidden={args.hidden_size} layers={args.num_layers} heads={args.num_heads}/"
          f"{args.num_kv_heads} vocab={args.vocab_size} float32; CPU, torch threads="
          f"{torch.get_num_threads()} [measured here]")
    print(f"workload: {len(prompts)} prompts, {min(map(len, prompts))}-"
          f"{max(map(len, prompts))} tokens (total {n_prompt}), {args.min_tokens}-"
          f"{args.max_tokens} new tokens each (total {n_gen} asked for)")

    ours_clocks, hf_clocks = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        ours, clock, engine = run_ours(model, prompts, out_lens, args)
        ours_clocks.append(clock)
        hf_outs, clock = run_hf(hf, prompts, out_lens, args)
        hf_clocks.append(clock)
    t_ours, t_hf = best(ours_clocks), best(hf_clocks)
    steps = engine.step_log
    n_prefill_steps = sum(1 for s in steps if s.num_prefill_tokens)
    print(f"ours: LLMEngine budget={args.budget} max_num_seqs={args.max_num_seqs} "
          f"block_size=16, torch attention: {len(steps)} steps ({n_prefill_steps} with prefill), "
          f"wall {t_ours.wall:.2f} s, cpu {t_ours.cpu:.2f} s")
    n_batches = -(-len(prompts) // args.hf_batch_size)
    padded = sum(len(b) * max(map(len, b)) for b in
                 (prompts[i: i + args.hf_batch_size]
                  for i in range(0, len(prompts), args.hf_batch_size)))
    print(f"HF:   generate, {n_batches} static batches of {args.hf_batch_size}, left padding "
          f"({padded} prompt slots for {n_prompt} prompt tokens), attn={args.hf_attn}: "
          f"wall {t_hf.wall:.2f} s, cpu {t_hf.cpu:.2f} s")
    print(f"(best of {args.repeats} interleaved runs each)")

    print(f"\n{'':22}{'ours':>10}{'HF':>10}{'ratio':>9}")
    for label, a, b in (("generated tok/s, wall", n_gen / t_ours.wall, n_gen / t_hf.wall),
                        ("generated tok/s, cpu", n_gen / t_ours.cpu, n_gen / t_hf.cpu),
                        ("prompt+gen tok/s, wall", (n_prompt + n_gen) / t_ours.wall,
                         (n_prompt + n_gen) / t_hf.wall)):
        print(f"{label:22}{a:10.1f}{b:10.1f}{a / b:8.2f}x")
    print("target: ratio >= 3x")

    same_padded = sum(a == b for a, b in zip(ours, hf_outs, strict=True))
    print(f"\noutputs equal to HF's padded batches: {same_padded}/{len(prompts)}")
    ok = True
    for i in range(min(args.check, len(prompts))):
        ref = hf_generate(hf, [prompts[i]], out_lens[i])[0]
        match = ref == ours[i]
        ok &= match
        print(f"prompt {i} ({len(prompts[i])} tokens): ours == HF unpadded greedy: {match}")
    if args.profile:
        profile_ours(model, prompts, out_lens, args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
