"""The live trace page's Python: it runs in the reader's browser (Pyodide), on the package's
own ``Scheduler`` loaded from a wheel of this checkout, and draws what notebook 02's trace
panel draws (the grid of steps x requests, P's chunks, the budget) as HTML and SVG, without
numpy or matplotlib. It builds the panel's workload and config with the package's own
functions and reads what each cell computed from the scheduler's ``token_splits``; only
the drawing is here. Nothing it imports needs more than the standard library. Tested on
CPython by tests/test_site_live.py against the package's own pictures' data.

Every word it shows goes through the package's ``tr`` (``chunkprefill.i18n``), so the page
speaks its edition's language: the page's script calls ``start(language)`` with the
edition's name, and the site's Sphinx extension draws the static texts (``CONTROL_LABELS``,
``PAGE_TEXTS``) with the same catalog when the site is built. make i18n extracts this file
into i18n/<language>/runtime.po like the package's modules. The scheduler's own errors stay
English (they mirror vLLM's config checks)."""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Sequence
from importlib import metadata

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest, TraceStep, format_trace_table
from chunkprefill import run_trace as _run_trace
from chunkprefill.i18n import N_, set_language, tr
from chunkprefill.trace import article_trace_requests, max_seq_len, prompt_summary

# Notebook 02's panel's workload (article_trace_requests' defaults: each decode produces 20
# tokens, P 3 and arrives at step 2) and cache: 1000 blocks of 16 never run out here (at most
# 16 decodes x 2 blocks + P's 9), so nothing is ever preempted.
BLOCK_SIZE, NUM_BLOCKS = 16, 1000
CHUNKED_MAX_MODEL_LEN = 8192  # the panel's and the CLI's; it never binds on these sliders
ANNOTATE_MAX_STEPS = 40  # beyond this, numbers in cells are unreadable
PROMPT_ID = "P"
SVG_TITLE = N_("Who got how many tokens each step (token budget {budget})")  # the plot's title
SVG_LABEL = N_("the schedule: who got how many tokens each step, and the budget ({budget}) "
               "step by step")
SVG_AXIS = N_("scheduler step (one schedule() call); bars: tokens of the budget per step")

# One colour per kind of cell, as in the course's plots (tab:blue, tab:orange, greys, sand).
COLORS = {"decode": "#1f77b4", "prefill": "#ff7f0e", "recompute": "#d62728",
          "waiting": "#d1d1d1", "stalled": "#f2dfa7", "left": "#ebebeb"}
# The legend: the package's own plot labels (chunkprefill.course.plots.style.LABELS, which
# imports matplotlib), so they share its catalog entries.
LABELS = {"prefill": N_("prefill (prompt tokens)"), "decode": N_("decode (1 token)"),
          "recompute": N_("recompute after preemption"), "waiting": N_("waiting in queue"),
          "stalled": N_("running, no tokens this step"), "left": N_("budget left over")}
CHUNKING_OFF_NOTE = N_("With chunking off, this page sets max_model_len to the longest "
                       "sequence of the workload: raise the budget to it, or tick chunking.")
# The controls' names (slider keys as the page's script passes them to render_json).
CONTROL_LABELS = {"budget": N_("token budget (max_num_batched_tokens)"),
                  "decodes": N_("decoding requests"),
                  "prompt": N_("prompt length of P"),
                  "threshold": N_("long_prefill_token_threshold (0 = off)"),
                  "chunked": N_("chunked prefill (enable_chunked_prefill)")}
# What the page says before (or without) Python: drawn into the page when the site is built.
PAGE_TEXTS = {"loading": N_("Loading Python (Pyodide) and chunkprefill into this page… (about "
                            "13 MB, once)"),
              "failed": N_("The live trace could not start: {reason}"),
              "table": N_("The table (format_trace_table)"),
              "noscript": N_("This page runs the scheduler in your browser: it needs "
                             "JavaScript.")}


def workload(num_decodes: int, prompt_len: int) -> list[TraceRequest]:
    """The article's requests, as the panel builds them: ``num_decodes`` 1-token prompts
    decoding from step 1 on, and P."""
    return article_trace_requests(num_decodes, prompt_len)


