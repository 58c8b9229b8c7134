"""Reference traces from vLLM 0.33.0's real V1 ``Scheduler`` (a dev tool, not a dependency).

``tests/test_vs_vllm.py`` replays every scenario in ``vllm_traces.json`` through our
``run_trace`` and compares step by step with what vLLM's own scheduler did. This script makes that
file (recordings live in ``chunkprefill/course/data/vllm/``, package data). It has two
sub-commands:

``scenarios``  writes ``vllm_scenarios.json`` from the list in this file (plain Python,
               any interpreter, no vLLM needed; the seeded random scenarios are written out
               explicitly, so the JSON never depends on a random-number generator).
``traces``     reads the scenario file, runs each scenario on vLLM's ``Scheduler`` and writes
               ``vllm_traces.json`` (needs the separate venv below).

Set up the venv once, OUTSIDE the repository (vLLM must never become a dependency of the package;
torch must be the CPU build 2.13.0, never an unpinned torch, which would pull a multi-GB CUDA
build; the versions below are the ones the fixtures were made with)::

    python3 -m venv /tmp/vllmref
    /tmp/vllmref/bin/pip install --no-deps vllm==0.33.0     # or the same wheel file, if on disk
    /tmp/vllmref/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /tmp/vllmref/bin/pip install packaging pydantic regex numpy cbor2 psutil pyzmq urllib3 \
        "transformers>=5.16.1,<5.21.0" aiohttp requests openai-harmony openai pillow pybase64 \
        cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client "xgrammar==0.2.8" \
        fastapi partial_json_parser "llguidance>=1.7.0,<1.8.0" einops

Then, from the repository root::

    python3 dev/vllm_reference.py scenarios                 # -> vllm_scenarios.json
    HF_HUB_OFFLINE=1 /tmp/vllmref/bin/python dev/vllm_reference.py traces
                                                            # -> vllm_traces.json
    HF_HUB_OFFLINE=1 /tmp/vllmref/bin/python dev/vllm_reference.py traces \
        --scenarios other.json --out /tmp/out.json --only article_trace   # ad-hoc runs

Both outputs are deterministic (regenerating gives identical bytes). Each scenario carries a
``covers`` line naming the scheduling rule it exercises (docs/architecture.md lists them).

How vLLM is driven (it mirrors our ``run_trace``): step k is the k-th ``Scheduler.schedule()``
call; requests whose ``arrival_step == k`` are added, in list order, just before it. After each
step a fake model builds a ``ModelRunnerOutput`` in which every scheduled request with nothing left
owed (``num_computed_tokens >= num_tokens``) samples one token (id 7, never EOS) and a mid-prefill
chunk samples nothing (an empty list, as vLLM's model runner returns), then
``update_from_output`` runs. ``SamplingParams(max_tokens=output_len, ignore_eos=True)``; vLLM
itself stops a request at ``max_model_len``. The run ends when every request has finished.

Nothing is downloaded: the ``ModelConfig`` points at a tiny Llama ``config.json`` written to a
temporary folder (no weights, ``skip_tokenizer_init=True``), and the ``KVCacheConfig`` is built by
hand with one full-attention group, as vLLM's own ``tests/v1/core/utils.py`` does. The scheduler,
KV cache manager and block pool that run are vLLM's unmodified code; the only subclass override,
``_preempt_request``, records the order of preemptions and then calls vLLM's method.

Prefix caching (``dev/scenarios_prefix.py``): a scenario's ``cache`` may carry
``"enable_prefix_caching": true`` and its requests ``prompt_token_ids``; the run then gives each
vLLM ``Request`` the block hasher vLLM's ``EngineCore`` would (sha256 by default) and each step
also records ``cached`` (``[[request_id, num_computed_tokens]]`` for the requests admitted from
waiting, new and resumed, read from the ``SchedulerOutput``: the prefix-cache hit) and
``prefix_cache_stats`` (the ``(request_id, num_tokens, num_hits, preempted)`` vLLM passes to
``record_prefix_cache_stats`` at each admission). Files without these keys are unchanged.

Config mapping: our ``CacheConfig.num_blocks`` counts usable blocks, vLLM's ``BlockPool`` keeps
block 0 as a "null" block, so vLLM gets ``num_blocks + 1`` (checked: its free count starts at
``num_blocks``). Prefix caching off, async scheduling off, no speculative decoding. The knobs of
``KNOB_DEFAULTS`` (policy, watermark, ``scheduler_reserve_full_isl``, ...) keep vLLM's defaults
unless a scenario sets them (``dev/scenarios_knobs.py`` writes such scenarios); a request may
carry a ``priority``.

Each recorded step holds ``num_scheduled_tokens`` (``[[request_id, n], ...]`` in vLLM's dict
order), ``preempted`` (ids preempted inside that ``schedule()`` call, in order), ``finished`` (ids
that finished in that step's ``update_from_output``, in order) and, for diagnosis only,
``kv_free`` (free usable blocks after the step). A scenario that never finishes (a livelock,
e.g. ``prio_ties_evict_each_other`` in ``dev/scenarios_knobs.py``) carries ``"max_steps"``: its
first ``max_steps`` steps are recorded and the run stops there (``run_trace(stop_after=)``
replays them); a scenario with ``max_steps`` that finishes is an error.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCENARIOS_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_scenarios.json"
TRACES_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_traces.json"
VLLM_VERSION = "0.33.0"
SAMPLED_TOKEN_ID = 7
MAX_STEPS = 10_000


# --------------------------------------------------------------------------------------------
# Scenarios (pure Python)
# --------------------------------------------------------------------------------------------


def _req(rid: str, prompt_len: int, output_len: int, arrival_step: int = 0,
         priority: int = 0, prompt_token_ids: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request_id": rid,
        "prompt_len": prompt_len,
        "output_len": output_len,
        "arrival_step": arrival_step,
    }
    if priority:  # only when set, so older scenario files regenerate byte for byte
        out["priority"] = priority
    if prompt_token_ids is not None:  # only then in the JSON: older files stay as they are
        out["prompt_token_ids"] = list(prompt_token_ids)
    return out


# vLLM 0.33.0 scheduler knobs a scenario may set (vLLM's names and defaults); a scenario
# lists only those it changes, so older scenario files regenerate byte for byte.
KNOB_DEFAULTS: dict[str, Any] = {
    "policy": "fcfs",
    "long_prefill_token_threshold_adaptive": False,
    "prefill_schedule_interval": 1,
    "max_num_active_seqs": None,
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
}


def _scenario(
    name: str,
    covers: str,
    requests: list[dict[str, Any]],
    *,
    budget: int,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int = 16,
    num_blocks: int = 1000,
    chunked: bool = True,
    threshold: int = 0,
    prefix_caching: bool = False,
    **knobs: Any,
) -> dict[str, Any]:
    unknown = set(knobs) - set(KNOB_DEFAULTS)
    if unknown:
        raise ValueError(f"{name}: unknown knobs {sorted(unknown)}")
    cache: dict[str, Any] = {"block_size": block_size, "num_blocks": num_blocks}
    if prefix_caching:  # only then in the JSON: older files stay as they are
        cache["enable_prefix_caching"] = True
    return {
        "name": name,
        "covers": covers,
        "scheduler": {
            "max_num_batched_tokens": budget,
            "max_num_seqs": max_num_seqs,
            "enable_chunked_prefill": chunked,
            "long_prefill_token_threshold": threshold,
            "max_model_len": max_model_len,
            **knobs,
        },
        "cache": cache,
        "requests": requests,
    }


def _seed_requests() -> list[dict[str, Any]]:
    reqs = [_req(f"D{i}", 1, 20, 0) for i in range(1, 7)]
    reqs.append(_req("P", 40, 3, 2))
    return reqs


def _random_scenario(seed: int) -> dict[str, Any]:
    """A deterministic random mix; always valid for vLLM's config checks and always finishes."""
    rng = random.Random(seed)
    block_size = rng.choice([1, 2, 4, 8, 16])
    chunked = rng.random() < 0.8
    max_model_len = rng.choice([64, 96, 128, 256])
    if chunked:
        budget = rng.choice([8, 16, 24, 32, 64, 128])
    else:
        budget = max_model_len + rng.choice([0, 0, 16, 64])
    max_num_seqs = rng.randint(1, min(12, budget))
    threshold = rng.choice([0, 0, 0, 4, 8, 16, 32])
    threshold = min(threshold, max_model_len)
    n_reqs = rng.randint(5, 14)
    reqs = []
    longest = 0
    arrival = 0
    for i in range(n_reqs):
        prompt_len = rng.choice([1, 2, 3, rng.randint(4, 24), rng.randint(20, max_model_len - 1)])
        output_len = rng.choice([1, 2, rng.randint(3, 16), rng.randint(16, 80)])
        arrival += rng.choice([0, 0, 0, 1, 2, 5])
        reqs.append(_req(f"r{i}", prompt_len, output_len, arrival))
        longest = max(longest, min(prompt_len + output_len, max_model_len) - 1)
    # Enough blocks that the longest request can always run alone, sometimes barely more.
    min_blocks = -(-longest // block_size)
    num_blocks = min_blocks + rng.choice([0, 1, 2, 4, min_blocks // 2, min_blocks, 3 * min_blocks,
                                          1000])
    return _scenario(
        f"random_seed{seed}",
        "seeded random mix (all rules together)",
        reqs,
        budget=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
        num_blocks=num_blocks,
        chunked=chunked,
        threshold=threshold,
    )


def build_scenarios() -> list[dict[str, Any]]:
    s = _scenario
    out = [
        # --- the article's paper trace -----------------------------------------------------
        s("article_trace", "seed: budget 16, six 1-token decodes + 40-token P at step 2; "
          "running first, P chunked 10/10/10/10 in the leftover budget",
          _seed_requests(), budget=16, max_num_seqs=16, max_model_len=1024),
        s("article_trace_threshold8", "seed + long_prefill_token_threshold=8 caps P's chunks",
          _seed_requests(), budget=16, max_num_seqs=16, max_model_len=1024, threshold=8),
        s("article_trace_no_chunking", "seed with chunking off (budget = max_model_len = 64)",
          _seed_requests(), budget=64, max_num_seqs=16, max_model_len=64, chunked=False),
        # --- basics ---------------------------------------------------------------------
        s("single_short", "one request: whole prompt in one step, then 1-token decodes",
          [_req("A", 5, 4)], budget=16, max_num_seqs=4, max_model_len=128),
        s("single_chunked", "one long prompt chunked by the budget (min(owed, budget))",
          [_req("A", 50, 3)], budget=16, max_num_seqs=4, max_model_len=128),
        s("output_len_1", "requests finishing right after their prefill (1 sampled token)",
          [_req("A", 7, 1), _req("B", 20, 1), _req("C", 1, 1), _req("D", 3, 2)],
          budget=16, max_num_seqs=4, max_model_len=64),
        s("arrival_order_within_step", "same-step arrivals are added in list order (FCFS)",
          [_req("Z", 6, 3, 1), _req("A", 6, 3, 1), _req("M", 6, 3, 1), _req("B", 4, 2, 0)],
          budget=8, max_num_seqs=4, max_model_len=64),
        s("staggered_arrivals", "arrivals at steps 0,1,3,5,8 join waiting; admitted FCFS",
          [_req("A", 30, 6, 0), _req("B", 12, 5, 1), _req("C", 25, 4, 3), _req("D", 2, 8, 5),
           _req("E", 40, 2, 8)], budget=20, max_num_seqs=8, max_model_len=128),
        s("idle_gap_empty_steps", "empty schedule() steps while nothing has arrived yet",
          [_req("A", 4, 2, 0), _req("B", 4, 2, 9), _req("C", 3, 1, 9)],
          budget=16, max_num_seqs=4, max_model_len=64),
        s("prefill_first_starves_later", "running pass first: a long running prefill eats the "
          "whole budget, waiting pass never runs (token_budget == 0)",
          [_req("P", 100, 2, 0), _req("D1", 1, 5, 1), _req("D2", 2, 5, 1)],
          budget=16, max_num_seqs=4, max_model_len=256),
        s("prefill_first_threshold", "same with threshold 8: P capped, later arrivals admitted",
          [_req("P", 100, 2, 0), _req("D1", 1, 5, 1), _req("D2", 2, 5, 1)],
          budget=16, max_num_seqs=4, max_model_len=256, threshold=8),
        s("admission_order_chunks", "admitted requests join the END of running: later chunks "
          "served in pass 1 before newer arrivals",
          [_req("A", 30, 2, 0), _req("B", 30, 2, 0), _req("C", 30, 2, 1), _req("D", 3, 3, 2)],
          budget=24, max_num_seqs=8, max_model_len=128),
        # --- long_prefill_token_threshold ---------------------------------------------
        s("threshold_several_long", "threshold 16 caps every long prompt in both passes",
          [_req("A", 50, 3), _req("B", 40, 3), _req("C", 70, 2), _req("D", 5, 4)],
          budget=64, max_num_seqs=8, max_model_len=256, threshold=16),
        s("threshold_lone_request", "a lone request is never capped (num_running+num_waiting"
          " == 1 sets the threshold to 0)",
          [_req("A", 100, 3)], budget=64, max_num_seqs=8, max_model_len=256, threshold=16),
        s("threshold_lone_then_companion", "lone request uncapped at step 0; a companion "
          "arriving at step 1 turns the cap on for both",
          [_req("A", 120, 2, 0), _req("B", 60, 2, 1)],
          budget=48, max_num_seqs=8, max_model_len=256, threshold=16),
        s("threshold_companion_finishes", "once the companion has finished the long prompt is "
          "alone again and loses the cap",
          [_req("A", 8, 1, 0), _req("B", 200, 2, 0)],
          budget=40, max_num_seqs=8, max_model_len=256, threshold=12),
        s("threshold_boundary", "0 < threshold < owed is strict: owed == threshold not capped",
          [_req("A", 16, 2), _req("B", 17, 2), _req("C", 15, 2), _req("D", 33, 2)],
          budget=100, max_num_seqs=8, max_model_len=128, threshold=16),
        s("threshold_waiting_counts", "waiting requests count toward 'more than one': a lone "
          "running request is capped while others wait (max_num_seqs 1)",
          [_req("A", 60, 2), _req("B", 60, 2)],
          budget=32, max_num_seqs=1, max_model_len=128, threshold=10),
        # --- max_num_seqs ---------------------------------------------------------------
        s("max_num_seqs_2", "max_num_seqs 2 limits admission; freed slots refill next step",
          [_req(f"R{i}", 3 + i, 4 + (i % 3)) for i in range(6)],
          budget=32, max_num_seqs=2, max_model_len=64),
        s("max_num_seqs_1_serial", "max_num_seqs 1: requests run strictly one after another",
          [_req("A", 10, 3), _req("B", 5, 2), _req("C", 12, 1)],
          budget=8, max_num_seqs=1, max_model_len=64),
        s("max_num_seqs_chunking", "max_num_seqs 3 with long prompts: budget left unused",
          [_req("A", 40, 3), _req("B", 40, 3), _req("C", 40, 3), _req("D", 4, 3),
           _req("E", 4, 3)], budget=64, max_num_seqs=3, max_model_len=128),
        # --- chunking disabled ---------------------------------------------------------
        s("no_chunking_hol_blocking", "chunking off: a head request that does not fit the "
          "remaining budget stops the waiting pass (small ones behind it wait too)",
          [_req(f"D{i}", 1, 30, 0) for i in range(12)]
          + [_req("C", 70, 2, 2), _req("S", 5, 2, 2)],
          budget=80, max_num_seqs=16, max_model_len=80, chunked=False),
        s("no_chunking_exact_fit", "chunking off: a prompt exactly equal to the remaining "
          "budget is admitted (the check is num_new_tokens > budget)",
          [_req("D1", 1, 6, 0), _req("D2", 1, 6, 0), _req("X", 30, 2, 1), _req("Y", 31, 2, 1)],
          budget=32, max_num_seqs=8, max_model_len=32, chunked=False),
        s("no_chunking_with_threshold", "chunking off + threshold: vLLM caps by the threshold "
          "BEFORE the no-chunk check, so a long prompt is still split",
          [_req("A", 50, 2), _req("B", 10, 2)],
          budget=64, max_num_seqs=4, max_model_len=64, chunked=False, threshold=16),
        s("no_chunking_many_prompts", "chunking off, several whole prompts per step",
          [_req("A", 20, 3), _req("B", 20, 3), _req("C", 20, 3), _req("D", 20, 3, 1)],
          budget=48, max_num_seqs=8, max_model_len=48, chunked=False),
        # --- KV exhaustion, preemption -----------------------------------------------
        s("preempt_last_recompute", "KV exhausted by decodes: preempt the LAST running request,"
          " free its blocks, it recomputes prompt+outputs when re-admitted",
          [_req("A", 8, 20), _req("B", 8, 20), _req("C", 8, 20)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=12),
        s("preempt_self", "the last running request needs a block and none is free: it "
          "preempts itself and the running pass stops",
          [_req("A", 4, 10), _req("B", 4, 10)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=5),
        s("preempt_multiple_one_step", "A's 8-token chunk needs 2 blocks, none free: preempt"
          " C then B in one step (and A finishes in that step); both go to the FRONT of waiting,"
          " B (preempted last) ahead of C, and resume capped by the threshold",
          [_req("A", 24, 1), _req("B", 2, 10), _req("C", 2, 10), _req("W", 2, 2, 1)],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=6, threshold=8),
        s("preempted_head_blocks_waiting", "a preempted request sits at the head of waiting; "
          "its whole sequence does not fit, so the small request S behind it waits (FCFS)",
          [_req("A", 7, 12, 0), _req("B", 7, 12, 0), _req("S", 1, 1, 2)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=6),
        s("preempt_mid_prefill", "decodes preempt the last request P in the middle of its "
          "chunked prefill (twice); P restarts from num_computed_tokens = 0",
          [_req("A", 2, 40, 0), _req("B", 2, 40, 0), _req("P", 30, 3, 1)],
          budget=12, max_num_seqs=4, max_model_len=128, block_size=4, num_blocks=12, threshold=4),
        s("preempt_mid_prefill_lone_restart", "B preempted mid-prefill; when it restarts alone "
          "the threshold no longer caps it",
          [_req("A", 6, 40, 0), _req("B", 36, 3, 1)],
          budget=12, max_num_seqs=4, max_model_len=128, block_size=4, num_blocks=12, threshold=4),
        s("preempt_resume_order", "preempted request resumes ahead of older waiting arrivals",
          [_req("A", 4, 30, 0), _req("B", 4, 30, 0), _req("N1", 6, 2, 3), _req("N2", 6, 2, 3)],
          budget=16, max_num_seqs=2, max_model_len=64, block_size=4, num_blocks=9),
        s("preempt_block_size_1", "block size 1: every token needs a block; heavy preemption",
          [_req("A", 5, 15), _req("B", 5, 15), _req("C", 5, 15), _req("D", 3, 10, 2)],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=1, num_blocks=30),
        s("preempt_block_size_16", "block size 16, decodes crossing block boundaries",
          [_req("A", 30, 40), _req("B", 30, 40), _req("C", 20, 40, 1)],
          budget=64, max_num_seqs=8, max_model_len=128, block_size=16, num_blocks=9),
        # --- full-sequence admission gate ----------------------------------------------
        s("admission_gate_whole_prompt", "first chunk would fit but the whole prompt does "
          "not: not admitted (scheduler_reserve_full_isl)",
          [_req("A", 20, 30, 0), _req("B", 40, 2, 1)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=16, num_blocks=4),
        s("admission_gate_stops_pass", "a waiting request refused by the gate stops the "
          "waiting pass: a small request behind it is not admitted",
          [_req("A", 20, 30, 0), _req("B", 40, 2, 1), _req("S", 2, 2, 1)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=16, num_blocks=4),
        s("admission_gate_resumed", "a preempted request must fit its whole current sequence"
          " (prompt + outputs so far) to be re-admitted",
          [_req("A", 6, 30, 0), _req("B", 6, 30, 0), _req("C", 6, 5, 4)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=12),
        s("kv_exact_fit_full_cache", "the last sampled token never gets a KV slot: a request"
          " of 8+5 tokens runs in 3 blocks of 4 (12 slots), the whole cache",
          [_req("A", 8, 5, 0), _req("B", 3, 2, 1)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=3),
        # --- max_model_len ---------------------------------------------------------------
        s("max_model_len_caps_output", "output stops at max_model_len before output_len",
          [_req("A", 10, 100), _req("B", 3, 5)],
          budget=16, max_num_seqs=4, max_model_len=16),
        s("max_model_len_prompt_near_limit", "prompt of max_model_len-1: finishes right after "
          "its prefill (one sampled token)",
          [_req("A", 31, 10), _req("B", 20, 20)],
          budget=16, max_num_seqs=4, max_model_len=32),
        # --- finishing, freeing ----------------------------------------------------------
        s("finish_frees_blocks", "a finished request's blocks are free at the next step: the "
          "waiting request is admitted exactly then",
          [_req("A", 16, 16, 0), _req("B", 40, 2, 1)],
          budget=64, max_num_seqs=4, max_model_len=128, block_size=16, num_blocks=3),
        # --- block sizes / mixes -----------------------------------------------------------
        s("mix_block_size_1", "mixed load, block size 1",
          [_req("A", 13, 7, 0), _req("B", 2, 12, 0), _req("C", 30, 3, 1), _req("D", 9, 9, 3),
           _req("E", 1, 20, 4)], budget=16, max_num_seqs=4, max_model_len=64, block_size=1,
          num_blocks=60),
        s("mix_block_size_4", "mixed load, block size 4, moderate KV pressure",
          [_req("A", 13, 17, 0), _req("B", 2, 22, 0), _req("C", 30, 3, 1), _req("D", 9, 9, 3),
           _req("E", 1, 20, 4), _req("F", 25, 6, 6)], budget=24, max_num_seqs=5,
          max_model_len=96, block_size=4, num_blocks=20, threshold=8),
        s("mix_block_size_16", "mixed load, block size 16",
          [_req("A", 100, 10, 0), _req("B", 17, 30, 0), _req("C", 33, 5, 2), _req("D", 64, 8, 3),
           _req("E", 1, 40, 3)], budget=48, max_num_seqs=4, max_model_len=256, block_size=16,
          num_blocks=12),
    ]
    out += [_random_scenario(seed) for seed in range(12)]
    names = [sc["name"] for sc in out]
    assert len(names) == len(set(names)), "scenario names must be unique"
    return out


def write_scenarios(path: Path, scenarios: list[dict[str, Any]] | None = None,
                    about: str = "Scenarios for dev/vllm_reference.py; regenerate with "
                    "`python3 dev/vllm_reference.py scenarios`.") -> None:
    scenarios = build_scenarios() if scenarios is None else scenarios
    for sc in scenarios:
        validate_scenario(sc)
    payload = {"about": about, "scenarios": scenarios}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {len(scenarios)} scenarios to {path}")


def validate_scenario(sc: dict[str, Any]) -> None:
    """The config checks vLLM itself makes (SchedulerConfig.verify_max_model_len, input
    processor's prompt-length check), so a bad scenario fails here with a clear message."""
    sch, cache = sc["scheduler"], sc["cache"]
    mml = sch["max_model_len"]
    if not sch["enable_chunked_prefill"] and sch["max_num_batched_tokens"] < mml:
        raise ValueError(
            f"{sc['name']}: chunking off needs max_num_batched_tokens >= max_model_len"
        )
    if sch["max_num_batched_tokens"] < sch["max_num_seqs"]:
        raise ValueError(f"{sc['name']}: max_num_batched_tokens < max_num_seqs")
    if sch["long_prefill_token_threshold"] > mml:
        raise ValueError(f"{sc['name']}: long_prefill_token_threshold > max_model_len")
    ids = [r["request_id"] for r in sc["requests"]]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{sc['name']}: duplicate request ids")
    for r in sc["requests"]:
        if not 1 <= r["prompt_len"] < mml:
            raise ValueError(
                f"{sc['name']}/{r['request_id']}: need 1 <= prompt_len < max_model_len"
            )
        if r["output_len"] < 1 or r["arrival_step"] < 0:
            raise ValueError(f"{sc['name']}/{r['request_id']}: bad output_len/arrival_step")
        ids = r.get("prompt_token_ids")
        if ids is not None and (len(ids) != r["prompt_len"]
                                or not all(type(t) is int and 0 <= t < 256 for t in ids)):
            raise ValueError(f"{sc['name']}/{r['request_id']}: prompt_token_ids must be "
                             "prompt_len ints in [0, 256) (the tiny model's vocabulary)")
        # KV slots a request needs at its longest: every token but the last sampled one.
        need = -(-(min(r["prompt_len"] + r["output_len"], mml) - 1) // cache["block_size"])
        if need > cache["num_blocks"]:
            raise ValueError(f"{sc['name']}/{r['request_id']}: can never fit in the KV cache")


# --------------------------------------------------------------------------------------------
# Running vLLM (only in the /tmp/vllmref venv)
# --------------------------------------------------------------------------------------------

_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}


class VllmRunner:
    """Builds vLLM configs by hand (no hub access) and runs scenarios on the real Scheduler."""

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        import vllm

        if vllm.__version__ != VLLM_VERSION:
            raise RuntimeError(f"need vllm {VLLM_VERSION}, found {vllm.__version__}")
        self.model_dir = Path(tempfile.mkdtemp(prefix="vllmref_model_"))
        atexit.register(shutil.rmtree, self.model_dir, ignore_errors=True)
        (self.model_dir / "config.json").write_text(json.dumps(_TINY_LLAMA))
        self._model_configs: dict[int, Any] = {}

    def _model_config(self, max_model_len: int) -> Any:
        from vllm.config import ModelConfig

        if max_model_len not in self._model_configs:
            self._model_configs[max_model_len] = ModelConfig(
                model=str(self.model_dir),
                skip_tokenizer_init=True,
                max_model_len=max_model_len,
                dtype="float32",
                seed=0,
            )
        return self._model_configs[max_model_len]

    def make_scheduler(self, sc: dict[str, Any]) -> Any:
        import torch
        from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.structured_output import StructuredOutputManager

        sch, cache = sc["scheduler"], sc["cache"]
        knobs = {k: sch.get(k, v) for k, v in KNOB_DEFAULTS.items()}
        mml = sch["max_model_len"]
        scheduler_config = SchedulerConfig(
            max_model_len=mml,
            is_encoder_decoder=False,
            max_num_batched_tokens=sch["max_num_batched_tokens"],
            max_num_seqs=sch["max_num_seqs"],
            enable_chunked_prefill=sch["enable_chunked_prefill"],
            long_prefill_token_threshold=sch["long_prefill_token_threshold"],
            async_scheduling=False,
            **knobs,
        )
        caching = cache.get("enable_prefix_caching", False)
        cache_config = CacheConfig(block_size=cache["block_size"], enable_prefix_caching=caching)
        vllm_config = VllmConfig(
            model_config=self._model_config(mml),
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            device_config=DeviceConfig(device="cpu"),
        )
        num_vllm_blocks = cache["num_blocks"] + 1  # + vLLM's null block
        vllm_config.cache_config.num_gpu_blocks = num_vllm_blocks
        kv_cache_config = KVCacheConfig(
            num_blocks=num_vllm_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=cache["block_size"],
                        num_kv_heads=1,
                        head_size=1,
                        dtype=torch.float32,
                    ),
                )
            ],
        )
        block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)

        class RecordingScheduler(Scheduler):
            """vLLM's Scheduler; only notes which requests it preempts, in order."""

            preempted_log: list[str] = []

            def _preempt_request(self, request, timestamp, drop_stale_output=False):  # noqa: ANN001
                self.preempted_log.append(request.request_id)
                return super()._preempt_request(request, timestamp, drop_stale_output)

        sched = RecordingScheduler(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config),
            block_size=block_size,
            hash_block_size=hash_block_size,
            include_finished_set=False,
            log_stats=False,
        )
        sched.preempted_log = []
        # vLLM's stats inputs, one entry per admission: (request id, num_tokens, hits,
        # preempted), noted before vLLM's own method (a no-op without log_stats) runs.
        sched.prefix_stats_log = []
        record = sched.kv_cache_manager.record_prefix_cache_stats

        def record_and_note(request, num_hits):  # noqa: ANN001, ANN202
            sched.prefix_stats_log.append(
                [request.request_id, request.num_tokens, num_hits, request.num_preemptions > 0])
            return record(request, num_hits)

        sched.kv_cache_manager.record_prefix_cache_stats = record_and_note
        # The settings must have survived VllmConfig's post-processing unchanged.
        got = sched.scheduler_config
        checks = {
            "max_num_batched_tokens": (got.max_num_batched_tokens, sch["max_num_batched_tokens"]),
            "max_num_scheduled_tokens": (sched.max_num_scheduled_tokens,
                                         sch["max_num_batched_tokens"]),
            "max_num_seqs": (sched.max_num_running_reqs, sch["max_num_seqs"]),
            "max_num_active_seqs": (sched.max_num_active_reqs,
                                    knobs["max_num_active_seqs"] or sch["max_num_seqs"]),
            "enable_chunked_prefill": (got.enable_chunked_prefill, sch["enable_chunked_prefill"]),
            "long_prefill_token_threshold": (got.long_prefill_token_threshold,
                                             sch["long_prefill_token_threshold"]),
            "max_model_len": (sched.max_model_len, mml),
            "block_size": (sched.block_size, cache["block_size"]),
            "usable blocks": (sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                              cache["num_blocks"]),
            "prefix caching": (sched.kv_cache_manager.enable_caching, caching),
            "async scheduling": (bool(got.async_scheduling), False),
            "reserve_full_isl": (sched.scheduler_reserve_full_isl,
                                 knobs["scheduler_reserve_full_isl"]),
            "watermark blocks": (sched.kv_cache_manager.watermark_blocks,
                                 int(knobs["watermark"] * (cache["num_blocks"] + 1))),
            "policy": (sched.policy.value, knobs["policy"]),
            "spec decode": (vllm_config.speculative_config, None),
            "lookahead": (sched.num_lookahead_tokens, 0),
            "prefill lookahead": (sched.num_prefill_lookahead, 0),
            "adaptive threshold": (sched.adaptive_long_prefill_threshold,
                                   knobs["long_prefill_token_threshold_adaptive"]),
            "prefill interval": (sched.local_prefill_interval,
                                 knobs["prefill_schedule_interval"]),
            "sampled tokens per step": (sched.num_sampled_tokens_per_step, 1),
            "scheduler class": (got.get_scheduler_cls(), Scheduler),
        }
        bad = {k: v for k, v in checks.items() if v[0] != v[1]}
        if bad:
            raise RuntimeError(f"{sc['name']}: vLLM config differs from the scenario: {bad}")
        return sched

    def run(self, sc: dict[str, Any]) -> list[dict[str, Any]]:
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.output import SchedulerOutput
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request

        sched = self.make_scheduler(sc)
        caching = sc["cache"].get("enable_prefix_caching", False)
        block_hasher = None
        if caching:  # as vLLM's EngineCore sets it up
            hash_fn = get_hash_fn_by_name(sched.cache_config.prefix_caching_hash_algo)
            init_none_hash(hash_fn)
            block_hasher = get_request_block_hasher(sc["cache"]["block_size"], hash_fn)
        by_step: dict[int, list[dict[str, Any]]] = {}
        for r in sc["requests"]:
            by_step.setdefault(r["arrival_step"], []).append(r)
        last_arrival = max(by_step)
        all_ids = {r["request_id"] for r in sc["requests"]}
        finished_ids: set[str] = set()
        steps: list[dict[str, Any]] = []
        token = 100  # distinct prompt token ids (irrelevant without prefix caching)

        # A scenario that never finishes (a livelock) carries "max_steps": its first
        # max_steps steps are recorded, and the run ends there instead of failing.
        stop_after = sc.get("max_steps")
        for k in range(stop_after or MAX_STEPS):
            for r in by_step.get(k, []):
                prompt = r.get("prompt_token_ids") or [
                    (token + i) % 250 + 1 for i in range(r["prompt_len"])]
                token += r["prompt_len"]
                params = SamplingParams(
                    max_tokens=r["output_len"], ignore_eos=True, temperature=0.0
                )
                sched.add_request(
                    Request(
                        request_id=r["request_id"],
                        prompt_token_ids=prompt,
                        sampling_params=params,
                        pooling_params=None,
                        arrival_time=float(k),
                        priority=r.get("priority", 0),
                        block_hasher=block_hasher,
                    )
                )
            sched.preempted_log.clear()
            sched.prefix_stats_log.clear()
            out: SchedulerOutput = sched.schedule()
            preempted = list(sched.preempted_log)
            if set(preempted) != set(out.preempted_req_ids):
                raise RuntimeError(f"preempted mismatch {preempted} vs {out.preempted_req_ids}")
            scheduled = list(out.num_scheduled_tokens.items())

            req_ids, sampled = [], []
            for rid, _n in scheduled:
                req = sched.requests[rid]
                req_ids.append(rid)
                # After schedule(), num_computed_tokens already includes this step's chunk.
                owed_after = req.num_tokens - req.num_computed_tokens
                sampled.append([SAMPLED_TOKEN_ID] if owed_after <= 0 else [])
            mro = ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            eco = sched.update_from_output(out, mro)
            finished = [
                o.request_id
                for outs in eco.values()
                for o in outs.outputs
                if o.finish_reason is not None
            ]
            finished_ids.update(finished)
            step = {
                "num_scheduled_tokens": [[rid, n] for rid, n in scheduled],
                "preempted": preempted,
                "finished": finished,
                "kv_free": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
            }
            if caching:
                # Tokens each admitted request started from (its hit), from the
                # SchedulerOutput vLLM hands the workers, and the stats inputs.
                cached = {d.req_id: d.num_computed_tokens for d in out.scheduled_new_reqs}
                cd = out.scheduled_cached_reqs
                for i, rid in enumerate(cd.req_ids):
                    if rid in cd.resumed_req_ids:
                        cached[rid] = cd.num_computed_tokens[i]
                step["cached"] = [[rid, cached[rid]] for rid, _ in scheduled if rid in cached]
                step["prefix_cache_stats"] = [list(e) for e in sched.prefix_stats_log]
            steps.append(step)
            if k >= last_arrival and finished_ids == all_ids:
                if sched.get_num_unfinished_requests() != 0:
                    raise RuntimeError("vLLM still holds unfinished requests")
                if steps[-1]["kv_free"] != sc["cache"]["num_blocks"]:
                    raise RuntimeError("blocks leaked at the end of the run")
                if stop_after:
                    raise RuntimeError(f"{sc['name']}: finished, so it needs no max_steps")
                return steps
        if stop_after:
            return steps
        raise RuntimeError(f"{sc['name']}: not finished after {MAX_STEPS} steps")


def _dump_traces(scenarios: list[dict[str, Any]], path: Path) -> None:
    """Compact JSON: one line per step, so diffs stay readable."""
    lines = ["{", f' "vllm_version": "{VLLM_VERSION}",',
             ' "about": "made by dev/vllm_reference.py traces; see its docstring",',
             ' "scenarios": [']
    for i, sc in enumerate(scenarios):
        head = {k: v for k, v in sc.items() if k != "steps"}
        lines.append("  {")
        for key, val in head.items():
            lines.append(f"   {json.dumps(key)}: {json.dumps(val, separators=(',', ':'))},")
        lines.append('   "steps": [')
        for j, st in enumerate(sc["steps"]):
            comma = "," if j < len(sc["steps"]) - 1 else ""
            lines.append("    " + json.dumps(st, separators=(",", ":")) + comma)
        lines.append("   ]")
        lines.append("  }" + ("," if i < len(scenarios) - 1 else ""))
    lines += [" ]", "}"]
    path.write_text("\n".join(lines) + "\n")


def write_traces(scenarios_path: Path, out_path: Path, only: list[str] | None) -> None:
    scenarios = json.loads(scenarios_path.read_text())["scenarios"]
    runner = VllmRunner()
    results = []
    for sc in scenarios:
        if only and sc["name"] not in only:
            continue
        validate_scenario(sc)
        steps = runner.run(sc)
        n_pre = sum(len(s["preempted"]) for s in steps)
        print(f"{sc['name']:40s} steps={len(steps):4d} preemptions={n_pre}", flush=True)
        results.append({**sc, "steps": steps})
    _dump_traces(results, out_path)
    print(f"wrote {len(results)} traces to {out_path} ({out_path.stat().st_size} bytes)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_s = sub.add_parser("scenarios", help="write the scenario file (no vLLM needed)")
    p_s.add_argument("--out", type=Path, default=SCENARIOS_PATH)
    p_t = sub.add_parser("traces", help="run the scenarios on vLLM and write the traces")
    p_t.add_argument("--scenarios", type=Path, default=SCENARIOS_PATH)
    p_t.add_argument("--out", type=Path, default=TRACES_PATH)
    p_t.add_argument("--only", nargs="*", help="run only these scenario names")
    args = ap.parse_args(argv)
    if args.cmd == "scenarios":
        write_scenarios(args.out)
    else:
        write_traces(args.scenarios, args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
