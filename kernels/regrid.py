"""Re-gridding kernels: both sides' maps onto a doubled spacing.

One pass instead of the dozen array temporaries of the numpy formulation,
which stop fitting in the cache on large levels.  The maps are the ones
documented in :meth:`pld.engine.grid.GridPLD.coarsen`.  The fine vector is read as
``front`` zeros, then ``p``, then zeros up to an odd length, so that its first
index is even, without building the padded copy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, called_with, f64, i64


@njit(cache=True, nogil=True, inline="always")
def _fine(p, front, i):
    """Entry ``i`` of the padded fine vector (zero outside ``p``)."""
    # An explicit ``if``: numba compiles the chained ``0 <= j < n`` of a
    # conditional expression to a loop that does not vectorise
    j = i - front
    if j >= 0 and j < p.shape[0]:
        return p[j]
    return 0.0


@njit(cache=True, nogil=True, inline="always")
def _coarse_size(p, front):
    """``M + 1`` for the padded fine vector of odd length ``2M + 1``."""
    n = p.shape[0] + front
    return (n + 1) // 2 if n % 2 else n // 2 + 1


@called_with(F64, i64, f64, f64)
@njit(cache=True, nogil=True)
def coarsen_dominating(p, front, wa, wb):
    """Spread each odd point of the padded ``p`` onto its even neighbours, ``wa``
    of it down and ``wb`` up: ``out_K = (q_2K + wb q_2K-1) + wa q_2K+1``, in
    the order of the numpy form it replaced (so the same rounding).

    Returns ``(out, l2)``, ``l2`` the 2-norm of ``out`` summed in order.
    """
    m = _coarse_size(p, front)
    out = np.empty(m)
    s2 = 0.0
    for k in range(m):
        v = _fine(p, front, 2 * k)
        if k >= 1:
            v += wb * _fine(p, front, 2 * k - 1)
        if k < m - 1:
            v += wa * _fine(p, front, 2 * k + 1)
        out[k] = v
        s2 += v * v
    return out, math.sqrt(s2)


@called_with(F64, i64, f64, f64, f64)
@njit(cache=True, nogil=True)
def coarsen_dominated(p, front, err0, lam, h):
    """Merge a tilted vector (``p`` padded: odd length ``2M + 1``, first index
    even) onto the doubled grid.

    Coarse point ``K`` keeps fine point ``2K``, the share ``1 - t_a`` of the
    odd point ``a = 2K + 1`` above it and the share ``t_b`` of the odd point
    ``b = 2K - 1`` below it (the rest of ``b`` is ``K - 1``'s share from
    above).  Going down from the top, ``t_b`` is the largest share, up to the
    balanced one, that keeps the bucket's merged loss at or above ``K`` for
    every vector within ``err0`` of ``p``:
    ``t_b <= (1 - t_a) (p_a - err0)_+ / (p_b + err0) e^{-2 lam h - h}``.  The
    balanced share ``r / (1 + r)``, ``r = (p_a / p_b) e^{-2 lam h - h}``, meets
    that with equality on a law of constant log-slope, so the buckets land on
    their grid points and a merge loses only its Jensen gap, as the
    dominating side's spread does.

    Returns
    -------
    out : float64[M + 1]
        The merged vector.
    norm_m : float
        Gershgorin bound on the 2-norm of the linear map applied (rows of
        ``M M^T``: ``1 + a_K^2 + b_K^2 + a_K b_K+1 + a_K-1 b_K`` with ``a_K =
        (1 - t_a) e^{-lam h}``, ``b_K = t_b e^{lam h}``).
    l2 : float
        2-norm of ``out`` (for the rounding of this pass).
    """
    m = _coarse_size(p, front)
    out = np.empty(m)
    up = math.exp(lam * h)
    dn = math.exp(-lam * h)
    c = math.exp(-2.0 * lam * h - h)
    worst = 0.0
    s2 = 0.0
    t_a = 0.0  # up share of the odd point above K (none above the top)
    b_above = 0.0  # b_K+1
    # One pass from the top: K's share of b needs only t_a, decided at K + 1
    for k in range(m - 1, -1, -1):
        pa = _fine(p, front, 2 * k + 1)
        a_k = (1.0 - t_a) * dn if k < m - 1 else 0.0
        if k >= 1:
            pb = _fine(p, front, 2 * k - 1)
            t_b = 0.5
            if pa > 0.0 and pb > 0.0:
                r = pa / pb * c
                t_b = r / (1.0 + r)
            high_b = max(pb, 0.0) + err0
            if high_b > 0.0:
                # (the ratio's rounding, on the safe side)
                t_b = min(t_b, (1.0 - t_a) * (max(pa - err0, 0.0) / high_b * c) * (1.0 - 1e-12))
            b_k = t_b * up
            a_below = (1.0 - t_b) * dn
        else:
            pb = 0.0
            t_b = 0.0
            b_k = 0.0
            a_below = 0.0
        v = _fine(p, front, 2 * k) + a_k * pa + b_k * pb
        out[k] = v
        s2 += v * v
        row = 1.0 + a_k * a_k + b_k * b_k + a_k * b_above + a_below * b_k
        if row > worst:
            worst = row
        b_above = b_k
        t_a = t_b
    return out, math.sqrt(worst), math.sqrt(s2)
