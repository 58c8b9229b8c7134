"""How long a slider move takes: for every dashboard, the FULL update a user waits for (the
update function and the PNG the widget then shows), over a sweep of slider values; prints
the median and max milliseconds per update.

1. The trace panel (the article's trace), as its widget does it on a move: ``trace_panel_update``
   (run the scheduler trace, redraw the panel's figure, which the panel keeps and passes
   back as ``fig=``), then ``figure_png`` (draw it, encode the PNG). One update at the
   default position comes first, untimed, as the panel's own first render does. For
   reference, one more row: every position with a new figure each time (no ``fig=``).
2. The chunk-size dashboard: ``chunk_dashboard_update``, whose result holds
   the PNG bytes; over the positions of the precomputed sweep (what its sliders read; the
   sweep itself is measured first, with a progress bar, and not timed), then positions
   outside it ("COLD": measured on the toy model and drawn on first visit).

The bar (issue 4) is 150 ms median per update for every slider's sweep. The COLD and the
new-figure rows are shown, not judged. Each update is timed twice: wall clock (what a user
waits) and this process's CPU time (the update's own work; on a machine whose other cores
are busy with other programs the wall clock also holds their time). Both verdicts are
printed, with the load average. One torch thread.
Run: python benchmarks/widget_latency.py [--quick]"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from chunkprefill.course import panels

BAR_MS = 150.0
UNJUDGED = ("COLD", "(reference)")


def time_updates(fn: Callable[[Any], object], values: Iterable[Any]) -> list[tuple[float, float]]:
    """(wall ms, process CPU ms) of ``fn(v)`` for each value."""
    out = []
    for v in values:
        t0, c0 = time.perf_counter(), time.process_time()
        fn(v)
        out.append(((time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3))
    return out


def report(rows: list[tuple[str, str, list[tuple[float, float]]]]) -> None:
    print(f"{'dashboard':<16} {'slider sweep (full update: compute + figure + PNG)':<58} "
          f"{'n':>3} {'wall median':>12} {'wall max':>9} {'CPU median':>11}")
    for dash, slider, ms in rows:
        wall, cpu = np.array(ms).T
        print(f"{dash:<16} {slider:<58} {len(ms):3d} {np.median(wall):12.1f} {wall.max():9.1f} "
              f"{np.median(cpu):11.1f}")


class TracePanelMove:
    """What the trace panel's widget runs on a slider move (see ``panels.trace_panel``):
    the update, reusing the panel's figure, then the PNG for its ``Image``."""

    def __init__(self, reuse: bool = True) -> None:
        self.reuse = reuse
        self.fig: Figure | None = None

    def __call__(self, **values: Any) -> bytes | None:
        _, fig, _ = panels.trace_panel_update(**values, fig=self.fig if self.reuse else None)
        if fig is None:  # refused: the panel shows the scheduler's message, no picture
            return None
        self.fig = fig
        return panels.figure_png(fig)


def trace_panel_rows() -> list[tuple[str, str, list[tuple[float, float]]]]:
    base = {"budget": 16, "num_decodes": 6, "prompt_len": 40, "threshold": 0, "chunked": True}
    sweeps = {
        "budget": list(range(panels.BUDGET_RANGE[0], panels.BUDGET_RANGE[1] + 1, 9)),
        "num_decodes": list(range(panels.DECODES_RANGE[0], panels.DECODES_RANGE[1] + 1, 2)),
        "prompt_len": list(range(panels.PROMPT_RANGE[0], panels.PROMPT_RANGE[1] + 1, 9)),
        "threshold": list(range(panels.THRESHOLD_RANGE[0], panels.THRESHOLD_RANGE[1] + 1, 5)),
        "chunked": [False, True, False, True],
    }
    move = TracePanelMove()
    move(**base)  # the panel's first render, when it is displayed
    rows = []
    for name, values in sweeps.items():
        ms = time_updates(lambda v, name=name: move(**{**base, name: v}), values)
        rows.append(("trace panel", f"{name}", ms))
    fresh = TracePanelMove(reuse=False)
    every = [{**base, name: v} for name, values in sweeps.items() for v in values]
    rows.append(("trace panel", "(reference) all of the above, a new figure each",
                 time_updates(lambda kw: fresh(**kw), every)))
    return rows


def chunk_dashboard_rows(quick: bool) -> list[tuple[str, str, list[tuple[float, float]]]]:
    data = panels.ChunkDashboardData()
    thresholds = (0,) if quick else panels.DASH_THRESHOLDS
    t0 = time.perf_counter()
    data.precompute(budgets=panels.DASH_BUDGETS, thresholds=thresholds)
    print(f"precomputed {len(data.runs)} measured runs and their panels in "
          f"{time.perf_counter() - t0:.0f} s (not part of the timings below)")

    def up(*args: Any, **kwargs: Any) -> panels.DashboardView:
        view = panels.chunk_dashboard_update(data, *args, **kwargs)
        assert view.error is not None or view.png, "a drawn position without its PNG"
        return view

    rows: list[tuple[str, str, list[tuple[float, float]]]] = []
    budgets = list(panels.DASH_BUDGETS) * 2
    rows.append(("chunk dashboard", "token budget (precomputed)",
                 time_updates(lambda b: up(b), budgets)))
    rows.append(("chunk dashboard", "chunking off x budget (precomputed / refused)",
                 time_updates(lambda b: up(b, chunked=False), panels.DASH_BUDGETS)))
    if not quick:
        pos = [(b, t) for b in panels.DASH_BUDGETS for t in panels.DASH_THRESHOLDS]
        rows.append(("chunk dashboard", "threshold x budget (precomputed)",
                     time_updates(lambda bt: up(bt[0], bt[1]), pos)))
    sources = {up(b).source for b in panels.DASH_BUDGETS}
    assert sources == {"precomputed"}, sources
    cold: list[tuple[float, float]] = []
    for name, values in (("long_prompt_len", panels.DASH_LONG_LENS),
                         ("num_decodes", panels.DASH_DECODES), ("rate", panels.DASH_RATES)):
        default = getattr(data.base, name)
        todo = [v for v in values if v != default][: 1 if quick else None]
        cold += time_updates(lambda v, name=name: up(256, **{name: v}), todo)
    rows.append(("chunk dashboard", "COLD: new workload, measured + drawn now", cold))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="budgets only (no threshold grid), one cold position per slider")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = trace_panel_rows() + chunk_dashboard_rows(a.quick)
    print()
    report(rows)
    print()
    import os

    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for dash in dict.fromkeys(r[0] for r in rows):
        judged = [np.array(ms).T for d, name, ms in rows
                  if d == dash and not name.startswith(UNJUDGED)]
        for k, clock in enumerate(("wall clock", "CPU time")):
            worst = max(np.median(t[k]) for t in judged)
            slowest = max(t[k].max() for t in judged)
            verdict = "yes" if worst <= BAR_MS else "NO"
            print(f"{dash} [{clock}]: every slider's full update <= {BAR_MS:.0f} ms median "
                  f"(worst slider {worst:.1f} ms median; slowest single update {slowest:.1f} "
                  f"ms): {verdict}")


if __name__ == "__main__":
    main()
