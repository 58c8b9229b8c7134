"""The prefix-caching panel: a shared prefix, a block size and a budget; P with caching off and
on, side by side."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from chunkprefill.course.plots.prefix import plot_prefix_chunks
from chunkprefill.course.scenarios import shared_prompt_run

# ------------------------------------------------------------------------ the widget
PREFIX_RANGE, BLOCK_SIZES, PANEL_PROMPT_LEN = (1, 160), (4, 8, 16, 32), 160
PREFIX_BUDGET_RANGE = (8, 128)

def prefix_panel_update(prefix_len: int, block_size: int, budget: int,
                        prompt_len: int = PANEL_PROMPT_LEN) -> tuple[str, Figure]:
    """The panel's text and picture: P with caching off and on, side by side."""
    off = shared_prompt_run(prefix_len, block_size, budget, prompt_len, False)
    on = shared_prompt_run(prefix_len, block_size, budget, prompt_len, True)
    lines = [f"P shares {prefix_len} of its {prompt_len} prompt tokens with S.",
             f"hit: {on.num_cached_tokens} tokens = {on.num_cached_tokens // block_size} whole "
             f"block(s) of {block_size}; P computes {on.num_computed_prompt_tokens} instead of "
             f"{off.num_computed_prompt_tokens} in {len(on.chunks)} chunk(s) instead of "
             f"{len(off.chunks)}; first token after {on.first_token_steps} step(s) instead of "
             f"{off.first_token_steps}."]
    if prefix_len == prompt_len:
        lines.append(f"Whole prompt shared: the hit is capped at num_tokens - 1 = "
                     f"{prompt_len - 1} tokens, i.e. whole blocks only, so the last "
                     f"{prompt_len - on.num_cached_tokens} tokens (a whole block or more) "
                     "are recomputed to get the logits of the last token.")
    return "\n".join(lines), plot_prefix_chunks([off, on])

def prefix_panel(prefix_len: int = 100, block_size: int = 16, budget: int = 32) -> Any:
    """Sliders over prefix length x block size x budget around ``prefix_panel_update``."""
    import ipywidgets as w

    from chunkprefill.course.panels.common import figure_png

    controls = {
        "prefix_len": w.IntSlider(value=prefix_len, min=PREFIX_RANGE[0], max=PREFIX_RANGE[1],
                                  description="shared prefix", continuous_update=False),
        "block_size": w.Dropdown(options=list(BLOCK_SIZES), value=block_size,
                                 description="block size"),
        "budget": w.IntSlider(value=budget, min=PREFIX_BUDGET_RANGE[0], max=PREFIX_BUDGET_RANGE[1],
                              description="token budget", continuous_update=False),
    }
    text, image = w.HTML(), w.Image(format="png")

    def render(_change: object = None) -> None:
        summary, fig = prefix_panel_update(**{k: c.value for k, c in controls.items()})
        text.value = f"<pre style='white-space:pre-wrap'>{summary}</pre>"
        image.value = figure_png(fig)

    for c in controls.values():
        c.observe(render, names="value")
    render()
    return w.VBox([w.HBox(list(controls.values())), text, image])
