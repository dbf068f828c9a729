"""Elementwise integer powers of a complex spectrum (FFT self-composition).

Binary exponentiation: ``log2(c)`` squarings plus one product per set bit of
``c``.  Each complex product has relative error at most ``sqrt(5) u``
(Brent, Percival & Zimmermann, *Error bounds on complex floating-point
multiplication*, Math. Comp. 2007), and an error made in an intermediate
power is raised with it, so the computed ``z^c`` carries a relative error of
at most ``(1 + sqrt(5) u)^(2c) - 1``: the bound :mod:`pld.engine.power` uses.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._signatures import C128, F64, called_with, i64


@called_with(C128, i64, i64, C128, C128)
@njit(cache=True, nogil=True)
def complex_powers(z, c_a, c_b, out_a, out_b):
    """``out_a = z**c_a`` and ``out_b = z**c_b`` elementwise (``c_b`` may be 0,
    in which case ``out_b`` is left alone), sharing the squarings.

    ``c_a >= 1``; both exponents are non-negative integers.
    """
    top = max(c_a, c_b)
    # |z|^2 below this makes both powers smaller than 1e-300: written as 0
    # (callers add 1e-300 per entry to their error bound)
    c_min = c_a if c_b <= 0 else min(c_a, c_b)
    tiny = np.exp(-2.0 * 691.0 / c_min)
    for k in range(z.shape[0]):
        base = z[k]
        if base.real * base.real + base.imag * base.imag < tiny:
            out_a[k] = 0.0
            if c_b > 0:
                out_b[k] = 0.0
            continue
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


@called_with(F64, i64)
@njit(cache=True, nogil=True)
def rotate_left(a, shift):
    """Rotate ``a`` left by ``shift`` in place (``a[i] <- a[(i + shift) % n]``),
    by three reversals: no temporary (a transform-sized copy is a fresh
    mmap, paid for in page faults)."""
    n = a.shape[0]
    if n == 0:
        return
    shift %= n
    if shift == 0:
        return
    _reverse(a, 0, shift)
    _reverse(a, shift, n)
    _reverse(a, 0, n)


@njit(cache=True, nogil=True, inline="always")
def _reverse(a, i, j):
    j -= 1
    while i < j:
        t = a[i]
        a[i] = a[j]
        a[j] = t
        i += 1
        j -= 1
