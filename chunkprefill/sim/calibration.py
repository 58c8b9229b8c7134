"""Fit the cost model to measured step times (Vidur's method): the measured side hands over
plain data, each step's batch and duration; nothing here runs a model or imports torch.

Two fits, both least squares on log(step time) by ``scipy.optimize.least_squares``, each
trial pricing every measured step with the cost model's own formula
(``cost_model.attention_seconds`` / ``step_terms``), vectorised:

- ``fit_cost_model``: an unknown device (this CPU). Five positive terms: the effective
  FLOP/s of the linear layers, the effective memory bandwidth, the attention efficiency
  (relative to the linear FLOP/s), the per-step and per-request overheads.
- ``fit_efficiencies``: a known device (datasheet ``HardwareSpec``). Five terms with a
  meaning one can check: the share of peak FLOP/s the linear layers and attention reach,
  the share of HBM bandwidth the weight stream reaches, and the per-step and per-request
  overheads. Tensor-parallel all-reduces stay at the datasheet NVLink bandwidth (per token
  they are indistinguishable from linear FLOPs in such data, so they are not fitted).

``named_calibration("sarathi-serve")`` is the calibration: Yi-34B, TP 2, two A100 80GB
PCIe, fitted on the batches the Sarathi-Serve authors measured (``chunkprefill.data``)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from scipy.optimize import least_squares

from chunkprefill.sim.cost_model import (
    Batch,
    CostModel,
    UnitCosts,
    attention_seconds,
    batch_work,
    step_terms,
)
from chunkprefill.sim.presets import GB, HardwareSpec, ModelSpec

# The measured decode requests' context length is not in the files; 1024 (the figure's
# prompt-size scale) is assumed. The fit barely moves with it: from 0 to 4096 the
# per-request overhead absorbs the difference (tests/test_calibration.py checks).
SARATHI_DECODE_CONTEXT_LEN = 1024


@dataclass
class Calibration:
    """A cost model fitted to measured steps, and how well it fits them."""

    cost_model: CostModel
    rel_residuals: np.ndarray  # predicted / measured - 1, per step
    num_steps: int
    labels: list[str] = field(default_factory=list)  # per step, when the data names them
    # Terms the data cannot pin down ("bandwidth", "attention"): removing the term changes no
    # measured step by IDENTIFIED_SHARE or more, so any larger peak fits as well and the
    # fitted value means nothing (e.g. the memory bandwidth when the weights are a few MB).
    unidentified: tuple[str, ...] = ()

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.rel_residuals)))

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


IDENTIFIED_SHARE = 0.01  # a term that moves no step by 1% is not identified by the data


def _unidentified(work: _StepWork, u: UnitCosts) -> tuple[str, ...]:
    """The terms whose cost could be zero without moving any step by IDENTIFIED_SHARE:
    ``"bandwidth"`` (every byte free) and ``"attention"`` (every attention FLOP free)."""
    base = sum(work.terms(u))
    out = []
    for name, free in (("bandwidth", dict(byte_s=0.0)), ("attention", dict(attention_flop_s=0.0))):
        moved = np.abs(sum(work.terms(replace(u, **free))) / base - 1.0)
        if np.max(moved) < IDENTIFIED_SHARE:
            out.append(name)
    return tuple(out)


def _physical_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 * GB


def _measured_durations(batches: Sequence[Batch], durations: Sequence[float]) -> np.ndarray:
    """``durations`` as an array, checked: one per batch, at least 5, finite and > 0."""
    y = np.asarray(durations, float)
    if len(batches) != len(y) or len(y) < 5:
        raise ValueError(f"need one duration per batch and at least 5 steps, got "
                         f"{len(batches)} batches and {len(y)} durations")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("durations must be finite and > 0")
    return y


def fit_cost_model(model: ModelSpec, batches: Sequence[Batch], durations: Sequence[float],
                   hardware_name: str = "this CPU (fitted)", attention_tile: int = 128,
                   decode_attention: str = "padded") -> Calibration:
    """Fit the cost model to measured steps (``batches[i]`` = step i's (query_len,
    context_len) list, ``durations[i]`` its measured seconds). The fitted "hardware" has
    efficiency 1 by construction (its peaks are what this machine reached), so the
    HardwareSpec is fitted, not looked up. ``decode_attention`` is the executor's
    (``"padded"`` for the toy's PyTorch backend). Deterministic: a few fixed starting
    points, the best fit kept. A term the steps cannot see is named in
    ``Calibration.unidentified`` (its fitted peak is then meaningless, not measured)."""
    y = _measured_durations(batches, durations)
    if model.tensor_parallel_size != 1:
        raise ValueError(f"tensor_parallel_size must be 1 to fit one measured device, got "
                         f"{model.tensor_parallel_size}")
    probe = CostModel(model, HardwareSpec("probe", 1.0, 1.0, 1e30), attention_tile=attention_tile,
                      linear_efficiency=1, attention_efficiency=1, bandwidth_efficiency=1,
                      decode_attention=decode_attention)
    work = _StepWork(batches, decode_attention == "padded", attention_tile)
    nsteps, tokens, seqs = len(y), work.tokens, work.seqs
    logy = np.log(y)

    # Parameters z: log seconds per linear FLOP, per byte; softplus of the extra cost of an
    # attention FLOP (keeps attention efficiency <= 1); log overheads per step, per request.
    # A term the data cannot see (e.g. bandwidth when weights are tiny) may drift: clipped
    # to finite values so that 1 / s stays finite.
    def rates(z: np.ndarray) -> np.ndarray:
        th = np.array([z[0], z[1], z[0] + np.logaddexp(0.0, z[2]), z[3], z[4]])
        return np.exp(np.clip(th, -80.0, 5.0))

    def residuals(z: np.ndarray) -> np.ndarray:
        s_flop, s_byte, s_attn, ov, ps = rates(z)
        u = replace(probe.unit_costs, linear_flop_s=s_flop, attention_flop_s=s_attn,
                    byte_s=s_byte, step_overhead_s=ov, per_seq_overhead_s=ps)
        return np.log(sum(work.terms(u))) - logy

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
    return Calibration(cm, pred / y - 1.0, nsteps, unidentified=_unidentified(work, replace(
        probe.unit_costs, linear_flop_s=s_flop, attention_flop_s=s_attn, byte_s=s_byte,
        step_overhead_s=ov, per_seq_overhead_s=ps)))


class _StepWork:
    """The work of every measured step, computed once: tokens, requests, decode keys read,
    and each prefill entry; ``terms(u)`` prices all steps at once (numpy arrays)."""

    def __init__(self, batches: Sequence[Batch], padded: bool, tile: int) -> None:
        n = len(batches)
        self.tokens, self.seqs, self.dec_keys = np.zeros(n), np.zeros(n), np.zeros(n)
        pidx, pq, pc = [], [], []
        for i, b in enumerate(batches):
            self.tokens[i], self.dec_keys[i], prefills = batch_work(b, padded)
            self.seqs[i] = len(b)
            for q, c in prefills:
                pidx.append(i)
                pq.append(q)
                pc.append(c)
        self.pidx, self.pq, self.pc = np.asarray(pidx, int), np.asarray(pq, float), np.asarray(
            pc, float)
        self.tile, self.n = tile, n

    def terms(self, u: UnitCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(overhead, linear, attention, communication) seconds of every step."""
        attn = np.bincount(self.pidx, minlength=self.n, weights=attention_seconds(
            u, self.pq, self.pc, self.tile, np.maximum)) + self.dec_keys * u.decode_s_per_key
        return step_terms(u, self.tokens, self.seqs, attn, np.maximum)


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def fit_efficiencies(model: ModelSpec, hardware: HardwareSpec, batches: Sequence[Batch],
                     durations: Sequence[float],
                     linear_durations: Sequence[float | None] | None = None,
                     labels: Sequence[str] | None = None, attention_tile: int = 128,
                     decode_attention: str = "ragged") -> Calibration:
    """Fit ``CostModel(model, hardware, ...)``'s five free terms to measured steps on a
    known device: linear, attention and bandwidth efficiencies (each in (0, 1)) and the
    per-step and per-request overheads (>= 0). ``batches[i]`` = step i's (query_len,
    context_len) list, ``durations[i]`` its measured seconds; ``linear_durations[i]``
    (optional, None where unknown) the measured time of its linear layers alone, fitted to
    the model's ``linear`` term: the only way to tell a slow weight stream from a fixed
    overhead, since both cost the same in every step. Deterministic (fixed starts)."""
    y = _measured_durations(batches, durations)
    lin = [None] * len(y) if linear_durations is None else list(linear_durations)
    if len(lin) != len(y):
        raise ValueError(f"linear_durations must have one entry per batch ({len(y)}), got "
                         f"{len(lin)}")
    lin_idx = np.array([i for i, v in enumerate(lin) if v is not None], int)
    lin_y = np.array([lin[i] for i in lin_idx], float)
    if np.any(~np.isfinite(lin_y)) or np.any(lin_y <= 0):
        raise ValueError("linear_durations must be finite and > 0 (or None)")
    if labels is not None and len(labels) != len(y):
        raise ValueError(f"labels must have one entry per batch ({len(y)}), got {len(labels)}")
    work = _StepWork(batches, decode_attention == "padded", attention_tile)

    def cost_model(z: np.ndarray) -> CostModel:
        e = np.clip(_logistic(z[:3]), 1e-6, 1.0)
        return CostModel(model, hardware, linear_efficiency=float(e[0]),
                         attention_efficiency=float(e[1]), bandwidth_efficiency=float(e[2]),
                         step_overhead_s=float(np.exp(z[3])),
                         per_seq_overhead_s=float(np.exp(z[4])),
                         attention_tile=attention_tile, decode_attention=decode_attention)

    def residuals(z: np.ndarray) -> np.ndarray:
        overhead, linear, attn, comm = work.terms(cost_model(z).unit_costs)
        total = np.log(overhead + linear + attn + comm) - np.log(y)
        return np.concatenate([total, np.log(linear[lin_idx]) - np.log(lin_y)])

    t_min = float(np.min(y))
    best = None
    for e0 in (0.0, 1.5, -1.5):  # efficiencies 0.5, 0.82, 0.18
        for ov_frac in (0.1, 0.6):
            z0 = np.array([e0, e0, e0, np.log(ov_frac * t_min), np.log(1e-3 * t_min)])
            fit = least_squares(residuals, z0, method="trf", x_scale="jac")
            if best is None or fit.cost < best.cost:
                best = fit
    assert best is not None
    cm = cost_model(best.x)
    pred = np.array([cm.step_time(b) for b in batches])
    return Calibration(cm, pred / y - 1.0, len(y), list(labels or []))


# Named calibrations: name -> (model preset, hardware preset, tensor_parallel_size).
CALIBRATIONS = {"sarathi-serve": ("Yi-34B", "A100-80GB-PCIe", 2)}


def sarathi_serve_steps(decode_context_len: int = SARATHI_DECODE_CONTEXT_LEN,
                        ) -> tuple[list[list[tuple[int, int]]], list[float], list[float | None],
                                   list[str]]:
    """The measured batches as the cost model sees them: (batches, seconds, linear seconds
    or None, labels). A prefill of p tokens is ``(p, 0)``; each decode ``(1, context)``."""
    from chunkprefill.data import sarathi_serve_batches

    batches, secs, lin, labels = [], [], [], []
    for m in sarathi_serve_batches():
        b = [(m.num_prefill_tokens, 0)] if m.num_prefill_tokens else []
        batches.append(b + [(1, decode_context_len)] * m.num_decodes)
        secs.append(m.seconds)
        lin.append(m.linear_s)
        labels.append(m.label)
    return batches, secs, lin, labels


@cache
def named_calibration(name: str) -> Calibration:
    """A named calibration, fitted on first use from data shipped in the package:
    ``"sarathi-serve"`` = Yi-34B, TP 2, two A100 80GB PCIe (NVLink), on the 19 batches the
    Sarathi-Serve authors measured (figure 2 prefill-only and decode-only; the artifact's
    table-2 folder: decode, hybrid and prefill, and their linear-layer times). Nothing
    else: the figure-9 chunked prefills stay held out to check the fit."""
    if name not in CALIBRATIONS:
        raise ValueError(f"calibrated must be one of {sorted(CALIBRATIONS)}, got {name!r}")
    model, hardware, tp = CALIBRATIONS[name]
    batches, secs, lin, labels = sarathi_serve_steps()
    return fit_efficiencies(ModelSpec.preset(model, tp), HardwareSpec.preset(hardware),
                            batches, secs, lin, labels)
