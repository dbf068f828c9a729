"""Chernoff tail bounds from a table of log-MGF bounds: one pass each.

Given upper bounds ``b_j >= log E[e^{theta_j L}]`` on a table of parameters,
``P(L >= t) <= min_{theta_j > 0} e^{b_j - theta_j t}`` and
``P(L <= t) <= min_{theta_j < 0} e^{b_j - theta_j t}`` (Chernoff).  The
engine asks for such minima a few dozen times per grid, on tables of 40-80
entries, where array expressions cost more in their temporaries than in the
arithmetic.  Each entry's exponent is computed as the array expression did,
then raised by a bound on its own rounding (two or three operations on
numbers up to ``|b| + |theta t|``: ``8 u`` of that), so that the minimum
bounds the exact one from above; a NaN propagates as in ``np.min``.
"""

from __future__ import annotations

import math

from numba import njit

from ._signatures import F64, called_with, f64, i64

#: log 2 as numpy's logaddexp adds it for equal arguments
_LOGE2 = 0.693147180559945309417232121458176568

#: allowance per unit of magnitude for an exponent's few roundings (8 u)
_ROUND = 8.0 * 2.0 ** -53


@njit(cache=True, nogil=True, inline="always")
def _logaddexp(x, y):
    # numpy's npy_logaddexp, operation for operation
    if x == y:
        return x + _LOGE2
    tmp = x - y
    if tmp > 0:
        return x + math.log1p(math.exp(-tmp))
    if tmp <= 0:
        return y + math.log1p(math.exp(tmp))
    return tmp


@called_with(F64, F64, f64, i64)
@njit(cache=True, nogil=True)
def chernoff_exponent(log_mgf, theta, t, sign):
    """An upper bound on ``min_j (log_mgf_j - theta_j t)`` (exact arithmetic) over ``theta_j > 0`` (``sign`` 1: the
    upper tail ``L >= t``) or ``theta_j < 0`` (``sign`` -1: the lower tail);
    ``+inf`` when no parameter has that sign."""
    best = math.inf
    for j in range(theta.shape[0]):
        th = theta[j]
        if (sign > 0 and th > 0.0) or (sign < 0 and th < 0.0):
            b = log_mgf[j]
            v = b - th * t
            if v != v:
                return v
            if v > -math.inf:
                v += _ROUND * (abs(b) + abs(th * t))
            if v < best:
                best = v
    return best


@njit(cache=True, nogil=True, inline="always")
def _min_exponent(vals, ths, c, x, sign):
    """``min_j (c vals_j + sign ths_j x)``, each raised by its rounding (NaN: NaN)."""
    best = math.inf
    for j in range(vals.shape[0]):
        a, b = c * vals[j], sign * (ths[j] * x)
        v = a + b
        if v != v:
            return v
        if v > -math.inf:
            v += _ROUND * (abs(a) + abs(b))
        if v < best:
            best = v
    return best


@called_with(F64, F64, F64, F64, f64, f64, f64)
@njit(cache=True, nogil=True)
def log_two_tails(th_up, pos, th_dn, neg, c, lo, hi):
    """An upper bound on ``log(e^up + e^dn)`` with ``up = min_j (c pos_j - th_up_j hi)``
    and ``dn = min_j (c neg_j + th_dn_j lo)`` (exact arithmetic): the log of a Chernoff bound on the
    ``c``-fold law's mass at losses ``>= hi`` plus ``<= lo``, from bounds
    ``pos``, ``neg`` on one step's log-MGF at ``th_up`` and ``-th_dn``."""
    up = _min_exponent(pos, th_up, c, hi, -1.0)
    dn = _min_exponent(neg, th_dn, c, lo, 1.0)
    if up != up or dn != dn:
        return up + dn
    # (logaddexp's own rounding: a few ulps of its arguments and result)
    r = _logaddexp(up, dn)
    if not abs(r) < math.inf:
        return r
    return r + _ROUND * (abs(r) + (abs(up) if up > -math.inf else 0.0) + (abs(dn) if dn > -math.inf else 0.0) + 1.0)
