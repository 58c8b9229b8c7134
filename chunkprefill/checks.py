"""The validators every config, request and workload class calls, so bad input fails at
construction with a ``ValueError`` naming the parameter and its allowed range (never deep
inside the scheduler or torch); and ``cdiv``, the one ceiling division. Imports nothing."""

from __future__ import annotations

import math
import numbers


def cdiv(a: int, b: int) -> int:
    """Ceiling division (numpy arrays too): blocks for a number of tokens, tiles for rows."""
    return -(-a // b)


def check_int(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """Return ``value`` as an int, or raise a ``ValueError`` naming ``name`` and the allowed
    range unless it is an integer (numpy's too; not a bool) with ``lo <= value (<= hi)``.
    The one validator every config, request and workload class uses."""
    if type(value) is int and value >= lo and (hi is None or value <= hi):
        return value  # the common case, cheaply: requests are checked by the thousand
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or value < lo or (hi is not None and value > hi):
        rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be an integer {rng}, got {value!r}")
    return int(value)


def check_float(name: str, value: object, lo: float, hi: float | None = None,
                lo_open: bool = False) -> float:
    """Return ``value`` as a float, or raise a ``ValueError`` naming ``name`` and the allowed
    range unless it is a finite real number (not a bool) with ``lo <= value`` (``lo <
    value`` if ``lo_open``) and ``value <= hi``. ``check_int``'s twin for real numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value < lo or (lo_open and value == lo) \
            or (hi is not None and value > hi):
        left = f"> {lo:g}" if lo_open else f">= {lo:g}"
        rng = left if hi is None else f"in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be a finite number {rng}, got {value!r}")
    return float(value)


def check_positive(name: str, value: object, allow_zero: bool = False) -> float:
    """``check_float`` for a finite number > 0 (``>= 0`` with ``allow_zero``)."""
    return check_float(name, value, 0.0, lo_open=not allow_zero)


def check_priority(value: object) -> int:
    """A request's ``priority``: any integer (vLLM's type; lower is served first)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"priority must be an integer (lower = served first), got {value!r}")
    return int(value)


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
