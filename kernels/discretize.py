"""Kernels that place a privacy-loss description onto a uniform loss grid.

A direction of a mechanism is described by *pieces*, sorted by privacy loss,
each with a P-mass and a Q-mass (in log space): cells of its continuous part
and atoms.

* ``pessimistic_spread`` builds a *dominating* grid PLD from cells cut at the
  grid points: every piece is split between the two end points of its cell
  so that both its P-mass and its Q-mass are preserved ("connect the dots",
  Doroshenko et al., PETS 2022).  Splitting a point mass into two points whose
  likelihood ratios bracket the original one is a spread, so the new pair
  dominates the old one and the bias is second order in the grid spacing.
* ``optimistic_merge_centred`` builds a *dominated* grid PLD from cells
  centred on the grid points, by post-processing: each cell is merged with
  fractions of its neighbours (a randomised post-processing) so that each
  bucket's merged loss ``log P(B)/Q(B)`` lands exactly on (never below) its
  grid point.  Merging outputs is post-processing, hence the resulting pair
  is dominated by the true one; losses that are not hit exactly are rounded
  *down*.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, I64, called_with, f64, i64
from .cells import _logaddexp

# Relative slack (in units of the cell's P-mass) shifted to the upper end point
# on the pessimistic side.  It absorbs floating-point error in the log-CDF
# differences that produce the piece masses (about 1e-13 relative) so that the
# split never puts too little mass on the upper neighbour.
_PESSIMISTIC_SLACK = 1e-11


@called_with(F64, F64, I64, I64, f64, i64)
@njit(cache=True, nogil=True)
def pessimistic_spread(log_p, log_q, index, points, h, k0):
    """Spread pieces onto the points ``l_i = (k0 + points_i) h``, dominating side.

    Parameters
    ----------
    log_p, log_q : float64[m]
        log P-mass and log Q-mass of each piece.
    index : int64[m]
        Cell of each piece: the piece's losses lie in ``[l_index, l_index+1]``.
        ``index < 0`` sends the piece to ``l_0`` (mass below the window is moved
        *up*, which only increases delta); ``index >= n - 1`` sends it to
        ``+inf``.  An atom exactly on ``l_{n-1}`` belongs to cell ``n - 2``.
    points : int64[n]
        Increasing grid offsets of the points (``arange(n)`` for a uniform
        grid; wider cells where the law has negligible mass, see
        :func:`cell_points`).
    h : float
        Grid spacing.
    k0 : int
        Grid index of offset 0.

    Returns
    -------
    log_mass : float64[n]
        log of the P-mass at each point.
    log_inf : float
        log of the P-mass moved to ``+inf``.

    Notes
    -----
    With ``P`` and ``Q`` the masses of a piece in cell ``[l_i, l_{i+1}]`` of
    width ``w``, the upper share is ``b = (P - e^{l_i} Q) / (1 - e^{-w})`` and the
    lower share ``a = P - b``; written as ``b = P (1 - e^{l_i + log Q - log P}) /
    (1 - e^{-w})`` it has no cancellation beyond that of the piece's own loss.
    The width is formed as ``(points_{i+1} - points_i) h``, one rounding.
    """
    n = points.shape[0]
    out = np.full(n, -np.inf)
    log_inf = -np.inf
    last_w = -1
    denom = 1.0
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
        li = (k0 + points[i]) * h
        # fraction of P-mass that goes up: (1 - e^{l_i - m}) / (1 - e^{-w}), m = merged loss
        x = li + log_q[j] - lp
        if x >= 0.0:
            frac_up = 0.0
        else:
            wd = points[i + 1] - points[i]
            if wd != last_w:  # (one expm1 per change of cell width)
                last_w = wd
                denom = -math.expm1(-wd * h)
            frac_up = -math.expm1(x) / denom
        frac_up = min(1.0, frac_up + _PESSIMISTIC_SLACK)
        if frac_up < 1.0:
            out[i] = _logaddexp(out[i], lp + math.log1p(-frac_up))
        out[i + 1] = _logaddexp(out[i + 1], lp + math.log(frac_up))
    return out, log_inf
