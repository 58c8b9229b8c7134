"""The live trace page's Python: it runs in the reader's browser (Pyodide), on the package's
own ``Scheduler`` loaded from a wheel of this checkout, and draws what notebook 02's trace
panel draws (the grid of steps x requests, P's chunks, the budget) as HTML and SVG, without
numpy or matplotlib. It builds the panel's workload and config with the package's own
functions and reads what each cell computed from the scheduler's ``token_splits``; only
the drawing is here. Nothing it imports needs more than the standard library. Tested on
CPython by tests/test_site_live.py against the package's own pictures' data."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest, TraceStep, format_trace_table
from chunkprefill import run_trace as _run_trace
from chunkprefill.trace import article_trace_requests, max_seq_len

# Notebook 02's panel's workload (article_trace_requests' defaults: each decode produces 20
# tokens, P 3 and arrives at step 2) and cache: 1000 blocks of 16 never run out here (at most
# 16 decodes x 2 blocks + P's 9), so nothing is ever preempted.
BLOCK_SIZE, NUM_BLOCKS = 16, 1000
CHUNKED_MAX_MODEL_LEN = 8192  # the panel's and the CLI's; it never binds on these sliders
ANNOTATE_MAX_STEPS = 40  # beyond this, numbers in cells are unreadable
PROMPT_ID = "P"

# One colour per kind of cell, as in the course's plots (tab:blue, tab:orange, greys, sand).
COLORS = {"decode": "#1f77b4", "prefill": "#ff7f0e", "recompute": "#d62728",
          "waiting": "#d1d1d1", "stalled": "#f2dfa7", "left": "#ebebeb"}
LABELS = {"prefill": "prefill (prompt tokens)", "decode": "decode (1 token)",
          "recompute": "recompute after preemption", "waiting": "waiting in queue",
          "stalled": "running, no tokens this step", "left": "budget left over"}
CHUNKING_OFF_NOTE = ("With chunking off, this page sets max_model_len to the longest sequence "
                     "of the workload: raise the budget to it, or tick chunking.")


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


def summary(grid: Sequence[dict[str, tuple[str, int]]]) -> str:
    """One line on P, as the panel writes it: its chunks, and the step of its first decode."""
    chunks = prompt_chunks(grid)
    sizes = [n for _, n in chunks]
    where = (f"step {chunks[0][0]}" if len(chunks) == 1
             else f"steps {chunks[0][0]}-{chunks[-1][0]}")
    line = f"{PROMPT_ID}'s prompt ran as {len(chunks)} chunk(s) {sizes} in {where}"
    first_decode = next((k for k, c in enumerate(grid)
                         if c.get(PROMPT_ID, ("", 0))[0] == "decode"), None)
    if first_decode is not None:
        line += f"; its first decode is step {first_decode}"
    return line + "."


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
           f'role="img" aria-label="the schedule: who got how many tokens each step, and the '
           f'budget ({budget}) step by step">',
           f'<text x="{left}" y="14" class="lt-title">Who got how many tokens each step '
           f'(token budget {budget})</text>']
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
            tip = f"step {k}, {rid}: " + (f"{tokens} {kind} token(s)" if tokens else kind)
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
                           f'data-step="{k}" data-tokens="{parts[kind]}"><title>step {k}: '
                           f'{parts[kind]} {LABELS[kind]}</title></rect>')
            bottom -= h
    out.append(f'<line x1="{left}" x2="{left + n * cw}" y1="{bars_top}" y2="{bars_top}" '
               'class="lt-budget-line"/>')
    out.append(f'<text x="{left - 6}" y="{bars_top + 4}" text-anchor="end" class="lt-label">'
               f'{budget}</text>')
    every = max(1, -(-n // 25))
    for k in range(0, n, every):
        out.append(f'<text x="{left + k * cw + cw / 2}" y="{bars_top + bars_h + 14}" '
                   f'text-anchor="middle" class="lt-tick">{k}</text>')
    out.append(f'<text x="{left}" y="{height - 2}" class="lt-label">scheduler step (one '
               'schedule() call); bars: tokens of the budget per step</text></svg>')
    return "".join(out)


def legend() -> str:
    return "".join(f'<span class="lt-key"><i style="background:{COLORS[k]}"></i>{LABELS[k]}'
                   "</span>" for k in ("prefill", "decode", "waiting", "stalled", "left"))
    # (recompute never shows: this cache never runs out, so nothing is preempted)


def render(budget: int, num_decodes: int, prompt_len: int, threshold: int,
           chunked: bool) -> dict:
    """What the page shows for one slider position: ``{"error": message}`` with the
    scheduler's own ``ValueError`` text for a combination it refuses, else the summary, P's
    chunks, the picture and the table."""
    try:
        config = scheduler_config(budget, num_decodes, prompt_len, threshold, chunked)
        requests = workload(num_decodes, prompt_len)
        steps = _run_trace(requests, config, CacheConfig(BLOCK_SIZE, NUM_BLOCKS))
    except ValueError as e:
        return {"error": str(e), "note": "" if chunked else CHUNKING_OFF_NOTE}
    grid = cell_kinds(steps)
    return {"error": None, "summary": summary(grid), "chunks": prompt_chunks(grid),
            "svg": svg(steps, grid), "legend": legend(), "table": format_trace_table(steps),
            "num_steps": len(steps)}


def render_json(budget: int, num_decodes: int, prompt_len: int, threshold: int,
                chunked: bool) -> str:
    """``render`` as JSON, for the page's script."""
    return json.dumps(render(int(budget), int(num_decodes), int(prompt_len), int(threshold),
                             bool(chunked)))
