"""The prefix-caching panel: a shared prefix, a block size and a budget; P with caching off and
on, side by side."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from chunkprefill.course.plots.prefix import plot_prefix_chunks
from chunkprefill.course.scenarios import shared_prompt_run
from chunkprefill.i18n import tr

# ------------------------------------------------------------------------ the widget
PREFIX_RANGE, BLOCK_SIZES, PANEL_PROMPT_LEN = (1, 160), (4, 8, 16, 32), 160
PREFIX_BUDGET_RANGE = (8, 128)


def prefix_panel_update(prefix_len: int, block_size: int, budget: int,
                        prompt_len: int = PANEL_PROMPT_LEN) -> tuple[str, Figure]:
    """The panel's text and picture: P with caching off and on, side by side."""
    off = shared_prompt_run(prefix_len, block_size, budget, prompt_len, False)
    on = shared_prompt_run(prefix_len, block_size, budget, prompt_len, True)
    lines = [tr("P shares {shared} of its {prompt_len} prompt tokens with S.", shared=prefix_len,
                prompt_len=prompt_len),
             tr("hit: {hit} tokens = {blocks} whole block(s) of {bs}; P computes {on} instead of "
                "{off} in {n_on} chunk(s) instead of {n_off}; first token after {s_on} step(s) "
                "instead of {s_off}.", hit=on.num_cached_tokens,
                blocks=on.num_cached_tokens // block_size, bs=block_size,
                on=on.num_computed_prompt_tokens, off=off.num_computed_prompt_tokens,
                n_on=len(on.chunks), n_off=len(off.chunks), s_on=on.first_token_steps,
                s_off=off.first_token_steps)]
    if prefix_len == prompt_len:
        lines.append(tr("Whole prompt shared: the hit is capped at num_tokens - 1 = {cap} tokens, "
                        "i.e. whole blocks only, so the last {recomputed} tokens (a whole block "
                        "or more) are recomputed to get the logits of the last token.",
                        cap=prompt_len - 1, recomputed=prompt_len - on.num_cached_tokens))
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
