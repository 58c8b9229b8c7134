"""Exercises of the cost-model lesson (Llama-3-8B on an H100, simulated). Right answers come
from the cost model and the simulator themselves (``CostModel``, ``sim.compare_batching``,
``sim.tbt_slo``), never typed in here."""

from __future__ import annotations

from functools import lru_cache

from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.sim import CostModel, chunking_overhead, compare_batching, tbt_slo
from chunkprefill.workload import sharegpt_like

LOADS = (0.5, 1.0, 2.0, 4.0, 6.0)  # QPS offered in the load exercise


def close_enough(answer: float | None, expected: float, tol: float, unit: str,
                 hint: str) -> str:
    """``"Right: ..."`` when ``answer`` is within ``tol`` of ``expected``, else "Not yet"
    with ``hint`` (already in the reader's language)."""
    if answer is not None and abs(answer - expected) <= tol:
        return tr("Right: {expected:.2f} {unit}.", expected=expected, unit=unit)
    return tr("Not yet ({answer}). Hint: {hint}", answer=repr(answer), hint=hint)


def check_decode_linear(answer_ms: float | None) -> str:
    """Llama-3-8B on one H100 SXM (the default preset). Predict, in ms, the linear layers'
    time of a step holding one decode, then compare with
    ``cm.step_breakdown([(1, 0)])["linear"]``. Right within 1%."""
    cm = CostModel.preset("Llama-3-8B", "H100-SXM")
    expected = cm.step_breakdown([(1, 0)])["linear"] * 1e3
    return close_enough(answer_ms, expected, 0.01 * expected, "ms",
                        tr("one token is memory bound: the streamed weight bytes "
                           "(cm.model.linear_bytes_per_step) over the bandwidth times its "
                           "efficiency"))


@lru_cache(maxsize=4)
def first_load_over_slo(num_requests: int = 200, budget: int = 2048) -> float | None:
    """The lowest load of ``LOADS`` at which prefill-first's P99 TBT breaks the strict SLO
    (Llama-3-8B on an H100, ShareGPT-like requests, seed 0); None if none does."""
    cm = CostModel.preset("Llama-3-8B", "H100-SXM")
    slo = tbt_slo(cm)
    for qps in LOADS:
        wl = sharegpt_like(num_requests, qps, seed=0, max_model_len=cm.model.max_model_len)
        if compare_batching(wl, cm, budget)["prefill_first"].p99_itl > slo:
            return qps
    return None


def check_load(answer: float | None) -> str:
    """With the slider's setup (200 ShareGPT-like requests, seed 0, budget 2048), at which
    load of ``LOADS`` does prefill-first first break the strict P99 TBT SLO?"""
    hint = tr("run sim.compare_batching at each load and compare "
              "'prefill_first'.p99_itl with sim.tbt_slo(cm)")
    if answer is None:  # no simulation needed to say so
        return tr("Not yet ({answer}). Hint: {hint}", answer=repr(answer), hint=hint)
    return _verdict(answer, first_load_over_slo(), hint)


def broken_chunking_overhead(cm: CostModel, prompt_len: int, chunk: int) -> float:
    """The find-the-bug exercise's overhead: every chunk is priced as if nothing were in the
    cache before it."""
    sizes = [min(chunk, prompt_len - off) for off in range(0, prompt_len, chunk)]
    return sum(cm.step_time([(n, 0)]) for n in sizes) / cm.step_time([(prompt_len, 0)])


def check_bug(answer_points: float | None) -> str:
    """For an 8,192-token prompt in chunks of 512 (Llama-3-8B, H100), by how many
    percentage points does ``broken_chunking_overhead`` understate the overhead
    ``sim.chunking_overhead`` predicts? Right within 0.5 points."""
    cm = CostModel.preset("Llama-3-8B", "H100-SXM")
    right = float(chunking_overhead(cm, 8192, [512])[0])
    expected = 100 * (right - broken_chunking_overhead(cm, 8192, 512))
    return close_enough(answer_points, expected, 0.5, tr("percentage points"),
                        tr("chunk k attends to the KV of the chunks before it: its batch "
                           "entry is (512, 512 * k), not (512, 0)"))
