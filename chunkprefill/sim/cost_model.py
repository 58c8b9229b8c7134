"""The cost model: the predicted time of one engine step for a batch of requests, each
given as ``(query_len, context_len)`` (tokens this step, tokens already in the KV cache)::

    linear layers   max(FLOPs / (peak * linear_efficiency), weight bytes / (bandwidth * bw_eff))
    attention       per request: max(FLOPs / (peak * attention_efficiency),
                                     KV bytes read / (bandwidth * bw_eff))
                    a chunk re-reads the KV of every earlier chunk: the chunking overhead
    all-reduce      2 per layer under tensor parallelism, over NVLink
    overhead        step_overhead_s + per_seq_overhead_s * num_requests  (CPU side)

The formula is written once (``attention_seconds``, ``step_terms``) and works on plain
floats (the simulator prices one step at a time) or on numpy arrays (the calibration prices
every measured step per trial): pass ``maximum=np.maximum`` for arrays. The efficiency and
overhead terms are *assumptions* for the GPU presets and are *fitted* for the toy model on
this CPU (``calibration.fit_cost_model``). Imports no numpy itself."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from chunkprefill.checks import cdiv, check_float, check_int, check_positive
from chunkprefill.config import CacheConfig
from chunkprefill.scheduler import SchedulerOutput
from chunkprefill.sim.presets import GB, HardwareSpec, ModelSpec

Batch = Sequence[tuple[int, int]]  # (query_len, context_len) per scheduled request


@dataclass(frozen=True)
class UnitCosts:
    """What one unit of work costs (seconds per FLOP, per byte, per token, per step) and
    how much work the model does per unit (FLOPs per token, bytes per step): computed once
    per ``CostModel``, since the simulator prices every step."""

    linear_flop_s: float  # seconds per FLOP of the linear layers
    attention_flop_s: float  # seconds per FLOP of attention
    byte_s: float  # seconds per byte read from memory
    comm_s_per_token: float  # tensor-parallel all-reduces, per token in the step
    step_overhead_s: float
    per_seq_overhead_s: float
    attention_flops_per_key: float  # one query row against one key, all layers: QK^T + PV
    kv_bytes_per_token: float  # K and V of one token, all layers
    body_flops_per_token: float  # every layer matrix, once per token
    head_flops_per_seq: float  # the LM head, once per request (vLLM's logits_indices)
    weight_bytes: float  # streamed once per step
    decode_s_per_key: float = field(init=False)  # a decode reads one key per cached token
    weight_s: float = field(init=False)  # the weight stream's time

    def __post_init__(self) -> None:
        # A decode (1 query row over c+1 keys) costs the same per key either way round:
        object.__setattr__(self, "decode_s_per_key", max(
            self.attention_flops_per_key * self.attention_flop_s,
            self.kv_bytes_per_token * self.byte_s))
        object.__setattr__(self, "weight_s", self.weight_bytes * self.byte_s)


def attention_seconds(u: UnitCosts, query_len: Any, context_len: Any, tile: int,
                      maximum: Callable[[Any, Any], Any] = max) -> Any:
    """One request's attention: ``query_len`` new tokens over ``context_len`` cached ones
    plus themselves (causal). Compute: each query row i sees context_len + i keys. Memory:
    the whole KV (context + chunk) is read once per ``tile`` query rows; a later chunk
    re-reads every earlier chunk's KV."""
    q, c = query_len, context_len
    flops = u.attention_flops_per_key * (q * c + q * (q + 1) / 2)
    n = cdiv(q, tile)  # query tiles
    bytes_read = u.kv_bytes_per_token * (n * c + tile * n * (n - 1) / 2 + q)
    return maximum(flops * u.attention_flop_s, bytes_read * u.byte_s)


def step_terms(u: UnitCosts, num_tokens: Any, num_seqs: Any, attention_s: Any,
                    maximum: Callable[[Any, Any], Any] = max) -> tuple[Any, Any, Any, Any]:
    """(overhead, linear, attention, communication) seconds of a step of ``num_tokens``
    tokens of ``num_seqs`` requests whose attention takes ``attention_s``."""
    # Logits are computed for one row per request (vLLM's logits_indices).
    linear = maximum((u.body_flops_per_token * num_tokens + u.head_flops_per_seq * num_seqs)
                     * u.linear_flop_s, u.weight_s)
    overhead = u.step_overhead_s + u.per_seq_overhead_s * num_seqs
    comm = u.comm_s_per_token * num_tokens
    return overhead, linear, attention_s, comm


