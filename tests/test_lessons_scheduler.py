"""Claims notebooks 03-05 make in prose that their evidence cells do not re-check, worked out by
hand in the comments (the notebooks' own asserts run under nbval)."""

from __future__ import annotations

import pytest

from chunkprefill import CacheConfig, Request, SchedulerConfig, TraceRequest, run_trace
from chunkprefill.course.exercises.paged_kv import kv_read
from chunkprefill.course.vs_vllm import RECORDINGS, load_scenario, run_recorded_scenario
from chunkprefill.trace import article_trace_requests

KNOBS = RECORDINGS / "vllm_knobs_traces.json"


def test_a_fresh_request_owes_its_prompt():
    p = Request("P", prompt_token_ids=[0] * 20, max_tokens=3)
    assert (p.num_tokens, p.num_computed_tokens, p.num_owed_tokens) == (20, 0, 20)


def test_the_article_step_hands_the_executor_its_facts():
    # Budget 16, six decodes take 1 each, P (arrived at step 2) its first 10 prompt tokens.
    steps = run_trace(article_trace_requests(), SchedulerConfig(16, 16), CacheConfig(16, 1000))
    s = steps[2]
    assert s.num_scheduled_tokens["P"] == 10 and s.num_computed_tokens["P"] == 0
    assert sum(t.prefill for t in s.token_splits.values()) == 10
    assert sum(t.decode for t in s.token_splits.values()) == 6


def test_seats_are_never_exceeded():
    # 03 section 6: four seats, six requests; a finished request's seat is free the next step.
    six = [TraceRequest(f"R{i}", 2, n) for i, n in enumerate([3, 5, 4, 6, 2, 3], start=1)]
    steps = run_trace(six, SchedulerConfig(16, 4, max_model_len=64), CacheConfig(16, 100))
    assert all(len(s.running) + len(s.finished) <= 4 for s in steps)
    assert steps[2].finished == ["R1"] and "R5" in steps[3].num_scheduled_tokens


def test_priority_victim_finishes_last():
    # 04 section 5: A (priority 2) arrives first but is the least urgent: preempted at step 9,
    # it recomputes after B and C (priorities 0, 1) are done, and finishes last.
    urgent = [TraceRequest("A", 8, 16, 0, priority=2), TraceRequest("B", 8, 16, 1, priority=0),
              TraceRequest("C", 8, 16, 1, priority=1)]
    steps = run_trace(urgent, SchedulerConfig(32, 4, max_model_len=64, policy="priority"),
                      CacheConfig(4, 12))
    done = {rid: s.step for s in steps for rid in s.finished}
    assert done["A"] > max(done["B"], done["C"])


def test_the_tie_livelock_repeats_with_period_six():
    # 04 section 5: from step 24 the state after each step repeats every 6 steps, with no
    # request sampling (no decode tokens) and none finishing: a deterministic cycle.
    steps = run_recorded_scenario(load_scenario("prio_ties_evict_each_other", KNOBS))
    state = [(s.num_scheduled_tokens, s.num_computed_tokens_after, s.running, s.waiting)
             for s in steps]
    assert all(state[k] == state[k + 6] for k in range(24, len(steps) - 6))
    assert not any(t.decode for s in steps[24:] for t in s.token_splits.values())
    with pytest.raises(RuntimeError, match="max_steps"):  # never finishes on its own
        sc = load_scenario("prio_ties_evict_each_other", KNOBS)
        run_trace([TraceRequest(**r) for r in sc["requests"]], SchedulerConfig(**sc["scheduler"]),
                  CacheConfig(**sc["cache"]), max_steps=2000)


def test_stop_after_is_checked():
    with pytest.raises(ValueError, match="stop_after"):
        run_trace([TraceRequest("A", 4, 2)], SchedulerConfig(8, 2, max_model_len=16),
                  CacheConfig(4, 4), stop_after=0)


def test_kv_loaded_sums_seq_lens():
    # 05 section 5: chunks of 7 load 7 + 14 + ... + 42 + 45 = 192 K/V positions; one step 45.
    assert kv_read(45, 7) == sum(range(7, 43, 7)) + 45 == 192
    assert kv_read(45, 64) == 45
