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


@njit(cache=True, nogil=True, inline="always")
def _share_up(li, lq, lp, wd, h, last_w, denom):
    """The share of a piece's P-mass (log ``lp``, log Q-mass ``lq``) that goes up from its
    cell ``[l_i, l_i + wd h]`` (:func:`pessimistic_spread`'s notes: ``(1 - e^{l_i - m}) /
    (1 - e^{-w})``, ``m`` the piece's loss), slack included; ``(share, last_w, denom)`` with the
    denominator of the last width kept (one expm1 per change of cell width)."""
    x = li + lq - lp
    if x >= 0.0:
        frac_up = 0.0
    else:
        if wd != last_w:
            last_w = wd
            denom = -math.expm1(-wd * h)
        frac_up = -math.expm1(x) / denom
    return min(1.0, frac_up + _PESSIMISTIC_SLACK), last_w, denom


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
        frac_up, last_w, denom = _share_up((k0 + points[i]) * h, log_q[j], lp, points[i + 1] - points[i], h,
                                           last_w, denom)
        if frac_up < 1.0:
            out[i] = _logaddexp(out[i], lp + math.log1p(-frac_up))
        out[i + 1] = _logaddexp(out[i + 1], lp + math.log(frac_up))
    return out, log_inf


@njit(cache=True, nogil=True, inline="always")
def _count_before(values, key, hint, strict):
    """Entries of the increasing ``values`` below ``key`` (``strict``: ``searchsorted(values, key,
    "left")``) or at or below it (``"right"``), searched from ``hint`` (the previous answer):
    galloping forward, so that keys in increasing order cost O(1) each, else by bisection."""
    n = values.shape[0]
    lo, hi = 0, n
    if 0 < hint <= n and (values[hint - 1] < key if strict else values[hint - 1] <= key):
        lo = hint
        step = 1
        while lo + step <= n and (values[lo + step - 1] < key if strict else values[lo + step - 1] <= key):
            lo += step
            step *= 2
        hi = min(n, lo + step)
    elif 0 < hint <= n:
        hi = hint
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < key if strict else values[mid] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def _accumulate(top, scaled, i, lp, share):
    """Add ``share e^lp`` to point ``i`` of a sum held as ``e^top[i] scaled[i]`` (the scale
    follows the largest ``lp`` seen there, so no term overflows and none is lost that a
    log-space sum would keep)."""
    if lp > top[i]:
        scaled[i] = scaled[i] * math.exp(top[i] - lp) + share
        top[i] = lp
    else:
        scaled[i] += share * math.exp(lp - top[i])


@njit(cache=True, nogil=True)
def _log_of(top, scaled):
    out = np.full(top.shape[0], -np.inf)
    for i in range(top.shape[0]):
        if scaled[i] > 0.0:
            out[i] = top[i] + math.log(scaled[i])
    return out


