"""Measured experiments shared by notebooks and benchmarks (so neither re-implements them).

``run_stall``: requests decode on the toy model while long prompts arrive at fixed *steps*
(not seconds), so the workload's shape is the same on every machine and only the step
times are measured here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkprefill.config import CacheConfig, SchedulerConfig
from chunkprefill.engine import LLMEngine, RequestOutput, SamplingParams, StepRecord


@dataclass
class StallWorkload:
    """``num_decodes`` short requests start together; ``len(long_arrival_steps)`` long
    prompts of ``long_prompt_len`` tokens arrive at those engine steps."""

    num_decodes: int = 32
    decode_prompt_len: int = 16
    decode_output_len: int = 80
    long_prompt_len: int = 1024
    long_output_len: int = 4
    long_arrival_steps: Sequence[int] = (10, 25, 40, 55)
    vocab_size: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_decodes", "decode_prompt_len", "decode_output_len", "long_prompt_len",
                     "long_output_len", "vocab_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if any(s < 0 for s in self.long_arrival_steps):
            raise ValueError("long_arrival_steps must be >= 0")

    def prompts(self) -> tuple[list[list[int]], list[list[int]]]:
        rng = np.random.default_rng(self.seed)
        dec = [rng.integers(0, self.vocab_size, self.decode_prompt_len).tolist()
               for _ in range(self.num_decodes)]
        long = [rng.integers(0, self.vocab_size, self.long_prompt_len).tolist()
                for _ in self.long_arrival_steps]
        return dec, long


@dataclass
class StallResult:
    label: str
    decode_outputs: list[RequestOutput]
    long_outputs: list[RequestOutput]
    step_log: list[StepRecord] = field(repr=False)

    @property
    def decode_itl(self) -> np.ndarray:
        """Every inter-token gap of the decoding requests, pooled (seconds)."""
        return np.array([g for o in self.decode_outputs for g in o.metrics.itl])

    @property
    def p99_itl(self) -> float:
        return float(np.percentile(self.decode_itl, 99))

    @property
    def max_itl(self) -> float:
        return float(self.decode_itl.max())

    @property
    def long_ttft_median(self) -> float:
        return float(np.median([o.metrics.ttft for o in self.long_outputs]))


def run_stall(model: Any, workload: StallWorkload, scheduler_config: SchedulerConfig,
              cache_config: CacheConfig | None = None, label: str = "",
              attention_backend: str | None = None, device: Any = None) -> StallResult:
    """Run the workload; long prompt i is added right before step ``long_arrival_steps[i]``."""
    dec, long = workload.prompts()
    need = workload.num_decodes * (workload.decode_prompt_len + workload.decode_output_len) \
        + len(long) * (workload.long_prompt_len + workload.long_output_len)
    cache_config = cache_config or CacheConfig(block_size=16, num_blocks=need // 16 + 64)
    eng = LLMEngine(model, scheduler_config, cache_config, attention_backend, device)
    dec_ids = [eng.add_request(p, SamplingParams(max_tokens=workload.decode_output_len),
                               request_id=f"d{i}") for i, p in enumerate(dec)]
    arrivals = sorted(zip(workload.long_arrival_steps, range(len(long))))
    long_ids: list[str] = []
    step = 0
    while eng.has_unfinished_requests() or arrivals:
        while arrivals and arrivals[0][0] <= step:
            _, i = arrivals.pop(0)
            long_ids.append(eng.add_request(long[i], SamplingParams(
                max_tokens=workload.long_output_len), request_id=f"long{i}"))
        eng.step()
        step += 1
    outs = {o.request_id: o for o in eng.run()}
    return StallResult(label, [outs[r] for r in dec_ids], [outs[r] for r in long_ids],
                       eng.step_log)


# -- sweeps for the timing notebook (07) and benchmarks/gpu_sweep.py ----------------------

def time_prefill_step(model: Any, num_tokens: int, kv_len: int = 0, num_decodes: int = 0,
                      decode_kv_len: int = 512, backend: str | None = None, device: Any = None,
                      block_size: int = 16, warmup: int = 1, iters: int = 3) -> float:
    """Median seconds of one forward step holding a ``num_tokens`` prefill chunk that
    starts at offset ``kv_len`` (it attends to ``kv_len`` cached tokens) plus
    ``num_decodes`` decodes of ``decode_kv_len`` context. Times the model forward alone
    (CUDA events on GPU), on the same metadata path the engine uses."""
    import torch

    from chunkprefill.attention import build_attention_metadata, default_backend
    from chunkprefill.timing import time_fn

    if num_tokens < 1 or kv_len < 0 or num_decodes < 0:
        raise ValueError("num_tokens must be >= 1, kv_len and num_decodes >= 0")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    backend = backend or default_backend(device)
    lens = [(num_tokens, kv_len)] + [(1, decode_kv_len - 1)] * num_decodes
    tables, nb = [], 0
    for q, c in lens:
        n = -(-(q + c) // block_size)
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


def step_time_vs_tokens(model: Any, token_counts: Sequence[int], **kw: Any) -> list[float]:
    """Step time for each token count: flat while the step is bound by reading weights
    (memory), then linear once the arithmetic dominates (compute)."""
    return [time_prefill_step(model, n, **kw) for n in token_counts]


def chunking_overhead(model: Any, prompt_len: int, chunk_sizes: Sequence[int],
                      **kw: Any) -> dict[int, float]:
    """Total prefill time of one ``prompt_len`` prompt cut into chunks of each size,
    divided by the unchunked prefill time. Above 1.0: later chunks re-read the KV of
    earlier chunks and each step pays fixed costs again."""
    whole = time_prefill_step(model, prompt_len, **kw)
    out: dict[int, float] = {}
    for c in chunk_sizes:
        if c < 1:
            raise ValueError(f"chunk sizes must be >= 1, got {c}")
        total = sum(time_prefill_step(model, min(c, prompt_len - off), kv_len=off, **kw)
                    for off in range(0, prompt_len, c))
        out[c] = total / whole
    return out


@dataclass
class BudgetPoint:
    budget: int | None  # None: chunking off
    p50_itl: float
    p99_itl: float
    ttft_p50: float
    ttft_p99: float


def budget_sweep(model: Any, workload: StallWorkload, budgets: Sequence[int | None],
                 max_model_len: int = 2048, progress: bool = False,
                 **kw: Any) -> list[BudgetPoint]:
    """Run the stall workload once per budget (``None`` = chunking off, budget =
    max_model_len) and collect the decodes' ITL and the long prompts' TTFT."""
    points = []
    it: Any = budgets
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(budgets, desc="budgets")
    for b in it:
        sc = (SchedulerConfig(max_model_len, 64, enable_chunked_prefill=False,
                              max_model_len=max_model_len) if b is None else
              SchedulerConfig(b, min(64, b), max_model_len=max_model_len))
        r = run_stall(model, workload, sc, label=str(b), **kw)
        ttfts = [o.metrics.ttft for o in r.long_outputs]
        itl = r.decode_itl
        points.append(BudgetPoint(b, float(np.percentile(itl, 50)), float(np.percentile(itl, 99)),
                                  float(np.percentile(ttfts, 50)), float(np.percentile(ttfts, 99))))
    return points
