"""Loss values that become answers, computed exactly or rounded outward.

A certified bracket may not lose its last unit in the last place: where an
answer is a loss value (epsilon at delta = 0 is the largest finite loss; near
it, at tiny delta, the answer is a grid point), the value is the exact real
number, and what pld returns is that number rounded *up* for an upper end and
*down* for a lower end.  A grid point ``l_k = k h`` is exact as a real number
(``k`` an integer, ``h`` a double); its double ``fl(k h)`` is not, and a
randomized response with ``epsilon = 1000.1`` composed 10 times has its top
point at ``10 fl(1000.1) = 10001.000000000000227``, rounded to ``10001.0``,
where the true delta is still ``2.3e-13`` of that atom's mass.

* :func:`point_up`, :func:`point_down`: ``k h`` rounded outward (exact rational
  arithmetic, for scalars);
* :func:`points_above`: ``k h > eps`` decided exactly, elementwise (an
  error-free product, Dekker 1971, so that an evaluator reads the right cell);
* :func:`sum_bounds`: ``sum k_i x_i`` over intervals ``[lo_i, hi_i]``, rounded
  outward (a composition's largest loss);
* :func:`widen`: a computed value with an absolute error bound, as an interval.

References
----------
T. J. Dekker, "A floating-point technique for extending the available
precision", Numer. Math. 18 (1971) 224-242 (the error-free product).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["point_up", "point_down", "points_above", "sum_bounds", "widen", "U"]

#: unit round-off of float64
U = 2.0 ** -53

#: Veltkamp's splitting constant 2^27 + 1 (Dekker 1971)
_SPLIT = 134217729.0


def _round_exact(x: Fraction, up: bool) -> float:
    """The double nearest ``x`` on the side asked (``x`` exact)."""
    f = float(x)
    if up and Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    elif not up and Fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def point_up(k: int, h: float) -> float:
    """The smallest double ``>= k h`` (exact real product)."""
    return _round_exact(Fraction(int(k)) * Fraction(h), up=True)


def point_down(k: int, h: float) -> float:
    """The largest double ``<= k h`` (exact real product)."""
    return _round_exact(Fraction(int(k)) * Fraction(h), up=False)


def _two_product(a: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """``(p, e)`` with ``p = fl(a b)`` and ``a b = p + e`` exactly (Dekker's
    product; exact while nothing overflows or underflows: ``|a|, |b|`` below
    ~1e290, ``|a b|`` above ~1e-290)."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def points_above(k: np.ndarray, h: float, eps: np.ndarray) -> np.ndarray:
    """``k h > eps`` for integer-valued ``k`` (as floats, ``|k| < 2^53``), exactly.

    With ``k h = p + e`` exactly, ``k h - eps = (p - eps) + e``: where ``p``
    and ``eps`` are within a factor 2 of each other (and of one sign) the
    difference ``p - eps`` is exact (Sterbenz), and the rounded sum has the
    sign of the exact one; elsewhere ``|p - eps| >= |p| / 2`` dwarfs ``|e| <=
    ulp(p) / 2``, so the rounding of ``p - eps`` cannot change the sign either.
    Infinite ``eps`` compare as infinities.
    """
    k = np.asarray(k, float)
    eps = np.asarray(eps, float)
    with np.errstate(invalid="ignore", over="ignore"):
        p, e = _two_product(k, float(h))
        e = np.where(np.isfinite(e), e, 0.0)
        exact = (p - eps) + e > 0.0
    return np.where(np.isfinite(eps), exact, eps < 0)


def sum_bounds(terms) -> tuple[float, float]:
    """``(lo, hi)`` doubles with ``lo <= sum_i k_i x_i <= hi`` for every ``x_i``
    in ``[lo_i, hi_i]``; ``terms`` is ``((k_i, lo_i, hi_i), ...)`` with
    ``k_i >= 0`` integers.  An infinite end makes its side of the sum infinite
    (``+inf`` wins: a component whose largest loss is surely infinite makes the
    sum's)."""
    terms = [(int(k), float(lo), float(hi)) for k, lo, hi in terms if int(k) > 0]

    def side(values: list[float], up: bool) -> float:
        if any(x == math.inf for x in values):
            return math.inf
        if any(x == -math.inf for x in values):
            return -math.inf
        return _round_exact(sum((Fraction(k) * Fraction(x) for (k, _, _), x in zip(terms, values)),
                                Fraction(0)), up=up)

    return side([lo for _, lo, _ in terms], False), side([hi for _, _, hi in terms], True)


def widen(value: float, err: float) -> tuple[float, float]:
    """``[value - err, value + err]`` rounded outward (``value`` infinite: itself)."""
    if not math.isfinite(value):
        return value, value
    return math.nextafter(value - err, -math.inf), math.nextafter(value + err, math.inf)
