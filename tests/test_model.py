"""ToyTransformer: agrees with HF Llama, refuses what it cannot represent, and its paged path
(chunked prefill through a scrambled block table) reproduces the dense reference."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transformers  # noqa: E402  (test-only dev dependency: missing must fail, not skip)

from chunkprefill.attention import build_attention_metadata
from chunkprefill.config import ModelConfig
from chunkprefill.model import ToyTransformer, validate_token_ids


def _hf_llama(seed: int = 0, **overrides: object) -> torch.nn.Module:
    """A small random HF Llama whose weights are large enough that attention is sharp (HF's
    N(0, 0.02) init gives near-uniform attention, where RoPE bugs would hide in the noise)."""
    kwargs = dict(vocab_size=97, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=80, rms_norm_eps=1e-5,
                  max_position_embeddings=256, rope_theta=500.0, tie_word_embeddings=False)
    kwargs.update(overrides)
    config = transformers.LlamaConfig(**kwargs)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="eager")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5 * 1.5)
    return model.eval().float()


@pytest.mark.parametrize("tie", [False, True])
def test_forward_reference_matches_hf_llama(tie: bool) -> None:
    hf = _hf_llama(tie_word_embeddings=tie)
    model = ToyTransformer.from_hf(hf)
    assert model.config.tie_word_embeddings is tie
    assert model.config.rope_theta == 500.0
    ids = torch.randint(0, 97, (37,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids[None]).logits[0]
    got = model.forward_reference(ids.tolist())
    assert got.shape == (37, 97)
    assert expected.abs().max() > 1.0  # the comparison is not between near-zeros
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"head_dim": 16}, "head_dim"),
    ],
)
def test_from_hf_refuses_unsupported_config(overrides: dict, field: str) -> None:
    hf = _hf_llama(num_hidden_layers=1, **overrides)
    with pytest.raises(ValueError, match=field):
        ToyTransformer.from_hf(hf)


def test_init_is_deterministic_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = ToyTransformer(ModelConfig.tiny(), seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = ToyTransformer(ModelConfig.tiny(), seed=3)
    c = ToyTransformer(ModelConfig.tiny(), seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert a.embed_tokens.weight.dtype == torch.float32


@pytest.mark.parametrize(
    ("token_ids", "match"),
    [
        ([0, 5, 512], r"token_ids.*\[0, vocab_size=512\)"),
        ([-1, 3], r"token_ids.*\[0, vocab_size=512\)"),
        ([], "token_ids is empty"),
        (torch.zeros(2, 3, dtype=torch.long), "token_ids must be 1-D"),
        (torch.tensor([1.0, 2.0]), "token_ids must be integers"),
    ],
)
def test_token_ids_are_validated(token_ids: object, match: str) -> None:
    model = ToyTransformer(ModelConfig.tiny())
    with pytest.raises(ValueError, match=match):
        model.forward_reference(token_ids)


def test_validate_token_ids_accepts_list_and_tensor() -> None:
    assert validate_token_ids([0, 511], 512).dtype == torch.int64
    assert validate_token_ids(torch.tensor([3], dtype=torch.int32), 512).tolist() == [3]


class ScrambledBlockAllocator:
    """The smallest block manager: hands out blocks in a shuffled order, so a wrong block
    table (or ignoring it) reads the wrong keys."""

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.free = torch.randperm(num_blocks, generator=gen).tolist()

    def grow(self, table: list[int], num_tokens: int, block_size: int) -> None:
        while len(table) * block_size < num_tokens:
            table.append(self.free.pop())


def prefill_in_chunks(
    model: ToyTransformer, prompt: list[int], chunk: int, block_size: int = 16,
    backend: str = "torch",
) -> torch.Tensor:
    """Run the prompt through the paged path ``chunk`` tokens per step; logits of every row."""
    kv_caches = model.allocate_kv_cache(num_blocks=32, block_size=block_size)
    allocator, table, logits = ScrambledBlockAllocator(32), [], []
    for start in range(0, len(prompt), chunk):
        n = min(chunk, len(prompt) - start)
        allocator.grow(table, start + n, block_size)
        meta, positions = build_attention_metadata([n], [start], [table], block_size, "cpu")
        ids = torch.tensor(prompt[start : start + n])
        hidden = model.forward(ids, positions, kv_caches, meta, backend=backend)
        logits.append(model.compute_logits(hidden))
    return torch.cat(logits)


def test_chunked_prefill_through_paged_cache_matches_reference() -> None:
    model = ToyTransformer(ModelConfig.tiny(), seed=0)
    with torch.no_grad():  # sharpen attention so mis-read keys change the logits visibly
        for layer in model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    prompt = torch.randint(0, 512, (45,), generator=torch.Generator().manual_seed(2)).tolist()
    reference = model.forward_reference(prompt)
    results = {chunk: prefill_in_chunks(model, prompt, chunk) for chunk in (1, 7, 16, 45)}
    for chunk, logits in results.items():
        assert logits.shape == reference.shape
        torch.testing.assert_close(logits, reference, atol=1e-5, rtol=0, msg=f"chunk={chunk}")
        torch.testing.assert_close(logits, results[45], atol=1e-5, rtol=0, msg=f"chunk={chunk}")


def test_mixed_step_prefill_chunk_and_decode_match_reference() -> None:
    """One forward call holding a decode of sequence A and a mid-prompt chunk of sequence B."""
    model = ToyTransformer(ModelConfig.tiny(), seed=1)
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(0, 512, (21,), generator=gen).tolist()
    b = torch.randint(0, 512, (30,), generator=gen).tolist()
    bs, kv = 16, model.allocate_kv_cache(num_blocks=16, block_size=16)
    alloc, ta, tb = ScrambledBlockAllocator(16, seed=5), [], []
    # step 1: A's first 20 tokens, B's first 11
    alloc.grow(ta, 20, bs)
    alloc.grow(tb, 11, bs)
    meta, pos = build_attention_metadata([20, 11], [0, 0], [ta, tb], bs)
    model.forward(torch.tensor(a[:20] + b[:11]), pos, kv, meta)
    # step 2: A decodes its 21st token, B prefills tokens 11..29
    alloc.grow(ta, 21, bs)
    alloc.grow(tb, 30, bs)
    meta, pos = build_attention_metadata([1, 19], [20, 11], [ta, tb], bs)
    hidden = model.forward(torch.tensor(a[20:] + b[11:]), pos, kv, meta)
    logits = model.compute_logits(hidden)
    torch.testing.assert_close(logits[0], model.forward_reference(a)[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[1:], model.forward_reference(b)[11:], atol=1e-5, rtol=0)


def test_forward_checks_its_inputs() -> None:
    model = ToyTransformer(ModelConfig.tiny())
    kv = model.allocate_kv_cache(num_blocks=4, block_size=16)
    meta, pos = build_attention_metadata([3], [0], [[1]], 16)
    with pytest.raises(ValueError, match="kv_caches"):
        model.forward(torch.tensor([1, 2, 3]), pos, kv[:1], meta)
    with pytest.raises(ValueError, match="input_ids"):
        model.forward(torch.tensor([1, 2]), pos[:2], kv, meta)
    with pytest.raises(ValueError, match="token_ids"):
        model.forward(torch.tensor([1, 2, 999]), pos, kv, meta)
    with pytest.raises(ValueError, match="backend"):
        model.forward(torch.tensor([1, 2, 3]), pos, kv, meta, backend="cuda")
    with pytest.raises(ValueError, match="num_blocks"):
        model.allocate_kv_cache(num_blocks=0, block_size=16)


def test_allocate_kv_cache_shapes() -> None:
    cfg = ModelConfig.tiny()
    kv = ToyTransformer(cfg).allocate_kv_cache(num_blocks=5, block_size=8, dtype=torch.bfloat16)
    assert len(kv) == cfg.num_hidden_layers
    for k, v in kv:
        assert k.shape == v.shape == (5, 8, cfg.num_key_value_heads, cfg.head_dim)
        assert k.dtype == torch.bfloat16 and k.data_ptr() != v.data_ptr()


def test_importing_attention_does_not_import_triton() -> None:
    code = "import sys, chunkprefill.attention, chunkprefill.model; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fused_projections_are_the_hf_named_weights() -> None:
    """q/k/v and gate/up run as one matmul each, over matrices whose row blocks *are* the
    HF-named parameters: an in-place edit of one reaches the fused matmul, a cast keeps them
    shared (no second copy of the weights), and the fused forward equals separate matmuls."""
    model = ToyTransformer(ModelConfig.tiny(), seed=0)
    attn, mlp = model.layers[0].self_attn, model.layers[0].mlp
    with torch.no_grad():
        attn.k_proj.weight.mul_(3.0)
    x = torch.randn(5, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    separate = torch.cat([x @ attn.q_proj.weight.T, x @ attn.k_proj.weight.T,
                          x @ attn.v_proj.weight.T], dim=-1)
    torch.testing.assert_close(x @ attn.qkv_weight.T, separate)
    model.to(torch.bfloat16)
    attn, mlp = model.layers[0].self_attn, model.layers[0].mlp
    for fused, parts in ((attn.qkv_weight, (attn.q_proj, attn.k_proj, attn.v_proj)),
                         (mlp.gate_up_weight, (mlp.gate_proj, mlp.up_proj))):
        assert fused.dtype == torch.bfloat16
        for lin in parts:
            assert lin.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    names = [n for n, _ in model.named_parameters()]
    assert "layers.0.self_attn.q_proj.weight" in names and not any("qkv" in n for n in names)


def test_logits_indices_compute_only_the_rows_read() -> None:
    """forward(logits_indices=rows) returns exactly those rows of the full forward, also for a
    row in the middle of a chunk, and writes the same K/V into every layer's cache (later
    tokens attend to them); with no rows it returns nothing but still fills the caches."""
    model = ToyTransformer(ModelConfig.tiny(), seed=2)
    gen = torch.Generator().manual_seed(6)
    a, b = torch.randint(0, 512, (30,), generator=gen), torch.randint(0, 512, (9,), generator=gen)
    bs, tables = 16, [[3, 0], [5, 1, 2]]
    prefix = model.allocate_kv_cache(num_blocks=8, block_size=bs)
    meta0, pos0 = build_attention_metadata([20], [0], [tables[1]], bs)  # b's context
    model.forward(torch.randint(0, 512, (20,), generator=gen), pos0, prefix, meta0)
    meta, pos = build_attention_metadata([30, 9], [0, 20], tables, bs)
    ids = torch.cat([a, b])
    runs = {}
    for rows in (None, [3, 29, 38], []):
        kv = [(k.clone(), v.clone()) for k, v in prefix]
        runs[None if rows is None else tuple(rows)] = (model.forward(ids, pos, kv, meta,
                                                                     logits_indices=rows), kv)
    full, full_kv = runs[None]
    torch.testing.assert_close(runs[(3, 29, 38)][0], full[[3, 29, 38]], atol=1e-6, rtol=0)
    assert runs[()][0].shape == (0, model.config.hidden_size)
    for rows in ((3, 29, 38), ()):
        for (k, v), (k_ref, v_ref) in zip(runs[rows][1], full_kv, strict=True):
            assert torch.equal(k, k_ref) and torch.equal(v, v_ref)


def test_metadata_for_rows_makes_each_row_a_decode() -> None:
    meta, _ = build_attention_metadata([3, 1, 2], [0, 5, 4], [[2], [0, 7], [1, 3]], 4)
    sub = meta.for_rows([1, 3, 5])  # 2nd token of seq 0, seq 1's decode, last token of seq 2
    assert sub.query_start_loc.tolist() == [0, 1, 2, 3]
    assert sub.seq_lens.tolist() == [2, 6, 6]  # each row sees the keys up to its position
    assert sub.block_table.tolist() == [[2, 0], [0, 7], [1, 3]]
    assert sub.slot_mapping.tolist() == [9, 29, 13]
    with pytest.raises(ValueError, match="outside"):
        meta.for_rows([6])
