"""At the scale of real models: predict each step's time instead of measuring it.

The same ``Scheduler`` and ``LLMEngine`` loop as the toy model, with an executor that
returns the step time a roofline cost model predicts (Sarathi-Serve chose its token budgets
this way, with the Vidur simulator). One concern per module:

- ``presets``: ``HardwareSpec`` (datasheet peaks), ``ModelSpec`` (Llama-style shapes, TP);
- ``cost_model``: ``CostModel``, the one step-time formula;
- ``simulate``: ``CostModelExecutor`` (prices a step, or a fast-forwarded stretch of decode
  steps), ``simulate``, ``SimResult``;
- ``capacity``: SLOs, token budget from profiling, capacity search, goodput, budget sweeps;
- ``calibration``: ``fit_cost_model`` (an unknown device) and ``fit_efficiencies`` (a
  datasheet device) to measured steps given as plain data; ``named_calibration`` /
  ``CostModel.preset(..., calibrated="sarathi-serve")``: Yi-34B on two A100 80GB PCIe,
  fitted on the Sarathi-Serve authors' measurements shipped in ``chunkprefill.data``.

Imports the core (``chunkprefill/*.py``), numpy and scipy; never torch or matplotlib:
measuring the toy model lives in ``chunkprefill.lab``, the plots in ``chunkprefill.course``."""

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
    compare_batching,
    goodput,
    prefill_chunk_times,
    request_throughput,
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
from chunkprefill.sim.presets import GB, TB, TFLOPS, HardwareSpec, ModelSpec
from chunkprefill.sim.simulate import CostModelExecutor, SimResult, simulate

__all__ = [
    "Batch", "CALIBRATIONS", "Calibration", "CapacityResult", "CostModel", "CostModelExecutor",
    "GB", "HardwareSpec", "MAX_MEDIAN_SCHEDULING_DELAY_S", "ModelSpec", "RELAXED_SLO_FACTOR",
    "STRICT_SLO_FACTOR", "SimResult", "TB", "TFLOPS", "UnitCosts", "batch_from_output",
    "batches_from_step_log", "budget_from_profiling", "capacity_search", "chunking_overhead",
    "compare_batching", "fit_cost_model", "fit_efficiencies", "goodput", "named_calibration",
    "prefill_chunk_times", "request_throughput", "simulate", "sweep_budgets", "tbt_slo",
]
