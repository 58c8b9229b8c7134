"""The article's trace with sliders: budget, decodes, prompt length, threshold, and chunking on
or off. A plain function runs and renders (tests call it); a thin ipywidgets wrapper only
wires the sliders to it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.panels.common import figure_png
from chunkprefill.course.plots.schedule import plot_trace_overview, split_prefill_decode
from chunkprefill.trace import (
    TraceRequest,
    TraceStep,
    article_trace_requests,
    format_trace_table,
    run_trace,
)

# Slider ranges of the trace panel: wide enough to reach every regime of the seed's trace
# (budget below the number of decodes, threshold on/off, prompt shorter or longer than the
# budget), small enough that the slowest corner (budget 1: ~450 steps) still redraws fast.
BUDGET_RANGE = (1, 128)

DECODES_RANGE = (0, 16)

PROMPT_RANGE = (1, 128)

THRESHOLD_RANGE = (0, 64)

CHUNKED_MAX_MODEL_LEN = 8192  # the CLI's default

MAX_TABLE_ROWS = 30

def trace_scheduler_config(
    budget: int, num_decodes: int, prompt_len: int, threshold: int, chunked: bool = True,
    decode_len: int = 20, prompt_output_len: int = 3,
) -> SchedulerConfig:
    """The panel's ``SchedulerConfig``. ``max_num_seqs = min(128, budget)`` as in the CLI.

    ``max_model_len``: with chunking on, 8192 (the CLI default; it never binds here). With
    chunking off it is the longest sequence of this workload, ``max(prompt_len +
    prompt_output_len, 1 + decode_len)``: the smallest context window that serves every
    request untruncated. vLLM then demands ``budget >= max_model_len``, so the toggle shows
    the seed's point: without chunking a budget below the prompt cannot accept it at all,
    and the config check says so. (A fixed 8192 would refuse every slider position.)
    Raises the ``ValueError`` of ``SchedulerConfig`` for a combination it refuses."""
    max_model_len = (CHUNKED_MAX_MODEL_LEN if chunked
                     else max(prompt_len + prompt_output_len, 1 + decode_len))
    return SchedulerConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=min(128, budget),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=threshold,
        max_model_len=max_model_len,
    )

def _prompt_summary(
    steps: Sequence[TraceStep], requests: Sequence[TraceRequest], prompt_id: str = "P"
) -> str:
    """One line on the long prompt: its chunks, and the step of its first decode."""
    chunks, first_decode = [], None
    for s, cells in zip(steps, split_prefill_decode(steps, requests), strict=True):
        cell = cells.get(prompt_id)
        if cell is None:
            continue
        if cell.prefill:
            chunks.append((s.step, cell.prefill))
        elif first_decode is None:
            first_decode = s.step
    sizes = [n for _, n in chunks]
    where = (f"step {chunks[0][0]}" if len(chunks) == 1
             else f"steps {chunks[0][0]}-{chunks[-1][0]}")
    line = f"{prompt_id}'s prompt ran as {len(chunks)} chunk(s) {sizes} in {where}"
    if first_decode is not None:
        line += f"; its first decode is step {first_decode}"
    return line + "."

def trace_panel_update(
    budget: int, num_decodes: int, prompt_len: int, threshold: int, chunked: bool = True,
    decode_len: int = 20, prompt_output_len: int = 3, arrival_step: int = 2,
    block_size: int = 16, num_blocks: int = 1000, max_table_rows: int = MAX_TABLE_ROWS,
    fig: Figure | None = None,
) -> tuple[str, Figure | None, str | None]:
    """Run the seed's workload (``num_decodes`` decoding requests, then a ``prompt_len``
    prompt P arriving at ``arrival_step``) and render it: ``(table_text, figure, error)``.

    A combination the scheduler refuses returns ``("", None, message)`` where ``message`` is
    the scheduler's own ``ValueError`` text, so the panel can show the reason instead of a
    traceback. ``table_text`` is a one-line summary of P's chunks, then the first
    ``max_table_rows`` rows of ``format_trace_table``. ``fig``: a figure an earlier call
    returned, redrawn with this trace instead of a new one being built (the panel passes
    its own, which saves the axes and tick labels a new figure would build)."""
    try:
        config = trace_scheduler_config(budget, num_decodes, prompt_len, threshold, chunked,
                                        decode_len, prompt_output_len)
        requests = article_trace_requests(num_decodes, prompt_len, decode_len, arrival_step,
                                       prompt_output_len)
        steps = run_trace(requests, config, CacheConfig(block_size, num_blocks))
    except ValueError as e:
        return "", None, str(e)
    lines = [_prompt_summary(steps, requests), "", format_trace_table(steps[:max_table_rows])]
    if len(steps) > max_table_rows:
        lines.append(f"... {len(steps) - max_table_rows} more steps (see the picture)")
    return "\n".join(lines), plot_trace_overview(steps, requests, fig), None

def trace_panel(
    budget: int = 16, num_decodes: int = 6, prompt_len: int = 40, threshold: int = 0,
    chunked: bool = True,
) -> Any:
    """The seed's trace with sliders: budget, decodes, prompt length, threshold, and a
    chunked-prefill toggle. Returns an ``ipywidgets.VBox`` of two rows: first the controls
    (a VBox) beside an HTML widget with the summary + table or the scheduler's error, then an
    Image with the timeline and budget bars. Sliders update on release."""
    import ipywidgets as w

    def slider(desc: str, value: int, rng: tuple[int, int]) -> Any:
        return w.IntSlider(value=value, min=rng[0], max=rng[1], description=desc,
                           continuous_update=False, style={"description_width": "140px"},
                           layout=w.Layout(width="420px"))

    controls = {
        "budget": slider("token budget", budget, BUDGET_RANGE),
        "num_decodes": slider("decodes", num_decodes, DECODES_RANGE),
        "prompt_len": slider("prompt length (P)", prompt_len, PROMPT_RANGE),
        "threshold": slider("long_prefill threshold", threshold, THRESHOLD_RANGE),
        "chunked": w.Checkbox(value=chunked, description="chunked prefill"),
    }
    text = w.HTML(layout=w.Layout(flex="1 1 auto", margin="0 0 0 16px"))
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))
    drawn: list[Figure] = []  # the panel's one figure, redrawn on every move

    def render(_change: object = None) -> None:
        table, fig, error = trace_panel_update(**{k: c.value for k, c in controls.items()},
                                               fig=drawn[0] if drawn else None)
        if error is not None:
            note = ("" if controls["chunked"].value else
                    "<br><i>With chunking off, this panel sets max_model_len to the longest "
                    "sequence of the workload: raise the budget to it, or tick chunking.</i>")
            text.value = ("<b>The scheduler refuses this configuration:</b>"
                          "<pre style='color:#a00; white-space:pre-wrap; word-break:normal'>"
                          f"{html.escape(error)}</pre>{note}")
            image.value = b""
            image.layout.display = "none"  # no broken-image icon under the message
            return
        drawn[:] = [fig]  # type: ignore[list-item]
        text.value = f"<pre style='font-size:11px'>{html.escape(table)}</pre>"
        image.value = figure_png(fig)  # type: ignore[arg-type]
        image.layout.display = None

    for c in controls.values():
        c.observe(render, names="value")
    render()
    sliders = w.VBox(list(controls.values()), layout=w.Layout(flex="0 0 auto", min_width="430px"))
    return w.VBox([w.HBox([sliders, text]), image])
