"""At the scale of real models: predict each step's time instead of measuring it.

The same ``Scheduler`` and ``LLMEngine`` loop as the toy model, with an executor that
returns the step time a roofline cost model predicts (Sarathi-Serve chose its token budgets
this way, with the Vidur simulator). One concern per module:

- ``presets``: ``HardwareSpec`` (datasheet peaks), ``ModelSpec`` (Llama-style shapes, TP);
- ``cost_model``: ``CostModel``, the one step-time formula;
- ``executor``: ``CostModelExecutor``, ``run_workload``, ``simulate``, ``SimResult``;
- ``fast_forward``: decode-only stretches applied in bulk (invisible in the results);
- ``capacity``: SLOs, token budget from profiling, capacity search, budget sweeps;
- ``calibration``: ``fit_cost_model`` to measured steps given as plain data.

Imports numpy and scipy, never torch or matplotlib: measuring the toy model lives in
``chunkprefill.toy_profile``, the plots in ``chunkprefill.viz.sim``."""

from chunkprefill.sim.calibration import Calibration, fit_cost_model
from chunkprefill.sim.capacity import (
    MAX_MEDIAN_SCHEDULING_DELAY_S,
    RELAXED_SLO_FACTOR,
    STRICT_SLO_FACTOR,
    CapacityResult,
    budget_from_profiling,
    capacity_search,
    chunking_overhead,
    compare_policies,
    sweep_budgets,
    tbt_slo,
)
from chunkprefill.sim.cost_model import (
    Batch,
    CostModel,
    UnitCosts,
    batch_from_output,
    batches_from_step_log,
)
from chunkprefill.sim.executor import (
    FAKE_TOKEN_ID,
    CostModelExecutor,
    SimResult,
    run_workload,
    scheduler_config_for,
    simulate,
)
from chunkprefill.sim.fast_forward import DecodeRun, advance_decode_run, decode_run_length
from chunkprefill.sim.presets import GB, TB, TFLOPS, HardwareSpec, ModelSpec

__all__ = [
    "FAKE_TOKEN_ID", "GB", "MAX_MEDIAN_SCHEDULING_DELAY_S", "RELAXED_SLO_FACTOR",
    "STRICT_SLO_FACTOR", "TB", "TFLOPS", "Batch", "Calibration", "CapacityResult",
    "CostModel", "CostModelExecutor", "DecodeRun", "HardwareSpec", "ModelSpec", "SimResult",
    "UnitCosts", "advance_decode_run", "batch_from_output", "batches_from_step_log",
    "budget_from_profiling", "capacity_search", "chunking_overhead", "compare_policies",
    "decode_run_length", "fit_cost_model", "run_workload", "scheduler_config_for", "simulate",
    "sweep_budgets", "tbt_slo",
]
