"""Pictures of measured runs (notebooks 01, 07, 08). The inputs are plain data:
``RequestMetrics``-like objects (``arrival_time``, ``token_times``, ``ttft``, ``itl``), the
engine's ``StepRecord`` list, sweep points. Times are seconds in, milliseconds on the axes
(seconds on a run's time axis)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from chunkprefill.course.plots.style import COLORS, LABELS, figure_and_axes
from chunkprefill.i18n import tr

LONG_COLOR = "tab:orange"
SHORT_COLOR = "tab:blue"
# Highlighted long prompts, one shade each, all in LONG_COLOR's family (orange to brown), so a
# notebook that shows the same prompts as steps and as token rows keeps one colour for them.
LONG_SHADES = (LONG_COLOR, "#a63603", "#fdae6b", "#7f2704", "#fd8d3c", "#d94801")
SHORT_PREFILL_COLOR = "#9ecae1"  # short requests' prompts: SHORT_COLOR's family, lighter
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
    fig, ax = figure_and_axes(ax, (9.0, 0.16 * len(ids) + 1.8))
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
    ax.set_xlabel(tr("time (s, engine clock)"))
    ax.set_ylabel(tr("request"))
    ax.set_title(title or tr("Token arrival times: a tick per token, gaps are ITL"))
    handles = [Patch(color=SHORT_COLOR, label=tr("short request")),
               Line2D([], [], marker="o", ls="-", lw=0.8, color="0.4", mfc="white",
                      label=tr("arrival ... 1st token"))]
    if hi:
        handles.insert(1, Patch(color=LONG_COLOR, label=tr("long prompt")))
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
    a stall for every decode in it. With ``highlight`` (e.g. the long prompts) the colours
    follow ``plot_token_times``: short requests' tokens in blue shades, each highlighted
    request in its own shade of ``LONG_COLOR`` on top, so you can see which prompts share a
    step and still know them for the long prompts of the other plots."""
    fig, ax = figure_and_axes(ax, (9.0, 2.8))
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
    if highlight:  # short requests in blue shades, the highlighted prompts in orange shades
        layers = [(dec, SHORT_COLOR, tr("decode tokens")),
                  (pre, SHORT_PREFILL_COLOR, tr("other prefill"))]
        layers += [(v, LONG_SHADES[i % len(LONG_SHADES)], rid)
                   for i, (rid, v) in enumerate(own.items())]
    else:
        layers = [(dec, COLORS["decode"], tr(LABELS["decode"])),
                  (pre, COLORS["prefill"], tr(LABELS["prefill"]))]
    for heights, color, label in layers:
        if not heights.any() and label != tr(LABELS["decode"]):
            continue
        ax.bar(starts, heights, width=widths, bottom=bottom, align="edge", color=color,
               edgecolor="white", linewidth=0.3, label=label)
        bottom = bottom + heights
    ax.set_xlabel(tr("time (s, engine clock)"))
    ax.set_ylabel(tr("tokens in the step"))
    ax.set_title(title or tr("Steps on the clock: width = step time, height = tokens"))
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
    fig, ax = figure_and_axes(ax, (5.5, 3.4))
    colors = list(colors) if colors is not None else [f"C{i}" for i in range(len(samples))]
    for i, ((label, vals), color) in enumerate(zip(samples.items(), colors, strict=False)):
        x = np.sort(np.asarray(vals, dtype=float)) * 1e3
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        marks = {q: float(np.percentile(x, q)) for q in percentiles}
        text = ", ".join(f"P{q} {v:.0f}" for q, v in marks.items())
        ax.step(np.r_[x[0], x], np.r_[0.0, y], where="post", color=color, lw=1.6,
                label=tr("{label}: {text} ms", label=label, text=text))
        for q, v in marks.items():
            # each later curve's marker smaller and on top: equal percentiles stay visible
            ax.plot([v], [q / 100], marker=PERCENTILE_STYLE.get(q, ("s", ""))[0],
                    ms=max(8.0 - 2.5 * i, 3.0), color=color, mec="k", mew=0.6, ls="none",
                    zorder=3 + i)
    for q in percentiles:
        ax.axhline(q / 100, color="0.7", lw=0.7, ls=":")
        ax.text(1.0, q / 100, f" P{q}", transform=ax.get_yaxis_transform(), va="center",
                fontsize=7, color="0.4")
    if log_x:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(tr("{metric} (ms, log scale)", metric=metric) if log_x
                  else tr("{metric} (ms)", metric=metric))
    ax.set_ylabel(tr("fraction of samples <= x"))
    ax.set_title(tr("{metric}: cumulative distribution", metric=metric))
    ax.legend(loc="lower right", fontsize=7, frameon=True, framealpha=0.85)
    return fig


