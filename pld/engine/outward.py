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
* ``k h > eps`` decided exactly, so that the evaluator reads the right cell,
  lives with the evaluator's compiled pass (:func:`pld.kernels.hockey_delta`:
  an error-free product, Dekker 1971);
* :func:`sum_bounds`: ``sum k_i x_i`` over intervals ``[lo_i, hi_i]``, rounded
  outward (a composition's largest loss);
* :func:`widen`: a computed value with an absolute error bound, as an interval;
* :func:`exact_sum`: a sum of products of doubles and integers, rounded once,
  and its rounded remainder (dyadic rationals on integers: what
  :class:`fractions.Fraction` computes, without its normalisation).

References
----------
T. J. Dekker, "A floating-point technique for extending the available
precision", Numer. Math. 18 (1971) 224-242 (the error-free product).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["point_up", "point_down", "sum_bounds", "widen", "exact_sum", "U"]

#: unit round-off of float64
U = 2.0 ** -53


def _round_ratio(num: int, den: int, up: bool) -> float:
    """The double nearest ``num / den`` on the side asked (``den > 0``; Python's
    integer division rounds to nearest, the comparison is exact)."""
    f = num / den
    fn, fd = f.as_integer_ratio()
    if up and fn * den < num * fd:
        f = math.nextafter(f, math.inf)
    elif not up and fn * den > num * fd:
        f = math.nextafter(f, -math.inf)
    return f


def point_up(k: int, h: float) -> float:
    """The smallest double ``>= k h`` (exact real product)."""
    n, d = float(h).as_integer_ratio()
    return _round_ratio(int(k) * n, d, up=True)


def point_down(k: int, h: float) -> float:
    """The largest double ``<= k h`` (exact real product)."""
    n, d = float(h).as_integer_ratio()
    return _round_ratio(int(k) * n, d, up=False)


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
        return _round_ratio(*_dyadic_sum([(k, x) for (k, _, _), x in zip(terms, values)]), up=up)

    return side([lo for _, lo, _ in terms], False), side([hi for _, _, hi in terms], True)


def widen(value: float, err: float) -> tuple[float, float]:
    """``[value - err, value + err]`` rounded outward (``value`` infinite: itself)."""
    if not math.isfinite(value):
        return value, value
    return math.nextafter(value - err, -math.inf), math.nextafter(value + err, math.inf)


def exact_sum(*terms: tuple) -> tuple[float, float]:
    """``(s, r)``: ``s`` the double nearest ``x = sum_t prod_{f in t} f`` (exact
    real arithmetic over the terms' factors, doubles or integers) and ``r``
    the double nearest ``x - s``.

    The sum as one integer over a power of two (:func:`_dyadic_sum`); Python's
    integer division rounds correctly (as ``float(Fraction(...))`` does).
    ``OverflowError`` beyond the double range.
    """
    num, den = _dyadic_sum(terms)
    s = num / den
    sn, sd = s.as_integer_ratio()
    common = max(den, sd)
    return s, (num * (common // den) - sn * (common // sd)) / common


def _dyadic_sum(terms) -> tuple[int, int]:
    """``(num, den)`` with ``num / den = sum_t prod_{f in t} f`` exactly: every
    double is an integer over a power of two, so the sum is one integer over
    the largest denominator (``(0, 1)`` for no terms)."""
    parts = []
    for factors in terms:
        num, den = 1, 1
        for f in factors:
            if isinstance(f, (int, np.integer)):
                num *= int(f)
            else:
                a, b = float(f).as_integer_ratio()
                num *= a
                den *= b
        parts.append((num, den))
    den = max((d for _, d in parts), default=1)
    return sum(n * (den // d) for n, d in parts), den
