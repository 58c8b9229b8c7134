"""Pictures for the course. Every function returns a ``matplotlib.figure.Figure`` built
without pyplot, so nothing leaks into pyplot's global figure list and the caller's backend is
left alone: a notebook displays the returned figure, a script calls ``fig.savefig``.

Sections: traces (token budget, KV blocks; no timing), then latency (measured runs: token
arrival times, ITL / TTFT distributions, the budget sweep, step time vs tokens, chunking
overhead, tile effect, and the chunk-size dashboard's picture). Imports no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import ListedColormap, to_rgba
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

from chunkprefill.trace import TraceRequest, TraceStep

# One colour per kind of token work, shared by every trace plot so the legend reads the same.
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
LABELS = {
    "decode": "decode (1 token)",
    "prefill": "prefill (prompt tokens)",
    "recompute": "recompute after preemption",
    "left": "budget left over",
    "absent": "not there",
    "waiting": "waiting in queue",
    "stalled": "running, no tokens this step",
}
_ANNOTATE_MAX_STEPS = 40  # beyond this, numbers in cells are unreadable
_MAX_WIDTH = 16.0  # inches: long traces squeeze their columns instead of growing forever


def _width(num_steps: int, per_step: float = 0.28, extra: float = 2.5) -> float:
    return min(_MAX_WIDTH, max(6.0, per_step * num_steps + extra))


def _figure_and_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """Draw on the caller's axes if given, else on a fresh pyplot-free Figure."""
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


# --------------------------------------------------------------------------- traces


class TokenSplit(NamedTuple):
    """One request's tokens in one step, split by what they compute: ``prefill`` (prompt
    tokens never computed before), ``recompute`` (tokens computed once already, re-run after a
    preemption freed their KV) and ``decode`` (the one fed-back sampled token)."""

    prefill: int
    decode: int
    recompute: int = 0

    @property
    def total(self) -> int:
        return self.prefill + self.decode + self.recompute

    @property
    def kind(self) -> str:
        """The cell's colour: ``"recompute"`` if any token is re-run, else ``"prefill"`` if
        any is prompt work, else ``"decode"``."""
        if self.recompute:
            return "recompute"
        return "prefill" if self.prefill else "decode"


def _prompt_lens(requests: Sequence[TraceRequest] | Mapping[str, int]) -> dict[str, int]:
    if isinstance(requests, Mapping):
        return dict(requests)
    return {r.request_id: r.prompt_len for r in requests}


