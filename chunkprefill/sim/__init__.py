"""At the scale of real models: predict each step's time instead of measuring it.

Nobody runs Llama-3-8B on a laptop, but the scheduler never asks whether a step was real.
``CostModelExecutor`` plugs into the same ``LLMEngine`` loop as the toy model's executor:
the same ``Scheduler`` decides every step's ``{request_id: num_tokens}``, and instead of
running tensors the executor returns the step time a roofline *cost model* predicts for
that batch. TTFT, ITL (= Sarathi-Serve's TBT) and the step log come out exactly as for the
toy model, in simulated seconds. This is how Sarathi-Serve chose its token budgets (with
the Vidur simulator).

The cost model, per step, for a batch of requests given as ``(query_len, context_len)``
(tokens this step, tokens already in the KV cache):

    linear layers   max(FLOPs / (peak * linear_efficiency), weight bytes / (bandwidth * bw_eff))
    attention       per request: max(FLOPs / (peak * attention_efficiency),
                                     KV bytes read / (bandwidth * bw_eff))
                    a chunk re-reads the KV of every earlier chunk: the chunking overhead
    all-reduce      2 per layer under tensor parallelism, over NVLink
    overhead        step_overhead_s + per_seq_overhead_s * num_requests  (CPU side)

The efficiency and overhead terms are *assumptions* for the GPU presets and are *fitted*
(least squares on measured step times) for the toy model on this CPU, see ``fit_cost_model``.
Also here: SLOs and capacity search as Sarathi-Serve defines them, token budget from
profiling, and the plotting helpers the course uses. Imports numpy only; matplotlib,
ipywidgets and torch (calibration) are imported inside the functions that need them.
"""

from __future__ import annotations

import gc
import math
import numbers
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from chunkprefill.config import CacheConfig, SchedulerConfig, check_int
from chunkprefill.engine import LLMEngine, RequestOutput, SamplingParams
from chunkprefill.metrics import pooled_itl
from chunkprefill.request import Request
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.sim.fast_forward import DecodeRun, advance_decode_run
from chunkprefill.workload import WorkloadRequest

GB = 1e9  # datasheets count memory and bandwidth in powers of ten
TB = 1e12
TFLOPS = 1e12
FAKE_TOKEN_ID = 1  # what every simulated request "samples"

Batch = Sequence[tuple[int, int]]  # (query_len, context_len) per scheduled request


