"""The simulator's panel: a load slider over a simulated serving run, chunked vs prefill-first."""

from __future__ import annotations

from typing import Any

from chunkprefill.i18n import tr

SIM_PANEL_BUDGET = 2048

SIM_PANEL_QPS = 6.0  # a load at which prefill-first's stalls break the strict SLO


def simulation_view(cost_model: Any = None, budget: int = SIM_PANEL_BUDGET,
                    qps: float = SIM_PANEL_QPS, num_requests: int = 200,
                    seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """One view of ``simulation_panel``: the figure and the two ``SimResult`` objects (the same
    ShareGPT-like requests at ``qps``, chunked with ``budget`` and prefill-first)."""
    from chunkprefill.course.plots.simulated import plot_simulation
    from chunkprefill.sim import CostModel, compare_batching, tbt_slo
    from chunkprefill.workload import sharegpt_like

    cm = cost_model or CostModel.preset()
    wl = sharegpt_like(num_requests, qps, seed=seed, max_model_len=cm.model.max_model_len)
    results = compare_batching(wl, cm, budget)
    return plot_simulation(results, cm, tbt_slo(cm),
                           tr("{num_requests} ShareGPT-like requests at {qps:g} QPS",
                              num_requests=num_requests, qps=qps)), results


def simulation_panel(cost_model: Any = None, num_requests: int = 200, seed: int = 0,
                     budget: int = SIM_PANEL_BUDGET, qps: float = SIM_PANEL_QPS) -> Any:
    """Sliders (token budget, QPS) over ``simulation_view``. The default view
    is a load at which chunking matters; at low load there is little to stall and the two
    policies' P99 TBT meet."""
    import ipywidgets as widgets
    from IPython.display import display

    def show(budget: int, qps: float) -> None:
        display(simulation_view(cost_model, budget, qps, num_requests, seed)[0])

    return widgets.interactive(
        show,
        budget=widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192], value=budget,
                                       description=tr("budget")),
        qps=widgets.FloatSlider(value=qps, min=0.25, max=8.0, step=0.25, description="QPS"),
    )