@called_with(F64, F64, F64, I64, f64, i64, i64)
@njit(cache=True, nogil=True)
def pessimistic_spread_atoms(loss, log_p, log_q, points, h, k0, n_fine):
    """:func:`pessimistic_spread` of atoms given by their losses: the cell of each found here.

    Parameters
    ----------
    loss, log_p, log_q : float64[m]
        Each atom's privacy loss (``+-inf`` allowed) and log P- and Q-mass.
    points : int64[n]
        Increasing offsets of the grid points ``l_i = (k0 + points_i) h`` (``points[-1] <
        n_fine``, the uniform grid's length).
    h : float
        Grid spacing.
    k0, n_fine : int
        Grid index of offset 0; points of the uniform grid the offsets index.

    Returns
    -------
    log_mass, log_inf
        As :func:`pessimistic_spread`.

    Notes
    -----
    An atom's cell is the one holding its fine cell ``floor((loss - l_0) / h)``; an atom
    within ``1e-12 max(1, |l_top|)`` of the last point belongs to the cell below it, one
    further above goes to ``+inf`` and one below ``l_0`` to ``l_0`` (mass moved up), as
    :func:`pessimistic_spread`'s callers assign cells.  Each atom is split between the ends
    of its cell as there (the same shares, slack included); the masses are summed in a
    scaled linear form (one exponential a share) rather than by ``logaddexp`` (three
    transcendental calls a share): the sums differ by rounding only.
    """
    n = points.shape[0]
    l0 = k0 * h
    top_l = (k0 + points[n - 1]) * h
    tol_top = 1e-12 * max(1.0, abs(top_l))
    top = np.full(n, -np.inf)
    scaled = np.zeros(n)
    inf_top = np.full(1, -np.inf)
    inf_scaled = np.zeros(1)
    last_w = -1
    denom = 1.0
    hint = 0
    for j in range(loss.shape[0]):
        lp = log_p[j]
        if lp == -np.inf:
            continue
        a = loss[j]
        if not (a <= top_l + tol_top):  # (above the window, or NaN: to +inf)
            _accumulate(inf_top, inf_scaled, 0, lp, 1.0)
            continue
        if a < l0:
            _accumulate(top, scaled, 0, lp, 1.0)
            continue
        kf = math.floor((a - l0) / h)
        if kf >= n_fine - 1 and abs(a - top_l) <= tol_top:
            i = n - 2
        else:
            # the cell holding fine cell kf: the last point at or below it
            hint = _count_before(points, kf, hint, False)
            i = hint - 1
        if i >= n - 1:
            _accumulate(inf_top, inf_scaled, 0, lp, 1.0)
            continue
        if i < 0:  # (a one-point grid's top atom, as pessimistic_spread places index -1: moved up)
            _accumulate(top, scaled, 0, lp, 1.0)
            continue
        frac_up, last_w, denom = _share_up((k0 + points[i]) * h, log_q[j], lp, points[i + 1] - points[i], h,
                                           last_w, denom)
        if frac_up < 1.0:
            _accumulate(top, scaled, i, lp, 1.0 - frac_up)
        _accumulate(top, scaled, i + 1, lp, frac_up)
    return _log_of(top, scaled), _log_of(inf_top, inf_scaled)[0]


@called_with(F64, F64, F64, F64)
@njit(cache=True, nogil=True)
def split_atoms_log(grid, loss, log_p, log_q):
    """log P-mass of atoms on the increasing points ``grid``, each atom on a point (within
    ``1e-9`` of the mean spacing) kept there and every other one split between the points
    around it in the connect-the-dots shares (the sizing law of
    :func:`pld.engine.first_step._spread_masses`); atoms outside ``[grid[0], grid[-1]]`` or
    without mass are left out.  Summed in the scaled linear form of
    :func:`pessimistic_spread_atoms`."""
    n = grid.shape[0]
    top = np.full(n, -np.inf)
    scaled = np.zeros(n)
    tol = 1e-9 * (grid[n - 1] - grid[0]) / max(1, n - 1)
    hint = 0
    for j in range(loss.shape[0]):
        lp = log_p[j]
        a = loss[j]
        if lp == -np.inf or not (grid[0] <= a <= grid[n - 1]):
            continue
        # the first point at or above a - tol
        hint = _count_before(grid, a - tol, hint, True)
        idx = min(hint, n - 1)
        if abs(grid[idx] - a) <= tol:
            _accumulate(top, scaled, idx, lp, 1.0)
            continue
        cell = max(idx - 1, 0)
        lo = grid[cell]
        w = grid[cell + 1] - lo
        up = -math.expm1(min(lo + log_q[j] - lp, 0.0)) / -math.expm1(-w)
        if up != up:
            up = 1.0
        up = min(max(up, 0.0), 1.0)
        if up > 0.0:
            _accumulate(top, scaled, cell + 1, lp, up)
        if up < 1.0:
            _accumulate(top, scaled, cell, lp, 1.0 - up)
    return _log_of(top, scaled)
