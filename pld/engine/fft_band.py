"""The low frequencies of a long double real DFT, from block moments.

The FFT power (:mod:`pld.engine.power`) of a long run raises the step's
spectrum to a power in the tens of thousands, and only a few hundred of its
lowest entries stay above ``1e-300`` (the rest are written as 0): at ``T =
1e9`` the forward transform has 393,216 points and 288 live entries.  The full
long double transform costs about 40% of such a query; this module computes
the entries ``k`` of a set ``S`` of low frequencies only, at a fraction of it.

Method.  Cut ``x`` (zero-padded to ``n``) into blocks of ``D`` points (``D`` a
power of two dividing ``n``), block ``b`` centred at ``c_b = b D + (D - 1)/2``,
and write ``j - c_b = d_j / 2`` (``d_j`` odd, ``|d_j| <= D - 1``).  With
``theta_k = 2 pi k / n`` and ``e^(-i theta d / 2)`` expanded in its Taylor series,

``X_k = e^(-i theta_k (D - 1)/2) sum_{r < R} (-i theta_k / 2)^r / r! F_r[k] + t_k``,
``F_r = DFT_{n/D}(mu_r)``,  ``mu_{b, r} = sum_{j in b} x_j d_j^r``

(the block moments), ``|t_k| <= ||x||_1 z^R / R! / (1 - z / (R + 1))`` with ``z
= theta_k (D - 1) / 2``: ``R`` transforms of length ``n / D`` (one batched long
double pocketfft call) and ``R`` moments per block.  ``D`` is chosen so that
``z <= _Z_MAX`` at the highest index asked (:func:`plan`).  The moments whose
weight ``z^r / r!`` is small enough are computed in double (one BLAS product),
the others in long double (in the blocks where their
double error would show); blocks too light to matter are left out, their
moments' bound counted as error.  (No BLAS: OpenBLAS's threads spin on after
a product, and took a core from the rest of the query and the next one.)

Error bound (``u``: the long double's unit roundoff, ``u_d`` the double's;
``L = n / D``; norms over the whole spectrum, ``k`` and ``n - k`` alike):

``||X^_S - X_S||_2 <= 1.01 (sqrt(2 |S|) t + sum_r a_r sqrt(L) [(C u (log2 L + 1) + w_r) (||mu^_r||_2 + e_r) + e_r])``

* ``a_r = (theta_max / 2)^r / r!`` bounds the coefficient of ``F_r`` at every
  ``k`` in ``S``; the triangle (Minkowski) inequality over ``r``;
* ``C u (log2 L + 1) sqrt(L) ||mu_r||_2``: the length-``L`` transform's error in
  l2 (Higham, *Accuracy and Stability of Numerical Algorithms*, Thm. 24.2,
  with :mod:`pld.engine.fft`'s constant ``C``), ``||mu_r||_2 <= ||mu^_r||_2 + e_r``;
* ``e_r >= ||mu^_r - mu_r||_2``: a block left out (``mu^ = 0``) is off by at most
  ``(D - 1)^r`` times its mass; every other moment is first computed in double, and
  the first ``r_ld`` again in long double in the blocks whose mass is above a
  cut (with a double error on the rest below ``1e-2 u`` of the mass's l2
  norm); a long double moment sums the running
  products ``x_j d_j^r`` (``x_j d_j`` exact: 53 + 7 significant bits for ``D
  <= 128``; one rounding per further factor) as a balanced tree, within
  ``gamma_(log2 D + r - 1)`` of ``sum_{j in b} |x_j| |d_j|^r``; a double one is a
  BLAS product of ``D`` terms in any order (the power ``d_j^r`` rounded once at
  most), within ``gamma_(D+2)`` of it; and ``sum_{j in b} |x_j| |d_j|^r <= (D -
  1)^r sum_{j in b} |x_j|``, whose l2 norm over the blocks is computed; the
  transform of an l2 error ``e`` has l2 norm ``sqrt(L) e``;
* ``w_r = (7.3 r + 33) u``: the rest, relative to ``|a_r F^_r[k]|``: the
  coefficient by ``r`` products and divisions from a rounded angle (``6.3 r + 2``),
  its product with ``F^_r`` (``sqrt(5)``), the sum from the smallest term up
  (``r + 1``), the phase (``cosl`` and ``sinl`` within ``4 u`` each, twice glibc's
  stated ulps on x86, of an angle within ``1.5 u``: under ``25 u``) and its product
  (``sqrt(5)``);
* ``t``: the truncation above at ``theta_max``, at each of the ``2 |S|``
  entries it stands for;
* ``1.01``: second-order terms (products of the ``u``'s, a few hundred ``u``
  each).

With ``r = 0`` alone this is ``(C (log2 L + 1) + 33) u sqrt(L) ||mu_0||_2``, and
``||mu_0||_2 <= sqrt(D) ||x||_2``: below the full transform's ``C u (log2 n + 1)
sqrt(n) ||x||_2`` whenever ``33 < C log2 D``.
"""

