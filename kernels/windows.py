"""Truncation-window exponents from moment bounds (sizing only).

One pass over the Chernoff parameters instead of a dozen numpy reductions
over 45-entry arrays: a composed step asks for a window per level, ~15 per
materialisation, and at ~60 us of interpreter overhead each they were a
millisecond of every query (see :func:`pld.engine.windows.window`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._signatures import F64, called_with, f64


@njit(cache=True, nogil=True, inline="always")
def _nan_min(r, v):
    # numpy's fmin: a NaN loses to a number
    if v != v:
        return r
    if r != r or v < r:
        return v
    return r


@njit(cache=True, nogil=True, inline="always")
def _nan_max(r, v):
    if v != v:
        return r
    if r != r or v > r:
        return v
    return r


@called_with(F64, f64, f64, F64, F64, F64, F64, f64, f64, f64)
@njit(cache=True, nogil=True)
def window_exponents(th, k, psi_l, psi_up, psi_dn, psi_pos, psi_neg, log_eta, log_eta_up, lam):
    """``(up, lo)``: the window's ends before clamping to the support.

    With ``Psi = k psi`` (one component composed ``k`` times; the caller sums
    several components and passes ``k = 1``), ``psi_up``/``psi_dn`` at
    ``lam +- th`` and ``psi_pos``/``psi_neg`` at ``+-th``:

    * ``up = min_th (Psi(lam + th) - Psi(lam) - log_eta) / th``, lowered to
      ``min_th (Psi(th) - log_eta_up) / th`` (untilted mass above);
    * ``lo = max_th (log_eta - Psi(lam - th) + Psi(lam)) / th``, lowered (for
      ``lam > 0``) to ``max_th (log_eta + Psi(lam) - Psi(-th)) / (th + lam)``.

    NaN terms (``inf - inf``) are skipped as ``numpy.fmin``/``fmax`` skip them,
    an all-NaN reduction is NaN, and the two reductions of each end combine as
    Python's ``min`` would: exactly what the numpy form computed.
    """
    pl = k * psi_l
    up = np.nan
    lo = np.nan
    up2 = np.nan
    lo2 = np.nan
    for i in range(th.shape[0]):
        t = th[i]
        up = _nan_min(up, (k * psi_up[i] - pl - log_eta) / t)
        lo = _nan_max(lo, (log_eta - k * psi_dn[i] + pl) / t)
        up2 = _nan_min(up2, (k * psi_pos[i] - log_eta_up) / t)
        if lam > 0:
            lo2 = _nan_max(lo2, (log_eta + pl - k * psi_neg[i]) / (t + lam))
    if up2 < up:
        up = up2
    if lam > 0 and lo2 < lo:
        lo = lo2
    return up, lo
