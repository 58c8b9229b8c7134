"""The article's trace with sliders: budget, decodes, prompt length, threshold, and chunking on
or off. A plain function runs and renders (tests call it); a thin ipywidgets wrapper only
wires the sliders to it."""

from __future__ import annotations

import html
from typing import Any

from matplotlib.figure import Figure

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.course.panels.common import figure_png
from chunkprefill.course.plots.schedule import plot_trace_overview
from chunkprefill.i18n import tr
from chunkprefill.trace import (
    article_trace_requests,
    format_trace_table,
    max_seq_len,
    prompt_summary,
    run_trace,
)

# Slider ranges of the trace panel: wide enough to reach every regime of the article's trace
# (budget below the number of decodes, threshold on/off, prompt shorter or longer than the
# budget), small enough that the slowest corner (budget 1: ~450 steps) still redraws fast.
BUDGET_RANGE = (1, 128)

DECODES_RANGE = (0, 16)

PROMPT_RANGE = (1, 128)

THRESHOLD_RANGE = (0, 64)

CHUNKED_MAX_MODEL_LEN = 8192  # the CLI's default; with chunking on it never binds here

MAX_TABLE_ROWS = 30


def trace_panel_update(
    budget: int, num_decodes: int, prompt_len: int, threshold: int, chunked: bool = True,
    decode_len: int = 20, prompt_output_len: int = 3, arrival_step: int = 2,
    block_size: int = 16, num_blocks: int = 1000, max_table_rows: int = MAX_TABLE_ROWS,
    fig: Figure | None = None,
) -> tuple[str, Figure | None, str | None]:
    """Run the article's workload (``num_decodes`` decoding requests, then a ``prompt_len``
    prompt P arriving at ``arrival_step``) and render it: ``(table_text, figure, error)``.

    A combination the scheduler refuses returns ``("", None, message)`` where ``message`` is
    the scheduler's own ``ValueError`` text, so the panel can show the reason instead of a
    traceback. ``table_text`` is a one-line summary of P's chunks, then the first
    ``max_table_rows`` rows of ``format_trace_table``. ``fig``: a figure an earlier call
    returned, redrawn with this trace instead of a new one being built (the panel passes
    its own, which saves the axes and tick labels a new figure would build)."""
    try:
        requests = article_trace_requests(num_decodes, prompt_len, decode_len, arrival_step,
                                          prompt_output_len)
        # With chunking off the context window is the workload's longest sequence (the
        # smallest that serves every request): vLLM then demands budget >= it, so the toggle
        # shows the article's point, a prompt longer than the budget cannot run at all.
        config = SchedulerConfig.for_budget(
            budget, max_model_len=CHUNKED_MAX_MODEL_LEN if chunked else max_seq_len(requests),
            chunked=chunked, threshold=threshold)
        steps = run_trace(requests, config, CacheConfig(block_size, num_blocks))
    except ValueError as e:
        return "", None, str(e)
    lines = [prompt_summary(steps), "", format_trace_table(steps[:max_table_rows])]
    if len(steps) > max_table_rows:
        lines.append(tr("... {n} more steps (see the picture)", n=len(steps) - max_table_rows))
    return "\n".join(lines), plot_trace_overview(steps, fig), None


def trace_panel(
    budget: int = 16, num_decodes: int = 6, prompt_len: int = 40, threshold: int = 0,
    chunked: bool = True,
) -> Any:
    """The article's trace with sliders: budget, decodes, prompt length, threshold, and a
    chunked-prefill toggle. Returns an ``ipywidgets.VBox`` of two rows: first the controls
    (a VBox) beside an HTML widget with the summary + table or the scheduler's error, then an
    Image with the timeline and budget bars. Sliders update on release."""
    import ipywidgets as w

    def slider(desc: str, value: int, rng: tuple[int, int]) -> Any:
        return w.IntSlider(value=value, min=rng[0], max=rng[1], description=desc,
                           continuous_update=False, style={"description_width": "140px"},
                           layout=w.Layout(width="420px"))

    controls = {
        "budget": slider(tr("token budget"), budget, BUDGET_RANGE),
        "num_decodes": slider(tr("decodes"), num_decodes, DECODES_RANGE),
        "prompt_len": slider(tr("prompt length (P)"), prompt_len, PROMPT_RANGE),
        "threshold": slider(tr("long_prefill threshold"), threshold, THRESHOLD_RANGE),
        "chunked": w.Checkbox(value=chunked, description=tr("chunked prefill")),
    }
    text = w.HTML(layout=w.Layout(flex="1 1 auto", margin="0 0 0 16px"))
    image = w.Image(format="png", layout=w.Layout(max_width="100%"))
    drawn: list[Figure] = []  # the panel's one figure, redrawn on every move

    def render(_change: object = None) -> None:
        table, fig, error = trace_panel_update(**{k: c.value for k, c in controls.items()},
                                               fig=drawn[0] if drawn else None)
        if error is not None:
            note = ("" if controls["chunked"].value else
                    "<br><i>" + tr("With chunking off, this panel sets max_model_len to the "
                                   "longest sequence of the workload: raise the budget to it, "
                                   "or tick chunking.") + "</i>")
            text.value = ("<b>" + tr("The scheduler refuses this configuration:") + "</b>"
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
