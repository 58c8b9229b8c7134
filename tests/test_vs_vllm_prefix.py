"""Prefix caching against vLLM 0.33.0's real V1 ``Scheduler`` (prefix caching on), step by step.

``vllm_prefix_traces.json`` holds what vLLM's scheduler, KV cache manager and block
pool did on the scenarios of ``dev/scenarios_prefix.py`` (run by ``dev/vllm_reference.py`` in a
separate venv; vLLM is not a dependency). We replay each through ``run_trace`` with
``CacheConfig(enable_prefix_caching=True)`` and the same prompt token ids, and require at every
step the same ``{request_id: n}`` in order, preemptions, finishes, free blocks (cached blocks
with no user count as free in both), the tokens each admitted request started from (its cache
hit, read from vLLM's ``SchedulerOutput``), and vLLM's prefix-cache stats.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chunkprefill.course.vs_vllm import RECORDINGS, run_recorded_scenario
from chunkprefill.kv_cache import PrefixCacheStats

TRACES_PATH = RECORDINGS / "vllm_prefix_traces.json"
SCENARIOS: list[dict[str, Any]] = json.loads(TRACES_PATH.read_text())["scenarios"]
KEYS = ("num_scheduled_tokens", "preempted", "finished", "kv_free", "cached")


def _run_ours(sc: dict[str, Any]) -> list[Any]:
    assert sc["cache"]["enable_prefix_caching"] is True
    assert all("prompt_token_ids" in r for r in sc["requests"])
    return run_recorded_scenario(sc)


def _records(steps: list[Any]) -> list[dict[str, Any]]:
    return [{"num_scheduled_tokens": [[rid, n] for rid, n in s.num_scheduled_tokens.items()],
             "preempted": list(s.preempted), "finished": list(s.finished),
             "kv_free": s.num_free_blocks,
             "cached": [[rid, n] for rid, n in s.num_cached_tokens.items()]} for s in steps]


def _vllm_stats(steps: list[dict[str, Any]]) -> list[PrefixCacheStats]:
    """vLLM's PrefixCacheStats.record applied to the recorded inputs, summed step by step."""
    total, out = PrefixCacheStats(), []
    for st in steps:
        for _rid, num_tokens, num_hits, preempted in st["prefix_cache_stats"]:
            total.record(num_tokens, num_hits, preempted)
        out.append(PrefixCacheStats(**vars(total)))
    return out


@pytest.mark.parametrize("sc", SCENARIOS, ids=[sc["name"] for sc in SCENARIOS])
def test_matches_vllm_with_prefix_caching(sc: dict[str, Any]) -> None:
    vllm = [{k: st[k] for k in KEYS} for st in sc["steps"]]
    steps = _run_ours(sc)
    ours = _records(steps)
    for k in range(max(len(vllm), len(ours))):
        a = vllm[k] if k < len(vllm) else None
        b = ours[k] if k < len(ours) else None
        if a != b:
            ctx = "\n".join(f"  step {j}\n    vllm: {vllm[j] if j < len(vllm) else None}\n"
                            f"    ours: {ours[j] if j < len(ours) else None}"
                            for j in range(max(0, k - 2), k + 1))
            pytest.fail(f"{sc['name']} ({sc['covers']}): first divergence from vLLM 0.33.0 at "
                        f"step {k} (vLLM ran {len(vllm)} steps, ours {len(ours)}):\n{ctx}",
                        pytrace=False)
    assert [s.prefix_cache_stats for s in steps] == _vllm_stats(sc["steps"])


def test_fixture_exercises_what_it_claims() -> None:
    """The recorded runs hit, evict and preempt (else the replay would prove little)."""
    steps = [st for sc in SCENARIOS for st in sc["steps"]]
    hits = [n for st in steps for _rid, n in st["cached"]]
    assert sum(1 for n in hits if n > 0) >= 50
    assert sum(len(st["preempted"]) for st in steps) >= 20
    resumed_hits = [e for st in steps for e in st["prefix_cache_stats"] if e[3] and e[2] > 0]
    assert len(resumed_hits) >= 5
    by_name = {sc["name"]: sc for sc in SCENARIOS}
    # full_prompt_hit: 16 tokens at block size 4 hit 12 (num_tokens - 1 = 15 -> 3 blocks)
    assert [c for st in by_name["full_prompt_hit"]["steps"] for c in st["cached"]] == [
        ["A", 0], ["B", 12], ["C", 16]]
