"""Compile the kernels ahead of time for a GPU this machine does not have, and read what
each launch configuration costs: shared memory, registers, local memory (spills).

No GPU and no driver are needed: ``triton.compile`` with ``GPUTarget("cuda", arch, 32)``
runs the whole pipeline (TTIR -> TTGIR -> LLIR -> PTX) and Triton's bundled ``ptxas`` turns
the PTX into a cubin. The arguments are specialised exactly as a real launch would
specialise them: this module builds the wrapper's own arguments (``unified_attention_args``,
``reshape_and_cache_args``) from CPU tensors of the right shapes and hands them to the JIT's
binder, the code a launch runs. What it cannot see: runtime faults and numerics (a GPU test).

    python -m chunkprefill.kernels.aot                  # sm_75, 80, 86, 89, 90; exit 1 on a miss
    python -m chunkprefill.kernels.aot --targets 86 --json out.json

``TRITON_INTERPRET`` must be unset: ``@triton.jit`` only yields compilable kernels then.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace

import torch
import triton
from triton.backends.compiler import GPUTarget as TritonTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

from chunkprefill.gpu import GPU_TARGETS, GpuTarget
from chunkprefill.kernels._common import INTERPRET
from chunkprefill.kernels.kv_store import reshape_and_cache_args, reshape_and_cache_kernel
from chunkprefill.kernels.launch import (
    SHARED_MEM_FLOOR,
    SPILL_BOUND_BYTES,
    AttentionLaunch,
    StoreLaunch,
    attention_configs,
    store_configs,
)
from chunkprefill.kernels.unified_attention import (
    unified_attention_args,
    unified_attention_kernel,
)

ARCHS = (75, 80, 86, 89, 90)


@dataclass
class Compiled:
    """What one launch configuration costs on one target."""

    arch: int
    kernel: str
    dtype: str
    config: str
    shared: int  # bytes of shared memory per block (compiled metadata)
    limit: int  # the target's shared memory per block
    floor: int  # what the picker promises any GPU of this path
    registers: int  # per thread
    stack: int  # bytes of local memory per thread: the stack frame spilled registers use
    mma: bool  # tensor-core instructions in the PTX
    seconds: float
    params: dict[str, object]  # the launch configuration's fields

    @property
    def fits(self) -> bool:
        return self.shared <= min(self.limit, self.floor)

    @property
    def spills_ok(self) -> bool:
        return self.stack <= SPILL_BOUND_BYTES

    def row(self) -> str:
        verdict = "ok" if self.fits and self.spills_ok else "FAIL"
        return (f"sm_{self.arch} {self.kernel:9s} {self.dtype:8s} {self.config:44s} "
                f"shared {self.shared:7,d} / {self.limit:7,d}  regs {self.registers:3d}  "
                f"stack {self.stack:5d} B  {'mma' if self.mma else 'fma'}  {verdict}")


def check_toolchain() -> str:
    """The ptxas versions this machine compiles with; raise if Triton cannot compile here."""
    if INTERPRET:
        raise RuntimeError("TRITON_INTERPRET is set: @triton.jit made interpreter functions, "
                           "which cannot be compiled; unset it before importing the kernels")
    versions = []
    for arch in (80, 90):  # Triton 3.9 uses ptxas for sm < 90, ptxas-blackwell from sm_90
        out = subprocess.run([_ptxas(arch), "--version"], capture_output=True,
                             text=True, check=True).stdout
        versions.append(out.strip().splitlines()[-1])
    return "; ".join(dict.fromkeys(versions))


def _ptxas(arch: int) -> str:
    try:
        return get_ptxas(arch).path  # newer Triton: a ptxas per architecture
    except TypeError:
        return get_ptxas().path  # Triton 3.4/3.5: one bundled ptxas


def _resources(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) per thread, from ``cuobjdump --dump-resource-usage``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage",
                              f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump printed no resource usage:\n{out}")
    return int(m.group(1)), int(m.group(2))


def _compile(fn, args: tuple[object, ...], kwargs: dict[str, object],
             arch: int) -> tuple[triton.compiler.CompiledKernel, float]:
    """Specialise ``args`` with the JIT's own binder for ``arch``, then compile to a cubin."""
    target = TritonTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = _pack(fn, backend, kwargs, bound, specialization,
                                                 options)
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target,
                            options=options.__dict__)
    return kernel, time.perf_counter() - t0