def split_prefill_decode(
    steps: Sequence[TraceStep], requests: Sequence[TraceRequest] | Mapping[str, int]
) -> list[dict[str, TokenSplit]]:
    """Replay a trace to tell prefill tokens from decode tokens in every cell.

    A ``TraceStep`` only says *how many* tokens a request got; whether they were prompt work
    or a decode depends on its history. Like the scheduler, a token at position ``p`` is a
    decode when ``p >= max(prompt_len, num_tokens - 1)`` (the last sampled token is fed back);
    before that is prefill, or recompute if a preemption threw it away once. ``requests``
    gives the prompt lengths (the ``TraceRequest`` list, or ``{request_id: prompt_len}``).
    Raises ``ValueError`` if the replay contradicts the trace (wrong prompt lengths)."""
    if any(s.step != k for k, s in enumerate(steps)):
        raise ValueError("steps must be run_trace's result or a prefix of it (steps 0, 1, ...): "
                         "telling prefill from decode needs each request's history")
    prompt_len = _prompt_lens(requests)
    computed: dict[str, int] = {}
    outputs: dict[str, int] = {}
    high: dict[str, int] = {}  # computed tokens a preemption threw away
    result: list[dict[str, TokenSplit]] = []
    for s in steps:
        for rid in s.preempted:
            high[rid] = max(high.get(rid, 0), computed.get(rid, 0))
            computed[rid] = 0
        cells: dict[str, TokenSplit] = {}
        for rid, n in s.num_scheduled_tokens.items():
            if rid not in prompt_len:
                raise ValueError(f"no prompt length given for request {rid!r}")
            start = computed.get(rid, 0)
            num_tokens = prompt_len[rid] + outputs.get(rid, 0)
            if start + n > num_tokens:
                raise ValueError(f"step {s.step}: {rid!r} got {n} tokens but owes only "
                                 f"{num_tokens - start}: are the prompt lengths right?")
            prefill_end = max(prompt_len[rid], num_tokens - 1)
            decode = max(0, start + n - max(start, prefill_end))
            recompute = min(max(0, min(start + n, high.get(rid, 0)) - start), n - decode)
            cells[rid] = TokenSplit(n - decode - recompute, decode, recompute)
            computed[rid] = start + n
            if computed[rid] == num_tokens:  # nothing owed: it samples one token
                outputs[rid] = outputs.get(rid, 0) + 1
            elif rid in s.finished:
                raise ValueError(f"step {s.step}: {rid!r} finished mid-prefill in the replay: "
                                 "are the prompt lengths right?")
            if rid in s.num_computed_tokens and s.num_computed_tokens[rid] != computed[rid]:
                raise ValueError(
                    f"step {s.step}: replay has {rid!r} at {computed[rid]} computed tokens, "
                    f"the trace says {s.num_computed_tokens[rid]}: are the prompt lengths right?"
                )
        result.append(cells)
    return result


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
    requests: Sequence[TraceRequest] | Mapping[str, int],
    request_ids: Sequence[str] | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The timeline as data: ``(request_ids, kinds, tokens)``, both arrays shaped
    ``(requests, steps)``. ``kinds`` holds codes into ``TIMELINE_KINDS``: absent (not arrived
    or finished), waiting (queued), stalled (running but given no tokens), or what the
    scheduled tokens computed; ``tokens`` is how many tokens the request got."""
    ids = list(request_ids) if request_ids is not None else _request_order(steps)
    row = {rid: i for i, rid in enumerate(ids)}
    code = {k: i for i, k in enumerate(TIMELINE_KINDS)}
    kinds = np.zeros((len(ids), len(steps)), dtype=np.int8)
    tokens = np.zeros((len(ids), len(steps)), dtype=np.int64)
    for j, (s, cells) in enumerate(zip(steps, split_prefill_decode(steps, requests),
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


class CellNumbers(Artist):
    """Short strings centred on data points, drawn as one artist: the token counts in a
    timeline's cells. Hundreds of ``Text`` artists would each be built, laid out and
    measured; this one measures each distinct string once per draw and hands the renderer
    the strings directly. ``positions`` is ``(n, 2)`` in data coordinates, ``labels`` the n
    strings."""

    def __init__(self, positions: Any, labels: Sequence[str], fontsize: float = 8,
                 color: Any = "white") -> None:
        super().__init__()
        self.positions = np.asarray(positions, dtype=float).reshape(-1, 2)
        self.labels = [str(s) for s in labels]
        if len(self.labels) != len(self.positions):
            raise ValueError("one label per position")
        self.color = to_rgba(color)
        self.prop = FontProperties(size=fontsize)
        self.set_in_layout(False)  # a layout engine need not measure hundreds of labels

    def draw(self, renderer: Any) -> None:
        if not self.get_visible() or not self.labels:
            return
        xy = self.get_transform().transform(self.positions)
        size = {s: renderer.get_text_width_height_descent(s, self.prop, ismath=False)
                for s in set(self.labels)}
        _, canvas_h = renderer.get_canvas_width_height()
        renderer.open_group("cell_numbers", gid=self.get_gid())
        gc = renderer.new_gc()
        gc.set_foreground(self.color, isRGBA=True)
        gc.set_alpha(self.get_alpha())
        self._set_gc_clip(gc)
        for (x, y), s in zip(xy, self.labels, strict=True):
            w, h, d = size[s]
            baseline = y - h / 2 + d  # centred like Text(ha="center", va="center")
            renderer.draw_text(gc, x - w / 2, canvas_h - baseline if renderer.flipy()
                               else baseline, s, self.prop, 0.0, ismath=False)
        gc.restore()
        renderer.close_group("cell_numbers")
        self.stale = False


def _draw_timeline(ax: Axes, steps: Sequence[TraceStep],
                   requests: Sequence[TraceRequest] | Mapping[str, int],
                   request_ids: Sequence[str] | None, annotate: bool | None) -> list[Any]:
    """Draw the timeline on ``ax`` (one image, two line collections for the white gaps, one
    ``CellNumbers``, one scatter for preemptions); returns the legend handles."""
    ids, kinds, tokens = timeline_grid(steps, requests, request_ids)
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
    handles: list[Any] = [Patch(facecolor=COLORS[k], edgecolor="0.6", label=LABELS[k])
                          for k in legend_order if TIMELINE_KINDS.index(k) in present]
    if px:
        handles.append(ax.scatter(px, py, marker="x", s=60, color=COLORS["preempted"],
                                  label="preempted", zorder=3))
    ax.set_yticks(range(len(ids)), ids)
    ax.set_ylim(len(ids) - 0.5, -0.5)  # first request on top, like the table
    ax.set_xlim(-0.5, len(steps) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel("scheduler step (one schedule() call)")
    ax.set_ylabel("request")
    budget = steps[0].token_budget if steps else 0
    ax.set_title(f"Who got how many tokens each step (token budget {budget})")
    return handles


def plot_trace_timeline(
    steps: Sequence[TraceStep],
    requests: Sequence[TraceRequest] | Mapping[str, int],
    request_ids: Sequence[str] | None = None,
    ax: Axes | None = None,
    annotate: bool | None = None,
) -> Figure:
    """The seed's table as a picture: one row per request, one column per step, a coloured
    cell wherever the request got tokens (the number in it is how many). Colour says what
    the tokens were: a prefill chunk, a decode, or a recompute after preemption. A grey cell
    is a request waiting in the queue, a sand one a running request that got no tokens
    (budget spent before its turn); an ``x`` marks a preemption. ``annotate`` (default: when
    there are at most 40 steps) writes the token counts into the cells, as one
    ``CellNumbers`` artist. ``steps`` is a ``run_trace`` result or a prefix of it."""
    n_req = len(request_ids) if request_ids is not None else len(_request_order(steps))
    fig, ax = _figure_and_axes(ax, (_width(len(steps)), 0.45 * n_req + 1.8))
    handles = _draw_timeline(ax, steps, requests, request_ids, annotate)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return fig


def budget_breakdown(
    steps: Sequence[TraceStep], requests: Sequence[TraceRequest] | Mapping[str, int]
) -> dict[str, list[int]]:
    """Per step, the budget split into ``decode``, ``prefill``, ``recompute`` and ``left``
    tokens; the four lists add up to ``token_budget`` at every step."""
    parts: dict[str, list[int]] = {k: [] for k in ("decode", "prefill", "recompute", "left")}
    for s, cells in zip(steps, split_prefill_decode(steps, requests), strict=True):
        parts["decode"].append(sum(c.decode for c in cells.values()))
        parts["prefill"].append(sum(c.prefill for c in cells.values()))
        parts["recompute"].append(sum(c.recompute for c in cells.values()))
        parts["left"].append(s.budget_left)
    return parts


def bar_heights(collection: PolyCollection) -> list[float]:
    """The height of each bar of a ``plot_budget_bars`` layer (its rectangles, in order)."""
    return [float(np.ptp(p.vertices[:, 1])) for p in collection.get_paths()]


def _draw_budget_bars(ax: Axes, steps: Sequence[TraceStep],
                      requests: Sequence[TraceRequest] | Mapping[str, int]) -> None:
    """Draw the stacked bars on ``ax``: one ``PolyCollection`` of rectangles per kind of
    token (labelled ``LABELS[kind]``, one rectangle per step) and the budget line."""
    parts = budget_breakdown(steps, requests)
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
            antialiaseds=not dense, label=LABELS[kind]), autolim=False)
        bottom = top
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if steps:
        budget = steps[0].token_budget
        ax.axhline(budget, color="0.3", linestyle="--", linewidth=1,
                   label="token budget (max_num_batched_tokens)")
        ax.set_xlim(steps[0].step - 0.6, steps[-1].step + 0.6)
        ax.set_ylim(0, budget * 1.08)
        # A few round ticks up to the budget, so that a budget like 16 gets its own tick.
        ticks = MaxNLocator(nbins=4, steps=[1, 2, 4, 5, 10], integer=True).tick_values(0, budget)
        ax.set_yticks([t for t in ticks if t <= budget * 1.08])
    ax.set_xlabel("scheduler step (one schedule() call)")
    ax.set_ylabel("tokens in the step")
    ax.set_title("How each step's token budget is spent")


def plot_budget_bars(
    steps: Sequence[TraceStep],
    requests: Sequence[TraceRequest] | Mapping[str, int],
    ax: Axes | None = None,
) -> Figure:
    """One stacked bar per step: the token budget filled first by decodes, then by prefill
    chunks (and recomputes), with what is left over drawn light. A full bar is a step where
    chunked prefill used every token the budget allows. Each kind of token is one
    ``PolyCollection`` of rectangles, labelled ``LABELS[kind]`` (``bar_heights`` reads it)."""
    fig, ax = _figure_and_axes(ax, (_width(len(steps)), 3.2))
    _draw_budget_bars(ax, steps, requests)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


_OVERVIEW_AXES = ("trace overview: timeline", "trace overview: budget bars")


def plot_trace_overview(
    steps: Sequence[TraceStep],
    requests: Sequence[TraceRequest] | Mapping[str, int],
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
    handles = _draw_timeline(timeline, steps, requests, None, None)
    _draw_budget_bars(bars, steps, requests)
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
    fig, ax = _figure_and_axes(ax, (_width(len(steps), 0.2), 3.2))
    xs = [s.step for s in steps]
    ax.step(xs, [s.num_free_blocks for s in steps], where="mid", color="tab:green",
            marker="o", markersize=3, label="free KV blocks (after the step)")
    if num_blocks is not None:
        ax.axhline(num_blocks, color="0.3", linestyle="--", linewidth=1,
                   label=f"num_blocks = {num_blocks}")
    ax.axhline(0, color="0.6", linewidth=0.8)
    first = True
    for s in steps:
        if s.preempted:
            ax.axvline(s.step, color=COLORS["recompute"], linestyle=":", linewidth=1.5,
                       label="preemption" if first else None)
            ax.annotate("preempt " + ", ".join(s.preempted), (s.step, s.num_free_blocks),
                        xytext=(4, 8), textcoords="offset points", fontsize=8,
                        color=COLORS["recompute"])
            first = False
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("scheduler step (one schedule() call)")
    ax.set_ylabel("free KV blocks")
    ax.set_title("KV cache: free blocks per step; preemption when they run out")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def computed_tokens_history(
    steps: Sequence[TraceStep], requests: Sequence[TraceRequest] | Mapping[str, int]
) -> dict[str, list[int | None]]:
    """``num_computed_tokens`` of every request after every step (None before it arrives or
    after it finished; the finishing step itself is included)."""
    ids = _request_order(steps)
    hist: dict[str, list[int | None]] = {rid: [None] * len(steps) for rid in ids}
    computed: dict[str, int] = {}
    done: set[str] = set()
    for k, (s, cells) in enumerate(zip(steps, split_prefill_decode(steps, requests),
                                       strict=True)):
        for rid in s.preempted:
            computed[rid] = 0
        for rid, cell in cells.items():
            computed[rid] = computed.get(rid, 0) + cell.total
        for rid in computed:
            if rid not in done:
                hist[rid][k] = computed[rid]
        done.update(s.finished)
    return hist


def plot_computed_tokens(
    steps: Sequence[TraceStep],
    requests: Sequence[TraceRequest] | Mapping[str, int],
    ax: Axes | None = None,
) -> Figure:
    """``num_computed_tokens`` per request over the steps. A chunked prefill climbs in
    chunk-sized stairs, a decode by one per step; a preemption drops the line to zero and
    the climb back is the recompute (vLLM V1 preempts by recomputation, not swapping)."""
    hist = computed_tokens_history(steps, requests)
    fig, ax = _figure_and_axes(ax, (_width(len(steps), 0.2), 3.6))
    xs = [s.step for s in steps]
    styles = ["-", "--", ":", "-."]
    for i, (rid, ys) in enumerate(hist.items()):
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        # Thinner lines on top of thicker ones: requests with equal histories stay visible.
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=rid,
                linestyle=styles[i % len(styles)], linewidth=max(1.2, 4.5 - 1.3 * (i % 4)))
    px = [s.step for s in steps for _ in s.preempted]
    if px:
        ax.scatter(px, [0] * len(px), marker="x", s=60, color=COLORS["preempted"], zorder=3,
                   label="preempted (back to 0)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("scheduler step (one schedule() call)")
    ax.set_ylabel("num_computed_tokens (after step)")
    ax.set_title("Each request's num_computed_tokens: chunks, decodes, recompute")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


# --------------------------------------------------------------------------- latency
# Measured runs (notebooks 01, 06, 07). The inputs are plain data: ``RequestMetrics``-like
# objects (``arrival_time``, ``token_times``, ``ttft``, ``itl``), the engine's ``StepRecord``
# list, sweep points with ``budget``/``p99_itl``/``ttft_p50``/``ttft_p99``. Times are seconds
# in, milliseconds on the axes (seconds on a run's time axis).

LONG_COLOR = "tab:orange"
SHORT_COLOR = "tab:blue"
PERCENTILE_STYLE = {50: ("o", "P50"), 90: ("D", "P90"), 99: ("^", "P99")}


def _plain_log_ticks(axis: Any) -> None:
    """Log axis ticks at 1, 2, 5 x 10^k written as plain numbers; no minor ticks (they cost
    draw time and a dashboard redraws often)."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


