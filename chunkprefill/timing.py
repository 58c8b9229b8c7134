"""Device-aware timing. On CUDA, kernels run asynchronously: a host clock would time the
launch, not the work, so we bracket with CUDA events and synchronise. On the CPU,
``perf_counter`` is exact enough."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _is_cuda(device: Any) -> bool:
    return str(device).startswith("cuda")


class Timer:
    """``with Timer(device) as t: ...`` then ``t.elapsed_s``."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = device
        self.elapsed_s = 0.0
        self.kind = "cuda-events" if _is_cuda(device) else "perf_counter"

    def __enter__(self) -> Timer:
        if _is_cuda(self.device):
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if _is_cuda(self.device):
            import torch

            self._end.record()
            torch.cuda.synchronize(self.device)
            self.elapsed_s = self._start.elapsed_time(self._end) / 1e3
        else:
            self.elapsed_s = time.perf_counter() - self._t0


def time_fn(fn: Callable[[], object], device: Any = "cpu", warmup: int = 2,
            iters: int = 5) -> list[float]:
    """Run ``fn`` ``warmup`` times untimed, then return ``iters`` timings in seconds."""
    if warmup < 0 or iters < 1:
        raise ValueError(f"warmup must be >= 0 and iters >= 1, got {warmup}, {iters}")
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        with Timer(device) as t:
            fn()
        out.append(t.elapsed_s)
    return out
