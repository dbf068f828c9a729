"""Cell masses and the grids they sit on: log-CDF differences with error bounds, wide tail cells."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, I64, called_with, f64, i64


@called_with(F64, F64)
@njit(cache=True, nogil=True)
def log_diff_exp(la, lb):
    """``log(e^la - e^lb)`` entrywise where ``la > lb`` (else ``-inf``), for the
    log-CDF differences behind cell masses: ``log(-expm1(d))`` for
    ``d = lb - la`` near 0, ``log1p(-e^d)`` below ``-log 2`` (each accurate
    to a few ulps; :data:`_PESSIMISTIC_SLACK` absorbs them).  One pass: the
    numpy form needs eight array temporaries."""
    n = la.shape[0]
    out = np.empty(n)
    for i in range(n):
        a = la[i]
        b = lb[i]
        if a > b:
            d = b - a
            out[i] = a + (math.log(-math.expm1(d)) if d > -0.6931 else math.log1p(-math.exp(d)))
        else:
            out[i] = -np.inf
    return out


#: absolute error of scipy's ``log_ndtr`` in units of ``u (1 + |log Phi|)``
#: (see pld.mechanisms.models.LOG_NDTR_ULPS, which must match)
_LOG_NDTR_ULPS = 16.0


@njit(cache=True, nogil=True, inline="always")
def _log_phi_error(lz: float, z: float) -> float:
    if not math.isfinite(z):
        return 0.0  # (log_ndtr is exactly 0 or -inf at an infinite edge)
    az = abs(z)
    return 2.0 ** -53 * (_LOG_NDTR_ULPS * (1.0 + abs(lz)) + 2.01 * az * (az + 1.0))


@called_with(F64, F64, F64, F64, F64)
@njit(cache=True, nogil=True)
def log_diff_exp_error(la, lb, za, zb, r):
    """Error bound of ``r = log(e^la - e^lb)`` where ``la = log_ndtr(za)``,
    ``lb = log_ndtr(zb)`` (entrywise; 0 where ``r`` is not finite).

    Each edge's error is ``log_ndtr``'s own plus the rounding of ``z`` times
    the slope ``phi / Phi <= |z| + 1``; ``r = la + log(1 - e^d)`` with ``d =
    lb - la`` magnifies them by ``1 / expm1(-d)`` (narrow cells).  One pass
    (pld.mechanisms.models.normal_interval_logmass_bounds; its numpy form checks it).
    """
    n = la.shape[0]
    out = np.empty(n)
    u = 2.0 ** -53
    for i in range(n):
        ri = r[i]
        if not math.isfinite(ri):
            out[i] = 0.0
            continue
        ea = _log_phi_error(la[i], za[i])
        eb = _log_phi_error(lb[i], zb[i])
        d = lb[i] - la[i]
        spread = 0.0
        if math.isfinite(d):
            spread = (ea + eb + u * abs(d)) / math.expm1(-d)
        out[i] = ea + spread + 4.0 * u * (1.0 + abs(ri))
    return out


@called_with(F64, F64, F64, F64, f64, f64)
@njit(cache=True, nogil=True)
def subsampled_mass_errors(lp, lq, ep, eq, log_q, log_1mq):
    """Poisson-subsampled (remove) log masses with error bounds, entrywise.

    Returns ``(mix, loss_err, mix_err)``: ``mix = log((1-q) e^lq + q e^lp)``,
    and bounds on the errors of ``mix - lq`` and of ``mix`` given errors
    ``ep, eq`` of ``lp, lq``.  With ``s = q e^lp / e^mix`` the loss moves by
    ``s (ep + eq)``; every operation's rounding is added
    (pld.mechanisms.models.poisson_subsampled_errors states the argument).
    """
    n = lp.shape[0]
    mix = np.empty(n)
    loss_err = np.empty(n)
    mix_err = np.empty(n)
    u = 2.0 ** -53
    for i in range(n):
        a = log_1mq + lq[i]
        b = log_q + lp[i]
        m = _logaddexp(a, b)
        mix[i] = m
        share = 1.0
        if m > -np.inf:
            share = min(1.0, math.exp(b - m))
        rounding = 2.0 * u * (abs(lp[i]) + abs(lq[i]) + abs(log_q) + abs(m) + 4.0)
        loss_err[i] = share * (ep[i] + eq[i]) + rounding
        mix_err[i] = (1.0 - share) * eq[i] + share * ep[i] + rounding
    return mix, loss_err, mix_err


@njit(cache=True, nogil=True)
def _logaddexp(a: float, b: float) -> float:
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@called_with(I64, I64, i64)
@njit(cache=True, nogil=True)
def cell_points(lo_off, hi_off, n):
    """Offsets of the points of a grid with wide cells in its tails.

    Parameters
    ----------
    lo_off, hi_off : int64[Z]
        Cells of width ``2^(z+1)`` are allowed wholly at or below offset
        ``lo_off[z]`` or wholly at or above ``hi_off[z]`` (nested: ``lo_off``
        decreasing, ``hi_off`` increasing in ``z``).
    n : int
        Number of grid points (offsets ``0 .. n-1``).

    Returns
    -------
    points : int64[m]
        Increasing offsets from 0 to ``n - 1``: consecutive in the middle,
        widening by powers of two towards each end.
    """
    # (counted first, then written: n may be far larger than the points, a
    # window reaching deep into a tail of wide cells, and an array of n
    # offsets would not fit in memory)
    m = _walk_points(lo_off, hi_off, n, np.empty(0, dtype=np.int64))
    out = np.empty(m, dtype=np.int64)
    _walk_points(lo_off, hi_off, n, out)
    return out


@njit(cache=True, nogil=True)
def _walk_points(lo_off, hi_off, n, out):
    """The walk of :func:`cell_points`: writes the offsets into ``out`` when it
    has room for them, and returns how many there are."""
    write = out.size > 0
    if write:
        out[0] = 0
    m = 1
    i = 0
    while i < n - 1:
        w = _allowed_width(lo_off, hi_off, i)
        while w > 1 and not _fits(lo_off, hi_off, i, w, n):
            w //= 2
        i = min(i + w, n - 1)
        if write:
            out[m] = i
        m += 1
    return m


@njit(cache=True, nogil=True, inline="always")
def _fits(lo_off, hi_off, i, w, n):
    """Whether the cell of ``w = 2^(z+1)`` grid steps from offset ``i`` lies wholly in a zone
    of its width: from at or above ``hi_off[z]``, or ending at or below ``lo_off[z]`` (where
    the middle is narrower than the cell, one from the low zone may end in the high one, and
    would span the law's bulk between them)."""
    z = 0
    while (2 << z) < w:
        z += 1
    return i >= hi_off[z] or min(i + w, n - 1) <= lo_off[z]


@njit(cache=True, nogil=True, inline="always")
def _allowed_width(lo_off, hi_off, i):
    w = 1
    for z in range(lo_off.shape[0]):
        if i <= lo_off[z] or i >= hi_off[z]:
            w = 2 << z
    return w
