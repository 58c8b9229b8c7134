"""One style for every plot of the course: colours and labels per kind of token work, and
the pyplot-free figure helper (a notebook displays the returned figure; a script saves it)."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from chunkprefill.i18n import N_

# One colour per kind of token work, shared by every trace plot so the legend reads the same.
# The labels are catalog keys: draw ``tr(LABELS[kind])`` (``chunkprefill.i18n``).
COLORS = {
    "decode": "tab:blue",
    "prefill": "tab:orange",
    "recompute": "tab:red",
    "left": "0.92",
    "absent": "white",
    "waiting": "0.82",
    "stalled": "#f2dfa7",
    "preempted": "black",
}
# Legend labels per kind, marked for the catalog: translate at use, ``tr(LABELS[kind])``.
LABELS = {
    "decode": N_("decode (1 token)"),
    "prefill": N_("prefill (prompt tokens)"),
    "recompute": N_("recompute after preemption"),
    "left": N_("budget left over"),
    "absent": N_("not there"),
    "waiting": N_("waiting in queue"),
    "stalled": N_("running, no tokens this step"),
}
_ANNOTATE_MAX_STEPS = 40  # beyond this, numbers in cells are unreadable
_MAX_WIDTH = 16.0  # inches: long traces squeeze their columns instead of growing forever


def _width(num_steps: int, per_step: float = 0.28, extra: float = 2.5) -> float:
    return min(_MAX_WIDTH, max(6.0, per_step * num_steps + extra))


def figure_and_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """Draw on the caller's axes if given, else on a fresh pyplot-free Figure."""
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()

