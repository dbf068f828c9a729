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

Both sums are ``t``-fold convolutions on the linear grid ``[0, W]`` (FFT,
repeated squaring).  Truncation is exact bookkeeping: the terms are
non-negative, so ``S <= W`` forces every partial sum ``<= W``, and the computed
window is the exact law of ``S`` on ``{S <= W}``.  The event ``{S^s > W}`` is
made fully distinguishing in the upper pair (its P-mass ``1 - E[S^s/t; S^s <= W]``
to loss ``+inf`` in the remove direction, its Q-mass ``1 - Q(S^s <= W)`` in the
add direction): a union of a sub-pair with a fully revealing one dominates.
The lower pair drops it.  FFT round-off is tracked as an l2 bound ``E`` on the
error of each entry (Young's inequality per convolution); the upper law adds
``sqrt(n) E`` (an l1 bound) to the mass at ``+inf``, the lower law subtracts
``E`` from every entry before clipping.

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
from scipy.special import ndtri

from pld import _fft
from pld.kernels import l1_l2_norms

#: relative residual allowed for a merged cell's conditional mean
_RHO_CAP = 1e-9
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


def window(a: float, t: int) -> float:
    """Right end ``W`` of the window: the bulk of ``S`` and the tail of one large ``Y``."""
    z = float(-ndtri(_TAIL))
    z_t = float(-ndtri(_TAIL / t))
    var = math.expm1(min(a * a, 700.0))
    bulk = t + z * math.sqrt(t * var)
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


def _power(x: np.ndarray, ex: float, t: int) -> tuple[np.ndarray, float]:
    """``x^{*t}`` truncated to ``len(x)`` entries, by repeated squaring (``t >= 0``)."""
    keep = x.size
    result, er = np.ones(1), 0.0
    cur, ec = x, ex
    k = t
    while k:
        if k & 1:
            result, er = (cur, ec) if result.size == 1 else _conv(result, er, cur, ec, keep)
        k >>= 1
        if k:
            cur, ec = _conv(cur, ec, cur, ec, keep)
    return result, er


def _p_and_q(x: np.ndarray, ex: float, g: np.ndarray, t: int) -> tuple[np.ndarray, float, np.ndarray, float]:
    """Q-law ``x^{*t}`` and P-law ``(g x) * x^{*(t-1)}`` of the sum, with l2 error bounds.

    The P-law of the sum is ``E[Y_1; S = v] = (v/t) Q(S = v)`` (symmetry), computed
    as its own convolution so that its round-off is relative to its own norm,
    not multiplied by ``v/t`` (which reaches ``W/t`` at the window's end).
    """
    a, ea = _power(x, ex, t - 1)
    q, eq = _conv(a, ea, x, ex, x.size)
    gx = g * x
    p, ep = _conv(a, ea, gx, ex * float(g[-1]) + float(l1_l2_norms(gx)[1]) * 2.0 ** -52, x.size)
    return p, ep, q, eq


@functools.lru_cache(maxsize=16)
def sum_laws(sigma: float, t: int, points: int) -> tuple[SumLaw, SumLaw, dict]:
    """Upper (spread) and lower (merged) laws of ``S`` for noise multiplier ``sigma``.

    ``points`` is the number of grid cells on the window; returns
    ``(upper, lower, info)`` with ``info`` the grid, window and residuals.
    """
    from pld.kernels.allocation import merged_law, spread_law

    a = 1.0 / sigma
    m = -0.5 * a * a
    W = window(a, t)
    d = W / points
    n = points
    g = np.arange(n + 1) * d
    xs = spread_law(m, a, d, n)
    xm, rho, top = merged_law(m, a, d, n, _RHO_CAP)
    p_up, ep_up, q_up, eq_up = _p_and_q(xs, 0.0, g, t)
    # the merged masses are differences of Phi with rounding bounded in the
    # kernel's residual; their own rounding is a few ulps of each entry
    p_lo, ep_lo, q_lo, eq_lo = _p_and_q(xm, float(l1_l2_norms(xm)[1]) * 8.0 * 2.0 ** -53, g, t)
    # The upper laws are t-fold sums of a per-coordinate measure of total
    # mass M >= 1 and mean m >= 1 (the exact spread plus rounding slack), so
    # their parts outside the window have Q-mass M^t - (Q inside) and P-mass
    # m M^(t-1) - (P inside).  Each computed entry is within the l2 bound of
    # that measure's: the sums inside are off by at most sqrt(n) e, once for
    # the sums and once for the entries themselves.
    tot = math.fsum(xs.tolist())
    mean = math.fsum((xs * g).tolist())
    root_n = math.sqrt(n + 1)
    tot_t1 = math.exp((t - 1) * math.log1p(tot - 1.0))
    inf_add = min(1.0, max(0.0, tot_t1 * tot - math.fsum(q_up.tolist())) + 2.0 * root_n * eq_up)
    inf_remove = min(1.0, max(0.0, tot_t1 * mean - math.fsum(p_up.tolist())) + 2.0 * root_n * ep_up)
    upper = SumLaw(d, t, np.maximum(p_up, 0.0), np.maximum(q_up, 0.0), 1.0, 1.0,
                   inf_remove * (1 + 1e-9), inf_add * (1 + 1e-9))
    lower = SumLaw(d, t, (1.0 - rho) * np.maximum(p_lo - ep_lo, 0.0), np.maximum(q_lo - eq_lo, 0.0),
                   1.0 - rho, 1.0 + rho, 0.0, 0.0)
    info = {"lower_mass": float(np.sum(lower.q)), "window": W, "spacing": d, "points": n, "rho": rho, "merge_top": top,
            "roundoff_upper": max(ep_up, eq_up), "roundoff_lower": max(ep_lo, eq_lo),
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
