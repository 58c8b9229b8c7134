"""Plots and the trace panel: every picture is checked against the trace data it draws,
and the panel's plain function at its slider extremes."""

from __future__ import annotations

import html
import io
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from chunkprefill import CacheConfig, SchedulerConfig, TraceRequest, run_trace
from chunkprefill.course import panels, plots, probes
from chunkprefill.scheduler import TokenSplit
from chunkprefill.trace import article_trace_requests, max_seq_len, prompt_chunks

DECODES = [f"D{i}" for i in range(1, 7)]


@pytest.fixture(scope="module")
def seed():
    reqs = article_trace_requests()
    steps = run_trace(reqs, SchedulerConfig(16, 16), CacheConfig(16, 1000))
    return reqs, steps


@pytest.fixture(scope="module")
def preemption():
    """12 blocks of 4 slots; three requests that grow to 6 blocks each cannot all stay."""
    reqs = [TraceRequest(r, 8, 16) for r in "ABC"]
    steps = run_trace(reqs, SchedulerConfig(32, 4, max_model_len=64), CacheConfig(4, 12))
    return reqs, steps


def bars(ax, label):
    (c,) = [c for c in ax.collections if c.get_label() == label]
    return plots.bar_heights(c)


def cell_numbers(ax):
    """``{(step, row): text}`` of the numbers a timeline wrote into its cells."""
    found = [a for a in ax.artists if isinstance(a, plots.CellNumbers)]
    return {(round(x), round(y)): s for a in found
            for (x, y), s in zip(a.positions, a.labels, strict=True)}


# ----------------------------------------------------------------------------- split


def test_token_splits_on_the_article_trace(seed):
    """What the scheduler says each token computed, against the article's table: P's four
    chunks of 10 are prefill, the decodes' single tokens decode; step 6 is P's first decode,
    step 0 the decodes' 1-token prompts."""
    reqs, steps = seed
    for k in range(2, 6):
        assert steps[k].token_splits["P"] == TokenSplit(prefill=10, decode=0)
        assert steps[k].num_computed_tokens["P"] == 10 * (k - 2)
        assert all(steps[k].token_splits[d] == TokenSplit(0, 1) for d in DECODES)
    assert steps[6].token_splits["P"] == TokenSplit(0, 1)
    assert steps[0].token_splits["D1"] == TokenSplit(1, 0)
    assert prompt_chunks(steps, "P") == [10, 10, 10, 10]
    for s in steps:  # every scheduled token is counted exactly once
        assert {r: c.total for r, c in s.token_splits.items()} == s.num_scheduled_tokens


def test_token_splits_mark_recompute_after_preemption(preemption):
    reqs, steps = preemption
    (k,) = [s.step for s in steps if s.preempted]
    assert steps[k].preempted == ["C"]
    # C had computed 16 tokens (8 prompt + 8 fed-back outputs) when it was preempted.
    back = next(s.step for s in steps if s.step > k and "C" in s.num_scheduled_tokens)
    n = steps[back].num_scheduled_tokens["C"]
    cell = steps[back].token_splits["C"]
    assert cell == TokenSplit(prefill=0, decode=1, recompute=n - 1) and n == 17
    assert cell.kind == "recompute" and steps[back].num_computed_tokens["C"] == 0
    assert prompt_chunks(steps, "C") == [8]  # the recomputation is not a prompt chunk


# ----------------------------------------------------------------------------- plots


def test_timeline_cells_match_trace(seed):
    reqs, steps = seed
    fig = plots.plot_trace_timeline(steps)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    ids = [t.get_text() for t in ax.get_yticklabels()]
    assert ids == [*DECODES, "P"]
    grid = np.asarray(ax.images[0].get_array())
    assert grid.shape == (7, len(steps))
    code = {k: i for i, k in enumerate(plots.TIMELINE_KINDS)}
    for j, s in enumerate(steps):
        for i, rid in enumerate(ids):
            if rid in s.num_scheduled_tokens:
                assert grid[i, j] in (code["prefill"], code["decode"])
            elif rid in s.waiting or rid in s.running:
                assert grid[i, j] in (code["waiting"], code["stalled"])
            else:
                assert grid[i, j] == code["absent"]
    assert grid[6, 2:6].tolist() == [code["prefill"]] * 4 and grid[6, 6] == code["decode"]
    # One number per scheduled cell, equal to the trace's token count, drawn as one artist.
    expected = {(s.step, ids.index(r)): str(n) for s in steps
                for r, n in s.num_scheduled_tokens.items()}
    assert cell_numbers(ax) == expected and len(ax.artists) == 1 and not ax.texts


