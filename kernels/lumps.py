"""Lumped round-off of random allocation's upper runs (served through ``pld.kernels``).

An entry of a run's sum whose round-off bound is a large share of its value keeps its
estimate, and the round-off of a block of such entries is carried as lumps.  The block's
entries (values ``v`` increasing, untilting weights ``w e^top``, ``log w = lw - top``) carry
errors ``e_k`` with ``||e||_2 <= eq.l2``, so by Cauchy-Schwarz any subset ``B`` of them carries
at most ``eq.l2 ||w_B||_2 e^top``, and also ``eq.inf ||w_B||_1 e^top`` and ``eq.l1 max w_B e^top``
(Hoelder): the smallest of the three is the bound.  The remove direction gets one lump of the
whole block.  For the add direction a lower tilt's weights can grow by thousands of nats over
one block: one lump at the block's smallest value would put a bound carried by its top entries
where they are not (at delta ~ 1e-12 that alone can decide epsilon).  The block is therefore
cut into parts where the weight falls by ``lump_nats``, and each part gets, at its smallest
value, the increment of the bound over the parts up to it: for every ``x`` the lumps at or
below ``x`` carry at least the bound of the entries there (the true error measure lies
stochastically above them), and the total is the single lump's.  (The remove direction's loss
grows with the value, where the weights of a lower tilt are largest anyway; splitting there
moved its tail bound's cut and never paid.)  :func:`lump_blocks` does every block of one run in
one call.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, I64, called_with, f64


@njit(cache=True, nogil=True, inline="always")
def _min_nan(a, b):
    """``np.minimum(a, b)``: NaN if either is."""
    if a != a or b != b:
        return math.nan
    return a if a < b else b


@njit(cache=True, nogil=True, inline="always")
def _level(lw_rel, lump_nats, lump_depth):
    """``np.minimum(np.floor(-lw_rel / lump_nats), lump_depth)`` (NaN stays NaN: a part of its own)."""
    z = np.floor(-lw_rel / lump_nats) if lw_rel == lw_rel else math.nan
    return _min_nan(z, lump_depth)


@called_with(F64, F64, F64, F64, I64, F64, F64, f64, f64)
@njit(cache=True, nogil=True)
def lump_blocks(v, lw, x, y, bounds, eq, ep, lump_nats, lump_depth):
    """Upper values and lumps of a run's noisy entries, block by block.

    Parameters
    ----------
    v, lw, x, y : float64[n]
        Per noisy entry: its value ``S/m``, the log of its untilting weight, and its Q- and
        P-estimates from the run.
    bounds : int64[b + 1]
        Block ``i`` is entries ``bounds[i] .. bounds[i + 1] - 1`` (empty blocks are skipped).
    eq, ep : float64[3]
        ``(l1, l2, inf)`` norm bounds of the run's Q- and P-round-off.
    lump_nats, lump_depth : float
        A block's add-direction lumps are cut where its weight falls by ``lump_nats``, at
        most ``lump_depth`` times.

    Returns
    -------
    q_hi, p_hi : float64[n]
        ``max(x, 0) w e^top (1 + 1e-12)`` and the same of ``y`` (``w = e^{lw - top}``,
        ``top`` the block's largest ``lw``).
    remove : float64[r, 4]
        One lump per non-empty block: ``(lowest value, highest value, Q-bound, P-bound)``.
    add : float64[s, 4]
        The add direction's lumps, block by block: each part of equal weight level
        ``min(floor(-(lw - top) / lump_nats), lump_depth)`` at its lowest and highest
        value, with the increment of the bound over the parts before it (the remove
        lump itself where a block is one part).

    Notes
    -----
    The bound on a set of entries is the smallest of ``l2 ||w||_2``, ``inf ||w||_1`` and
    ``l1 max w`` (Cauchy-Schwarz and Hoelder), times ``e^top (1 + 1e-12)`` and ``1 + 1e-9``
    (the margin covers the sums' round-off: sequential sums of up to ``n`` terms err by at
    most ``n u`` relative).
    """
    n = v.shape[0]
    nb = bounds.shape[0] - 1
    q_hi = np.empty(n)
    p_hi = np.empty(n)
    remove = np.empty((nb, 4))
    add = np.empty((n + nb, 4))
    w = np.empty(n)
    n_rm = 0
    n_add = 0
    for b in range(nb):
        a0 = bounds[b]
        a1 = bounds[b + 1]
        if a1 <= a0:
            continue
        top = lw[a0]
        for i in range(a0 + 1, a1):
            if lw[i] > top:
                top = lw[i]
        scale = math.exp(top) * (1.0 + 1e-12)
        for i in range(a0, a1):
            w[i] = math.exp(lw[i] - top)
            q_hi[i] = max(x[i], 0.0) * w[i] * scale
            p_hi[i] = max(y[i], 0.0) * w[i] * scale
        # parts of equal level: running sums of w^2 and w, running largest w
        s2 = 0.0
        s1 = 0.0
        wmax = 0.0
        bq_prev = 0.0
        bp_prev = 0.0
        lo = v[a0]
        hi = v[a0]
        i = a0
        while i < a1:
            level = _level(lw[i] - top, lump_nats, lump_depth)
            p2 = w[i] * w[i]
            p1 = w[i]
            pmax = w[i]
            vlo = v[i]
            vhi = v[i]
            j = i + 1
            while j < a1 and _level(lw[j] - top, lump_nats, lump_depth) == level:
                p2 += w[j] * w[j]
                p1 += w[j]
                if w[j] > pmax:
                    pmax = w[j]
                if v[j] < vlo:
                    vlo = v[j]
                if v[j] > vhi:
                    vhi = v[j]
                j += 1
            s2 += p2
            s1 += p1
            if pmax > wmax:
                wmax = pmax
            r2 = math.sqrt(s2)
            bq = _min_nan(_min_nan(eq[1] * r2, eq[2] * s1), eq[0] * wmax) * scale * (1.0 + 1e-9)
            bp = _min_nan(_min_nan(ep[1] * r2, ep[2] * s1), ep[0] * wmax) * scale * (1.0 + 1e-9)
            add[n_add, 0] = vlo
            add[n_add, 1] = vhi
            add[n_add, 2] = bq - bq_prev
            add[n_add, 3] = bp - bp_prev
            n_add += 1
            bq_prev = bq
            bp_prev = bp
            if vlo < lo:
                lo = vlo
            if vhi > hi:
                hi = vhi
            i = j
        remove[n_rm, 0] = lo
        remove[n_rm, 1] = hi
        remove[n_rm, 2] = bq_prev
        remove[n_rm, 3] = bp_prev
        n_rm += 1
    return q_hi, p_hi, remove[:n_rm].copy(), add[:n_add].copy()
