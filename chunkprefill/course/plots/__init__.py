"""Pictures for the course, one module per topic. Every function returns a
``matplotlib.figure.Figure`` built without pyplot, so nothing leaks into pyplot's global
figure list and the caller's backend is left alone.

- ``style``: colours, labels and the figure helper shared by every plot;
- ``loop``: the engine loop as a picture;
- ``schedule``: the token budget step by step (``run_trace`` steps; nothing timed);
- ``measured``: measured runs (token times, ITL / TTFT distributions, sweeps, step times);
- ``kv_cache``: the block pool, slot mapping, chunk work, causal masks;
- ``prefix``: the hash chain, prefix-cache hits and the free queue;
- ``simulated``: the simulator's figures (import it as a module: its names mirror
  ``measured``'s for the simulated counterparts)."""

from chunkprefill.course.plots.kv_cache import (
    causal_masks,
    plot_block_pool,
    plot_causal_masks,
    plot_chunk_work,
    plot_slot_mapping,
    request_colors,
)
from chunkprefill.course.plots.loop import (
    loop_names,
    plot_engine_loop,
)
from chunkprefill.course.plots.measured import (
    LONG_COLOR,
    LONG_SHADES,
    PERCENTILE_STYLE,
    SHORT_COLOR,
    SHORT_PREFILL_COLOR,
    plot_budget_sweep,
    plot_chunk_dashboard,
    plot_chunking_overhead,
    plot_latency_cdf,
    plot_step_time_vs_tokens,
    plot_step_tokens,
    plot_tile_effect,
    plot_token_times,
    plot_tradeoff,
)
from chunkprefill.course.plots.prefix import (
    COMPUTED,
    HIT,
    NO_HASH,
    BlockView,
    PoolState,
    plot_free_queue,
    plot_hash_chain,
    plot_hit_staircase,
    plot_prefix_chunks,
    prompt_blocks,
    trace_with_pool,
)
from chunkprefill.course.plots.schedule import (
    TIMELINE_KINDS,
    CellNumbers,
    bar_heights,
    budget_breakdown,
    computed_tokens_history,
    plot_budget_bars,
    plot_computed_tokens,
    plot_kv_blocks,
    plot_trace_overview,
    plot_trace_timeline,
    timeline_grid,
)
from chunkprefill.course.plots.style import (
    COLORS,
    LABELS,
    figure_and_axes,
)

__all__ = [
    "BlockView",
    "COLORS",
    "COMPUTED",
    "CellNumbers",
    "HIT",
    "LABELS",
    "LONG_COLOR",
    "LONG_SHADES",
    "NO_HASH",
    "PERCENTILE_STYLE",
    "PoolState",
    "SHORT_COLOR",
    "SHORT_PREFILL_COLOR",
    "TIMELINE_KINDS",
    "bar_heights",
    "budget_breakdown",
    "causal_masks",
    "computed_tokens_history",
    "figure_and_axes",
    "loop_names",
    "plot_block_pool",
    "plot_budget_bars",
    "plot_budget_sweep",
    "plot_causal_masks",
    "plot_chunk_dashboard",
    "plot_chunk_work",
    "plot_chunking_overhead",
    "plot_computed_tokens",
    "plot_engine_loop",
    "plot_free_queue",
    "plot_hash_chain",
    "plot_hit_staircase",
    "plot_kv_blocks",
    "plot_latency_cdf",
    "plot_prefix_chunks",
    "plot_slot_mapping",
    "plot_step_time_vs_tokens",
    "plot_step_tokens",
    "plot_tile_effect",
    "plot_token_times",
    "plot_trace_overview",
    "plot_trace_timeline",
    "plot_tradeoff",
    "prompt_blocks",
    "request_colors",
    "timeline_grid",
    "trace_with_pool",
]
