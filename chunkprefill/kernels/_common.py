"""What both kernel wrappers share: argument checks, the device check, and the one decision
between compiled kernels and the CPU interpreter."""

from __future__ import annotations

import torch
import triton

if not hasattr(triton, "knobs"):  # triton.knobs arrived in 3.4; CUDA torch 2.5-2.7 ship 3.1-3.3
    raise ImportError(f"chunkprefill.kernels needs triton >= 3.4, found {triton.__version__}: "
                      "pip install 'triton>=3.4' (or a torch that ships it)")

# Read once, when the kernels are first imported: @triton.jit reads the same knob as it
# decorates them, choosing an interpreted or a compiled kernel for the process's lifetime.
INTERPRET: bool = bool(triton.knobs.runtime.interpret)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def check_triton_device(*tensors: torch.Tensor) -> None:
    """Triton compiles for GPUs; CPU tensors work only in the interpreter, which is chosen
    when this module is imported. Fail with the fix, not with a driver error."""
    devices = {t.device for t in tensors}
    _require(len(devices) == 1,
             f"all tensors must be on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type == "cpu" and not INTERPRET:
        raise ValueError(
            "the triton backend got CPU tensors but Triton is not in interpreter mode: set "
            "TRITON_INTERPRET=1 before chunkprefill.kernels is first imported, or use "
            "backend='torch' on the CPU"
        )
