"""Notebook 08's exercises (what a step costs). Right answers come from the real scheduler
(``run_trace``) and the package's own fit, applied to the reader's measurements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.lab.stats import Estimate
from chunkprefill.lab.step_cost import fit_step_time
from chunkprefill.trace import TraceRequest, prompt_chunks, run_trace


def _kv_reread(prompt_len: int, chunk: int) -> int:
    """Cached tokens the chunks of one prompt attend to, summed (chunk k reads 0..k-1)."""
    steps = run_trace([TraceRequest("p", prompt_len, 1, 0)],
                      SchedulerConfig(chunk, 1, max_model_len=prompt_len + 1),
                      CacheConfig(block_size=16, num_blocks=prompt_len // 16 + 8))
    chunks = prompt_chunks(steps, "p")
    return int(sum(np.cumsum(chunks)[:-1]))


def check_reread(answer: tuple[int, int] | None) -> str:
    """Exercise 08.1: a 1,024-token prompt alone, in chunks of 256 and of 128. How many cached
    KV tokens do its chunks attend to, summed over the chunks? Answer ``(at 256, at 128)``."""
    return _verdict(None if answer is None else tuple(answer),
                    (_kv_reread(1024, 256), _kv_reread(1024, 128)),
                    tr("chunk k attends to the k chunks before it: 0 + c + 2c + ..."))


def check_predict(tokens: Sequence[int], medians: Sequence[float],
                     answer: float | None) -> str:
    """Exercise 08.2: from the line fitted in section 1 (``fit_step_time(tokens, medians)``),
    predict how many times longer a step of 32 decodes plus a 1,024-token chunk (1,056
    tokens) takes than a step of the 32 decodes alone. Right within 2%."""
    fixed, per_token = fit_step_time(tokens, medians)
    expected = (fixed + per_token * 1056) / (fixed + per_token * 32)
    hint = tr("t(n) = fixed + per_token * n: divide t(1056) by t(32)")
    if answer is not None and abs(answer / expected - 1) < 0.02:
        return tr("Right: {ratio:.2f}x.", ratio=expected)
    return tr("Not yet ({answer}). Hint: {hint}", answer=repr(answer), hint=hint)


def broken_fit(tokens: Sequence[int], medians: Sequence[float]) -> tuple[float, float]:
    """Exercise 08.3's fit, with a bug: ordinary least squares on absolute errors."""
    per_token, fixed = np.polyfit(np.asarray(tokens, float), np.asarray(medians, float), 1)
    return float(fixed), float(per_token)


def check_bug(tokens: Sequence[int], medians: Sequence[float], answer: int | None) -> str:
    """Exercise 08.3: on your measured ``(tokens, medians)``, at which token count is
    ``broken_fit``'s line furthest from the median, relative to it?"""
    fixed, per_token = broken_fit(tokens, medians)
    t = np.asarray(medians, float)
    rel = np.abs((fixed + per_token * np.asarray(tokens, float)) / t - 1)
    return _verdict(answer, int(tokens[int(np.argmax(rel))]),
                    tr("absolute errors let the biggest steps decide the line; look at "
                       "|fit / median - 1| point by point"))


def check_measure(overhead: Mapping[int, Estimate] | None) -> str:
    """Exercise 08.4: ``chunking_overhead`` of a 512-token prompt in chunks of 32 and of 256,
    3 repeats. Checks the method (both sizes, 3 paired repeats) and what the physics
    guarantees: 16 chunks pay the fixed step cost 15 more times, so their total is clearly
    above the unchunked prefill (the interval lies above 1)."""
    hint = "overhead = chunking_overhead(model, 512, [32, 256], repeats=3)"
    if not overhead or set(overhead) != {32, 256}:
        return tr("Not yet. Hint: {hint}", hint=hint)
    if any(e.n != 3 for e in overhead.values()):
        return tr("Not yet (not 3 repeats). Hint: {hint}", hint=hint)
    r = overhead[32]
    if r.low > 1.0:
        return tr("Right: chunks of 32 cost {ratio} the unchunked prefill.", ratio=r.fmt(1, "x", 2))
    return tr("Not yet (chunks of 32: {ratio}). Hint: is it the chunked total over the whole "
              "prompt?", ratio=r.fmt(1, "x", 2))