def _check_positive(name: str, value: object, allow_zero: bool = False) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(
        value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        rng = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {rng}, got {value!r}")
    return float(value)



# ----------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: dense peak FLOP/s (bf16 tensor cores, no 2:4 sparsity), memory
    bandwidth and capacity, and the per-direction interconnect bandwidth used by
    tensor-parallel all-reduces. Datasheet numbers are peaks, not what kernels reach:
    the ``CostModel`` efficiencies scale them."""

    name: str
    peak_flops: float  # FLOP/s
    mem_bandwidth: float  # bytes/s
    memory_bytes: float  # bytes
    interconnect_bandwidth: float = 0.0  # bytes/s per direction (0: single device only)

    def __post_init__(self) -> None:
        _check_positive("peak_flops", self.peak_flops)
        _check_positive("mem_bandwidth", self.mem_bandwidth)
        _check_positive("memory_bytes", self.memory_bytes)
        _check_positive("interconnect_bandwidth", self.interconnect_bandwidth, allow_zero=True)

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte above which a kernel is compute bound (the roofline's knee)."""
        return self.peak_flops / self.mem_bandwidth

    @classmethod
    def a100_80gb(cls) -> HardwareSpec:
        # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): BF16 Tensor Core
        # 312 TFLOPS dense (624 is "with sparsity"); 80 GB HBM2e at 2,039 GB/s;
        # NVLink 600 GB/s total = 300 GB/s each direction.
        return cls("A100-80GB", 312 * TFLOPS, 2039 * GB, 80 * GB, 300 * GB)

    @classmethod
    def h100_sxm(cls) -> HardwareSpec:
        # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 Tensor Core
        # 1,979 TFLOPS is quoted "with sparsity", so dense = 989.4 TFLOPS; 80 GB HBM3 at
        # 3.35 TB/s; NVLink 900 GB/s total = 450 GB/s each direction.
        return cls("H100-SXM", 989.4 * TFLOPS, 3.35 * TB, 80 * GB, 450 * GB)

    @classmethod
    def h200(cls) -> HardwareSpec:
        # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): same compute as H100 SXM
        # (BF16 1,979 TFLOPS with sparsity = 989.4 dense); 141 GB HBM3e at 4.8 TB/s;
        # NVLink 900 GB/s total = 450 GB/s each direction.
        return cls("H200", 989.4 * TFLOPS, 4.8 * TB, 141 * GB, 450 * GB)

    @classmethod
    def preset(cls, name: str) -> HardwareSpec:
        presets = {"A100-80GB": cls.a100_80gb, "H100-SXM": cls.h100_sxm, "H200": cls.h200}
        if name not in presets:
            raise ValueError(f"hardware must be one of {sorted(presets)}, got {name!r}")
        return presets[name]()


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a Llama-style decoder (names as in HF configs) and how it is sharded.

    With ``tensor_parallel_size`` t, every GPU holds 1/t of the heads and of the MLP
    (Megatron-style), runs every step in lock-step with the others, and all-reduces the
    hidden state twice per layer. All ``*_per_gpu`` quantities are for one GPU."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int = 4096
    bytes_per_param: int = 2  # bf16 weights and KV cache
    tensor_parallel_size: int = 1
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads",
                     "intermediate_size", "vocab_size", "bytes_per_param",
                     "tensor_parallel_size"):
            check_int(name, getattr(self, name), 1)
        check_int("max_model_len", self.max_model_len, 2)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of "
                             f"num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        tp = self.tensor_parallel_size
        if self.num_heads % tp or self.intermediate_size % tp:
            raise ValueError(
                f"tensor_parallel_size ({tp}) must divide num_heads ({self.num_heads}) and "
                f"intermediate_size ({self.intermediate_size})")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def heads_per_gpu(self) -> int:
        return self.num_heads // self.tensor_parallel_size

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads are split across GPUs; with more GPUs than KV heads each is replicated."""
        return max(1, self.num_kv_heads // self.tensor_parallel_size)

    def _layer_params(self, heads: int, kv_heads: int, inter: int) -> int:
        h, d = self.hidden_size, self.head_dim
        attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h  # q, k, v, o
        mlp = 3 * h * inter  # gate, up, down (SwiGLU)
        return attn + mlp

    @property
    def num_params(self) -> int:
        """Whole model: layers, embedding, LM head (unless tied), norms."""
        body = self.num_layers * self._layer_params(
            self.num_heads, self.num_kv_heads, self.intermediate_size)
        emb = self.vocab_size * self.hidden_size
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return body + emb * (1 if self.tie_word_embeddings else 2) + norms

    @property
    def body_params_per_gpu(self) -> int:
        """The matrices every token multiplies, in every layer (one GPU's shard)."""
        tp = self.tensor_parallel_size
        return self.num_layers * self._layer_params(
            self.heads_per_gpu, self.kv_heads_per_gpu, self.intermediate_size // tp)

    @property
    def lm_head_params_per_gpu(self) -> int:
        return self.vocab_size * self.hidden_size // self.tensor_parallel_size

    @property
    def weight_bytes_per_gpu(self) -> float:
        """What one GPU must hold: its shard of layers, embedding and head, plus norms."""
        emb = self.lm_head_params_per_gpu * (1 if self.tie_word_embeddings else 2)
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return float((self.body_params_per_gpu + emb + norms) * self.bytes_per_param)

    @property
    def linear_bytes_per_step(self) -> float:
        """Weights streamed from memory once per step: every layer matrix and the LM head
        (the embedding is a lookup of a few rows)."""
        return float((self.body_params_per_gpu + self.lm_head_params_per_gpu)
                     * self.bytes_per_param)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token, all layers, one GPU."""
        return 2 * self.num_layers * self.kv_heads_per_gpu * self.head_dim * self.bytes_per_param

    def with_tp(self, tensor_parallel_size: int) -> ModelSpec:
        return replace(self, tensor_parallel_size=tensor_parallel_size)

    # Presets: the numbers are the Hugging Face config.json of each model.
    @classmethod
    def llama3_8b(cls, tensor_parallel_size: int = 1) -> ModelSpec:
        # meta-llama/Meta-Llama-3-8B config.json
        return cls("Llama-3-8B", num_layers=32, hidden_size=4096, num_heads=32,
                   num_kv_heads=8, intermediate_size=14336, vocab_size=128256,
                   max_model_len=8192, tensor_parallel_size=tensor_parallel_size)

    @classmethod
    def mistral_7b(cls, tensor_parallel_size: int = 1) -> ModelSpec:
        # mistralai/Mistral-7B-v0.1 config.json (its 4096-token sliding window is ignored:
        # attention here always reads the whole context, an upper bound past 4k tokens)
        return cls("Mistral-7B", num_layers=32, hidden_size=4096, num_heads=32,
                   num_kv_heads=8, intermediate_size=14336, vocab_size=32000,
                   max_model_len=32768, tensor_parallel_size=tensor_parallel_size)

    @classmethod
    def llama2_70b(cls, tensor_parallel_size: int = 4) -> ModelSpec:
        # meta-llama/Llama-2-70b-hf config.json; 138 GB of bf16 weights: TP 4 on 80 GB GPUs
        return cls("Llama-2-70B", num_layers=80, hidden_size=8192, num_heads=64,
                   num_kv_heads=8, intermediate_size=28672, vocab_size=32000,
                   max_model_len=4096, tensor_parallel_size=tensor_parallel_size)

    @classmethod
    def preset(cls, name: str, tensor_parallel_size: int | None = None) -> ModelSpec:
        presets = {"Llama-3-8B": cls.llama3_8b, "Mistral-7B": cls.mistral_7b,
                   "Llama-2-70B": cls.llama2_70b}
        if name not in presets:
            raise ValueError(f"model must be one of {sorted(presets)}, got {name!r}")
        spec = presets[name]()
        return spec if tensor_parallel_size is None else spec.with_tp(tensor_parallel_size)

    @classmethod
    def from_model_config(cls, config: Any, bytes_per_param: int = 4,
                          name: str = "toy") -> ModelSpec:
        """The toy ``ModelConfig`` (float32 weights and KV cache: 4 bytes)."""
        return cls(name, num_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
                   num_heads=config.num_attention_heads,
                   num_kv_heads=config.num_key_value_heads,
                   intermediate_size=config.intermediate_size, vocab_size=config.vocab_size,
                   max_model_len=config.max_position_embeddings,
                   bytes_per_param=bytes_per_param,
                   tie_word_embeddings=config.tie_word_embeddings)


# ----------------------------------------------------------------------------- cost model


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
            v = getattr(self, name)
            if not (isinstance(v, numbers.Real) and 0 < v <= 1):
                raise ValueError(f"{name} must be in (0, 1], got {v!r}")
        _check_positive("step_overhead_s", self.step_overhead_s, allow_zero=True)
        _check_positive("per_seq_overhead_s", self.per_seq_overhead_s, allow_zero=True)
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

    # Per-unit costs, computed once (the simulator calls step_time every step).
    @cached_property
    def _consts(self) -> tuple[float, ...]:
        m, hw = self.model, self.hardware
        flop_s = 1.0 / (hw.peak_flops * self.linear_efficiency)  # seconds per linear FLOP
        attn_flop_s = 1.0 / (hw.peak_flops * self.attention_efficiency)
        byte_s = 1.0 / (hw.mem_bandwidth * self.bandwidth_efficiency)  # seconds per byte
        # Attention FLOPs of one query row against one key, all layers on this GPU:
        # QK^T and PV are each 2 * head_dim FLOPs per (query, key, head).
        attn_flops_qk = 4.0 * m.head_dim * m.heads_per_gpu * m.num_layers
        kv_bytes = float(m.kv_bytes_per_token)
        # A decode (1 query row over c+1 keys) costs the same per key either way round:
        decode_per_key = max(attn_flops_qk * attn_flop_s, kv_bytes * byte_s)
        tp = m.tensor_parallel_size
        comm_per_token = 0.0
        if tp > 1:  # ring all-reduce of the hidden state, twice per layer
            comm_per_token = (2 * m.num_layers * m.hidden_size * m.bytes_per_param
                              * 2 * (tp - 1) / tp / hw.interconnect_bandwidth)
        return (flop_s, attn_flop_s, byte_s, attn_flops_qk, kv_bytes, decode_per_key,
                comm_per_token, 2.0 * m.body_params_per_gpu, 2.0 * m.lm_head_params_per_gpu,
                m.linear_bytes_per_step * byte_s)

    def attention_time(self, query_len: int, context_len: int) -> float:
        """One request's attention: ``query_len`` new tokens over ``context_len`` cached
        ones plus themselves (causal). Compute: each query row i sees context_len + i keys.
        Memory: the whole KV (context + chunk) is read once per tile of query rows; a
        later chunk re-reads every earlier chunk's KV."""
        (_, attn_flop_s, byte_s, attn_flops_qk, kv_bytes, *_) = self._consts
        q, c = query_len, context_len
        flops = attn_flops_qk * (q * c + q * (q + 1) / 2)
        n = -(-q // self.attention_tile)  # query tiles
        bytes_read = kv_bytes * (n * c + self.attention_tile * n * (n - 1) / 2 + q)
        return max(flops * attn_flop_s, bytes_read * byte_s)

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
        (flop_s, _, _, _, _, decode_per_key, comm_per_token, body_flops, head_flops,
         weight_s) = self._consts
        num_tokens = 0
        decode_keys = num_decodes = longest = 0
        attn = 0.0
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
                attn += self.attention_time(q, c)
        if self.decode_attention == "padded":
            decode_keys = num_decodes * longest
        attn += decode_keys * decode_per_key
        num_seqs = len(batch)
        if num_seqs == 0:
            raise ValueError("batch is empty: a step needs at least one request")
        return self._components(num_tokens, num_seqs, attn)

    def _components(self, num_tokens: int, num_seqs: int,
                    attn: float) -> tuple[float, float, float, float]:
        (flop_s, _, _, _, _, _, comm_per_token, body_flops, head_flops, weight_s) = self._consts
        # Logits are computed for one row per request (vLLM's logits_indices).
        linear = max((body_flops * num_tokens + head_flops * num_seqs) * flop_s, weight_s)
        overhead = self.step_overhead_s + self.per_seq_overhead_s * num_seqs
        comm = comm_per_token * num_tokens
        return overhead, linear, attn, comm

    def decode_step_times(self, context_lens: Sequence[int],
                          steps_left: Sequence[int] | None = None) -> Iterator[float]:
        """``step_time`` of consecutive plain decode steps, bit for bit, without building a
        batch per step: in step k (1-based) request i decodes its token at context
        ``context_lens[i] + k - 1`` if ``k <= steps_left[i]`` (default: every step), and
        a decode-only step's cost depends only on the number of decodes and their total
        (padded: longest) KV. Runs until every request has stopped (forever without
        ``steps_left``): take what you need."""
        decode_per_key = self._consts[5]
        padded = self.decode_attention == "padded"
        if not context_lens:
            raise ValueError("batch is empty: a step needs at least one request")
        active = sorted(zip([math.inf] * len(context_lens) if steps_left is None
                            else steps_left, context_lens))  # by the step they stop
        total, n = sum(context_lens), len(context_lens)
        longest = max(context_lens)
        k = 0
        while n:
            overhead, linear, _, comm = self._components(n, n, 0.0)
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
        return (f"{m.name} (TP={m.tensor_parallel_size}, {m.weight_bytes_per_gpu / GB:.1f} GB "
                f"weights/GPU) on {hw.name} ({hw.peak_flops / TFLOPS:.0f} TFLOP/s, "
                f"{hw.mem_bandwidth / GB:.0f} GB/s); efficiencies linear "
                f"{self.linear_efficiency:.2f}, attention {self.attention_efficiency:.2f}, "
                f"bandwidth {self.bandwidth_efficiency:.2f}; overhead "
                f"{self.step_overhead_s * 1e3:.2f} ms/step + "
                f"{self.per_seq_overhead_s * 1e6:.1f} us/request")

    @classmethod
    def preset(cls, model: str = "Llama-3-8B", hardware: str = "H100-SXM",
               tensor_parallel_size: int | None = None, **kw: Any) -> CostModel:
        return cls(ModelSpec.preset(model, tensor_parallel_size), HardwareSpec.preset(hardware),
                   **kw)


def batch_from_output(scheduler_output: SchedulerOutput) -> list[tuple[int, int]]:
    """The cost model's view of a step: (query_len, context_len) per scheduled request."""
    start = scheduler_output.num_computed_tokens
    return [(n, start[rid]) for rid, n in scheduler_output.num_scheduled_tokens.items()]


def batches_from_step_log(step_log: Iterable[Any]) -> list[list[tuple[int, int]]]:
    """Rebuild each logged step's (query_len, context_len) list from an engine's
    ``step_log`` alone: a request's context is the sum of its earlier chunks, reset to 0
    when it is preempted (it recomputes from scratch)."""
    computed: dict[str, int] = {}
    batches = []
    for rec in step_log:
        for rid in rec.preempted:
            computed[rid] = 0
        batch = []
        for rid, n in rec.num_scheduled_tokens.items():
            c = computed.get(rid, 0)
            batch.append((n, c))
            computed[rid] = c + n
        batches.append(batch)
    return batches


# ----------------------------------------------------------------------------- executor


class CostModelExecutor:
    """An ``Executor`` without tensors: every request that owes nothing after the step
    "samples" ``FAKE_TOKEN_ID``, and the step lasts what the cost model predicts.
    ``LLMEngine(CostModelExecutor(cost_model), scheduler_config, cache_config)`` is the
    simulator; the ``Scheduler`` inside is the one that drives the toy model.
    ``noise_sigma`` > 0 multiplies each step by a seeded lognormal factor (median 1): the
    jitter a calibration measured on a real machine, so tail latencies are comparable."""

    def __init__(self, cost_model: CostModel, noise_sigma: float = 0.0, seed: int = 0) -> None:
        self.cost_model = cost_model
        self.noise_sigma = _check_positive("noise_sigma", noise_sigma, allow_zero=True)
        self._rng = np.random.default_rng(seed) if noise_sigma > 0 else None
        self.last_new_req_ids: list[str] = []  # admitted by the latest step
        self.num_steps = 0

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float]:
        start = scheduler_output.num_computed_tokens
        batch, sampled = [], {}
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            batch.append((n, start[rid]))
            r = requests[rid]
            if r.num_owed_tokens == 0:  # its last owed token ran: it samples
                sampled[rid] = FAKE_TOKEN_ID
        self.last_new_req_ids = scheduler_output.scheduled_new_req_ids
        self.num_steps += 1
        duration = self.cost_model.step_time(batch)
        if self._rng is not None:  # a measured machine's step-to-step jitter (lognormal)
            duration *= math.exp(self.noise_sigma * self._rng.standard_normal())
        return sampled, duration

    def decode_run(self, scheduler: Scheduler, max_steps: int, clock: float,
                   stop_at: float) -> tuple[DecodeRun, list[float]]:
        """Up to ``max_steps`` plain decode steps at once (``LLMEngine.step_decode_run``),
        stopping after the first that ends at or after ``stop_at``: the scheduler advanced
        by ``fast_forward.advance_decode_run`` and the steps' durations, the same numbers,
        noise draws included, as ``execute`` one step at a time."""
        durations: list[float] = []

        def choose(k: int, context_lens: list[int], steps_left: list[int]) -> int:
            self.last_new_req_ids = []
            t = clock
            for d in self.cost_model.decode_step_times(context_lens, steps_left):
                if self._rng is not None:
                    d *= math.exp(self.noise_sigma * self._rng.standard_normal())
                durations.append(d)
                t += d
                if t >= stop_at or len(durations) == k:
                    break
            self.num_steps += len(durations)
            return len(durations)  # up to the next arrival

        return advance_decode_run(scheduler, max_steps, FAKE_TOKEN_ID, choose), durations


# ----------------------------------------------------------------------------- simulation


@dataclass
class SimResult:
    """One simulated (or measured) run: the engine (its ``step_log``), the latency summary
    (``engine.summary()``: TTFT / ITL / TPOT / E2EL in seconds) and each request's
    scheduling delay (first time scheduled - arrival, Sarathi-Serve's definition)."""

    engine: LLMEngine
    summary: dict[str, dict[str, float]]
    scheduling_delays: np.ndarray
    wall_s: float
    outputs: list[RequestOutput] = field(default_factory=list)  # in finishing order

    @property
    def p99_tbt(self) -> float:
        """P99 time between tokens (pooled ITL), seconds."""
        return self.summary["itl"].get("p99", 0.0)

    @property
    def median_ttft(self) -> float:
        return self.summary["ttft"]["p50"]

    @property
    def median_scheduling_delay(self) -> float:
        return float(np.median(self.scheduling_delays))

    @property
    def step_log(self) -> list[Any]:
        return self.engine.step_log

    @property
    def itls(self) -> np.ndarray:
        """Every inter-token gap, seconds."""
        return pooled_itl(o.metrics for o in self.outputs)


def run_workload(engine: LLMEngine, workload: Sequence[WorkloadRequest],
                 on_step: Callable[[LLMEngine], None] | None = None) -> list[RequestOutput]:
    """Feed ``workload`` to ``engine`` as its clock reaches each arrival and step until
    every request has finished. A request is added (with its true arrival time) right
    before the first step that starts at or after its arrival, which is what
    ``LLMEngine.step`` does with future arrivals itself; adding them just in time keeps
    the engine's pending list short. Works for any executor, measured or simulated.
    ``on_step`` is called after every ``step()`` and after every bulk run of decode steps
    (``LLMEngine.step_decode_run``), not once per step of such a run.
    Returns the finished requests' outputs, in finishing order."""
    reqs = sorted(workload, key=lambda r: r.arrival_time)
    params_cache: dict[int, SamplingParams] = {}
    i, n = 0, len(reqs)
    outputs: list[RequestOutput] = []

    def add(r: WorkloadRequest) -> None:
        sp = params_cache.get(r.output_len)
        if sp is None:
            sp = params_cache[r.output_len] = SamplingParams(max_tokens=r.output_len)
        engine.add_request([0] * r.prompt_len, sp, request_id=r.request_id,
                           arrival_time=r.arrival_time)

    while i < n or engine.has_unfinished_requests():
        while i < n and reqs[i].arrival_time <= engine.clock:
            add(reqs[i])
            i += 1
        if not engine.has_unfinished_requests():
            add(reqs[i])  # idle: a future arrival; the engine's clock jumps to it
            i += 1
        # Decode-only stretches until the next arrival in bulk (if the executor can).
        run = engine.step_decode_run(reqs[i].arrival_time if i < n else math.inf)
        outputs += engine.step() if run is None else run
        if on_step is not None:
            on_step(engine)
    return outputs


def simulate(workload: Sequence[WorkloadRequest], cost_model: CostModel,
             scheduler_config: SchedulerConfig | None = None,
             cache_config: CacheConfig | None = None, noise_sigma: float = 0.0,
             seed: int = 0, fast_forward: bool = True) -> SimResult:
    """Run ``workload`` through ``LLMEngine(CostModelExecutor(cost_model), ...)``.
    ``cache_config`` defaults to the KV cache that fits the GPU next to the weights;
    ``noise_sigma``/``seed``: see ``CostModelExecutor``. ``fast_forward=False`` steps every
    decode-only stretch one step at a time (same result, slower: a test compares them).
    ``wall_s`` covers the whole call, metrics included."""
    if not workload:
        raise ValueError("workload is empty: need at least one request")
    scheduler_config = scheduler_config or SchedulerConfig(
        max_model_len=cost_model.model.max_model_len)
    cache_config = cache_config or cost_model.kv_cache_config()
    t0 = time.perf_counter()
    executor = CostModelExecutor(cost_model, noise_sigma, seed)
    engine = LLMEngine(executor, scheduler_config, cache_config, fast_forward=fast_forward)
    first_scheduled: dict[str, float] = {}

    def on_step(eng: LLMEngine) -> None:
        if executor.last_new_req_ids:
            t = eng.step_log[-1].start_s
            for rid in executor.last_new_req_ids:
                first_scheduled.setdefault(rid, t)
            executor.last_new_req_ids = []

    # A run allocates millions of small objects that live until the end; Python's cyclic
    # GC would rescan all of them (and every token list) again and again for cycles this
    # loop never makes. Paused for the run, restored after: a third of the time saved.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        outputs = run_workload(engine, workload, on_step)
    finally:
        if gc_was_enabled:
            gc.enable()
    arrival = {r.request_id: r.arrival_time for r in workload}
    delays = np.asarray([first_scheduled[rid] - arrival[rid] for rid in arrival])
    summary = engine.summary()
    return SimResult(engine, summary, delays, time.perf_counter() - t0, outputs)


def scheduler_config_for(policy: str, budget: int, max_model_len: int,
                         max_num_seqs: int = 128) -> SchedulerConfig:
    """The two policies the course compares.

    ``"chunked"``: vLLM V1 / Sarathi-Serve stall-free batching with token budget
    ``budget`` (decodes first, prefill chunks fill the rest).
    ``"prefill_first"``: vLLM V0 / Orca style: a step is all prefill (whole prompts, new
    ones first) or all decode; its budget must hold a whole prompt, so it is at least
    ``max_model_len`` (vLLM V0's default with chunking off)."""
    if policy == "chunked":
        return SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                               max_model_len=max_model_len)
    if policy == "prefill_first":
        return SchedulerConfig(max_num_batched_tokens=max(budget, max_model_len),
                               max_num_seqs=max_num_seqs, enable_chunked_prefill=False,
                               max_model_len=max_model_len, policy="prefill_first")
    raise ValueError(f"policy must be 'chunked' or 'prefill_first', got {policy!r}")


# ----------------------------------------------------------------------------- SLOs, capacity

STRICT_SLO_FACTOR = 5.0  # Sarathi-Serve: strict P99 TBT SLO = 5x a decode-only iteration
RELAXED_SLO_FACTOR = 25.0  # relaxed = 25x
MAX_MEDIAN_SCHEDULING_DELAY_S = 2.0  # Sarathi-Serve's capacity also needs this


def tbt_slo(cost_model: CostModel, factor: float = STRICT_SLO_FACTOR, batch_size: int = 32,
            context_len: int = 4096) -> float:
    """Sarathi-Serve's P99 TBT SLO: ``factor`` x the time of a decode-only iteration of
    ``batch_size`` requests with ``context_len`` tokens each (5x strict, 25x relaxed)."""
    _check_positive("factor", factor)
    return factor * cost_model.decode_step_time(batch_size, context_len)


def _check_slo(cost_model: CostModel, slo_s: float) -> float:
    slo_s = _check_positive("slo_s", slo_s)
    one = cost_model.step_time([(1, 1)])
    if slo_s < one:
        raise ValueError(f"slo_s ({slo_s * 1e3:.3f} ms) is below one decode step of a single "
                         f"request ({one * 1e3:.3f} ms): no schedule can meet it; allowed: "
                         f"slo_s >= {one:.6g}")
    return slo_s


def budget_from_profiling(cost_model: CostModel, slo_s: float, num_decodes: int = 32,
                          context_len: int = 4096, max_budget: int = 65536,
                          multiple_of: int = 1) -> int:
    """Sarathi-Serve's token budget: the largest step (``num_decodes`` decodes at
    ``context_len`` + one prefill chunk, also ``context_len`` deep) whose predicted time
    meets ``slo_s``. Step time is monotone in tokens, so bisection finds it."""
    slo_s = _check_slo(cost_model, slo_s)
    check_int("num_decodes", num_decodes, 0)
    check_int("multiple_of", multiple_of, 1)

    def t(tokens: int) -> float:
        chunk = tokens - num_decodes
        batch = [(1, context_len)] * min(num_decodes, tokens)
        if chunk > 0:
            batch.append((chunk, context_len))
        return cost_model.step_time(batch)

    lo = max(num_decodes, 1)
    if t(lo) > slo_s:
        raise ValueError(f"slo_s ({slo_s * 1e3:.2f} ms) is below a decode-only step of "
                         f"{lo} requests at context {context_len} ({t(lo) * 1e3:.2f} ms)")
    hi = max_budget
    if t(hi) <= slo_s:
        return hi - hi % multiple_of or multiple_of
    while hi - lo > 1:  # invariant: t(lo) <= slo < t(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if t(mid) <= slo_s else (lo, mid)
    return max(lo - lo % multiple_of, multiple_of)


@dataclass
class CapacityResult:
    """Highest QPS meeting both SLOs, and every trial of the search:
    (qps, p99_tbt_s, median_scheduling_delay_s, meets)."""

    qps: float
    slo_s: float
    trials: list[tuple[float, float, float, bool]] = field(default_factory=list)


def capacity_search(cost_model: CostModel, scheduler_config: SchedulerConfig,
                    workload_at: Callable[[float], Sequence[WorkloadRequest]], slo_s: float,
                    qps_lo: float = 0.25, qps_hi: float = 8.0, rel_tol: float = 0.05,
                    max_median_scheduling_delay_s: float = MAX_MEDIAN_SCHEDULING_DELAY_S,
                    cache_config: CacheConfig | None = None,
                    max_trials: int = 20) -> CapacityResult:
    """Sarathi-Serve's capacity: the highest QPS whose P99 TBT <= ``slo_s`` and whose
    median scheduling delay <= 2 s, by bisection on QPS (geometric, until the bracket is
    within ``rel_tol``). ``workload_at(qps)`` must return the same requests at every
    QPS, only their arrivals rescaled (``workload.make_workload`` does). Returns qps=0 if
    even ``qps_lo`` fails."""
    slo_s = _check_slo(cost_model, slo_s)
    qps_lo, qps_hi = _check_positive("qps_lo", qps_lo), _check_positive("qps_hi", qps_hi)
    if qps_hi <= qps_lo:
        raise ValueError(f"qps_hi ({qps_hi}) must be > qps_lo ({qps_lo})")
    _check_positive("rel_tol", rel_tol)
    res = CapacityResult(0.0, slo_s)

    def meets(qps: float) -> bool:
        r = simulate(workload_at(qps), cost_model, scheduler_config, cache_config)
        ok = (r.p99_tbt <= slo_s
              and r.median_scheduling_delay <= max_median_scheduling_delay_s)
        res.trials.append((qps, r.p99_tbt, r.median_scheduling_delay, ok))
        return ok

    if not meets(qps_lo):
        return res
    while meets(qps_hi):  # widen until the top fails
        qps_lo, qps_hi = qps_hi, qps_hi * 2
        if len(res.trials) >= max_trials:
            res.qps = qps_lo
            return res
    while qps_hi / qps_lo > 1 + rel_tol and len(res.trials) < max_trials:
        mid = math.sqrt(qps_lo * qps_hi)
        qps_lo, qps_hi = (mid, qps_hi) if meets(mid) else (qps_lo, mid)
    res.qps = qps_lo
    return res


def chunking_overhead(cost_model: CostModel, prompt_len: int,
                      chunk_sizes: Sequence[int]) -> np.ndarray:
    """Predicted time to prefill one ``prompt_len`` prompt alone in chunks of each size,
    divided by the time in one piece: the price of chunking (weights re-read every step,
    earlier chunks' KV re-read, per-step overhead)."""
    check_int("prompt_len", prompt_len, 1)
    whole = cost_model.step_time([(prompt_len, 0)])
    out = []
    for size in chunk_sizes:
        size = check_int("chunk_size", size, 1)
        total, done = 0.0, 0
        while done < prompt_len:
            q = min(size, prompt_len - done)
            total += cost_model.step_time([(q, done)])
            done += q
        out.append(total / whole)
    return np.asarray(out)


def sweep_budgets(cost_model: CostModel, budgets: Sequence[int],
                  workload: Sequence[WorkloadRequest], max_num_seqs: int = 128,
                  ) -> list[dict[str, float]]:
    """Simulate ``workload`` once per token budget (chunked) and once prefill-first.
    Rows: policy, budget, p99_tbt_s, median_ttft_s, median_scheduling_delay_s."""
    rows = []
    mml = cost_model.model.max_model_len
    runs = [("chunked", b) for b in budgets] + [("prefill_first", mml)]
    for policy, b in runs:
        r = simulate(workload, cost_model, scheduler_config_for(policy, b, mml, max_num_seqs))
        rows.append({"policy": policy, "budget": b, "p99_tbt_s": r.p99_tbt,
                     "median_ttft_s": r.median_ttft,
                     "median_scheduling_delay_s": r.median_scheduling_delay})
    return rows


# ----------------------------------------------------------------------------- calibration


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


def _flatten(batches: Sequence[Batch]) -> tuple[np.ndarray, ...]:
    step_idx, q, c = [], [], []
    for i, b in enumerate(batches):
        for qi, ci in b:
            step_idx.append(i)
            q.append(qi)
            c.append(ci)
    return np.asarray(step_idx), np.asarray(q, float), np.asarray(c, float)


def fit_cost_model(model: ModelSpec, batches: Sequence[Batch], durations: Sequence[float],
                   hardware_name: str = "this CPU (fitted)", attention_tile: int = 128,
                   decode_attention: str = "padded") -> Calibration:
    """Fit the cost model to measured steps: least squares on log(step time) over five
    positive terms: effective FLOP/s of the linear layers, effective memory bandwidth,
    attention efficiency (relative to the linear FLOP/s), per-step and per-request
    overhead. The fitted "hardware" has efficiency 1 by construction (its peaks are
    what this machine reached), so the HardwareSpec is fitted, not looked up.
    ``decode_attention`` is the executor's (``"padded"`` for the toy's PyTorch backend).
    Levenberg-Marquardt in numpy from a few starting points; deterministic."""
    y = np.asarray(durations, float)
    if len(batches) != len(y) or len(y) < 5:
        raise ValueError(f"need one duration per batch and at least 5 steps, got "
                         f"{len(batches)} batches and {len(y)} durations")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("durations must be finite and > 0")
    sidx, q, c = _flatten(batches)
    nsteps = len(y)
    probe = CostModel(model, HardwareSpec("probe", 1.0, 1.0, 1e30), attention_tile=attention_tile,
                      linear_efficiency=1, attention_efficiency=1, bandwidth_efficiency=1,
                      decode_attention=decode_attention)
    (_, _, _, attn_flops_qk, kv_bytes, *_rest) = probe._consts
    body_flops, head_flops = 2.0 * model.body_params_per_gpu, 2.0 * model.lm_head_params_per_gpu
    weight_bytes = model.linear_bytes_per_step
    tokens = np.bincount(sidx, weights=q, minlength=nsteps)
    seqs = np.bincount(sidx, minlength=nsteps).astype(float)
    lin_flops = body_flops * tokens + head_flops * seqs
    a_flops = attn_flops_qk * (q * c + q * (q + 1) / 2)
    tile = attention_tile
    ntile = np.ceil(q / tile)
    a_bytes = kv_bytes * (ntile * c + tile * ntile * (ntile - 1) / 2 + q)
    is_dec = q == 1
    dec_keys = np.bincount(sidx[is_dec], weights=c[is_dec] + 1, minlength=nsteps)
    if decode_attention == "padded":
        longest = np.zeros(nsteps)
        np.maximum.at(longest, sidx[is_dec], c[is_dec] + 1)
        dec_keys = np.bincount(sidx[is_dec], minlength=nsteps) * longest
    pre = ~is_dec
    a_flops, a_bytes, pidx = a_flops[pre], a_bytes[pre], sidx[pre]
    logy = np.log(y)

    # The cost model's formula, vectorised over all steps (checked against step_time below).
    def predict(th: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # an overshooting trial step
            s_flop, s_byte, s_attn, ov, ps = np.exp(th)      # is rejected by loss()
            attn = np.bincount(pidx, weights=np.maximum(a_flops * s_attn, a_bytes * s_byte),
                               minlength=nsteps)
            attn += dec_keys * max(attn_flops_qk * s_attn, kv_bytes * s_byte)
            return ov + ps * seqs + np.maximum(lin_flops * s_flop, weight_bytes * s_byte) + attn

    def loss(th: np.ndarray) -> float:
        r = np.log(predict(th)) - logy
        val = float(r @ r)
        return val if math.isfinite(val) else math.inf

    # s_attn = s_flop * (1 + e^z) keeps attention efficiency below 1: reparametrise. A term
    # the data cannot see (e.g. bandwidth when weights are tiny) may drift: clip it to
    # finite values so that 1 / s stays finite.
    def unpack(z: np.ndarray) -> np.ndarray:
        th = np.array([z[0], z[1], z[0] + np.logaddexp(0.0, z[2]), z[3], z[4]])
        return np.clip(th, -80.0, 5.0)

    def lm(z: np.ndarray, iters: int = 200) -> tuple[np.ndarray, float]:
        lam = 1e-2
        cur = loss(unpack(z))
        for _ in range(iters):
            r = np.log(predict(unpack(z))) - logy
            jac = np.empty((nsteps, 5))
            for k in range(5):
                dz = np.zeros(5)
                dz[k] = 1e-6
                jac[:, k] = (np.log(predict(unpack(z + dz))) - logy - r) / 1e-6
            g = jac.T @ r
            h = jac.T @ jac
            improved = False
            while lam < 1e12:
                step = np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g)
                new = loss(unpack(z + step))
                if new < cur:
                    z, cur, lam, improved = z + step, new, max(lam / 3, 1e-9), True
                    break
                lam *= 4
            if not improved or np.max(np.abs(step)) < 1e-9:
                break
        return z, cur

    # Starting points: overheads from the cheapest steps, peaks from the largest.
    t_min = float(np.min(y))
    big = int(np.argmax(tokens))
    s_flop0 = max(y[big] - t_min, t_min) / max(lin_flops[big], 1.0)
    best = None
    for f_scale in (0.3, 1.0, 3.0):
        for b_frac in (0.05, 0.5):
            z0 = np.array([np.log(s_flop0 * f_scale), np.log(b_frac * t_min / weight_bytes),
                           0.0, np.log(0.5 * t_min), np.log(0.02 * t_min)])
            z, cur = lm(z0)
            if best is None or cur < best[1]:
                best = (z, cur)
    assert best is not None
    th = unpack(best[0])
    s_flop, s_byte, s_attn, ov, ps = (float(v) for v in np.exp(th))
    hw = HardwareSpec(hardware_name, peak_flops=1 / s_flop, mem_bandwidth=1 / s_byte,
                      memory_bytes=_physical_memory_bytes())
    cm = CostModel(model, hw, linear_efficiency=1.0, attention_efficiency=min(1.0, s_flop / s_attn),
                   bandwidth_efficiency=1.0, step_overhead_s=ov, per_seq_overhead_s=ps,
                   attention_tile=attention_tile, gpu_memory_utilization=0.9,
                   decode_attention=decode_attention)
    pred = np.array([cm.step_time(b) for b in batches])
    if not np.allclose(pred, predict(th), rtol=1e-6):
        raise RuntimeError("fit_cost_model's vectorised formula disagrees with step_time")
    return Calibration(cm, pred / y - 1.0, nsteps)


def _physical_memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 * GB


def toy_profile_workloads(seed: int = 0) -> list[tuple[SchedulerConfig, list[WorkloadRequest]]]:
    """Vidur-style profiling runs for the toy model, covering the operating range the
    held-out workload uses (budgets 32-256, up to 16 requests, contexts up to ~900):
    prefill chunks of many sizes at many depths, decode batches of many sizes. All
    requests arrive at once, so each run sweeps the batch size up and back down. A fit is
    only as good as the range it was profiled on: a CPU's caches make long contexts
    disproportionately slow, so do not extrapolate far past it."""
    rng = np.random.default_rng([seed, 7])
    runs = []
    for budget, n_req, plo, phi, out in ((32, 6, 16, 400, 24), (64, 10, 8, 600, 16),
                                          (128, 16, 4, 800, 24), (256, 8, 64, 800, 12)):
        sc = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=16,
                             max_model_len=2048)
        lens = rng.integers(plo, phi + 1, size=n_req)
        reqs = [WorkloadRequest(f"b{budget}r{i}", 0.0, int(p), out)
                for i, p in enumerate(lens)]
        runs.append((sc, reqs))
    # Plus one Poisson run (other seed, rate and budget than the held-out workload): decode
    # batches whose requests are at different depths, as in serving.
    runs.append((SchedulerConfig(max_num_batched_tokens=96, max_num_seqs=16, max_model_len=2048),
                 toy_heldout_workload(seed=seed + 100, num_requests=24, qps=3.0)))
    return runs


