"""Pictures of simulated runs: the cost model's step time, budget sweeps,
chunking overhead, step-time and token-gap timelines, capacity, and the calibrated model
beside the measurements it was fitted on or held out from. Inputs are the simulator's results
(``sim.SimResult``, sweep rows, capacities) or a ``sim.CostModel``; every title says
SIMULATED (and MEASURED, by whom, where measurements are drawn). Not re-exported by
``chunkprefill.course.plots``: three names match the measured plots of ``plots.measured``,
so import this module (``from chunkprefill.course.plots import simulated as sim_plots``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from chunkprefill.course.plots.style import figure_and_axes
from chunkprefill.i18n import N_, tr
from chunkprefill.sim import Calibration, CostModel, SimResult, chunking_overhead

# The parts of a predicted step (``CostModel.step_breakdown`` keys), as the legend names them.
_PART_LABELS = {"linear": N_("linear"), "attention": N_("attention"), "overhead": N_("overhead"),
                "communication": N_("communication"), "total": N_("total")}
# The measured batches' sources (``SarathiServeBatch.source``), as the legend names them.
_SOURCE_LABELS = {"figure 2": N_("figure 2"), "table-2 folder": N_("table-2 folder")}


_BUDGET_KEY = re.compile(r"(?P<style>\w+) \(budget (?P<budget>\d+)\)")


def _result_label(key: str) -> str:
    """A result's key as a legend shows it: ``mixed (budget 2048)`` (``sim.compare_batching``)
    in the reader's language; any other key as it is."""
    m = _BUDGET_KEY.fullmatch(key)
    return tr("{style} (budget {budget})", style=m["style"], budget=int(m["budget"])) if m \
        else key


def _source_label(source: str) -> str:
    return tr(_SOURCE_LABELS[source]) if source in _SOURCE_LABELS else source


