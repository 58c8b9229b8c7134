"""Trace pictures: the token budget step by step, timelines, KV blocks, computed tokens.
Inputs are ``run_trace`` steps, which carry what each request's tokens computed
(``TraceStep.token_splits``); nothing here is timed."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import ListedColormap, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.path import Path
from matplotlib.textpath import TextPath
from matplotlib.ticker import MaxNLocator, NullLocator
from matplotlib.transforms import Affine2D, IdentityTransform

from chunkprefill.course.plots.style import (
    _ANNOTATE_MAX_STEPS,
    _MAX_WIDTH,
    COLORS,
    LABELS,
    _width,
    figure_and_axes,
)
from chunkprefill.i18n import tr
from chunkprefill.trace import TraceStep


def _check_prefix(steps: Sequence[TraceStep]) -> None:
    """The pictures draw step k in column k and read who waits and who runs off each step:
    they take ``run_trace``'s result or a prefix of it."""
    if any(s.step != k for k, s in enumerate(steps)):
        raise ValueError("steps must be run_trace's result or a prefix of it (steps 0, 1, ...)")


def _request_order(steps: Sequence[TraceStep]) -> list[str]:
    """Requests in order of first appearance, like ``format_trace_table``'s columns."""
    seen: dict[str, None] = {}
    for s in steps:
        seen.update(dict.fromkeys(s.num_scheduled_tokens))
        seen.update(dict.fromkeys(s.preempted))
    return list(seen)


# Cell kinds of the timeline grid, in colour-map order (code = index).
TIMELINE_KINDS = ("absent", "waiting", "stalled", "decode", "prefill", "recompute")


