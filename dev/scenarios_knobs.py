"""Scenarios for vLLM 0.33.0's scheduler knobs and ``policy="priority"`` (a dev tool).

``tests/test_vs_vllm_knobs.py`` replays every scenario of ``vllm_knobs_traces.json``
step for step (recordings in ``chunkprefill/course/data/vllm/``), and checks our
``SchedulerConfig`` accepts and rejects exactly the knob values
vLLM's own ``SchedulerConfig`` accepts and rejects (``vllm_knobs_validation.json``).
The scenarios are kept apart from ``dev/vllm_reference.py``'s list so that its fixtures never
change; they run through the same ``VllmRunner``. From the repository root::

    python3 dev/scenarios_knobs.py scenarios            # -> vllm_knobs_scenarios.json
    HF_HUB_OFFLINE=1 /tmp/vllmref/bin/python dev/vllm_reference.py traces \\
        --scenarios chunkprefill/course/data/vllm/vllm_knobs_scenarios.json \\
        --out chunkprefill/course/data/vllm/vllm_knobs_traces.json
    HF_HUB_OFFLINE=1 /tmp/vllmref/bin/python dev/scenarios_knobs.py validation
                                                        # -> vllm_knobs_validation.json

(the venv is the one ``dev/vllm_reference.py``'s docstring sets up). All outputs are
deterministic.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_reference import (  # noqa: E402
    REPO,
    VLLM_VERSION,
    _req,
    _scenario,
    _seed_requests,
    validate_scenario,
)

SCENARIOS_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_knobs_scenarios.json"
VALIDATION_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_knobs_validation.json"


def _random_knob_scenario(seed: int) -> dict[str, Any]:
    """A deterministic random mix with random knob values (always valid for vLLM)."""
    rng = random.Random(1000 + seed)
    block_size = rng.choice([1, 2, 4, 8, 16])
    max_model_len = rng.choice([64, 96, 128])
    budget = rng.choice([8, 16, 24, 32, 64])
    max_num_seqs = rng.randint(1, min(8, budget))
    knobs: dict[str, Any] = {
        "policy": rng.choice(["fcfs", "priority"]),
        "long_prefill_token_threshold_adaptive": rng.random() < 0.5,
        "prefill_schedule_interval": rng.choice([1, 2, 3, 5]),
        "max_num_active_seqs": rng.choice([None, rng.randint(1, max_num_seqs)]),
        "watermark": rng.choice([0.0, 0.05, 0.1, 0.25]),
        "scheduler_reserve_full_isl": rng.random() < 0.6,
    }
    threshold = rng.choice([0, 4, 8, 16])
    reqs, longest, arrival = [], 0, 0
    for i in range(rng.randint(5, 12)):
        prompt_len = rng.choice([1, 2, rng.randint(3, 24), rng.randint(20, max_model_len - 1)])
        output_len = rng.choice([1, 2, rng.randint(3, 16), rng.randint(16, 60)])
        arrival += rng.choice([0, 0, 1, 2, 4])
        prio = rng.choice([0, 0, 1, 2, -1]) if knobs["policy"] == "priority" else 0
        reqs.append(_req(f"r{i}", prompt_len, output_len, arrival, prio))
        longest = max(longest, min(prompt_len + output_len, max_model_len) - 1)
    min_blocks = -(-longest // block_size)
    num_blocks = min_blocks + rng.choice([0, 1, 2, 4, min_blocks // 2, min_blocks, 1000])
    return _scenario(f"knobs_random_seed{seed}", "seeded random mix of every knob", reqs,
                     budget=budget, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                     block_size=block_size, num_blocks=num_blocks, threshold=threshold, **knobs)


def build_scenarios() -> list[dict[str, Any]]:
    s, r = _scenario, _req
    prio = {"policy": "priority"}
    tie_reqs = [r("A", 8, 16, 0), r("B", 8, 16, 0)]
    tie_config = {"budget": 32, "max_num_seqs": 4, "max_model_len": 64, "block_size": 4,
                  "num_blocks": 8, "threshold": 4}
    out = [
        # --- policy="priority" -------------------------------------------------------------
        s("prio_waiting_order", "waiting served by (priority, arrival): lower priority value "
          "first, whatever the list order (max_num_seqs 1: one at a time)",
          [r("A", 6, 3, 0, 3), r("B", 6, 3, 0, 1), r("C", 6, 3, 0, 2), r("D", 6, 3, 0, 0)],
          budget=16, max_num_seqs=1, max_model_len=64, **prio),
        s("prio_ties_arrival_then_id", "equal priorities: earlier arrival first, then the "
          "request id (string order), not the list order",
          [r("Z", 5, 2, 0), r("B", 5, 2, 1), r("A", 5, 2, 1), r("Y", 5, 2, 0)],
          budget=8, max_num_seqs=1, max_model_len=64, **prio),
        s("prio_late_urgent_arrival", "a later arrival with a lower priority value jumps the "
          "waiting queue but never preempts a running request on arrival",
          [r("A", 20, 6, 0, 5), r("B", 20, 6, 0, 5), r("C", 20, 6, 0, 5), r("U", 4, 3, 2, 0)],
          budget=16, max_num_seqs=1, max_model_len=64, **prio),
        s("prio_preempt_victim_not_last", "KV exhausted: the victim is the running request "
          "with the largest (priority, arrival) (here the FIRST running), not the newest",
          [r("A", 8, 20, 0, 9), r("B", 8, 20, 0, 0), r("C", 8, 20, 0, 1)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=12, **prio),
        s("prio_preempt_scheduled_victim", "the victim was already scheduled earlier in the "
          "step: its tokens are taken back and the budget restored",
          [r("V", 6, 5, 0, 9), r("X", 4, 6, 0, 0)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=3, **prio),
        s("prio_preempt_self_continue", "the request that needs a block is itself the lowest "
          "priority: it preempts itself and the running pass CONTINUES with the next",
          [r("A", 4, 4, 0, 0), r("B", 3, 12, 0, 9), r("C", 2, 12, 0, 1)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=5, **prio),
        s("prio_resume_by_priority", "a preempted request re-enters waiting at its priority "
          "(not the front): an urgent waiting request goes first",
          [r("A", 4, 30, 0, 2), r("B", 4, 30, 0, 3), r("N", 6, 3, 4, 1)],
          budget=16, max_num_seqs=2, max_model_len=64, block_size=4, num_blocks=9, **prio),
        s("prio_negative_and_equal", "negative priorities rank first; equal (priority, "
          "arrival) victims: the first in running order is preempted",
          [r("A", 6, 16, 0, -1), r("B", 6, 16, 0, 4), r("C", 6, 16, 0, 4), r("D", 3, 3, 3, -5)],
          budget=24, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=10, **prio),
        # Two requests tied on (priority, arrival), recomputing in chunks (threshold 4),
        # admitted on their first chunk (scheduler_reserve_full_isl off): each one's
        # recompute runs the cache out and preempts the other, the first of equals in
        # running order, before it samples again. vLLM never finishes it: "max_steps"
        # records its first 60 steps. The same workload under fcfs, or with the default
        # full-sequence gate, finishes.
        {**s("prio_ties_evict_each_other", "equal (priority, arrival), recompute chunked by "
             "the threshold, scheduler_reserve_full_isl off: the two preempt each other for "
             "ever (a livelock; 60 steps recorded)", tie_reqs, **tie_config,
             scheduler_reserve_full_isl=False, **prio), "max_steps": 60},
        s("prio_ties_full_isl_finishes", "the livelock's workload with the default "
          "full-sequence gate: the victim waits until its whole sequence fits, and both finish",
          tie_reqs, **tie_config, **prio),
        s("prio_ties_fcfs_finishes", "the livelock's workload (gate off) under fcfs: the victim "
          "is the newest, and both finish",
          tie_reqs, **tie_config, scheduler_reserve_full_isl=False),
        s("prio_chunked_long_prompts", "priority with chunked prompts and a threshold",
          [r("A", 50, 3, 0, 2), r("B", 40, 3, 0, 0), r("C", 30, 4, 1, 1), r("D", 5, 6, 2, 0)],
          budget=24, max_num_seqs=2, max_model_len=128, threshold=8, **prio),
        # --- long_prefill_token_threshold_adaptive ----------------------------------------
        s("adaptive_floor_raises_cap", "adaptive: the cap 4 is floored at budget // "
          "requests = 64 // 2 = 32",
          [r("A", 100, 2), r("B", 90, 2)],
          budget=64, max_num_seqs=8, max_model_len=256, threshold=4,
          long_prefill_token_threshold_adaptive=True),
        s("adaptive_share_below_cap", "adaptive: a fair share below the cap changes nothing "
          "(cap 40 > 64 // 4)",
          [r("A", 100, 2), r("B", 90, 2), r("C", 80, 2), r("D", 70, 2)],
          budget=64, max_num_seqs=8, max_model_len=256, threshold=40,
          long_prefill_token_threshold_adaptive=True),
        s("adaptive_share_follows_count", "adaptive: the share shrinks as requests arrive and "
          "grows as they finish (running + waiting)",
          [r("A", 120, 3, 0), r("B", 100, 3, 1), r("C", 20, 4, 2), r("D", 60, 2, 3),
           r("E", 1, 12, 3)],
          budget=48, max_num_seqs=8, max_model_len=256, threshold=6,
          long_prefill_token_threshold_adaptive=True),
        s("adaptive_without_threshold", "adaptive with threshold 0: no cap at all",
          [r("A", 100, 2), r("B", 90, 2)],
          budget=64, max_num_seqs=8, max_model_len=256,
          long_prefill_token_threshold_adaptive=True),
        s("adaptive_article_trace", "the article's trace with threshold 2, adaptive: 16 // 7 = 2, "
          "then 16 // 7 again",
          _seed_requests(), budget=16, max_num_seqs=16, max_model_len=1024, threshold=2,
          long_prefill_token_threshold_adaptive=True),
        s("adaptive_waiting_counts", "waiting requests count in the share (max_num_seqs 1)",
          [r("A", 60, 2), r("B", 60, 2), r("C", 60, 2)],
          budget=32, max_num_seqs=1, max_model_len=128, threshold=4,
          long_prefill_token_threshold_adaptive=True),
        # --- prefill_schedule_interval ----------------------------------------------------
        s("interval2_article_trace", "interval 2: P's chunks run every other step while the "
          "decodes run every step",
          _seed_requests(), budget=16, max_num_seqs=16, max_model_len=1024,
          prefill_schedule_interval=2),
        s("interval3_staggered", "interval 3: admissions and chunks only every third executed "
          "step after the last prefill",
          [r("D1", 1, 30, 0), r("D2", 2, 30, 0), r("P", 40, 4, 2), r("Q", 20, 3, 5),
           r("R", 9, 3, 9)],
          budget=16, max_num_seqs=8, max_model_len=256, prefill_schedule_interval=3),
        s("interval_capacity_escape", "a release step that leaves requests waiting "
          "(max_num_seqs full) lifts the hold until the queue drains",
          [r("A", 2, 12, 0), r("B", 8, 6, 1), r("C", 8, 6, 1), r("D", 8, 6, 1), r("E", 8, 6, 1),
           r("F", 8, 6, 1)],
          budget=32, max_num_seqs=3, max_model_len=128, prefill_schedule_interval=4),
        s("interval_nothing_decoding", "no hold while nothing decodes (every running request "
          "is mid-prefill)",
          [r("A", 60, 3, 0), r("B", 50, 3, 0)],
          budget=16, max_num_seqs=4, max_model_len=128, prefill_schedule_interval=4),
        s("interval_one_token_prompts", "a held step still admits a 1-token prompt (no prompt "
          "token to hold: num_computed < num_tokens - 1 is false), and that admission does not "
          "restart the interval",
          [r("D", 3, 20, 0), r("S1", 1, 3, 1), r("S2", 1, 3, 2), r("P", 30, 2, 3)],
          budget=8, max_num_seqs=8, max_model_len=64, prefill_schedule_interval=3),
        s("interval_empty_steps_not_counted", "only executed (non-empty) steps count toward "
          "the interval: after an idle gap, S (1 token, no restart) decodes and P is held",
          [r("A", 5, 1, 0), r("S", 1, 6, 6), r("P", 12, 2, 7)],
          budget=16, max_num_seqs=4, max_model_len=64, prefill_schedule_interval=4),
        s("interval_with_preemption", "a step that preempts skips the waiting pass and leaves "
          "the escape flag as it was, though the victim now waits",
          [r("A", 2, 37, 0), r("B", 2, 24, 0), r("P0", 40, 2, 1), r("P1", 16, 3, 4)],
          budget=12, max_num_seqs=4, max_model_len=128, block_size=4, num_blocks=15, threshold=4,
          prefill_schedule_interval=3),
        s("interval_no_chunking", "interval 2 with chunked prefill off",
          [r("D1", 1, 20, 0), r("D2", 1, 20, 0), r("P", 40, 3, 2), r("Q", 30, 2, 3)],
          budget=64, max_num_seqs=8, max_model_len=64, chunked=False,
          prefill_schedule_interval=2),
        # --- max_num_active_seqs ----------------------------------------------------------
        s("active_2_of_8", "max_num_active_seqs 2 (max_num_seqs 8): at most 2 running",
          [r(f"R{i}", 3 + i, 4 + (i % 3)) for i in range(6)],
          budget=32, max_num_seqs=8, max_model_len=64, max_num_active_seqs=2),
        s("active_1_serial", "max_num_active_seqs 1: one request at a time",
          [r("A", 10, 3), r("B", 5, 2, 1), r("C", 12, 1, 1)],
          budget=16, max_num_seqs=4, max_model_len=64, max_num_active_seqs=1),
        s("active_with_preemption", "max_num_active_seqs 2 with preemption and resume",
          [r("A", 4, 30, 0), r("B", 4, 30, 0), r("C", 6, 4, 2), r("D", 6, 4, 2)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=9,
          max_num_active_seqs=2),
        s("active_equals_seqs", "max_num_active_seqs == max_num_seqs: same as unset",
          [r("A", 20, 4), r("B", 20, 4), r("C", 20, 4)],
          budget=16, max_num_seqs=2, max_model_len=64, max_num_active_seqs=2),
        # --- watermark ----------------------------------------------------------------------
        s("watermark_delays_admission", "watermark 0.2 of 9 usable (+1 null) blocks = 2 "
          "blocks kept free when admitting while A runs",
          [r("A", 16, 20, 0), r("B", 40, 2, 1)],
          budget=64, max_num_seqs=4, max_model_len=128, block_size=8, num_blocks=9,
          watermark=0.2),
        s("watermark_empty_engine", "watermark is not applied when nothing runs: a request "
          "needing every block is admitted into an empty engine",
          [r("A", 30, 3, 0), r("B", 30, 3, 0)],
          budget=64, max_num_seqs=4, max_model_len=64, block_size=8, num_blocks=4,
          watermark=0.5),
        s("watermark_counts_admitted_this_step", "a request admitted earlier in the same "
          "waiting pass already counts as running: the watermark applies to the next",
          [r("A", 8, 4, 0), r("B", 8, 4, 0), r("C", 8, 4, 0)],
          budget=64, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=7,
          watermark=0.25),
        s("watermark_resume", "a preempted request waits for the watermark too",
          [r("A", 6, 20, 0), r("B", 6, 20, 0), r("C", 6, 8, 4)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=12,
          watermark=0.2),
        s("watermark_no_full_isl", "watermark with scheduler_reserve_full_isl=False: applied "
          "to the first chunk's blocks",
          [r("A", 20, 20, 0), r("B", 40, 2, 1), r("C", 10, 2, 2)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=4, num_blocks=20,
          watermark=0.6, scheduler_reserve_full_isl=False),
        # --- scheduler_reserve_full_isl ----------------------------------------------------
        s("no_full_isl_first_chunk_admits", "scheduler_reserve_full_isl=False: the first chunk "
          "fitting is enough to admit (then decodes preempt it)",
          [r("A", 20, 30, 0), r("B", 40, 2, 1)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=16, num_blocks=4,
          scheduler_reserve_full_isl=False),
        s("no_full_isl_small_behind", "without the gate, a small request behind a big one is "
          "admitted in the same step",
          [r("A", 20, 30, 0), r("B", 40, 2, 1), r("S", 2, 2, 1)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=16, num_blocks=4,
          scheduler_reserve_full_isl=False),
        s("no_full_isl_thrash", "over-admission then preemptions (KV tight, many long prompts)",
          [r("A", 30, 8, 0), r("B", 30, 8, 0), r("C", 30, 8, 1), r("D", 30, 8, 1)],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=16,
          scheduler_reserve_full_isl=False),
        s("full_isl_no_thrash", "no_full_isl_thrash's workload with the default gate: a "
          "preempted request waits until its whole sequence fits (3 preemptions, not 9)",
          [r("A", 30, 8, 0), r("B", 30, 8, 0), r("C", 30, 8, 1), r("D", 30, 8, 1)],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=16),
        s("no_full_isl_resumed", "a resumed request re-admitted on its first chunk only",
          [r("A", 6, 30, 0), r("B", 6, 30, 0), r("C", 6, 5, 4)],
          budget=8, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=12,
          scheduler_reserve_full_isl=False),
    ]
    out += [_random_knob_scenario(seed) for seed in range(12)]
    names = [sc["name"] for sc in out]
    assert len(names) == len(set(names)), "scenario names must be unique"
    return out


# Knob values to try on vLLM's SchedulerConfig (each alone, on a valid base config):
# vLLM's verdict (accepted / rejected) is recorded and ours must agree.
BASE_CONFIG: dict[str, Any] = {"max_num_batched_tokens": 64, "max_num_seqs": 8,
                               "max_model_len": 64}
VALUES_TO_TRY: list[tuple[str, Any]] = [
    ("policy", "fcfs"), ("policy", "priority"), ("policy", "lifo"), ("policy", "FCFS"),
    ("policy", "prefill_first"), ("policy", ""),
    ("long_prefill_token_threshold_adaptive", True),
    ("long_prefill_token_threshold_adaptive", False),
    ("prefill_schedule_interval", 1), ("prefill_schedule_interval", 7),
    ("prefill_schedule_interval", 0), ("prefill_schedule_interval", -2),
    ("prefill_schedule_interval", 1.5),
    ("max_num_active_seqs", None), ("max_num_active_seqs", 1), ("max_num_active_seqs", 8),
    ("max_num_active_seqs", 9), ("max_num_active_seqs", 0), ("max_num_active_seqs", -1),
    ("watermark", 0.0), ("watermark", 0.01), ("watermark", 0.5), ("watermark", 0.999),
    ("watermark", 0), ("watermark", 1.0), ("watermark", 1.5), ("watermark", -0.1),
    ("watermark", "lots"),
    ("scheduler_reserve_full_isl", True), ("scheduler_reserve_full_isl", False),
]


def write_scenarios(path: Path) -> None:
    scenarios = build_scenarios()
    for sc in scenarios:
        validate_scenario(sc)
    payload = {"about": "Knob scenarios for dev/vllm_reference.py traces; regenerate with "
               "`python3 dev/scenarios_knobs.py scenarios`.", "scenarios": scenarios}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {len(scenarios)} scenarios to {path}")


def write_validation(path: Path) -> None:
    """Which values vLLM's ``SchedulerConfig`` accepts (needs the vLLM venv)."""
    import vllm
    from vllm.config import SchedulerConfig

    if vllm.__version__ != VLLM_VERSION:
        raise RuntimeError(f"need vllm {VLLM_VERSION}, found {vllm.__version__}")
    rows = []
    for name, value in VALUES_TO_TRY:
        try:
            SchedulerConfig(is_encoder_decoder=False, **BASE_CONFIG, **{name: value})
            verdict, message = "accepted", ""
        except ValueError as e:  # pydantic's ValidationError is a ValueError
            verdict, message = "rejected", " ".join(str(e).split()[:24])
        rows.append({"param": name, "value": value, "vllm": verdict, "vllm_message": message})
        print(f"{name}={value!r}: {verdict} {message}")
    payload = {"vllm_version": VLLM_VERSION, "base_config": BASE_CONFIG,
               "about": "made by `dev/scenarios_knobs.py validation`", "values": rows}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {len(rows)} verdicts to {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("scenarios", help="write the knob scenario file (no vLLM needed)")
    sub.add_parser("validation", help="record vLLM's verdict on knob values (vLLM venv)")
    args = ap.parse_args(argv)
    if args.cmd == "scenarios":
        write_scenarios(SCENARIOS_PATH)
    else:
        write_validation(VALIDATION_PATH)
    return 0


if __name__ == "__main__":
    sys.exit(main())
