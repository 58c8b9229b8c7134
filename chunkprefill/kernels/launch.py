"""Launch configurations: every tile size, warp count and pipeline depth the kernels run with,
picked in one place from the GPU's limits.

Why it matters: Triton checks a kernel's shared memory only when the compiled kernel is
loaded, and ``ptxas`` spills what does not fit in 255 registers per thread to local memory.
So a tile that is too big for a GPU either fails with ``OutOfResources`` before anything is
timed, or runs from local memory (a performance cliff). The tiles below were chosen by
compiling candidates ahead of time for each target (``chunkprefill.kernels.aot``; measured
shared memory / stack per thread on sm_80, hd 128):

- 16-bit on tensor cores: prefill 64 x 64 (57,856 B), decode 16 x 64 (39,424 B).
- fp32 on tensor cores (``tf32x3``): 64 x 64 needs 164,352 B (too much for an A10 or L4) and,
  on an A100 where it fits, spills 13 KB per thread; 32 x 32 needs 73,984 B with no spill.
  Above these tiles, registers, not the A100's or H100's larger shared memory, are the limit.
- sm_75 (T4): Triton emits FMA loops instead of MMA, whose accumulators live in registers:
  16 x 32 is the largest tile without spills (fp32: 40,960 B of 65,536).

``tests/test_kernels_aot.py`` compiles every configuration ``attention_launch_config`` and
``store_launch_config`` can return, for sm_75, 80, 86, 89 and 90, and checks each against the
target's shared memory (from the compiled metadata) and ``SPILL_BOUND_BYTES``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from chunkprefill.gpu import GpuTarget, KiB, gpu_target
from chunkprefill.kernels._common import INTERPRET, _next_pow2

# Local memory (the stack frame, where ptxas puts spilled registers) a kernel may use per
# thread. 0 would be ideal, but ptxas keeps a few bytes of stack in some kernels that have no
# real spill traffic; 128 B per thread (16 KB per 128-thread program) stays in L1. The cliff
# this bound catches is 50-170x bigger: 6.8-21 KB per thread (fp32 prefill, 64 x 64, sm_80).
SPILL_BOUND_BYTES = 128

# What the tiles are verified for on CUDA (larger inputs raise instead of risking a launch
# failure): head_dim up to 256 (padded to a power of two >= 16), grouped-query attention up
# to 16 query heads per KV head, and up to 64 KV heads.
MAX_HEAD_DIM = 256
MAX_GROUP = 16
MAX_KV_HEADS = 64

# The smallest shared memory per block among the verified targets of each path: every tile
# fits it, so any GPU with at least this much runs them. Tensor cores: sm_86/89 (99 KiB);
# FMA: sm_75 (64 KiB).
SHARED_MEM_FLOOR = {True: 99 * KiB, False: 64 * KiB}



def _tile(has_mma: bool, fp32: bool, decode_only: bool, head_dim_padded: int
          ) -> tuple[int, int, int]:
    """(rows per program, BLOCK_N, num_warps), chosen by compiling the candidates for every
    target (numbers: ``python -m chunkprefill.kernels.aot``). The largest tile that keeps the
    stack (spilled registers) within ``SPILL_BOUND_BYTES`` on every target wins; 8 warps where
    4 would hold too much per thread (255 registers and a stack: fp32 prefill at head_dim 128,
    16-bit prefill 64 x 64 at 128, fp32 at 256)."""
    if not has_mma:  # sm_75: FMA loops, whose accumulators live in registers
        return (16, 32, 4) if head_dim_padded <= 128 else (16, 16, 4)
    if fp32:  # tf32x3 holds three tf32 pieces of every operand
        if head_dim_padded > 128:
            return (16, 16, 8)
        if decode_only:
            return (16, 32, 4)
        return (32, 32, 8 if head_dim_padded == 128 else 4)
    if decode_only:
        return (16, 64, 4)
    if head_dim_padded > 128:  # 64 x 32 would keep 72 B of stack on sm_86/89
        return (32, 32, 4)
    return (64, 64, 8 if head_dim_padded == 128 else 4)


_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class AttentionLaunch:
    """One launch configuration of ``unified_attention_kernel``."""

    block_q: int  # query tokens per program
    group_padded: int  # query heads per KV head, padded to a power of two
    block_n: int  # key positions per inner-loop iteration
    head_dim_padded: int
    dot_in_fp32: bool  # upcast tiles before tl.dot (fp32 caches, the interpreter)
    dot_precision: str  # tl.dot input_precision for fp32 tiles
    num_warps: int = 4
    num_stages: int = 3

    @property
    def block_m(self) -> int:
        """Rows per program: (token, head-in-group) pairs."""
        return self.block_q * self.group_padded

    def kernel_kwargs(self, head_dim: int, group: int, block_size: int) -> dict[str, object]:
        """The kernel's constexprs and launch options, as ``kernel[grid](..., **kwargs)``."""
        return dict(HEAD_DIM=head_dim, HEAD_DIM_PADDED=self.head_dim_padded, GROUP=group,
                    GROUP_PADDED=self.group_padded, BLOCK_Q=self.block_q, BLOCK_M=self.block_m,
                    BLOCK_N=self.block_n, BLOCK_SIZE=block_size, DOT_IN_FP32=self.dot_in_fp32,
                    DOT_PRECISION=self.dot_precision, num_warps=self.num_warps,
                    num_stages=self.num_stages)


