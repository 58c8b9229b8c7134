"""Measured lessons on the toy model: the runs notebooks and benchmarks share (so
neither re-implements them). Every step time is measured on this machine with the engine's
step clock; every statistic is a median over interleaved repeats with its interval.

- ``stats``: medians and ratios with bootstrap intervals, interleaved repeats, rank correlation;
- ``stall``: decodes streaming while long prompts arrive at fixed steps (the stall, the
  trade-off over budgets);
- ``step_cost``: what one step costs against its tokens, and the price of chunking;
- ``serving``: a small Poisson serving workload (the chunk-size dashboard);
- ``calibrate_toy``: the toy measured for the simulator's calibration.

Imports the core and ``sim``; torch only through the engine's model executor."""

from chunkprefill.lab.serving import (
    BudgetPoint,
    MixedResult,
    MixedWorkload,
    run_mixed,
)
from chunkprefill.lab.stall import (
    TRADEOFF_BUDGETS,
    TRADEOFF_WORKLOAD,
    StallComparison,
    StallResult,
    StallWorkload,
    TradeoffPoint,
    compare_stall,
    run_stall,
    tradeoff_sweep,
)
from chunkprefill.lab.stats import Estimate, interleaved, median_ci, ratio_ci, spearman
from chunkprefill.lab.step_cost import (
    chunking_overhead,
    fit_step_time,
    step_time_vs_tokens,
    time_prefill_step,
)

__all__ = [
    "BudgetPoint",
    "Estimate",
    "MixedResult",
    "MixedWorkload",
    "StallComparison",
    "StallResult",
    "StallWorkload",
    "TRADEOFF_BUDGETS",
    "TRADEOFF_WORKLOAD",
    "TradeoffPoint",
    "chunking_overhead",
    "compare_stall",
    "fit_step_time",
    "interleaved",
    "median_ci",
    "ratio_ci",
    "run_mixed",
    "run_stall",
    "spearman",
    "step_time_vs_tokens",
    "time_prefill_step",
    "tradeoff_sweep",
]
