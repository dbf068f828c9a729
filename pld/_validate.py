"""Argument checks shared by the public API: clear errors at the boundary."""

from __future__ import annotations

import math
import numbers
from typing import cast

import numpy as np

#: largest count of one component (``self_compose``, ``PLD`` components,
#: DP-SGD steps): the engine's levels and windows are sized for counts up to this
MAX_COUNT = 10**12
#: largest privacy-loss scale of one release: a Gaussian's ``sensitivity /
#: sigma``, a pure mechanism's ``epsilon`` (its largest loss).  A loss of 1e4
#: per release is epsilon ~ 5e7 for the Gaussian; beyond it the answer is
#: epsilon = inf for every delta < 1 in all but name, and the grids' arithmetic
#: (tilts times losses) leaves the floating-point range.
MAX_LOSS_SCALE = 1e4
#: largest Gaussian ``sensitivity / sigma`` (mean loss mu^2 / 2 = 5e5 per
#: release; calibration searches noise multipliers from 1e-3 up)
MAX_GAUSSIAN_MU = 1e3
#: smallest positive delta a query accepts: e^-230, far below any failure
#: probability a guarantee is stated with; below it the grids' truncation and
#: round-off budgets leave the float range (delta = 1e-300 lost every mass)
MIN_DELTA = 1e-100


def delta_floor(name: str, d: np.ndarray) -> None:
    """Refuse a positive delta below :data:`MIN_DELTA` (0 itself is exact: the largest loss)."""
    bad = (d > 0.0) & (d < MIN_DELTA)
    if np.any(bad):
        raise ValueError(f"{name} must be 0 or in [{MIN_DELTA:g}, 1], got {float(d[bad].ravel()[0])!r} "
                         "(a failure probability that small says nothing; delta = 0 gives the pure-DP epsilon)")


def _short(value) -> str:
    """``repr`` of a value, cut short (a 400-digit integer is not a message)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def real(name: str, value, *, low: float | None = None, high: float | None = None,
         low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """Return ``value`` as a float, or raise naming ``name`` and the valid range."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {_short(value)}")
    try:
        v = float(value)
    except OverflowError:  # an integer beyond the float range (10**400)
        v = math.inf if cast(int, value) > 0 else -math.inf  # only an integer overflows float()
        if not allow_inf or (high is not None and v > 0) or (low is not None and v < 0):
            raise ValueError(f"{name} must be a finite real number in range, got {_short(value)}") from None
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be finite, got {_short(value)}")
    rng = _interval(low, high, low_open, high_open)
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be in {rng}, got {_short(value)}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be in {rng}, got {_short(value)}")
    return v


def integer(name: str, value, *, low: int = 1, high: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming ``name`` and the valid range.

    Integers (Python or numpy) and floats with an integral value are accepted;
    booleans, strings and fractional floats are not.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {_short(value)}")
    v = int(value)
    if v < low or (high is not None and v > high):
        top = "inf" if high is None else (f"{high:.0e}" if high >= 10**6 else str(high))
        raise ValueError(f"{name} must be an integer in [{low}, {top}], got {_short(value)}")
    return v


def loss_scale(what: str, value: float, limit: float = MAX_LOSS_SCALE) -> float:
    """Check a mechanism's privacy-loss scale against ``limit``."""
    if not value <= limit:
        raise ValueError(f"{what} must be at most {limit:g} (a privacy loss of that size per "
                         f"release already means epsilon = inf in practice), got {value:.6g}")
    return value


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """The valid range as text: ``(0.0, 1.0]``; a missing end is an open infinity."""
    lo_txt = "-inf" if low is None else repr(low)
    hi_txt = "inf" if high is None else repr(high)
    return f"{'(' if low_open or low is None else '['}{lo_txt}, {hi_txt}{')' if high_open or high is None else ']'}"


def _check_interval(name: str, arr: np.ndarray, value, low: float | None, high: float | None,
                    low_open: bool, high_open: bool) -> None:
    """Raise ``ValueError`` naming ``name`` unless every entry of ``arr`` is in range."""
    rng = _interval(low, high, low_open, high_open)
    if low is not None and np.any(arr <= low if low_open else arr < low):
        raise ValueError(f"{name} must be in {rng}, got {_short(value)}")
    if high is not None and np.any(arr >= high if high_open else arr > high):
        raise ValueError(f"{name} must be in {rng}, got {_short(value)}")


def real_array(name: str, value, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> tuple[np.ndarray, bool]:
    """Return ``(array, was_scalar)`` after checking every entry is a real in range.

    Infinite entries are accepted when the range allows them; NaN never is.
    Strings, booleans, complex numbers and ``None`` raise ``TypeError``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = real(name, value, low=low, high=high, low_open=low_open, high_open=high_open, allow_inf=True)
    scalar = np.ndim(value) == 0
    raw = np.asarray(value)
    if isinstance(value, (str, bytes, bool, np.bool_)) or raw.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a real number or an array of them, got {_short(value)}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or an array of them, got {_short(value)}") from None
    if arr.dtype == object:
        raise TypeError(f"{name} must be a real number or an array of them, got {_short(value)}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} must not contain NaN")
    _check_interval(name, arr, value, low, high, low_open, high_open)
    return arr, scalar


def real_scalar(name: str, value, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> float:
    """Return one real number in range as a float, or raise naming ``name``.

    Unlike :func:`real`, a 0-d numpy array is accepted and an infinite value is
    accepted when the range allows it (``high=None`` or a closed ``high=inf``);
    an array of any other shape raises ``TypeError``.
    """
    arr, scalar = real_array(name, value)
    if not scalar:
        raise TypeError(f"{name} must be a scalar, got an array of shape {arr.shape}")
    _check_interval(name, arr, value, low, high, low_open, high_open)
    return float(arr)


def count(name: str, value, *, low: int = 0) -> int:
    """Return a count ``>= low`` as an int, or raise naming ``name``.

    Integral floats (``6000.0``) are accepted.  A fractional or non-finite
    float is a real number outside the valid set, so it raises ``ValueError``
    (where :func:`integer` raises ``TypeError``, the engine's contract); a
    boolean or a non-number raises ``TypeError``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__} {_short(value)}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        fv = float(value)
        if not math.isfinite(fv) or fv != math.floor(fv):
            raise ValueError(f"{name} must be an integer >= {low}, got {_short(value)}")
        out = int(fv)
    if out < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {_short(value)}")
    return out


def choice(name: str, value, options: tuple) -> str:
    """Return ``value`` if it is one of ``options`` (strings), or raise naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, options))}, got {_short(value)}")
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {_short(value)}")
    return value
