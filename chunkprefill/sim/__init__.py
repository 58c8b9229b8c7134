"""At the scale of real models: predict each step's time instead of measuring it.

The same ``Scheduler`` and ``LLMEngine`` loop as the toy model, with an executor that
returns the step time a roofline cost model predicts (Sarathi-Serve chose its token budgets
this way, with the Vidur simulator). One concern per module:

- ``presets``: ``HardwareSpec`` (datasheet peaks), ``ModelSpec`` (Llama-style shapes, TP);
- ``cost_model``: ``CostModel``, the one step-time formula;
- ``executor``: ``CostModelExecutor``, ``run_workload``, ``simulate``, ``SimResult``;
- ``fast_forward``: decode-only stretches applied in bulk (invisible in the results);
- ``capacity``: SLOs, token budget from profiling, capacity search, budget sweeps;
- ``calibration``: ``fit_cost_model`` (an unknown device) and ``fit_efficiencies`` (a
  datasheet device) to measured steps given as plain data; ``named_calibration`` /
  ``CostModel.preset(..., calibrated="sarathi-serve")``: Yi-34B on two A100 80GB PCIe,
  fitted on the Sarathi-Serve authors' measurements shipped in ``chunkprefill.data``;
- ``prefill_time``: one prompt's whole prefill alone, chunk by chunk (the CLI's
  ``prefill-time``).

Imports numpy and scipy, never torch or matplotlib: measuring the toy model lives in
``chunkprefill.toy_profile``, the plots in ``chunkprefill.viz.sim``."""

from chunkprefill.sim.calibration import (
    CALIBRATIONS,
    Calibration,
    fit_cost_model,
    fit_efficiencies,
    named_calibration,
)
from chunkprefill.sim.capacity import (
    MAX_MEDIAN_SCHEDULING_DELAY_S,
    RELAXED_SLO_FACTOR,
    STRICT_SLO_FACTOR,
    CapacityResult,
    budget_from_profiling,
    capacity_search,
    chunking_overhead,
    compare_policies,
    prefill_chunk_times,
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
    "Batch", "CALIBRATIONS", "Calibration", "CapacityResult", "CostModel", "CostModelExecutor",
    "DecodeRun", "FAKE_TOKEN_ID", "GB", "HardwareSpec", "MAX_MEDIAN_SCHEDULING_DELAY_S",
    "ModelSpec", "RELAXED_SLO_FACTOR", "STRICT_SLO_FACTOR", "SimResult", "TB", "TFLOPS",
    "UnitCosts", "advance_decode_run", "batch_from_output", "batches_from_step_log",
    "budget_from_profiling", "capacity_search", "chunking_overhead", "compare_policies",
    "decode_run_length", "fit_cost_model", "fit_efficiencies", "named_calibration",
    "prefill_chunk_times", "run_workload", "scheduler_config_for", "simulate", "sweep_budgets",
    "tbt_slo",
]
