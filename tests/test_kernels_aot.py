"""Ahead-of-time compilation of every launch configuration for the GPUs learners have.

No GPU is needed: ``chunkprefill.kernels.aot`` compiles for ``GPUTarget("cuda", arch, 32)``
with Triton's bundled ptxas and reads each cubin's resources. It runs in a subprocess because
the compiler needs ``TRITON_INTERPRET`` unset when the kernels are first imported, and this
test session imports them in interpreter mode (tests/test_kernels.py). A missing ptxas or a
compile error fails here; nothing is skipped. One target takes ~15-40 s cold on two cores
(Triton's cache makes reruns fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # importing the kernels picks interpreter vs compiler once
    os.environ.setdefault("TRITON_INTERPRET", "1")  # for tests/test_kernels.py in this process

from chunkprefill.gpu import GPU_TARGETS, KiB  # noqa: E402
from chunkprefill.kernels.launch import (  # noqa: E402
    SHARED_MEM_FLOOR,
    SPILL_BOUND_BYTES,
    attention_configs,
    attention_launch_config,
    store_configs,
    store_launch_config,
)


def _compiler_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said out loud
    return env


def _python(code_or_args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True,
                         env=_compiler_env(), cwd=tmp_path, timeout=900)
    assert out.returncode in (0, 1), f"the compiler failed:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.mark.parametrize("arch", sorted(GPU_TARGETS))
def test_every_launch_configuration_compiles_and_fits(arch: int, tmp_path: Path) -> None:
    report = tmp_path / "aot.json"
    out = _python(["-m", "chunkprefill.kernels.aot", "--targets", str(arch),
                   "--json", str(report)], tmp_path)
    records = json.loads(report.read_text())
    target = GPU_TARGETS[arch]
    # Every configuration the pickers can return here was compiled (and nothing else).
    def tile(dtype: object, p: dict) -> tuple:  # a tile: what sets shared memory
        return (str(dtype).removeprefix("torch."), p["block_m"], p["block_n"],
                p["head_dim_padded"], p["dot_precision"], p["num_warps"], p["num_stages"])

    expected = {tile(s["dtype"], {**vars(c), "block_m": c.block_m})
                for s, c in attention_configs(target)}
    attention = [r for r in records if r["kernel"] == "attention"]
    assert {tile(r["dtype"], r["params"]) for r in attention} == expected
    # ...and every group of the tiles near the register limit (aot.HEAVY_REGISTERS).
    assert len(attention) >= len(expected)
    stores = {(r["dtype"], tuple(sorted(r["params"].items())))
              for r in records if r["kernel"] == "kv_store"}
    assert stores == {({2: "int16", 4: "int32"}[s["element_size"]], tuple(sorted(vars(c).items())))
                      for s, c in store_configs(target)}
    for r in records:
        where = f"sm_{arch} {r['kernel']} {r['dtype']} {r['config']}"
        assert r["limit"] == target.max_shared_mem
        assert r["shared"] <= target.max_shared_mem, f"{where}: {r['shared']} B of shared memory"
        assert r["shared"] <= SHARED_MEM_FLOOR[target.has_mma], where
        assert r["stack"] <= SPILL_BOUND_BYTES, f"{where}: {r['stack']} B of stack per thread"
        if r["kernel"] == "attention":  # tensor cores exactly where the picker expects them
            assert r["mma"] == target.has_mma, where
    assert out.returncode == 0, out.stdout[-3000:]


def test_the_check_catches_the_configuration_that_failed(tmp_path: Path) -> None:
    """The old fixed tile (fp32 prefill 64 x 64, head_dim 128) needs 164,352 B of shared
    memory: more than an A10/L4 has (101,376 B; the gpu-readiness review measured the same),
    and on an A100, where it fits, it spills kilobytes per thread. The harness must see both."""
    code = """
import json, torch
from dataclasses import replace
from chunkprefill.gpu import GPU_TARGETS
from chunkprefill.kernels.aot import compile_attention
from chunkprefill.kernels.launch import attention_launch_config
shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, dtype=torch.float32,
             decode_only=False)
old = replace(attention_launch_config(**shape, target=GPU_TARGETS[86]), block_q=16,
              block_n=64, num_warps=4)
print(json.dumps([vars(compile_attention(a, shape, old)) for a in (86, 80)]))
"""
    out = _python(["-c", code], tmp_path)
    sm86, sm80 = json.loads(out.stdout.strip().splitlines()[-1])
    assert sm86["shared"] > GPU_TARGETS[86].max_shared_mem
    assert sm80["stack"] > 4 * KiB  # the spill cliff


def test_pickers_refuse_what_is_not_verified() -> None:
    t4, a100 = GPU_TARGETS[75], GPU_TARGETS[80]
    with pytest.raises(ValueError, match="bfloat16 needs compute capability"):
        attention_launch_config(8, 2, 64, torch.bfloat16, True, t4)
    with pytest.raises(ValueError, match="head_dim must be <= 256"):
        attention_launch_config(8, 2, 512, torch.float16, True, a100)
    with pytest.raises(ValueError, match="must be <= 16"):
        attention_launch_config(64, 2, 64, torch.float16, True, a100)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        attention_launch_config(8, 2, 64, torch.float64, True, a100)
    small = type(a100)("a small GPU", (8, 0), 48 * KiB)
    with pytest.raises(ValueError, match="shared memory"):
        attention_launch_config(8, 2, 64, torch.float16, True, small)
    with pytest.raises(ValueError, match="num_kv_heads <= 64"):
        store_launch_config(128, 64, 2, a100)


def test_every_configuration_satisfies_tl_dot() -> None:
    """tl.dot needs every tile dimension >= 16 and tl.arange powers of two: for every shape
    of the domain, on every target and in the interpreter."""
    for target in [None, *GPU_TARGETS.values()]:
        for dtype in (torch.float32, torch.float16) + ((torch.bfloat16,) if target is None
                                                       or target.supports_bf16 else ()):
            for decode_only in (True, False):
                for head_dim in (8, 16, 24, 64, 80, 128, 256):
                    for heads, kv_heads in ((4, 4), (6, 2), (32, 8), (16, 1)):
                        c = attention_launch_config(heads, kv_heads, head_dim, dtype,
                                                    decode_only, target)
                        assert c.block_m >= 16 and c.block_n >= 16
                        assert c.head_dim_padded >= max(16, head_dim)
                        for n in (c.block_m, c.block_n, c.head_dim_padded, c.group_padded):
                            assert n & (n - 1) == 0
                        assert c.group_padded >= heads // kv_heads
