"""Prefix caching on the toy model: cached KV is reused for real (cached tokens run through no
layer) and changes nothing but the work done: greedy outputs and logits with caching on equal
those with caching off and Hugging Face's, whatever the block size, budget or chunking, for
fully cached prompts, prefixes not aligned to a block, a second wave over freed-but-cached
blocks, and a cache small enough to evict cached blocks and preempt requests."""

from __future__ import annotations

import pytest
import torch
from hf_models import hf_and_ours as make_hf_and_ours

from chunkprefill import CacheConfig, LLMEngine, SamplingParams, SchedulerConfig
from chunkprefill.executor import ModelExecutor
from chunkprefill.kv_cache import BlockPool

MAX_TOKENS = 5
VOCAB = 97


@pytest.fixture(scope="module")
def hf_and_ours():
    return make_hf_and_ours(seed=4321)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(11)

    def rand(n):
        return torch.randint(0, VOCAB, (n,), generator=g).tolist()

    system = rand(37)  # 37: not a multiple of 4 or 16
    first = system + rand(5)
    return [first, system + rand(20), list(system), list(first),  # fully cached: a repeat
            rand(12), system[:16] + rand(3), system + rand(60)]


@pytest.fixture(scope="module")
def hf_reference(hf_and_ours, prompts):
    """HF's greedy tokens, and its next-token logits at every sampled position."""
    hf, _ = hf_and_ours
    outs, logits = [], []
    with torch.no_grad():
        for p in prompts:
            x = torch.tensor([p])
            ids = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_TOKENS,
                              do_sample=False, min_new_tokens=MAX_TOKENS, pad_token_id=0,
                              eos_token_id=None)[0].tolist()
            outs.append(ids[len(p):])
            logits.append(hf(torch.tensor([ids[:-1]])).logits[0, len(p) - 1:])
    return outs, logits


class _Probe:
    """Counts the tokens each forward pass runs and keeps the logits each sample saw."""

    def __init__(self, monkeypatch, model):
        self.tokens_run = 0
        self.logits: dict[tuple[str, int], torch.Tensor] = {}
        forward, sample = model.forward, ModelExecutor._sample

        def counting_forward(input_ids, *a, **kw):
            self.tokens_run += len(input_ids)
            return forward(input_ids, *a, **kw)

        def keeping_sample(executor, request, logits):
            self.logits[request.request_id, request.num_output_tokens] = logits.clone()
            return sample(executor, request, logits)

        monkeypatch.setattr(model, "forward", counting_forward)
        monkeypatch.setattr(ModelExecutor, "_sample", keeping_sample)


def _generate(model, prompts, sc, cc, monkeypatch, waves=1):
    with monkeypatch.context() as m:
        probe = _Probe(m, model)
        eng = LLMEngine(model, sc, cc, attention_backend="torch")
        outs = [eng.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
                for _ in range(waves)]
    return eng, outs, probe


def _check_logits(probe, outs, hf_logits):
    for o, ref in zip(outs, hf_logits, strict=True):
        got = torch.stack([probe.logits[o.request_id, k] for k in range(MAX_TOKENS)])
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("budget, chunked", [(7, True), (32, True), (256, False)])
def test_cached_equals_uncached_equals_hf(hf_and_ours, prompts, hf_reference, monkeypatch,
                                          block_size, budget, chunked):
    _, ours = hf_and_ours
    hf_tokens, hf_logits = hf_reference
    sc = SchedulerConfig(budget, 4, chunked, max_model_len=256)
    runs = {}
    for caching in (False, True):
        cc = CacheConfig(block_size, 512, enable_prefix_caching=caching)
        eng, (outs,), probe = _generate(ours, prompts, sc, cc, monkeypatch)
        assert [o.output_token_ids for o in outs] == hf_tokens
        _check_logits(probe, outs, hf_logits)
        assert not any(s.preempted for s in eng.step_log)
        runs[caching] = (eng, outs, probe)
    eng, outs, probe = runs[True]
    hits = [o.num_cached_tokens for o in outs]
    assert all(h % block_size == 0 and h <= len(p) - 1 for h, p in zip(hits, prompts,
                                                                      strict=True))
    assert sum(hits) > 0 and runs[False][1][0].num_cached_tokens == 0
    # The cached tokens went through no layer: the model ran exactly that many fewer.
    assert probe.tokens_run == runs[False][2].tokens_run - sum(hits)
    assert sum(n for s in eng.step_log for n in s.num_cached_tokens.values()) == sum(hits)
    # The repeated prompt (index 3) was fully cached: all but its last, partial or whole,
    # block came from the cache (it was admitted after prompt 0 computed those blocks).
    if budget >= 32:
        assert hits[3] == (len(prompts[3]) - 1) // block_size * block_size


def test_second_wave_hits_freed_cached_blocks(hf_and_ours, prompts, hf_reference, monkeypatch):
    _, ours = hf_and_ours
    hf_tokens, hf_logits = hf_reference
    eng, (first, second), probe = _generate(
        ours, prompts, SchedulerConfig(32, 4, max_model_len=256),
        CacheConfig(4, 512, enable_prefix_caching=True), monkeypatch, waves=2)
    for outs in (first, second):
        assert [o.output_token_ids for o in outs] == hf_tokens
        _check_logits(probe, outs, hf_logits)
    # Between the waves every block was free (and still cached): wave 2 hits every prompt
    # up to its last whole block before num_tokens - 1.
    assert [o.num_cached_tokens for o in second] == [(len(p) - 1) // 4 * 4 for p in prompts]
    stats = eng.scheduler.kv_cache_manager.prefix_cache_stats
    assert stats.requests == 2 * len(prompts)
    assert stats.hits == sum(o.num_cached_tokens for o in first + second)


def test_small_cache_evicts_and_preempts(hf_and_ours, prompts, hf_reference, monkeypatch):
    _, ours = hf_and_ours
    hf_tokens, hf_logits = hf_reference
    evicted = []
    pool_evict = BlockPool._evict

    def noting_evict(pool, block_id):
        if pool.block_hash[block_id] is not None:
            evicted.append(block_id)
        pool_evict(pool, block_id)

    monkeypatch.setattr(BlockPool, "_evict", noting_evict)
    # 30 blocks of 4 slots: the 97-token prompt needs 26 of them alone.
    eng, (outs, again), probe = _generate(
        ours, prompts, SchedulerConfig(48, 4, max_model_len=256),
        CacheConfig(4, 30, enable_prefix_caching=True), monkeypatch, waves=2)
    assert any(s.preempted for s in eng.step_log) and evicted
    stats = eng.scheduler.kv_cache_manager.prefix_cache_stats
    assert stats.preempted_requests > 0 and stats.preempted_hits > 0
    for o in (outs, again):
        assert [x.output_token_ids for x in o] == hf_tokens
        _check_logits(probe, o, hf_logits)
    assert eng.scheduler.kv_cache_manager.num_free_blocks == 30