def scheduler_config(budget: int, num_decodes: int, prompt_len: int, threshold: int,
                     chunked: bool) -> SchedulerConfig:
    """The panel's config: with chunking off ``max_model_len`` is the workload's longest
    sequence (the smallest context window that serves every request), so that vLLM's check,
    budget >= max_model_len, refuses exactly the budgets that cannot take P whole. Raises
    SchedulerConfig's ``ValueError`` for a combination it refuses."""
    max_model_len = (CHUNKED_MAX_MODEL_LEN if chunked
                     else max_seq_len(workload(num_decodes, prompt_len)))
    return SchedulerConfig.for_budget(budget, max_model_len=max_model_len, chunked=chunked,
                                      threshold=threshold)


def cell_kinds(steps: Sequence[TraceStep]) -> list[dict[str, tuple[str, int]]]:
    """Per step, ``{request_id: (kind, tokens)}``: what the scheduler says the tokens
    computed (``prefill``, ``decode``, ``recompute``), else ``waiting`` (queued) or
    ``stalled`` (running, given no tokens)."""
    grid = []
    for s in steps:
        cells = {rid: ("waiting", 0) for rid in s.waiting}
        cells |= {rid: ("stalled", 0) for rid in s.running}
        cells |= {rid: (split.kind, split.total) for rid, split in s.token_splits.items()}
        grid.append(cells)
    return grid


def prompt_chunks(grid: Sequence[dict[str, tuple[str, int]]]) -> list[tuple[int, int]]:
    """P's prompt chunks as ``(step, tokens)``."""
    return [(k, cells[PROMPT_ID][1]) for k, cells in enumerate(grid)
            if cells.get(PROMPT_ID, ("", 0))[0] == "prefill"]


