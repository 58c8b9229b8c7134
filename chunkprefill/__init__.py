"""chunkprefill: see and measure how chunked prefill keeps tokens streaming.

The scheduler side imports no torch; the model side (``ToyTransformer``, ``LLMEngine``,
...) is imported lazily on first use so ``from chunkprefill import Scheduler`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from chunkprefill.config import CacheConfig, ModelConfig, SchedulerConfig
from chunkprefill.kv_cache import BlockPool, KVCacheManager
from chunkprefill.request import Request, RequestStatus, SamplingParams
from chunkprefill.scheduler import Scheduler, SchedulerOutput
from chunkprefill.trace import TraceRequest, TraceStep, format_trace_table, run_trace

_LAZY = {
    "ToyTransformer": "chunkprefill.model",
    "LLMEngine": "chunkprefill.engine",
    "RequestOutput": "chunkprefill.engine",
}

__all__ = [
    "BlockPool", "CacheConfig", "KVCacheManager", "ModelConfig", "Request", "RequestStatus",
    "SamplingParams", "Scheduler", "SchedulerConfig", "SchedulerOutput", "TraceRequest",
    "TraceStep", "format_trace_table", "run_trace",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'chunkprefill' has no attribute {name!r}")
