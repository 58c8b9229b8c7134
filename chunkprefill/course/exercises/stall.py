"""Notebook 01's exercises (the stall). Right answers come from the package: the real
scheduler (``run_trace``), the configs the notebook builds, and the step clock itself."""

from __future__ import annotations

import dataclasses
import time

from chunkprefill import SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.lab.stall import StallWorkload
from chunkprefill.lab.stats import Estimate
from chunkprefill.timing import CLOCKS, Timer
from chunkprefill.trace import prompt_chunks, run_trace


def _chunks(num_decodes: int, budget: int, prompt_len: int) -> list[int]:
    """The chunks of one long prompt arriving at step 8 beside ``num_decodes`` decodes."""
    wl = StallWorkload(num_decodes=num_decodes, decode_prompt_len=16, decode_output_len=40,
                       long_prompt_len=prompt_len, long_output_len=4, long_arrival_steps=(8,))
    steps = run_trace(wl.trace_requests(), SchedulerConfig.for_budget(budget, max_model_len=4096),
                      wl.cache_config())
    return prompt_chunks(steps, "long0")


def check_chunks(answer: tuple[int, int] | None) -> str:
    """Exercise 01.1: 01's workload with 48 decodes instead of 32, budget 288, one 2,048-token
    prompt. Answer ``(largest chunk, number of chunks)``."""
    chunks = _chunks(48, 288, 2048)
    return _verdict(None if answer is None else tuple(answer), (max(chunks), len(chunks)),
                    tr("running requests are served first: every decode takes one token of the "
                       "budget, the prompt gets the rest; then divide 2,048 by it, rounding up"))


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
                    tr("compare the two configs field by field (dataclasses.fields, or print "
                       "both)"))


def check_clock(answer: str | None) -> str:
    """Exercise 01.3: the broken timer ``Timer("cpu", "wall")`` charges a step for time the
    machine spent elsewhere. Name a ``clock`` for which ``Timer("cpu", clock)`` reads under
    10 ms around a 50 ms ``time.sleep`` (the OS running someone else). The checker runs
    your clock around the sleep."""
    hint = tr("the clock must count only the CPU time of the thread that steps (see "
              "chunkprefill.timing.CLOCKS and the notebook's first timing cell)")
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
    hint = tr("interleaved({pair}, repeats=5), then {estimates}",
              pair="{'decodes': ..., 'decodes + 512': ...}",
              estimates="{name: median_ci(ts) for name, ts in steps.items()}")
    if not steps or not estimates or set(steps) != set(estimates) or len(steps) != 2:
        return tr("Not yet. Hint: {hint}", hint=hint)
    if any(len(v) != 5 for v in steps.values()):
        return tr("Not yet (not 5 samples each). Hint: {hint}", hint=hint)
    (_, short), (_, long) = sorted(estimates.items(), key=lambda kv: kv[1].median)
    if any(abs(e.median - float(sorted(steps[k])[2])) > 1e-12 for k, e in estimates.items()):
        return tr("Not yet (the estimates are not the samples' medians). Hint: {hint}",
                  hint=hint)
    if long.low > 2 * short.high:
        return tr("Right: {long} vs {short}, {ratio:.1f}x.", long=long.fmt(), short=short.fmt(),
                  ratio=long.median / short.median)
    return tr("Not yet ({long} vs {short}). Hint: the prefill step's interval should lie above "
              "twice the decode step's; did you time the same step twice?", long=long.fmt(),
              short=short.fmt())
