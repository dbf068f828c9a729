"""Sums of two independent non-negative laws on one geometric grid (served through ``pld.kernels``).

The grid is ``g_0 = 0`` and ``g_k = g_1 e^{(k - 1) h}`` for ``k >= 1``.  For random
allocation's short rounds at small noise (:mod:`pld.mechanisms.allocation.geometric`) the
law of ``S = Y_1 + ... + Y_t`` is built by pairwise sums of partial sums:

* :func:`geometric_sum_spread`: every sum ``g_i + g_j`` of the two laws' points is spread
  onto its two neighbouring grid points, preserving its mass and its mean (the sum of two
  independent spreads, spread again: larger in the convex order than the true sum);
* :func:`geometric_sum_merge`: atoms ``(mass, mass x value)`` per cell; the sums of two
  atoms are merged into the cell holding their value (a conditional expectation:
  smaller in the convex order, a post-processing).

A pair ``(i, j)`` with ``g_i <= g_j (e^h - 1) e^{-h}`` adds less than one cell to ``g_j``:
those pairs are handled together from prefix sums of mass and first moment (``band``
is how many cells below ``j`` are summed pair by pair), so a sum costs
``O(n band)`` rather than ``O(n^2)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, called_with, f64, i64

_U = 2.0 ** -53


@njit(cache=True)
def _prefix(x, g):
    """Prefix sums of the masses and first moments: ``pm[i] = sum_{l < i} x_l``,
    ``px[i] = sum_{l < i} x_l g_l``."""
    n = x.size
    pm = np.zeros(n + 1)
    px = np.zeros(n + 1)
    for i in range(n):
        pm[i + 1] = pm[i] + x[i]
        px[i + 1] = px[i] + x[i] * g[i]
    return pm, px


@njit(cache=True)
def _spread_pass(big, small, pm, px, g, log_ratio, band, inclusive, out):
    """Pairs with the larger point from ``big`` (index ``j``) and the smaller from ``small``
    (index ``i <= j``, or ``< j`` unless ``inclusive``); returns the mass past the last point."""
    n = g.size
    over = 0.0
    slack = 32.0 * _U / math.expm1(log_ratio) + 8.0 * _U
    for j in range(n):
        bj = big[j]
        if bj == 0.0:
            continue
        lo = max(0, j - band)
        hi = j if inclusive else j - 1
        if lo > 0:
            # every g_i, i < lo, adds less than one cell: g_i + g_j in [g_j, g_{j+1})
            mass = pm[lo]
            if mass > 0.0:
                if j + 1 >= n:
                    over += bj * mass
                else:
                    # (g_{j+1} <= 2 g_j: the difference is exact)
                    f = px[lo] / (g[j + 1] - g[j])
                    f = min(f, mass)
                    # (px and pm are sums of up to n terms: f's rounding is below n u mass)
                    e = bj * mass * (slack + (n + 8) * _U)
                    out[j + 1] += bj * f + e
                    out[j] += bj * (mass - f) + e
        k = j
        for i in range(lo, hi + 1):
            w = bj * small[i]
            if w == 0.0:
                continue
            x = g[i] + g[j]
            while k + 1 < n and g[k + 1] <= x:
                k += 1
            if k + 1 >= n:
                over += w
                continue
            f = (x - g[k]) / (g[k + 1] - g[k])
            f = min(max(f, 0.0), 1.0)
            out[k] += w * (1.0 - f + slack)
            out[k + 1] += w * (f + slack)
    return over


@called_with(F64, F64, F64, f64, i64)
@njit(cache=True)
def geometric_sum_spread(a, b, g, log_ratio, band):
    """The law of ``A + B`` (masses ``a``, ``b`` on the points ``g``, independent), each sum
    spread onto its neighbouring points.  Returns ``(mass, over)``.

    A sum ``x = g_i + g_j`` in ``[g_k, g_{k+1})`` sends ``(x - g_k)/(g_{k+1} - g_k)`` of its
    mass to ``g_{k+1}`` and the rest to ``g_k``; both shares are rounded up by a bound on
    the fraction's rounding (``~u / (e^h - 1)``), so every entry is at least the exact
    spread's share; ``over`` is the mass of sums past the last point.  Pairs
    ``g_i`` below ``g_j`` by more than ``band`` cells are spread from prefix sums (the
    caller picks ``band`` so that those sums stay in ``g_j``'s cell).  Additions:
    each entry is a sum of at most ``4 (log(2)/h + 3) (band + 2)`` non-negative terms (the
    pairs within a band of the cells within ``log(2)/h + 1`` below it, both passes; the
    caller rounds the masses up by that many ulps).
    """
    out = np.zeros(g.size)
    pma, pxa = _prefix(a, g)
    pmb, pxb = _prefix(b, g)
    over = _spread_pass(b, a, pma, pxa, g, log_ratio, band, True, out)
    over += _spread_pass(a, b, pmb, pxb, g, log_ratio, band, False, out)
    return out, over


@njit(cache=True)
def _merge_pass(bm, bv, sm, sv, pm, pv, g, band, inclusive, om, ov):
    n = g.size
    over = 0.0
    for j in range(n):
        mj = bm[j]
        if mj == 0.0:
            continue
        xj = bv[j] / mj
        lo = max(0, j - band)
        hi = j if inclusive else j - 1
        if lo > 0 and pm[lo] > 0.0:
            # all cells below lo merged with cell j into one atom (any merge is dominated)
            m = mj * pm[lo]
            v = mj * pv[lo] + bv[j] * pm[lo]
            k = j + 1 if (j + 1 < n and v >= g[j + 1] * m) else j
            om[k] += m
            ov[k] += v
        k = j
        for i in range(lo, hi + 1):
            mi = sm[i]
            if mi == 0.0:
                continue
            m = mj * mi
            v = mj * sv[i] + bv[j] * mi
            x = xj + sv[i] / mi
            while k > 0 and g[k] > x:
                k -= 1
            while k + 1 < n and g[k + 1] <= x:
                k += 1
            if k + 1 >= n:
                over += m
                continue
            om[k] += m
            ov[k] += v
    return over


@called_with(F64, F64, F64, F64, F64, i64)
@njit(cache=True)
def geometric_sum_merge(am, av, bm, bv, g, band):
    """The law of ``A + B`` for laws given as atoms per cell (``am`` masses, ``av`` masses
    times values; cell ``k`` holds values in ``[g_k, g_{k+1})``), merged per cell.
    Returns ``(mass, moment, over)``.

    Every pair of atoms becomes one atom (mass ``am_i bm_j``, moment
    ``am_i bv_j + bm_j av_i``) added to the cell holding its value; the pairs with
    ``i < j - band`` are merged into one atom per ``j`` first.  Summing atoms into a
    cell is a conditional expectation of the sum, whatever the cells: the
    result is smaller in the convex order than the exact sum of the two laws.
    ``over``: the mass of sums past the last point (dropped by the caller: a
    sub-pair).  Every output is a sum of at most ``4 (log(2)/h + 3) (band + 2)`` products of
    two inputs and of the far groups' prefix sums of ``n`` terms (the caller carries the
    relative rounding).
    """
    n = g.size
    om = np.zeros(n)
    ov = np.zeros(n)
    pma = np.zeros(n + 1)
    pva = np.zeros(n + 1)
    pmb = np.zeros(n + 1)
    pvb = np.zeros(n + 1)
    for i in range(n):
        pma[i + 1] = pma[i] + am[i]
        pva[i + 1] = pva[i] + av[i]
        pmb[i + 1] = pmb[i] + bm[i]
        pvb[i + 1] = pvb[i] + bv[i]
    over = _merge_pass(bm, bv, am, av, pma, pva, g, band, True, om, ov)
    over += _merge_pass(am, av, bm, bv, pmb, pvb, g, band, False, om, ov)
    return om, ov, over
