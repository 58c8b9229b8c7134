"""Our scheduler against vLLM 0.33.0's real V1 ``Scheduler``, step by step.

``vllm_traces.json`` holds what vLLM's own scheduler did on each scenario of
``vllm_scenarios.json`` (made by ``dev/vllm_reference.py``, which runs only in a
separate venv; vLLM is not a dependency of this package). For every scenario we replay the same
requests through ``run_trace`` and require, at every step k, the same ``{request_id: n}`` in the
same order, the same preempted ids in order, the same finished ids in order, and the same number
of steps. Regenerate the fixture with the commands in ``dev/vllm_reference.py``'s docstring.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chunkprefill.course.vs_vllm import RECORDINGS, run_recorded_scenario
from chunkprefill.course.vs_vllm import as_records as _ours_as_records

TRACES_PATH = RECORDINGS / "vllm_traces.json"
SCENARIOS: list[dict[str, Any]] = json.loads(TRACES_PATH.read_text())["scenarios"]


def _run_ours(sc: dict[str, Any]) -> list[Any]:
    return run_recorded_scenario(sc)


def _fmt(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "(no step)"
    sched = " ".join(f"{rid}:{n}" for rid, n in rec["num_scheduled_tokens"]) or "(empty)"
    extra = ""
    if rec["preempted"]:
        extra += f"  preempted={rec['preempted']}"
    if rec["finished"]:
        extra += f"  finished={rec['finished']}"
    return sched + extra


def _first_divergence(vllm: list[dict[str, Any]], ours: list[dict[str, Any]]) -> int | None:
    keys = ("num_scheduled_tokens", "preempted", "finished")
    for k in range(max(len(vllm), len(ours))):
        a = vllm[k] if k < len(vllm) else None
        b = ours[k] if k < len(ours) else None
        if a is None or b is None or any(a[key] != b[key] for key in keys):
            return k
    return None


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc["name"] for sc in SCENARIOS])
def test_matches_vllm(sc: dict[str, Any]) -> None:
    vllm = [
        {key: st[key] for key in ("num_scheduled_tokens", "preempted", "finished")}
        for st in sc["steps"]
    ]
    try:
        ours = _ours_as_records(_run_ours(sc))
        error = None
    except ValueError as e:
        error = f"{type(e).__name__}: {e}"
    if error is not None:
        pytest.fail(
            f"{sc['name']} ({sc['covers']}): our run_trace raised {error}\n"
            f"  vLLM 0.33.0 runs this scenario to completion in {len(vllm)} steps",
            pytrace=False,
        )
    k = _first_divergence(vllm, ours)
    if k is None:
        return
    lo = max(0, k - 3)
    context = "\n".join(
        f"  step {j:4d}  vllm: {_fmt(vllm[j] if j < len(vllm) else None)}\n"
        f"             ours: {_fmt(ours[j] if j < len(ours) else None)}"
        for j in range(lo, min(k + 2, max(len(vllm), len(ours))))
    )
    pytest.fail(
        f"{sc['name']} ({sc['covers']}): first divergence from vLLM 0.33.0 at step {k} "
        f"(vLLM ran {len(vllm)} steps, ours {len(ours)}):\n{context}",
        pytrace=False,
    )


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc["name"] for sc in SCENARIOS])
def test_free_blocks_match_vllm(sc: dict[str, Any]) -> None:
    """Free usable KV blocks after each step (vLLM's count excludes its null block)."""
    steps = _run_ours(sc)
    assert len(steps) == len(sc["steps"]), "schedules differ; see test_matches_vllm"
    ours = [s.num_free_blocks for s in steps]
    vllm = [st["kv_free"] for st in sc["steps"]]
    assert ours == vllm
