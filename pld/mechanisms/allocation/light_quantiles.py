"""Upper quantiles of a sum of light coordinates from its labels (random allocation, split).

The split's rounds with two or more heavy coordinates (:mod:`pld.mechanisms.allocation.heavy`)
need a stochastic upper bound on the sum ``S_L`` of the ``m`` light coordinates beside them
(iid, each ``Y`` given ``Y <= B``): a ladder of values ``s_k`` with ``P(S_L > s_k) <= tau_k``.
Chernoff's bound with the coordinate's log-MGF gives one, but even with the exact MGF it sits
about ``sqrt(2 ln 2)`` standard deviations above the median; where those rounds carry a share
of delta (sigma 1.2, 1-of-402, delta 8e-11: 0.35% of delta, the bracket 3.8x its target) that
shift is the bracket's width.

Here: label each coordinate by its cell on the light grid, ``c = ceil(Y / d)`` (so ``Y <= c d``),
and add the labels along a binary tree by FFT, halving a partial sum's label with ``ceil(L/2)``
while its cell stays below ``coarse`` standard deviations (so ``K <= s L`` exactly at step
``s``: every rounding is upward).  With ``K`` the label sum,

    ``S_L = d K + sum_i (Y_i - c_i d)``,

the second sum a sum of ``m`` iid terms in ``(-d, 0]`` with mean ``-r`` (``r = d E[c] - E[Y]``),
so by the union bound and Hoeffding's inequality

    ``P(S_L > d s l + x - m r) <= P(L > l) + exp(-2 x^2 / (m d^2))``,

whatever the dependence between the two.  ``P(L > l)`` is read off the computed law with its
round-off bound on every entry (:mod:`pld.mechanisms.allocation.roundoff`): the law's
cumulative sums less that bound are lower bounds on its distribution function.  Where a tail
probability is below what the computed law resolves, the quantile is ``+inf`` (the caller
keeps Chernoff's there: the smaller of two valid quantiles is valid).

References: Hoeffding, "Probability inequalities for sums of bounded random variables" (1963).
"""

from __future__ import annotations

import math

import numpy as np

from pld.mechanisms.allocation.powering import by_squaring
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

_U = 2.0 ** -53
#: shares of a tail probability given to Hoeffding's term (the smallest quantile is kept)
_HOEFFDING_SHARES = (0.5, 0.1, 0.01)


