"""The latency plots and the chunk-size dashboard: each picture is checked against the data
it draws, and the dashboard's plain update function at every slider's extremes (on the
tiny model, so a measured run takes milliseconds)."""

from __future__ import annotations

import html
from types import SimpleNamespace

import matplotlib.colors
import numpy as np
import pytest
import torch
from matplotlib.collections import EventCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from chunkprefill import ModelConfig, SchedulerConfig
from chunkprefill.course import panels, plots
from chunkprefill.lab.serving import BudgetPoint, MixedWorkload
from chunkprefill.metrics import RequestMetrics

BASE = MixedWorkload(num_decodes=3, decode_prompt_len=4, decode_output_len=4, num_long=2,
                     long_prompt_len=48, vocab_size=512, rate=1000.0)
PRE_BUDGETS = (16, 32, 64)


@pytest.fixture(scope="module")
def data():
    torch.set_num_threads(1)
    d = panels.ChunkDashboardData(BASE, ModelConfig.tiny())
    d.precompute(budgets=PRE_BUDGETS, progress=False)
    return d


def png_ok(b):
    return isinstance(b, bytes | memoryview) and bytes(b[:4]) == b"\x89PNG"


# ----------------------------------------------------------------------------- plots

METRICS = {
    "d0": RequestMetrics(0.0, [0.1, 0.2, 0.3, 0.9, 1.0]),
    "L0": RequestMetrics(0.15, [0.9, 1.0]),
    "d1": RequestMetrics(0.05, [0.2, 0.3, 0.9]),
}


def test_token_times_draws_every_token_and_wait():
    ax = plots.plot_token_times(METRICS, highlight=["L0"]).axes[0]
    rows = [c for c in ax.collections if isinstance(c, EventCollection)]
    assert [list(c.get_positions()) for c in rows] == [m.token_times for m in METRICS.values()]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["d0", "L0", "d1"]
    assert matplotlib.colors.same_color(rows[1].get_color(), plots.LONG_COLOR)
    waits = ax.collections[len(rows)].get_segments()  # arrival -> first token
    assert [(s[0][0], s[1][0]) for s in waits] == [(0.0, 0.1), (0.15, 0.9), (0.05, 0.2)]


