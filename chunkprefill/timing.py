"""The step clock: what a measured lesson reads, and why.

A learner's laptop is busy. A wall clock (``perf_counter``) times the step *and* whatever
else the machine ran meanwhile: a browser tab, an indexer, another notebook. The step clock
times the step's own work instead:

- on a CUDA GPU, **CUDA events** on the stream bracket the step, then we synchronise. The
  start event is recorded while the GPU is idle, so the interval runs from the step's first
  queued work to its last: when the host launches kernels slower than the GPU runs them (a
  small model's decode step), that is the host's time, launch overhead included, not the
  GPU's work. ``ModelExecutor`` therefore also records events around the forward alone
  (``StepRecord.forward_gpu_s``), and ``kernel_time_s`` times a kernel with the queue kept
  busy. Real engines close the gap with CUDA graphs: one launch replays a whole step;
- on a CPU, the **thread's CPU time** (``time.thread_time``): seconds the stepping thread
  actually ran, not seconds it waited while the OS ran someone else. This needs PyTorch's
  intra-op work on that thread (``torch.set_num_threads(1)``, as every timed notebook sets);
  with more threads the other threads' work would be missed, so the clock falls back to the
  process's CPU time (``time.process_time``, all threads) and says so.
- ``"wall"`` keeps ``perf_counter`` for when elapsed time itself is the question.

Neighbours still leave a trace (they share caches and memory bandwidth), so measured lessons
also repeat and interleave (``chunkprefill.stats``). Every plot names the clock it read.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from chunkprefill.i18n import N_, tr

CLOCKS = ("auto", "thread", "process", "wall", "cuda-events")

_LABELS = {
    "cuda-events": N_("step time on the GPU's stream (CUDA events; includes launch overhead "
                      "when the host is the bottleneck)"),
    "thread": N_("CPU thread time (time.thread_time): the step's own work, not a GPU "
                 "measurement"),
    "process": N_("CPU process time (time.process_time): all threads, not a GPU measurement"),
    "wall": N_("wall clock (perf_counter): includes other programs' time, not a GPU "
               "measurement"),
}


def _is_cuda(device: Any) -> bool:
    return str(device).startswith("cuda")


def resolve_clock(device: Any = "cpu", clock: str = "auto") -> str:
    """The clock actually read for ``device``: ``"auto"`` is CUDA events on a GPU, the
    stepping thread's CPU time on a CPU with one torch thread, else the process's CPU time."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    if _is_cuda(device):
        if clock not in ("auto", "cuda-events", "wall"):
            raise ValueError(f"clock {clock!r} cannot time a CUDA device: use 'auto', "
                             "'cuda-events' or 'wall'")
        return "wall" if clock == "wall" else "cuda-events"
    if clock == "cuda-events":
        raise ValueError(f"clock 'cuda-events' needs a CUDA device, got {device!r}")
    if clock != "auto":
        return clock
    torch = sys.modules.get("torch")  # not imported: no torch threads to miss (the simulator)
    return "thread" if torch is None or torch.get_num_threads() == 1 else "process"


def clock_label(device: Any = "cpu", clock: str = "auto") -> str:
    """The words every figure and table that shows a measured time carries."""
    return tr(_LABELS[resolve_clock(device, clock)])


_CPU_CLOCKS: dict[str, Callable[[], float]] = {
    "thread": time.thread_time, "process": time.process_time, "wall": time.perf_counter}


class Timer:
    """``with Timer(device) as t: ...`` then ``t.elapsed_s``; ``t.kind`` names the clock."""

    def __init__(self, device: Any = "cpu", clock: str = "auto") -> None:
        self.device = device
        self.elapsed_s = 0.0
        self.kind = resolve_clock(device, clock)

    def __enter__(self) -> Timer:
        if self.kind == "cuda-events":
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            if self.kind == "wall" and _is_cuda(self.device):
                import torch

                torch.cuda.synchronize(self.device)
            self._read = _CPU_CLOCKS[self.kind]
            self._t0 = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.kind == "cuda-events":
            import torch

            self._end.record()
            torch.cuda.synchronize(self.device)
            self.elapsed_s = self._start.elapsed_time(self._end) / 1e3
        else:
            if self.kind == "wall" and _is_cuda(self.device):
                import torch

                torch.cuda.synchronize(self.device)
            self.elapsed_s = self._read() - self._t0


def time_fn(fn: Callable[[], object], device: Any = "cpu", warmup: int = 2,
            iters: int = 5, clock: str = "auto") -> list[float]:
    """Run ``fn`` ``warmup`` times untimed, then return ``iters`` timings in seconds."""
    if warmup < 0 or iters < 1:
        raise ValueError(f"warmup must be >= 0 and iters >= 1, got {warmup}, {iters}")
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        with Timer(device, clock) as t:
            fn()
        out.append(t.elapsed_s)
    return out


def kernel_time_s(fn: Callable[[], object], device: Any = "cpu", warmup: int = 5,
                  iters: int = 50) -> float:
    """Median seconds of one call of ``fn``, for timing a kernel rather than a step. On CUDA,
    ``triton.testing.do_bench``: calls are queued back to back (no synchronise between
    them), each after a write that flushes the L2 cache, so the events bracket the kernel's
    own work from memory and not the Python that launched it. Elsewhere ``time_fn``'s
    clock."""
    if warmup < 0 or iters < 1:
        raise ValueError(f"warmup must be >= 0 and iters >= 1, got {warmup}, {iters}")
    if _is_cuda(device):
        import triton.testing

        for _ in range(warmup):  # compiles and caches before do_bench's own estimate
            fn()
        return triton.testing.do_bench(fn, warmup=1, rep=iters, return_mode="median") / 1e3
    import statistics

    return statistics.median(time_fn(fn, device, warmup=warmup, iters=iters))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a measured run: a collection landing
    inside one step would make that step (and so a P99 ITL, which is the slowest steps)
    a measurement of the collector. Reference counting still frees everything at once."""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
