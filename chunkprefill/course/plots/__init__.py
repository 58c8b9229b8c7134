"""Pictures for the course, one module per topic. Every function returns a
``matplotlib.figure.Figure`` built without pyplot, so nothing leaks into pyplot's global figure
list and the caller's backend is left alone. Views import the package; nothing imports views.

- ``style``: colours, labels and the figure helper shared by every plot;
- ``trace``: the token budget step by step (``run_trace`` steps; nothing timed);
- ``latency``: measured runs (token times, ITL / TTFT distributions, sweeps, step times).
"""

from chunkprefill.viz.latency import (  # noqa: F401
    LONG_COLOR,
    LONG_SHADES,
    PERCENTILE_STYLE,
    SHORT_COLOR,
    plot_budget_sweep,
    plot_chunk_dashboard,
    plot_chunking_overhead,
    plot_itl_ttft_cdfs,
    plot_latency_cdf,
    plot_step_time_vs_tokens,
    plot_step_tokens,
    plot_tile_effect,
    plot_token_times,
    plot_tradeoff,
)
from chunkprefill.viz.style import (  # noqa: F401
    COLORS,
    LABELS,
)
from chunkprefill.viz.trace import (  # noqa: F401
    TIMELINE_KINDS,
    CellNumbers,
    TokenSplit,
    bar_heights,
    budget_breakdown,
    computed_tokens_history,
    plot_budget_bars,
    plot_computed_tokens,
    plot_kv_blocks,
    plot_trace_overview,
    plot_trace_timeline,
    split_prefill_decode,
    timeline_grid,
)
