"""Sarathi-Serve's yardsticks on the simulator: the P99 TBT SLO, the token budget from
profiling, capacity (the highest QPS meeting the SLO) and sweeps over token budgets; and
``vllm bench serve``'s per-request one, goodput."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.checks import check_int, check_positive
from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.i18n import tr
from chunkprefill.sim.cost_model import CostModel
from chunkprefill.sim.simulate import SimResult, simulate
from chunkprefill.workload import WorkloadRequest

STRICT_SLO_FACTOR = 5.0  # Sarathi-Serve: strict P99 TBT SLO = 5x a decode-only iteration
RELAXED_SLO_FACTOR = 25.0  # relaxed = 25x
MAX_MEDIAN_SCHEDULING_DELAY_S = 2.0  # Sarathi-Serve's capacity also needs this


def tbt_slo(cost_model: CostModel, factor: float = STRICT_SLO_FACTOR, batch_size: int = 32,
            context_len: int = 4096) -> float:
    """Sarathi-Serve's P99 TBT SLO: ``factor`` x the time of a decode-only iteration of
    ``batch_size`` requests with ``context_len`` tokens each (5x strict, 25x relaxed)."""
    check_positive("factor", factor)
    return factor * cost_model.decode_step_time(batch_size, context_len)


def _check_slo(cost_model: CostModel, slo_s: float) -> float:
    slo_s = check_positive("slo_s", slo_s)
    one = cost_model.step_time([(1, 1)])
    if slo_s < one:
        raise ValueError(f"slo_s ({slo_s * 1e3:.3f} ms) is below one decode step of a single "
                         f"request ({one * 1e3:.3f} ms): no schedule can meet it; allowed: "
                         f"slo_s >= {one:.6g}")
    return slo_s


def budget_from_profiling(cost_model: CostModel, slo_s: float, num_decodes: int = 32,
                          context_len: int = 4096, max_budget: int = 65536,
                          multiple_of: int = 1) -> int:
    """Sarathi-Serve's token budget: the largest step (``num_decodes`` decodes at
    ``context_len`` + one prefill chunk, also ``context_len`` deep) whose predicted time
    meets ``slo_s``. Step time is monotone in tokens, so bisection finds it."""
    slo_s = _check_slo(cost_model, slo_s)
    check_int("num_decodes", num_decodes, 0)
    check_int("multiple_of", multiple_of, 1)

    def t(tokens: int) -> float:
        chunk = tokens - num_decodes
        batch = [(1, context_len)] * min(num_decodes, tokens)
        if chunk > 0:
            batch.append((chunk, context_len))
        return cost_model.step_time(batch)

    lo = max(num_decodes, 1)
    if t(lo) > slo_s:
        raise ValueError(f"slo_s ({slo_s * 1e3:.2f} ms) is below a decode-only step of "
                         f"{lo} requests at context {context_len} ({t(lo) * 1e3:.2f} ms)")
    hi = max_budget
    if t(hi) <= slo_s:
        return hi - hi % multiple_of or multiple_of
    while hi - lo > 1:  # invariant: t(lo) <= slo < t(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if t(mid) <= slo_s else (lo, mid)
    return max(lo - lo % multiple_of, multiple_of)


@dataclass
class CapacityResult:
    """Highest QPS meeting both SLOs, and every trial of the search:
    (qps, p99_itl_s, median_scheduling_delay_s, meets)."""

    qps: float
    slo_s: float
    trials: list[tuple[float, float, float, bool]] = field(default_factory=list)


def capacity_search(cost_model: CostModel, scheduler_config: SchedulerConfig,
                    workload_at: Callable[[float], Sequence[WorkloadRequest]], slo_s: float,
                    qps_lo: float = 0.25, qps_hi: float = 8.0, rel_tol: float = 0.05,
                    max_median_scheduling_delay_s: float = MAX_MEDIAN_SCHEDULING_DELAY_S,
                    cache_config: CacheConfig | None = None,
                    max_trials: int = 20) -> CapacityResult:
    """Sarathi-Serve's capacity: the highest QPS whose P99 TBT <= ``slo_s`` and whose
    median scheduling delay <= 2 s, by bisection on QPS (geometric, until the bracket is
    within ``rel_tol``). ``workload_at(qps)`` must return the same requests at every
    QPS, only their arrivals rescaled (``workload.make_workload`` does). Returns qps=0 if
    even ``qps_lo`` fails."""
    slo_s = _check_slo(cost_model, slo_s)
    qps_lo, qps_hi = check_positive("qps_lo", qps_lo), check_positive("qps_hi", qps_hi)
    if qps_hi <= qps_lo:
        raise ValueError(f"qps_hi ({qps_hi}) must be > qps_lo ({qps_lo})")
    check_positive("rel_tol", rel_tol)
    res = CapacityResult(0.0, slo_s)

    def meets(qps: float) -> bool:
        r = simulate(workload_at(qps), cost_model, scheduler_config, cache_config)
        ok = (r.p99_itl <= slo_s
              and r.median_scheduling_delay <= max_median_scheduling_delay_s)
        res.trials.append((qps, r.p99_itl, r.median_scheduling_delay, ok))
        return ok

    if not meets(qps_lo):
        return res
    while meets(qps_hi):  # widen until the top fails
        qps_lo, qps_hi = qps_hi, qps_hi * 2
        if len(res.trials) >= max_trials:
            res.qps = qps_lo
            return res
    while qps_hi / qps_lo > 1 + rel_tol and len(res.trials) < max_trials:
        mid = math.sqrt(qps_lo * qps_hi)
        qps_lo, qps_hi = (mid, qps_hi) if meets(mid) else (qps_lo, mid)
    res.qps = qps_lo
    return res


def goodput(result: SimResult, ttft_s: float | None = None, tpot_s: float | None = None,
            e2el_s: float | None = None) -> float:
    """``vllm bench serve --goodput``'s "Request goodput (req/s)" for a simulated run: the
    requests whose every given metric is <= its SLO (TTFT; TPOT = (E2EL - TTFT) /
    (output tokens - 1), 0 for a one-token request, as vLLM counts it; E2EL), divided by the
    run's duration (first arrival to last token). A per-request verdict on means: a request
    with one long stall among many fast tokens can still be good on TPOT, while the pooled
    P99 TBT of ``capacity_search`` sees that stall."""
    slos = {"ttft_s": ttft_s, "tpot_s": tpot_s, "e2el_s": e2el_s}
    if all(v is None for v in slos.values()):
        raise ValueError("goodput needs at least one SLO: ttft_s, tpot_s or e2el_s")
    for name, v in slos.items():
        if v is not None:
            check_positive(name, v)
    good = sum(1 for o in result.outputs
               if (ttft_s is None or o.metrics.ttft <= ttft_s)
               and (tpot_s is None or (o.metrics.tpot or 0.0) <= tpot_s)
               and (e2el_s is None or o.metrics.e2el <= e2el_s))
    return good / _duration(result)


def request_throughput(result: SimResult) -> float:
    """``vllm bench serve``'s "Request throughput (req/s)": finished requests over the run's
    duration (first arrival to last token), the number goodput is read against."""
    return len(result.outputs) / _duration(result)


def _duration(result: SimResult) -> float:
    if not result.outputs:
        raise ValueError("result has no finished requests")
    first = min(o.metrics.arrival_time for o in result.outputs)
    last = max(o.metrics.token_times[-1] for o in result.outputs)
    return last - first


def prefill_chunk_times(cost_model: CostModel, prompt_len: int,
                        chunk_size: int) -> list[tuple[int, int, float]]:
    """One prompt's whole prefill alone on the GPU, cut into chunks of at most
    ``chunk_size`` tokens (``chunk_size >= prompt_len``: one piece), as the scheduler cuts it
    with token budget ``chunk_size`` and nothing else running: (chunk tokens, tokens
    already in the KV cache, predicted seconds) per step. Each chunk re-reads the KV of
    the earlier ones, and every step streams the weights and pays the step overhead."""
    limit = cost_model.model.max_model_len
    check_int("prompt_len", prompt_len, 1, limit)
    check_int("chunk_size", chunk_size, 1)
    out, done = [], 0
    while done < prompt_len:
        q = min(chunk_size, prompt_len - done)
        out.append((q, done, cost_model.step_time([(q, done)])))
        done += q
    return out


def chunking_overhead(cost_model: CostModel, prompt_len: int,
                      chunk_sizes: Sequence[int]) -> np.ndarray:
    """Predicted time to prefill one ``prompt_len`` prompt alone in chunks of each size,
    divided by the time in one piece: the price of chunking (weights re-read every step,
    earlier chunks' KV re-read, per-step overhead)."""
    whole = sum(t for *_, t in prefill_chunk_times(cost_model, prompt_len, prompt_len))
    return np.asarray([sum(t for *_, t in prefill_chunk_times(cost_model, prompt_len, size))
                       / whole for size in chunk_sizes])


def sweep_budgets(cost_model: CostModel, budgets: Sequence[int],
                  workload: Sequence[WorkloadRequest], max_num_seqs: int | None = None,
                  ) -> list[dict[str, Any]]:
    """Simulate ``workload`` once per token budget (``batching="mixed"``) and once
    prefill-first (its budget: the whole window). Rows: batching, budget, p99_itl_s,
    median_ttft_s, median_scheduling_delay_s."""
    rows = []
    mml = cost_model.model.max_model_len
    runs = [("mixed", b) for b in budgets] + [("prefill_first", None)]
    for batching, b in runs:
        sc = SchedulerConfig.for_budget(b, max_model_len=mml, batching=batching,
                                        max_num_seqs=max_num_seqs)
        r = simulate(workload, cost_model, sc)
        rows.append({"batching": batching, "budget": sc.max_num_batched_tokens,
                     "p99_itl_s": r.p99_itl, "median_ttft_s": r.median_ttft,
                     "median_scheduling_delay_s": r.median_scheduling_delay})
    return rows


def compare_batching(workload: Sequence[WorkloadRequest], cost_model: CostModel,
                     budget: int) -> dict[str, SimResult]:
    """``workload`` simulated with ``batching="mixed"`` (chunked prefill) at ``budget``
    and prefill-first, keyed by the labels plots show: ``"mixed (budget N)"`` (in the
    reader's language) and ``"prefill_first"``."""
    mml = cost_model.model.max_model_len
    mixed = tr("mixed (budget {budget})", budget=budget)
    return {
        mixed: simulate(workload, cost_model, SchedulerConfig.for_budget(
            budget, max_model_len=mml)),
        "prefill_first": simulate(workload, cost_model, SchedulerConfig.for_budget(
            None, max_model_len=mml, batching="prefill_first")),
    }