def _halved_up(x: np.ndarray) -> np.ndarray:
    """The law of ``ceil(L / 2)``: labels ``2j - 1`` and ``2j`` go to ``j``."""
    out = np.zeros(x.size // 2 + 1)
    out[0] = x[0]
    odd = x[1::2]
    out[1: odd.size + 1] += odd
    even = x[2::2]
    out[1: even.size + 1] += even
    return out


def label_quantiles(cell_q: np.ndarray, cell_eq: np.ndarray, cell_p: np.ndarray, cell_ep: np.ndarray, d: float,
                    m: int, taus: np.ndarray, coarse: float, marked: bool = False) -> np.ndarray:
    """``s_k`` with ``P(S_L > s_k) <= tau_k`` for the sum of ``m`` light coordinates (``+inf``
    where the computed law does not resolve ``tau_k``), optionally plus one marked coordinate.

    ``cell_q[c - 1]``, ``cell_eq[c - 1]``: the Q-mass of the cell ``((c - 1) d, c d]`` and a bound
    on its rounding, ``c = 1 .. n`` (the light part, ``Y <= n d``); ``cell_p``, ``cell_ep``: its
    partial mean ``E[Y; cell]`` (the marked coordinate's mass there) and its bound.  ``marked``:
    one more coordinate, of the marked law given light (``y L(dy)`` normalised).
    """
    n = cell_q.size
    tot = math.fsum(cell_q.tolist())
    if not (m >= 1 and n >= 1 and tot > 0.0):
        return np.full(len(taus), math.inf)
    # one coordinate's label law given light (index = label), normalised: the computed total
    # is within the cells' rounding of the exact one
    rel = math.fsum(cell_eq.tolist()) / tot
    x = np.concatenate(([0.0], cell_q / tot))
    ex = Err.of_entries(np.concatenate(([0.0], (cell_eq + cell_q * (rel + 4.0 * _U)) / tot)) * (1.0 + 2.0 * rel))
    labels = np.arange(1, n + 1) * d
    mean_y = math.fsum(cell_p.tolist()) / tot
    mean_c = math.fsum((labels * cell_q).tolist()) / tot
    # r = E[c d - Y | light] >= 0, from below: each mean off by its cells' bounds and the
    # normaliser's (rel), the products and sums by a few ulps
    err_m = (math.fsum((labels * cell_eq).tolist()) + math.fsum(cell_ep.tolist())) / tot + (rel + 8.0 * _U) * (
        mean_c + mean_y)
    r = max(0.0, (mean_c - mean_y - err_m) * (1.0 - 1e-12) - 1e-15 * d)
    sd = math.sqrt(max(math.fsum(((labels - mean_c) ** 2 * cell_q).tolist()) / tot, 0.0)) + d
    top = n * d

    def keep(k: int, step: int) -> int:
        # (what a window drops only lowers the distribution function read below)
        return int((k * mean_c + 12.0 * math.sqrt(k) * sd + 3.0 * top) / (step * d)) + 2

    def fit(lv: tuple) -> tuple:
        y, e, k, step = lv
        while 2 * step * d <= coarse * sd * math.sqrt(k) and y.size > 64:
            y2 = _halved_up(y)
            e = e.mapped(1.0, 2.0, 2.0 * _U, y)
            y, step = y2, 2 * step
        return y, e, k, step

    def to_step(lv: tuple, step: int) -> tuple:
        y, e, k, s = lv
        while s < step:
            y2 = _halved_up(y)
            e = e.mapped(1.0, 2.0, 2.0 * _U, y)
            y, s = y2, 2 * s
        return y, e, k, s

    def combine(a: tuple, b: tuple) -> tuple:
        (c, ec), = convolve_errs([(a[0], a[1], b[0], b[1])])
        k = a[2] + b[2]
        return fit((c[: keep(k, a[3])].copy(), ec, k, a[3]))

    def add(r: tuple, c: tuple) -> tuple:
        r = to_step(r, c[3])
        return combine(r, to_step(c, r[3]))

    result = by_squaring((x, ex, 1, 1), m, lambda c: combine(c, c), add)
    count = m
    if marked:
        mt = math.fsum(cell_p.tolist())
        if not mt > 0.0:
            return np.full(len(taus), math.inf)
        rel_p = math.fsum(cell_ep.tolist()) / mt
        mx = np.concatenate(([0.0], cell_p / mt))
        me = Err.of_entries(np.concatenate(([0.0], (cell_ep + cell_p * (rel_p + 4.0 * _U)) / mt)) * (1.0 + 2.0 * rel_p))
        mk = to_step((mx, me, 1, 1), result[3])
        (c, ec), = convolve_errs([(result[0], result[1], mk[0], mk[1])])
        result = (c, ec, m + 1, result[3])
        count = m + 1
    law, err, _, step = result
    cdf_lo = np.cumsum(np.maximum(law - err.entry, 0.0)) * (1.0 - 4.0 * law.size * _U)
    out = np.full(len(taus), math.inf)
    for i, tau in enumerate(taus):
        best = math.inf
        for share in _HOEFFDING_SHARES:
            t_h = share * tau
            rest = tau - t_h
            j = int(np.searchsorted(cdf_lo, 1.0 - rest))  # (first label with F_lo >= 1 - rest)
            if j >= law.size:
                continue
            x_h = d * math.sqrt(count * math.log(1.0 / t_h) / 2.0)
            # (the marked coordinate's term has mean <= 0: only the m unmarked ones' r is taken off)
            best = min(best, d * step * j + x_h - m * r)
        out[i] = max(0.0, best * (1.0 + 1e-12))
    return out