def test_timeline_marks_waiting_stalled_and_preempted(preemption):
    reqs, steps = preemption
    fig = plots.plot_trace_timeline(steps, annotate=False)
    ax = fig.axes[0]
    assert not ax.texts and not cell_numbers(ax)
    grid = np.asarray(ax.images[0].get_array())
    code = {k: i for i, k in enumerate(plots.TIMELINE_KINDS)}
    k = next(s.step for s in steps if s.preempted)
    assert grid[2, k] == code["waiting"]  # C is back in the queue
    assert code["recompute"] in grid[2].tolist()
    (marks,) = ax.collections[-1:]
    assert marks.get_offsets().tolist() == [[k, 2]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "preempted" in labels and plots.LABELS["recompute"] in labels


def test_timeline_shows_stalled_running_requests():
    # Budget 2, three running 1-token decodes: the third gets nothing some steps.
    reqs = [TraceRequest(r, 1, 3) for r in "ABC"]
    steps = run_trace(reqs, SchedulerConfig(2, 2, max_model_len=64), CacheConfig(16, 10))
    _, kinds, tokens = plots.timeline_grid(steps)
    code = {k: i for i, k in enumerate(plots.TIMELINE_KINDS)}
    assert (kinds == code["waiting"]).sum() == sum(
        len([r for r in s.waiting if r not in s.num_scheduled_tokens]) for s in steps)
    assert tokens.sum() == sum(sum(s.num_scheduled_tokens.values()) for s in steps)


def test_plots_need_a_prefix_of_the_trace(seed):
    reqs, steps = seed
    for bad in ([steps[0], steps[2]], steps[2:7]):
        with pytest.raises(ValueError, match="prefix"):
            plots.plot_trace_timeline(bad)
    ax = plots.plot_trace_timeline(steps[:7]).axes[0]  # a prefix is fine
    assert ax.get_xlim() == (-0.5, 6.5) and np.asarray(ax.images[0].get_array()).shape == (7, 7)


def test_budget_bars_match_trace(seed):
    reqs, steps = seed
    fig = plots.plot_budget_bars(steps)
    ax = fig.axes[0]
    decode = bars(ax, plots.LABELS["decode"])
    prefill = bars(ax, plots.LABELS["prefill"])
    left = bars(ax, plots.LABELS["left"])
    assert len(decode) == len(prefill) == len(left) == len(steps)
    for s, d, p, lo in zip(steps, decode, prefill, left, strict=True):
        assert d + p == sum(s.num_scheduled_tokens.values())
        assert lo == s.token_budget - sum(s.num_scheduled_tokens.values())
    assert decode[2:6] == [6] * 4 and prefill[2:6] == [10] * 4 and left[2:6] == [0] * 4
    assert prefill[6] == 0 and decode[6] == 7  # P decodes with the others
    assert ax.lines[0].get_ydata()[0] == 16  # the budget line
    assert not [c for c in ax.collections if c.get_label() == plots.LABELS["recompute"]]


def test_budget_bars_count_recompute(preemption):
    reqs, steps = preemption
    parts = plots.budget_breakdown(steps)
    for k, s in enumerate(steps):
        assert sum(parts[x][k] for x in parts) == s.token_budget
    assert sum(parts["recompute"]) == 16
    ax = plots.plot_budget_bars(steps).axes[0]
    assert sum(bars(ax, plots.LABELS["recompute"])) == 16


def test_kv_blocks_plot(preemption):
    reqs, steps = preemption
    ax = plots.plot_kv_blocks(steps, num_blocks=12).axes[0]
    line = ax.lines[0]
    assert list(line.get_ydata()) == [s.num_free_blocks for s in steps]
    preempt_steps = [s.step for s in steps if s.preempted]
    vlines = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert [ln.get_xdata()[0] for ln in vlines] == preempt_steps
    assert [t.get_text() for t in ax.texts] == ["preempt C"]
    assert min(s.num_free_blocks for s in steps[: preempt_steps[0]]) == 0  # it ran out first


def test_computed_tokens_history_and_plot(preemption):
    reqs, steps = preemption
    hist = plots.computed_tokens_history(steps)
    for k, s in enumerate(steps):
        for rid, c in s.num_computed_tokens_after.items():
            assert hist[rid][k] == c
    k = next(s.step for s in steps if s.preempted)
    assert hist["C"][k - 1] == 16 and hist["C"][k] == 0
    ax = plots.plot_computed_tokens(steps).axes[0]
    # A and B have identical histories: one line labelled for both, none hidden under another
    assert hist["A"] == hist["B"]
    assert [ln.get_label() for ln in ax.lines] == ["A = B", "C"]
    assert list(ax.lines[1].get_ydata()) == [v for v in hist["C"] if v is not None]


def test_plots_draw_on_given_axes_and_leave_pyplot_alone(seed, preemption):
    reqs, steps = seed
    before = plt.get_fignums()
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.plot_trace_timeline(steps, ax=ax) is fig
    assert isinstance(plots.plot_trace_overview(steps), Figure)
    assert isinstance(plots.plot_kv_blocks(preemption[1]), Figure)
    assert plt.get_fignums() == before


def test_overview_has_one_legend_and_redraws_in_place(seed, preemption):
    reqs, steps = seed
    fig = plots.plot_trace_overview(steps)
    timeline, bar_ax = fig.axes
    assert cell_numbers(timeline) == cell_numbers(plots.plot_trace_timeline(steps).axes[0])
    assert bars(bar_ax, plots.LABELS["prefill"])[2:6] == [10] * 4
    assert timeline.get_xlim() == bar_ax.get_xlim()  # one step axis
    assert not timeline.get_legend() and not bar_ax.get_legend()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        plots.LABELS["prefill"], plots.LABELS["decode"], plots.LABELS["left"],
        "token budget (max_num_batched_tokens)"]
    # Redrawing another trace into it gives the picture a new figure of that trace gives.
    p_reqs, p_steps = preemption
    assert plots.plot_trace_overview(p_steps, fig=fig) is fig
    assert panels.figure_png(fig) == panels.figure_png(plots.plot_trace_overview(p_steps))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(fig.legends) == 1 and plots.LABELS["recompute"] in labels and "preempted" in labels
    with pytest.raises(ValueError, match="plot_trace_overview"):
        plots.plot_trace_overview(steps, fig=Figure())


