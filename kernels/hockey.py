"""Suffix sums behind the hockey-stick evaluator.

For a grid PLD with tilted masses ``p_i`` (original mass
``o_i = p_i exp(s - lam l_i)``) the hockey-stick divergence for ``eps`` in
``[l_{m-1}, l_m)`` is ``sum_{i>=m} o_i (1 - e^{eps - l_i})
= exp(s - lam l_m) [SA_m - e^{eps - l_m} SB_m]`` with
``SA_m = sum_{i>=m} p_i e^{-lam (l_i - l_m)}`` and
``SB_m = sum_{i>=m} p_i e^{-(lam+1)(l_i - l_m)}``.  Scaling every suffix by its
own first grid point keeps the sums in range however large the losses are.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(cache=True, nogil=True)
def hockey_stick_suffix(p, lam, h):
    """Return ``SA`` and ``SB`` (length ``n + 1``; index ``n`` is the empty sum)."""
    n = p.shape[0]
    sa = np.zeros(n + 1)
    sb = np.zeros(n + 1)
    da = math.exp(-lam * h)
    db = math.exp(-(lam + 1.0) * h)
    for m in range(n - 1, -1, -1):
        sa[m] = p[m] + da * sa[m + 1]
        sb[m] = p[m] + db * sb[m + 1]
    return sa, sb


@njit(cache=True, nogil=True, parallel=True)
def log_mgf_grid(log_mass, l0, h, thetas):
    """``log sum_i exp(log_mass_i + theta (l0 + i h))`` for every ``theta``.

    One pass per ``theta`` with a running maximum (one ``exp`` per entry), so it
    is exact up to rounding and never overflows.
    """
    n = log_mass.shape[0]
    out = np.empty(thetas.shape[0])
    for k in prange(thetas.shape[0]):
        th = thetas[k]
        m = -np.inf
        s = 0.0
        for i in range(n):
            lm = log_mass[i]
            if lm == -np.inf:
                continue
            x = lm + th * (l0 + i * h)
            if x > m:
                s = s * math.exp(m - x) + 1.0 if m > -np.inf else 1.0
                m = x
            else:
                s += math.exp(x - m)
        out[k] = m + math.log(s) if m > -np.inf else -np.inf
    return out


@njit(cache=True, nogil=True)
def l1_l2_norms(a):
    """``(sum |a_i|, sqrt(sum a_i^2))`` in one pass (no BLAS threads)."""
    s1 = 0.0
    s2 = 0.0
    for i in range(a.shape[0]):
        x = a[i]
        s1 += abs(x)
        s2 += x * x
    return s1, math.sqrt(s2)
