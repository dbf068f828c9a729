"""Argument checks shared by the public API: clear errors at the boundary."""

from __future__ import annotations

import math
import numbers

import numpy as np


def real(name: str, value, *, low: float | None = None, high: float | None = None,
         low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, or raise naming ``name`` and the valid range."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    v = float(value)
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be finite, got {value!r}")
    lo_txt = "-inf" if low is None else repr(low)
    hi_txt = "inf" if high is None else repr(high)
    rng = f"{'(' if low_open or low is None else '['}{lo_txt}, {hi_txt}{')' if high_open or high is None else ']'}"
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    return v


def integer(name: str, value, *, low: int = 1, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming ``name`` and the valid range."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if v < low or (high is not None and v > high):
        raise ValueError(f"{name} must be an integer in [{low}, {'inf' if high is None else high}], got {value!r}")
    return v


def real_array(name: str, value, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> tuple[np.ndarray, bool]:
    """Return ``(array, was_scalar)`` after checking every entry is a real in range."""
    scalar = np.ndim(value) == 0
    raw = np.asarray(value)
    if isinstance(value, (str, bytes, bool, np.bool_)) or raw.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a real number or an array of them, got {value!r}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or an array of them, got {value!r}") from None
    if arr.dtype == object:
        raise TypeError(f"{name} must be a real number or an array of them, got {value!r}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} must not contain NaN")
    lo_txt = "-inf" if low is None else repr(low)
    hi_txt = "inf" if high is None else repr(high)
    rng = f"{'(' if low_open or low is None else '['}{lo_txt}, {hi_txt}{')' if high_open or high is None else ']'}"
    if low is not None and np.any(arr < low if not low_open else arr <= low):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    if high is not None and np.any(arr > high if not high_open else arr >= high):
        raise ValueError(f"{name} must be in {rng}, got {value!r}")
    return arr, scalar