from __future__ import annotations

import math

import numpy as np

from pld.engine import fft as _fft

_U_LD = _fft._U_LD
_U = _fft._U
_C_ERR = _fft._C_ERR
#: 2 pi, correctly rounded to the long double (numpy's ``pi`` is a double)
_TWO_PI = np.longdouble("6.28318530717958647692528676655900576839")
#: largest Taylor argument ``theta_max (D - 1) / 2`` a plan accepts
_Z_MAX = 0.3
#: the truncation is held to this share of the r = 0 transform's error bound
_TRUNC_SHARE = 1e-3
#: smallest block and shortest transform a plan uses
_MIN_BLOCK = 8
_MIN_LENGTH = 32
#: largest block: x_j d_j stays exact in long double (53 + 7 bits), and the long double
#: moments stay few (the Taylor argument grows with the block)
_MAX_BLOCK = 128
#: a band whose highest index exceeds n / _MAX_BAND is left to the full transform
_MAX_BAND = 256


def plan(n: int, top: int) -> int:
    """``D``, the block length for indices up to ``top`` of a length-``n``
    transform: the largest power of two dividing ``n`` with ``theta_top (D -
    1) / 2 <= _Z_MAX`` and ``n / D >= max(_MIN_LENGTH, 2 top + 2)``; 0 where none
    of at least ``_MIN_BLOCK`` exists or the band is too wide to gain."""
    if top < 0 or top * _MAX_BAND > n:
        return 0
    theta = 2.0 * math.pi * top / n
    best = 0
    d = _MIN_BLOCK
    while d <= _MAX_BLOCK and n % d == 0 and n // d >= max(_MIN_LENGTH, 2 * top + 2):
        if theta * (d - 1) / 2.0 > _Z_MAX:
            break
        best = d
        d *= 2
    return best