@dataclass(frozen=True)
class StoreLaunch:
    """One launch configuration of ``reshape_and_cache_kernel``: one program per token copies
    its (heads_padded x head_dim_padded) tile, so the warps grow with the tile."""

    heads_padded: int
    head_dim_padded: int
    num_warps: int

    def kernel_kwargs(self, num_kv_heads: int, head_dim: int,
                      block_size: int) -> dict[str, object]:
        return dict(NUM_KV_HEADS=num_kv_heads, HEADS_PADDED=self.heads_padded,
                    HEAD_DIM=head_dim, HEAD_DIM_PADDED=self.head_dim_padded,
                    BLOCK_SIZE=block_size, num_warps=self.num_warps)


@functools.lru_cache(maxsize=16)
def _cuda_target(index: int) -> GpuTarget:
    return gpu_target(torch.device("cuda", index))


def launch_target(device: torch.device) -> GpuTarget | None:
    """The GPU a launch on ``device`` must fit, or None for the interpreter (CPU tensors, or
    ``TRITON_INTERPRET=1``)."""
    if INTERPRET or device.type != "cuda":
        return None
    return _cuda_target(device.index if device.index is not None else torch.cuda.current_device())


def _check_cuda_dtype(dtype: torch.dtype, target: GpuTarget) -> None:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    if dtype == torch.bfloat16 and not target.supports_bf16:
        raise ValueError(f"bfloat16 needs compute capability >= 8.0, {target.name} has "
                         f"{target.capability}: use float16 (chunkprefill.gpu.half_dtype)")
    floor = SHARED_MEM_FLOOR[target.has_mma]
    if target.max_shared_mem < floor:
        raise ValueError(f"{target.name} has {target.max_shared_mem} B of shared memory per "
                         f"block; the kernels' tiles are verified for >= {floor} B")


