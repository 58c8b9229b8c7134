"""A small Hugging Face Llama and our ToyTransformer with its weights, for the engine tests."""

from __future__ import annotations

import torch
import transformers  # test-only dev dependency: missing must fail, not skip

from chunkprefill import ToyTransformer


def hf_and_ours(seed: int, vocab_size: int = 97) -> tuple[transformers.LlamaForCausalLM,
                                                         ToyTransformer]:
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=5000.0, tie_word_embeddings=False,
        attn_implementation="eager")
    torch.manual_seed(seed)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    return hf, ToyTransformer.from_hf(hf)
