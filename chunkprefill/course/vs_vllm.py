"""vLLM 0.33.0's own schedules beside ours. ``tests/data/vllm_traces.json`` holds what vLLM's
real V1 ``Scheduler`` did on each recorded scenario (made by ``dev/vllm_reference.py`` in a
separate venv; vLLM is not a dependency). These helpers load one scenario and put its steps
and ``run_trace``'s in the same plain form, so a notebook can show them side by side and assert
that they are equal."""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chunkprefill.trace import TraceStep, run_recorded_scenario

TRACES_PATH = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_traces.json"
STEP_KEYS = ("num_scheduled_tokens", "preempted", "finished")


def scenario_names(path: Path | str = TRACES_PATH) -> list[str]:
    """The names of the recorded scenarios, in the file's order."""
    return [sc["name"] for sc in json.loads(Path(path).read_text())["scenarios"]]


def load_scenario(name: str, path: Path | str = TRACES_PATH) -> dict[str, Any]:
    """One recorded scenario by name (a ``ValueError`` lists the names if it is unknown)."""
    scenarios = {sc["name"]: sc for sc in json.loads(Path(path).read_text())["scenarios"]}
    if name not in scenarios:
        raise ValueError(f"name must be a recorded scenario, one of {sorted(scenarios)}; "
                         f"got {name!r}")
    return scenarios[name]


def as_records(steps: Sequence[TraceStep]) -> list[dict[str, Any]]:
    """Our steps in the fixture's form: ``[[request_id, n], ...]`` in scheduling order, the
    preempted ids and the finished ids, each in order."""
    return [{"num_scheduled_tokens": [[rid, n] for rid, n in s.num_scheduled_tokens.items()],
             "preempted": list(s.preempted), "finished": list(s.finished)} for s in steps]


def vllm_and_ours(name: str, path: Path | str = TRACES_PATH
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


def our_lines(obj: object, first: str, last: str | None = None) -> str:
    """The lines of ``obj``'s source from the first one that starts (after indentation) with
    ``first`` through the next one starting with ``last`` (just that line if ``last`` is
    None), each with its line number in our file: the lines to read beside a vLLM excerpt.
    A ``ValueError`` names an anchor that is not found, so a notebook fails loudly if the
    code it quotes changes shape."""
    lines, start = inspect.getsourcelines(obj)  # type: ignore[arg-type]
    stripped = [line.strip() for line in lines]
    try:
        a = next(i for i, t in enumerate(stripped) if t.startswith(first))
        b = a if last is None else next(i for i in range(a, len(lines))
                                        if stripped[i].startswith(last))
    except StopIteration:
        raise ValueError(f"first/last must start lines of {getattr(obj, '__qualname__', obj)}; "
                         f"not found: {first!r} .. {last!r}") from None
    path = Path(inspect.getsourcefile(obj) or "?")  # type: ignore[arg-type]
    head = f"# {path.parent.name}/{path.name}, lines {start + a}-{start + b} (ours)"
    body = textwrap.dedent("".join(lines[a:b + 1])).splitlines()
    return "\n".join([head, *(f"{start + a + i:>4}  {line}" for i, line in enumerate(body))])
