"""Notebooks 02-06: each exercise's reference answer (worked by hand in the comments, the
same as in the notebooks' collapsed answers) passes its checker; a wrong one gets a hint."""

from __future__ import annotations

import pytest

from chunkprefill.course.exercises import (
    article_trace as nb02,
)
from chunkprefill.course.exercises import (
    kernel as nb05,
)
from chunkprefill.course.exercises import (
    knobs,
)
from chunkprefill.course.exercises import (
    paged_kv as nb04,
)
from chunkprefill.course.exercises import (
    scheduler_rules as nb03,
)
from chunkprefill.course.vs_vllm import RECORDINGS, vllm_and_ours
from chunkprefill.trace import run_trace

CASES = [
    # budget 24 - 6 decodes = 18 a step: 18 + 18 + 4 = 40 -> 3 steps
    (nb02.check_budget24, 3, 4),
    # 10 left after the decodes, capped at 6: six chunks of 6, then 4
    (nb02.check_threshold, [6, 6, 6, 6, 6, 6, 4], [10, 10, 10, 10]),
    # P arrives at step 2; 40 + 6 decodes = 46 <= 64
    (nb02.check_no_chunking, (2, 46), (2, 40)),
    # prefill first: a step that admits a prompt runs no decodes
    (nb02.check_prefill_first, 0, 6),
    # the six decodes (output_len 20) hold the six seats for steps 0..19
    (nb03.check_max_num_seqs, 20, 2),
    # the cache runs out at step 9 (12 blocks, three requests at 12 tokens each need 3 more
    # blocks); the broken scheduler pops A, the first, which is the request being scheduled
    (nb03.check_bug, (9, "A"), (9, "C")),
    # A: 5 tokens -> blocks 0, 1; B: 9 -> 2, 3, 4; A grows to 9 -> block 5; p=8 -> 5*4 + 0
    (nb04.check_slot, 20, 8),
    # computed 7, 14, 21, 28, 35, 42, 45 -> ceil(/4) = 2, 4, 6, 7, 9, 11, 12 blocks
    (nb04.check_new_blocks, [2, 2, 2, 1, 2, 2, 1], [2] * 7),
    # 7 + 14 + ... + 42 + 45 = 147 + 45 = 192; one chunk reads 45
    (nb04.check_kv_read, (192, 45), (45, 45)),
    # watermark int(0.2 * 10) = 2 blocks: B's 40 tokens need 5 blocks + 2 free, but A (16
    # tokens, 2 blocks, then 3 from step 1) leaves 9 - 3 = 6 free; A grows to a 4th block at
    # step 9 and a 5th at 17, so B waits until A finishes (its 20th token at step 19)
    (knobs.check_watermark, 20, 1),
    (nb05.check_query_start_loc, [0, 1, 2, 3, 12], [1, 1, 1, 9]),
    # 4+1, 7+1, 15+1, 16+9
    (nb05.check_seq_lens, [5, 8, 16, 25], [1, 1, 1, 9]),
]


@pytest.mark.parametrize(("check", "right", "wrong"), CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_reference_answer(check, right, wrong):
    assert check(right).startswith("Right")
    assert check(wrong).startswith("Not yet") and "Hint:" in check(wrong)
    assert check(None).startswith("Not yet")  # the notebooks' placeholder


def test_03_three_knobs():
    # Chunking on: P gets min(owed, threshold, budget - 6): budget 16 -> 10 a step (4 chunks),
    # threshold 8 -> 8 (5 chunks); budget 64 -> 40 at once, or 8 with the threshold. Chunking
    # off: budget 16 < max_model_len 64 is refused; budget 64 runs P whole, but the threshold
    # still cuts it to 8 a step (vLLM's recorded no_chunking_with_threshold does the same).
    hand = {(True, 16, 0): 4, (True, 16, 8): 5, (True, 64, 0): 1, (True, 64, 8): 5,
            (False, 16, 0): 0, (False, 16, 8): 0, (False, 64, 0): 1, (False, 64, 8): 5}
    assert nb03.check_three_knobs(hand).startswith("Right")
    assert nb03.check_three_knobs({**hand, (False, 64, 8): 1}).startswith("Not yet")


def test_03_buggy_scheduler_differs_only_in_the_victim():
    # The planted bug is the victim alone: both schedules agree until the first preemption.
    real = run_trace(nb03.BUG_REQUESTS, nb03.BUG_CONFIG, nb03.BUG_CACHE)
    bad = nb03.run_buggy(nb03.BUG_REQUESTS, nb03.BUG_CONFIG, nb03.BUG_CACHE)
    assert [s.num_scheduled_tokens for s in real[:9]] == [s.num_scheduled_tokens for s in bad[:9]]
    assert real[9].preempted == ["C"] and bad[9].preempted == ["A"]
    # and the real one is vLLM's: the recorded preempt_last_recompute is this very workload
    vllm, ours = vllm_and_ours("preempt_last_recompute")
    assert vllm == ours and vllm[9]["preempted"] == ["C"]


def test_05_timing_checks_structure():
    check = nb05.check_timing
    assert check({"reference": [2e-3] * 5, "torch": [1e-3] * 5}).startswith("Right")
    assert check({"reference": [2e-3] * 2, "torch": [1e-3] * 5}).startswith("Not yet")
    assert check({"torch": [1e-3] * 5}).startswith("Not yet")
    assert check({"reference": [-1.0] * 5, "torch": [1e-3] * 5}).startswith("Not yet")


def test_04_interval_is_vllms_recorded_schedule():
    # The independent reference: vLLM 0.33.0's own recording of this workload
    # (vllm_knobs_traces.json, interval2_article_trace): P's chunks of 10 land on every other
    # step, 2, 4, 6, 8.
    import json

    path = RECORDINGS / "vllm_knobs_traces.json"
    sc = next(s for s in json.loads(path.read_text())["scenarios"]
              if s["name"] == "interval2_article_trace")
    assert sc["scheduler"]["prefill_schedule_interval"] == 2
    recorded = [k for k, st in enumerate(sc["steps"])
                if dict(st["num_scheduled_tokens"]).get("P", 0) > 1]
    assert recorded == [2, 4, 6, 8]
    assert knobs.check_interval(recorded).startswith("Right")
    assert knobs.check_interval([2, 3, 4, 5]).startswith("Not yet")
    assert knobs.check_interval(None).startswith("Not yet")


def test_04_watermark_answer_is_vllms_and_ours():
    # The checker reads vLLM's recording; our replay of the scenario admits B at that step too.
    vllm, ours = vllm_and_ours(knobs.WATERMARK_SCENARIO, knobs.KNOB_TRACES)
    assert vllm == ours
    first_b = next(k for k, st in enumerate(ours)
                   if any(rid == "B" for rid, _ in st["num_scheduled_tokens"]))
    assert first_b == knobs.watermark_admission_step() == 20
