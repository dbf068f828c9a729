"""Elementwise integer powers of a complex spectrum (FFT self-composition).

Binary exponentiation: ``log2(c)`` squarings plus one product per set bit of
``c``.  Each complex product has relative error at most ``sqrt(5) u``
(Brent, Percival & Zimmermann, *Error bounds on complex floating-point
multiplication*, Math. Comp. 2007), and an error made in an intermediate
power is raised with it, so the computed ``z^c`` carries a relative error of
at most ``(1 + sqrt(5) u)^(2c) - 1``: the bound :mod:`pld._power` uses.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def complex_powers(z, c_a, c_b, out_a, out_b):
    """``out_a = z**c_a`` and ``out_b = z**c_b`` elementwise (``c_b`` may be 0,
    in which case ``out_b`` is left alone), sharing the squarings.

    ``c_a >= 1``; both exponents are non-negative integers.
    """
    top = max(c_a, c_b)
    for k in range(z.shape[0]):
        base = z[k]
        acc_a = 1.0 + 0.0j
        acc_b = 1.0 + 0.0j
        bit = 1
        while bit <= top:
            if c_a & bit:
                acc_a = acc_a * base
            if c_b & bit:
                acc_b = acc_b * base
            bit <<= 1
            if bit <= top:
                base = base * base
        out_a[k] = acc_a
        if c_b > 0:
            out_b[k] = acc_b


@njit(cache=True, nogil=True)
def spectrum_norm(z, n):
    """l2 norm of the full length-``n`` spectrum whose first ``n//2 + 1`` entries
    are ``z`` (a real signal's: the rest are conjugates), and its largest modulus."""
    half = z.shape[0]
    s = 0.0
    top = 0.0
    for k in range(half):
        a = abs(z[k])
        if a > top:
            top = a
        # interior bins stand for themselves and their conjugate
        w = 1.0 if (k == 0 or (n % 2 == 0 and k == half - 1)) else 2.0
        s += w * a * a
    return np.sqrt(s), top
