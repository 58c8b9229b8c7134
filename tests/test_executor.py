"""ModelExecutor: pruning the last layer to the sampled rows changes nothing anyone reads
(tokens, the sampled rows' logits, the KV cache), only the work; without it every row goes
through every layer, as in vLLM."""

from __future__ import annotations

import torch

from chunkprefill import CacheConfig, LLMEngine, ModelConfig, SamplingParams, SchedulerConfig
from chunkprefill.model import ToyTransformer


def _run(prune: bool) -> tuple[list[list[int]], list[torch.Tensor], list[int], list]:
    model = ToyTransformer(ModelConfig.tiny(), seed=3)
    engine = LLMEngine(model, SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=4,
                                              max_model_len=128),
                       CacheConfig(block_size=16, num_blocks=16), attention_backend="torch")
    engine.executor.prune_last_layer = prune
    rows_seen: list[int] = []
    logits: list[torch.Tensor] = []
    norm_hook = model.norm.register_forward_hook(lambda m, a, out: rows_seen.append(len(out)))
    sample = engine.executor._sample

    def keep(request, row):  # every sampled row's logits, in sampling order
        logits.append(row.clone())
        return sample(request, row)

    engine.executor._sample = keep
    gen = torch.Generator().manual_seed(8)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (40, 3, 21)]
    outs = engine.generate(prompts, SamplingParams(max_tokens=4))
    norm_hook.remove()
    return [o.output_token_ids for o in outs], logits, rows_seen, engine.executor.kv_caches


def test_pruning_the_last_layer_changes_no_output() -> None:
    tokens, logits, rows, kv = _run(prune=True)
    tokens_full, logits_full, rows_full, kv_full = _run(prune=False)
    assert tokens == tokens_full
    assert len(logits) == len(logits_full) == 12
    for a, b in zip(logits, logits_full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for (k, v), (k_full, v_full) in zip(kv, kv_full, strict=True):
        torch.testing.assert_close(k, k_full, atol=1e-6, rtol=0)
        torch.testing.assert_close(v, v_full, atol=1e-6, rtol=0)
    # the work differs: the final norm sees only the sampled rows, not the prefill chunks
    assert sum(rows) == 12 and sum(rows_full) == 40 + 3 + 21 + 3 * 3
