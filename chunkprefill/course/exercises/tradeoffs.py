"""Notebook 07's exercises (chunk-size trade-offs). Right answers come from the real
scheduler (``run_trace``) and the notebook's own workloads, never typed in here."""

from __future__ import annotations

import dataclasses

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.exercises.common import verdict as _verdict
from chunkprefill.i18n import tr
from chunkprefill.lab.stall import TRADEOFF_WORKLOAD, StallComparison
from chunkprefill.trace import TraceRequest, prompt_chunks, run_trace


def check_chunks(answer: tuple[int, int] | None) -> str:
    """Exercise 07.1: the trade-off workload (32 decodes, one 1,024-token prompt) at budget
    100. Answer ``(largest chunk, number of chunks)``."""
    wl = TRADEOFF_WORKLOAD
    steps = run_trace(wl.trace_requests(), SchedulerConfig.for_budget(100, max_model_len=2048),
                      wl.cache_config())
    chunks = prompt_chunks(steps, "long0")
    return _verdict(None if answer is None else tuple(answer), (max(chunks), len(chunks)),
                    tr("the decodes are served first, one token each; the prompt gets the rest "
                       "of the budget; 1,024 divided by that, rounded up"))


def _prefill_steps(threshold: int) -> int:
    """Steps until all three 512-token prompts (arriving together, budget 1,024) are
    prefilled."""
    reqs = [TraceRequest(f"p{i}", 512, 4, 0) for i in range(3)]
    sc = SchedulerConfig(1024, 8, long_prefill_token_threshold=threshold, max_model_len=1024)
    steps = run_trace(reqs, sc, CacheConfig(block_size=16, num_blocks=128))
    for k, s in enumerate(steps):
        if all(s.num_computed_tokens_after.get(r.request_id, 512) >= 512 for r in reqs):
            return k + 1
    raise AssertionError("the prompts never finished their prefill")


def check_threshold(answer: tuple[int, int] | None) -> str:
    """Exercise 07.2: three 512-token prompts arrive together, no decodes, budget 1,024. In
    how many steps are all three prefilled with ``long_prefill_token_threshold`` 0 (off), and
    with 128? Answer ``(steps at 0, steps at 128)``."""
    return _verdict(None if answer is None else tuple(answer),
                    (_prefill_steps(0), _prefill_steps(128)),
                    tr("threshold 0: the budget is filled in arrival order; 128: each prompt gets "
                       "at most 128 tokens a step, so a step holds 3 x 128"))


def broken_sweep(budgets: tuple[int, ...] = (64, 128, 288)) -> dict[int, SchedulerConfig]:
    """Exercise 07.3's sweep, with a bug: meant to change only the budget."""
    return {b: dataclasses.replace(SchedulerConfig.for_budget(b, max_model_len=2048),
                                   max_num_seqs=b // 8) for b in budgets}


def _max_running(sc: SchedulerConfig) -> int:
    wl = TRADEOFF_WORKLOAD
    return max(len(s.running) for s in run_trace(wl.trace_requests(), sc, wl.cache_config()))


def check_bug(answer: tuple[int, int] | None) -> str:
    """Exercise 07.3: on the trade-off workload at budget 128, how many requests run at most
    in one step with the broken sweep's config, and with
    ``SchedulerConfig.for_budget(128, max_model_len=2048)``? Answer
    ``(broken, correct)``."""
    expected = (_max_running(broken_sweep((128,))[128]),
                _max_running(SchedulerConfig.for_budget(128, max_model_len=2048)))
    return _verdict(None if answer is None else tuple(answer), expected,
                    tr("print the config: max_num_seqs caps how many requests run at once; "
                       "TraceStep.running lists them"))


def check_measure(cmp: StallComparison | None) -> str:
    """Exercise 07.4: ``compare_stall`` on a small workload (one long prompt beside a few
    decodes) at two budgets that both chunk it, >= 3 repeats each. Checks the method (one
    long prompt, only the budget differs, the same schedule in every repeat) and what the
    scheduler guarantees: four times the chunks cost the long prompt a clearly later first
    token (the ratio's interval lies above 1.2)."""
    hint = ("configs = {b: SchedulerConfig.for_budget(b, max_model_len=512) for b in (40, 136)}; "
            "cmp = compare_stall(model, workload, configs, repeats=3)")
    if cmp is None or len(cmp.configs) != 2 or len(cmp.workload.long_arrival_steps) != 1:
        return tr("Not yet. Hint: {hint}", hint=hint)
    (small, a), (big, b) = sorted(cmp.configs.items(),
                                  key=lambda kv: kv[1].max_num_batched_tokens)
    differ = {f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}
    if not differ <= {"max_num_batched_tokens", "max_num_seqs"} \
            or min(a.max_num_seqs, b.max_num_seqs) < cmp.workload.num_decodes + 1:
        return tr("Not yet (more than the budget changes: {fields}). Hint: {hint}",
                  fields=sorted(differ), hint=hint)
    if any(len(rs) < 3 for rs in cmp.runs.values()):
        return tr("Not yet (fewer than 3 repeats). Hint: {hint}", hint=hint)
    n = {label: len(prompt_chunks(rs[0].step_log, "long0"))
         for label, rs in cmp.runs.items()}
    if n[small] < 4 * n[big]:
        return tr("Not yet ({chunks} chunks: pick budgets 4x apart in chunks). Hint: {hint}",
                  chunks=n, hint=hint)
    r = cmp.ratio("long_ttft", small, big)
    if r.low > 1.2:
        return tr("Right: the long prompt's TTFT at budget {small} / at {big}: {ratio}.",
                  small=small, big=big, ratio=r.fmt(1, "x", 2))
    return tr("Not yet (TTFT ratio {ratio}). Hint: is the small budget the numerator?",
              ratio=r.fmt(1, "x", 2))
