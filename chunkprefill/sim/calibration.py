"""Fit the cost model to measured step times (Vidur's method): the measured side hands over
plain data, each step's batch and duration; nothing here runs a model or imports torch.

The fit is least squares on log(step time) over five positive terms, by
``scipy.optimize.least_squares``: the effective FLOP/s of the linear layers, the effective
memory bandwidth, the attention efficiency (relative to the linear FLOP/s) and the
per-step and per-request overheads. Each trial prices every measured step with the cost
model's own formula (``cost_model.attention_seconds`` / ``step_terms``), vectorised."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from chunkprefill.sim.cost_model import (
    Batch,
    CostModel,
    attention_seconds,
    batch_work,
    step_terms,
)
from chunkprefill.sim.presets import GB, HardwareSpec, ModelSpec


@dataclass
class Calibration:
    """A cost model fitted to measured steps, and how well it fits them."""

    cost_model: CostModel
    rel_residuals: np.ndarray  # predicted / measured - 1, per step
    num_steps: int

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.rel_residuals)))

    @property
    def noise_sigma(self) -> float:
        """Step-to-step jitter: the spread of the *successive differences* of the log
        residuals, over sqrt(2). Consecutive steps have nearly the same batch and see the
        same machine state, so misfit and slow drift cancel and what is left is the
        independent jitter of each step (robust: 1.4826 x median absolute difference)."""
        r = np.log1p(self.rel_residuals)
        return float(1.4826 * np.median(np.abs(np.diff(r))) / math.sqrt(2))


def _physical_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 * GB


def fit_cost_model(model: ModelSpec, batches: Sequence[Batch], durations: Sequence[float],
                   hardware_name: str = "this CPU (fitted)", attention_tile: int = 128,
                   decode_attention: str = "padded") -> Calibration:
    """Fit the cost model to measured steps (``batches[i]`` = step i's (query_len,
    context_len) list, ``durations[i]`` its measured seconds). The fitted "hardware" has
    efficiency 1 by construction (its peaks are what this machine reached), so the
    HardwareSpec is fitted, not looked up. ``decode_attention`` is the executor's
    (``"padded"`` for the toy's PyTorch backend). Deterministic: a few fixed starting
    points, the best fit kept."""
    y = np.asarray(durations, float)
    if len(batches) != len(y) or len(y) < 5:
        raise ValueError(f"need one duration per batch and at least 5 steps, got "
                         f"{len(batches)} batches and {len(y)} durations")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("durations must be finite and > 0")
    if model.tensor_parallel_size != 1:
        raise ValueError(f"tensor_parallel_size must be 1 to fit one measured device, got "
                         f"{model.tensor_parallel_size}")
    probe = CostModel(model, HardwareSpec("probe", 1.0, 1.0, 1e30), attention_tile=attention_tile,
                      linear_efficiency=1, attention_efficiency=1, bandwidth_efficiency=1,
                      decode_attention=decode_attention)
    # The work of every step, once: tokens, requests, decode keys, and each prefill entry.
    nsteps = len(y)
    tokens, seqs, dec_keys = np.zeros(nsteps), np.zeros(nsteps), np.zeros(nsteps)
    pidx, pq, pc = [], [], []
    for i, b in enumerate(batches):
        tokens[i], dec_keys[i], prefills = batch_work(b, decode_attention == "padded")
        seqs[i] = len(b)
        for q, c in prefills:
            pidx.append(i)
            pq.append(q)
            pc.append(c)
    pidx_a, pq_a, pc_a = np.asarray(pidx, int), np.asarray(pq, float), np.asarray(pc, float)
    logy = np.log(y)

    # Parameters z: log seconds per linear FLOP, per byte; softplus of the extra cost of an
    # attention FLOP (keeps attention efficiency <= 1); log overheads per step, per request.
    # A term the data cannot see (e.g. bandwidth when weights are tiny) may drift: clipped
    # to finite values so that 1 / s stays finite.
    def rates(z: np.ndarray) -> np.ndarray:
        th = np.array([z[0], z[1], z[0] + np.logaddexp(0.0, z[2]), z[3], z[4]])
        return np.exp(np.clip(th, -80.0, 5.0))

    def predict(z: np.ndarray) -> np.ndarray:
        s_flop, s_byte, s_attn, ov, ps = rates(z)
        u = replace(probe.unit_costs, linear_flop_s=s_flop, attention_flop_s=s_attn,
                    byte_s=s_byte, step_overhead_s=ov, per_seq_overhead_s=ps)
        attn = np.bincount(pidx_a, minlength=nsteps, weights=attention_seconds(
            u, pq_a, pc_a, attention_tile, np.maximum)) + dec_keys * u.decode_s_per_key
        return sum(step_terms(u, tokens, seqs, attn, np.maximum))

    def residuals(z: np.ndarray) -> np.ndarray:
        return np.log(predict(z)) - logy

    # Starting points: overheads from the cheapest steps, peaks from the largest.
    u0 = probe.unit_costs
    lin_flops = u0.body_flops_per_token * tokens + u0.head_flops_per_seq * seqs
    t_min = float(np.min(y))
    big = int(np.argmax(tokens))
    s_flop0 = max(y[big] - t_min, t_min) / max(lin_flops[big], 1.0)
    best = None
    for f_scale in (0.3, 1.0, 3.0):
        for b_frac in (0.05, 0.5):
            z0 = np.array([np.log(s_flop0 * f_scale), np.log(b_frac * t_min / u0.weight_bytes),
                           0.0, np.log(0.5 * t_min), np.log(0.02 * t_min)])
            fit = least_squares(residuals, z0, method="trf", x_scale="jac")
            if best is None or fit.cost < best.cost:
                best = fit
    assert best is not None
    s_flop, s_byte, s_attn, ov, ps = (float(v) for v in rates(best.x))
    hw = HardwareSpec(hardware_name, peak_flops=1 / s_flop, mem_bandwidth=1 / s_byte,
                      memory_bytes=_physical_memory_bytes())
    cm = CostModel(model, hw, linear_efficiency=1.0, attention_efficiency=min(1.0, s_flop / s_attn),
                   bandwidth_efficiency=1.0, step_overhead_s=ov, per_seq_overhead_s=ps,
                   attention_tile=attention_tile, gpu_memory_utilization=0.9,
                   decode_attention=decode_attention)
    pred = np.array([cm.step_time(b) for b in batches])
    return Calibration(cm, pred / y - 1.0, nsteps)