def plot_step_time_vs_tokens(cost_model: CostModel, max_tokens: int = 8192,
                             context_len: int = 0, ax: Axes | None = None) -> Figure:
    """Predicted step time of one prefill chunk of T tokens, split into its components:
    flat while weight reads dominate (memory bound), then linear in T (compute bound)."""
    fig, ax = figure_and_axes(ax, (6.4, 3.6))
    ts = np.unique(np.geomspace(1, max_tokens, 64).astype(int))
    parts = [cost_model.step_breakdown([(int(t), context_len)]) for t in ts]
    for key in ("linear", "attention", "overhead", "communication"):
        vals = np.array([p[key] for p in parts]) * 1e3
        if vals.any():
            # on top of the total they make up
            ax.plot(ts, vals, label=tr(_PART_LABELS[key]), lw=1, zorder=3)
    ax.plot(ts, np.array([p["total"] for p in parts]) * 1e3, "k", lw=2.5,
            label=tr(_PART_LABELS["total"]), zorder=2)
    m, hw = cost_model.model, cost_model.hardware
    ridge = (hw.ridge_point * cost_model.linear_efficiency / cost_model.bandwidth_efficiency
             * m.bytes_per_param / 2)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    # x in data, y in axes fraction: the note stays inside the axes whatever the scale
    ax.text(ridge, 0.97, tr(" ~{tokens:.0f} tokens:\n compute bound", tokens=ridge), fontsize=8,
            va="top", transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(tr("tokens in the step"))
    ax.set_ylabel(tr("predicted step time (ms)"))
    ax.set_title(tr("SIMULATED: {model} on {hardware}, context {context_len}", model=m.name,
                    hardware=hw.name, context_len=context_len))
    ax.legend(fontsize=8)
    return fig


def _two_axes(axes: Sequence[Axes] | None, figsize: tuple[float, float],
              **kw: Any) -> tuple[Figure, Sequence[Axes]]:
    """Draw on the caller's two axes if given, else on a fresh pyplot-free Figure."""
    if axes is not None:
        return axes[0].figure, axes  # type: ignore[return-value]
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(1, 2, **kw)


def plot_budget_sweep(rows: Sequence[Mapping[str, Any]], slo_s: float | None = None,
                      axes: Sequence[Axes] | None = None) -> Figure:
    """P99 TBT and median TTFT vs token budget (``batching="mixed"``), prefill-first as a
    line (``sim.sweep_budgets`` rows)."""
    fig, axes = _two_axes(axes, (10, 3.6))
    ch = [r for r in rows if r["batching"] == "mixed"]
    pf = [r for r in rows if r["batching"] == "prefill_first"]
    for ax, key, label in ((axes[0], "p99_itl_s", tr("P99 TBT (ms)")),
                           (axes[1], "median_ttft_s", tr("median TTFT (ms)"))):
        ax.plot([r["budget"] for r in ch], [r[key] * 1e3 for r in ch], "o-", label="mixed",
                color=batching_color("mixed"))
        span = [min(r["budget"] for r in ch), max(r["budget"] for r in ch)] if ch else [1, 2]
        for r in pf:  # a line over the swept budgets (not axhline): the y range includes it
            ax.plot(span, [r[key] * 1e3] * 2, color=batching_color("prefill_first"), ls="--",
                    label="prefill_first")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(tr("token budget (max_num_batched_tokens)"))
        ax.set_ylabel(label)
        ax.set_title(tr("SIMULATED {label}", label=label))
    if slo_s is not None:
        axes[0].axhline(slo_s * 1e3, color="k", ls=":", label=tr("strict SLO"))
    axes[0].legend(fontsize=8)
    return fig


def plot_chunking_overhead(cost_model: CostModel, prompt_len: int = 8192,
                           chunk_sizes: Sequence[int] = (64, 128, 256, 512, 1024, 2048, 4096,
                                                         8192),
                           ax: Axes | None = None) -> Figure:
    """Prefill time of one long prompt in chunks / in one piece (predicted)."""
    fig, ax = figure_and_axes(ax, (6.4, 3.6))
    sizes = [s for s in chunk_sizes if s <= prompt_len]
    ratio = chunking_overhead(cost_model, prompt_len, sizes)
    ax.plot(sizes, ratio, "o-")
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(tr("chunk size (tokens)"))
    ax.set_ylabel(tr("prefill time / unchunked"))
    ax.set_title(tr("SIMULATED chunking overhead: {prompt_len}-token prompt, {model} on "
                    "{hardware}", prompt_len=prompt_len, model=cost_model.model.name,
                    hardware=cost_model.hardware.name), fontsize=9)
    return fig


# One colour per batching style in every simulated plot (labels start with the style's name).
BATCHING_COLORS = {"mixed": "tab:blue", "prefill_or_decode": "tab:green",
                   "prefill_first": "tab:orange"}


def batching_color(label: str, i: int = 0) -> str:
    """The style's colour (``BATCHING_COLORS``, by the label's first word), else ``C{i}``."""
    for name, color in BATCHING_COLORS.items():
        if label.startswith(name):
            return color
    return f"C{i}"


def plot_tbt_timeline(results: Mapping[str, SimResult], slo_s: float | None = None,
                      ax: Axes | Sequence[Axes] | None = None) -> Figure:
    """Each step's duration over (simulated) time: prefill-first's spikes are generation
    stalls every running request sees as one long gap. One panel per batching style (shared axes),
    so no style's line hides under another's; a single ``ax`` overlays them, each later
    line thinner and on top."""
    n = len(results)
    if ax is None:
        fig = Figure(figsize=(10, 0.6 + 1.7 * n), layout="constrained")
        axes = list(np.atleast_1d(fig.subplots(n, 1, sharex=True, sharey=True)))
    elif isinstance(ax, Axes):
        fig, axes = ax.figure, [ax] * n
    else:
        fig, axes = ax[0].figure, list(ax)
    for i, ((label, r), a) in enumerate(zip(results.items(), axes, strict=True)):
        log = [s for s in r.step_log if s.num_scheduled_tokens]
        a.plot([s.start_s for s in log], [s.duration_s * 1e3 for s in log],
               lw=max(1.6 - 0.6 * i, 0.5) if axes.count(a) > 1 else 0.8, zorder=2 + i,
               color=batching_color(label, i),
               label=tr("{label}: P99 TBT {p99_ms:.0f} ms", label=_result_label(label),
                        p99_ms=r.p99_itl * 1e3))
    for a in dict.fromkeys(axes):
        if slo_s is not None:
            a.axhline(slo_s * 1e3, color="k", ls=":", label=tr("SLO"))
        a.set_ylabel(tr("step time (ms)"))
        a.set_yscale("log")
        a.legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel(tr("simulated time (s)"))
    axes[0].set_title(tr("SIMULATED step times"))
    return fig


def plot_capacity(capacities: Mapping[str, Mapping[str, float]],
                  ax: Axes | None = None) -> Figure:
    """Bar chart: capacity (QPS) per batching style, for each SLO. ``capacities[slo][batching]``."""
    fig, ax = figure_and_axes(ax, (6.4, 3.6))
    slos = list(capacities)
    styles = list(next(iter(capacities.values())))
    width = 0.8 / len(styles)
    for j, style in enumerate(styles):
        xs = np.arange(len(slos)) + j * width
        bars = ax.bar(xs, [capacities[s][style] for s in slos], width, label=style,
                      color=batching_color(style, j))
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(np.arange(len(slos)) + width * (len(styles) - 1) / 2, slos)
    ax.set_ylabel(tr("capacity (QPS)"))
    ax.set_title(tr("SIMULATED capacity under a P99 TBT SLO"))
    ax.legend(fontsize=8)
    return fig


def plot_simulation(results: Mapping[str, SimResult], cost_model: CostModel, slo_s: float,
                    title: str = "", axes: Sequence[Any] | None = None) -> Figure:
    """The slider view (``sim.compare_batching`` results): step times over time, one panel
    per batching style, and each style's ITL CDF against the SLO. ``axes``: ``(timeline axes or
    list of them, CDF axes)``."""
    if axes is None:  # the timelines one above the other, the CDFs beside them
        fig = Figure(figsize=(11, 1.2 + 1.6 * len(results)), layout="constrained")
        grid = fig.add_gridspec(len(results), 2, width_ratios=[2, 1])
        left = [fig.add_subplot(grid[0, 0])]
        left += [fig.add_subplot(grid[i, 0], sharex=left[0], sharey=left[0])
                 for i in range(1, len(results))]
        axes = [left, fig.add_subplot(grid[:, 1])]
    else:
        fig = axes[1].figure
    plot_tbt_timeline(results, slo_s, ax=axes[0])
    timeline = axes[0] if isinstance(axes[0], Axes) else axes[0][0]
    for i, (label, r) in enumerate(results.items()):
        itl = np.sort(r.itls) * 1e3
        axes[1].plot(itl, np.linspace(0, 1, len(itl)), color=batching_color(label, i),
                     label=tr("{label}\nmedian TTFT {ttft_s:.2f} s", label=_result_label(label),
                              ttft_s=r.median_ttft))
    axes[1].axhline(0.99, color="grey", lw=0.8)
    axes[1].axvline(slo_s * 1e3, color="k", ls=":")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("ITL / TBT (ms)")
    axes[1].set_ylabel("CDF")
    axes[1].legend(fontsize=7)
    names = {"model": cost_model.model.name, "hardware": cost_model.hardware.name}
    timeline.set_title(tr("SIMULATED {model} on {hardware}, {title}", **names, title=title)
                       if title else tr("SIMULATED {model} on {hardware}", **names), fontsize=9)
    return fig


def plot_calibration(calibration: Calibration, decode_context_len: int = 1024,
                     axes: Sequence[Axes] | None = None) -> Figure:
    """Figure-2-like: the calibrated cost model's prefill-only step time over prompt length
    and decode-only step time over batch size (lines, SIMULATED), over the batches the
    Sarathi-Serve authors timed (points, MEASURED; figure 2 dots, the artifact's table-2
    folder crosses)."""
    from chunkprefill.data import TABLE2_FOLDER, sarathi_serve_batches

    fig, axes = _two_axes(axes, (10, 3.6))
    cm = calibration.cost_model
    measured = sarathi_serve_batches()
    ps = np.unique(np.geomspace(64, 16384, 48).astype(int))
    axes[0].plot(ps, [cm.step_time([(int(p), 0)]) * 1e3 for p in ps], "k", lw=1.5,
                 label=tr("simulated (calibrated)"))
    ns = np.arange(1, 129)
    axes[1].plot(ns, [cm.step_time([(1, decode_context_len)] * int(n)) * 1e3 for n in ns],
                 "k", lw=1.5, label=tr("simulated (calibrated), context {context_len}",
                                       context_len=decode_context_len))
    for src, marker in (("figure 2", "o"), (TABLE2_FOLDER, "x")):
        pre = [m for m in measured if m.source == src and m.num_prefill_tokens
               and not m.num_decodes]
        dec = [m for m in measured if m.source == src and m.num_decodes
               and not m.num_prefill_tokens]
        axes[0].plot([m.num_prefill_tokens for m in pre], [m.seconds * 1e3 for m in pre],
                     marker, color="C1",
                     label=tr("measured, {source}", source=_source_label(src)))
        axes[1].plot([m.num_decodes for m in dec], [m.seconds * 1e3 for m in dec], marker,
                     color="C0",
                     label=tr("measured, {source}", source=_source_label(src)))
    for ax, xl in zip(axes, (tr("prompt tokens (one prefill-only batch)"),
                             tr("requests (one decode-only batch, 1 token each)"))):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xl)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel(tr("batch time (ms)"))
    axes[0].set_title(tr("{model} TP{tp} on 2x {hardware}: prefill", model=cm.model.name,
                         tp=cm.model.tensor_parallel_size, hardware=cm.hardware.name),
                      fontsize=9)
    axes[1].set_title(tr("decode (measured by the Sarathi-Serve authors)"), fontsize=9)
    return fig


