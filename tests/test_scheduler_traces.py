"""Hand-derived traces, one per scheduling rule (docs/architecture.md). Each expected
schedule below was worked out on paper from the rule, step by step, in the comments."""

from __future__ import annotations

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest, run_trace
from chunkprefill.trace import article_trace_requests, format_trace_table


def schedules(steps):
    return [list(s.num_scheduled_tokens.items()) for s in steps]


def test_article_trace_budget_16():
    """The article: budget 16, six decodes each take 1, P takes the other 10, four times."""
    steps = run_trace(article_trace_requests(), SchedulerConfig(max_num_batched_tokens=16,
                      max_num_seqs=16), CacheConfig(block_size=16, num_blocks=1000))
    decodes = [f"D{i}" for i in range(1, 7)]
    assert list(steps[2].num_scheduled_tokens) == [*decodes, "P"]  # running first, then P
    for k in range(2, 6):
        assert steps[k].num_scheduled_tokens == {**dict.fromkeys(decodes, 1), "P": 10}
        assert steps[k].budget_left == 0
    assert steps[6].num_scheduled_tokens["P"] == 1  # the fifth step is P's first decode
    assert steps[5].num_computed_tokens["P"] == 30  # its fourth chunk starts at 30
    assert steps[5].num_computed_tokens_after["P"] == 40
    table = format_trace_table(steps[:7])
    assert table.splitlines()[3].split() == ["2", "1", "1", "1", "1", "1", "1", "10", "16", "0"]


def test_threshold_caps_each_long_prompt():
    # budget 32, threshold 8, A and B owe 20 each: 8+8, 8+8, 4+4, then one decode each.
    reqs = [TraceRequest("A", 20, 2), TraceRequest("B", 20, 2)]
    steps = run_trace(reqs, SchedulerConfig(32, 4, long_prefill_token_threshold=8,
                      max_model_len=64), CacheConfig(16, 100))
    assert schedules(steps) == [[("A", 8), ("B", 8)], [("A", 8), ("B", 8)],
                                [("A", 4), ("B", 4)], [("A", 1), ("B", 1)]]
    assert steps[-1].finished == ["A", "B"]


def test_threshold_never_caps_a_lone_request():
    steps = run_trace([TraceRequest("A", 20, 1)], SchedulerConfig(32, 4,
                      long_prefill_token_threshold=8, max_model_len=64), CacheConfig(16, 100))
    assert schedules(steps) == [[("A", 20)]]


def test_max_num_seqs_limits_admission():
    # Two seats: A, B run 3 steps each; C waits until they finish.
    reqs = [TraceRequest(r, 1, 3) for r in "ABC"]
    steps = run_trace(reqs, SchedulerConfig(16, 2, max_model_len=64), CacheConfig(16, 100))
    assert schedules(steps) == [[("A", 1), ("B", 1)]] * 3 + [[("C", 1)]] * 3
    assert steps[2].finished == ["A", "B"] and steps[5].finished == ["C"]


def test_chunking_off_head_of_line_blocking():
    # Budget 64: A (40) fits, B (30) does not fit the 24 left, so the pass stops and the
    # small C behind B waits too. With chunking on, B takes the 24 instead.
    reqs = [TraceRequest("A", 40, 3), TraceRequest("B", 30, 1), TraceRequest("C", 5, 1)]
    off = run_trace(reqs, SchedulerConfig(64, 4, enable_chunked_prefill=False,
                    max_model_len=64), CacheConfig(16, 100))
    assert schedules(off) == [[("A", 40)], [("A", 1), ("B", 30), ("C", 5)], [("A", 1)]]
    on = run_trace(reqs, SchedulerConfig(64, 4, max_model_len=64), CacheConfig(16, 100))
    assert schedules(on)[0] == [("A", 40), ("B", 24)]


def test_kv_exhaustion_preempts_last_and_recomputes():
    # 4 blocks of 4 slots. A, B (prompt 4, 8 outputs) fill them by step 4. At step 5 A
    # needs a 3rd block: B (last in running) is preempted, frees 2, A takes 1. B, now
    # owing its prompt + 5 outputs = 9 tokens, cannot re-enter until A finishes (it needs
    # 3 blocks, 1 is free), then recomputes all 9 in one step and decodes on.
    reqs = [TraceRequest("A", 4, 8), TraceRequest("B", 4, 8)]
    steps = run_trace(reqs, SchedulerConfig(16, 4, max_model_len=64), CacheConfig(4, 4))
    assert schedules(steps) == (
        [[("A", 4), ("B", 4)]] + [[("A", 1), ("B", 1)]] * 4 + [[("A", 1)]] * 3
        + [[("B", 9)], [("B", 1)], [("B", 1)]])
    assert steps[5].preempted == ["B"]
    assert steps[7].finished == ["A"] and steps[10].finished == ["B"]
    assert all(s.num_free_blocks >= 0 for s in steps) and steps[-1].num_free_blocks == 4


def test_full_sequence_admission_gate():
    # 4 blocks of 4, budget 4. At step 2 B's first chunk (3 tokens, 1 block) would fit,
    # but its whole 12-token prompt (3 blocks) does not: B waits until A frees its blocks.
    reqs = [TraceRequest("A", 8, 4), TraceRequest("B", 12, 1)]
    steps = run_trace(reqs, SchedulerConfig(4, 4, max_model_len=64), CacheConfig(4, 4))
    assert schedules(steps) == ([[("A", 4)]] * 2 + [[("A", 1)]] * 3 + [[("B", 4)]] * 3)


def test_max_model_len_ends_generation():
    # max_model_len 10, prompt 6: tokens 7, 8, 9, 10 are sampled, then the length cap.
    steps = run_trace([TraceRequest("A", 6, 100)], SchedulerConfig(16, 16, max_model_len=10),
                      CacheConfig(16, 10))
    assert schedules(steps) == [[("A", 6)], [("A", 1)], [("A", 1)], [("A", 1)]]
    assert steps[-1].finished == ["A"]


def test_later_chunks_of_admitted_prompt_precede_newer_arrivals():
    # A is admitted at step 0 with 8 of its 20 tokens; B arrives at step 1 and only gets
    # what A's next chunk leaves over: running requests are served first.
    reqs = [TraceRequest("A", 20, 1), TraceRequest("B", 20, 1, arrival_step=1)]
    steps = run_trace(reqs, SchedulerConfig(8, 4, max_model_len=64), CacheConfig(16, 100))
    assert schedules(steps)[:4] == [[("A", 8)], [("A", 8)], [("A", 4), ("B", 4)], [("B", 8)]]


def test_idle_steps_before_arrival():
    steps = run_trace([TraceRequest("A", 3, 1, arrival_step=2)], SchedulerConfig(16, 16),
                      CacheConfig(16, 10))
    assert schedules(steps) == [[], [], [("A", 3)]]


def test_prefill_first_baseline_stalls_decodes():
    # vLLM V0 / nano-vllm: P's whole prompt runs alone at step 2; the six decodes skip a step.
    sc = SchedulerConfig(64, 16, max_model_len=64, batching="prefill_first")
    steps = run_trace(article_trace_requests(), sc, CacheConfig(16, 100))
    decodes = [(f"D{i}", 1) for i in range(1, 7)]
    assert schedules(steps)[:4] == [decodes, decodes, [("P", 40)], [*decodes, ("P", 1)]]
