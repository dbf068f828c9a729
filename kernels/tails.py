"""The untilted mass a truncation moves: one pass over the part of a grid it drops.

A grid PLD stores tilted masses ``p_i``; the P-mass at ``l_i = (k0 + i) h`` is
``p_i e^{log_scale - lam l_i}``.  Truncating the grid to a window moves the
mass outside it to a safe place (:meth:`pld.engine.grid.GridPLD.truncate`), so
it needs an upper bound on that mass, rounding and the vector's own error
ball ``||p - p*||_2 <= err`` included.
"""

from __future__ import annotations

import math

from numba import njit

from ._signatures import F64, called_with, f64, i64
from .hockey import _neumaier_add


@called_with(F64, i64, i64, i64, f64, f64, f64, f64, f64, f64)
@njit(cache=True, nogil=True)
def untilted_mass_bound(p, start, stop, k0, h, lam, log_scale, err, div, mul):
    """Upper bound on ``sum_{start <= i < stop} (q_i + r_i) w_i`` over every
    ``||r||_2 <= err``, where ``q_i = (p_i / div) * mul`` (each operation
    rounded, as the caller scales the entries it keeps) and
    ``w_i = exp(log_scale - lam l_i)``, ``l_i = (k0 + i) h``.

    By Cauchy-Schwarz the error term is at most ``err ||w||_2``.  The positive
    part of ``q`` is summed against ``w`` with Neumaier's compensated sum
    (within ``3 u`` of the exact dot for non-negative terms: ``(1 + 1e-15)``),
    each computed weight raised for the rounding of its exponent and of its
    exponential (a common factor ``e^{e_max} (1 + 4 u)``), the norm
    naively (``n u < 2e-9`` relative below ``1.8e7`` entries; scaled by the
    largest weight where the squares overflow; an underflowing product or
    square loses at most ``2^-1075``, added back).  ``+inf`` where
    a weight could overflow (its exponent above 700): the caller's other
    bound decides then.  The exponents are monotone in ``i``, so their
    largest is at an end.
    """
    if stop <= start:
        return 0.0
    first = log_scale - lam * (float(k0 + start) * h)
    last = log_scale - lam * (float(k0 + stop - 1) * h)
    if max(first, last) > 700.0:
        return math.inf
    s = 0.0
    c = 0.0
    s2 = 0.0
    for i in range(start, stop):
        w = math.exp(log_scale - lam * (float(k0 + i) * h))
        q = (p[i] / div) * mul
        s, c = _neumaier_add(s, c, max(q, 0.0) * w)
        s2 += w * w
    # the exponents as computed are within e_max of the exact ones (three
    # roundings: the loss, its product with lam, the difference), so every
    # exact weight is at most its computed one (itself within an ulp of its
    # exponential) times e^e_max (1 + 2 u)
    u = 2.0 ** -53
    l_max = max(abs(float(k0 + start) * h), abs(float(k0 + stop - 1) * h))
    grow = math.exp(4.0 * u * (abs(log_scale) + abs(lam) * l_max)) * (1.0 + 4.0 * u)
    # (products and squares that underflow lose at most 2^-1075 each)
    n = stop - start
    dot = (s + c) * (1.0 + 1e-15) * grow + n * 2.0 ** -1074
    if err == 0.0:
        return dot
    floor = math.sqrt(2.0 * n * 2.0 ** -1074)
    if s2 == math.inf:
        # (the squares overflow beyond weights of e^354: the norm scaled by
        # the largest weight, one more rounding per term)
        top = math.exp(max(first, last))
        s2 = 0.0
        for i in range(start, stop):
            r = math.exp(log_scale - lam * (float(k0 + i) * h)) / top
            s2 += r * r
        return dot + err * (math.sqrt(s2) * (1.0 + 4e-9) * top * grow + floor)
    return dot + err * (math.sqrt(s2) * (1.0 + 2e-9) * grow + floor)
