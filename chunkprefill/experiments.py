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
