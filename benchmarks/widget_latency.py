"""How long a slider move takes: times each dashboard's update function over a sweep of
slider values and prints the median and max milliseconds per update.

1. The trace panel (notebook 02): ``trace_panel_update`` (run the scheduler trace, build the
   figure), and separately the PNG draw the widget then pays.
2. The chunk-size dashboard (notebook 06): ``chunk_dashboard_update`` over the positions of
   the precomputed sweep (what its sliders read; the sweep itself is measured first, with a
   progress bar, and not timed), then, separately, positions outside it ("cold": measured on
   the toy model and drawn on first visit).

The bar is 150 ms median per update. Timings are wall-clock on this machine, one torch thread
(on a busy 2-core machine, OpenMP threads wait on each other and step times jump).
Run: python benchmarks/widget_latency.py [--quick]"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from chunkprefill import widgets

BAR_MS = 150.0


def time_updates(fn: Callable[[Any], object], values: Iterable[Any]) -> list[float]:
    """Milliseconds of ``fn(v)`` for each value."""
    out = []
    for v in values:
        t0 = time.perf_counter()
        fn(v)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def report(rows: list[tuple[str, str, list[float]]]) -> None:
    print(f"{'dashboard':<16} {'slider sweep':<46} {'n':>3} {'median ms':>10} {'max ms':>9}")
    for dash, slider, ms in rows:
        print(f"{dash:<16} {slider:<46} {len(ms):3d} {np.median(ms):10.1f} {max(ms):9.1f}")


def trace_panel_rows() -> list[tuple[str, str, list[float]]]:
    base = {"budget": 16, "num_decodes": 6, "prompt_len": 40, "threshold": 0, "chunked": True}
    sweeps = {
        "budget": list(range(widgets.BUDGET_RANGE[0], widgets.BUDGET_RANGE[1] + 1, 9)),
        "num_decodes": list(range(widgets.DECODES_RANGE[0], widgets.DECODES_RANGE[1] + 1, 2)),
        "prompt_len": list(range(widgets.PROMPT_RANGE[0], widgets.PROMPT_RANGE[1] + 1, 9)),
        "threshold": list(range(widgets.THRESHOLD_RANGE[0], widgets.THRESHOLD_RANGE[1] + 1, 5)),
        "chunked": [False, True, False, True],
    }
    rows, figs = [], []
    for name, values in sweeps.items():
        def update(v: Any, name: str = name) -> None:
            _, fig, _ = widgets.trace_panel_update(**{**base, name: v})
            figs.append(fig)
        rows.append(("trace panel", f"{name}: trace_panel_update", time_updates(update, values)))
    drawn = [f for f in figs if f is not None]
    rows.append(("trace panel", "(+ PNG draw of those figures)",
                 time_updates(widgets.figure_png, drawn[::3])))
    return rows


def chunk_dashboard_rows(quick: bool) -> list[tuple[str, str, list[float]]]:
    data = widgets.ChunkDashboardData()
    thresholds = (0,) if quick else widgets.DASH_THRESHOLDS
    t0 = time.perf_counter()
    data.precompute(budgets=widgets.DASH_BUDGETS, thresholds=thresholds)
    print(f"precomputed {len(data.runs)} measured runs and their panels in "
          f"{time.perf_counter() - t0:.0f} s (not part of the timings below)")
    up = widgets.chunk_dashboard_update
    rows: list[tuple[str, str, list[float]]] = []
    budgets = list(widgets.DASH_BUDGETS) * 2
    rows.append(("chunk dashboard", "token budget (precomputed)",
                 time_updates(lambda b: up(data, b), budgets)))
    rows.append(("chunk dashboard", "chunking off x budget (precomputed / refused)",
                 time_updates(lambda b: up(data, b, chunked=False), widgets.DASH_BUDGETS)))
    if not quick:
        pos = [(b, t) for b in widgets.DASH_BUDGETS for t in widgets.DASH_THRESHOLDS]
        rows.append(("chunk dashboard", "threshold x budget (precomputed)",
                     time_updates(lambda bt: up(data, bt[0], bt[1]), pos)))
    sources = {up(data, b).source for b in widgets.DASH_BUDGETS}
    assert sources == {"precomputed"}, sources
    cold: list[float] = []
    for name, values in (("long_prompt_len", widgets.DASH_LONG_LENS),
                         ("num_decodes", widgets.DASH_DECODES), ("rate", widgets.DASH_RATES)):
        default = getattr(data.base, name)
        todo = [v for v in values if v != default][: 1 if quick else None]
        cold += time_updates(lambda v, name=name: up(data, 256, **{name: v}), todo)
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
    for dash in dict.fromkeys(r[0] for r in rows):
        warm = [ms for d, name, ms in rows if d == dash and not name.startswith(("COLD", "(+"))]
        worst = max(np.median(ms) for ms in warm)
        verdict = "yes" if worst <= BAR_MS else "NO"
        print(f"{dash}: every update function <= {BAR_MS:.0f} ms median (worst slider "
              f"{worst:.1f} ms): {verdict}")


if __name__ == "__main__":
    main()
