"""The GPU at hand: what a kernel launch must fit, which 16-bit dtype it runs, its roofline.

Three facts decide whether the GPU half of the course runs and what it shows:

- **Limits** (``GpuTarget``): compute capability and shared memory per block. Triton checks
  shared memory only when a compiled kernel is loaded, so a tile that is too big fails with
  ``OutOfResources`` before anything is timed. ``chunkprefill.kernels.launch`` picks tiles from
  these limits; ``tests/test_kernels_aot.py`` compiles every pick for the five targets below.
- **dtype** (``half_dtype``): bfloat16 needs compute capability 8.0 (Ampere); a T4 or V100 runs
  float16 instead.
- **Roofline** (``GpuPeaks``): datasheet peak FLOP/s and memory bandwidth. A 1-token step
  multiplies every weight once (2 FLOPs per 2-byte weight), far below the ridge point, so its
  floor is the time to *read* the weights; ``size_weight_bound_model`` picks a model whose
  floor is well above the host's launch time, so the lesson's flat region is the memory, not
  Python. ``WeightBoundSizing.explain()`` prints the arithmetic.

Importing this module imports no torch; the functions that read a device do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from chunkprefill.checks import check_float, check_int
from chunkprefill.config import ModelConfig
from chunkprefill.i18n import tr

KiB = 1024
GB = 1e9  # datasheets count memory and bandwidth in powers of ten
TFLOPS = 1e12


@dataclass(frozen=True)
class GpuTarget:
    """What a kernel launch must fit on one GPU architecture."""

    name: str
    capability: tuple[int, int]  # (major, minor), e.g. (8, 0)
    max_shared_mem: int  # bytes of shared memory one block may use (the opt-in maximum)

    @property
    def arch(self) -> int:
        """``80`` for compute capability 8.0 (Triton's ``GPUTarget("cuda", 80, 32)``)."""
        return self.capability[0] * 10 + self.capability[1]

    @property
    def supports_bf16(self) -> bool:
        """bfloat16 tensor-core math arrived with Ampere (8.0); older GPUs emulate it."""
        return self.capability >= (8, 0)

    @property
    def has_mma(self) -> bool:
        """Whether Triton lowers ``tl.dot`` to tensor-core MMA here. Triton 3.x does from 8.0;
        on 7.5 (T4) it emits plain FMA loops, which need smaller tiles to stay in registers."""
        return self.capability >= (8, 0)


# Shared memory per block: CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability", row "Maximum amount of shared memory per thread block" (the opt-in maximum a
# kernel may request): 7.5: 64 KB, 8.0: 163 KB, 8.6: 99 KB, 8.9: 99 KB, 9.0: 227 KB.
GPU_TARGETS: dict[int, GpuTarget] = {
    75: GpuTarget("sm_75 (T4, RTX 20xx)", (7, 5), 64 * KiB),
    80: GpuTarget("sm_80 (A100)", (8, 0), 163 * KiB),
    86: GpuTarget("sm_86 (A10, A40, RTX 30xx)", (8, 6), 99 * KiB),
    89: GpuTarget("sm_89 (L4, L40S, RTX 40xx)", (8, 9), 99 * KiB),
    90: GpuTarget("sm_90 (H100, H200)", (9, 0), 227 * KiB),
}


def _cuda_index(device: Any) -> int:
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def gpu_target(device: Any = "cuda") -> GpuTarget:
    """The limits of a CUDA ``device``, read from the driver (``torch.cuda``)."""
    import torch

    props = torch.cuda.get_device_properties(_cuda_index(device))
    capability = (props.major, props.minor)
    known = GPU_TARGETS.get(props.major * 10 + props.minor)
    shared = getattr(props, "shared_memory_per_block_optin", None) or (
        known.max_shared_mem if known else None)
    if shared is None:
        raise ValueError(f"cannot tell the shared memory per block of {props.name} "
                         f"(compute capability {capability}): upgrade torch")
    return GpuTarget(props.name, capability, int(shared))


def half_dtype(device: Any = "cpu") -> Any:
    """The 16-bit dtype to run on ``device``: bfloat16 where the hardware has it (any CPU,
    compute capability >= 8.0), else float16 (T4, V100: bfloat16 would be emulated)."""
    import torch

    if torch.device(device).type == "cuda" and not gpu_target(device).supports_bf16:
        return torch.float16
    return torch.bfloat16


def environment(device: Any = "cpu") -> dict[str, object]:
    """What every stored measurement names: the device and the torch, Triton and CUDA
    versions it ran with."""
    import importlib.util
    import platform

    import torch

    info: dict[str, object] = {
        "device": platform.processor() or platform.machine(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(),
        "triton": None}
    if importlib.util.find_spec("triton") is not None:
        import triton

        info["triton"] = triton.__version__
    if torch.device(device).type == "cuda":
        target = gpu_target(device)
        info.update(device=target.name, capability=f"{target.capability[0]}.{target.capability[1]}",
                    shared_mem_per_block=target.max_shared_mem)
    return info


def describe(info: dict[str, object]) -> str:
    """``environment()`` as one line, for a figure's title or a log's first line."""
    return ", ".join(f"{k} {v}" for k, v in info.items() if v is not None)


# ------------------------------------------------------------------------------- roofline


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU: dense 16-bit tensor-core FLOP/s (fp32 accumulate, no 2:4
    sparsity), memory bandwidth and capacity. Peaks, not what kernels reach."""

    name: str
    peak_flops: float  # FLOP/s
    mem_bandwidth: float  # bytes/s
    memory_bytes: float  # bytes
    source: str

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte read above which a kernel is compute bound (the roofline's knee)."""
        return self.peak_flops / self.mem_bandwidth


# Matched in order against ``torch.cuda.get_device_name()`` (first pattern contained in the
# name wins, so the more specific names come first). "with sparsity" datasheet figures are
# halved to dense.
GPU_PEAKS: tuple[tuple[str, GpuPeaks], ...] = (
    ("H200", GpuPeaks("H200 SXM", 989.4 * TFLOPS, 4800 * GB, 141 * GB,
                      "NVIDIA H200 datasheet: BF16 1,979 TFLOPS with sparsity; 4.8 TB/s HBM3e")),
    ("H100 NVL", GpuPeaks("H100 NVL", 835.5 * TFLOPS, 3900 * GB, 94 * GB,
                          "NVIDIA H100 datasheet (NVL): BF16 1,671 TFLOPS with sparsity; "
                          "3.9 TB/s")),
    ("H100 PCIe", GpuPeaks("H100 PCIe", 756.5 * TFLOPS, 2000 * GB, 80 * GB,
                           "NVIDIA H100 datasheet (PCIe): BF16 1,513 TFLOPS with sparsity; "
                           "2 TB/s")),
    ("H100", GpuPeaks("H100 SXM", 989.4 * TFLOPS, 3350 * GB, 80 * GB,
                      "NVIDIA H100 datasheet (SXM): BF16 1,979 TFLOPS with sparsity; "
                      "3.35 TB/s HBM3")),
    ("A100 80GB PCIe", GpuPeaks("A100 80GB PCIe", 312 * TFLOPS, 1935 * GB, 80 * GB,
                                "NVIDIA A100 datasheet (80GB PCIe): BF16 312 TFLOPS; "
                                "1,935 GB/s")),
    ("A100-SXM4-80GB", GpuPeaks("A100 80GB SXM", 312 * TFLOPS, 2039 * GB, 80 * GB,
                                "NVIDIA A100 datasheet (80GB SXM): BF16 312 TFLOPS; "
                                "2,039 GB/s")),
    ("A100", GpuPeaks("A100 40GB", 312 * TFLOPS, 1555 * GB, 40 * GB,
                      "NVIDIA A100 datasheet (40GB): BF16 312 TFLOPS; 1,555 GB/s")),
    ("L4", GpuPeaks("L4", 121 * TFLOPS, 300 * GB, 24 * GB,
                    "NVIDIA L4 datasheet: FP16/BF16 242 TFLOPS with sparsity; 300 GB/s")),
    ("A10", GpuPeaks("A10", 125 * TFLOPS, 600 * GB, 24 * GB,
                     "NVIDIA A10 datasheet: BF16 125 TFLOPS (250 with sparsity); 600 GB/s")),
    ("RTX 4090", GpuPeaks("GeForce RTX 4090", 165.2 * TFLOPS, 1008 * GB, 24 * GB,
                          "NVIDIA Ada GPU architecture whitepaper: FP16 tensor, FP32 "
                          "accumulate, 165.2 TFLOPS dense; 1,008 GB/s")),
    ("RTX 3090", GpuPeaks("GeForce RTX 3090", 71 * TFLOPS, 936 * GB, 24 * GB,
                          "NVIDIA Ampere GA102 whitepaper: FP16 tensor, FP32 accumulate, "
                          "71 TFLOPS dense; 936 GB/s")),
    ("T4", GpuPeaks("T4", 65 * TFLOPS, 320 * GB, 16 * GB,
                    "NVIDIA T4 datasheet: mixed-precision (FP16/FP32) 65 TFLOPS; 320 GB/s")),
)


def gpu_peaks(device_name: str) -> GpuPeaks:
    """The datasheet peaks of the GPU called ``device_name`` (``torch.cuda.get_device_name()``,
    e.g. ``"NVIDIA H200"``). Unknown names raise a ``ValueError`` listing the known ones."""
    for pattern, peaks in GPU_PEAKS:
        if pattern.lower() in device_name.lower():
            return peaks
    known = ", ".join(pattern for pattern, _ in GPU_PEAKS)
    raise ValueError(f"no datasheet peaks for GPU {device_name!r}; known: {known} "
                     "(pass a GpuPeaks of your own to size_weight_bound_model)")


# Host time to launch one decoder layer's kernels in eager PyTorch: ~45 launches (norms,
# projections, RoPE, the two Triton kernels, SwiGLU, residuals) at ~7 us each. An estimate
# (gpu-readiness review: ~2.5 ms for the 8-layer sweep model on an H100); measure your own.
HOST_S_PER_LAYER_ESTIMATE = 0.3e-3


@dataclass(frozen=True)
class WeightBoundSizing:
    """A Llama-3-shaped model sized so that reading its weights, not launching its kernels,
    sets the time of a 1-token step on ``peaks``'s GPU. ``explain()`` shows the arithmetic."""

    peaks: GpuPeaks
    config: ModelConfig
    host_s_per_layer: float
    margin: float
    bytes_per_param: int

    @property
    def layer_params(self) -> int:
        """Weights one token multiplies in one layer: q, k, v, o and the SwiGLU MLP."""
        c = self.config
        h, d = c.hidden_size, c.head_dim
        attn = h * c.num_attention_heads * d * 2 + h * c.num_key_value_heads * d * 2
        return attn + 3 * h * c.intermediate_size

    @property
    def weight_bytes(self) -> int:
        """All weights: the layers, the embedding and the LM head (not tied)."""
        c = self.config
        return (c.num_hidden_layers * self.layer_params
                + 2 * c.vocab_size * c.hidden_size) * self.bytes_per_param

    @property
    def step_read_s(self) -> float:
        """The 1-token step's floor: every layer's weights plus the LM head (the one sampled
        row multiplies all of it; the embedding reads one row)."""
        c = self.config
        return ((c.num_hidden_layers * self.layer_params + c.vocab_size * c.hidden_size)
                * self.bytes_per_param / self.peaks.mem_bandwidth)

    @property
    def read_s_per_layer(self) -> float:
        """Time to read one layer's weights at the datasheet bandwidth."""
        return self.layer_params * self.bytes_per_param / self.peaks.mem_bandwidth

    @property
    def flop_s_per_layer(self) -> float:
        """Time one token's 2 FLOPs per weight take at the datasheet peak."""
        return 2 * self.layer_params / self.peaks.peak_flops

    @property
    def knee_tokens(self) -> float:
        """Tokens per step where the step's FLOPs take as long as reading its weights:
        ``n * 2 * P / peak = P * bytes / bandwidth`` gives ``n = ridge * bytes / 2``."""
        return self.peaks.ridge_point * self.bytes_per_param / 2

    def explain(self) -> str:
        """The sizing arithmetic, line by line, with the numbers of this GPU."""
        c, p = self.config, self.peaks
        us = 1e6
        return "\n".join([
            tr("GPU: {name}: {tflops:.0f} TFLOP/s dense 16-bit, {gbs:.0f} GB/s ({source})",
               name=p.name, tflops=p.peak_flops / TFLOPS, gbs=p.mem_bandwidth / GB,
               source=p.source),
            tr("ridge point = {tflops:.0f}e12 / {gbs:.0f}e9 = {ridge:.0f} FLOP per byte",
               tflops=p.peak_flops / TFLOPS, gbs=p.mem_bandwidth / GB, ridge=p.ridge_point),
            tr("model: hidden {hidden}, {heads} heads of {head_dim} ({kv_heads} KV heads), MLP "
               "{mlp}, {layers} layers, {bytes}-byte weights", hidden=c.hidden_size,
               heads=c.num_attention_heads, head_dim=c.head_dim, kv_heads=c.num_key_value_heads,
               mlp=c.intermediate_size, layers=c.num_hidden_layers, bytes=self.bytes_per_param),
            tr("one layer: {m:.0f} M weights = {mb:.0f} MB", m=self.layer_params / 1e6,
               mb=self.layer_params * self.bytes_per_param / 1e6),
            tr("1-token step, per layer: read {read:.0f} us (weights / bandwidth) vs compute "
               "{flop:.1f} us (2 FLOP per weight / peak): memory bound",
               read=self.read_s_per_layer * us, flop=self.flop_s_per_layer * us),
            tr("host launch time per layer: {host:.0f} us -> read / launch = {ratio:.1f} (asked "
               "for >= {margin:g})", host=self.host_s_per_layer * us,
               ratio=self.read_s_per_layer / self.host_s_per_layer, margin=self.margin),
            tr("1-token step floor: {layers} layers + the LM head ({vocab} x {hidden}) = "
               "{floor_ms:.2f} ms; all weights {gb:.1f} GB of {mem:.0f} GB",
               layers=c.num_hidden_layers, vocab=c.vocab_size, hidden=c.hidden_size,
               floor_ms=self.step_read_s * 1e3, gb=self.weight_bytes / 1e9,
               mem=p.memory_bytes / 1e9),
            tr("compute catches up with the weight reads at ~{knee:.0f} tokens per step (ridge x "
               "bytes per weight / 2 FLOPs): the expected knee", knee=self.knee_tokens),
        ])


def size_weight_bound_model(
    peaks: GpuPeaks,
    host_s_per_layer: float = HOST_S_PER_LAYER_ESTIMATE,
    margin: float = 3.0,
    num_layers: int = 4,
    vocab_size: int = 32000,
    bytes_per_param: int = 2,
    memory_fraction: float = 0.5,
) -> WeightBoundSizing:
    """The narrowest Llama-3-shaped model (head_dim 128, 8 query heads per KV head, MLP
    3.5x hidden) whose per-layer weight read takes ``margin`` times the host's launch time.

    Per layer the weights are ``P = h*h (q) + 2*h*h/8 (k, v) + h*h (o) + 3*h*3.5h (MLP)
    = 12.75 h^2``; ``P * bytes / bandwidth >= margin * host`` gives the hidden size ``h``
    (rounded up to a multiple of 1024, so the heads split evenly). Fewer layers are used if
    ``num_layers`` would take more than ``memory_fraction`` of the GPU's memory."""
    check_float("host_s_per_layer", host_s_per_layer, 0.0, lo_open=True)
    check_float("margin", margin, 0.0, lo_open=True)
    check_float("memory_fraction", memory_fraction, 0.0, 1.0, lo_open=True)
    check_int("num_layers", num_layers, 1)
    check_int("bytes_per_param", bytes_per_param, 1)
    hidden_min = math.sqrt(margin * host_s_per_layer * peaks.mem_bandwidth
                           / (12.75 * bytes_per_param))
    hidden = max(1024, math.ceil(hidden_min / 1024) * 1024)
    inter = math.ceil(3.5 * hidden / 256) * 256
    heads = hidden // 128

    def config(layers: int) -> ModelConfig:
        return ModelConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=heads // 8,
                           intermediate_size=inter, rope_theta=500000.0,
                           max_position_embeddings=8192)

    budget = memory_fraction * peaks.memory_bytes
    for layers in range(num_layers, 0, -1):
        sizing = WeightBoundSizing(peaks, config(layers), host_s_per_layer, margin,
                                   bytes_per_param)
        if sizing.weight_bytes <= budget:
            return sizing
    raise ValueError(f"even one layer of hidden size {hidden} needs more than "
                     f"memory_fraction={memory_fraction} of {peaks.name}'s "
                     f"{peaks.memory_bytes / 1e9:.0f} GB: lower margin or host_s_per_layer")