def toy_heldout_workload(seed: int = 1, num_requests: int = 64,
                         qps: float = 2.0) -> list[WorkloadRequest]:
    """A Poisson workload the calibration never saw: lognormal prompts (median 160, P90
    480 tokens, at most 1000) and outputs (median 24, P90 48)."""
    from chunkprefill.workload import LengthDist, make_workload

    return make_workload(num_requests, qps, LengthDist.lognormal(160, p90=480),
                         LengthDist.lognormal(24, p90=48), seed=seed, max_prompt_len=1000,
                         max_output_len=128)


class ThreadTimeExecutor:
    """Wraps the toy model's executor and reports each step's *thread CPU time* as its
    duration. On a shared machine, wall-clock time also counts the time this process
    waited for a core while others ran; CPU time does not. With torch pinned to one
    thread (``torch.set_num_threads(1)``) all of a step's compute runs on this thread,
    so its CPU time is what the step costs this machine. Measured, not predicted.

    ``min_of`` > 1 runs each step that many times and keeps the fastest (timeit's rule:
    the least disturbed run). Re-running a step is harmless: it rewrites the same K/V
    into the same slots and greedy sampling picks the same tokens."""

    def __init__(self, inner: Any, min_of: int = 1) -> None:
        self.inner = inner
        self.min_of = check_int("min_of", min_of, 1)

    def check_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.inner.check_prompt(prompt_token_ids)

    def execute(self, scheduler_output: SchedulerOutput,
                requests: dict[str, Request]) -> tuple[dict[str, int], float]:
        best = math.inf
        for _ in range(self.min_of):
            t0 = time.thread_time()
            sampled, _ = self.inner.execute(scheduler_output, requests)
            best = min(best, time.thread_time() - t0)
        return sampled, best