class _Point(Protocol):
    budget: int | None
    p99_itl: float
    ttft_p50: float
    long_ttft: float


def plot_budget_sweep(
    points: Sequence[_Point],
    current: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """One run per budget of a serving workload (the dashboard's sweep): x = token budget
    (log2), y = P99 ITL, the long prompts' median TTFT and every request's median TTFT (ms,
    log). A point with ``budget=None`` (chunking off) is drawn at the right edge as its own
    hollow marker; ``current`` marks the budget a dashboard shows. Single runs: no claim of a
    trend is drawn on it (``plot_tradeoff`` shows the repeated, controlled sweep)."""
    fig, ax = figure_and_axes(ax, (6.2, 3.8))
    chunked = sorted((p for p in points if p.budget is not None), key=lambda p: p.budget)
    off = [p for p in points if p.budget is None]
    series = [("p99_itl", tr("P99 ITL (all gaps)"), "tab:blue", "-", "^"),
              ("long_ttft", tr("long prompts' TTFT (median)"), "tab:red", "-", "s"),
              ("ttft_p50", tr("median TTFT (all requests)"), "tab:orange", "--", "o")]
    series = [x for x in series if all(np.isfinite(getattr(p, x[0])) for p in points)]
    xs = [p.budget for p in chunked]
    # each series nudged a tenth of an octave sideways: equal values cannot hide a marker
    dodge = 2.0 ** (0.1 * (np.arange(len(series)) - (len(series) - 1) / 2))
    for (attr, label, color, ls, marker), dx in zip(series, dodge, strict=True):
        if chunked:
            ax.plot([x * dx for x in xs], [getattr(p, attr) * 1e3 for p in chunked], ls=ls,
                    marker=marker, color=color, label=label, ms=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.minorticks_off()
    names = [f"{x // 1024}k" if x >= 1024 and x % 1024 == 0 else str(x) for x in xs]
    if xs:
        ax.set_xticks(xs, names)
    if off:
        x_off = (xs[-1] * 2.4) if xs else 1.0
        # side by side (a quarter octave apart), so equal values cannot hide one another
        spread = 2.0 ** (0.25 * (np.arange(len(series)) - (len(series) - 1) / 2))
        for (attr, _, color, _, marker), dx in zip(series, spread, strict=True):
            ax.plot([x_off * dx], [getattr(off[0], attr) * 1e3], marker=marker, color=color,
                    mfc="white", ms=7, mew=1.5, ls="none")
        ax.axvline((xs[-1] * 1.55) if xs else 0.5, color="0.6", lw=0.8, ls=":")
        ax.set_xticks([*xs, x_off], [*names, tr("no\nchunking")])
    if current is not None:
        ax.axvline(current, color="k", lw=1.2, alpha=0.35, zorder=0)
    ax.set_xlabel(tr("token budget per step (max_num_batched_tokens)"))
    ax.set_ylabel(tr("ms (log scale)"))
    ax.set_title(title or tr("Budget sweep: one run per budget"))
    # below the axes: inside, every corner of a sweep holds some curve's points
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=7,
              frameon=False, handlelength=1.6, columnspacing=1.0)
    return fig


class _TradeoffPoint(Protocol):
    budget: int
    num_chunks: int
    long_ttft_ci: Any  # Estimate
    p99_itl_ci: Any  # Estimate


def plot_tradeoff(points: Sequence[_TradeoffPoint], timing_label: str,
                  title: str | None = None) -> Figure:
    """The article's trade-off, measured: per token budget, the long prompt's own TTFT (left)
    and the decodes' P99 ITL (right), medians over repeats with their 95% intervals. The
    x ticks name the budget and how many chunks the prompt took."""
    fig = Figure(figsize=(10.5, 3.7), layout="constrained")
    left, right = fig.subplots(1, 2, sharex=True)
    pts = sorted(points, key=lambda p: p.budget)
    xs = [p.budget for p in pts]
    for ax, attr, color, name in ((left, "long_ttft_ci", "tab:red", tr("long prompt's TTFT")),
                                  (right, "p99_itl_ci", "tab:blue", tr("decodes' P99 ITL"))):
        mid, err = _mid_and_err([getattr(p, attr) for p in pts], 1e3)
        ax.errorbar(xs, mid, yerr=err, fmt="o-", color=color, ms=4, capsize=3, lw=1.2)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{p.budget}\n({p.num_chunks})" for p in pts], fontsize=7)
        ax.minorticks_off()
        ax.set_ylim(0, max(mid + err[1]) * 1.1)
        ax.set_ylabel(tr("{name} (ms)", name=name))
        ax.set_title(tr("{name}: median, 95% interval", name=name), fontsize=9)
        ax.set_xlabel(tr("token budget (chunks the prompt took)"))
    fig.suptitle(title or tr("Only the budget changes [{clock}]", clock=timing_label), fontsize=10)
    return fig


def _mid_and_err(values: Sequence[Any], scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Medians and asymmetric error bars of ``Estimate``-like values (``median``, ``low``,
    ``high``); plain numbers get no bar."""
    mid = np.array([getattr(v, "median", v) for v in values], dtype=float) * scale
    lo = np.array([getattr(v, "low", getattr(v, "median", v)) for v in values]) * scale
    hi = np.array([getattr(v, "high", getattr(v, "median", v)) for v in values]) * scale
    return mid, np.stack([mid - lo, hi - mid])


def plot_step_time_vs_tokens(
    token_counts: Sequence[int],
    seconds: Sequence[Any],
    timing_label: str,
    ax: Axes | None = None,
) -> Figure:
    """Step time against the tokens in the step, log-log: medians with their intervals
    (``Estimate`` values or plain seconds), and the line ``fixed + per_token * n`` fitted over the
    whole range (``lab.fit_step_time``), with the step size where its two parts are
    equal. ``timing_label`` names the clock; it goes into the title."""
    from chunkprefill.lab.step_cost import fit_step_time

    n = np.asarray(token_counts, dtype=float)
    t, err = _mid_and_err(seconds, 1e3)
    fixed, slope = fit_step_time(n, t / 1e3)
    knee = fixed / slope
    fig, ax = figure_and_axes(ax, (6.4, 3.8))
    ax.errorbar(n, t, yerr=err, fmt="o", color="k", ms=4, capsize=2,
                label=tr("measured (median, 95% interval)"), zorder=3)
    grid = np.geomspace(max(1.0, n.min()), n.max(), 100)
    ax.plot(grid, (fixed + slope * grid) * 1e3, "-", color="tab:red", lw=1.2,
            label=tr("fit: {fixed_ms:.1f} ms + {per_token_us:.0f} us x tokens",
                     fixed_ms=fixed * 1e3, per_token_us=slope * 1e6))
    ax.axvline(knee, color="0.5", lw=0.8, ls=":")
    ax.text(knee, 0.03, tr(" parts equal at {tokens:.0f} tokens", tokens=knee),
            transform=ax.get_xaxis_transform(),
            fontsize=8, va="bottom", color="0.3")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(tr("tokens in the step (log scale)"))
    ax.set_ylabel(tr("step time (ms, log)"))
    ax.set_title(tr("Step time vs tokens\n[{clock}]", clock=timing_label), fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def plot_chunking_overhead(
    ratios: Mapping[int, Any],
    prompt_len: int,
    timing_label: str,
    ax: Axes | None = None,
) -> Figure:
    """Total prefill time of one prompt cut into chunks, over its unchunked time, per chunk
    size (``Estimate`` values with their intervals, or plain ratios). Above 1: each chunk re-reads
    the KV of the chunks before it and pays the fixed per-step costs again."""
    fig, ax = figure_and_axes(ax, (5.6, 3.4))
    sizes = list(ratios)
    vals, err = _mid_and_err([ratios[c] for c in sizes])
    bars_ = ax.bar([str(c) for c in sizes], vals, color="tab:purple", alpha=0.8)
    if np.any(err):
        ax.errorbar(range(len(sizes)), vals, yerr=err, fmt="none", ecolor="k", capsize=3)
    ax.bar_label(bars_, [f"{v:.2f}x" for v in vals], fontsize=8, label_type="center",
                 color="white")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel(tr("chunk size (tokens)"))
    ax.set_ylabel(tr("chunked / unchunked time"))
    ax.set_ylim(0, max([*(vals + err[1]), 1.0]) * 1.15)
    ax.set_title(tr("Chunking overhead, {prompt_len}-token prompt, measured here\n[{clock}]",
                    prompt_len=prompt_len, clock=timing_label), fontsize=9)
    return fig


def plot_tile_effect(
    token_counts: Sequence[int],
    seconds: Sequence[Any],
    timing_label: str,
    tile: int = 64,
    ax: Axes | None = None,
) -> Figure:
    """Time per token for chunk sizes around a multiple of the kernel tile (``Estimate`` values or
    seconds): on a GPU a chunk one token past a multiple of the tile is expected to pay for a
    whole extra, mostly empty tile; a CPU's matrix kernels block in small tiles."""
    fig, ax = figure_and_axes(ax, (6.0, 3.4))
    n = np.asarray(token_counts, dtype=float)
    mid, err = _mid_and_err(seconds, 1e6)
    ax.errorbar(n, mid / n, yerr=err / n, fmt="o-", color="tab:brown", ms=4, capsize=2)
    for m in range(int(n.min()) // tile * tile + tile, int(n.max()) + 1, tile):
        ax.axvline(m, color="0.6", lw=0.8, ls=":")
        ax.text(m, 0.97, f" {m}", fontsize=7, va="top", color="0.4",
                transform=ax.get_xaxis_transform())
    ax.set_ylim(0, max((mid + err[1]) / n) * 1.15)
    ax.set_xlabel(tr("tokens in the step"))
    ax.set_ylabel(tr("us per token (median, 95% interval)"))
    ax.set_title(tr("Cost per token near multiples of {tile}, measured here\n[{clock}]",
                    tile=tile, clock=timing_label), fontsize=9)
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
                          top=0.92, bottom=0.07, hspace=0.75, wspace=0.42)
    plot_budget_sweep(points, current, ax=fig.add_subplot(gs[0, 0]))
    plot_latency_cdf(itl, "ITL", ax=fig.add_subplot(gs[0, 1]))
    plot_latency_cdf(ttft, "TTFT", ax=fig.add_subplot(gs[0, 2]))
    plot_token_times(metrics, long_ids, ax=fig.add_subplot(gs[1, :]))
    fig.suptitle(title, fontsize=11, x=0.46)
    return fig


HERE_COLOR = "k"
A100_COLOR = "tab:blue"


def _figure2(batches: Sequence[Any], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, seconds) of the authors' figure-2 batches of one kind: "prompt" (prefill-only,
    in tokens) or "decode" (decode-only, in requests), sorted by size."""
    rows = sorted((b.num_prefill_tokens if kind == "prompt" else b.num_decodes, b.seconds)
                  for b in batches if b.source == "figure 2"
                  and (b.num_decodes == 0 if kind == "prompt" else b.num_prefill_tokens == 0))
    return np.array([r[0] for r in rows], float), np.array([r[1] for r in rows], float)


def plot_steps_beside_a100(
    here_prompt: tuple[Sequence[int], Sequence[Any]] | None,
    here_decodes: tuple[Sequence[int], Sequence[Any]],
    a100_batches: Sequence[Any],
    here_label: str,
    knees: Mapping[str, float] | None = None,
    fits: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """This machine's step times beside the A100 batch times the Sarathi-Serve authors
    measured (``chunkprefill.data.sarathi_serve_batches()``, figure 2: Yi-34B, TP 2, two A100
    80GB PCIe), each divided by its own machine's lone-decode step, so the shapes compare
    although the models differ. Left: one prompt of n tokens per step (skipped when
    ``here_prompt`` is None); right: n decodes per step. ``here_*`` are ``(sizes, times)``
    with ``Estimate`` values or seconds; ``here_decodes`` must hold a batch of 1. ``knees`` draws
    each machine's expected roofline knee (tokens) on the left panel, ``fits`` each machine's
    fitted ``(fixed_s, per_token_s)`` line; their keys are "here" and "A100"."""
    sizes_d, here_d = here_decodes
    if 1 not in list(sizes_d):
        raise ValueError("here_decodes must include a batch of 1 decode (the reference step)")
    here_one = _mid_and_err(here_d, 1e3)[0][list(sizes_d).index(1)]
    a100_d = _figure2(a100_batches, "decode")
    a100_one = a100_d[1][list(a100_d[0]).index(1)] * 1e3
    ncols = 1 if here_prompt is None else 2
    fig = Figure(figsize=(max(6.4, 5.2 * ncols), 4.3), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(1, ncols, sharey=True)))
    labels = {"here": tr("this machine, measured here"),
              "A100": tr("2 x A100 80GB PCIe, Yi-34B: measured by the Sarathi-Serve authors")}
    panels = [] if here_prompt is None else [("prompt", here_prompt, axes[0])]
    panels.append(("decode", here_decodes, axes[-1]))
    for kind, (sizes, times), ax in panels:
        mid, err = _mid_and_err(times, 1e3)
        ax.errorbar(np.asarray(sizes, float), mid / here_one, yerr=err / here_one, fmt="o-",
                    color=HERE_COLOR, ms=4, lw=1.0, capsize=2, label=labels["here"])
        n, s = _figure2(a100_batches, kind)
        if kind == "prompt":  # its 1-token step is the lone decode (hollow), as on the right
            ax.plot([1, n[0]], [1.0, s[0] * 1e3 / a100_one], ":", color=A100_COLOR, lw=1.0)
            ax.plot([1], [1.0], "s", color=A100_COLOR, mfc="white", ms=5)
        ax.plot(n, s * 1e3 / a100_one, "s-", color=A100_COLOR, ms=5, lw=1.0,
                label=labels["A100"])
        ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        _plain_log_ticks(ax.yaxis)
        ax.set_xlabel(tr("prompt tokens in the step (one prompt)") if kind == "prompt"
                     else tr("decodes in the step (one token each)"))
    ax0 = axes[0]
    ax0.set_ylabel(tr("step time / the same machine's 1-decode step"))
    if here_prompt is not None:
        top = axes[0]
        ends = {"here": max(here_prompt[0]), "A100": _figure2(a100_batches, "prompt")[0].max()}
        for key, color in (("here", HERE_COLOR), ("A100", A100_COLOR)):
            if fits and key in fits:
                fixed, per = fits[key]
                grid = np.geomspace(1, ends[key], 100)
                one = here_one if key == "here" else a100_one
                top.plot(grid, (fixed + per * grid) * 1e3 / one, "--", color=color, lw=0.8,
                         alpha=0.7)
            if knees and key in knees:
                top.axvline(knees[key], color=color, lw=1.0, ls=":")
                top.text(knees[key], 0.97, tr("expected knee: {tokens:.0f}", tokens=knees[key]),
                         transform=top.get_xaxis_transform(), fontsize=7, va="top",
                         color=color, rotation=90)
        top.set_title(tr("One prompt per step (dashed: fixed + per-token fit)"), fontsize=9)
    axes[-1].set_title(tr("Decode-only steps"), fontsize=9)
    handles, names = axes[-1].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=ncols, fontsize=8, frameon=False)
    fig.suptitle(tr("Step time against its work, each machine over its own 1-decode step\n"
                    "[here: {clock}]", clock=here_label), fontsize=9)
    return fig


def plot_chunking_overhead_beside_a100(
    ratios: Mapping[int, Any],
    prompt_len: int,
    timing_label: str,
    a100_chunked: Sequence[Any],
) -> Figure:
    """Left: this machine's chunked / unchunked prefill time per chunk size
    (``plot_chunking_overhead``). Right: the same ratio the Sarathi-Serve authors measured on
    two A100s (``chunkprefill.data.sarathi_serve_chunked_prefills()``, figure 9: Yi-34B, one
    prompt of 2K-16K tokens alone, chunks of 512-2048), one marker per prompt length."""
    fig = Figure(figsize=(10.6, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    plot_chunking_overhead(ratios, prompt_len, timing_label, ax=left)
    chunks = sorted({m.chunk_size for m in a100_chunked if m.chunk_size < m.prompt_len})
    for i, prompt in enumerate(sorted({m.prompt_len for m in a100_chunked})):
        rel = {m.chunk_size: m.relative for m in a100_chunked
               if m.prompt_len == prompt and m.chunk_size < m.prompt_len}  # else one piece
        xs = [j + 0.12 * (i - 1.5) for j, c in enumerate(chunks) if c in rel]
        right.plot(xs, [rel[c] for c in chunks if c in rel], "os^D"[i % 4], color=f"C{i}", ms=6,
                   ls="none", label=tr("prompt of {tokens} tokens", tokens=prompt))
    right.axhline(1.0, color="k", lw=0.8)
    right.set_xticks(range(len(chunks)), [str(c) for c in chunks])
    right.set_xlabel(tr("chunk size (tokens)"))
    right.set_ylabel(tr("chunked / unchunked time"))
    right.set_ylim(0, max(left.get_ylim()[1], 1.4))
    right.set_title(tr("2 x A100, Yi-34B: measured by the Sarathi-Serve authors (figure 9)"),
                    fontsize=9)
    right.legend(loc="lower left", fontsize=7, ncol=2)
    return fig
