"""Exercises of the calibration-and-capacity lesson (Yi-34B on two A100 80GB PCIe, the cost
model fitted on the Sarathi-Serve authors' measurements). Right answers come from the
calibrated model and the simulator (``CostModel.preset(..., calibrated="sarathi-serve")``,
``sim.capacity_search``), never typed in here."""

from __future__ import annotations

from functools import lru_cache

from chunkprefill.config import SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.course.exercises.cost_model import close_enough
from chunkprefill.i18n import tr
from chunkprefill.sim import CostModel, capacity_search
from chunkprefill.sim.calibration import SARATHI_DECODE_CONTEXT_LEN
from chunkprefill.workload import sharegpt

DECODE_BATCH = 48  # requests in the decode-only batch to predict (the authors measured 32, 64)
STRICT_SLO_S = 0.2  # Yi-34B's strict P99 TBT SLO (the Sarathi-Serve artifact README)
CHUNKS = (512, 1024)  # the paper's strict-SLO chunk, and the one to try instead
ANSWERS = ("higher", "lower", "about the same")


def calibrated() -> CostModel:
    return CostModel.preset("yi-34b", "a100-80gb-pcie", 2, calibrated="sarathi-serve")


def check_decode_batch(answer_ms: float | None) -> str:
    """A decode-only batch of ``DECODE_BATCH`` requests (context
    ``SARATHI_DECODE_CONTEXT_LEN``) on the authors' setup, which they did not measure:
    predict its time in ms from the measured 32- and 64-request batches, then check with
    the calibrated model. Right within 5% of the model (an interpolation between the two
    measurements is)."""
    expected = calibrated().step_time([(1, SARATHI_DECODE_CONTEXT_LEN)] * DECODE_BATCH) * 1e3
    return close_enough(answer_ms, expected, 0.05 * expected, "ms",
                        tr("above a few requests a decode batch's time grows about linearly "
                           "with its size: interpolate between the 32- and 64-request "
                           "measurements, then run yi.step_time([(1, 1024)] * 48)"))


@lru_cache(maxsize=1)
def chunk_capacities(num_requests: int = 300) -> dict[int, float]:
    """Chunked (``batching="mixed"``) capacity of Yi-34B under the strict SLO, per chunk size
    of ``CHUNKS``: the real ShareGPT lengths, seed 0, as in the lesson."""
    cm = calibrated()
    return {c: capacity_search(cm, SchedulerConfig.for_budget(c, max_model_len=8192),
                               lambda q: sharegpt(num_requests, q, seed=0), STRICT_SLO_S,
                               qps_lo=0.05, qps_hi=2.0, rel_tol=0.1).qps
            for c in CHUNKS}


def chunk_answer() -> str:
    """What doubling the chunk from 512 to 1024 does to capacity under the strict SLO."""
    small, big = (chunk_capacities()[c] for c in CHUNKS)
    if big > 1.1 * small:
        return "higher"
    if big < small / 1.1:
        return "lower"
    return "about the same"


def check_chunk(answer: str | None) -> str:
    """Under Yi-34B's strict 0.2 s SLO, is chunked capacity with a chunk of 1024 higher,
    lower or about the same as with the paper's 512? One of ``ANSWERS``."""
    hint = tr("price one step of a 1024-token chunk plus a few decodes with yi.step_time and "
              "compare it with the 0.2 s SLO (the authors measured 1,021 + 3 tokens at 217.6 "
              "ms); then run sim.capacity_search with SchedulerConfig.for_budget(1024, ...)")
    if answer not in ANSWERS:
        return tr("Not yet ({answer}). Hint: {hint}", answer=repr(answer), hint=hint)
    return _verdict(answer, chunk_answer(), hint)