def measure_toy(model: Any, workload: Sequence[WorkloadRequest],
                scheduler_config: SchedulerConfig, cache_config: CacheConfig | None = None,
                clock: str = "thread", min_of: int = 1) -> SimResult:
    """Run ``workload`` on the toy model and measure every step: the same driver as
    ``simulate``, with the model executor instead of the cost model. ``clock="thread"``
    times steps by thread CPU time, fastest of ``min_of`` runs (see
    ``ThreadTimeExecutor``); ``"wall"`` by the engine's wall clock."""
    from chunkprefill.executor import ModelExecutor  # torch

    cache_config = cache_config or CacheConfig(block_size=16, num_blocks=4096)
    if clock not in ("thread", "wall"):
        raise ValueError(f"clock must be 'thread' or 'wall', got {clock!r}")
    executor: Any = ModelExecutor(model, cache_config, "torch")
    if clock == "thread":
        executor = ThreadTimeExecutor(executor, min_of)
    engine = LLMEngine(executor, scheduler_config, cache_config)
    first: dict[str, float] = {}
    seen: set[str] = set()

    def on_step(eng: LLMEngine) -> None:
        rec = eng.step_log[-1]
        for rid in rec.num_scheduled_tokens:
            if rid not in seen:
                seen.add(rid)
                first[rid] = rec.start_s

    t0 = time.perf_counter()
    # A run allocates millions of small objects that live until the end; Python's cyclic
    # GC would rescan all of them (and every token list) again and again for cycles this
    # loop never makes. Paused for the run, restored after: a third of the time saved.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        outputs = run_workload(engine, workload, on_step)
    finally:
        if gc_was_enabled:
            gc.enable()
    wall = time.perf_counter() - t0
    delays = np.asarray([first[r.request_id] - r.arrival_time for r in workload])
    return SimResult(engine, engine.summary(), delays, wall, outputs)


