"""Time the Triton unified-attention kernel on a GPU (measured here, with CUDA events).

    python benchmarks/gpu_kernels.py            # on a CUDA machine
    python benchmarks/gpu_kernels.py --cpu-smoke  # anywhere: tiny shapes, TRITON_INTERPRET=1,
                                                  # checks this script runs; times mean nothing

1. Correctness, compiled (no interpreter): kernel vs the torch backend vs the loop reference,
   fp32 and the GPU's 16-bit dtype (bf16 from Ampere on, fp16 on a T4), mixed batches; the K/V
   store vs index_put. Launch configurations come from the GPU's limits
   (``chunkprefill.kernels.launch``).
2. Bandwidth yardstick: a device-to-device copy of a large tensor (bytes read + written / s).
3. Timing of one attention layer (Llama-3-8B-like: 32 query heads, 8 KV heads, head_dim 128,
   16-bit, block_size 16) on decode-only and mixed batches. Timed with
   ``triton.testing.do_bench`` (``timing.kernel_time_s``): calls queued back to back with no
   synchronise between them, the L2 cache flushed before each, median. Reported: that time,
   the torch backend's time (which includes its host-side Python), and KV bytes read per
   second -- each sequence's K and V counted once, so it is an *effective* rate (prefill tiles
   re-read K/V, from L2) -- as a share of the copy bandwidth. Decode attention is memory-bound:
   near the copy rate is the goal.

``--out DIR`` also writes ``DIR/gpu_kernels.json``: every number, with the device and the
torch, Triton and CUDA versions. On a machine without CUDA it prints that no GPU is present
and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run the whole script on tiny CPU shapes under TRITON_INTERPRET=1")
    parser.add_argument("--iters", type=int, default=50,
                        help="timed repetitions per case (do_bench's rep, in ms, on a GPU)")
    parser.add_argument("--out", type=Path, help="folder for gpu_kernels.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu_smoke:  # must precede the first import of chunkprefill.kernels
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("No CUDA GPU present: nothing to time. (Kernel correctness on CPU runs under "
              "TRITON_INTERPRET=1 in tests/test_kernels.py.)")
        return 0
    if not args.cpu_smoke and os.environ.get("TRITON_INTERPRET") == "1":
        print("TRITON_INTERPRET=1 is set: unset it to time compiled kernels.")
        return 1
    bench = Bench(torch, smoke=args.cpu_smoke, iters=1 if args.cpu_smoke else args.iters)
    ok = bench.check_correctness()
    copy_gbps = bench.copy_bandwidth()
    bench.time_cases(copy_gbps)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "gpu_kernels.json"
        path.write_text(json.dumps({"environment": bench.env, "correct": ok,
                                    "copy_gbps": copy_gbps, **bench.results}, indent=1))
        print(f"wrote {path}")
    return 0 if ok else 1


class Bench:
    """Shapes, data and timers for one run (torch is passed in: imported after the env var)."""

    def __init__(self, torch, smoke: bool, iters: int) -> None:
        from chunkprefill.attention import (
            build_attention_metadata,
            paged_attention,
            ref_paged_attention,
            write_kv,
        )
        from chunkprefill.gpu import describe, environment, half_dtype
        from chunkprefill.timing import kernel_time_s

        self.torch = torch
        self.smoke = smoke
        self.iters = iters
        self.device = "cpu" if smoke else "cuda"
        self.build_attention_metadata = build_attention_metadata
        self.paged_attention = paged_attention
        self.ref_paged_attention = ref_paged_attention
        self.write_kv = write_kv
        self.kernel_time_s = kernel_time_s
        self.results: dict[str, list[dict[str, object]]] = {"correctness": [], "timing": []}
        if smoke:
            self.num_q_heads, self.num_kv_heads, self.head_dim, self.block_size = 4, 2, 16, 16
        else:
            self.num_q_heads, self.num_kv_heads, self.head_dim, self.block_size = 32, 8, 128, 16
        self.gen = torch.Generator(device=self.device).manual_seed(0)
        # bfloat16 where the GPU has it (Ampere on), float16 on a T4 / V100
        self.half = torch.bfloat16 if smoke else half_dtype(self.device)
        self.env = environment(self.device)
        print(describe(self.env) + (" (Triton interpreter)" if smoke else ""))
        print(f"layer: {self.num_q_heads} q heads, {self.num_kv_heads} kv heads, head_dim "
              f"{self.head_dim}, block_size {self.block_size}")
        if smoke:
            print("SMOKE RUN: interpreter on tiny shapes; the numbers below are not a benchmark.")

    # ------------------------------------------------------------------ data

    def make_batch(self, query_lens: list[int], kv_lens: list[int], dtype):
        """Random caches sized for the batch, blocks handed out in a random order."""
        torch = self.torch
        bs = self.block_size
        blocks_per_seq = [-(-kv // bs) for kv in kv_lens]
        num_blocks = sum(blocks_per_seq) + 8
        order = torch.randperm(num_blocks, generator=self.gen, device=self.device).tolist()
        tables, i = [], 0
        for n in blocks_per_seq:
            tables.append(order[i : i + n])
            i += n
        shape = (num_blocks, bs, self.num_kv_heads, self.head_dim)
        k_cache = torch.randn(shape, generator=self.gen, device=self.device).to(dtype)
        v_cache = torch.randn(shape, generator=self.gen, device=self.device).to(dtype)
        query = torch.randn(sum(query_lens), self.num_q_heads, self.head_dim,
                            generator=self.gen, device=self.device).to(dtype)
        computed = [kv - q for q, kv in zip(query_lens, kv_lens, strict=True)]
        meta, _ = self.build_attention_metadata(query_lens, computed, tables, bs, self.device)
        return query, k_cache, v_cache, meta, tables

    # ------------------------------------------------------------------ timing

    def time_ms(self, fn) -> float:
        """Median milliseconds of one ``fn()``: ``do_bench`` on a GPU (queued calls, L2 flushed
        before each, no per-call synchronise), the thread's CPU time in the smoke run."""
        return self.kernel_time_s(fn, self.device, iters=self.iters) * 1e3

    # ------------------------------------------------------------------ 1. correctness

    def check_correctness(self) -> bool:
        torch = self.torch
        print("\n== correctness: triton (compiled) vs torch backend vs loop reference ==")
        cases = {
            "decodes": ([1] * 5, [1, 17, 64, 100, 333]),
            "mixed": ([1, 17, 1, 64, 5], [40, 57, 1, 200, 5]),
            "chunk@1024": ([1, 1, 512], [300, 1500, 1536]),
        }
        if self.smoke:
            cases = {"mixed": ([1, 17, 5], [40, 37, 5])}
        ok = True
        for dtype, tol in ((torch.float32, 1e-4), (self.half, 3e-2)):
            for name, (q_lens, kv_lens) in cases.items():
                query, k_cache, v_cache, meta, tables = self.make_batch(q_lens, kv_lens, dtype)
                scale = self.head_dim**-0.5
                ref = self.ref_paged_attention(query.float(), k_cache.float(), v_cache.float(),
                                               q_lens, kv_lens, tables, scale)
                tri = self.paged_attention(query, k_cache, v_cache, meta, scale, "triton")
                tor = self.paged_attention(query, k_cache, v_cache, meta, scale, "torch")
                err_tri = (tri.float() - ref).abs().max().item()
                err_tor = (tor.float() - ref).abs().max().item()
                good = err_tri <= tol
                ok &= good
                self.results["correctness"].append(dict(
                    dtype=str(dtype), case=name, err_triton=err_tri, err_torch=err_tor, tol=tol))
                print(f"  {str(dtype):15s} {name:11s} max|triton-ref| {err_tri:.2e}  "
                      f"max|torch-ref| {err_tor:.2e}  (tol {tol:.0e}) {'ok' if good else 'FAIL'}")
        # K/V store: exact copy through slot_mapping
        query, k_cache, v_cache, meta, _ = self.make_batch([1, 17, 5], [40, 37, 5], self.half)
        key = torch.randn(meta.num_tokens, self.num_kv_heads, self.head_dim,
                          generator=self.gen, device=self.device).to(self.half)
        k_tri, v_tri, k_ref, v_ref = (k_cache.clone(), v_cache.clone(), k_cache.clone(),
                                      v_cache.clone())
        self.write_kv(key, -key, k_tri, v_tri, meta.slot_mapping, "triton")
        self.write_kv(key, -key, k_ref, v_ref, meta.slot_mapping, "torch")
        good = torch.equal(k_tri, k_ref) and torch.equal(v_tri, v_ref)
        ok &= good
        print(f"  reshape_and_cache == index_put: {'ok' if good else 'FAIL'}")
        self.results["correctness"].append(dict(dtype=str(self.half), case="kv_store",
                                                equal=bool(good)))
        return ok

    # ------------------------------------------------------------------ 2. copy bandwidth

    def copy_bandwidth(self) -> float:
        """GB/s of a large device-to-device copy, counting bytes read + bytes written."""
        torch = self.torch
        nbytes = (1 << 20) if self.smoke else (2 << 30)
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        ms = self.time_ms(lambda: dst.copy_(src))
        gbps = 2 * nbytes / (ms * 1e-3) / 1e9
        print(f"\n== yardstick: copy of {nbytes / 2**30:.3g} GiB: {ms:.3f} ms -> "
              f"{gbps:.0f} GB/s (read + write) ==")
        return gbps

    # ------------------------------------------------------------------ 3. timing

    def time_cases(self, copy_gbps: float) -> None:
        torch = self.torch
        gen = torch.Generator().manual_seed(1)
        spread = (torch.randint(1024, 4097, (64,), generator=gen)).tolist()
        cases = [
            ("64 decodes, KV 1024", [1] * 64, [1024] * 64),
            ("64 decodes, KV 2048", [1] * 64, [2048] * 64),
            ("64 decodes, KV 4096", [1] * 64, [4096] * 64),
            ("64 decodes, KV 1024-4096", [1] * 64, spread),
            ("64 dec + 512 chunk @1024", [1] * 64 + [512], spread + [1536]),
            ("512 chunk @1024 alone", [512], [1536]),
            ("2048-token prefill", [2048], [2048]),
        ]
        if self.smoke:
            cases = [("3 decodes, KV 40", [1] * 3, [40] * 3),
                     ("2 dec + 17 chunk @16", [1, 1, 17], [40, 20, 33])]
        dtype = torch.float32 if self.smoke else self.half
        elem = torch.empty((), dtype=dtype).element_size()
        clock = "CPU thread time" if self.smoke else "CUDA events, do_bench, L2 flushed"
        print(f"\n== one attention layer, {dtype}, median of {self.iters} ({clock}) ==")
        header = (f"{'case':28s} {'tokens':>6s} {'KV MiB':>7s} {'triton ms':>9s} "
                  f"{'torch ms':>9s} {'speedup':>7s} {'KV GB/s':>8s} {'% copy':>6s}")
        print(header)
        print("-" * len(header))
        for name, q_lens, kv_lens in cases:
            query, k_cache, v_cache, meta, _ = self.make_batch(q_lens, kv_lens, dtype)
            scale = self.head_dim**-0.5
            kv_bytes = 2 * sum(kv_lens) * self.num_kv_heads * self.head_dim * elem  # K and V
            args = (query, k_cache, v_cache, meta, scale)
            t_tri = self.time_ms(functools.partial(self.paged_attention, *args, "triton"))
            try:
                t_tor = self.time_ms(functools.partial(self.paged_attention, *args, "torch"))
            except torch.cuda.OutOfMemoryError:
                t_tor = float("nan")
            gbps = kv_bytes / (t_tri * 1e-3) / 1e9
            print(f"{name:28s} {meta.num_tokens:6d} {kv_bytes / 2**20:7.1f} {t_tri:9.3f} "
                  f"{t_tor:9.3f} {t_tor / t_tri:6.1f}x {gbps:8.0f} {100 * gbps / copy_gbps:5.0f}%")
            self.results["timing"].append(dict(
                case=name, dtype=str(dtype), tokens=meta.num_tokens, kv_bytes=kv_bytes,
                triton_ms=t_tri, torch_ms=t_tor, kv_gbps=gbps, share_of_copy=gbps / copy_gbps))
            del query, k_cache, v_cache, meta, args
        print("\nKV GB/s counts each sequence's K and V once; '% copy' compares it with the "
              "read+write copy rate above (attention only reads, so 100% is not a hard cap).")


if __name__ == "__main__":
    sys.exit(main())