def _pack(fn, backend, kwargs, bound, specialization, options):  # type: ignore[no-untyped-def]
    """The binder's specialisation as ``ASTSource``'s signature, constexprs and attributes:
    the JIT's own ``_pack_args`` where it exists (Triton 3.6+), else the same steps, which
    3.4 and 3.5 run inline in ``JITFunction.run``."""
    if hasattr(fn, "_pack_args"):
        return fn._pack_args(backend, kwargs, bound, specialization, options)
    from triton._utils import find_paths_if, get_iterable_path

    options = backend.parse_options(kwargs)
    sigvals = [x[0] for x in specialization]
    signature = {p.name: v for p, v in zip(fn.params, sigvals)}
    paths = find_paths_if(sigvals, lambda _, val: val == "constexpr")
    constexprs = {path: get_iterable_path(list(bound.values()), path) for path in paths}
    attrvals = ["" if x[0] == "constexpr" else x[1] for x in specialization]
    attrs = {k: backend.parse_attr(get_iterable_path(attrvals, k))
             for k in find_paths_if(attrvals, lambda _, x: isinstance(x, str))}
    return options, signature, constexprs, attrs


def _record(arch: int, kernel_name: str, dtype: torch.dtype, cfg: AttentionLaunch | StoreLaunch,
            desc: str, compiled: triton.compiler.CompiledKernel, seconds: float) -> Compiled:
    target = GPU_TARGETS[arch]
    registers, stack = _resources(compiled.asm["cubin"])
    params = asdict(cfg)
    if isinstance(cfg, AttentionLaunch):
        params["block_m"] = cfg.block_m
    return Compiled(arch, kernel_name, str(dtype).removeprefix("torch."), desc,
                    int(compiled.metadata.shared), target.max_shared_mem,
                    SHARED_MEM_FLOOR[target.has_mma], registers, stack,
                    "mma" in compiled.asm["ptx"], round(seconds, 2), params)