def profile_toy(model: Any, runs: Sequence[tuple[SchedulerConfig, Sequence[WorkloadRequest]]],
                clock: str = "thread", min_of: int = 1,
                ) -> tuple[list[list[tuple[int, int]]], list[float]]:
    """Measure ``runs`` on the toy model; return every step's batch and duration."""
    batches: list[list[tuple[int, int]]] = []
    durations: list[float] = []
    for sc, reqs in runs:
        log = measure_toy(model, reqs, sc, clock=clock, min_of=min_of).step_log
        batches += batches_from_step_log(log)
        durations += [rec.duration_s for rec in log]
    return batches, durations


def warm_up_toy(model: Any, clock: str = "thread") -> None:
    """One short run first: the first forward passes pay one-off allocation costs."""
    measure_toy(model, [WorkloadRequest("warmup", 0.0, 64, 4)],
                SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=2048),
                clock=clock)


def calibrate_toy(model: Any, seed: int = 0, clock: str = "thread",
                  min_of: int = 1) -> Calibration:
    """Measure the toy model on this machine over ``toy_profile_workloads`` and fit the
    cost model to the measured steps (torch is imported by the executor, not here)."""
    warm_up_toy(model, clock)
    batches, durations = profile_toy(model, toy_profile_workloads(seed), clock, min_of)
    return fit_cost_model(ModelSpec.from_model_config(model.config), batches, durations)


