"""Hardware and model presets: datasheet peaks of accelerators, shapes of Llama-style
decoders (from their Hugging Face configs) and how tensor parallelism shards them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from chunkprefill.checks import check_int, check_positive

GB = 1e9  # datasheets count memory and bandwidth in powers of ten
TB = 1e12
TFLOPS = 1e12


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
        check_positive("peak_flops", self.peak_flops)
        check_positive("mem_bandwidth", self.mem_bandwidth)
        check_positive("memory_bytes", self.memory_bytes)
        check_positive("interconnect_bandwidth", self.interconnect_bandwidth, allow_zero=True)

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
    def a100_80gb_pcie(cls) -> HardwareSpec:
        # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe column): BF16 Tensor Core
        # 312 TFLOPS dense (624 with sparsity); 80 GB HBM2e at 1,935 GB/s (the SXM part has
        # 2,039); 300 W; NVLink Bridge for 2 GPUs: 600 GB/s total = 300 GB/s each direction.
        # Sarathi-Serve's Yi-34B measurements ran on two of these joined by NVLink.
        return cls("A100-80GB-PCIe", 312 * TFLOPS, 1935 * GB, 80 * GB, 300 * GB)

    @classmethod
    def preset(cls, name: str) -> HardwareSpec:
        """A preset by name, case-insensitive (``"a100-80gb-pcie"`` = ``"A100-80GB-PCIe"``)."""
        presets = {"A100-80GB": cls.a100_80gb, "A100-80GB-PCIe": cls.a100_80gb_pcie,
                   "H100-SXM": cls.h100_sxm, "H200": cls.h200}
        return presets[_lookup("hardware", name, presets)]()


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
    def yi_34b(cls, tensor_parallel_size: int = 2) -> ModelSpec:
        # 01-ai/Yi-34B-200K, the model of Sarathi-Serve's Yi-34B measurements: a Llama-style
        # decoder. Its config.json (and that of 01-ai/Yi-34B and Yi-1.5-34B, same shapes):
        # hidden_size 7168, num_hidden_layers 60, num_attention_heads 56,
        # num_key_value_heads 8, intermediate_size 20480, vocab_size 64000, untied LM head;
        # the -200K variant's max_position_embeddings is 200,000 (its model card: "200K
        # context length"). 68.8 GB of bf16 weights: TP 2 on 80 GB GPUs, as in the paper.
        return cls("Yi-34B", num_layers=60, hidden_size=7168, num_heads=56, num_kv_heads=8,
                   intermediate_size=20480, vocab_size=64000, max_model_len=200_000,
                   tensor_parallel_size=tensor_parallel_size)

    @classmethod
    def preset(cls, name: str, tensor_parallel_size: int | None = None) -> ModelSpec:
        """A preset by name, case-insensitive (``"yi-34b"`` = ``"Yi-34B"``); each has
        its own default ``tensor_parallel_size`` (the smallest that fits an 80 GB GPU)."""
        presets = {"Llama-3-8B": cls.llama3_8b, "Mistral-7B": cls.mistral_7b,
                   "Llama-2-70B": cls.llama2_70b, "Yi-34B": cls.yi_34b}
        spec = presets[_lookup("model", name, presets)]()
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


def _lookup(kind: str, name: str, presets: dict[str, Any]) -> str:
    """The preset key matching ``name`` regardless of case, or a ValueError listing them."""
    keys = {k.lower(): k for k in presets}
    if not isinstance(name, str) or name.lower() not in keys:
        raise ValueError(f"{kind} must be one of {sorted(presets)} (any case), got {name!r}")
    return keys[name.lower()]
