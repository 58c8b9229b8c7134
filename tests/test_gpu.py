"""What only a CUDA GPU can show: the engine on compiled kernels in the GPU's 16-bit dtype, no
Triton recompile after the warm-up, the forward's GPU time on every step record, and the
driver's limits against the table the launch configurations were verified for. Every test
here needs CUDA (``make gpu`` runs them); on a CPU they are skipped for that reason alone."""

from __future__ import annotations

import pytest
import torch

from chunkprefill import CacheConfig, LLMEngine, ModelConfig, SamplingParams, SchedulerConfig
from chunkprefill.gpu import GPU_TARGETS, gpu_target, half_dtype
from chunkprefill.model import ToyTransformer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

REL_TOL = 0.03  # 16-bit logits vs fp32, as a share of the largest logit (tests/test_dtypes.py)


def _engine(dtype: torch.dtype, budget: int = 64) -> tuple[LLMEngine, ToyTransformer]:
    model = ToyTransformer(ModelConfig.small(), seed=0).to(device="cuda", dtype=dtype)
    sc = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=16, max_model_len=1200)
    return LLMEngine(model, sc, CacheConfig(block_size=16, num_blocks=512),
                     attention_backend="triton"), model


def _prompts(n: int, lengths: tuple[int, ...]) -> list[list[int]]:
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(0, 2048, (length,), generator=gen).tolist() for length in lengths[:n]]


def _num_variants() -> int:
    """Compiled variants of both kernels, over every device (the JIT's own caches)."""
    from chunkprefill.kernels.kv_store import reshape_and_cache_kernel
    from chunkprefill.kernels.unified_attention import unified_attention_kernel

    return sum(len(cache[0]) for kernel in (unified_attention_kernel, reshape_and_cache_kernel)
               for cache in kernel.device_caches.values())


def test_driver_limits_match_the_verified_table() -> None:
    target = gpu_target("cuda")
    known = GPU_TARGETS.get(target.arch)
    if known is not None:  # the CUDA guide's number, as the driver reports it
        assert target.max_shared_mem == known.max_shared_mem
    assert target.supports_bf16 == (torch.cuda.get_device_capability() >= (8, 0))
    assert half_dtype("cuda") == (torch.bfloat16 if target.supports_bf16 else torch.float16)


def test_no_triton_recompile_after_the_warm_up() -> None:
    """Block tables grow past 16, 32 and 48 blocks while the run goes on (the block table's
    row stride changes every step); every kernel variant was compiled by the warm-up."""
    engine, _ = _engine(half_dtype("cuda"))
    before = _num_variants()
    engine.generate(_prompts(3, (900, 40, 300)), SamplingParams(max_tokens=40))  # 59 blocks
    assert _num_variants() == before


def test_every_step_records_the_forwards_gpu_time() -> None:
    engine, _ = _engine(half_dtype("cuda"))
    engine.generate(_prompts(4, (200, 30, 64, 5)), SamplingParams(max_tokens=8))
    for s in engine.step_log:
        assert s.forward_gpu_s is not None and 0 < s.forward_gpu_s <= s.duration_s


def test_half_precision_engine_on_gpu_matches_fp32() -> None:
    """The GPU's 16-bit dtype on compiled kernels: every token the engine picks is, by the
    float32 model's own logits, within the tolerance of the best."""
    engine, _ = _engine(half_dtype("cuda"))
    reference = ToyTransformer(ModelConfig.small(), seed=0).to("cuda")
    prompts = _prompts(4, (150, 33, 70, 9))
    for prompt, out in zip(prompts, engine.generate(prompts, SamplingParams(max_tokens=6)),
                           strict=True):
        ref = reference.forward_reference(prompt + out.output_token_ids).float()
        tol = REL_TOL * ref.abs().max().item()
        for k, token in enumerate(out.output_token_ids):
            row = ref[len(prompt) - 1 + k]
            assert row.max() - row[token] <= 2 * tol


def test_kernel_time_is_positive_and_steady() -> None:
    from chunkprefill.timing import kernel_time_s

    x = torch.randn(1 << 24, device="cuda")
    times = [kernel_time_s(lambda: x.mul_(1.0), "cuda", iters=20) for _ in range(3)]
    assert all(t > 0 for t in times)
    assert max(times) < 3 * min(times)