@functools.lru_cache(maxsize=256)
def attention_launch_config(num_q_heads: int, num_kv_heads: int, head_dim: int,
                            dtype: torch.dtype, decode_only: bool,
                            target: GpuTarget | None) -> AttentionLaunch:
    """The launch configuration of unified attention for these shapes on ``target`` (None:
    the CPU interpreter, where tile sizes cost nothing but interpreter time).

    ``tl.dot`` needs its reduction dimension >= 16 (``HEAD_DIM_PADDED`` for Q K^T,
    ``BLOCK_N`` for P V); ``BLOCK_M = BLOCK_Q * GROUP_PADDED`` is kept >= 16 too, the row count
    of one MMA tile, so no tensor-core row is wasted. Decode-only batches need few query rows;
    prefill tiles take more rows, to reuse each K/V tile they load."""
    group = num_q_heads // num_kv_heads
    group_padded = _next_pow2(group)
    head_dim_padded = max(16, _next_pow2(head_dim))
    if target is None:
        rows = 16 if decode_only else 64
        return AttentionLaunch(max(1, rows // group_padded), group_padded, 32, head_dim_padded,
                               dot_in_fp32=True, dot_precision="ieee")
    _check_cuda_dtype(dtype, target)
    if head_dim_padded > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be <= {MAX_HEAD_DIM} on CUDA, got {head_dim}")
    if group_padded > MAX_GROUP:
        raise ValueError(f"num_q_heads // num_kv_heads must be <= {MAX_GROUP} on CUDA (one "
                         f"program holds a whole group), got {group}")
    fp32 = dtype == torch.float32
    rows, block_n, warps = _tile(target.has_mma, fp32, decode_only, head_dim_padded)
    # fp32 on tensor cores: "tf32x3" keeps ~fp32 accuracy (plain "tf32" would lose ~1e-3);
    # 16-bit tiles ignore the setting; FMA (sm_75) is plain fp32 arithmetic.
    precision = "tf32x3" if fp32 and target.has_mma else "ieee"
    return AttentionLaunch(max(1, rows // group_padded), group_padded, block_n,
                           head_dim_padded, dot_in_fp32=fp32, dot_precision=precision,
                           num_warps=warps)


@functools.lru_cache(maxsize=256)
def store_launch_config(num_kv_heads: int, head_dim: int, element_size: int,
                        target: GpuTarget | None) -> StoreLaunch:
    """The launch configuration of the K/V store, which copies bits: the wrapper hands it
    2- or 4-byte integer views of the tensors, so one compiled kernel serves fp16 and bf16.
    About 8 elements per thread (up to 16 at the 16-warp cap), so no tile spills."""
    heads_padded = _next_pow2(num_kv_heads)
    head_dim_padded = max(16, _next_pow2(head_dim))
    if element_size not in (2, 4):
        raise ValueError(f"element_size must be 2 or 4 bytes, got {element_size}")
    if target is not None and (head_dim_padded > MAX_HEAD_DIM or heads_padded > MAX_KV_HEADS):
        raise ValueError(f"the K/V store is verified for head_dim <= {MAX_HEAD_DIM} and "
                         f"num_kv_heads <= {MAX_KV_HEADS} on CUDA, got {head_dim} and "
                         f"{num_kv_heads}")
    warps = min(16, max(1, heads_padded * head_dim_padded // 256))
    return StoreLaunch(heads_padded, head_dim_padded, warps)


# ------------------------------------------------------------------ the whole domain


def _dtypes(target: GpuTarget) -> tuple[torch.dtype, ...]:
    return _DTYPES if target.supports_bf16 else (torch.float32, torch.float16)


GROUPS = (1, 2, 4, 8, 16)  # query heads per KV head, padded: the CUDA domain


def attention_configs(target: GpuTarget, all_groups: bool = False
                      ) -> Iterator[tuple[dict[str, object], AttentionLaunch]]:
    """The configurations ``attention_launch_config`` can return on ``target``, with a shape
    that picks each: the picker runs over its whole CUDA domain (3 dtypes, both phases,
    head_dim 16..256, groups ``GROUPS``). By default one per tile (group 1): configurations
    that differ only in how a tile's rows split into tokens and heads (``BLOCK_Q`` x
    ``GROUP_PADDED``) use the same shared memory, but their index arithmetic differs, and so
    do their registers by a few; ``all_groups=True`` yields every one of them."""
    seen: set[tuple[object, ...]] = set()
    for dtype in _dtypes(target):
        for decode_only in (True, False):
            for head_dim in (16, 32, 64, 128, 256):
                for group in GROUPS:
                    shape = dict(num_q_heads=2 * group, num_kv_heads=2, head_dim=head_dim,
                                 dtype=dtype, decode_only=decode_only)
                    cfg = attention_launch_config(**shape, target=target)
                    key = (dtype, cfg.block_m, cfg.block_n, cfg.head_dim_padded,
                           cfg.dot_in_fp32, cfg.dot_precision, cfg.num_warps, cfg.num_stages,
                           cfg.group_padded if all_groups else None)
                    if key not in seen:
                        seen.add(key)
                        yield shape, cfg


def store_configs(target: GpuTarget) -> Iterator[tuple[dict[str, object], StoreLaunch]]:
    """Every configuration ``store_launch_config`` can return on ``target``, each once."""
    for element_size in (2, 4):
        for num_kv_heads in (1, 2, 4, 8, 16, 32, 64):
            for head_dim in (16, 32, 64, 128, 256):
                shape = dict(num_kv_heads=num_kv_heads, head_dim=head_dim,
                             element_size=element_size)
                yield shape, store_launch_config(**shape, target=target)