def test_figure_png_is_plain_savefig_and_leaves_the_figure_alone(seed):
    reqs, steps = seed
    for fig in (plots.plot_trace_overview(steps), plots.plot_trace_timeline(steps)):
        canvas, dpi = fig.canvas, fig.dpi
        png = panels.figure_png(fig)
        assert png[:4] == b"\x89PNG" and fig.canvas is canvas and fig.dpi == dpi
        png = panels.figure_png(fig)  # once a constrained layout has settled
        plain = io.BytesIO()
        fig.savefig(plain, format="png", dpi=72)
        pixels = [np.asarray(Image.open(io.BytesIO(b))) for b in (png, plain.getvalue())]
        assert np.array_equal(*pixels)  # the same picture; only the compression level differs


def test_cell_numbers_are_drawn_in_their_cells(seed):
    reqs, steps = seed
    fig = plots.plot_trace_timeline(steps)
    ax = fig.axes[0]
    img = np.asarray(Image.open(io.BytesIO(panels.figure_png(fig, dpi=100))).convert("RGB"))
    h = img.shape[0]

    def white_pixels(x: float, y: float) -> int:  # near-white pixels around a cell's centre
        px, py = ax.transData.transform((x, y)) * 100 / fig.dpi
        r, c = int(round(h - py)), int(round(px))
        return int((img[r - 4:r + 5, c - 4:c + 5].min(axis=2) > 200).sum())

    # P's 10-token chunk at step 2 (row 6) has ink; the empty cell of P at step 0 has none.
    assert white_pixels(2, 6) > 3
    assert white_pixels(0, 6) == 81 or white_pixels(0, 6) == 0  # all background, no digits
    fig.axes[0].artists[0].set_visible(False)
    img2 = np.asarray(Image.open(io.BytesIO(panels.figure_png(fig, dpi=100))).convert("RGB"))
    assert not np.array_equal(img, img2)  # the numbers were what differed


