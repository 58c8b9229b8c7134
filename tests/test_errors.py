"""Bad input fails early with a ValueError that names the parameter and the allowed range."""

from __future__ import annotations

import re

import pytest

from chunkprefill import (
    CacheConfig,
    ModelConfig,
    Request,
    Scheduler,
    SchedulerConfig,
    TraceRequest,
    run_trace,
)


def _sched(**kw):
    return Scheduler(SchedulerConfig(**kw), CacheConfig(block_size=4, num_blocks=8))


CASES = [
    ("budget zero", lambda: SchedulerConfig(max_num_batched_tokens=0), "max_num_batched_tokens"),
    ("budget negative", lambda: SchedulerConfig(max_num_batched_tokens=-5),
     "max_num_batched_tokens"),
    ("budget not int", lambda: SchedulerConfig(max_num_batched_tokens=16.5),
     "max_num_batched_tokens"),
    ("seqs zero", lambda: SchedulerConfig(max_num_seqs=0), "max_num_seqs"),
    ("seqs negative", lambda: SchedulerConfig(max_num_seqs=-1), "max_num_seqs"),
    ("threshold negative", lambda: SchedulerConfig(long_prefill_token_threshold=-1),
     "long_prefill_token_threshold"),
    ("threshold > max_model_len",
     lambda: SchedulerConfig(long_prefill_token_threshold=100, max_model_len=64),
     r"long_prefill_token_threshold \(100\).*max_model_len=64"),
    ("budget < seqs", lambda: SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=128),
     r"max_num_batched_tokens \(16\).*>= max_num_seqs \(128\)"),
    ("chunking off, budget < max_model_len",
     lambda: SchedulerConfig(16, 16, enable_chunked_prefill=False, max_model_len=64),
     r"max_num_batched_tokens \(16\) is smaller than max_model_len \(64\)"),
    ("prefill_first, budget < max_model_len",
     lambda: SchedulerConfig(64, 16, max_model_len=128, batching="prefill_first"),
     r"max_num_batched_tokens \(64\) is smaller than max_model_len \(128\)"),
    ("max_model_len too small", lambda: SchedulerConfig(max_model_len=1), "max_model_len"),
    ("unknown policy", lambda: SchedulerConfig(policy="lifo"), "policy"),
    ("batching style as policy (vLLM's policy is the queue order)",
     lambda: SchedulerConfig(policy="prefill_first"), "policy must be one of 'fcfs', 'priority'"),
    ("unknown batching", lambda: SchedulerConfig(batching="fcfs"), "batching must be one of"),
    ("prefill interval with prefill_or_decode",
     lambda: SchedulerConfig(batching="prefill_or_decode", prefill_schedule_interval=2),
     r"prefill_schedule_interval \(2\).*allowed: 1 unless batching='mixed'"),
    ("threshold with prefill_first",
     lambda: SchedulerConfig(64, 16, long_prefill_token_threshold=8, max_model_len=64,
                             batching="prefill_first"),
     "long_prefill_token_threshold must be 0 with batching='prefill_first'"),
    ("adaptive not a bool", lambda: SchedulerConfig(long_prefill_token_threshold_adaptive=1),
     "long_prefill_token_threshold_adaptive must be True or False"),
    ("reserve_full_isl not a bool", lambda: SchedulerConfig(scheduler_reserve_full_isl="no"),
     "scheduler_reserve_full_isl must be True or False"),
    ("max_num_active_seqs > max_num_seqs", lambda: SchedulerConfig(max_num_seqs=4,
                                                                   max_num_active_seqs=5),
     r"max_num_active_seqs must be an integer in \[1, 4\]"),
    ("watermark 1", lambda: SchedulerConfig(watermark=1.0), r"watermark .*\[0.0, 1.0\)"),
    ("request priority not int", lambda: Request("a", [1], priority=0.5), "priority"),
    ("trace priority not int", lambda: TraceRequest("a", 1, 1, priority="high"), "priority"),
    ("block size zero", lambda: CacheConfig(block_size=0), "block_size"),
    ("num blocks zero", lambda: CacheConfig(num_blocks=0), "num_blocks"),
    ("num blocks negative", lambda: CacheConfig(num_blocks=-3), "num_blocks"),
    ("prefix caching not a bool", lambda: CacheConfig(enable_prefix_caching="yes"),
     "enable_prefix_caching"),
    ("empty prompt", lambda: Request("a", []), "prompt_token_ids"),
    ("max_tokens zero", lambda: Request("a", [1], max_tokens=0), "max_tokens"),
    ("empty request id", lambda: Request("", [1]), "request_id"),
    ("prompt == max_model_len",
     lambda: _sched(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=16)
     .add_request(Request("a", [0] * 16)), r"1 to max_model_len - 1 = 15"),
    ("duplicate request id", lambda: [s := _sched(max_num_batched_tokens=16, max_num_seqs=4,
                                                  max_model_len=64),
                                      s.add_request(Request("a", [1])),
                                      s.add_request(Request("a", [2]))], "duplicate"),
    ("cache too small for one request",
     lambda: _sched(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64)
     .add_request(Request("a", [0] * 40, max_tokens=1)), "num_blocks is 8"),
    ("trace duplicate id", lambda: run_trace([TraceRequest("a", 1, 1), TraceRequest("a", 2, 1)],
                                             SchedulerConfig(16, 16), CacheConfig()),
     "request_id must be unique"),
    ("trace prompt_len zero", lambda: TraceRequest("a", 0, 1), "prompt_len"),
    ("trace output_len zero", lambda: TraceRequest("a", 1, 0), "output_len"),
    ("trace negative arrival", lambda: TraceRequest("a", 1, 1, arrival_step=-1),
     "arrival_step"),
    ("trace prompt ids wrong length", lambda: TraceRequest("a", 3, 1, prompt_token_ids=[1, 2]),
     r"prompt_token_ids of 'a' must hold prompt_len=3 ids, got 2"),
    ("trace prompt ids negative", lambda: TraceRequest("a", 2, 1, prompt_token_ids=[1, -2]),
     r"prompt_token_ids of 'a' must be an integer >= 0, got -2"),
    ("trace prompt ids not integers", lambda: TraceRequest("a", 2, 1, prompt_token_ids=[1, 2.5]),
     r"prompt_token_ids of 'a' must be an integer >= 0, got 2.5"),
    ("trace prompt ids a string", lambda: TraceRequest("a", 2, 1, prompt_token_ids="ab"),
     "prompt_token_ids of 'a' must be a sequence of integers"),
    ("model heads do not divide hidden", lambda: ModelConfig(hidden_size=30,
                                                             num_attention_heads=4),
     "hidden_size"),
    ("model GQA groups", lambda: ModelConfig(num_attention_heads=4, num_key_value_heads=3),
     "num_key_value_heads"),
]


@pytest.mark.parametrize("make, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_clear_value_error(make, match):
    with pytest.raises(ValueError, match=match) as exc:
        make()
    assert len(str(exc.value)) > 20  # a sentence, not a bare number
    assert not re.search(r"Traceback|torch", str(exc.value))


def test_update_from_output_rejects_tokens_for_mid_prefill_chunk():
    s = _sched(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=64)
    s.add_request(Request("a", [0] * 10, max_tokens=2))
    out = s.schedule()
    with pytest.raises(ValueError, match="sampled_token_ids"):
        s.update_from_output(out, {"a": 3})
