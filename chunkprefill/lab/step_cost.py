"""What one step costs on the toy model, measured: a prefill chunk's time against its size and
offset, the price of cutting one prompt into chunks, and a line fitted over the whole range."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chunkprefill.checks import cdiv, check_int
from chunkprefill.lab.stats import Estimate, interleaved, median_ci, ratio_ci


def time_prefill_step(model: Any, num_tokens: int, kv_len: int = 0, num_decodes: int = 0,
                      decode_kv_len: int = 512, backend: str | None = None, device: Any = None,
                      block_size: int = 16, warmup: int = 1, iters: int = 3) -> float:
    """Median seconds of one forward step holding a ``num_tokens`` prefill chunk that
    starts at offset ``kv_len`` (it attends to ``kv_len`` cached tokens) plus
    ``num_decodes`` decodes of ``decode_kv_len`` context; ``num_tokens=0`` times a
    decode-only step. Times the model forward alone (CUDA events on GPU), on the same
    metadata path the engine uses."""
    import torch

    from chunkprefill.attention import build_attention_metadata, default_backend
    from chunkprefill.timing import time_fn

    if num_tokens < 0 or kv_len < 0 or num_decodes < 0 or num_tokens + num_decodes < 1:
        raise ValueError(f"num_tokens, kv_len and num_decodes must be >= 0, with at least one "
                         f"token in the step (num_tokens + num_decodes >= 1), got num_tokens="
                         f"{num_tokens}, kv_len={kv_len}, num_decodes={num_decodes}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    backend = backend or default_backend(device)
    lens = [(num_tokens, kv_len)] * (num_tokens > 0) + [(1, decode_kv_len - 1)] * num_decodes
    tables, nb = [], 0
    for q, c in lens:
        n = cdiv(q + c, block_size)
        tables.append(list(range(nb, nb + n)))
        nb += n
    kv = model.allocate_kv_cache(nb, block_size, device=device,
                                 dtype=next(model.parameters()).dtype)
    meta, pos = build_attention_metadata([q for q, _ in lens], [c for _, c in lens], tables,
                                         block_size, device)
    ids = torch.randint(0, model.config.vocab_size, (meta.num_tokens,), device=device,
                        generator=torch.Generator().manual_seed(0)) if device.type == "cpu" \
        else torch.randint(0, model.config.vocab_size, (meta.num_tokens,), device=device)
    with torch.inference_mode():
        times = time_fn(lambda: model.forward(ids, pos, kv, meta, backend=backend), device,
                        warmup=warmup, iters=iters)
    return float(np.median(times))


def step_time_vs_tokens(model: Any, token_counts: Sequence[int], repeats: int = 3,
                        **kw: Any) -> list[Estimate]:
    """Step time for each token count, median of ``repeats`` interleaved rounds with its
    interval: flat while fixed per-step costs dominate, then growing with the arithmetic."""
    runs = interleaved({n: (lambda n=n: time_prefill_step(model, n, iters=1, **kw))
                        for n in token_counts}, repeats)
    return [median_ci(runs[n]) for n in token_counts]


def chunking_overhead(model: Any, prompt_len: int, chunk_sizes: Sequence[int],
                      repeats: int = 3, **kw: Any) -> dict[int, Estimate]:
    """Total prefill time of one ``prompt_len`` prompt cut into chunks of each size,
    divided by the unchunked prefill time measured in the same round; median over
    ``repeats`` rounds with its interval. Above 1.0: later chunks re-read the KV of earlier
    chunks and each step pays fixed costs again."""
    for c in chunk_sizes:
        check_int("chunk size", c, 1)

    def chunked(c: int) -> float:
        return sum(time_prefill_step(model, min(c, prompt_len - off), kv_len=off, iters=1,
                                     **kw) for off in range(0, prompt_len, c))

    runs = interleaved({"whole": lambda: time_prefill_step(model, prompt_len, iters=1, **kw),
                        **{c: (lambda c=c: chunked(c)) for c in chunk_sizes}}, repeats)
    return {c: ratio_ci(runs[c], runs["whole"]) for c in chunk_sizes}


def fit_step_time(token_counts: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """``(fixed_s, per_token_s)`` of the line ``t(n) = fixed + per_token * n`` fitted over the
    whole range by least squares on *relative* errors (a 1 ms step and a 1 s step count
    alike). ``fixed / per_token`` is the step size whose arithmetic costs as much as the
    fixed part: below it a step is about as dear whatever its size, above it time grows
    with the tokens."""
    n = np.asarray(token_counts, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.size < 3 or n.size != t.size:
        raise ValueError("need at least 3 (tokens, seconds) pairs of equal length")
    if np.any(t <= 0):
        raise ValueError("seconds must all be > 0")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]  # rows scaled by 1 / t
    (fixed, per_token), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(fixed), float(per_token)