def timeline_grid(
    steps: Sequence[TraceStep],
    request_ids: Sequence[str] | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The timeline as data: ``(request_ids, kinds, tokens)``, both arrays shaped
    ``(requests, steps)``. ``kinds`` holds codes into ``TIMELINE_KINDS``: absent (not arrived
    or finished), waiting (queued), stalled (running but given no tokens), or what the
    scheduled tokens computed; ``tokens`` is how many tokens the request got."""
    _check_prefix(steps)
    ids = list(request_ids) if request_ids is not None else _request_order(steps)
    row = {rid: i for i, rid in enumerate(ids)}
    code = {k: i for i, k in enumerate(TIMELINE_KINDS)}
    kinds = np.zeros((len(ids), len(steps)), dtype=np.int8)
    tokens = np.zeros((len(ids), len(steps)), dtype=np.int64)
    for j, (s, cells) in enumerate(zip(steps, (s.token_splits for s in steps),
                                       strict=True)):
        for rid in s.waiting:
            if rid in row:
                kinds[row[rid], j] = code["waiting"]
        for rid in s.running:
            if rid in row:
                kinds[row[rid], j] = code["stalled"]  # overwritten below if it got tokens
        for rid, cell in cells.items():
            if rid in row:
                kinds[row[rid], j] = code[cell.kind]
                tokens[row[rid], j] = cell.total
    return ids, kinds, tokens


@functools.lru_cache(maxsize=1024)
def _label_path(s: str, fontsize: float) -> Path:
    """The outline of ``s`` (``TextPath``, in points), centred on the origin."""
    path = TextPath((0, 0), s, size=fontsize)
    (x0, y0), (x1, y1) = path.get_extents().get_points()
    return path.transformed(Affine2D().translate(-(x0 + x1) / 2, -(y0 + y1) / 2))


class CellNumbers(Artist):
    """Short strings centred on data points, drawn as one artist: the token counts in a
    timeline's cells. Hundreds of ``Text`` artists would each be built, laid out and
    rasterised glyph by glyph on every draw. Here each distinct string becomes one outline
    (``TextPath``, cached) and the renderer stamps it at all its positions in one
    ``draw_markers`` call (Agg rasterises a marker once). ``positions`` is ``(n, 2)`` in data
    coordinates, ``labels`` the n strings."""

    def __init__(self, positions: Any, labels: Sequence[str], fontsize: float = 8,
                 color: Any = "white") -> None:
        super().__init__()
        self.positions = np.asarray(positions, dtype=float).reshape(-1, 2)
        self.labels = [str(s) for s in labels]
        if len(self.labels) != len(self.positions):
            raise ValueError("one label per position")
        self.color = to_rgba(color)
        self.fontsize = fontsize
        self.set_in_layout(False)  # a layout engine need not measure hundreds of labels

    def draw(self, renderer: Any) -> None:
        if not self.get_visible() or not self.labels:
            return
        xy = self.get_transform().transform(self.positions)
        by_label: dict[str, list[int]] = {}
        for k, s in enumerate(self.labels):
            by_label.setdefault(s, []).append(k)
        scale = Affine2D().scale(renderer.points_to_pixels(1.0))
        renderer.open_group("cell_numbers", gid=self.get_gid())
        gc = renderer.new_gc()
        gc.set_foreground(self.color, isRGBA=True)
        gc.set_alpha(self.get_alpha())
        gc.set_linewidth(0)
        self._set_gc_clip(gc)
        for s, idx in by_label.items():
            renderer.draw_markers(gc, _label_path(s, self.fontsize), scale, Path(xy[idx]),
                                  IdentityTransform(), self.color)
        gc.restore()
        renderer.close_group("cell_numbers")
        self.stale = False


def _draw_timeline(ax: Axes, steps: Sequence[TraceStep], request_ids: Sequence[str] | None,
                   annotate: bool | None) -> list[Any]:
    """Draw the timeline on ``ax`` (one image, two line collections for the white gaps, one
    ``CellNumbers``, one scatter for preemptions); returns the legend handles."""
    ids, kinds, tokens = timeline_grid(steps, request_ids)
    if annotate is None:
        annotate = len(steps) <= _ANNOTATE_MAX_STEPS
    cmap = ListedColormap([COLORS[k] for k in TIMELINE_KINDS])
    ax.imshow(kinds, cmap=cmap, vmin=-0.5, vmax=len(TIMELINE_KINDS) - 0.5, aspect="auto",
              interpolation="nearest",
              extent=(-0.5, len(steps) - 0.5, len(ids) - 0.5, -0.5))
    if len(steps) <= 120:  # white gaps between cells, like a table
        ax.vlines(np.arange(len(steps) + 1) - 0.5, -0.5, len(ids) - 0.5, color="white",
                  linewidth=1.5)
        ax.hlines(np.arange(len(ids) + 1) - 0.5, -0.5, len(steps) - 0.5,
                  color="white", linewidth=3)
    if annotate:
        rows, cols = np.nonzero(tokens)
        ax.add_artist(CellNumbers(np.column_stack([cols, rows]),
                                  [str(n) for n in tokens[rows, cols]]))
    px = [s.step for s in steps for rid in s.preempted if rid in ids]
    py = [ids.index(rid) for s in steps for rid in s.preempted if rid in ids]
    present = set(kinds.ravel().tolist())
    legend_order = ("prefill", "recompute", "decode", "waiting", "stalled")
    handles: list[Any] = [Patch(facecolor=COLORS[k], edgecolor="0.6", label=tr(LABELS[k]))
                          for k in legend_order if TIMELINE_KINDS.index(k) in present]
    if px:
        handles.append(ax.scatter(px, py, marker="x", s=60, color=COLORS["preempted"],
                                  label=tr("preempted"), zorder=3))
    ax.set_yticks(range(len(ids)), ids)
    ax.set_ylim(len(ids) - 0.5, -0.5)  # first request on top, like the table
    ax.set_xlim(-0.5, len(steps) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel(tr("scheduler step (one schedule() call)"))
    ax.set_ylabel(tr("request"))
    budget = steps[0].token_budget if steps else 0
    ax.set_title(tr("Who got how many tokens each step (token budget {budget})", budget=budget))
    return handles


def plot_trace_timeline(
    steps: Sequence[TraceStep],
    request_ids: Sequence[str] | None = None,
    ax: Axes | None = None,
    annotate: bool | None = None,
) -> Figure:
    """The article's table as a picture: one row per request, one column per step, a coloured
    cell wherever the request got tokens (the number in it is how many). Colour says what
    the tokens were: a prefill chunk, a decode, or a recompute after preemption. A grey cell
    is a request waiting in the queue, a sand one a running request that got no tokens
    (budget spent before its turn); an ``x`` marks a preemption. ``annotate`` (default: when
    there are at most 40 steps) writes the token counts into the cells, as one
    ``CellNumbers`` artist. ``steps`` is a ``run_trace`` result or a prefix of it."""
    n_req = len(request_ids) if request_ids is not None else len(_request_order(steps))
    fig, ax = figure_and_axes(ax, (_width(len(steps)), 0.45 * n_req + 1.8))
    handles = _draw_timeline(ax, steps, request_ids, annotate)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return fig


def budget_breakdown(
    steps: Sequence[TraceStep]
) -> dict[str, list[int]]:
    """Per step, the budget split into ``decode``, ``prefill``, ``recompute`` and ``left``
    tokens; the four lists add up to ``token_budget`` at every step."""
    _check_prefix(steps)
    parts: dict[str, list[int]] = {k: [] for k in ("decode", "prefill", "recompute", "left")}
    for s, cells in zip(steps, (s.token_splits for s in steps), strict=True):
        parts["decode"].append(sum(c.decode for c in cells.values()))
        parts["prefill"].append(sum(c.prefill for c in cells.values()))
        parts["recompute"].append(sum(c.recompute for c in cells.values()))
        parts["left"].append(s.budget_left)
    return parts


def bar_heights(collection: PolyCollection) -> list[float]:
    """The height of each bar of a ``plot_budget_bars`` layer (its rectangles, in order)."""
    return [float(np.ptp(p.vertices[:, 1])) for p in collection.get_paths()]


def _draw_budget_bars(ax: Axes, steps: Sequence[TraceStep]) -> None:
    """Draw the stacked bars on ``ax``: one ``PolyCollection`` of rectangles per kind of
    token (labelled ``LABELS[kind]``, one rectangle per step) and the budget line."""
    parts = budget_breakdown(steps)
    xs = np.array([s.step for s in steps], dtype=float)
    bottom = np.zeros(len(steps))
    dense = len(steps) > 80  # thin bars: no gaps, edges or hatching, which would alias
    half = 0.5 if dense else 0.4
    for kind in ("decode", "prefill", "recompute", "left"):
        heights = np.asarray(parts[kind], dtype=float)
        if kind == "recompute" and not heights.any():
            continue
        top = bottom + heights
        verts = np.stack([np.column_stack([xs - half, bottom]),
                          np.column_stack([xs - half, top]),
                          np.column_stack([xs + half, top]),
                          np.column_stack([xs + half, bottom])], axis=1)
        outlined = kind == "left" and not dense
        ax.add_collection(PolyCollection(
            verts, facecolors=COLORS[kind], edgecolors="0.6" if outlined else "none",
            linewidths=0.5 if outlined else 0, hatch="//" if outlined else None,
            antialiaseds=not dense, label=tr(LABELS[kind])), autolim=False)
        bottom = top
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if steps:
        budget = steps[0].token_budget
        ax.axhline(budget, color="0.3", linestyle="--", linewidth=1,
                   label=tr("token budget (max_num_batched_tokens)"))
        ax.set_xlim(steps[0].step - 0.6, steps[-1].step + 0.6)
        ax.set_ylim(0, budget * 1.08)
        # A few round ticks up to the budget, so that a budget like 16 gets its own tick.
        ticks = MaxNLocator(nbins=4, steps=[1, 2, 4, 5, 10], integer=True).tick_values(0, budget)
        ax.set_yticks([t for t in ticks if t <= budget * 1.08])
    ax.set_xlabel(tr("scheduler step (one schedule() call)"))
    ax.set_ylabel(tr("tokens in the step"))
    ax.set_title(tr("How each step's token budget is spent"))


def plot_budget_bars(
    steps: Sequence[TraceStep],
    ax: Axes | None = None,
) -> Figure:
    """One stacked bar per step: the token budget filled first by decodes, then by prefill
    chunks (and recomputes), with what is left over drawn light. A full bar is a step where
    chunked prefill used every token the budget allows. Each kind of token is one
    ``PolyCollection`` of rectangles, labelled ``LABELS[kind]`` (``bar_heights`` reads it)."""
    fig, ax = figure_and_axes(ax, (_width(len(steps)), 3.2))
    _draw_budget_bars(ax, steps)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


_OVERVIEW_AXES = ("trace overview: timeline", "trace overview: budget bars")


def plot_trace_overview(
    steps: Sequence[TraceStep],
    fig: Figure | None = None,
) -> Figure:
    """Timeline above budget bars on one step axis, one legend for both: the trace panel's
    picture. Laid out by hand in inches (no constrained layout, which measures every label
    several times), so that building and drawing it fits the 150 ms a slider move may take.

    ``fig``: a figure an earlier call returned, to draw this trace into instead of a new
    one (the trace panel does: its axes and tick labels are then reused, not rebuilt)."""
    n_req = max(len(_request_order(steps)), 3)
    left, right, top, gap, bottom = 0.75, 3.0, 0.35, 0.55, 0.55  # margins, inches
    timeline_h, bars_h = 0.3 * n_req, 1.8
    plot_w = min(_MAX_WIDTH - left - right, max(3.5, 0.28 * len(steps)))
    width, height = left + plot_w + right, top + timeline_h + gap + bars_h + bottom

    def rect(y0: float, h: float) -> tuple[float, float, float, float]:
        return (left / width, y0 / height, plot_w / width, h / height)

    if fig is None:
        fig = Figure(figsize=(width, height))
        timeline, bars = (fig.add_axes(rect(0, 1), label=label) for label in _OVERVIEW_AXES)
    else:
        if tuple(ax.get_label() for ax in fig.axes) != _OVERVIEW_AXES:
            raise ValueError("fig must be a figure that plot_trace_overview returned")
        timeline, bars = fig.axes
        fig.set_size_inches(width, height, forward=False)
        for ax in (timeline, bars):
            for artist in [*ax.images, *ax.collections, *ax.lines, *ax.artists]:
                artist.remove()
        for legend in list(fig.legends):
            legend.remove()
    timeline.set_position(rect(bottom + bars_h + gap, timeline_h))
    bars.set_position(rect(bottom, bars_h))
    handles = _draw_timeline(timeline, steps, None, None)
    _draw_budget_bars(bars, steps)
    # The same step axis without sharing it (a shared axis would give the timeline its own
    # x ticks to build and then hide); titles at a fixed height, not placed by measuring
    # tick labels.
    timeline.set_xlim(bars.get_xlim())
    timeline.xaxis.set_major_locator(NullLocator())
    timeline.set_xlabel("")
    for ax in (timeline, bars):
        ax.set_title(ax.get_title(), y=1.0)
    seen = {h.get_label() for h in handles}
    handles += [h for h in bars.collections + bars.lines if h.get_label() not in seen]
    fig.legend(handles=handles, loc="upper left", fontsize=8, frameon=False,
               bbox_to_anchor=((left + plot_w + 0.15) / width, 1 - top / height))
    return fig


def plot_kv_blocks(
    steps: Sequence[TraceStep], num_blocks: int | None = None, ax: Axes | None = None
) -> Figure:
    """Free KV blocks after every step, with each preemption marked. When the line reaches
    zero, the next request that needs a new block forces the scheduler to preempt the
    newest running request, whose freed blocks make the line jump back up."""
    fig, ax = figure_and_axes(ax, (_width(len(steps), 0.2), 3.2))
    xs = [s.step for s in steps]
    ax.step(xs, [s.num_free_blocks for s in steps], where="mid", color="tab:green",
            marker="o", markersize=3, label=tr("free KV blocks (after the step)"))
    if num_blocks is not None:
        ax.axhline(num_blocks, color="0.3", linestyle="--", linewidth=1,
                   label=f"num_blocks = {num_blocks}")
    ax.axhline(0, color="0.6", linewidth=0.8)
    first = True
    for s in steps:
        if s.preempted:
            ax.axvline(s.step, color=COLORS["recompute"], linestyle=":", linewidth=1.5,
                       label=tr("preemption") if first else None)
            ax.annotate(tr("preempt {who}", who=", ".join(s.preempted)),
                        (s.step, s.num_free_blocks),
                        xytext=(4, 8), textcoords="offset points", fontsize=8,
                        color=COLORS["recompute"])
            first = False
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(tr("scheduler step (one schedule() call)"))
    ax.set_ylabel(tr("free KV blocks"))
    ax.set_title(tr("KV cache: free blocks per step; preemption when they run out"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def computed_tokens_history(steps: Sequence[TraceStep]) -> dict[str, list[int | None]]:
    """``num_computed_tokens`` of every request after every step, read off the trace (None
    before it is first scheduled and after it finished; the finishing step is included)."""
    hist: dict[str, list[int | None]] = {rid: [None] * len(steps) for rid in
                                         _request_order(steps)}
    started: set[str] = set()
    for k, s in enumerate(steps):
        started.update(s.num_scheduled_tokens)
        after = {**{rid: c + s.num_scheduled_tokens[rid] for rid, c in
                    s.num_computed_tokens.items()}, **s.num_computed_tokens_after}
        for rid in started & after.keys():
            hist[rid][k] = after[rid]
    return hist


def plot_computed_tokens(
    steps: Sequence[TraceStep],
    ax: Axes | None = None,
) -> Figure:
    """``num_computed_tokens`` per request over the steps. A chunked prefill climbs in
    chunk-sized stairs, a decode by one per step; a preemption drops the line to zero and
    the climb back is the recompute (vLLM V1 preempts by recomputation, not swapping)."""
    hist = computed_tokens_history(steps)
    fig, ax = figure_and_axes(ax, (_width(len(steps), 0.2), 3.6))
    xs = [s.step for s in steps]
    styles = ["-", "--", ":", "-."]
    # Requests with identical histories share one line and one label ("A = B"): a line drawn
    # over another would hide it.
    groups: dict[tuple[int | None, ...], list[str]] = {}
    for rid, ys in hist.items():
        groups.setdefault(tuple(ys), []).append(rid)
    for i, (ys, rids) in enumerate(groups.items()):
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                label=" = ".join(rids), linestyle=styles[i % len(styles)], linewidth=1.8)
    px = [s.step for s in steps for _ in s.preempted]
    if px:
        ax.scatter(px, [0] * len(px), marker="x", s=60, color=COLORS["preempted"], zorder=3,
                   label=tr("preempted (back to 0)"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(tr("scheduler step (one schedule() call)"))
    ax.set_ylabel(tr("num_computed_tokens (after step)"))
    ax.set_title(tr("Each request's num_computed_tokens: chunks, decodes, recompute"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


