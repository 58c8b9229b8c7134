"""A toy Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) with two forward paths.

``forward_reference`` is the ground truth: one sequence, no cache, dense causal attention.
``forward`` is what the engine runs: one call per step for the whole flattened mixed batch
(prefill chunks + decodes), each layer writing this step's K/V into the paged cache and then
attending over it. Tests prove the two agree, chunk size by chunk size.

Parameter names follow Hugging Face's ``LlamaForCausalLM`` (minus the ``model.`` prefix), so
``from_hf`` is a name-by-name copy.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from chunkprefill.attention import AttentionMetadata, paged_attention, write_kv
from chunkprefill.config import ModelConfig


def validate_token_ids(token_ids: list[int] | torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Return ``token_ids`` as a 1-D int64 tensor; raise ``ValueError`` if it is empty, not
    1-D integers, or holds ids outside ``[0, vocab_size)`` (an embedding lookup would fail
    later with an opaque IndexError, or a device-side assert on a GPU)."""
    if not isinstance(token_ids, torch.Tensor):
        try:
            token_ids = torch.tensor(list(token_ids), dtype=torch.int64)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"token_ids must be a list of ints, got {token_ids!r}") from err
    if token_ids.dim() != 1:
        raise ValueError(f"token_ids must be 1-D, got shape {tuple(token_ids.shape)}")
    dtype = token_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ValueError(f"token_ids must be integers, got dtype {token_ids.dtype}")
    if token_ids.numel() == 0:
        raise ValueError("token_ids is empty: need at least one token")
    lo, hi = int(token_ids.min()), int(token_ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"token_ids must be in [0, vocab_size={vocab_size}), got values in [{lo}, {hi}]"
        )
    return token_ids.long()


def _linear(in_features: int, out_features: int, **factory: Any) -> nn.Linear:
    # skip_init: no default init, so building a model never touches the global RNG.
    return torch.nn.utils.skip_init(nn.Linear, in_features, out_features, bias=False, **factory)


def _fuse(linears: list[nn.Linear]) -> torch.Tensor:
    """One (sum of out_features, in_features) matrix whose row blocks *are* the linears'
    weights (they become views of it), so one matmul computes all of them, as vLLM's
    ``QKVParallelLinear`` / ``MergedColumnParallelLinear`` do: one launch instead of three on
    a GPU, a better-shaped GEMM on a CPU. The parameters keep Hugging Face's names; an
    in-place edit of one (``from_hf``'s ``copy_``, a test's ``mul_``) edits the fused matrix."""
    weights = [lin.weight for lin in linears]
    fused = torch.cat([w.detach() for w in weights])
    start = 0
    for w in weights:
        w.data = fused[start:start + w.shape[0]]
        start += w.shape[0]
    return fused


class _Fused(nn.Module):
    """A module holding fused projections (``_fuse``). ``.to(device/dtype)`` converts each
    parameter on its own, which breaks the views: fuse again after every conversion."""

    def _fuse_all(self) -> None:
        raise NotImplementedError

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        super()._apply(fn, recurse)
        self._fuse_all()
        return self


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 as HF Llama does."""

    def __init__(self, hidden_size: int, eps: float, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, **factory))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # one fused op
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim (HF's RoPE convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for absolute positions; inv_freq = 1 / theta^(2i / head_dim), always in
    float32: in bfloat16 (8 bits of mantissa) a frequency is off by up to 0.4 %, so the angle
    at position 4,000 is off by radians."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self._inv_freq(None), persistent=False)  # (D/2,)

    def _inv_freq(self, device: torch.device | None) -> torch.Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float, device=device)
        return 1.0 / (self.theta ** (exponents / self.head_dim))

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        # ``model.to(torch.bfloat16)`` casts every floating buffer; recompute inv_freq in
        # float32 on whatever device the cast left it.
        super()._apply(fn, recurse)
        self.inv_freq = self._inv_freq(self.inv_freq.device)
        return self

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # (T, D/2) float32
        emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
        return emb.cos()[:, None, :], emb.sin()[:, None, :]  # (T, 1, D) float32


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (T, heads, D) by its token's angle; cos/sin are float32 (T, 1, D). The
    rotation runs in float32 and the result is cast back to x's dtype.

    ``x * cos + rotate_half(x) * sin`` written as three passes and one new tensor (the
    product, then each half's rotated term added in place): the textbook form's five
    temporaries cost a 2,048-token step 0.7 ms per layer here, this 0.3 ms."""
    x32 = x.float()  # no copy for a float32 x
    half = x.shape[-1] // 2
    out = x32 * cos  # (T, heads, D) float32
    out[..., :half].addcmul_(x32[..., half:], sin[..., :half], value=-1.0)  # - x2 * sin
    out[..., half:].addcmul_(x32[..., :half], sin[..., half:])  # + x1 * sin
    return out.to(x.dtype)


