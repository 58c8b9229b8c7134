"""Triton kernels for the paged KV cache: unified attention and the K/V store.

Importing this package imports Triton and decides, once, between compiled kernels and the
CPU interpreter: set ``TRITON_INTERPRET=1`` *before* the first import to run on CPU tensors.
``chunkprefill.attention`` imports it lazily, only when ``backend="triton"`` is used.
``launch`` picks every launch configuration from the GPU's limits; ``aot`` compiles them all
ahead of time for GPUs this machine does not have (``python -m chunkprefill.kernels.aot``).
"""

from chunkprefill.kernels._common import INTERPRET
from chunkprefill.kernels.kv_store import reshape_and_cache
from chunkprefill.kernels.unified_attention import unified_attention

__all__ = ["INTERPRET", "reshape_and_cache", "unified_attention"]
