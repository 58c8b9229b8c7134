"""Notebook 01's exercises (the stall). Right answers come from the package: the real
scheduler (``run_trace``), the configs the notebook builds, and the step clock itself."""

from __future__ import annotations

import dataclasses
import time

from chunkprefill import SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.lab.stall import StallWorkload, prefill_chunks
from chunkprefill.lab.stats import Estimate
from chunkprefill.timing import CLOCKS, Timer
from chunkprefill.trace import run_trace


def _chunks(num_decodes: int, budget: int, prompt_len: int) -> list[int]:
    """The chunks of one long prompt arriving at step 8 beside ``num_decodes`` decodes."""
    wl = StallWorkload(num_decodes=num_decodes, decode_prompt_len=16, decode_output_len=40,
                       long_prompt_len=prompt_len, long_output_len=4, long_arrival_steps=(8,))
    steps = run_trace(wl.trace_requests(), SchedulerConfig.for_budget(budget, max_model_len=4096),
                      wl.cache_config())
    return prefill_chunks(steps, "long0", prompt_len)


def check_chunks(answer: tuple[int, int] | None) -> str:
    """Exercise 01.1: 01's workload with 48 decodes instead of 32, budget 288, one 2,048-token
    prompt. Answer ``(largest chunk, number of chunks)``."""
    chunks = _chunks(48, 288, 2048)
    return _verdict(None if answer is None else tuple(answer), (max(chunks), len(chunks)),
                    "running requests are served first: every decode takes one token of the "
                    "budget, the prompt gets the rest; then divide 2,048 by it, rounding up")


def broken_configs() -> dict[str, object]:
    """Exercise 01.2's experiment, with a bug: it claims to compare chunking off with chunking
    on, but the two configurations differ in more than that."""
    off = SchedulerConfig.for_budget(None, max_model_len=4096, chunked=False)
    return {"chunking off": off,
            "chunking on": dataclasses.replace(SchedulerConfig.for_budget(288, max_model_len=4096),
                                               max_num_seqs=16)}


def check_second_variable(answer: set[str] | None) -> str:
    """Exercise 01.2: which of ``SchedulerConfig``'s fields differ between the two broken
    configurations, besides ``enable_chunked_prefill`` and ``max_num_batched_tokens``?"""
    a, b = broken_configs().values()
    differ = {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}
    expected = differ - {"enable_chunked_prefill", "max_num_batched_tokens"}
    return _verdict(None if answer is None else set(answer), expected,
                    "compare the two configs field by field (dataclasses.fields, or print both)")


def check_clock(answer: str | None) -> str:
    """Exercise 01.3: the broken timer ``Timer("cpu", "wall")`` charges a step for time the
    machine spent elsewhere. Name a ``clock`` for which ``Timer("cpu", clock)`` reads under
    10 ms around a 50 ms ``time.sleep`` (the OS running someone else). The checker runs
    your clock around the sleep."""
    hint = ("the clock must count only the CPU time of the thread that steps (see "
            "chunkprefill.timing.CLOCKS and notebook 01's first timing cell)")
    if answer is None or answer not in CLOCKS or answer in ("auto", "cuda-events"):
        return _verdict(answer, "a CPU clock name", hint)
    with Timer("cpu", answer) as t:
        time.sleep(0.05)
    ok = t.elapsed_s < 0.01
    return _verdict(answer, answer if ok else "another clock", hint)


def check_measure(steps: dict[str, list[float]] | None, estimates: dict[str, Estimate] | None
                     ) -> str:
    """Exercise 01.4: with ``interleaved`` (5 rounds) and ``median_ci``, time a step of 32
    decodes alone and with a 512-token prefill (``time_prefill_step``). Pass the raw samples
    and the estimates. Checks the method (5 interleaved samples each, medians of them) and
    what the physics guarantees: 16x the tokens cannot cost less than twice as much."""
    hint = ("interleaved({'decodes': ..., 'decodes + 512': ...}, repeats=5), then "
            "{name: median_ci(ts) for name, ts in steps.items()}")
    if not steps or not estimates or set(steps) != set(estimates) or len(steps) != 2:
        return f"Not yet. Hint: {hint}"
    if any(len(v) != 5 for v in steps.values()):
        return f"Not yet (not 5 samples each). Hint: {hint}"
    (_, short), (_, long) = sorted(estimates.items(), key=lambda kv: kv[1].median)
    if any(abs(e.median - float(sorted(steps[k])[2])) > 1e-12 for k, e in estimates.items()):
        return f"Not yet (the estimates are not the samples' medians). Hint: {hint}"
    if long.low > 2 * short.high:
        return f"Right: {long.fmt()} vs {short.fmt()}, {long.median / short.median:.1f}x."
    return (f"Not yet ({long.fmt()} vs {short.fmt()}). Hint: the prefill step's interval should "
            "lie above twice the decode step's; did you time the same step twice?")