class _Metrics(Protocol):
    arrival_time: float
    token_times: list[float]


def plot_token_times(
    metrics: Mapping[str, _Metrics],
    highlight: Iterable[str] = (),
    ax: Axes | None = None,
    title: str | None = None,
    t0: float = 0.0,
) -> Figure:
    """Every request's tokens on one time axis: a row per request (in the mapping's order,
    first on top), a tick at each output token, a hollow circle at its arrival and a thin
    line across its wait for the first token (TTFT). The space between two ticks is an
    inter-token latency, so a step that stalls every decode shows as one vertical gap
    through all the rows. ``highlight`` (e.g. the long prompts) is drawn in orange."""
    ids = list(metrics)
    hi = set(highlight)
    fig, ax = _figure_and_axes(ax, (9.0, 0.16 * len(ids) + 1.8))
    colors = [LONG_COLOR if r in hi else SHORT_COLOR for r in ids]
    times = [np.asarray(metrics[r].token_times, dtype=float) - t0 for r in ids]
    ax.eventplot(times, lineoffsets=np.arange(len(ids)), linelengths=0.75, linewidths=1.0,
                 colors=colors)
    arrivals = np.array([metrics[r].arrival_time - t0 for r in ids])
    firsts = np.array([t[0] if len(t) else np.nan for t in times])
    ax.hlines(np.arange(len(ids)), arrivals, firsts, colors=colors, linewidth=0.8, alpha=0.5)
    ax.scatter(arrivals, np.arange(len(ids)), s=14, facecolors="white", edgecolors=colors,
               linewidths=1.0, zorder=3)
    ax.set_ylim(len(ids) - 0.4, -0.6)
    if len(ids) <= 40:
        ax.set_yticks(range(len(ids)), ids, fontsize=7)
    ax.set_xlabel("time (s, engine clock)")
    ax.set_ylabel("request")
    ax.set_title(title or "Token arrival times: a tick per token, gaps are ITL")
    handles = [Patch(color=SHORT_COLOR, label="short request"),
               Line2D([], [], marker="o", ls="-", lw=0.8, color="0.4", mfc="white",
                      label="arrival ... 1st token")]
    if hi:
        handles.insert(1, Patch(color=LONG_COLOR, label="long prompt"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    return fig


def plot_step_tokens(
    step_log: Sequence[Any],
    highlight: Sequence[str] = (),
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The engine's steps on the time axis: each step a bar as wide as it took and as tall
    as the tokens it ran, decode tokens (blue) under prefill tokens (orange). A decode that
    is in a step waits the step's whole width for its next token, so a wide orange block is
    a stall for every decode in it. Each request in ``highlight`` (e.g. the long prompts)
    gets its own colour on top, so you can see which prompts share a step."""
    fig, ax = _figure_and_axes(ax, (9.0, 2.8))
    starts = np.array([s.start_s for s in step_log])
    widths = np.array([s.duration_s for s in step_log])
    own = {rid: np.array([s.num_scheduled_tokens.get(rid, 0) for s in step_log])
           for rid in highlight}
    mine = sum(own.values(), np.zeros(len(step_log), dtype=int))
    dec = np.array([s.num_decode_tokens for s in step_log])
    pre = np.array([s.num_prefill_tokens for s in step_log])
    # Highlighted requests' tokens leave the two generic layers (1-token steps: decodes).
    dec_h = sum(((v == 1) * v for v in own.values()), np.zeros(len(step_log), dtype=int))
    dec, pre = np.maximum(dec - dec_h, 0), np.maximum(pre - (mine - dec_h), 0)
    bottom = np.zeros(len(step_log))
    layers = [(dec, COLORS["decode"], "decode tokens" if highlight else LABELS["decode"]),
              (pre, COLORS["prefill"], "other prefill" if highlight else LABELS["prefill"])]
    palette = ["tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:pink", "tab:cyan"]
    layers += [(v, palette[i % len(palette)], rid) for i, (rid, v) in enumerate(own.items())]
    for heights, color, label in layers:
        if not heights.any() and label != LABELS["decode"]:
            continue
        ax.bar(starts, heights, width=widths, bottom=bottom, align="edge", color=color,
               edgecolor="white", linewidth=0.3, label=label)
        bottom = bottom + heights
    ax.set_xlabel("time (s, engine clock)")
    ax.set_ylabel("tokens in the step")
    ax.set_title(title or "Steps on the clock: width = step time, height = tokens")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def plot_latency_cdf(
    samples: Mapping[str, Sequence[float]],
    metric: str = "ITL",
    ax: Axes | None = None,
    percentiles: Sequence[int] = (50, 99),
    log_x: bool = True,
    colors: Sequence[str] | None = None,
) -> Figure:
    """Empirical CDF of a latency (seconds in, ms on the axis), one curve per label, with
    each curve's percentiles marked and written in the legend. The P99 marker is where the
    tail starts: one long stalled step per 100 gaps is enough to move it."""
    fig, ax = _figure_and_axes(ax, (5.5, 3.4))
    colors = list(colors) if colors is not None else [f"C{i}" for i in range(len(samples))]
    for (label, vals), color in zip(samples.items(), colors, strict=False):
        x = np.sort(np.asarray(vals, dtype=float)) * 1e3
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        marks = {q: float(np.percentile(x, q)) for q in percentiles}
        text = ", ".join(f"P{q} {v:.0f}" for q, v in marks.items())
        ax.step(np.r_[x[0], x], np.r_[0.0, y], where="post", color=color, lw=1.6,
                label=f"{label}: {text} ms")
        for q, v in marks.items():
            ax.plot([v], [q / 100], marker=PERCENTILE_STYLE.get(q, ("s", ""))[0], ms=6,
                    color=color, mec="k", mew=0.6, ls="none", zorder=3)
    for q in percentiles:
        ax.axhline(q / 100, color="0.7", lw=0.7, ls=":")
        ax.text(1.0, q / 100, f" P{q}", transform=ax.get_yaxis_transform(), va="center",
                fontsize=7, color="0.4")
    if log_x:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"{metric} (ms{', log scale' if log_x else ''})")
    ax.set_ylabel("fraction of samples <= x")
    ax.set_title(f"{metric}: cumulative distribution")
    ax.legend(loc="lower right", fontsize=7, frameon=True, framealpha=0.85)
    return fig


def plot_itl_ttft_cdfs(
    itl: Mapping[str, Sequence[float]],
    ttft: Mapping[str, Sequence[float]],
    percentiles: Sequence[int] = (50, 99),
) -> Figure:
    """ITL (pooled gaps) and TTFT (one per request) CDFs side by side, same colours."""
    fig = Figure(figsize=(11.0, 3.6), layout="constrained")
    a, b = fig.subplots(1, 2)
    plot_latency_cdf(itl, "ITL", ax=a, percentiles=percentiles)
    plot_latency_cdf(ttft, "TTFT", ax=b, percentiles=percentiles)
    return fig


class _Point(Protocol):
    budget: int | None
    p99_itl: float
    ttft_p50: float
    ttft_p99: float


def plot_budget_sweep(
    points: Sequence[_Point],
    current: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """The chunk-size trade-off: x = token budget (log2), y = P99 ITL and median / P99 TTFT
    (ms, log). Smaller budgets (smaller chunks) protect the decodes' ITL but spread a long
    prompt over more steps, so TTFT grows; bigger budgets do the opposite. A point with
    ``budget=None`` (chunking off) is drawn at the right edge as its own marker; ``current``
    marks the budget a dashboard shows."""
    fig, ax = _figure_and_axes(ax, (6.2, 3.8))
    chunked = sorted((p for p in points if p.budget is not None), key=lambda p: p.budget)
    off = [p for p in points if p.budget is None]
    series = [("p99_itl", "P99 ITL", "tab:blue", "-", "^"),
              ("ttft_p50", "median TTFT", "tab:orange", "-", "o"),
              ("ttft_p99", "P99 TTFT", "tab:orange", "--", "v")]
    xs = [p.budget for p in chunked]
    for attr, label, color, ls, marker in series:
        if chunked:
            ax.plot(xs, [getattr(p, attr) * 1e3 for p in chunked], ls=ls, marker=marker,
                    color=color, label=label, ms=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.minorticks_off()
    names = [f"{x // 1024}k" if x >= 1024 and x % 1024 == 0 else str(x) for x in xs]
    if xs:
        ax.set_xticks(xs, names)
    if off:
        x_off = (xs[-1] * 2.4) if xs else 1.0
        for attr, _, color, _, marker in series:
            ax.plot([x_off], [getattr(off[0], attr) * 1e3], marker=marker, color=color,
                    mfc="white", ms=7, mew=1.5, ls="none")
        ax.axvline((xs[-1] * 1.55) if xs else 0.5, color="0.6", lw=0.8, ls=":")
        ax.set_xticks([*xs, x_off], [*names, "no\nchunking"])
    if current is not None:
        ax.axvline(current, color="k", lw=1.2, alpha=0.35, zorder=0)
    ax.set_xlabel("token budget per step (max_num_batched_tokens)")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(title or "Chunk-size trade-off (budget sweep)")
    ax.annotate("", xy=(0.03, -0.30), xytext=(0.47, -0.30), xycoords="axes fraction",
                arrowprops={"arrowstyle": "->", "color": "tab:blue"})
    ax.text(0.25, -0.36, "smaller chunks: lower P99 ITL", transform=ax.transAxes,
            ha="center", va="top", fontsize=7, color="tab:blue")
    ax.annotate("", xy=(0.97, -0.30), xytext=(0.53, -0.30), xycoords="axes fraction",
                arrowprops={"arrowstyle": "->", "color": "tab:orange"})
    ax.text(0.75, -0.36, "bigger chunks: lower TTFT", transform=ax.transAxes, ha="center",
            va="top", fontsize=7, color="tab:orange")
    ax.legend(loc="best", fontsize=7, framealpha=0.85)
    return fig


def plot_step_time_vs_tokens(
    token_counts: Sequence[int],
    seconds: Sequence[float],
    timing_label: str,
    ax: Axes | None = None,
) -> Figure:
    """Step time against the tokens in the step, log-log, with the fitted flat part (fixed
    cost per step) and linear part (cost per token) and their crossing. ``timing_label``
    says what clock measured it (e.g. "CPU, perf_counter"): it goes into the title."""
    from chunkprefill.experiments import fit_step_time

    n = np.asarray(token_counts, dtype=float)
    t = np.asarray(seconds, dtype=float) * 1e3
    fixed, slope = fit_step_time(n, t / 1e3)
    knee = fixed / slope
    fig, ax = _figure_and_axes(ax, (6.4, 3.8))
    ax.plot(n, t, "o-", color="k", label="measured step time", zorder=3)
    grid = np.geomspace(max(1.0, n.min()), n.max(), 100)
    ax.plot(grid, np.full_like(grid, fixed * 1e3), "--", color="tab:green",
            label=f"flat: {fixed * 1e3:.1f} ms per step (fixed costs)")
    ax.plot(grid, slope * grid * 1e3, "--", color="tab:red",
            label=f"linear: {slope * 1e6:.0f} us per token (arithmetic)")
    ax.axvline(knee, color="0.5", lw=0.8, ls=":")
    ax.text(knee, 0.03, f" knee ~{knee:.0f} tokens", transform=ax.get_xaxis_transform(),
            fontsize=8, va="bottom", color="0.3")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel("tokens in the step (log scale)")
    ax.set_ylabel("step time (ms, log)")
    ax.set_title(f"Step time vs tokens [{timing_label}]")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def plot_chunking_overhead(
    ratios: Mapping[int, float],
    prompt_len: int,
    timing_label: str,
    ax: Axes | None = None,
) -> Figure:
    """Total prefill time of one prompt cut into chunks, over its unchunked time, per chunk
    size. Above 1: each chunk re-reads the KV of the chunks before it and pays the fixed
    per-step costs again; the smaller the chunk, the more often."""
    fig, ax = _figure_and_axes(ax, (5.6, 3.4))
    sizes = list(ratios)
    vals = [ratios[c] for c in sizes]
    bars_ = ax.bar([str(c) for c in sizes], vals, color="tab:purple", alpha=0.8)
    ax.bar_label(bars_, [f"{v:.2f}x" for v in vals], fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("chunk size (tokens)")
    ax.set_ylabel("chunked / unchunked time")
    ax.set_ylim(0, max([*vals, 1.0]) * 1.2)
    ax.set_title(f"Chunking overhead, {prompt_len}-token prompt [{timing_label}]")
    return fig


def plot_tile_effect(
    token_counts: Sequence[int],
    seconds: Sequence[float],
    timing_label: str,
    tile: int = 64,
    ax: Axes | None = None,
) -> Figure:
    """Time per token for chunk sizes around a multiple of the kernel tile: on a GPU a chunk
    one token past a multiple of the tile pays for a whole extra, mostly empty tile."""
    fig, ax = _figure_and_axes(ax, (5.6, 3.4))
    n = np.asarray(token_counts)
    per = np.asarray(seconds, dtype=float) / n * 1e6
    ax.plot(n, per, "o-", color="tab:brown")
    for m in range(int(n.min()) // tile * tile + tile, int(n.max()) + 1, tile):
        ax.axvline(m, color="0.6", lw=0.8, ls=":")
        ax.text(m, per.max(), f" {m}", fontsize=7, va="top", color="0.4")
    ax.set_xlabel("tokens in the step")
    ax.set_ylabel("us per token")
    ax.set_title(f"Tile effect: cost per token near multiples of {tile} [{timing_label}]")
    return fig


def plot_chunk_dashboard(
    metrics: Mapping[str, _Metrics],
    long_ids: Iterable[str],
    points: Sequence[_Point],
    current: int | None,
    itl: Mapping[str, Sequence[float]],
    ttft: Mapping[str, Sequence[float]],
    title: str = "",
) -> Figure:
    """The chunk-size dashboard's picture: the budget sweep with the current budget marked,
    ITL and TTFT CDFs (this run against a reference), and this run's token arrival times.
    Laid out by hand (no constrained layout) so a slider redraw stays fast."""
    fig = Figure(figsize=(13.0, 7.6))
    gs = fig.add_gridspec(2, 3, height_ratios=[1.0, 1.15], left=0.05, right=0.87,
                          top=0.92, bottom=0.07, hspace=0.55, wspace=0.42)
    plot_budget_sweep(points, current, ax=fig.add_subplot(gs[0, 0]))
    plot_latency_cdf(itl, "ITL", ax=fig.add_subplot(gs[0, 1]))
    plot_latency_cdf(ttft, "TTFT", ax=fig.add_subplot(gs[0, 2]))
    plot_token_times(metrics, long_ids, ax=fig.add_subplot(gs[1, :]))
    fig.suptitle(title, fontsize=11, x=0.46)
    return fig
