"""Exercises on vLLM's other scheduler knobs (the prefill interval, the watermark). The right
answers come from a run of the real scheduler and from vLLM 0.33.0's own recording of the
same workload (``vllm_knobs_traces.json``), never typed in here."""

from __future__ import annotations

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.course.vs_vllm import RECORDINGS, load_scenario
from chunkprefill.i18n import tr
from chunkprefill.trace import article_trace_requests, prompt_chunks, run_trace

KNOB_TRACES = RECORDINGS / "vllm_knobs_traces.json"
WATERMARK_SCENARIO = "watermark_delays_admission"


def check_interval(answer: list[int] | None) -> str:
    """Exercise 1: the article's workload (budget 16) with ``prefill_schedule_interval=2``.
    In which steps does P get prompt tokens? Answer the list of step numbers."""
    steps = run_trace(article_trace_requests(),
                      SchedulerConfig(16, 16, max_model_len=1024, prefill_schedule_interval=2),
                      CacheConfig(16, 1000))
    chunks = prompt_chunks(steps, "P")
    p_steps = [s.step for s in steps if "P" in s.num_scheduled_tokens][:len(chunks)]
    return _verdict(None if answer is None else list(answer), p_steps,
                    tr("a step may carry prefill only if the last one that did is at least 2 "
                       "executed steps back while something decodes; the decodes run every "
                       "step"))


def watermark_admission_step() -> int:
    """The step in which vLLM 0.33.0 first scheduled B in ``watermark_delays_admission``
    (read off its recording)."""
    sc = load_scenario(WATERMARK_SCENARIO, KNOB_TRACES)
    return next(k for k, st in enumerate(sc["steps"])
                if any(rid == "B" for rid, _ in st["num_scheduled_tokens"]))


def check_watermark(answer: int | None) -> str:
    """Exercise 2: ``watermark_delays_admission`` (9 blocks of 8 slots, ``watermark=0.2``):
    A (16 prompt tokens, 20 outputs) runs from step 0; B (a 40-token prompt) arrives at
    step 1. In which step does B get its first tokens? Compared with vLLM's recording."""
    return _verdict(answer, watermark_admission_step(),
                    tr("B's whole 40-token prompt needs 5 blocks, and while A runs "
                       "int(0.2 x (9 + 1)) = 2 more must stay free; count A's free blocks "
                       "as it grows"))