def test_plots_and_panels_import_no_torch():
    code = ("import sys, chunkprefill.course.plots, chunkprefill.course.panels; "
            "assert 'torch' not in sys.modules; assert 'ipywidgets' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- panel


def chunks_of_p(table: str) -> str:
    return table.splitlines()[0]


def test_panel_update_default_is_the_seed():
    table, fig, error = panels.trace_panel_update(16, 6, 40, 0)
    assert error is None and isinstance(fig, Figure)
    assert chunks_of_p(table) == ("P's prompt ran as 4 chunk(s) [10, 10, 10, 10] in steps 2-5; "
                                  "its first decode is step 6.")
    rows = table.splitlines()[2:]
    assert rows[0].split() == ["step", *DECODES, "P", "used", "left"]
    assert rows[3].split() == ["2", "1", "1", "1", "1", "1", "1", "10", "16", "0"]


def test_panel_update_smallest_budget():
    # Budget 1 means max_num_seqs 1: one request at a time, P's prompt one token per step.
    table, fig, error = panels.trace_panel_update(1, 2, 5, 0)
    assert error is None and fig is not None
    assert chunks_of_p(table).startswith("P's prompt ran as 5 chunk(s) [1, 1, 1, 1, 1]")
    assert "more steps" in table  # 2 * 20 + 5 + 3 steps > 30 rows


def test_panel_update_largest_values():
    lo, hi = panels.THRESHOLD_RANGE
    table, _, error = panels.trace_panel_update(
        panels.BUDGET_RANGE[1], panels.DECODES_RANGE[1], panels.PROMPT_RANGE[1], hi)
    assert error is None
    assert chunks_of_p(table).startswith("P's prompt ran as 2 chunk(s) [64, 64]")
    table, _, _ = panels.trace_panel_update(panels.BUDGET_RANGE[1], 16, 128, lo)
    assert chunks_of_p(table).startswith("P's prompt ran as 2 chunk(s) [112, 16]")  # 128 - 16


def test_panel_update_threshold_spares_a_lone_prompt():
    capped, _, _ = panels.trace_panel_update(64, 2, 40, 8)
    alone, _, _ = panels.trace_panel_update(64, 0, 40, 8)
    assert "[8, 8, 8, 8, 8]" in chunks_of_p(capped)
    assert "1 chunk(s) [40]" in chunks_of_p(alone)
    assert alone.splitlines()[2].split() == ["step", "P", "used", "left"]


def test_panel_update_chunking_off_too_small_budget_gives_schedulers_error():
    table, fig, error = panels.trace_panel_update(16, 6, 40, 0, chunked=False)
    assert table == "" and fig is None
    with pytest.raises(ValueError) as e:
        SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16,
                        enable_chunked_prefill=False, max_model_len=43)
    assert error == str(e.value)
    assert "enable_chunked_prefill" in error and "max_model_len (43)" in error


def test_panel_update_chunking_off_large_budget_runs_p_in_one_step():
    table, fig, error = panels.trace_panel_update(64, 6, 40, 0, chunked=False)
    assert error is None and fig is not None
    assert "1 chunk(s) [40] in step 2; its first decode is step 3" in chunks_of_p(table)


def test_for_budget_and_the_window_without_chunking():
    """The one config factory: vLLM's 128 seats, lowered to the budget; a seat count
    given explicitly is kept, and refused if the budget cannot serve it (no silent clamp);
    budget None is the smallest vLLM allows without chunking. With chunking off the panel's
    window is the longest sequence: P's 40 + 3 tokens, or the decodes' 1 + 20."""
    c = SchedulerConfig.for_budget(200, max_model_len=panels.CHUNKED_MAX_MODEL_LEN)
    assert (c.max_num_seqs, c.max_model_len) == (128, panels.CHUNKED_MAX_MODEL_LEN)
    c = SchedulerConfig.for_budget(64, max_model_len=43, chunked=False)
    assert (c.max_num_seqs, c.enable_chunked_prefill) == (64, False)
    with pytest.raises(ValueError, match=r"max_num_seqs \(32\)"):
        SchedulerConfig.for_budget(16, max_model_len=64, max_num_seqs=32)
    assert SchedulerConfig.for_budget(None, max_model_len=512,
                                      chunked=False).max_num_batched_tokens == 512
    pf = SchedulerConfig.for_budget(None, max_model_len=512, batching="prefill_first")
    assert not pf.enable_chunked_prefill and pf.max_num_batched_tokens == 512
    assert max_seq_len(article_trace_requests(6, 40)) == 43
    assert max_seq_len(article_trace_requests(6, 4)) == 21
    assert max_seq_len(article_trace_requests(0, 4)) == 7  # no decodes: P alone