class Attention(_Fused):
    """Q/K/V/O projections with grouped-query heads; the attention itself is a choice of the
    caller (dense for the reference, paged for the engine). q, k and v run as one matmul."""

    def __init__(self, config: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q_proj = _linear(config.hidden_size, self.num_heads * self.head_dim, **factory)
        self.k_proj = _linear(config.hidden_size, self.num_kv_heads * self.head_dim, **factory)
        self.v_proj = _linear(config.hidden_size, self.num_kv_heads * self.head_dim, **factory)
        self.o_proj = _linear(self.num_heads * self.head_dim, config.hidden_size, **factory)
        self._fuse_all()

    def _fuse_all(self) -> None:
        self.qkv_weight = _fuse([self.q_proj, self.k_proj, self.v_proj])  # not a parameter

    def qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (T, hidden) -> q (T, Hq, D), k and v (T, Hkv, D), RoPE applied to q and k."""
        T, h, kv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = F.linear(x, self.qkv_weight)  # (T, (h + 2 kv) * head_dim): q | k | v columns
        qk, v = qkv.split([(h + kv) * self.head_dim, kv * self.head_dim], dim=-1)
        qk = apply_rope(qk.view(T, h + kv, self.head_dim), cos, sin)  # q and k rotated at once
        v = v.view(T, kv, self.head_dim)  # (T, n_kv_heads, head_dim)
        return qk[:, :h], qk[:, h:], v  # views: (T, n_heads, head_dim), (T, n_kv_heads, ...)

    def qkv_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``qkv`` when only ``rows`` will attend: k and v (T, Hkv, D) for every token (the
        cache needs them), q (len(rows), Hq, D) for those rows alone."""
        T, h, kv, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        w_q, w_kv = self.qkv_weight.split([h * d, 2 * kv * d])  # row blocks: views
        k, v = F.linear(x, w_kv).split([kv * d, kv * d], dim=-1)
        k = apply_rope(k.view(T, kv, d), cos, sin)
        q = F.linear(x.index_select(0, rows), w_q).view(-1, h, d)
        return apply_rope(q, cos.index_select(0, rows), sin.index_select(0, rows)), k, \
            v.view(T, kv, d)

    def dense_causal(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Plain causal attention over one whole sequence: the ground truth."""
        T = q.shape[0]
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (T, n_heads, head_dim)
        v = v.repeat_interleave(group, dim=1)  # (T, n_heads, head_dim)
        scores = torch.einsum("qhd,khd->hqk", q, k) * self.scale  # (n_heads, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return torch.einsum("hqk,khd->qhd", probs, v)  # (T, n_heads, head_dim)


class MLP(_Fused):
    """SwiGLU: down(silu(gate(x)) * up(x)); gate and up run as one matmul."""

    def __init__(self, config: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.gate_proj = _linear(config.hidden_size, config.intermediate_size, **factory)
        self.up_proj = _linear(config.hidden_size, config.intermediate_size, **factory)
        self.down_proj = _linear(config.intermediate_size, config.hidden_size, **factory)
        self._fuse_all()

    def _fuse_all(self) -> None:
        self.gate_up_weight = _fuse([self.gate_proj, self.up_proj])  # not a parameter

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """silu(gate(x)) * up(x): what down_proj multiplies."""
        gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
        return F.silu(gate, inplace=True).mul_(up)  # in place: the GEMM's output is ours

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, **factory)
        self.self_attn = Attention(config, **factory)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps,
                                                **factory)
        self.mlp = MLP(config, **factory)


class ToyTransformer(nn.Module):
    """Llama-style decoder, float32, deterministic from ``seed`` (a local generator: building
    a model never changes the global RNG). Inference only: forwards run under no_grad.
    ``device``/``dtype`` build it in place (a model of several GB never exists in host memory
    in float32); on another device the same seed draws other numbers."""

    def __init__(self, config: ModelConfig, seed: int = 0, device: Any = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = config
        factory = {"device": torch.device(device) if device is not None else None,
                   "dtype": dtype}
        factory = {k: v for k, v in factory.items() if v is not None}
        self.embed_tokens = torch.nn.utils.skip_init(
            nn.Embedding, config.vocab_size, config.hidden_size, **factory
        )
        self.layers = nn.ModuleList(DecoderLayer(config, **factory)
                                    for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, **factory)
        self.lm_head = _linear(config.hidden_size, config.vocab_size, **factory)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)
        self.rotary.to(self.device)  # float32 whatever the weights' dtype
        self._init_weights(seed)

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        # GPT-2 / HF Llama style N(0, 0.02); norms start at 1 (set in RMSNorm).
        gen = torch.Generator(device=self.device).manual_seed(seed)
        for name, p in self.named_parameters():  # a tied weight is listed once
            if not name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=gen, device=p.device) * 0.02)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype (float32 unless the model was cast), and so the KV cache's."""
        return self.embed_tokens.weight.dtype

    # ------------------------------------------------------------------ Hugging Face

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> ToyTransformer:
        """Copy the weights of a transformers ``LlamaForCausalLM``. Anything our model would
        compute differently (biases, rope scaling, another activation, a decoupled head_dim)
        is refused with a ``ValueError`` naming the config field."""
        hf_config = getattr(hf_model, "config", None)
        if hf_config is None:
            raise ValueError("from_hf expects a transformers LlamaForCausalLM (no .config found)")
        config = _model_config_from_hf(hf_config)
        model = cls(config)
        hf_state = {k: v for k, v in hf_model.state_dict().items() if "rotary_emb" not in k}
        with torch.no_grad():
            for name, param in model.named_parameters():
                hf_name = name if name == "lm_head.weight" else f"model.{name}"
                if hf_name not in hf_state:
                    raise ValueError(f"HF model has no parameter {hf_name!r}")
                src = hf_state.pop(hf_name)
                if src.shape != param.shape:
                    raise ValueError(
                        f"{hf_name}: HF shape {tuple(src.shape)} != expected {tuple(param.shape)}"
                    )
                param.copy_(src.detach().to(device=param.device, dtype=param.dtype))
        hf_state.pop("lm_head.weight", None)  # the tied copy, if listed
        if hf_state:
            raise ValueError(f"HF parameters this model has no place for: {sorted(hf_state)}")
        return model

    # ------------------------------------------------------------------ reference path

    @torch.no_grad()
    def forward_reference(self, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Logits (T, vocab) of one sequence from scratch: no cache, dense causal attention.
        The ground truth the paged path is tested against."""
        ids = validate_token_ids(token_ids, self.config.vocab_size).to(self.device)
        T = ids.shape[0]
        cos, sin = self.rotary(torch.arange(T, device=self.device))
        x = self.embed_tokens(ids)  # (T, hidden)
        for layer in self.layers:
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.input_layernorm(x), cos, sin)
            o = attn.dense_causal(q, k, v)  # (T, n_heads, head_dim)
            x = x + attn.o_proj(o.reshape(T, -1))  # (T, hidden)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.lm_head(self.norm(x))  # (T, vocab)

    # ------------------------------------------------------------------ paged path

    def allocate_kv_cache(
        self,
        num_blocks: int,
        block_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, zeroed (K, V) caches, each (num_blocks, block_size, num_kv_heads,
        head_dim), in the model's dtype unless ``dtype`` says otherwise (attention needs the
        queries and the cache in one dtype). Zeros, not empty: stale slots then hold finite
        numbers."""
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        device = self.device if device is None else torch.device(device)
        dtype = self.dtype if dtype is None else dtype
        shape = (num_blocks, block_size, self.config.num_key_value_heads, self.config.head_dim)
        return [
            (torch.zeros(shape, device=device, dtype=dtype),
             torch.zeros(shape, device=device, dtype=dtype))
            for _ in range(self.config.num_hidden_layers)
        ]

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        attn_metadata: AttentionMetadata,
        backend: str = "torch",
        logits_indices: list[int] | None = None,
    ) -> torch.Tensor:
        """One engine step for the whole flattened batch: ``input_ids`` and ``positions`` are
        (T,) int64, ordered as ``attn_metadata.query_start_loc``. Returns the final-norm hidden
        states (T, hidden); call ``compute_logits`` on just the rows that sample.

        ``logits_indices`` (ascending rows, vLLM's name): return only those rows' hidden states
        (len, hidden). Every layer still writes every token's K/V (later tokens attend to
        them), but the last layer's attention and MLP then run for those rows alone: no other
        row's output is ever read. A 2,048-token prefill step that samples one token skips a
        quarter of its MLP work in a 4-layer model."""
        if input_ids.dim() != 1 or positions.shape != input_ids.shape:
            raise ValueError(
                f"input_ids and positions must be 1-D of equal length, got "
                f"{tuple(input_ids.shape)} and {tuple(positions.shape)}"
            )
        if input_ids.shape[0] != attn_metadata.num_tokens:
            raise ValueError(
                f"input_ids has {input_ids.shape[0]} tokens but attn_metadata.slot_mapping has "
                f"{attn_metadata.num_tokens}"
            )
        if len(kv_caches) != len(self.layers):
            raise ValueError(
                f"kv_caches has {len(kv_caches)} layers, the model has {len(self.layers)}"
            )
        first = kv_caches[0][0]
        for k_cache, v_cache in kv_caches:  # attention checks layer 0's; the rest must match
            for cache in (k_cache, v_cache):
                if (cache.shape, cache.dtype, cache.device) != (
                        first.shape, first.dtype, first.device):
                    raise ValueError("every layer's K and V caches must have one shape, dtype "
                                     f"and device, got {tuple(cache.shape)} {cache.dtype} "
                                     f"{cache.device} beside {tuple(first.shape)} "
                                     f"{first.dtype} {first.device}")
        if input_ids.device.type == "cpu":
            # Free on the CPU; on a GPU min/max would wait for the device (a sync inside the
            # step), so there the ids were checked where they entered: ModelExecutor.check_prompt
            # for prompts, and sampled ids come from an argmax over the vocabulary.
            validate_token_ids(input_ids, self.config.vocab_size)
        elif input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must be integers, got dtype {input_ids.dtype}")
        cos, sin = self.rotary(positions)  # once per step, shared by every layer
        x = self.embed_tokens(input_ids)  # (T, hidden)
        slots = attn_metadata.slot_mapping
        last = len(self.layers) - 1
        prune = logits_indices is not None and len(logits_indices) < input_ids.shape[0]
        for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, kv_caches,
                                                           strict=True)):
            attn = layer.self_attn
            check = i == 0  # the arguments of every layer are alike: check them once a step
            meta = attn_metadata
            if i == last and prune:  # only these rows' outputs count (not all of them)
                assert logits_indices is not None
                rows = torch.tensor(logits_indices, dtype=torch.long, device=x.device)
                q, k, v = attn.qkv_rows(layer.input_layernorm(x), cos, sin, rows)
                write_kv(k, v, k_cache, v_cache, slots, backend, check=check)
                if not logits_indices:  # a mid-prompt chunk: nothing samples
                    return self.norm(x[:0])  # (0, hidden)
                meta = attn_metadata.for_rows(logits_indices)
                x = x.index_select(0, rows)
            else:
                q, k, v = attn.qkv(layer.input_layernorm(x), cos, sin)
                write_kv(k, v, k_cache, v_cache, slots, backend, check=check)
            o = paged_attention(q, k_cache, v_cache, meta, attn.scale, backend, check=check)
            # The residual adds ride on the matmuls: x += o @ W_o^T in one pass, no temporary.
            x.addmm_(o.reshape(x.shape[0], -1), attn.o_proj.weight.t())  # (T, hidden)
            x.addmm_(layer.mlp.act(layer.post_attention_layernorm(x)),
                     layer.mlp.down_proj.weight.t())
        return self.norm(x)  # (T, hidden), or (len(logits_indices), hidden)

    @torch.no_grad()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (N, hidden) -> logits (N, vocab): only the rows that sample pay for the head."""
        return self.lm_head(hidden)  # (N, vocab)


def _model_config_from_hf(hf_config: object) -> ModelConfig:
    """Map an HF ``LlamaConfig`` onto ``ModelConfig``, refusing what we do not implement."""

    def get(name: str, default: object = None) -> object:
        return getattr(hf_config, name, default)

    if get("model_type", "llama") != "llama":
        raise ValueError(f"model_type={get('model_type')!r} is not supported; allowed: 'llama'")
    for field in ("attention_bias", "mlp_bias"):
        if get(field, False):
            raise ValueError(f"{field}=True is not supported (our projections have no bias)")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={get('hidden_act')!r} is not supported; allowed: 'silu'")
    # transformers 5 keeps theta and scaling in rope_parameters; 4.x used rope_theta/rope_scaling.
    rope = get("rope_parameters") or get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise ValueError(f"rope_parameters / rope_scaling must be a dict or None, got {rope!r}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in (None, "default"):
        raise ValueError(
            f"rope_scaling / rope_parameters rope_type={rope_type!r} is not supported; "
            "allowed: None or 'default' (plain RoPE)"
        )
    theta = rope.get("rope_theta")
    theta = theta if theta is not None else get("rope_theta", 10000.0)
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    head_dim = get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise ValueError(
            f"head_dim={head_dim} != hidden_size // num_attention_heads = {hidden // heads}: "
            "a decoupled head_dim is not supported"
        )
    if get("pretraining_tp", 1) != 1:
        raise ValueError(f"pretraining_tp={get('pretraining_tp')} is not supported; allowed: 1")
    num_kv = get("num_key_value_heads") or heads
    return ModelConfig(
        vocab_size=get("vocab_size"),
        hidden_size=hidden,
        num_hidden_layers=get("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=num_kv,
        intermediate_size=get("intermediate_size"),
        rope_theta=float(theta),
        rms_norm_eps=float(get("rms_norm_eps", 1e-6)),
        max_position_embeddings=get("max_position_embeddings", 2048),
        tie_word_embeddings=bool(get("tie_word_embeddings", False)),
    )