def compile_attention(arch: int, shape: dict[str, object], cfg: AttentionLaunch,
                      head_dim: int | None = None, block_size: int = 16) -> Compiled:
    """Compile ``unified_attention_kernel`` as the wrapper would launch it for ``shape``
    (``attention_configs``'s keys) with ``cfg``. ``head_dim`` overrides the shape's (a
    non-power-of-two head_dim pads to ``cfg.head_dim_padded``)."""
    num_q_heads, num_kv_heads = int(shape["num_q_heads"]), int(shape["num_kv_heads"])
    head_dim = int(shape["head_dim"]) if head_dim is None else head_dim
    dtype = shape["dtype"]
    num_tokens, num_seqs, max_blocks = 4, 2, 3  # sizes do not specialise; strides do
    query = torch.empty(num_tokens, num_q_heads, head_dim, dtype=dtype)
    cache = (4, block_size, num_kv_heads, head_dim)
    args = unified_attention_args(
        torch.empty_like(query), query, torch.empty(cache, dtype=dtype),
        torch.empty(cache, dtype=dtype), torch.zeros(num_seqs, max_blocks, dtype=torch.int32),
        torch.zeros(num_seqs + 1, dtype=torch.int32), torch.zeros(num_seqs, dtype=torch.int32),
        head_dim ** -0.5)
    kwargs = cfg.kernel_kwargs(head_dim, num_q_heads // num_kv_heads, block_size)
    compiled, seconds = _compile(unified_attention_kernel, args, kwargs, arch)
    phase = "decode" if shape["decode_only"] else "prefill"
    desc = (f"{phase} M{cfg.block_m}(Q{cfg.block_q}xG{cfg.group_padded})xN{cfg.block_n} "
            f"D{cfg.head_dim_padded} w{cfg.num_warps}s{cfg.num_stages} {cfg.dot_precision}")
    return _record(arch, "attention", dtype, cfg, desc, compiled, seconds)


def compile_store(arch: int, shape: dict[str, object], cfg: StoreLaunch,
                  block_size: int = 16) -> Compiled:
    """Compile ``reshape_and_cache_kernel`` as the wrapper would launch it for ``shape``."""
    num_kv_heads, head_dim = int(shape["num_kv_heads"]), int(shape["head_dim"])
    dtype = {2: torch.float16, 4: torch.float32}[int(shape["element_size"])]
    key = torch.empty(4, num_kv_heads, head_dim, dtype=dtype)
    cache = torch.empty(4, block_size, num_kv_heads, head_dim, dtype=dtype)
    args = reshape_and_cache_args(key, torch.empty_like(key), cache, torch.empty_like(cache),
                                  torch.zeros(4, dtype=torch.int64))
    kwargs = cfg.kernel_kwargs(num_kv_heads, head_dim, block_size)
    compiled, seconds = _compile(reshape_and_cache_kernel, args, kwargs, arch)
    desc = f"H{cfg.heads_padded}xD{cfg.head_dim_padded} w{cfg.num_warps}"
    return _record(arch, "kv_store", torch.int16 if dtype == torch.float16 else torch.int32,
                   cfg, desc, compiled, seconds)


Job = tuple[str, int, dict[str, object], object]

# A tile whose representative compile uses this many of the 255 registers per thread (or any
# stack) is compiled again for every other group: the row split changes its registers.
HEAVY_REGISTERS = 224


def _jobs(archs: tuple[int, ...]) -> list[Job]:
    jobs: list[Job] = []
    for arch in archs:
        target: GpuTarget = GPU_TARGETS[arch]
        jobs += [("attention", arch, shape, cfg) for shape, cfg in attention_configs(target)]
        jobs += [("store", arch, shape, cfg) for shape, cfg in store_configs(target)]
    return jobs


def _group_variants(job: Job) -> list[Job]:
    """The same tile as ``job``'s at every other group (``BLOCK_Q x GROUP_PADDED`` split)."""
    _, arch, shape, cfg = job
    tile = replace(cfg, block_q=0, group_padded=0)  # type: ignore[type-var]
    return [("attention", arch, s, c)
            for s, c in attention_configs(GPU_TARGETS[arch], all_groups=True)
            if s["dtype"] == shape["dtype"] and c != cfg
            and replace(c, block_q=0, group_padded=0) == tile]


def _run(job: Job) -> Compiled:
    kind, arch, shape, cfg = job
    if kind == "attention":
        return compile_attention(arch, shape, cfg)  # type: ignore[arg-type]
    return compile_store(arch, shape, cfg)  # type: ignore[arg-type]


def compile_all(archs: tuple[int, ...] = ARCHS, workers: int | None = None) -> list[Compiled]:
    """Every configuration the pickers can return on each target, compiled: one per tile,
    then every group of the tiles near the register limit (``HEAVY_REGISTERS``). In parallel
    over ``workers`` processes (default: all cores)."""
    check_toolchain()
    workers = workers or os.cpu_count() or 1
    if workers == 1:
        def run_all(jobs: list[Job]) -> list[Compiled]:
            return [_run(j) for j in jobs]
    else:
        import multiprocessing

        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

        def run_all(jobs: list[Job]) -> list[Compiled]:
            return list(pool.map(_run, jobs))
    try:
        jobs = sorted(_jobs(archs), key=lambda j: j[0] != "attention")  # the slow ones first
        records = run_all(jobs)
        heavy = [j for j, r in zip(jobs, records)
                 if r.kernel == "attention" and (r.registers >= HEAVY_REGISTERS or r.stack)]
        records += run_all([v for j in heavy for v in _group_variants(j)])
    finally:
        if workers > 1:
            pool.shutdown()
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default=",".join(map(str, ARCHS)),
                    help="compute capabilities, e.g. 75,86")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", help="also write every record to this file")
    a = ap.parse_args(argv)
    archs = tuple(int(t) for t in a.targets.split(","))
    unknown = [t for t in archs if t not in GPU_TARGETS]
    if unknown:
        ap.error(f"unknown targets {unknown}; known: {sorted(GPU_TARGETS)}")
    print(f"triton {triton.__version__}, {check_toolchain()}")
    t0 = time.perf_counter()
    records = compile_all(archs, a.workers)
    for r in records:
        print(r.row())
    bad = [r for r in records if not (r.fits and r.spills_ok)]
    print(f"{len(records)} kernels compiled for {len(archs)} targets in "
          f"{time.perf_counter() - t0:.0f} s; {len(bad)} over a limit (shared memory <= the "
          f"target's and the path floor, stack <= {SPILL_BOUND_BYTES} B)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([asdict(r) for r in records], f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