def test_trace_panel_builds_and_rerenders():
    import ipywidgets

    panel = panels.trace_panel()
    assert isinstance(panel, ipywidgets.VBox)
    top, image = panel.children
    controls, text = top.children
    by_name = {c.description: c for c in controls.children}
    assert set(by_name) == {"token budget", "decodes", "prompt length (P)",
                            "long_prefill threshold", "chunked prefill"}
    sliders = [c for c in controls.children if isinstance(c, ipywidgets.IntSlider)]
    assert len(sliders) == 4 and not any(s.continuous_update for s in sliders)
    assert (by_name["token budget"].min, by_name["token budget"].max) == panels.BUDGET_RANGE
    assert "[10, 10, 10, 10]" in text.value and image.value[:4] == b"\x89PNG"

    first_text, first_png = text.value, image.value
    by_name["token budget"].value = 24
    assert "[18, 18, 4]" in text.value and text.value != first_text
    assert image.value != first_png and image.value[:4] == b"\x89PNG"

    by_name["token budget"].value = 16
    by_name["chunked prefill"].value = False
    expected = panels.trace_panel_update(16, 6, 40, 0, chunked=False)[2]
    assert html.escape(expected) in text.value and image.value == b""
    assert image.layout.display == "none"  # no broken image under the message

    by_name["chunked prefill"].value = True
    assert "[10, 10, 10, 10]" in text.value and image.value[:4] == b"\x89PNG"
    assert image.layout.display is None


def test_engine_loop_figure_names_the_package_calls():
    from chunkprefill.course.plots.loop import plot_engine_loop

    fig = plot_engine_loop()
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"Scheduler.schedule()", "Scheduler.update_from_output()"} <= texts
    assert len(fig.axes[0].patches) == 6  # three boxes, three arrows


def test_slot_mapping_keeps_each_request_colour_of_the_block_pool():
    from matplotlib.colors import to_rgba

    from chunkprefill import CacheConfig, Request, Scheduler, SchedulerConfig

    sched = Scheduler(SchedulerConfig(8, 4, max_model_len=64), CacheConfig(4, 10))
    sched.add_request(Request("A", [1, 2], max_tokens=1))  # finishes in step 0
    sched.add_request(Request("B", [3, 4, 5], max_tokens=3))
    snaps = []
    for k in range(2):
        out = sched.schedule()
        snaps.append(probes.snapshot_step(k, sched, out))
        sched.update_from_output(out, {r: 7 for r in out.num_scheduled_tokens
                                       if sched.requests[r].num_owed_tokens == 0})
    assert "A" not in snaps[1].block_tables  # step 1 alone would give B the first colour
    colors = plots.request_colors(["A", "B"])
    fig = plots.plot_slot_mapping(snaps[1], 10, 4, request_ids=["A", "B"])
    faces = {h.get_label(): h.get_facecolor() for h in fig.legends[0].legend_handles} \
        if fig.legends else {h.get_label(): h.get_facecolor()
                             for h in fig.axes[0].get_legend().legend_handles}
    assert faces["B: written this step"] == to_rgba(colors["B"], 0.8)
    assert colors["B"] != plots.request_colors(["B"])["B"]


def test_simulation_panel_default_view_shows_the_lesson():
    # Notebook 09's slider opens where chunking matters: chunked meets the strict SLO and
    # prefill-first breaks it. At 0.5 QPS there is little to stall: the two P99s meet.
    from chunkprefill.sim import CostModel, compare_batching, tbt_slo
    from chunkprefill.workload import sharegpt_like

    cm = CostModel.preset()
    fig, view = panels.simulation_view(cm, num_requests=200)
    assert isinstance(fig, Figure)
    chunked, prefill_first = (r.p99_itl for r in view.values())
    assert chunked < tbt_slo(cm) < prefill_first
    low = compare_batching(sharegpt_like(200, 0.5, seed=0, max_model_len=8192), cm,
                           panels.SIM_PANEL_BUDGET)
    c, p = (r.p99_itl for r in low.values())
    assert p <= 1.05 * c
    panel = panels.simulation_panel(cm, num_requests=20)
    values = {w.description: w.value for w in panel.children[:2]}
    assert values == {"budget": panels.SIM_PANEL_BUDGET, "QPS": panels.SIM_PANEL_QPS}


def test_calibration_and_length_plots():
    from chunkprefill.course.plots import simulated as sim_plots
    from chunkprefill.data import sharegpt_lengths
    from chunkprefill.sim import named_calibration

    fig = sim_plots.plot_calibration(named_calibration("sarathi-serve"))
    # measured points: 8 prefill + 1 table-2 prefill, 8 decode + 1 table-2 decode
    pts = [sum(len(line.get_xdata()) for line in ax.get_lines()[1:]) for ax in fig.axes]
    assert pts == [9, 9]
    prompt, _ = sharegpt_lengths()
    fig = sim_plots.plot_length_distributions(prompt, prompt * 2, "a", "b", cap=8192)
    assert len(fig.axes[0].get_lines()) == 3  # two curves and the cap
