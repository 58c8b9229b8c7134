"""Prefix-caching scenarios for ``dev/vllm_reference.py`` (a dev tool, not a dependency).

``tests/test_vs_vllm_prefix.py`` replays every scenario of ``vllm_prefix_traces.json``
(in ``chunkprefill/course/data/vllm/``) through our ``run_trace`` with
``CacheConfig(enable_prefix_caching=True)`` and compares, step by
step, the schedule, preemptions, finishes, free blocks, the tokens each admitted request found in
the cache and vLLM's prefix-cache stats inputs. From the repository root::

    python3 dev/scenarios_prefix.py scenarios      # -> vllm_prefix_scenarios.json
    HF_HUB_OFFLINE=1 /tmp/vllmref/bin/python dev/scenarios_prefix.py traces
                                                   # -> vllm_prefix_traces.json

(the venv as ``dev/vllm_reference.py``'s docstring sets it up). Every request carries explicit
prompt token ids in [10, 250): never 1 (our fake model's sampled token) nor 7 (vLLM's run's), so
no prompt block can equal a block holding sampled tokens in one run and not in the other.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from vllm_reference import REPO, _req, _scenario, write_scenarios, write_traces

SCENARIOS_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_prefix_scenarios.json"
TRACES_PATH = REPO / "chunkprefill" / "course" / "data" / "vllm" / "vllm_prefix_traces.json"


def toks(start: int, n: int) -> list[int]:
    """``n`` token ids in [10, 250), counting up from ``start`` (mod 240)."""
    return [(start + i) % 240 + 10 for i in range(n)]


def req(rid: str, ids: list[int], output_len: int, arrival_step: int = 0) -> dict[str, Any]:
    return _req(rid, len(ids), output_len, arrival_step, prompt_token_ids=ids)


def _random_prefix_scenario(seed: int) -> dict[str, Any]:
    """A deterministic random mix in which most prompts start with one of a few system
    prompts (lengths not multiples of the block size as often as not)."""
    rng = random.Random(1000 + seed)
    block_size = rng.choice([2, 4, 8, 16])
    chunked = rng.random() < 0.8
    max_model_len = rng.choice([96, 128, 256])
    budget = rng.choice([8, 16, 32, 64]) if chunked else max_model_len + rng.choice([0, 32])
    max_num_seqs = rng.randint(2, min(10, budget))
    threshold = rng.choice([0, 0, 4, 8, 16])
    systems = [toks(rng.randrange(240), rng.randint(3, 60)) for _ in range(rng.randint(1, 3))]
    reqs, arrival, longest = [], 0, 0
    for i in range(rng.randint(6, 14)):
        head = rng.choice(systems) if rng.random() < 0.75 else []
        tail = toks(rng.randrange(240), rng.randint(0 if head else 1, 30))
        ids = (head + tail)[: max_model_len - 1]
        output_len = rng.choice([1, 2, rng.randint(3, 12), rng.randint(12, 40)])
        arrival += rng.choice([0, 0, 1, 2, 4])
        reqs.append(req(f"r{i}", ids, output_len, arrival))
        longest = max(longest, min(len(ids) + output_len, max_model_len) - 1)
    min_blocks = -(-longest // block_size)
    num_blocks = min_blocks + rng.choice([1, 2, 4, min_blocks // 2, min_blocks, 4 * min_blocks])
    return _scenario(f"prefix_random_seed{seed}", "seeded random mix with shared system prompts",
                     reqs, budget=budget, max_num_seqs=max_num_seqs,
                     max_model_len=max_model_len, block_size=block_size,
                     num_blocks=num_blocks, chunked=chunked, threshold=threshold,
                     prefix_caching=True)


def _held_prefill_scenarios() -> list[dict[str, Any]]:
    """Prefix caching with ``prefill_schedule_interval > 1``: a waiting request whose hit
    leaves one token owed is not a prefill, so vLLM admits it on a step that holds prefill
    back (it tests "is this a prefill?" after adding the hit), and its admission does not
    restart the cadence. Prompts of ``k * block_size + 1`` tokens whose first k blocks are
    cached owe exactly one token; an identical ``k * block_size``-token prompt still owes its
    last block (the ``num_tokens - 1`` cap) and waits. Combined with priority, threshold,
    watermark, a small pool and block sizes 1/4/16. Appended last: older entries stay."""
    def s(*args: Any, **kw: Any) -> dict[str, Any]:
        return _scenario(*args, prefix_caching=True, **kw)

    def decodes(n: int, output_len: int = 20) -> list[dict[str, Any]]:
        return [req(f"D{i}", toks(40 * i, 1), output_len, 0) for i in range(1, n + 1)]

    sys8 = toks(0, 8)
    sharers = [req("S", sys8, 1, 0), req("B", sys8 + [200], 2, 3), req("C", sys8 + [201], 2, 4),
               req("E", sys8, 2, 5), req("F", toks(120, 6), 2, 6)]
    return [
        s("held_prefill_full_hit", "interval 2: B and C (sys8 + 1 token, 8 cached) owe one "
          "token each and are admitted on held steps; E (identical 8 tokens) owes a block "
          "and waits for a release, like F", decodes(3) + sharers,
          budget=16, max_num_seqs=8, max_model_len=64, block_size=4, prefill_schedule_interval=2),
        s("held_prefill_full_hit_interval3", "as held_prefill_full_hit with interval 3",
          decodes(3) + sharers, budget=16, max_num_seqs=8, max_model_len=64, block_size=4,
          prefill_schedule_interval=3),
        s("held_prefill_full_hit_priority", "priority: the one-token sharers rank behind a "
          "waiting prefill, which holds them back too (the waiting pass stops at it)",
          decodes(3) + [req("S", sys8, 1, 0), req("L", toks(150, 12), 2, 3)]
          + [{**req("B", sys8 + [200], 2, 3), "priority": 1},
             {**req("C", sys8 + [201], 2, 4), "priority": -1}],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=4,
          prefill_schedule_interval=2, policy="priority"),
        s("held_prefill_full_hit_threshold", "threshold 2: the prefill chunks are capped and "
          "held; the one-token sharers are admitted on held steps",
          decodes(2) + [req("S", sys8, 1, 0), req("L", toks(150, 20), 2, 1)]
          + sharers[1:3], budget=16, max_num_seqs=8, max_model_len=64, block_size=4,
          threshold=2, prefill_schedule_interval=2),
        s("held_prefill_full_hit_watermark_small_pool", "watermark 0.1 in a 20-block pool: "
          "admitting a one-token sharer still keeps the watermark free",
          decodes(3, 12) + sharers, budget=16, max_num_seqs=8, max_model_len=32,
          block_size=4, num_blocks=20, watermark=0.1, prefill_schedule_interval=2),
        s("held_prefill_full_hit_bs1", "block size 1: any repeated prompt owes one token and "
          "is admitted on a held step", decodes(3)
          + [req("S", toks(0, 5), 1, 0), req("B", toks(0, 5), 2, 3), req("C", toks(0, 6), 2, 4)],
          budget=16, max_num_seqs=8, max_model_len=64, block_size=1, prefill_schedule_interval=2),
        s("held_prefill_full_hit_bs16", "block size 16: a 33-token prompt whose 32 are cached "
          "owes one token", decodes(4) + [req("S", toks(0, 32), 1, 0),
                                          req("B", toks(0, 32) + [222], 2, 4)],
          budget=40, max_num_seqs=8, max_model_len=128, block_size=16,
          prefill_schedule_interval=2),
    ]


def build_scenarios() -> list[dict[str, Any]]:
    def s(*args: Any, **kw: Any) -> dict[str, Any]:
        return _scenario(*args, prefix_caching=True, **kw)

    sys16, sys14, sys32 = toks(0, 16), toks(0, 14), toks(0, 32)
    # A's 14-token prompt, then X's 30, then B sharing A's 14: how many survive X?
    evict = [req("A", sys14, 1, 0), req("X", toks(100, 30), 1, 3),
             req("B", sys14 + toks(200, 3), 1, 6)]
    out = [
        s("prefix_aligned", "B's 16-token system prompt (4 blocks of 4) is cached: B "
          "starts at 16 and owes only its tail",
          [req("A", sys16 + toks(100, 6), 3, 0), req("B", sys16 + toks(150, 5), 3, 4)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=4),
        s("prefix_unaligned", "a 14-token shared prefix hits 3 whole blocks (12 tokens); "
          "the half-shared block is recomputed",
          [req("A", sys14 + toks(100, 6), 3, 0), req("B", sys14 + toks(150, 5), 3, 4)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=4),
        s("full_prompt_hit", "an identical 16-token prompt hits at most num_tokens-1 = 15 "
          "tokens, i.e. 3 blocks: its last block is recomputed; 17 tokens hit 4 blocks",
          [req("A", sys16, 2, 0), req("B", sys16, 2, 4), req("C", sys16 + [200], 2, 8)],
          budget=16, max_num_seqs=4, max_model_len=128, block_size=4),
        s("full_prompt_hit_bs1", "block size 1: a repeated prompt hits all but its last token",
          [req("A", toks(3, 9), 2, 0), req("B", toks(3, 9), 2, 3)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=1),
        s("hits_within_one_step", "A's blocks are cached when A is scheduled, so B, later in "
          "the same step's waiting pass, hits them",
          [req("A", sys32 + toks(100, 4), 2, 0), req("B", sys32 + toks(150, 4), 2, 0)],
          budget=64, max_num_seqs=4, max_model_len=128, block_size=8),
        s("hits_within_one_step_chunked", "A's first chunk (10 tokens) fills 2 blocks of 4; "
          "B, admitted in the same step, hits those 2 only",
          [req("A", sys32, 2, 0), req("B", sys32 + toks(150, 4), 2, 0)],
          budget=20, max_num_seqs=4, max_model_len=128, block_size=4, threshold=10),
        s("duplicate_blocks", "A and B compute the same block before either is cached: two "
          "blocks share a hash; C hits the older one",
          [req("A", sys16, 2, 0), req("B", sys16, 2, 0), req("C", sys16 + [99], 2, 6)],
          budget=10, max_num_seqs=4, max_model_len=64, block_size=4, threshold=5),
        s("shared_by_running_requests", "four requests share a prefix while all run: its "
          "blocks are held by several users and freed only when the last lets go",
          [req("A", sys16 + toks(60, 3), 6, 0), req("B", sys16 + toks(70, 2), 9, 1),
           req("C", sys16 + toks(80, 5), 4, 1), req("D", sys16 + toks(90, 1), 12, 2),
           req("E", sys16 + toks(95, 2), 2, 20)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4),
        s("preempt_and_hit_on_return", "KV exhausted by decodes: the last request is "
          "preempted, keeps its hashes in the free queue and hits them when it returns "
          "(output-token blocks included)",
          [req("A", toks(0, 8), 20), req("B", toks(50, 8), 20), req("C", toks(100, 8), 20)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=12),
        s("preempt_shared_prefix", "preempted requests that share a system prompt with "
          "running ones: the shared blocks stay in use and hit on return",
          [req("A", sys16 + toks(100, 4), 24), req("B", sys16 + toks(120, 4), 24),
           req("C", sys16 + toks(140, 4), 24)],
          budget=32, max_num_seqs=8, max_model_len=64, block_size=4, num_blocks=16),
        s("eviction_none", "A finishes; X's 8 blocks come from the free queue's front (A's "
          "unhashed block, then never-used ones): A's cached blocks survive, B hits all 3",
          evict, budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=11),
        s("eviction_partial", "as eviction_none with 10 blocks: X also takes A's tail cached "
          "block (evicted first, as freed tail first): B hits what is left",
          evict, budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=10),
        s("eviction_total", "a cache so small that every cached block is evicted before the "
          "sharer arrives: no hit",
          evict, budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=8),
        s("admission_gate_counts_hits", "the whole-sequence admission check counts hit blocks "
          "as held (free cached ones as taken from the free queue)",
          [req("A", toks(0, 24), 1, 0), req("L", toks(100, 8), 30, 2),
           req("B", toks(0, 24) + toks(200, 4), 1, 3)],
          budget=16, max_num_seqs=4, max_model_len=64, block_size=4, num_blocks=14),
        s("no_chunking_hit_fits", "chunking off: after the hit the rest fits the remaining "
          "budget, though the whole prompt would not",
          [req(f"D{i}", toks(30 * i, 1), 10, 0) for i in range(1, 5)]
          + [req("S", sys32, 1, 0), req("P", sys32 + toks(150, 28), 2, 3)],
          budget=64, max_num_seqs=8, max_model_len=64, block_size=8, chunked=False),
        s("no_chunking_hit_still_too_long", "chunking off: owed tokens after the hit still "
          "exceed the budget: head-of-line blocking",
          [req(f"D{i}", toks(30 * i, 1), 6, 0) for i in range(1, 9)]
          + [req("S", toks(0, 8), 1, 0), req("P", toks(0, 8) + toks(150, 55), 2, 2),
             req("Q", toks(200, 3), 2, 2)],
          budget=64, max_num_seqs=12, max_model_len=64, block_size=8, chunked=False),
        s("threshold_after_hit", "threshold 8 caps the tokens still owed after the hit",
          [req("A", sys32 + toks(100, 4), 2, 0), req("B", sys32 + toks(150, 20), 2, 4),
           req("C", toks(200, 30), 2, 4)],
          budget=24, max_num_seqs=4, max_model_len=128, block_size=8, threshold=8),
        s("threshold_no_chunking_hit", "chunking off + threshold: the cap applies to owed "
          "tokens after the hit, before the no-chunk check",
          [req("A", sys32 + toks(100, 4), 2, 0), req("B", sys32 + toks(150, 30), 2, 4),
           req("C", toks(200, 6), 3, 4)],
          budget=64, max_num_seqs=4, max_model_len=64, block_size=8, chunked=False,
          threshold=8),
        s("article_trace_shared_prefix", "the article's trace where P shares 32 tokens with S, "
          "which arrived with the decodes",
          [req(f"D{i}", toks(20 * i, 1), 20, 0) for i in range(1, 7)]
          + [req("S", sys32, 1, 0), req("P", sys32 + toks(150, 8), 3, 2)],
          budget=16, max_num_seqs=16, max_model_len=1024, block_size=16),
        s("max_model_len_decode_blocks", "decodes that fill blocks up to max_model_len; a "
          "later identical prompt hits prompt blocks only",
          [req("A", toks(0, 10), 40, 0), req("B", toks(0, 10), 3, 45)],
          budget=16, max_num_seqs=4, max_model_len=32, block_size=4),
    ]
    out += [_random_prefix_scenario(seed) for seed in range(16)]
    out += _held_prefill_scenarios()
    names = [sc["name"] for sc in out]
    assert len(names) == len(set(names)), "scenario names must be unique"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("scenarios", help="write the scenario file (no vLLM needed)")
    p_t = sub.add_parser("traces", help="run the scenarios on vLLM and write the traces")
    p_t.add_argument("--only", nargs="*", help="run only these scenario names")
    args = ap.parse_args(argv)
    if args.cmd == "scenarios":
        write_scenarios(SCENARIOS_PATH, build_scenarios(),
                        "Prefix-caching scenarios for dev/vllm_reference.py; regenerate with "
                        "`python3 dev/scenarios_prefix.py scenarios`.")
    else:
        write_traces(SCENARIOS_PATH, TRACES_PATH, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