def batch_work(batch: Batch, padded: bool) -> tuple[int, int, list[tuple[int, int]]]:
    """A batch as the formula sees it: (tokens, decode keys read, prefill entries). A
    decode reads its c + 1 keys; ``padded`` decodes all read as many as the longest."""
    num_tokens = decode_keys = num_decodes = longest = 0
    prefills = []
    for q, c in batch:
        if q < 1 or c < 0:
            raise ValueError(f"each batch entry needs query_len >= 1 and context_len >= 0,"
                             f" got ({q}, {c})")
        num_tokens += q
        if q == 1:  # a decode: one query row over c + 1 keys
            decode_keys += c + 1
            num_decodes += 1
            if c >= longest:
                longest = c + 1
        else:
            prefills.append((q, c))
    if not batch:
        raise ValueError("batch is empty: a step needs at least one request")
    return num_tokens, num_decodes * longest if padded else decode_keys, prefills


@dataclass(frozen=True)
class CostModel:
    """Predicted time of one engine step on ``hardware`` for ``model``.

    Defaults are assumptions, not measurements: dense GEMMs reach ~70% of peak, attention
    kernels ~50% (FlashAttention-2/3 territory), streaming kernels ~80% of HBM bandwidth,
    and the CPU side costs 1 ms per step plus 10 us per request. Attention reads each
    request's KV once per ``attention_tile`` query rows, as tiled (Flash) kernels do.
    ``gpu_memory_utilization`` (vLLM's default 0.9) is the share of memory for weights +
    KV cache. ``decode_attention``: ``"ragged"`` (paged GPU kernels: each decode reads its
    own KV) or ``"padded"`` (the toy's PyTorch backend: all decodes of a step are padded
    to the longest one, so they cost num_decodes x the longest context)."""

    model: ModelSpec
    hardware: HardwareSpec
    linear_efficiency: float = 0.7
    attention_efficiency: float = 0.5
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 1e-3
    per_seq_overhead_s: float = 1e-5
    attention_tile: int = 128
    gpu_memory_utilization: float = 0.9
    decode_attention: str = "ragged"

    def __post_init__(self) -> None:
        if self.decode_attention not in ("ragged", "padded"):
            raise ValueError(f"decode_attention must be 'ragged' or 'padded', got "
                             f"{self.decode_attention!r}")
        for name in ("linear_efficiency", "attention_efficiency", "bandwidth_efficiency",
                     "gpu_memory_utilization"):
            check_float(name, getattr(self, name), 0.0, 1.0, lo_open=True)
        check_positive("step_overhead_s", self.step_overhead_s, allow_zero=True)
        check_positive("per_seq_overhead_s", self.per_seq_overhead_s, allow_zero=True)
        check_int("attention_tile", self.attention_tile, 1)
        m, hw = self.model, self.hardware
        usable = hw.memory_bytes * self.gpu_memory_utilization
        if m.weight_bytes_per_gpu >= usable:
            need_tp = m.tensor_parallel_size
            while need_tp < 1024 and m.with_tp(need_tp).weight_bytes_per_gpu >= usable:
                need_tp *= 2
            raise ValueError(
                f"{m.name} does not fit {hw.name}: {m.weight_bytes_per_gpu / GB:.1f} GB of "
                f"weights per GPU at tensor_parallel_size={m.tensor_parallel_size}, but "
                f"{hw.memory_bytes / GB:.0f} GB x gpu_memory_utilization="
                f"{self.gpu_memory_utilization} = {usable / GB:.1f} GB is usable; allowed: "
                f"tensor_parallel_size >= {need_tp} (or a GPU with more memory)")
        if m.tensor_parallel_size > 1 and hw.interconnect_bandwidth <= 0:
            raise ValueError(f"tensor_parallel_size={m.tensor_parallel_size} needs "
                             f"{hw.name}.interconnect_bandwidth > 0")

    @cached_property
    def unit_costs(self) -> UnitCosts:
        """Per-unit costs, computed once (the simulator calls step_time every step)."""
        m, hw = self.model, self.hardware
        tp = m.tensor_parallel_size
        comm_per_token = 0.0
        if tp > 1:  # ring all-reduce of the hidden state, twice per layer
            comm_per_token = (2 * m.num_layers * m.hidden_size * m.bytes_per_param
                              * 2 * (tp - 1) / tp / hw.interconnect_bandwidth)
        return UnitCosts(
            linear_flop_s=1.0 / (hw.peak_flops * self.linear_efficiency),
            attention_flop_s=1.0 / (hw.peak_flops * self.attention_efficiency),
            byte_s=1.0 / (hw.mem_bandwidth * self.bandwidth_efficiency),
            comm_s_per_token=comm_per_token,
            step_overhead_s=self.step_overhead_s, per_seq_overhead_s=self.per_seq_overhead_s,
            # QK^T and PV are each 2 * head_dim FLOPs per (query, key, head).
            attention_flops_per_key=4.0 * m.head_dim * m.heads_per_gpu * m.num_layers,
            kv_bytes_per_token=float(m.kv_bytes_per_token),
            body_flops_per_token=2.0 * m.body_params_per_gpu,
            head_flops_per_seq=2.0 * m.lm_head_params_per_gpu,
            weight_bytes=m.linear_bytes_per_step)

    def step_breakdown(self, batch: Batch) -> dict[str, float]:
        """Seconds per component for one step: overhead, linear, attention, communication
        (and their sum, ``total``). ``batch`` = [(query_len, context_len), ...]."""
        overhead, linear, attn, comm = self.step_components(batch)
        return {"overhead": overhead, "linear": linear, "attention": attn,
                "communication": comm, "total": overhead + linear + attn + comm}

    def step_time(self, batch: Batch) -> float:
        """Predicted seconds for one step; see ``step_breakdown``."""
        overhead, linear, attn, comm = self.step_components(batch)
        return overhead + linear + attn + comm

    def step_components(self, batch: Batch) -> tuple[float, float, float, float]:
        """(overhead, linear, attention, communication) seconds of one step: the model."""
        u, tile = self.unit_costs, self.attention_tile
        num_tokens, decode_keys, prefills = batch_work(batch, self.decode_attention == "padded")
        attn = 0.0
        for q, c in prefills:
            attn += attention_seconds(u, q, c, tile)
        attn += decode_keys * u.decode_s_per_key
        return step_terms(u, num_tokens, len(batch), attn)

    def decode_step_times(self, context_lens: Sequence[int],
                          steps_left: Sequence[int] | None = None) -> Iterator[float]:
        """``step_time`` of consecutive plain decode steps, bit for bit, without building a
        batch per step: in step k (1-based) request i decodes its token at context
        ``context_lens[i] + k - 1`` if ``k <= steps_left[i]`` (default: every step), and
        a decode-only step's cost depends only on the number of decodes and their total
        (padded: longest) KV. Runs until every request has stopped (forever without
        ``steps_left``): take what you need."""
        u = self.unit_costs
        decode_per_key = u.decode_s_per_key
        padded = self.decode_attention == "padded"
        if not context_lens:
            raise ValueError("batch is empty: a step needs at least one request")
        active = sorted(zip([math.inf] * len(context_lens) if steps_left is None
                            else steps_left, context_lens))  # by the step they stop
        total, n = sum(context_lens), len(context_lens)
        longest = max(context_lens)
        k = 0
        while n:
            overhead, linear, _, comm = step_terms(u, n, n, 0.0)
            stop = active[-n][0]  # the next step at which someone stops
            while k < stop:
                k += 1  # step k: contexts c + k - 1, so each decode reads c + k keys
                keys = n * (longest + k) if padded else total + n * k
                yield overhead + linear + keys * decode_per_key + comm
            while n and active[-n][0] == stop:  # they leave after this step
                total -= active[-n][1]
                n -= 1
            if n and padded:
                longest = max(c for _, c in active[-n:])

    def decode_step_time(self, batch_size: int = 32, context_len: int = 4096) -> float:
        """A decode-only iteration: ``batch_size`` requests, one token each, each with
        ``context_len`` tokens of KV. Sarathi-Serve's SLO yardstick (32 x 4k)."""
        check_int("batch_size", batch_size, 1)
        check_int("context_len", context_len, 0)
        return self.step_time([(1, context_len)] * batch_size)

    @property
    def max_kv_tokens(self) -> int:
        """Tokens of KV that fit next to the weights on one GPU."""
        usable = self.hardware.memory_bytes * self.gpu_memory_utilization
        return int((usable - self.model.weight_bytes_per_gpu) // self.model.kv_bytes_per_token)

    def kv_cache_config(self, block_size: int = 16) -> CacheConfig:
        """The paged cache this GPU can hold (vLLM sizes it the same way, from memory)."""
        num_blocks = self.max_kv_tokens // check_int("block_size", block_size, 1)
        if num_blocks < 1:
            raise ValueError(f"{self.model.name} leaves no room for a KV block on "
                             f"{self.hardware.name}")
        return CacheConfig(block_size=block_size, num_blocks=num_blocks)

    def describe(self) -> str:
        m, hw = self.model, self.hardware
        return (f"{m.name} (TP={m.tensor_parallel_size}, "
                f"{si_format(m.weight_bytes_per_gpu, 'B')} weights/GPU) on {hw.name} "
                f"({si_format(hw.peak_flops, 'FLOP/s')}, {si_format(hw.mem_bandwidth, 'B/s')}); "
                f"efficiencies linear {self.linear_efficiency:.2f}, attention "
                f"{self.attention_efficiency:.2f}, bandwidth {self.bandwidth_efficiency:.2f}; "
                f"overhead {self.step_overhead_s * 1e3:.2f} ms/step + "
                f"{self.per_seq_overhead_s * 1e6:.1f} us/request")

    @classmethod
    def preset(cls, model: str = "Llama-3-8B", hardware: str = "H100-SXM",
               tensor_parallel_size: int | None = None, calibrated: str | None = None,
               **kw: Any) -> CostModel:
        """Presets by name (case-insensitive). Without ``calibrated`` the efficiencies and
        overheads are the class defaults (assumptions) or ``kw``. ``calibrated=
        "sarathi-serve"``: the five terms fitted on real measurements of that setup
        (Yi-34B, TP 2, A100-80GB-PCIe; ``calibration.named_calibration``); it applies only
        to the setup it was measured on, and ``kw`` may still override single fields."""
        spec = ModelSpec.preset(model, tensor_parallel_size)
        hw = HardwareSpec.preset(hardware)
        if calibrated is None:
            return cls(spec, hw, **kw)
        from chunkprefill.sim.calibration import CALIBRATIONS, named_calibration

        if calibrated not in CALIBRATIONS:
            raise ValueError(f"calibrated must be one of {sorted(CALIBRATIONS)} or None, got "
                             f"{calibrated!r}")
        fitted = named_calibration(calibrated).cost_model
        if (spec, hw) != (fitted.model, fitted.hardware):
            raise ValueError(
                f"calibrated={calibrated!r} was measured on {fitted.model.name} TP"
                f"{fitted.model.tensor_parallel_size} on {fitted.hardware.name}, not "
                f"{spec.name} TP{spec.tensor_parallel_size} on {hw.name}")
        return replace(fitted, **kw) if kw else fitted


def si_format(value: float, unit: str) -> str:
    """``value`` with the SI prefix that gives it 3 significant digits (powers of ten, as
    datasheets count): 3.35e12 B/s -> "3.35 TB/s", 1.2e10 FLOP/s -> "12.0 GFLOP/s". A toy
    model on a CPU and an H100 print alike, never as "0 TFLOP/s"."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def batch_from_output(scheduler_output: SchedulerOutput) -> list[tuple[int, int]]:
    """The cost model's view of a step: (query_len, context_len) per scheduled request."""
    start = scheduler_output.num_computed_tokens
    return [(n, start[rid]) for rid, n in scheduler_output.num_scheduled_tokens.items()]


def batches_from_step_log(step_log: Iterable[Any]) -> list[list[tuple[int, int]]]:
    """Each logged step's (query_len, context_len) list, read off an engine's ``step_log``
    (``StepRecord.num_computed_tokens`` is where each request's tokens started: a
    prefix-cache hit and the KV of earlier chunks included)."""
    return [[(n, rec.num_computed_tokens[rid]) for rid, n in rec.num_scheduled_tokens.items()]
            for rec in step_log]
