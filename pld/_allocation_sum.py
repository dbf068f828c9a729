"""The law of the likelihood ratio of one round of random allocation (Gaussian, one of ``t`` steps).

Remove direction: ``P = (1/t) sum_i N(e_i, s^2 I_t)`` against ``Q = N(0, s^2 I_t)``.
With ``Y_i = exp(x_i/s^2 - 1/(2 s^2))`` the per-coordinate likelihood ratio,
``dP/dQ = Lambda = S/t`` with ``S = sum_i Y_i`` and the ``Y_i`` iid under ``Q``
(``log Y ~ N(-a^2/2, a^2)``, ``a = 1/s``, ``E[Y] = 1``).  ``S`` is sufficient, and
a pair of this form is determined by the Q-law of ``Lambda``:

* remove: ``H_c(P || Q) = E_Q[(Lambda - c)_+]``, loss ``log Lambda`` with P-mass
  ``Lambda`` times Q-mass;
* add (the pair swapped): ``H_c(Q || P) = E_Q[(1 - c Lambda)_+]``, loss
  ``-log Lambda`` with P-mass the Q-mass.

Why a spread bounds from above and a merge from below (proof sketch)
--------------------------------------------------------------------
For pairs whose likelihood ratio has mean one, Blackwell's order is the
convex order of ``Lambda`` under ``Q`` (both hockey-stick families above are
expectations of convex functions of ``Lambda``, and they determine the pair).

* Upper: replace each ``Y_i`` by an independent mean-preserving spread
  ``Y_i^s`` onto the grid ``k d`` (:func:`pld.kernels.allocation.spread_law`).
  Then ``E[Y^s | Y] = Y``, so ``S^s = sum Y_i^s`` is a mean-preserving spread
  of ``S``: ``E f(S^s) >= E f(S)`` for every convex ``f``, and ``(P^s, Q^s)``
  with ``dP^s/dQ^s = S^s/t`` is a pair of probability measures dominating the
  true one.  Composed over epochs it still dominates (each epoch's hockey
  stick ``E[(prod_j Lambda_j - c)_+]`` is convex in each factor; or: Blackwell
  domination is preserved by products).
* Lower: reveal only which cell ``(e_{k-1}, e_k]`` each ``Y_i`` falls in; the
  cells are chosen so that ``E[Y | cell] = g_k(1 + r)`` with ``|r| <= rho``
  (:func:`pld.kernels.allocation.merged_law`).  This is a post-processing of
  the output, hence dominated; its likelihood ratio is ``sum_i E[Y_i | cell_i]
  / t``, which lies in ``[(1 - rho) S_g/t, (1 + rho) S_g/t]`` with ``S_g`` the
  sum of the grid points.  The remove hockey stick is increasing in
  ``Lambda`` and the add one decreasing, so ``(1 - rho) S_g/t`` (remove) and
  ``(1 + rho) S_g/t`` (add) give lower bounds, composed or not (monotone in
  each epoch's factor).  Cells the residual bound cannot certify are dropped
  (a sub-pair: lower hockey sticks).

Both sums are ``t``-fold convolutions on linear grids (FFT, repeated
squaring).  A partial sum of ``m`` coordinates is re-gridded to twice its
spacing while that spacing stays below a fixed fraction of its standard
deviation (evolving discretisation): by a mean-preserving spread above
(:func:`_spread_half`, which keeps the likelihood ratio of every atom equal to
its value, so the pair stays of the form above) and by a merge into buckets
whose conditional means are exactly the coarse points below
(:func:`pld.kernels.allocation.merge_half`, a randomised post-processing).
Spreads and merges of partial sums compose with the sums (convex order and
post-processing are both preserved by adding independent terms).

Truncation is exact bookkeeping: each level is cut to its own window and
each coordinate to the first window.  On the upper side everything cut is
made fully distinguishing (a union of a sub-pair with a fully revealing one
dominates): the per-coordinate measure has total mass ``M`` and marked mass
``m`` (computed, including the tail beyond the first window), convolutions
and spreads keep totals, so the cut part of the ``t``-fold sum has Q-mass
``M^t - (Q inside)`` (to loss ``+inf`` in the add direction) and P-mass
``m M^(t-1) - (P inside)`` (to ``+inf`` in the remove direction).  The lower
side drops what is cut.  Round-off: each array carries an l2 bound ``E`` on
its error (Young's inequality per convolution, the l2 norm of each re-grid
map); the upper side adds ``2 sqrt(n) E`` to the masses at ``+inf`` (the sums
inside and the entries themselves), the lower side subtracts ``E`` from every
entry before clipping.  Per-coordinate masses come from differences of
``Phi`` with bounded rounding; the spread's shares are rounded up (extra mass
only raises both hockey sticks), the merge's residual ``rho`` is bounded per
cell and cells it cannot certify are dropped.

The bias is second order: a spread adds at most ``d^2/4`` to the variance of
each ``Y``, so ``d^2/(4t)`` to that of ``Lambda``; the merge removes about
``d^2/12``.  A grid spacing ``d`` that is coarse on the scale of one ``Y`` is
fine on the scale of ``S ~ t``.

References: Feldman & Shenfeld, "Privacy amplification by random allocation"
(2025); Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from pld import _fft
from pld.kernels import l1_l2_norms

#: relative residual allowed for a merged cell's conditional mean
_RHO_CAP = 1e-9
#: most fine atoms one merged bucket may take from (its error grows like the root of it)
_WIDTH_CAP = 3
#: tail probability left beyond the window (sizing only: what is left is bounded)
_TAIL = 1e-13


@dataclass(frozen=True, eq=False)
class SumLaw:
    """One side's laws of ``S = t Lambda`` on the grid ``k d``, ``k = 0..n``.

    ``q`` is the Q-law (the add direction's P-masses at loss ``-log Lambda``)
    and ``p`` the P-law (the remove direction's P-masses at loss ``log
    Lambda``), with ``Lambda = scale * k d / t``; ``inf_*`` the mass at loss
    ``+inf`` in each direction (upper side: truncation and round-off; lower: 0).
    """

    d: float
    t: int
    p: np.ndarray
    q: np.ndarray
    scale_remove: float
    scale_add: float
    inf_remove: float
    inf_add: float


def window(a: float, m: int, t: int | None = None) -> float:
    """Right end of the window of a sum of ``m`` of the ``t`` coordinates:
    its bulk and the tail of one large ``Y`` (sizing only)."""
    t = m if t is None else t
    z = float(-ndtri(_TAIL))
    z_t = float(-ndtri(_TAIL / t))
    var = math.expm1(min(a * a, 700.0))
    bulk = m + z * math.sqrt(m * var)
    # the marked coordinate (log Y ~ N(a^2/2, a^2) under P) and any of the t under Q
    tail = math.exp(min(a * a / 2 + z * a, 700.0)) + math.exp(min(-a * a / 2 + z_t * a, 700.0))
    return bulk + tail


def _conv(a: np.ndarray, ea: float, b: np.ndarray, eb: float, keep: int) -> tuple[np.ndarray, float]:
    """Truncated convolution with an l2 bound on the error of the result."""
    c, fft_err = _fft.convolve(a, b)
    a1 = float(l1_l2_norms(a)[0]) + math.sqrt(a.size) * ea
    b1 = float(l1_l2_norms(b)[0]) + math.sqrt(b.size) * eb
    err = ea * b1 + eb * a1 + fft_err
    return c[:keep].copy(), err * (1.0 + 1e-9)


_U = 2.0 ** -53


@dataclass(eq=False)
class _Level:
    """Laws of a partial sum of ``m`` coordinates on the grid ``k (step d)``.

    ``q``: its Q-law; ``p``: its law when one of its coordinates is the
    marked one (P-mass ``E[Y_marked; A = v]``); ``eq``, ``ep``: l2 bounds on
    their round-off; ``step``: spacing in units of the first grid's.
    """

    q: np.ndarray
    p: np.ndarray
    eq: float
    ep: float
    m: int
    step: int


def _spread_half(q: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean-preserving spread of a law on ``i d`` onto ``2 j d``.

    The atom at ``(2j+1) d`` sends half its Q-mass to each neighbour and its
    P-mass in the ratio of the neighbours' values (``(j+1)/(2j+1)`` up), so
    both masses and the mean are preserved and every atom keeps the
    likelihood ratio of its grid value: a spread of a pair whose likelihood
    ratio is its value, which dominates it (convex order).
    """
    n = q.size
    m = (n + 1) // 2 + 1
    qo = np.zeros(m)
    po = np.zeros(m)
    qo[: (n + 1) // 2] += q[0::2]
    po[: (n + 1) // 2] += p[0::2]
    qd = q[1::2]
    pd = p[1::2]
    j = np.arange(qd.size, dtype=float)
    up_p = pd * ((j + 1.0) / (2.0 * j + 1.0))
    half = 0.5 * qd
    qo[: qd.size] += half
    qo[1: qd.size + 1] += half
    po[1: qd.size + 1] += up_p
    po[: qd.size] += pd - up_p  # (exact: the larger share is at least half)
    return qo, po


def _coarsen(lv: _Level, upper: bool) -> tuple[_Level, float]:
    """The level re-gridded to twice its spacing (spread above, merge below); returns its residual."""
    from pld.kernels.allocation import merge_half

    # A linear map with column sums <= 1 and row sums <= r has l2 norm at most
    # sqrt(r): the spread's Q rows take 1 + 1/2 + 1/2, its P rows at most
    # 1 + 1 + 1/3 (j = 1); a merge bucket's row takes at most its atoms.
    if upper:
        q, p = _spread_half(lv.q, lv.p)
        rho, kq, kp = 0.0, math.sqrt(2.0), math.sqrt(7.0 / 3.0)
    else:
        # the sums of a few coordinates keep the comb of the first merge (grid
        # points it skipped), so their buckets need more atoms
        cap = _WIDTH_CAP if lv.m > 4 else 4 * _WIDTH_CAP
        q, p, rho, widest = merge_half(np.ascontiguousarray(lv.q), np.ascontiguousarray(lv.p), _RHO_CAP, cap)
        kq = kp = math.sqrt(widest)
    # (the additions round each entry by an ulp)
    eq = kq * lv.eq + 2.0 * _U * float(l1_l2_norms(q)[1])
    ep = kp * lv.ep + 2.0 * _U * float(l1_l2_norms(p)[1])
    return _Level(q, p, eq, ep, lv.m, 2 * lv.step), rho


def _combine(a: _Level, b: _Level, keep: int) -> _Level:
    """Laws of the sum of two independent partial sums (same spacing).

    The marked coordinate is in the first part with probability ``m_a / m``:
    ``p = (m_a/m) p_a * q_b + (m_b/m) q_a * p_b`` (one convolution for a square).
    """
    q, eq = _conv(a.q, a.eq, b.q, b.eq, keep)
    m = a.m + b.m
    if a is b:
        p, ep = _conv(a.p, a.ep, b.q, b.eq, keep)
    else:
        p1, e1 = _conv(a.p, a.ep, b.q, b.eq, keep)
        p2, e2 = _conv(a.q, a.eq, b.p, b.ep, keep)
        n = max(p1.size, p2.size)
        p = np.zeros(n)
        p[: p1.size] += (a.m / m) * p1
        p[: p2.size] += (b.m / m) * p2
        ep = (a.m / m) * e1 + (b.m / m) * e2 + 4.0 * _U * float(l1_l2_norms(p)[1])
    return _Level(q, p, eq, ep, m, a.step)


def _sum_levels(x: _Level, t: int, d: float, a: float, upper: bool, coarse_sd: float) -> tuple[_Level, float]:
    """The ``t``-fold sum by repeated squaring, each level on its own window and spacing.

    A level of ``m`` coordinates is cut to ``[0, window(a, m, t)]`` (what is cut
    is accounted for by the caller through the totals) and re-gridded to twice
    its spacing while that spacing stays below ``coarse_sd`` standard
    deviations of the partial sum (evolving discretisation: each re-grid adds
    at most ``(2 step d)^2 / 4`` to the variance of a partial sum, a fixed
    small fraction of it).  Returns the level and the merges' accumulated
    relative residual.
    """
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    rho = 0.0

    def fit(lv: _Level) -> _Level:
        nonlocal rho
        while 2 * lv.step * d <= coarse_sd * sd1 * math.sqrt(lv.m) and lv.q.size > 64:
            lv, r = _coarsen(lv, upper)
            rho = (1 + rho) * (1 + r) - 1
        return lv

    def to_step(lv: _Level, step: int) -> _Level:
        nonlocal rho
        while lv.step < step:
            lv, r = _coarsen(lv, upper)
            rho = (1 + rho) * (1 + r) - 1
        return lv

    def keep(m: int, step: int) -> int:
        return int(window(a, m, t) / (step * d)) + 2

    result = None
    cur = x
    k = t
    while True:
        if k & 1:
            if result is None:
                result = cur
            else:
                r = to_step(result, cur.step)
                c = to_step(cur, r.step)
                result = fit(_combine(r, c, keep(r.m + c.m, c.step)))
        k >>= 1
        if not k:
            assert result is not None  # (t >= 1: the lowest set bit set it)
            return result, rho
        cur = fit(_combine(cur, cur, keep(2 * cur.m, cur.step)))


#: re-grid a level while its spacing stays below this fraction of the first
#: grid's spacing in standard deviations (of the partial sum, of one coordinate)
_COARSE_RATIO = 0.5
#: most cells of the first grid
MAX_CELLS = 1 << 22


@functools.lru_cache(maxsize=16)
def sum_laws(sigma: float, t: int, spacing: float) -> tuple[SumLaw, SumLaw, dict]:
    """Upper (spread) and lower (merged) laws of ``S`` for noise multiplier ``sigma``.

    ``spacing``: the first grid's spacing in standard deviations of one
    coordinate (raised if the first window would need more than ``MAX_CELLS``
    cells; ``info["spacing_sd"]`` says what was used).  Returns ``(upper,
    lower, info)``.
    """
    from pld.kernels.allocation import merged_law, spread_law

    a = 1.0 / sigma
    m = -0.5 * a * a
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    w1 = window(a, 1, t)
    d = max(spacing * sd1, w1 / MAX_CELLS)
    n = int(math.ceil(w1 / d))
    g = np.arange(n + 1) * d
    xs = spread_law(m, a, d, n)
    xm, rho0, top, e_xm = merged_law(m, a, d, n, _RHO_CAP)
    up, _ = _sum_levels(_Level(xs, g * xs, 0.0, 2 * _U * float(l1_l2_norms(g * xs)[1]), 1, 1), t, d, a, True,
                        _COARSE_RATIO * spacing)
    # the merged cells' means are g (1 +- rho0): the marked law at the grid
    # values times (1 - rho0) is below the true one
    e0 = e_xm + 2.0 * _U * float(l1_l2_norms(xm)[1])
    lo, rho = _sum_levels(_Level(xm, (1.0 - rho0) * g * xm, e0, 2.0 * e0 * float(g[-1]), 1, 1), t, d, a,
                          False, _COARSE_RATIO * spacing)
    rho = (1.0 + rho) * (1.0 + rho0) - 1.0
    # The upper laws are t-fold sums of a per-coordinate measure of total mass
    # M >= 1 and marked mass (mean) m >= 1 (the exact spread plus rounding
    # slack, plus the tail beyond the first window, which counts as cut);
    # spreads and convolutions keep totals, so the parts cut off have
    # Q-mass M^t - (Q inside) and P-mass m M^(t-1) - (P inside).  Each
    # computed entry is within the l2 bound of that measure's: the sums
    # inside are off by at most sqrt(n) e, once for the sums and once for the
    # entries themselves.
    # (plus each coordinate's tail beyond the first window, Y > n d, which the
    # spread leaves out: its Q-mass 1 - F and P-mass 1 - G, bounded above)
    z_top = (math.log(n * d) - m) / a
    tot = math.fsum(xs.tolist()) + float(ndtr(-z_top)) * (1 + 1e-12) + 1e-300
    mean = math.fsum((g * xs).tolist()) + float(ndtr(a - z_top)) * (1 + 1e-12) + 1e-300
    root_n = math.sqrt(up.q.size)
    tot_t1 = math.exp((t - 1) * math.log1p(tot - 1.0))
    inf_add = min(1.0, max(0.0, tot_t1 * tot - math.fsum(up.q.tolist())) + 2.0 * root_n * up.eq + 8 * _U)
    inf_remove = min(1.0, max(0.0, tot_t1 * mean - math.fsum(up.p.tolist())) + 2.0 * root_n * up.ep + 8 * _U)
    upper = SumLaw(up.step * d, t, np.maximum(up.p, 0.0), np.maximum(up.q, 0.0), 1.0, 1.0,
                   inf_remove * (1 + 1e-9), inf_add * (1 + 1e-9))
    lower = SumLaw(lo.step * d, t, np.maximum(lo.p - lo.ep, 0.0), np.maximum(lo.q - lo.eq, 0.0),
                   1.0 - rho, 1.0 + rho, 0.0, 0.0)
    info = {"spacing": d, "spacing_sd": d / sd1, "first_cells": n, "first_window": w1,
            "final_spacing_upper": upper.d, "final_cells_upper": int(up.q.size),
            "final_spacing_lower": lower.d, "final_cells_lower": int(lo.q.size),
            "rho": rho, "lower_mass": float(np.sum(lower.q)),
            "roundoff_upper": max(up.ep, up.eq), "roundoff_lower": max(lo.ep, lo.eq),
            "inf_mass_upper_remove": upper.inf_remove, "inf_mass_upper_add": upper.inf_add}
    return upper, lower, info


def atoms(law: SumLaw, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loss, log P, log Q)`` of one direction's discrete pair, ``+inf`` atom included."""
    k = np.arange(law.q.size)
    with np.errstate(divide="ignore"):
        if direction == "remove":
            lam = np.log(k * law.d / law.t) + math.log(law.scale_remove)
            sel = (law.p > 0) & (k > 0)
            loss, lp = lam[sel], np.log(law.p[sel])
            lq = lp - loss
            inf = law.inf_remove
        else:
            lam = np.log(k * law.d / law.t) + math.log(law.scale_add)
            sel = (law.q > 0) & (k > 0)
            loss, lp = -lam[sel], np.log(law.q[sel])
            lq = lp + lam[sel]
            # Lambda = 0 (every Y at the grid's first point) is a loss of +inf when
            # added (on the lower side the merged law has no mass there)
            inf = law.inf_add + float(law.q[0]) * (1 + 1e-12)
    if inf > 0.0:
        loss = np.append(loss, np.inf)
        lp = np.append(lp, math.log(inf))
        lq = np.append(lq, -np.inf)
    return loss, lp, lq
