"""vLLM 0.33.0's scheduler knobs and ``policy="priority"``, against vLLM's real ``Scheduler``.

``vllm_knobs_traces.json`` holds what vLLM's own scheduler did on each scenario of
``vllm_knobs_scenarios.json`` (``dev/scenarios_knobs.py`` + ``dev/vllm_reference.py``,
run in a separate venv; vLLM is not a dependency). Each is replayed through ``run_trace`` with
the scenario's knobs and compared step by step, as ``tests/test_vs_vllm.py`` does.
``vllm_knobs_validation.json`` records which knob values vLLM's ``SchedulerConfig``
accepts; ours must accept the same and reject the rest with a ``ValueError`` naming the knob.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_vs_vllm import _first_divergence, _fmt, _ours_as_records

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest, run_trace
from chunkprefill.course.vs_vllm import RECORDINGS

DATA = RECORDINGS
SCENARIOS: list[dict[str, Any]] = json.loads(
    (DATA / "vllm_knobs_traces.json").read_text())["scenarios"]
VALIDATION: dict[str, Any] = json.loads((DATA / "vllm_knobs_validation.json").read_text())


def _run_ours(sc: dict[str, Any]) -> list[Any]:
    sch, cache = sc["scheduler"], sc["cache"]
    requests = [TraceRequest(r["request_id"], prompt_len=r["prompt_len"],
                             output_len=r["output_len"], arrival_step=r["arrival_step"],
                             priority=r.get("priority", 0)) for r in sc["requests"]]
    return run_trace(requests, SchedulerConfig(**sch),  # the scenario uses vLLM's names
                     CacheConfig(block_size=cache["block_size"], num_blocks=cache["num_blocks"]),
                     stop_after=sc.get("max_steps"))  # a livelock: its recorded start


def test_every_knob_and_priority_is_covered() -> None:
    """Several recorded scenarios for each knob's non-default value."""
    def count(pred) -> int:
        return sum(1 for sc in SCENARIOS if pred(sc["scheduler"]))
    assert count(lambda s: s.get("policy") == "priority") >= 5
    assert count(lambda s: s.get("long_prefill_token_threshold_adaptive")) >= 5
    assert count(lambda s: s.get("prefill_schedule_interval", 1) > 1) >= 5
    assert count(lambda s: s.get("max_num_active_seqs") is not None) >= 4
    assert count(lambda s: s.get("watermark", 0.0) > 0) >= 4
    assert count(lambda s: s.get("scheduler_reserve_full_isl") is False) >= 4
    assert sum(1 for sc in SCENARIOS for st in sc["steps"] if st["preempted"]
               and sc["scheduler"].get("policy") == "priority") >= 3


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc["name"] for sc in SCENARIOS])
def test_matches_vllm(sc: dict[str, Any]) -> None:
    vllm = [{key: st[key] for key in ("num_scheduled_tokens", "preempted", "finished")}
            for st in sc["steps"]]
    steps = _run_ours(sc)
    ours = _ours_as_records(steps)
    k = _first_divergence(vllm, ours)
    if k is not None:
        context = "\n".join(
            f"  step {j:4d}  vllm: {_fmt(vllm[j] if j < len(vllm) else None)}\n"
            f"             ours: {_fmt(ours[j] if j < len(ours) else None)}"
            for j in range(max(0, k - 3), min(k + 2, max(len(vllm), len(ours)))))
        pytest.fail(f"{sc['name']} ({sc['covers']}): first divergence from vLLM 0.33.0 at "
                    f"step {k} (vLLM ran {len(vllm)} steps, ours {len(ours)}):\n{context}",
                    pytrace=False)
    assert [s.num_free_blocks for s in steps] == [st["kv_free"] for st in sc["steps"]]


@pytest.mark.parametrize("row", VALIDATION["values"],
                         ids=[f"{r['param']}={r['value']!r}" for r in VALIDATION["values"]])
def test_knob_values_validated_like_vllm(row: dict[str, Any]) -> None:
    kwargs = {**VALIDATION["base_config"], row["param"]: row["value"]}
    if row["vllm"] == "accepted":
        SchedulerConfig(**kwargs)
    else:
        with pytest.raises(ValueError, match=row["param"]):
            SchedulerConfig(**kwargs)
