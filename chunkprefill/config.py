"""Configuration dataclasses. Each validates itself in ``__post_init__`` so bad input
fails at construction with a ``ValueError`` naming the parameter and its allowed range,
never deep inside the scheduler or torch. Imports no torch."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    """Ceiling division (numpy arrays too): blocks for a number of tokens, tiles for rows."""
    return -(-a // b)


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """Return ``value`` as an int, or raise a ``ValueError`` naming ``name`` and the allowed
    range unless it is an integer (numpy's too; not a bool) with ``lo <= value (<= hi)``.
    The one validator every config, request and workload class uses."""
    if type(value) is int and value >= lo and (hi is None or value <= hi):
        return value  # the common case, cheaply: requests are checked by the thousand
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or value < lo or (hi is not None and value > hi):
        rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be an integer {rng}, got {value!r}")
    return int(value)


def check_float(name: str, value: object, lo: float, hi: float | None = None,
                lo_open: bool = False) -> float:
    """Return ``value`` as a float, or raise a ``ValueError`` naming ``name`` and the allowed
    range unless it is a finite real number (not a bool) with ``lo <= value`` (``lo <
    value`` if ``lo_open``) and ``value <= hi``. ``check_int``'s twin for real numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value < lo or (lo_open and value == lo) \
            or (hi is not None and value > hi):
        left = f"> {lo:g}" if lo_open else f">= {lo:g}"
        rng = left if hi is None else f"in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be a finite number {rng}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object, allow_zero: bool = False) -> float:
    """``check_float`` for a finite number > 0 (``>= 0`` with ``allow_zero``)."""
    return check_float(name, value, 0.0, lo_open=not allow_zero)


@dataclass
class SchedulerConfig:
    """Knobs of vLLM V1's scheduler, with vLLM's names, defaults and config checks.

    ``max_num_batched_tokens`` is the per-step token budget shared by prefill chunks
    and decodes; ``long_prefill_token_threshold`` (0 = off) caps one request's tokens
    per step when others are present. ``policy="prefill_first"`` selects the vLLM-V0 /
    nano-vllm style baseline (a step is all prefill or all decode) used for contrast.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_model_len: int = 8192
    policy: str = "fcfs"

    def __post_init__(self) -> None:
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        check_int("max_num_seqs", self.max_num_seqs, 1)
        check_int("max_model_len", self.max_model_len, 2)
        check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        if self.policy not in ("fcfs", "prefill_first"):
            raise ValueError(f"policy must be 'fcfs' or 'prefill_first', got {self.policy!r}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) with enable_chunked_prefill=False: a "
                "prompt longer than one step's budget could never be scheduled. Allowed: "
                "max_num_batched_tokens >= max_model_len, or enable_chunked_prefill=True."
            )
        if self.policy == "prefill_first" and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) with policy='prefill_first', which "
                "schedules whole prompts only. Allowed: max_num_batched_tokens >= max_model_len."
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}): every running request needs at least "
                "one token of budget per step."
            )
        if self.long_prefill_token_threshold > self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be "
                f"in [0, max_model_len={self.max_model_len}]"
            )


@dataclass
class CacheConfig:
    """Paged KV cache shape. ``num_blocks`` counts usable blocks (vLLM keeps one extra
    "null" block; we don't)."""

    block_size: int = 16
    num_blocks: int = 1024
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        check_int("block_size", self.block_size, 1)
        check_int("num_blocks", self.num_blocks, 1)
        if self.enable_prefix_caching:
            raise ValueError(
                "enable_prefix_caching=True is not implemented yet; allowed: False"
            )


@dataclass
class ModelConfig:
    """Shape of the toy Llama-style decoder (names as in HF's ``LlamaConfig``)."""

    vocab_size: int = 512
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "max_position_embeddings"):
            check_int(name, getattr(self, name), 1)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) (grouped-query attention)"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for RoPE")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError("rope_theta and rms_norm_eps must be > 0")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def tiny(cls) -> ModelConfig:
        """For tests: a forward pass over a few hundred tokens takes milliseconds on a CPU."""
        return cls(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=2048)

    @classmethod
    def small(cls) -> ModelConfig:
        """For timing notebooks: prefill cost grows visibly with tokens on a 2-core CPU."""
        return cls(vocab_size=2048, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=768, max_position_embeddings=4096)