def rfft_extended_band(x: np.ndarray, n: int, at: np.ndarray, block: int) -> tuple[np.ndarray, float]:
    """``(values, err)``: ``X_k = sum_j x_j e^(-2 pi i j k / n)`` (``x``
    zero-padded to ``n``) at the indices ``at`` (ascending, ``0 <= k``, within
    the band of ``block = plan(n, max(at))``), computed in long double, and
    ``err`` bounding the l2 norm of their error over the whole spectrum
    (``k`` and ``n - k`` alike; module notes)."""
    at = np.asarray(at, dtype=np.int64)
    d_len = int(block)
    length = n // d_len
    top = int(at[-1]) if at.size else 0
    if d_len < 1 or n % d_len or 2 * top + 2 > length:
        raise ValueError(f"block {block} does not plan indices up to {top} of a length-{n} transform")
    x = np.asarray(x, dtype=np.float64)
    u, ud = _U_LD, _U
    theta_max = 2.0 * math.pi * top / n * (1.0 + 4.0 * _U)
    z = theta_max * (d_len - 1) / 2.0
    half = theta_max / 2.0
    l1 = float(np.abs(x).sum()) * (1.0 + x.size * ud)
    blocks = -(-x.size // d_len)
    padded = np.zeros(blocks * d_len)
    padded[: x.size] = x
    rows = padded.reshape(blocks, d_len)
    abs_block = np.abs(rows).sum(axis=1) * (1.0 + d_len * ud)  # sum_{j in b} |x_j|, rounded up
    abs_norm = float(np.sqrt(np.sum(abs_block * abs_block))) * (1.0 + blocks * ud)
    # moment 0's transform error bound, and the terms: the truncation held to a share of it
    fft_rel = _C_ERR * u * (math.log2(length) + 1.0)
    base = fft_rel * math.sqrt(length) * abs_norm
    terms = 1
    while True:
        trunc = l1 * z ** terms / math.factorial(terms) / max(1e-300, 1.0 - z / (terms + 1))
        if math.sqrt(2.0 * at.size) * trunc <= _TRUNC_SHARE * base or terms >= 60:
            break
        terms += 1
    # long double moments up to r_ld: a double moment's error, gamma_(D+2)(u_d) (D - 1)^r, weighed by
    # a_r, must stay below a hundredth of u (the transform's share)
    offsets = (2.0 * np.arange(d_len) - (d_len - 1))
    r_ld = 1
    while r_ld < terms and half ** r_ld / math.factorial(r_ld) * (d_len - 1) ** r_ld * (d_len + 2) * ud > 1e-2 * u:
        r_ld += 1
    # every moment in double, then the heavy blocks' first r_ld again in long double: the
    # light blocks' double error (l2 over them) stays below 1e-2 u of the mass's l2 norm, as
    # if all were long double.  Blocks too light to matter at all (their masses' l2 norm
    # below 1e-3 u of the whole) are left at 0, their moments' bound added to the error.
    # (numpy's own loops, not BLAS: OpenBLAS's threads spin on after a product, taking a
    # core from the rest of the query and the next one)
    zero_cut = 1e-3 * u * abs_norm / math.sqrt(blocks)
    kept = np.flatnonzero(abs_block > zero_cut)
    zero_norm = float(np.sqrt(np.sum(np.where(abs_block > zero_cut, 0.0, abs_block) ** 2))) * (1.0 + blocks * ud)
    mu = np.zeros((terms, length), dtype=np.longdouble)
    mu[:, kept] = np.einsum("bd,dr->rb", rows[kept], offsets[:, None] ** np.arange(terms)[None, :])
    cut = 1e-2 * u / ((d_len + 2) * ud) * abs_norm / math.sqrt(blocks)
    heavy = np.flatnonzero(abs_block > cut)
    light_norm = float(np.sqrt(np.sum(np.where(abs_block > cut, 0.0, abs_block) ** 2))) * (1.0 + blocks * ud)
    if heavy.size:
        # x_j d_j^r by running products (x_j d_j exact: at most 53 + 7 significant bits; one
        # rounding per further factor), each summed over its block as a balanced tree, the
        # blocks side by side (a block's offsets down a column)
        offsets_ld = offsets.astype(np.longdouble)[:, None]
        term = rows[heavy].T.astype(np.longdouble)
        for r in range(r_ld):
            if r:
                term *= offsets_ld
            mu[r, heavy] = _tree_sums(term)
    spectra = _fft._scipy_fft().rfft(mu, axis=1)[:, at]  # (terms, |S|)
    # sum_r a_r(k) F_r[k], from the smallest term up
    k_ld = at.astype(np.longdouble)
    theta = _TWO_PI * k_ld / np.longdouble(n)
    step = -0.5j * theta
    coef = [np.ones(at.size, dtype=np.clongdouble)]
    for r in range(1, terms):
        coef.append(coef[-1] * step / r)
    acc = np.zeros(at.size, dtype=np.clongdouble)
    for r in range(terms - 1, -1, -1):
        acc += coef[r] * spectra[r]
    angle = theta * np.longdouble(d_len - 1) / 2
    phase = np.empty(at.size, dtype=np.clongdouble)
    phase.real = np.cos(angle)
    phase.imag = -np.sin(angle)
    values = acc * phase
    # the bound
    err = math.sqrt(2.0 * at.size) * trunc
    mu_norms = np.sqrt(np.sum(np.abs(mu.astype(np.float64)) ** 2, axis=1)) * (1.0 + 1e-12)
    for r in range(terms):
        a_r = half ** r / math.factorial(r)
        # (long double: a tree of log2 D additions after r - 1 rounded products; double:
        # D products summed in any order, the power rounded; a block left out: all of it)
        g_d = (d_len + 2) * ud
        g_d /= 1.0 - g_d
        if r < r_ld:
            g = (d_len.bit_length() - 1 + max(r - 1, 0)) * u
            e_r = (g / (1.0 - g) * abs_norm + g_d * light_norm + zero_norm) * (d_len - 1) ** r
        else:
            e_r = (g_d * abs_norm + zero_norm) * (d_len - 1) ** r
        w_r = (7.3 * r + 33.0) * u
        err += a_r * math.sqrt(length) * ((fft_rel + w_r) * (float(mu_norms[r]) + e_r) + e_r)
    return values, err * 1.01


def _tree_sums(columns: np.ndarray) -> np.ndarray:
    """Each column of ``columns`` (a power-of-two height) summed as a balanced
    binary tree: ``log2`` of the height roundings on any term (halves added
    as whole contiguous rows)."""
    level = columns
    height = columns.shape[0]
    while height > 1:
        height //= 2
        level = level[:height] + level[height: 2 * height]
    return level[0]
