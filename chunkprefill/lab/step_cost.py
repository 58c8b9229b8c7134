"""What one step costs on the toy model, measured: a prefill chunk's time against its size and
offset, decode-only batches against their size, the price of cutting one prompt into chunks, a
line fitted over the whole range, and the machine's own matmul rate and copy bandwidth (which
say where its roofline bends)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


def decode_step_times(model: Any, batch_sizes: Sequence[int], decode_kv_len: int = 512,
                      repeats: int = 3, **kw: Any) -> list[Estimate]:
    """Step time of decode-only batches of each size (every decode reads ``decode_kv_len``
    tokens of its own KV), median of ``repeats`` interleaved rounds with its interval: the
    counterpart of the Sarathi-Serve authors' decode-only batches (figure 2)."""
    for b in batch_sizes:
        check_int("batch size", b, 1)
    check_int("decode_kv_len", decode_kv_len, 1)
    runs = interleaved({b: (lambda b=b: time_prefill_step(
        model, 0, num_decodes=b, decode_kv_len=decode_kv_len, iters=1, **kw))
        for b in batch_sizes}, repeats)
    return [median_ci(runs[b]) for b in batch_sizes]


@dataclass(frozen=True)
class MachinePeaks:
    """What one device does per second, measured on it with the step clock: a square
    matmul's FLOP/s and a large copy's bytes/s (read + written, as STREAM's Copy counts
    them). Measured rates, not datasheet peaks: on a CPU with one torch thread, one core's;
    on a GPU, what cuBLAS and a copy kernel reach. A 1-token step streams every weight once
    and does 2 FLOPs per weight, so these two numbers place the roofline's knee."""

    device: str
    dtype: str
    matmul_flops: Estimate  # FLOP/s of an n x n x n matmul (2 n^3 FLOPs)
    copy_bandwidth: Estimate  # bytes/s: 2 x the bytes of the tensor copied
    matmul_n: int
    copy_bytes: int

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte of memory traffic above which work is compute bound."""
        return self.matmul_flops.median / self.copy_bandwidth.median

    def knee_tokens(self, bytes_per_param: int) -> float:
        """Tokens per step where the linear layers' arithmetic (``2 P n`` FLOPs) takes as long
        as reading their weights (``P * bytes_per_param``): ``ridge * bytes_per_param / 2``,
        whatever the model's size ``P``."""
        check_int("bytes_per_param", bytes_per_param, 1)
        return self.ridge_point * bytes_per_param / 2


def measure_peaks(device: Any = "cpu", dtype: Any = None, matmul_n: int | None = None,
                  copy_bytes: int | None = None, repeats: int = 5) -> MachinePeaks:
    """Measure ``device``'s matmul rate and copy bandwidth, interleaved, ``repeats`` times
    each (medians with their intervals). ``dtype``: the one the model runs in (float32 by
    default; the GPU lesson's 16-bit dtype on a GPU). Sizes default to what a step reads:
    a 1024 x 1024 matmul and a 256 MB copy on a CPU (far past its caches), 8192 and 1 GiB on a
    GPU."""
    import torch

    from chunkprefill.timing import time_fn

    device = torch.device(device)
    dtype = dtype or torch.float32
    cuda = device.type == "cuda"
    n = check_int("matmul_n", matmul_n if matmul_n is not None else (8192 if cuda else 1024), 16)
    nbytes = check_int("copy_bytes", copy_bytes if copy_bytes is not None
                       else (2**30 if cuda else 2**28), 2**20)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    src = torch.empty(nbytes // torch.empty((), dtype=dtype).element_size(), device=device,
                      dtype=dtype).normal_(generator=gen)
    dst = torch.empty_like(src)
    copied = 2 * src.numel() * src.element_size()  # read once, written once
    with torch.inference_mode():
        runs = interleaved({
            "matmul": lambda: time_fn(lambda: a @ b, device, warmup=1, iters=1)[0],
            "copy": lambda: time_fn(lambda: dst.copy_(src), device, warmup=1, iters=1)[0],
        }, repeats)
    return MachinePeaks(str(device), str(dtype).removeprefix("torch."),
                        median_ci([2 * n**3 / t for t in runs["matmul"]]),
                        median_ci([copied / t for t in runs["copy"]]), n, copied)