def svg(steps: Sequence[TraceStep], grid: Sequence[dict[str, tuple[str, int]]]) -> str:
    """The timeline (one row per request, one column per step, the token count in each
    cell) above the budget bars (decodes at the bottom, prefill above, what is left light),
    on one step axis, as one SVG that scales down to the text column."""
    ids: dict[str, None] = {}
    for s in steps:
        ids.update(dict.fromkeys(s.num_scheduled_tokens))
    rows = list(ids)
    n, budget = len(steps), steps[0].token_budget
    cw, ch, left, top, gap, bars_h, axis_h = 22, 18, 44, 22, 26, 110, 30
    width = left + n * cw + 8
    tl_h = len(rows) * ch
    bars_top = top + tl_h + gap
    height = bars_top + bars_h + axis_h
    out = [f'<svg class="lt-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}"'
           f' width="{width}" height="{height}" style="max-width:{round(width * 1.5)}px" '
           f'role="img" aria-label="{html.escape(tr(SVG_LABEL, budget=budget))}">',
           f'<text x="{left}" y="14" class="lt-title">'
           f'{html.escape(tr(SVG_TITLE, budget=budget))}</text>']
    annotate = n <= ANNOTATE_MAX_STEPS
    for i, rid in enumerate(rows):
        y = top + i * ch
        out.append(f'<text x="{left - 6}" y="{y + ch - 5}" text-anchor="end" '
                   f'class="lt-label">{html.escape(rid)}</text>')
        for k, cells in enumerate(grid):
            kind, tokens = cells.get(rid, ("absent", 0))
            if kind == "absent":
                continue
            x = left + k * cw
            tip = (tr("step {step}, {request_id}: {label}, {tokens} tokens", step=k,
                      request_id=rid, label=tr(LABELS[kind]), tokens=tokens) if tokens else
                   tr("step {step}, {request_id}: {label}", step=k, request_id=rid,
                      label=tr(LABELS[kind])))
            out.append(f'<rect x="{x + 1}" y="{y + 1}" width="{cw - 2}" height="{ch - 2}" '
                       f'fill="{COLORS[kind]}" data-step="{k}" data-request="{html.escape(rid)}"'
                       f' data-kind="{kind}" data-tokens="{tokens}"><title>{html.escape(tip)}'
                       "</title></rect>")
            if annotate and tokens:
                out.append(f'<text x="{x + cw / 2}" y="{y + ch - 5}" text-anchor="middle" '
                           f'class="lt-num">{tokens}</text>')
    scale = bars_h / budget
    for k, cells in enumerate(grid):
        parts = dict.fromkeys(("decode", "prefill", "recompute"), 0)
        for kind, tokens in cells.values():
            if kind in parts:
                parts[kind] += tokens
        parts["left"] = steps[k].budget_left
        bottom = bars_top + bars_h
        for kind in ("decode", "prefill", "recompute", "left"):
            h = parts[kind] * scale
            if h:
                out.append(f'<rect x="{left + k * cw + 3}" y="{bottom - h:.2f}" width="{cw - 6}" '
                           f'height="{h:.2f}" fill="{COLORS[kind]}" class="lt-bar-{kind}" '
                           f'data-step="{k}" data-tokens="{parts[kind]}"><title>'
                           + html.escape(tr("step {step}: {label}, {tokens} tokens", step=k,
                                            label=tr(LABELS[kind]), tokens=parts[kind]))
                           + "</title></rect>")
            bottom -= h
    out.append(f'<line x1="{left}" x2="{left + n * cw}" y1="{bars_top}" y2="{bars_top}" '
               'class="lt-budget-line"/>')
    out.append(f'<text x="{left - 6}" y="{bars_top + 4}" text-anchor="end" class="lt-label">'
               f'{budget}</text>')
    every = max(1, -(-n // 25))
    for k in range(0, n, every):
        out.append(f'<text x="{left + k * cw + cw / 2}" y="{bars_top + bars_h + 14}" '
                   f'text-anchor="middle" class="lt-tick">{k}</text>')
    out.append(f'<text x="{left}" y="{height - 2}" class="lt-label">'
               f'{html.escape(tr(SVG_AXIS))}</text></svg>')
    return "".join(out)


def legend() -> str:
    return "".join(f'<span class="lt-key"><i style="background:{COLORS[k]}"></i>'
                   f"{html.escape(tr(LABELS[k]))}</span>"
                   for k in ("prefill", "decode", "waiting", "stalled", "left"))
    # (recompute never shows: this cache never runs out, so nothing is preempted)


def render(budget: int, num_decodes: int, prompt_len: int, threshold: int,
           chunked: bool) -> dict:
    """What the page shows for one slider position: ``{"error": message}`` with the
    scheduler's own ``ValueError`` text (English, as vLLM's) for a combination it refuses,
    else the summary (the package's ``prompt_summary``, as notebook 02's panel prints it),
    P's chunks, the picture and the table (``format_trace_table``: a CLI table, English)."""
    try:
        config = scheduler_config(budget, num_decodes, prompt_len, threshold, chunked)
        requests = workload(num_decodes, prompt_len)
        steps = _run_trace(requests, config, CacheConfig(BLOCK_SIZE, NUM_BLOCKS))
    except ValueError as e:
        return {"error": str(e), "refused": tr("The scheduler refuses this configuration:"),
                "note": "" if chunked else tr(CHUNKING_OFF_NOTE)}
    grid = cell_kinds(steps)
    return {"error": None, "summary": prompt_summary(steps, PROMPT_ID),
            "chunks": prompt_chunks(grid),
            "svg": svg(steps, grid), "legend": legend(), "table": format_trace_table(steps),
            "num_steps": len(steps)}


def render_json(budget: int, num_decodes: int, prompt_len: int, threshold: int,
                chunked: bool) -> str:
    """``render`` as JSON, for the page's script."""
    return json.dumps(render(int(budget), int(num_decodes), int(prompt_len), int(threshold),
                             bool(chunked)))


def start(language: str) -> str:
    """Speak ``language`` from now on (the page's edition: ``"en"``, ``"zh-TW"``); returns the
    status line: what runs here, and that nothing heavy was loaded."""
    heavy = sorted(n for n in ("numpy", "torch", "matplotlib") if n in sys.modules)
    set_language(language)  # (it tries matplotlib's fonts: absent in Pyodide, so nothing)
    fields = {"version": metadata.version("chunkprefill"), "python": sys.version.split()[0]}
    if heavy:
        return tr("chunkprefill {version} on Python {python} in Pyodide; modules loaded besides "
                  "the standard library: {modules}", **fields, modules=", ".join(heavy))
    return tr("chunkprefill {version} on Python {python} in Pyodide; modules loaded besides the "
              "standard library: none", **fields)
