"""vLLM 0.33.0's own schedules beside ours. ``data/vllm/vllm_traces.json`` (package data)
holds what vLLM's real V1 ``Scheduler`` did on each recorded scenario (made by
``dev/vllm_reference.py`` in a separate venv; vLLM is not a dependency). These helpers load
one scenario and put its steps and ``run_trace``'s in the same plain form, so a notebook can
show them side by side and assert that they are equal."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.trace import TraceRequest, TraceStep, run_trace

# Recorded by dev/vllm_reference.py; shipped with the package, so an installed wheel has them.
RECORDINGS: Traversable = files("chunkprefill.course") / "data" / "vllm"
TRACES_PATH = RECORDINGS / "vllm_traces.json"
STEP_KEYS = ("num_scheduled_tokens", "preempted", "finished")


def recording(name: str) -> dict[str, Any]:
    """One recorded file by name, e.g. ``recording("vllm_knobs_traces.json")``."""
    return _read(RECORDINGS / name)


def _read(path: Traversable | Path | str) -> dict[str, Any]:
    return json.loads((Path(path) if isinstance(path, str) else path).read_text())


def scenario_names(path: Traversable | Path | str = TRACES_PATH) -> list[str]:
    """The names of the recorded scenarios, in the file's order."""
    return [sc["name"] for sc in _read(path)["scenarios"]]


def load_scenario(name: str, path: Traversable | Path | str = TRACES_PATH) -> dict[str, Any]:
    """One recorded scenario by name (a ``ValueError`` lists the names if it is unknown)."""
    scenarios = {sc["name"]: sc for sc in _read(path)["scenarios"]}
    if name not in scenarios:
        raise ValueError(f"name must be a recorded scenario, one of {sorted(scenarios)}; "
                         f"got {name!r}")
    return scenarios[name]


def as_records(steps: Sequence[TraceStep]) -> list[dict[str, Any]]:
    """Our steps in the fixture's form: ``[[request_id, n], ...]`` in scheduling order, the
    preempted ids and the finished ids, each in order."""
    return [{"num_scheduled_tokens": [[rid, n] for rid, n in s.num_scheduled_tokens.items()],
             "preempted": list(s.preempted), "finished": list(s.finished)} for s in steps]


def vllm_and_ours(name: str, path: Traversable | Path | str = TRACES_PATH
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(vllm_records, our_records)`` for one recorded scenario: vLLM's steps as recorded,
    ours from replaying the same requests and configuration through ``run_trace``."""
    sc = load_scenario(name, path)
    vllm = [{k: st[k] for k in STEP_KEYS} for st in sc["steps"]]
    return vllm, as_records(run_recorded_scenario(sc))


def side_by_side(vllm: Sequence[dict[str, Any]], ours: Sequence[dict[str, Any]]) -> str:
    """One line per step: vLLM's schedule | ours, with ``=`` where they agree and ``!``
    where they do not."""
    def fmt(rec: dict[str, Any] | None) -> str:
        if rec is None:
            return "(no step)"
        text = " ".join(f"{rid}:{n}" for rid, n in rec["num_scheduled_tokens"]) or "(empty)"
        if rec["preempted"]:
            text += f" preempted={','.join(rec['preempted'])}"
        if rec["finished"]:
            text += f" finished={','.join(rec['finished'])}"
        return text

    rows = [(fmt(vllm[k] if k < len(vllm) else None), fmt(ours[k] if k < len(ours) else None))
            for k in range(max(len(vllm), len(ours)))]
    width = max([len("vLLM 0.33.0 (recorded)"), *(len(a) for a, _ in rows)])
    lines = [f"{'step':>4}  {'vLLM 0.33.0 (recorded)':<{width}}    chunkprefill (run_trace)"]
    lines += [f"{k:>4}  {a:<{width}}  {'=' if a == b else '!'} {b}"
              for k, (a, b) in enumerate(rows)]
    return "\n".join(lines)


def run_recorded_scenario(scenario: Mapping[str, Any]) -> list[TraceStep]:
    """Replay one scenario of ``dev/vllm_reference.py``'s JSON files through ``run_trace``,
    to compare with the steps vLLM recorded for it. Its ``scheduler``, ``cache`` and
    ``requests`` entries are keyed by the field names of ``SchedulerConfig``,
    ``CacheConfig`` and ``TraceRequest``, so a knob recorded under its name needs no code
    here. A livelock's recording carries ``max_steps``: that many steps are replayed."""
    return run_trace([TraceRequest(**r) for r in scenario["requests"]],
                     SchedulerConfig(**scenario["scheduler"]), CacheConfig(**scenario["cache"]),
                     stop_after=scenario.get("max_steps"))
