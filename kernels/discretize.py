"""Kernels that place a privacy-loss description onto a uniform loss grid.

A direction of a mechanism is described by *pieces*, sorted by privacy loss:
each piece has a P-mass and a Q-mass (in log space) and lies inside one grid
cell ``[l_i, l_{i+1}]`` (continuous parts are cut at grid points beforehand;
atoms are pieces of zero width).

* ``pessimistic_spread`` builds a *dominating* grid PLD: every piece is split
  between the two end points of its cell so that both its P-mass and its
  Q-mass are preserved ("connect the dots", Doroshenko et al., PETS 2022).
  Splitting a point mass into two points whose likelihood ratios bracket the
  original one is a spread, so the new pair dominates the old one and the
  bias is second order in the grid spacing.
* ``optimistic_merge`` builds a *dominated* grid PLD by post-processing:
  consecutive pieces are merged into buckets, taking a fraction of the next
  piece (a randomised post-processing) so that each bucket's merged loss
  ``log P(B)/Q(B)`` lands exactly on a grid point (never below it).  Merging
  outputs is post-processing, hence the resulting pair is dominated by the
  true one; losses that are not hit exactly are rounded *down*.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# Relative slack (in units of the cell's P-mass) shifted to the upper end point
# on the pessimistic side.  It absorbs floating-point error in the log-CDF
# differences that produce the piece masses (about 1e-13 relative) so that the
# split never puts too little mass on the upper neighbour.
_PESSIMISTIC_SLACK = 1e-11


@njit(cache=True, nogil=True)
def _logaddexp(a: float, b: float) -> float:
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@njit(cache=True, nogil=True)
def pessimistic_spread(log_p, log_q, index, h, l0, n):
    """Spread pieces onto the grid ``l_i = l0 + i*h`` (i < n), dominating side.

    Parameters
    ----------
    log_p, log_q : float64[m]
        log P-mass and log Q-mass of each piece.
    index : int64[m]
        Cell of each piece: the piece's losses lie in ``[l_index, l_index+1]``.
        ``index < 0`` sends the piece to ``l_0`` (mass below the window is moved
        *up*, which only increases delta); ``index >= n - 1`` sends it to
        ``+inf``.  An atom exactly on ``l_{n-1}`` belongs to cell ``n - 2``.
    h, l0 : float
        Grid spacing and first grid point.
    n : int
        Number of grid points.

    Returns
    -------
    log_mass : float64[n]
        log of the P-mass at each grid point.
    log_inf : float
        log of the P-mass moved to ``+inf``.

    Notes
    -----
    With ``P`` and ``Q`` the masses of a piece in cell ``[l_i, l_i + h]``, the
    upper share is ``b = (P - e^{l_i} Q) / (1 - e^{-h})`` and the lower share
    ``a = P - b``; written as ``b = P (1 - e^{l_i + log Q - log P}) / (1 - e^{-h})``
    it has no cancellation beyond that of the piece's own loss.
    """
    out = np.full(n, -np.inf)
    log_inf = -np.inf
    denom = -math.expm1(-h)
    for j in range(log_p.shape[0]):
        lp = log_p[j]
        if lp == -np.inf:
            continue
        i = index[j]
        if i < 0:
            out[0] = _logaddexp(out[0], lp)
            continue
        if i >= n - 1:
            log_inf = _logaddexp(log_inf, lp)
            continue
        li = l0 + i * h
        # fraction of P-mass that goes up: (1 - e^{l_i - m}) / (1 - e^{-h}), m = merged loss
        x = li + log_q[j] - lp
        if x >= 0.0:
            frac_up = 0.0
        else:
            frac_up = -math.expm1(x) / denom
        frac_up = min(1.0, frac_up + _PESSIMISTIC_SLACK)
        if frac_up < 1.0:
            out[i] = _logaddexp(out[i], lp + math.log1p(-frac_up))
        out[i + 1] = _logaddexp(out[i + 1], lp + math.log(frac_up))
    return out, log_inf


@njit(cache=True, nogil=True)
def optimistic_merge(log_p, log_q, h, l0, n):
    """Merge pieces sorted by loss into buckets whose loss is a grid point.

    Parameters
    ----------
    log_p, log_q : float64[m]
        log P-mass and log Q-mass of each piece, sorted by the piece's loss
        ``log_p - log_q`` (pieces with ``log_q = -inf`` have infinite loss and
        must be left out by the caller).
    h, l0 : float
        Grid spacing and first grid point.
    n : int
        Number of grid points.

    Returns
    -------
    mass : float64[n]
        P-mass at each grid point, a dominated (optimistic) discretisation.

    Notes
    -----
    A bucket ``(P_B, Q_B)`` with merged loss ``m_B`` aims at the first grid
    point ``l_k >= m_B``.  A following piece with loss ``m > l_k`` is taken in
    with the fraction ``t = P_B expm1(l_k - m_B) / (-p expm1(l_k - m))`` that
    makes the merged loss exactly ``l_k``; the fraction is enlarged by a few
    ulps so the merged loss is never below ``l_k`` (placing it on ``l_k`` then
    only rounds down).  The rest of the piece opens the next bucket.  Mass whose
    bucket never reaches a grid point is rounded down, or dropped below ``l0``.
    """
    out = np.zeros(n)
    pb = 0.0
    qb = 0.0
    top = l0 + (n - 1) * h
    m = log_p.shape[0]
    for j in range(m):
        if log_p[j] == -np.inf:
            continue
        p = math.exp(log_p[j])
        q = math.exp(log_q[j])
        lm = log_p[j] - log_q[j]
        if p == 0.0:
            continue
        while p > 0.0:
            if pb == 0.0:
                # open a bucket with this piece
                k = math.ceil((lm - l0) / h)
                if k < 0:
                    k = 0
                if k > n - 1:
                    # above the window: round down to the top grid point
                    out[n - 1] += p
                    break
                if l0 + k * h <= lm:
                    # on (or, by rounding of ceil, just above) a grid point
                    out[k] += p
                    break
                pb = p
                qb = q
                break
            mb = math.log(pb) - math.log(qb)
            k = math.ceil((mb - l0) / h)
            if k < 0:
                k = 0
            lk = l0 + k * h
            if k > n - 1 or lk <= mb:
                # the bucket already sits on (or above) a grid point: round down
                k = min(k, n - 1)
                while k > 0 and l0 + k * h > mb:
                    k -= 1
                out[k] += pb
                pb = 0.0
                qb = 0.0
                continue
            if lm <= lk:
                pb += p
                qb += q
                break
            # fraction t of the piece that lifts the merged loss exactly to l_k;
            # enlarged slightly so that the merged loss is >= l_k
            den = -p * math.expm1(lk - lm)
            t = pb * math.expm1(lk - mb) / den if den > 0.0 else 2.0
            t = t * (1.0 + 1e-12)
            if t >= 1.0:
                pb += p
                qb += q
                break
            out[k] += pb + t * p
            pb = 0.0
            qb = 0.0
            p = p * (1.0 - t)
            q = q * (1.0 - t)
    if pb > 0.0:
        mb = math.log(pb) - math.log(qb)
        k = min(math.floor((mb - l0) / h), n - 1)
        while k >= 0 and l0 + k * h > mb:
            k -= 1
        if k >= 0:
            out[k] += pb
    return out
