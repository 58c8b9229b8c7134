"""16-bit models: the KV cache takes the model's dtype, RoPE stays float32 through a cast,
and a bfloat16 engine run on the CPU (torch backend) matches the float32 model.

Tolerance. bfloat16 keeps 8 significant bits, so each rounding errs by at most 2^-9 (0.2 %)
of the value. A logit passes through ~10 roundings per layer (norm, q/k/v/o, RoPE, attention,
gate/up/down and their product, two residual adds); as a random walk over the tiny model's
2 layers that is sqrt(20) * 2^-9 ~ 0.9 % of the logits' scale (measured here: 0.6 %). We allow
3 % of the largest fp32 logit: above the rounding noise with room, and far below what the bugs
these tests guard against do (a float32 cache raises; bfloat16 RoPE angles are off by radians
at long positions, checked directly below)."""

from __future__ import annotations

import pytest
import torch

from chunkprefill import CacheConfig, LLMEngine, ModelConfig, SamplingParams, SchedulerConfig
from chunkprefill.attention import build_attention_metadata
from chunkprefill.executor import ModelExecutor
from chunkprefill.gpu import GPU_TARGETS, half_dtype
from chunkprefill.model import ToyTransformer

REL_TOL = 0.03  # of the largest fp32 logit (see the module docstring)


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(4)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in (37, 5, 60, 18)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cast_keeps_rope_in_float32(dtype: torch.dtype) -> None:
    """inv_freq survives ``.to(dtype)`` in float32, bit for bit, and the angles at position
    4,000 match a float64 computation to float32 precision; a 16-bit inv_freq (the bug) is
    off by up to 0.4 % per frequency, i.e. radians at that position."""
    config = ModelConfig.small()
    model = ToyTransformer(config, seed=0)
    fp32 = model.rotary.inv_freq.clone()
    model.to(dtype)
    assert model.embed_tokens.weight.dtype == dtype
    assert model.rotary.inv_freq.dtype == torch.float32
    assert torch.equal(model.rotary.inv_freq, fp32)
    positions = torch.arange(3990, 4000)
    cos, sin = model.rotary(positions)
    assert cos.dtype == sin.dtype == torch.float32
    d = config.head_dim
    inv64 = 1.0 / config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv64[None, :]
    ref = torch.cat((angles, angles), -1).cos()
    assert (cos[:, 0].double() - ref).abs().max() < 1e-3  # float32 angles ~4000 rad: ~2e-4
    bug = positions.float()[:, None] * inv64.to(dtype).float()[None, :]
    assert (torch.cat((bug, bug), -1).cos().double() - ref).abs().max() > 0.5


def test_kv_cache_takes_the_model_dtype() -> None:
    model = ToyTransformer(ModelConfig.tiny(), seed=0).to(torch.bfloat16)
    assert all(k.dtype == v.dtype == torch.bfloat16
               for k, v in model.allocate_kv_cache(num_blocks=2, block_size=16))
    executor = ModelExecutor(model, CacheConfig(block_size=16, num_blocks=8), "torch")
    assert {k.dtype for k, _ in executor.kv_caches} == {torch.bfloat16}


def test_bf16_paged_forward_matches_fp32_reference() -> None:
    """The paged path in bfloat16 (chunks of 16 through the cache) against the float32 dense
    reference, logit for logit."""
    model32 = ToyTransformer(ModelConfig.tiny(), seed=0)
    model16 = ToyTransformer(ModelConfig.tiny(), seed=0).to(torch.bfloat16)
    prompt = _prompts(model32.config.vocab_size)[2]
    ref = model32.forward_reference(prompt)
    kv = model16.allocate_kv_cache(num_blocks=8, block_size=16)
    logits = []
    for start in range(0, len(prompt), 16):
        n = min(16, len(prompt) - start)
        meta, pos = build_attention_metadata([n], [start], [[3, 1, 6, 0]], 16)
        hidden = model16.forward(torch.tensor(prompt[start:start + n]), pos, kv, meta)
        logits.append(model16.compute_logits(hidden).float())
    err = (torch.cat(logits) - ref).abs().max().item()
    assert 0 < err <= REL_TOL * ref.abs().max().item(), err  # > 0: bf16 really ran


def test_bf16_engine_matches_fp32() -> None:
    """A bfloat16 LLMEngine run (chunked prefill beside decodes, torch backend, CPU): every
    token it picks is, by the float32 model's own logits, within the tolerance of the best."""
    model32 = ToyTransformer(ModelConfig.tiny(), seed=0)
    model16 = ToyTransformer(ModelConfig.tiny(), seed=0).to(torch.bfloat16)
    prompts = _prompts(model32.config.vocab_size)
    engine = LLMEngine(model16, SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=8,
                                                max_model_len=128),
                       CacheConfig(block_size=16, num_blocks=32), attention_backend="torch")
    outs = engine.generate(prompts, SamplingParams(max_tokens=6))
    assert any(s.num_prefill_tokens and s.num_decode_tokens for s in engine.step_log)
    for prompt, out in zip(prompts, outs, strict=True):
        assert len(out.output_token_ids) == 6
        ref = model32.forward_reference(prompt + out.output_token_ids)
        tol = REL_TOL * ref.abs().max().item()
        for k, token in enumerate(out.output_token_ids):
            row = ref[len(prompt) - 1 + k]
            assert row.max() - row[token] <= 2 * tol  # both logits may err by tol


def test_half_dtype_is_bf16_only_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    import chunkprefill.gpu as gpu

    assert half_dtype("cpu") == torch.bfloat16
    monkeypatch.setattr(gpu, "gpu_target", lambda device: GPU_TARGETS[75])
    assert half_dtype("cuda") == torch.float16  # T4: no bfloat16 tensor cores
    monkeypatch.setattr(gpu, "gpu_target", lambda device: GPU_TARGETS[80])
    assert half_dtype("cuda") == torch.bfloat16