def test_latency_cdf_marks_percentiles():
    vals = {"a": np.arange(1, 101) / 1e3, "b": [0.5, 0.5]}
    ax = plots.plot_latency_cdf(vals, "ITL").axes[0]
    marks = [ln for ln in ax.lines if ln.get_marker() in ("o", "^")]
    p50, p99 = float(np.percentile(np.arange(1, 101), 50)), float(np.percentile(
        np.arange(1, 101), 99))
    assert marks[0].get_xydata().tolist() == [[p50, 0.5]]
    assert marks[1].get_xydata().tolist() == [[p99, 0.99]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == f"a: P50 {p50:.0f}, P99 {p99:.0f} ms" and labels[1].startswith("b: P50 500")
    curve = ax.lines[0]
    assert curve.get_ydata()[0] == 0 and curve.get_ydata()[-1] == 1.0


def test_budget_sweep_plot_and_the_no_chunk_point():
    pts = [BudgetPoint(64, 0.01, 0.02, 0.5, 0.9, 0.7), BudgetPoint(16, 0.005, 0.01, 1.0, 2.0, 1.5),
           BudgetPoint(None, 0.05, 0.3, 0.3, 0.4, 0.35)]
    ax = plots.plot_budget_sweep(pts, current=16).axes[0]
    p99 = next(ln for ln in ax.lines if ln.get_label() == "P99 ITL (all gaps)")
    # at the budgets, nudged at most a tenth of an octave (so equal values hide no marker)
    assert np.abs(np.log2(p99.get_xdata()) - np.log2([16, 64])).max() <= 0.1 + 1e-9
    assert p99.get_ydata().tolist() == [10, 20]
    long = next(ln for ln in ax.lines if ln.get_label().startswith("long prompts' TTFT"))
    assert long.get_ydata().tolist() == [1500, 700]
    off = [ln for ln in ax.lines if ln.get_mfc() == "white"]
    assert sorted(ln.get_ydata()[0] for ln in off) == pytest.approx([300, 300, 350])
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "no\nchunking"
    assert not ax.texts  # single runs: no trend captioned on the plot


def test_tradeoff_plot_shows_medians_and_intervals():
    from chunkprefill.lab.stall import TradeoffPoint
    from chunkprefill.lab.stats import Estimate

    pts = [TradeoffPoint(96, 4, Estimate(0.2, 0.19, 0.22, 3), Estimate(0.03, 0.029, 0.031, 3), []),
           TradeoffPoint(48, 8, Estimate(0.3, 0.28, 0.33, 3), Estimate(0.02, 0.019, 0.02, 3), [])]
    left, right = plots.plot_tradeoff(pts, "CPU thread time").axes
    assert left.lines[0].get_xdata().tolist() == [48, 96]
    assert left.lines[0].get_ydata().tolist() == pytest.approx([300, 200])
    assert right.lines[0].get_ydata().tolist() == pytest.approx([20, 30])
    assert [t.get_text() for t in left.get_xticklabels()] == ["48\n(8)", "96\n(4)"]
    assert "CPU thread time" in left.figure.texts[0].get_text()


def test_step_tokens_bars_are_steps_on_the_clock():
    steps = [SimpleNamespace(start_s=0.0, duration_s=0.1, num_decode_tokens=2,
                             num_prefill_tokens=0, num_scheduled_tokens={"a": 1, "b": 1}),
             SimpleNamespace(start_s=0.1, duration_s=0.5, num_decode_tokens=2,
                             num_prefill_tokens=30, num_scheduled_tokens={"a": 1, "b": 1,
                                                                          "L": 30})]
    ax = plots.plot_step_tokens(steps, highlight=["L"]).axes[0]
    bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
    assert [p.get_width() for p in bars["decode tokens"].patches] == [0.1, 0.5]
    assert [p.get_x() for p in bars["decode tokens"].patches] == [0.0, 0.1]
    assert [p.get_height() for p in bars["L"].patches] == [0, 30]
    assert "other prefill" not in bars  # all prefill here belongs to L
    plain = plots.plot_step_tokens(steps).axes[0]
    assert [c.get_label() for c in plain.containers] == [plots.LABELS["decode"],
                                                         plots.LABELS["prefill"]]


def test_step_tokens_keep_the_long_prompts_colour_family():
    """A notebook draws the same long prompts as steps and as token rows: one colour family
    (LONG_COLOR's) for them in both, the short requests' blue for everything else."""
    steps = [SimpleNamespace(start_s=0.0, duration_s=0.1, num_decode_tokens=2,
                             num_prefill_tokens=40, num_scheduled_tokens={"a": 1, "b": 1,
                                                                          "L0": 30, "s": 10}),
             SimpleNamespace(start_s=0.1, duration_s=0.5, num_decode_tokens=2,
                             num_prefill_tokens=30, num_scheduled_tokens={"a": 1, "b": 1,
                                                                          "L1": 30})]
    ax = plots.plot_step_tokens(steps, highlight=["L0", "L1"]).axes[0]
    bars = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
    same = matplotlib.colors.same_color
    assert same(bars["L0"], plots.LONG_COLOR) and same(bars["decode tokens"], plots.SHORT_COLOR)
    assert not same(bars["L0"], bars["L1"]) and not same(bars["other prefill"], bars["L0"])
    assert all(same(bars[r], c) for r, c in zip(("L0", "L1"), plots.LONG_SHADES, strict=False))


def test_timing_plots_carry_their_timing_label():
    n = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    t = [0.01 + 0.0002 * x for x in n]
    ax = plots.plot_step_time_vs_tokens(n, t, "CPU thread time").axes[0]
    assert "CPU thread time" in ax.get_title()
    assert any("parts equal at 50 tokens" in x.get_text() for x in ax.texts)
    from chunkprefill.lab.stats import Estimate

    ests = {256: Estimate(1.3, 1.2, 1.5, 3), 512: Estimate(1.1, 1.0, 1.2, 3)}
    ax = plots.plot_chunking_overhead(ests, 1024, "GPU time").axes[0]
    assert [p.get_height() for p in ax.patches] == [1.3, 1.1] and "GPU time" in ax.get_title()
    ax = plots.plot_tile_effect([240, 256, 272], [0.24, 0.256, 0.30], "X").axes[0]
    assert ax.lines[0].get_ydata().tolist() == pytest.approx([1000, 1000, 1102.94], rel=1e-4)


# ----------------------------------------------------------------------------- dashboard


def test_precomputed_positions_are_read_not_measured(data):
    for b in PRE_BUDGETS:
        v = panels.chunk_dashboard_update(data, b)
        assert v.error is None and v.source == "precomputed" and png_ok(v.png)
        assert v.png is data.pngs[data.key(b)]
        assert f"budget {b}," in v.text and "CPU thread time" in v.text
    ref = data.reference_key(data.key(16))
    assert ref.budget == 64 and not ref.chunked and ref in data.runs  # smallest budget >= 52
    assert [p.budget for p in data.sweep_points(data.key(16))] == [16, 32, 64, None]


def test_off_grid_position_is_measured_with_its_row_then_cached(data):
    calls = []
    v = panels.chunk_dashboard_update(data, 8, threshold=4,
                                       progress=lambda done, total: calls.append((done, total)))
    assert v.error is None and v.source == "measured now" and png_ok(v.png)
    assert "threshold 4" in v.text
    # The sweep panel of a new threshold is a whole sweep, never a lone point: the grid's
    # budgets at threshold 4 were measured too, and the no-chunking baseline is there.
    assert [p.budget for p in data.sweep_points(data.key(8, 4))] == [8, 16, 32, 64, None]
    assert calls[-1][0] == calls[-1][1] >= 4
    again = panels.chunk_dashboard_update(data, 8, threshold=4)
    assert again.source == "precomputed" and again.png == v.png
    other = panels.chunk_dashboard_update(data, 32, threshold=4)  # a lookup along the row
    assert other.source == "precomputed"


def test_smallest_budget():
    d = panels.ChunkDashboardData(BASE, ModelConfig.tiny())
    d.precompute(budgets=PRE_BUDGETS, progress=False)
    before = d.pngs[d.key(16)]
    v1 = panels.chunk_dashboard_update(d, 1)  # the smallest legal budget: one token a step
    assert v1.error is None and max(s.num_tokens for s in v1.result.step_log) == 1
    assert v1.result.scheduler_config.max_num_seqs == 1
    # The row's other panels were redrawn: their sweep gained the point at budget 1.
    assert [p.budget for p in d.sweep_points(d.key(16))] == [1, 16, 32, 64, None]
    assert d.pngs[d.key(16)] != before


def test_threshold_zero_and_max(data):
    lo, hi = panels.DASH_THRESHOLDS[0], panels.DASH_THRESHOLDS[-1]
    zero = panels.chunk_dashboard_update(data, 32, threshold=lo)
    # A threshold above every sequence never binds: the same run as threshold 0.
    top = panels.chunk_dashboard_update(data, 32, threshold=hi)
    assert top.error is None and top.source == "precomputed" and top.result is zero.result
    # With chunking off, max_model_len is the longest sequence (52): the scheduler refuses.
    off = panels.chunk_dashboard_update(data, 64, threshold=hi, chunked=False)
    with pytest.raises(ValueError) as e:
        SchedulerConfig(64, 64, enable_chunked_prefill=False, long_prefill_token_threshold=hi,
                        max_model_len=52)
    assert off.error == str(e.value) and off.png is None and off.source == "refused"


def test_chunking_off_with_too_small_budget_gives_the_schedulers_error(data):
    v = panels.chunk_dashboard_update(data, 32, chunked=False)
    with pytest.raises(ValueError) as e:
        SchedulerConfig(32, 32, enable_chunked_prefill=False, max_model_len=52)
    assert v.error == str(e.value) and "enable_chunked_prefill" in v.error
    assert v.png is None and v.text == ""
    ok = panels.chunk_dashboard_update(data, 64, chunked=False)  # big enough: one step
    assert ok.error is None and "chunking OFF" in ok.text
    assert max(s.num_prefill_tokens for s in ok.result.step_log) >= 48


@pytest.mark.parametrize("end", [0, -1])
def test_workload_slider_extremes(data, end):
    v = panels.chunk_dashboard_update(
        data, panels.DASH_BUDGETS[end], long_prompt_len=panels.DASH_LONG_LENS[end],
        num_decodes=panels.DASH_DECODES[end], rate=panels.DASH_RATES[end])
    assert v.error is None and png_ok(v.png)
    wl = data.workload(panels.DASH_LONG_LENS[end], panels.DASH_DECODES[end],
                       panels.DASH_RATES[end])
    assert len(v.result.outputs) == wl.num_decodes + wl.num_long
    assert f"{wl.num_decodes} short requests" in v.text
    assert f"{wl.long_prompt_len} tokens" in v.text


def test_unknown_device_is_refused(data):
    v = panels.chunk_dashboard_update(data, 32, device="tpu · jax")
    assert v.error is not None and "device" in v.error
    assert panels.available_devices()[-1] == "cpu · torch"


def test_dashboard_figure_shows_sweep_cdfs_and_tokens(data):
    fig = data.figure(data.key(32))
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    sweep, itl, ttft, tokens = fig.axes
    assert "one run per budget" in sweep.get_title() and "ITL" in itl.get_title()
    assert "TTFT" in ttft.get_title()
    legend = [t.get_text() for t in itl.get_legend().get_texts()]
    assert legend[0].startswith("budget 32:") and legend[1].startswith("no chunking (64):")
    assert len([c for c in tokens.collections if isinstance(c, EventCollection)]) == 5
    assert "CPU thread time" in fig.get_suptitle()


def test_dashboard_widget_builds_and_rerenders(data):
    import ipywidgets

    panel = panels.chunk_dashboard(data, budget=16)
    (top, image) = panel.children
    controls, text = top.children
    first = controls.children[0]
    assert isinstance(first, ipywidgets.SelectionSlider) and first.description == "token budget"
    sliders = [c for c in controls.children if isinstance(c, ipywidgets.SelectionSlider)]
    assert len(sliders) == 5 and not any(s.continuous_update for s in sliders)
    assert {c.description for c in controls.children} >= {
        "long_prefill threshold", "long prompt length", "short requests", "arrivals (req/s)",
        "chunked prefill", "device · backend"}
    assert png_ok(image.value) and "precomputed" in text.value
    before = image.value
    first.value = 32
    assert png_ok(image.value) and image.value != before and "budget 32," in text.value
    by_name = {c.description: c for c in controls.children}
    by_name["chunked prefill"].value = False
    expected = panels.chunk_dashboard_update(data, 32, chunked=False).error
    assert html.escape(expected) in text.value and image.value == b""
    assert image.layout.display == "none"
    first.value = 64
    assert png_ok(image.value) and image.layout.display is None and "chunking OFF" in text.value


def test_markers_do_not_hide_one_another():
    """Equal values still show every marker: the CDFs' percentile markers shrink curve by
    curve (the later one drawn on top), and the sweep's no-chunking markers stand apart."""
    ax = plots.plot_latency_cdf({"a": [0.01, 0.02, 0.03], "b": [0.01, 0.02, 0.03]}).axes[0]
    marks = [ln for ln in ax.lines if ln.get_marker() not in ("None", "")]
    by_y = {}
    for ln in marks:
        by_y.setdefault(float(ln.get_ydata()[0]), []).append((ln.get_markersize(), ln.zorder))
    for pair in by_y.values():  # one marker per curve at each percentile
        (big, z_big), (small, z_small) = sorted(pair, reverse=True)
        assert small < big and z_small > z_big
    pts = [SimpleNamespace(budget=b, p99_itl=0.05, ttft_p50=0.05, long_ttft=0.05)
           for b in (64, 128, None)]
    ax = plots.plot_budget_sweep(pts).axes[0]
    off = [ln for ln in ax.lines if ln.get_linestyle() == "None"]
    assert len(off) == 3 and len({float(ln.get_xdata()[0]) for ln in off}) == 3
    swept = [ln for ln in ax.lines if ln.get_marker() not in ("None", "")
             and ln.get_linestyle() != "None"]
    assert len(swept) == 3 and len({tuple(ln.get_xdata()) for ln in swept}) == 3


def test_device_title_names_what_a_reader_reads():
    assert panels.device_title("cpu · torch") == "CPU · PyTorch"
    assert panels.device_title("cuda · triton") == "CUDA · Triton"
    with pytest.raises(ValueError, match="device must look like"):
        panels.device_title("tpu · jax")
