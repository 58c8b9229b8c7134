"""The scheduler's facts travel with each step (``SchedulerOutput`` -> ``StepRecord`` /
``TraceStep``), so nothing downstream replays the history to recover them. With prefix
caching on, a replay that sums scheduled tokens gets them wrong: it misses the cached part
of a prompt. The workload is the CLI's ``--shared-prefix 32`` example, derived by hand: S's
32-token prompt fills two blocks of 16, which P (the article's 40-token prompt, arriving at
step 2) finds in the cache, so P owes 8 tokens, computes them in one chunk starting at
position 32, and every later step of P is a decode."""

from __future__ import annotations

from chunkprefill import CacheConfig, LLMEngine, SamplingParams, SchedulerConfig, run_trace
from chunkprefill.sim import CostModel, CostModelExecutor, batches_from_step_log
from chunkprefill.trace import article_trace_requests, prompt_chunks, with_shared_prefix

CACHE = CacheConfig(block_size=16, num_blocks=1000, enable_prefix_caching=True)
CONFIG = SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16)


def test_a_prefix_hit_is_context_not_a_chunk_in_a_trace():
    steps = run_trace(with_shared_prefix(article_trace_requests(), 32), CONFIG, CACHE)
    (admitted,) = [s for s in steps if s.num_cached_tokens.get("P")]
    assert admitted.num_cached_tokens["P"] == 32
    assert admitted.num_computed_tokens["P"] == 32  # its chunk starts after the hit
    assert admitted.num_scheduled_tokens["P"] == 8
    assert prompt_chunks(steps, "P") == [8]  # the decodes after it are not chunks
    p_steps = [s for s in steps if "P" in s.num_scheduled_tokens]
    assert [s.token_splits["P"].kind for s in p_steps] == ["prefill", "decode", "decode"]


def test_a_prefix_hit_is_context_not_a_chunk_in_an_engine_step_log():
    """The same workload through the engine (the simulator's executor prices the steps):
    the step log prices P's chunk at context 32, the cost model's view of the hit."""
    engine = LLMEngine(CostModelExecutor(CostModel.preset()), CONFIG, CACHE)
    prompt = list(range(2, 42))
    engine.add_request(prompt[:32], SamplingParams(max_tokens=1), request_id="S")
    for i in range(6):
        engine.add_request([1000 + i], SamplingParams(max_tokens=20), request_id=f"D{i + 1}")
    engine.run()
    engine.add_request(prompt, SamplingParams(max_tokens=3), request_id="P")
    engine.run()
    chunk_steps = [rec for rec in engine.step_log if rec.token_splits.get("P", (0,))[0]]
    assert [(rec.num_scheduled_tokens["P"], rec.num_cached_tokens["P"]) for rec in
            chunk_steps] == [(8, 32)]
    assert prompt_chunks(engine.step_log, "P") == [8]
    batches = batches_from_step_log(engine.step_log)
    k = engine.step_log.index(chunk_steps[0])
    assert dict(zip(engine.step_log[k].num_scheduled_tokens, batches[k]))["P"] == (8, 32)
