"""Configuration dataclasses. Each validates itself in ``__post_init__`` so bad input
fails at construction with a ``ValueError`` naming the parameter and its allowed range,
never deep inside the scheduler or torch. Imports no torch."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from chunkprefill.checks import check_bool, check_choice, check_int

POLICIES = ("fcfs", "priority")
BATCHING_STYLES = ("mixed", "prefill_or_decode", "prefill_first")


@dataclass
class SchedulerConfig:
    """Knobs of vLLM V1's scheduler, with vLLM 0.33.0's names, defaults and checks
    (``vllm/config/scheduler.py``), plus one knob of ours, ``batching``.

    ``max_num_batched_tokens`` is the per-step token budget shared by prefill chunks and
    decodes; ``long_prefill_token_threshold`` (0 = off) caps one request's tokens per step
    when others are present; ``long_prefill_token_threshold_adaptive`` floors that cap at
    a fair share, ``max_num_batched_tokens // (running + waiting)``.
    ``policy``: the waiting queue's order and the preemption victim: ``"fcfs"`` (arrival;
    the newest running request is preempted) or ``"priority"`` (``(priority, arrival)``,
    lower first; the running request with the largest ``(priority, arrival)`` is
    preempted). ``max_num_active_seqs`` (None = ``max_num_seqs``) lowers only the number of
    requests admitted into running. ``watermark``: fraction of the KV blocks (vLLM counts
    its null block too, so ``int(watermark * (num_blocks + 1))`` blocks) kept free when a
    waiting request is admitted while others run. ``scheduler_reserve_full_isl``: admit a
    waiting request only if its whole current sequence fits (else only its first chunk
    must). ``prefill_schedule_interval``: with N > 1, prefill (admissions and running
    prompt chunks) runs only once N executed steps have passed since the last step that
    carried prefill, while something is decoding; once a releasing step cannot drain the
    waiting queue, the hold is lifted until one does (vLLM's capacity escape).

    ``batching`` (ours: vLLM has one style) picks how a step mixes work:
    ``"mixed"``: vLLM V1 / Sarathi-Serve stall-free batching: running requests (decodes
    and prompt chunks) first, then new prompts fill what budget is left.
    ``"prefill_or_decode"``: chunked prefill, but a step carries prefill chunks *or*
    decodes, never both, and prefill goes first: SGLang without ``--enable-mixed-chunk``
    (``get_next_batch_to_run`` in ``python/sglang/srt/managers/scheduler.py`` runs the
    prefill batch "first if possible", decodes otherwise) and mini-sglang
    (``_schedule_next_batch`` in ``python/minisgl/scheduler/scheduler.py``: the prefill
    manager's batch, else the decode manager's) and nano-vllm since April 2026
    (``Scheduler.schedule`` in ``nanovllm/engine/scheduler.py`` cuts the step's first
    waiting prompt to the budget left and returns a prefill batch if it scheduled any).
    SGLang and nano-vllm keep at most one partly prefilled request; here every running
    prompt's chunk is served, in admission order.
    ``"prefill_first"``: whole new prompts first; decodes only in steps that admitted none:
    vLLM V0's scheduler with chunking off. Its budget must hold a whole prompt and it takes
    no threshold.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_model_len: int = 8192
    policy: str = "fcfs"
    batching: str = "mixed"
    long_prefill_token_threshold_adaptive: bool = False
    prefill_schedule_interval: int = 1
    max_num_active_seqs: int | None = None
    watermark: float = 0.0
    scheduler_reserve_full_isl: bool = True

    def __post_init__(self) -> None:
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        check_int("max_num_seqs", self.max_num_seqs, 1)
        check_int("max_model_len", self.max_model_len, 2)
        check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        check_choice("policy", self.policy, POLICIES)
        check_choice("batching", self.batching, BATCHING_STYLES)
        check_bool("enable_chunked_prefill", self.enable_chunked_prefill)
        check_bool("long_prefill_token_threshold_adaptive",
                    self.long_prefill_token_threshold_adaptive)
        check_bool("scheduler_reserve_full_isl", self.scheduler_reserve_full_isl)
        check_int("prefill_schedule_interval", self.prefill_schedule_interval, 1)
        if self.max_num_active_seqs is not None:
            check_int("max_num_active_seqs", self.max_num_active_seqs, 1, self.max_num_seqs)
        w = self.watermark
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0.0 <= w < 1.0:
            raise ValueError(f"watermark must be a fraction in [0.0, 1.0), got {w!r}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) with enable_chunked_prefill=False: a "
                "prompt longer than one step's budget could never be scheduled. Allowed: "
                "max_num_batched_tokens >= max_model_len, or enable_chunked_prefill=True."
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
        self._check_batching()

    def _check_batching(self) -> None:
        """Our own knob's limits: what the other styles do not model."""
        if self.batching != "mixed" and self.prefill_schedule_interval != 1:
            raise ValueError(
                f"prefill_schedule_interval ({self.prefill_schedule_interval}) holds prefill "
                "back between mixed steps; allowed: 1 unless batching='mixed', "
                f"got batching={self.batching!r}"
            )
        if self.batching != "prefill_first":
            return
        if self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}) with batching='prefill_first', which "
                "schedules whole prompts only. Allowed: max_num_batched_tokens >= max_model_len."
            )
        if self.long_prefill_token_threshold:
            raise ValueError(
                "long_prefill_token_threshold must be 0 with batching='prefill_first' (whole "
                f"prompts only), got {self.long_prefill_token_threshold}"
            )

    @classmethod
    def for_budget(cls, budget: int | None, *, max_model_len: int, batching: str = "mixed",
                   chunked: bool = True, threshold: int = 0, max_num_seqs: int | None = None,
                   **knobs: object) -> SchedulerConfig:
        """The one way the course builds a config around a token budget.

        ``budget=None``: the smallest budget vLLM allows without chunking, ``max_model_len``.
        ``max_num_seqs`` defaults to ``min(128, budget)`` (vLLM's default, lowered where the
        budget could not give every seat a token); a value given is kept as given, and
        refused if the budget cannot serve it. ``batching="prefill_first"`` schedules whole
        prompts only, so it turns chunking off. ``knobs``: any other field, by name."""
        budget = max_model_len if budget is None else check_int("budget", budget, 1)
        return cls(max_num_batched_tokens=budget,
                   max_num_seqs=min(128, budget) if max_num_seqs is None else max_num_seqs,
                   enable_chunked_prefill=chunked and batching != "prefill_first",
                   long_prefill_token_threshold=threshold, max_model_len=max_model_len,
                   batching=batching, **knobs)  # type: ignore[arg-type]

    @property
    def max_num_active_reqs(self) -> int:
        """The admission limit into running (vLLM's ``Scheduler.max_num_active_reqs``)."""
        return self.max_num_seqs if self.max_num_active_seqs is None else self.max_num_active_seqs


@dataclass
class CacheConfig:
    """Paged KV cache shape. ``num_blocks`` counts usable blocks (vLLM keeps one extra
    "null" block; we don't). ``enable_prefix_caching``: vLLM V1's automatic prefix caching
    (off by default here, so the course can turn it on where it teaches it; vLLM V1's
    default is on)."""

    block_size: int = 16
    num_blocks: int = 1024
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        check_int("block_size", self.block_size, 1)
        check_int("num_blocks", self.num_blocks, 1)
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be True or False, got "
                             f"{self.enable_prefix_caching!r}")


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
