"""Interactive panels, PythonDataScienceHandbook style: a plain function computes and
renders (tests call it), and a thin ipywidgets wrapper only wires the controls to it.
ipywidgets is imported inside the wrappers, so importing a panel module stays light."""

from chunkprefill.course.panels.common import figure_png
from chunkprefill.course.panels.dashboard import (
    DASH_BUDGETS,
    DASH_DECODES,
    DASH_LONG_LENS,
    DASH_MAX_MODEL_LEN,
    DASH_RATES,
    DASH_THRESHOLDS,
    ChunkDashboardData,
    DashboardKey,
    DashboardView,
    available_devices,
    chunk_dashboard,
    chunk_dashboard_update,
    dashboard_summary,
    device_title,
    timing_label,
)
from chunkprefill.course.panels.prefix import (
    BLOCK_SIZES,
    PANEL_PROMPT_LEN,
    PREFIX_BUDGET_RANGE,
    PREFIX_RANGE,
    prefix_panel,
    prefix_panel_update,
)
from chunkprefill.course.panels.simulation import (
    SIM_PANEL_BUDGET,
    SIM_PANEL_QPS,
    simulation_panel,
    simulation_view,
)
from chunkprefill.course.panels.trace import (
    BUDGET_RANGE,
    CHUNKED_MAX_MODEL_LEN,
    DECODES_RANGE,
    MAX_TABLE_ROWS,
    PROMPT_RANGE,
    THRESHOLD_RANGE,
    trace_panel,
    trace_panel_update,
)

__all__ = [
    "BLOCK_SIZES",
    "BUDGET_RANGE",
    "CHUNKED_MAX_MODEL_LEN",
    "ChunkDashboardData",
    "DASH_BUDGETS",
    "DASH_DECODES",
    "DASH_LONG_LENS",
    "DASH_MAX_MODEL_LEN",
    "DASH_RATES",
    "DASH_THRESHOLDS",
    "DECODES_RANGE",
    "DashboardKey",
    "DashboardView",
    "MAX_TABLE_ROWS",
    "PANEL_PROMPT_LEN",
    "PREFIX_BUDGET_RANGE",
    "PREFIX_RANGE",
    "PROMPT_RANGE",
    "SIM_PANEL_BUDGET",
    "SIM_PANEL_QPS",
    "THRESHOLD_RANGE",
    "available_devices",
    "device_title",
    "chunk_dashboard",
    "chunk_dashboard_update",
    "dashboard_summary",
    "figure_png",
    "prefix_panel",
    "prefix_panel_update",
    "simulation_panel",
    "simulation_view",
    "timing_label",
    "trace_panel",
    "trace_panel_update",
]