# ----------------------------------------------------------------------------- plots


def _axes(ax: Any = None, figsize: tuple[float, float] = (6.4, 3.6)) -> Any:
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_step_time_vs_tokens(cost_model: CostModel, max_tokens: int = 8192,
                             context_len: int = 0, ax: Any = None) -> Any:
    """Predicted step time of one prefill chunk of T tokens, split into its components:
    flat while weight reads dominate (memory bound), then linear in T (compute bound)."""
    ax = _axes(ax)
    ts = np.unique(np.geomspace(1, max_tokens, 64).astype(int))
    parts = [cost_model.step_breakdown([(int(t), context_len)]) for t in ts]
    for key in ("linear", "attention", "overhead", "communication"):
        vals = np.array([p[key] for p in parts]) * 1e3
        if vals.any():
            ax.plot(ts, vals, label=key, lw=1)
    ax.plot(ts, np.array([p["total"] for p in parts]) * 1e3, "k", lw=2, label="total")
    m, hw = cost_model.model, cost_model.hardware
    ridge = (hw.ridge_point * cost_model.linear_efficiency / cost_model.bandwidth_efficiency
             * m.bytes_per_param / 2)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.text(ridge, ax.get_ylim()[1] * 0.9, f" ~{ridge:.0f} tokens:\n compute bound", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens in the step")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"SIMULATED: {m.name} on {hw.name}, context {context_len}")
    ax.legend(fontsize=8)
    return ax


def plot_budget_sweep(rows: Sequence[dict[str, float]], slo_s: float | None = None,
                      axes: Any = None) -> Any:
    """P99 TBT and median TTFT vs token budget (chunked), prefill-first as a line."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ch = [r for r in rows if r["policy"] == "chunked"]
    pf = [r for r in rows if r["policy"] == "prefill_first"]
    for ax, key, label in ((axes[0], "p99_tbt_s", "P99 TBT (ms)"),
                           (axes[1], "median_ttft_s", "median TTFT (ms)")):
        ax.plot([r["budget"] for r in ch], [r[key] * 1e3 for r in ch], "o-", label="chunked")
        for r in pf:
            ax.axhline(r[key] * 1e3, color="C3", ls="--", label="prefill-first")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("token budget (max_num_batched_tokens)")
        ax.set_ylabel(label)
        ax.set_title(f"SIMULATED {label}")
    if slo_s is not None:
        axes[0].axhline(slo_s * 1e3, color="k", ls=":", label="strict SLO")
    axes[0].legend(fontsize=8)
    return axes


def plot_chunking_overhead(cost_model: CostModel, prompt_len: int = 8192,
                           chunk_sizes: Sequence[int] = (64, 128, 256, 512, 1024, 2048, 4096,
                                                         8192), ax: Any = None) -> Any:
    """Prefill time of one long prompt in chunks / in one piece (predicted)."""
    ax = _axes(ax)
    sizes = [s for s in chunk_sizes if s <= prompt_len]
    ratio = chunking_overhead(cost_model, prompt_len, sizes)
    ax.plot(sizes, ratio, "o-")
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunk size (tokens)")
    ax.set_ylabel("prefill time / unchunked")
    ax.set_title(f"SIMULATED chunking overhead: {prompt_len}-token prompt, "
                 f"{cost_model.model.name} on {cost_model.hardware.name}", fontsize=9)
    return ax


def plot_tbt_timeline(results: dict[str, SimResult], slo_s: float | None = None,
                      ax: Any = None) -> Any:
    """Each step's duration over (simulated) time, one line per policy: prefill-first's
    spikes are generation stalls every running request sees as one long gap."""
    ax = _axes(ax, (10, 3.4))
    for i, (label, r) in enumerate(results.items()):
        log = [s for s in r.step_log if s.num_scheduled_tokens]
        ax.plot([s.start_s for s in log], [s.duration_s * 1e3 for s in log], lw=0.8,
                color=f"C{i}", label=f"{label}: P99 TBT {r.p99_tbt * 1e3:.0f} ms")
    if slo_s is not None:
        ax.axhline(slo_s * 1e3, color="k", ls=":", label="SLO")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("step time (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    return ax


def plot_capacity(capacities: dict[str, dict[str, float]], ax: Any = None) -> Any:
    """Bar chart: capacity (QPS) per policy, for each SLO. ``capacities[slo][policy]``."""
    ax = _axes(ax)
    slos = list(capacities)
    policies = list(next(iter(capacities.values())))
    width = 0.8 / len(policies)
    for j, pol in enumerate(policies):
        xs = np.arange(len(slos)) + j * width
        vals = [capacities[s][pol] for s in slos]
        bars = ax.bar(xs, vals, width, label=pol)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(np.arange(len(slos)) + width * (len(policies) - 1) / 2, slos)
    ax.set_ylabel("capacity (QPS)")
    ax.set_title("SIMULATED capacity under a P99 TBT SLO")
    ax.legend(fontsize=8)
    return ax


def plot_simulation(budget: int = 2048, qps: float = 2.0, num_requests: int = 200,
                    cost_model: CostModel | None = None, seed: int = 0,
                    axes: Any = None) -> dict[str, SimResult]:
    """The slider view: the same ShareGPT-like workload at ``qps``, simulated with chunked
    prefill at ``budget`` and with prefill-first; step times over time and ITL CDFs."""
    import matplotlib.pyplot as plt

    from chunkprefill.workload import sharegpt_like

    cost_model = cost_model or CostModel.preset()
    mml = cost_model.model.max_model_len
    wl = sharegpt_like(num_requests, qps, seed=seed, max_model_len=mml)
    results = {
        f"chunked (budget {budget})": simulate(wl, cost_model,
                                               scheduler_config_for("chunked", budget, mml)),
        "prefill-first": simulate(wl, cost_model,
                                  scheduler_config_for("prefill_first", budget, mml)),
    }
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [2, 1]})
    slo = tbt_slo(cost_model)
    plot_tbt_timeline(results, slo, ax=axes[0])
    for i, (label, r) in enumerate(results.items()):
        itl = np.sort(r.itls) * 1e3
        axes[1].plot(itl, np.linspace(0, 1, len(itl)), color=f"C{i}",
                     label=f"{label}\nmedian TTFT {r.median_ttft:.2f} s")
    axes[1].axhline(0.99, color="grey", lw=0.8)
    axes[1].axvline(slo * 1e3, color="k", ls=":")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("ITL / TBT (ms)")
    axes[1].set_ylabel("CDF")
    axes[1].legend(fontsize=7)
    axes[0].set_title(f"SIMULATED {cost_model.model.name} on {cost_model.hardware.name}, "
                      f"{num_requests} ShareGPT-like requests at {qps:g} QPS", fontsize=9)
    return results


def interactive_simulation(cost_model: CostModel | None = None, num_requests: int = 200) -> Any:
    """ipywidgets sliders (budget, QPS) around ``plot_simulation``."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    def show(budget: int, qps: float) -> None:
        plot_simulation(budget, qps, num_requests, cost_model)
        plt.show()

    return widgets.interactive(
        show,
        budget=widgets.SelectionSlider(options=[256, 512, 1024, 2048, 4096, 8192], value=2048,
                                       description="budget"),
        qps=widgets.FloatSlider(value=2.0, min=0.25, max=8.0, step=0.25, description="QPS"),
    )
