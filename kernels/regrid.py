"""Re-gridding kernels: both sides' maps onto a doubled spacing.

One pass instead of the dozen array temporaries of the numpy formulation,
which stop fitting in the cache on large levels.  The maps are the ones
documented in :meth:`pld.grid.GridPLD.coarsen`.  The fine vector is read as
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

    Coarse point ``K`` keeps fine point ``2K``, half of the odd point above it
    and the fraction ``f_K`` of half of the odd point below that keeps its
    merged loss at or above ``K`` for every vector within ``err0`` of ``p``;
    the rest of that half goes to ``K - 1``.

    Returns
    -------
    out : float64[M + 1]
        The merged vector.
    norm_m : float
        Gershgorin bound on the 2-norm of the linear map applied.
    l2 : float
        2-norm of ``out`` (for the rounding of this pass).
    """
    m = _coarse_size(p, front)
    out = np.empty(m)
    up = math.exp(lam * h)
    dn = math.exp(-lam * h)
    c = math.exp(-2.0 * lam * h - h)
    # One pass: the share of K's lower odd point that goes to K - 1 and the
    # norm and l2 terms of K - 1 need f_K, so they lag one point behind (the
    # same operations in the same order as three passes over a stored f,
    # without that transform-sized temporary)
    worst = 0.0
    a_prev = 0.0
    s2 = 0.0
    f_prev = 0.0
    for k in range(m):
        pa = _fine(p, front, 2 * k + 1) if k < m - 1 else 0.0
        pb = _fine(p, front, 2 * k - 1) if k >= 1 else 0.0
        low_a = max(pa - err0, 0.0)
        high_b = max(pb, 0.0) + err0
        fk = min(1.0, low_a / high_b * c) if high_b > 0.0 else 1.0
        fk *= 1.0 - 1e-12  # rounding of the ratio, on the safe side
        out[k] = _fine(p, front, 2 * k) + 0.5 * pa * dn + fk * 0.5 * pb * up
        if k >= 1:
            out[k - 1] += (1.0 - fk) * 0.5 * pb * dn
            a = 0.5 * dn + (1.0 - fk) * 0.5 * dn
            b = f_prev * 0.5 * up
            v = 1.0 + a * a + b * b + a * (fk * 0.5 * up) + a_prev * b
            if v > worst:
                worst = v
            a_prev = a
            s2 += out[k - 1] * out[k - 1]
        f_prev = fk
    a = 0.5 * dn + (1.0 - 1.0) * 0.5 * dn
    b = f_prev * 0.5 * up
    v = 1.0 + a * a + b * b + a * 0.0 + a_prev * b
    if v > worst:
        worst = v
    s2 += out[m - 1] * out[m - 1]
    return out, math.sqrt(worst), math.sqrt(s2)
