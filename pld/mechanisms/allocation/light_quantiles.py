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
                    m: int, taus: np.ndarray, coarse: float) -> tuple[np.ndarray, np.ndarray]:
    """``s_k`` with ``P(S_L > s_k) <= tau_k`` for the sum of ``m`` light coordinates, and for
    that sum plus one marked coordinate (``+inf`` where the computed law does not resolve
    ``tau_k``); one chain of convolutions serves both.

    ``cell_q[c - 1]``, ``cell_eq[c - 1]``: the Q-mass of the cell ``((c - 1) d, c d]`` and a bound
    on its rounding, ``c = 1 .. n`` (the light part, ``Y <= n d``); ``cell_p``, ``cell_ep``: its
    partial mean ``E[Y; cell]`` (the marked coordinate's mass there) and its bound.  The marked
    coordinate's law given light is ``y L(dy)`` normalised.
    """
    n = cell_q.size
    tot = math.fsum(cell_q.tolist())
    mt = math.fsum(cell_p.tolist())
    if not (m >= 1 and n >= 1 and tot > 0.0 and mt > 0.0):
        return np.full(len(taus), math.inf), np.full(len(taus), math.inf)
    x, ex = _normalised(cell_q, cell_eq, tot)
    labels = np.arange(1, n + 1) * d
    mean_y = mt / tot
    mean_c = math.fsum((labels * cell_q).tolist()) / tot
    # r = E[c d - Y | light] >= 0, from below: each mean off by its cells' bounds and the
    # normaliser's, the products and sums by a few ulps
    rel = math.fsum(cell_eq.tolist()) / tot
    err_m = (math.fsum((labels * cell_eq).tolist()) + math.fsum(cell_ep.tolist())) / tot + (rel + 8.0 * _U) * (
        mean_c + mean_y)
    r = max(0.0, (mean_c - mean_y - err_m) * (1.0 - 1e-12) - 1e-15 * d)
    sd = math.sqrt(max(math.fsum(((labels - mean_c) ** 2 * cell_q).tolist()) / tot, 0.0)) + d
    top = n * d

    def keep(k: int, step: int) -> int:
        # (what a window drops only lowers the distribution function read below)
        return int((k * mean_c + 12.0 * math.sqrt(k) * sd + 3.0 * top) / (step * d)) + 2

    def halve(lv: tuple) -> tuple:
        y, e, k, step = lv
        return _halved_up(y), e.mapped(1.0, 2.0, 2.0 * _U, y), k, 2 * step

    def fit(lv: tuple) -> tuple:
        while 2 * lv[3] * d <= coarse * sd * math.sqrt(lv[2]) and lv[0].size > 64:
            lv = halve(lv)
        return lv

    def to_step(lv: tuple, step: int) -> tuple:
        while lv[3] < step:
            lv = halve(lv)
        return lv

    def combine(a: tuple, b: tuple) -> tuple:
        (c, ec), = convolve_errs([(a[0], a[1], b[0], b[1])])
        k = a[2] + b[2]
        return fit((c[: keep(k, a[3])].copy(), ec, k, a[3]))

    def add(r_: tuple, c: tuple) -> tuple:
        r_ = to_step(r_, c[3])
        return combine(r_, to_step(c, r_[3]))

    law, err, _, step = by_squaring((x, ex, 1, 1), m, lambda c: combine(c, c), add)
    mk = to_step((*_normalised(cell_p, cell_ep, mt), 1, 1), step)
    (law_m, err_marked), = convolve_errs([(law, err, mk[0], mk[1])])
    # (the marked coordinate's term Y - c d has mean <= 0: only the m unmarked ones' r is taken off)
    return (_read(law, err, step, d, m, m * r, taus), _read(law_m, err_marked, step, d, m + 1, m * r, taus))


def _normalised(q: np.ndarray, eq: np.ndarray, tot: float) -> tuple[np.ndarray, Err]:
    """One coordinate's label law (index = label, none at 0) from its cells' masses, normalised
    by their computed total ``tot``, which is within the cells' rounding of the exact one."""
    rel = math.fsum(eq.tolist()) / tot
    e = np.concatenate(([0.0], (eq + q * (rel + 4.0 * _U)) / tot)) * (1.0 + 2.0 * rel)
    return np.concatenate(([0.0], q / tot)), Err.of_entries(e)


def _read(law: np.ndarray, err: Err, step: int, d: float, count: int, shift: float,
          taus: np.ndarray) -> np.ndarray:
    """The quantiles of ``d step L + sum (Y_i - c_i d)`` over ``count`` coordinates, whose
    second sum is at most ``-shift`` plus Hoeffding's term (see the module)."""
    cdf_lo = np.cumsum(np.maximum(law - err.entry, 0.0)) * (1.0 - 4.0 * law.size * _U)
    out = np.full(len(taus), math.inf)
    for i, tau in enumerate(taus):
        best = math.inf
        for share in _HOEFFDING_SHARES:
            t_h = share * tau
            j = int(np.searchsorted(cdf_lo, 1.0 - (tau - t_h)))  # (first label with F_lo >= 1 - rest)
            if j < law.size:
                best = min(best, d * step * j + d * math.sqrt(count * math.log(1.0 / t_h) / 2.0) - shift)
        out[i] = max(0.0, best * (1.0 + 1e-12))
    return out