def plot_length_distributions(real: np.ndarray, fitted: np.ndarray, label_real: str,
                              label_fitted: str, cap: int | None = None,
                              ax: Axes | None = None) -> Figure:
    """Survival curves P(length > x) of two samples of request lengths, log-log: where the
    tails differ (and where a cap cuts the real one)."""
    fig, ax = figure_and_axes(ax, (6.4, 3.6))
    for data, label in ((real, label_real), (fitted, label_fitted)):
        x = np.sort(np.asarray(data))
        ax.step(x, 1.0 - np.arange(1, len(x) + 1) / len(x), where="post", label=label)
    if cap is not None:
        ax.axvline(cap, color="grey", ls=":", lw=1)
        ax.text(cap, 0.5, f" {cap:,}", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1.05)
    ax.set_xlabel(tr("prompt tokens"))
    ax.set_ylabel(tr("share of requests longer"))
    ax.legend(fontsize=8)
    return fig


def token_gaps(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(time each token arrived, its gap since the same request's previous token), seconds,
    for every token after the first of every request: the ITL sample, with its times."""
    times, gaps = [], []
    for o in result.outputs:
        t = np.asarray(o.metrics.token_times)
        times.append(t[1:])
        gaps.append(np.diff(t))
    return np.concatenate(times), np.concatenate(gaps)


def plot_token_gaps(results: Mapping[str, SimResult], slo_s: float | None = None,
                    axes: Sequence[Axes] | None = None) -> Figure:
    """Each token's gap since its request's previous token, over (simulated) time: one panel
    per batching style, shared axes. A decode that waits through several prefill-only steps
    in a row shows one long gap, however short each of those steps was."""
    n = len(results)
    if axes is None:
        fig = Figure(figsize=(10, 0.6 + 1.7 * n), layout="constrained")
        axes = list(np.atleast_1d(fig.subplots(n, 1, sharex=True, sharey=True)))
    else:
        fig = axes[0].figure
    for i, ((label, r), a) in enumerate(zip(results.items(), axes, strict=True)):
        t, gap = token_gaps(r)
        a.plot(t, gap * 1e3, ".", ms=1.5, alpha=0.5, color=batching_color(label, i),
               rasterized=True, label=tr("{label}: P99 TBT {p99_ms:.0f} ms, longest gap "
                                         "{max_ms:.0f} ms", label=_result_label(label),
                                         p99_ms=r.p99_itl * 1e3, max_ms=gap.max() * 1e3))
        if slo_s is not None:
            a.axhline(slo_s * 1e3, color="k", ls=":", label=tr("SLO"))
        a.set_yscale("log")
        a.set_ylabel(tr("gap (ms)"))
        a.legend(fontsize=8, loc="upper right", markerscale=6)
    axes[-1].set_xlabel(tr("simulated time (s)"))
    axes[0].set_title(tr("SIMULATED: every token's gap since its previous token"))
    return fig


def plot_held_out_chunking(cost_model: CostModel, measured: Sequence[Any],
                           ax: Axes | None = None) -> Figure:
    """The price of chunking, measured (bars: ``data.sarathi_serve_chunked_prefills()``, the
    authors' figure 9a, held out of the fit) and predicted by ``cost_model`` (dots), per
    prompt length and chunk size: the prompt's prefill time in chunks / in one piece."""
    fig, ax = figure_and_axes(ax, (8, 3.6))
    prompts = sorted({m.prompt_len for m in measured})
    whole = max(m.chunk_size for m in measured)
    chunks = sorted({m.chunk_size for m in measured if m.chunk_size < whole})
    width = 0.8 / len(chunks)
    for j, c in enumerate(chunks):
        xs = np.arange(len(prompts)) + (j - (len(chunks) - 1) / 2) * width
        got = {m.prompt_len: m.relative for m in measured if m.chunk_size == c}
        ax.bar(xs, [got[p] - 1 for p in prompts], width * 0.9, color=f"C{j}", alpha=0.55,
               label=tr("chunk {chunk}: measured", chunk=c))
        pred = [float(chunking_overhead(cost_model, p, [c])[0]) - 1 for p in prompts]
        ax.plot(xs, pred, "o", color=f"C{j}", mec="k",
                label=tr("chunk {chunk}: simulated", chunk=c))
    ax.axhline(0, color="grey", lw=1)
    ax.set_xticks(np.arange(len(prompts)), [f"{p:,}" for p in prompts])
    ax.set_xlabel(tr("prompt tokens (prefilled alone)"))
    ax.set_ylabel(tr("extra prefill time vs one piece"))
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:+.0%}")
    ax.set_title(tr("Held out: MEASURED by the Sarathi-Serve authors (bars) vs SIMULATED "
                    "(dots)"), fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_tpot_vs_longest_gap(result: SimResult, slo_s: float, label: str = "",
                             ax: Axes | None = None) -> Figure:
    """One dot per request: its TPOT (``vllm bench serve``'s per-request mean gap, x) against
    its longest gap (y), with the SLO on both axes. Dots right of the line fail ``--goodput
    tpot``; dots above it hold a gap that P99 TBT counts. A stall lifts a dot, barely moves it
    right."""
    fig, ax = figure_and_axes(ax, (6.4, 3.6))
    tpot = np.array([o.metrics.tpot or 0.0 for o in result.outputs]) * 1e3
    worst = np.array([max(o.metrics.itl, default=0.0) for o in result.outputs]) * 1e3
    ax.plot(tpot, worst, "o", ms=3, alpha=0.6, color=batching_color(label),
            label=tr("one request ({label})", label=_result_label(label)) if label
            else tr("one request"))
    ax.axvline(slo_s * 1e3, color="k", ls=":", lw=1)
    ax.axhline(slo_s * 1e3, color="k", ls=":", lw=1, label=tr("SLO ({slo_ms:.0f} ms)",
                                                             slo_ms=slo_s * 1e3))
    ax.set_xlim(0, max(tpot.max(), slo_s * 1e3) * 1.1)
    ax.set_yscale("log")
    ax.set_xlabel(tr("TPOT: the request's mean gap (ms)"))
    ax.set_ylabel(tr("the request's longest gap (ms)"))
    ax.set_title(tr("SIMULATED: what --goodput tpot sees (x) and what P99 TBT sees (y)"),
                 fontsize=9)
    ax.legend(fontsize=8)
    return fig
