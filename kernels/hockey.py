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
from numba import njit

from ._signatures import F64, called_with, f64, i64


@called_with(F64, f64, f64)
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


@called_with(i64, f64, f64)
@njit(cache=True, nogil=True)
def suffix_error_bounds(n, t, err):
    """``(E, gamma)`` of the evaluator (:meth:`pld.engine.grid.GridPLD._suffix`), ``m = 0 .. n``.

    ``E[m] = sqrt(g_m) err`` bounds the suffix of an l2 error ``err`` weighted
    by the geometric ratio ``e^{t/2}`` (``t = -2 lam h``), by Cauchy-Schwarz
    with ``g_m = sum_{j < n - m} e^{t j} = expm1((n - m) t) / expm1(t)`` (the
    count ``n - m`` where the ratio rounds to one); 0 for the empty suffix.
    ``gamma[m] = (3 (n - m) + 6) u`` bounds the suffix recursion's relative
    rounding.  One pass, for what were six array operations a grid.
    """
    u = 2.0 ** -53
    e = np.empty(n + 1)
    gamma = np.empty(n + 1)
    geometric = t < -1e-12
    den = -math.expm1(t) if geometric else 1.0
    for m in range(n + 1):
        k = n - m
        g = -math.expm1(k * t) / den if geometric else float(k)
        e[m] = math.sqrt(g) * err if g > 0.0 else 0.0
        gamma[m] = (3.0 * k + 6.0) * u
    return e, gamma


@called_with(F64, F64, F64, F64, f64, f64, f64, f64)
@njit(cache=True, nogil=True)
def cell_extremes(sa, sb, e, gamma, anchor, lam, h, sign):
    """log of each cell's largest bound, ``log(w_m (SA_m - e^{-h} SB_m + sign (E_m + slack_m)))``
    (``-inf`` where that is not positive; cell 0 with ``e^{-h}`` read as 0), as
    :meth:`pld.engine.grid.GridPLD._epsilon` reads them: the same operations in the
    same order, ``w_m = e^{anchor - lam (m h)}`` with its rounding bound added on
    ``sign``'s side.  One pass, no temporaries (the grid's evaluator asks it once per grid)."""
    n = sa.shape[0]
    u = 2.0 ** -53
    x0 = math.exp(-h)
    out = np.empty(n)
    for m in range(n):
        x = 0.0 if m == 0 else x0
        a = sa[m]
        b = sb[m]
        em = e[m]
        xb = x * b
        slack = (gamma[m] + 4.0 * u) * ((a + xb) + 4.0 * em) + xb * (4.0 * u)
        ext = (a - xb) + sign * (em + slack)
        if ext > 0.0:
            t = lam * (m * h)
            logc = anchor - t
            logc_err = (2.0 * abs(anchor) + 4.0 * abs(t) + 2.0) * u
            out[m] = (logc + sign * logc_err) + math.log(ext)
        else:
            out[m] = -np.inf
    return out


#: Veltkamp's splitting constant 2^27 + 1 (Dekker, Numer. Math. 18 (1971) 224-242)
_SPLIT = 134217729.0


@njit(cache=True, nogil=True, inline="always")
def _point_above(k, h, eps):
    """``k h > eps`` for an integer-valued ``k`` (``|k| < 2^53``), exactly.

    With ``k h = p + e`` exactly (Dekker's error-free product, exact while
    nothing overflows or underflows: ``|k|, |h|`` below ~1e290, ``|k h|``
    above ~1e-290), ``k h - eps = (p - eps) + e``: where ``p`` and ``eps`` are
    within a factor 2 of each other (and of one sign) the difference ``p -
    eps`` is exact (Sterbenz), and the rounded sum has the sign of the exact
    one; elsewhere ``|p - eps| >= |p| / 2`` dwarfs ``|e| <= ulp(p) / 2``, so
    the rounding of ``p - eps`` cannot change the sign either.  Infinite
    ``eps`` compare as infinities.
    """
    if not math.isfinite(eps):
        return eps < 0.0
    p, e = _two_product(k, h)
    if not math.isfinite(e):
        e = 0.0
    return (p - eps) + e > 0.0


@njit(cache=True, nogil=True, inline="always")
def _two_product(a, b):
    """``(p, e)``: ``p = fl(a b)`` and ``p + e = a b`` exactly (Dekker's
    error-free product, Veltkamp's split of both factors) while nothing
    overflows and ``e`` does not underflow."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


@called_with(F64, F64, F64, F64, f64, f64, f64, i64, F64, f64, f64)
@njit(cache=True, nogil=True)
def hockey_delta(sa, sb, e, gamma, anchor, lam, h, k0, eps, sign, inf_mass):
    """The evaluator's bound on delta at each ``eps`` (:meth:`pld.engine.grid.GridPLD.delta`):
    ``w_m (SA_m - e^{eps - l_m} SB_m + sign (E_m + slack))`` on the cell of
    ``eps``, every rounding applied on ``sign``'s side, plus the mass at
    ``+inf``, clipped to [0, 1].

    The same operations in the same order as the array expression it replaces
    (the cell of ``eps`` found by exact comparisons, :func:`_point_above`, then
    the grid's ``_inner`` and ``_log_weight``), so that a query's few dozen
    single evaluations (root checks) cost a call each, not twenty array
    operations; ``exp`` and ``log`` are libm's, within an ulp as the rounding
    terms assume (numpy's vectorised ones may differ from them in the last unit).
    """
    u = 2.0 ** -53
    n = sa.shape[0] - 1
    out = np.empty(eps.shape[0])
    k0f = float(k0)
    for j in range(eps.shape[0]):
        x_eps = eps[j]
        # the first grid index m with l_m > eps, for any real eps (estimate,
        # then exact comparisons: it is off by at most one either way)
        if x_eps < k0 * h:
            mf = 0.0
        else:
            # (np.floor: numba's math.floor returns an integer, which an eps
            # beyond 2^63 h, or +inf, wraps around to the bottom of the grid)
            mf = np.floor(x_eps / h) - k0f + 1.0
        if math.isnan(mf):
            mf = float(n)
        mf = min(max(mf, 0.0), float(n))
        if mf > 0.0 and _point_above(k0f + mf - 1.0, h, x_eps):
            mf -= 1.0
        if mf < n and not _point_above(k0f + mf, h, x_eps):
            mf += 1.0
        m = int(mf)
        if m >= n:
            val = 0.0
        else:
            lm = (k0 + m) * h
            d = min(x_eps - lm, 0.0)
            x = math.exp(d)
            x_rel = (abs(x_eps) + 2.0 * abs(lm) + 2.0) * u * 1.01 if x > 0.0 else 0.0
            a = sa[m]
            b = sb[m]
            em = e[m]
            core = a - x * b
            slack = (gamma[m] + 4.0 * u) * (a + x * b + 4.0 * em) + x * b * x_rel
            inner = max(core + sign * (em + slack), 0.0)
            t = lam * (m * h)
            logc = anchor - t
            logc_err = (2.0 * abs(anchor) + 4.0 * abs(t) + 2.0) * u
            if inner > 0.0:
                log_inner = math.log(inner)
                log_val = logc + log_inner
                log_val = log_val + sign * (logc_err + (abs(log_val) + abs(log_inner) + 2.0) * u)
                val = math.exp(min(log_val, 0.0))
            else:
                val = 0.0
        out[j] = min(max(val + inf_mass, 0.0), 1.0)
    return out


#: entries per block of the MGF kernel: within a block the weights e^{theta l}
#: are powers of one ratio, so the block sum is a Horner evaluation
_MGF_BLOCK = 256


@njit(cache=True, nogil=True, inline="always")
def _lse_add(m, s, x):
    """Add ``e^x`` to a sum kept as ``e^m * s`` (``m`` the running maximum)."""
    if x > m:
        return x, (s * math.exp(m - x) + 1.0 if m > -np.inf else 1.0)
    return m, s + math.exp(x - m)


#: fast-math flags of the sizing MGF: reassociation lets LLVM vectorise the
#: max and the sum (AVX-512 here); no ``ninf``, since log masses are -inf
_SIZING_MATH = {"nnan", "nsz", "reassoc", "contract", "arcp"}


@njit(cache=True, nogil=True, inline="always", fastmath=_SIZING_MATH)
def _exp_sizing(x):
    """``e^x`` for ``-61 <= x <= 0`` within ~1e-10 relative, branch-free so that
    loops over it vectorise (a loop calling libm's ``exp`` does not).  ``(e^(x/128))^128`` with the inner power
    from its Taylor polynomial of degree 11 on ``[-0.48, 0]``, whose relative
    error ``0.48^12 / 12! < 4e-13`` grows 128-fold by the squarings."""
    y = x * (1.0 / 128.0)
    p = 1.0 / 39916800.0
    p = p * y + 1.0 / 3628800.0
    p = p * y + 1.0 / 362880.0
    p = p * y + 1.0 / 40320.0
    p = p * y + 1.0 / 5040.0
    p = p * y + 1.0 / 720.0
    p = p * y + 1.0 / 120.0
    p = p * y + 1.0 / 24.0
    p = p * y + 1.0 / 6.0
    p = p * y + 0.5
    p = p * y + 1.0
    p = p * y + 1.0
    for _ in range(7):
        p = p * p
    return p


@called_with(F64, F64, F64)
@njit(cache=True, nogil=True, fastmath=_SIZING_MATH)
def log_mgf_points(log_p, loss, thetas):
    """``log sum_i exp(log_p_i + theta loss_i)`` for every ``theta``, at arbitrary
    (finite) losses, within ~1e-10 relative.

    Two passes per ``theta``: the largest exponent, then the sum of the terms
    within ``e^{-60}`` of it (the rest, at most ``n e^{-60}`` of the sum, is
    left out).  Sizing only (the explorations behind truncation windows and
    tilts), so a fast exponential and fast-math reductions serve: both
    passes vectorise.
    """
    n = log_p.shape[0]
    out = np.empty(thetas.shape[0])
    for k in range(thetas.shape[0]):
        th = thetas[k]
        m = -np.inf
        for i in range(n):
            m = max(m, log_p[i] + th * loss[i])
        if m == -np.inf:
            out[k] = -np.inf
            continue
        s = 0.0
        for i in range(n):
            x = max(log_p[i] + th * loss[i] - m, -61.0)
            e = _exp_sizing(x)
            s += e if x > -60.0 else 0.0
        out[k] = m + math.log(s)
    return out


@called_with(F64, F64, f64)
@njit(cache=True, nogil=True)
def tilted_moments(log_p, loss, lam):
    """``(log sum_i e^{log_p_i + lam loss_i}, mean, variance)`` of the law tilted by ``lam``.

    Two passes (the largest exponent, then the weighted sums); for the
    saddle-point estimate behind sizing decisions.
    """
    n = log_p.shape[0]
    m = -np.inf
    for i in range(n):
        v = log_p[i] + lam * loss[i]
        if v > m:
            m = v
    if not m > -np.inf:
        return -np.inf, 0.0, 0.0
    if m == np.inf:  # (the tilt overflows: no finite moments)
        return np.inf, 0.0, 0.0
    s0 = 0.0
    s1 = 0.0
    for i in range(n):
        v = log_p[i] + lam * loss[i]
        if v > m - 60.0:
            e = math.exp(v - m)
            s0 += e
            s1 += e * loss[i]
    mean = s1 / s0
    s2 = 0.0
    for i in range(n):
        v = log_p[i] + lam * loss[i]
        if v > m - 60.0:
            d = loss[i] - mean
            s2 += math.exp(v - m) * d * d
    return m + math.log(s0), mean, s2 / s0


@njit(cache=True, nogil=True, inline="always")
def _of_sign(thetas, up):
    """``(indices, count)`` of the thetas ``>= 0`` (``up``) or not, in order (the
    Horner recursion runs up or down a block by the sign)."""
    members = np.empty(thetas.shape[0], dtype=np.int64)
    cnt = 0
    for k in range(thetas.shape[0]):
        if (thetas[k] >= 0.0) == up:
            members[cnt] = k
            cnt += 1
    return members, cnt


@njit(cache=True, nogil=True, inline="always")
def _lse_finish(ms, ss):
    """``log(e^m s)`` of each running sum kept by :func:`_lse_add` (``-inf`` if empty)."""
    out = np.empty(ms.shape[0])
    for k in range(ms.shape[0]):
        out[k] = ms[k] + math.log(ss[k]) if ms[k] > -np.inf else -np.inf
    return out


@njit(cache=True, nogil=True, inline="always")
def _horner_up(e, i0, i1, r):
    """``sum_{i0 <= i < i1} e_i r^(i1 - 1 - i)``, four interleaved chains (the
    sequential recurrence is latency-bound)."""
    r4 = r * r * r * r
    a0 = a1 = a2 = a3 = 0.0
    i = i0
    while i + 3 < i1:
        a0 = a0 * r4 + e[i]
        a1 = a1 * r4 + e[i + 1]
        a2 = a2 * r4 + e[i + 2]
        a3 = a3 * r4 + e[i + 3]
        i += 4
    acc = ((a0 * r + a1) * r + a2) * r + a3
    while i < i1:
        acc = acc * r + e[i]
        i += 1
    return acc


@njit(cache=True, nogil=True, inline="always")
def _horner_down(e, i0, i1, r):
    """``sum_{i0 <= i < i1} e_i r^(i - i0)`` (mirror of :func:`_horner_up`)."""
    r4 = r * r * r * r
    a0 = a1 = a2 = a3 = 0.0
    i = i1 - 1
    while i - 3 >= i0:
        a0 = a0 * r4 + e[i]
        a1 = a1 * r4 + e[i - 1]
        a2 = a2 * r4 + e[i - 2]
        a3 = a3 * r4 + e[i - 3]
        i -= 4
    acc = ((a0 * r + a1) * r + a2) * r + a3
    while i >= i0:
        acc = acc * r + e[i]
        i -= 1
    return acc


@njit(cache=True, nogil=True, inline="always")
def _horner_pair(e, i0, i1, r, q, up):
    """:func:`_horner_up` (``up``) or :func:`_horner_down` at two ratios ``r`` and
    ``q`` in one pass: eight independent chains, each theta's computed exactly as
    alone."""
    r4 = r * r * r * r
    q4 = q * q * q * q
    a0 = a1 = a2 = a3 = 0.0
    b0 = b1 = b2 = b3 = 0.0
    # (down: the same recursion from the block's top, i - 1, i - 2, ...)
    step = 1 if up else -1
    i = i0 if up else i1 - 1
    while i0 <= i + 3 * step < i1:
        e0, e1, e2, e3 = e[i], e[i + step], e[i + 2 * step], e[i + 3 * step]
        a0 = a0 * r4 + e0
        a1 = a1 * r4 + e1
        a2 = a2 * r4 + e2
        a3 = a3 * r4 + e3
        b0 = b0 * q4 + e0
        b1 = b1 * q4 + e1
        b2 = b2 * q4 + e2
        b3 = b3 * q4 + e3
        i += 4 * step
    acc = ((a0 * r + a1) * r + a2) * r + a3
    bcc = ((b0 * q + b1) * q + b2) * q + b3
    while i0 <= i < i1:
        acc = acc * r + e[i]
        bcc = bcc * q + e[i]
        i += step
    return acc, bcc


@njit(cache=True, nogil=True, inline="always")
def _log_space_sum(log_mass, pos, j0, j1, l0, h, th):
    """``log sum_{j0 <= j < j1} exp(log_mass[pos_j] + th (l0 + pos_j h))``, term
    by term (a block whose weights span too much for one scale)."""
    mb = -np.inf
    sb = 0.0
    for j in range(j0, j1):
        lm = log_mass[pos[j]]
        if lm > -np.inf:
            mb, sb = _lse_add(mb, sb, lm + th * (l0 + pos[j] * h))
    return mb + math.log(sb) if mb > -np.inf else -np.inf


@njit(cache=True, nogil=True, inline="always")
def _block_log_sum(horner, acc, bmax_b, th, l0, ref, h, log_mass, pos, j0, j1):
    """log of one block's sum at ``theta``: its Horner value ``acc``, referenced at
    grid index ``ref`` and scaled by the block's largest mass, or (weights too far
    apart for one scale) the exact log-space pass; ``-inf`` for an empty block."""
    if horner:
        if acc <= 0.0:
            return -np.inf
        x = bmax_b + th * (l0 + ref * h)
        return x + math.log(acc)
    return _log_space_sum(log_mass, pos, j0, j1, l0, h, th)


@njit(cache=True, nogil=True)
def _log_mgf_sparse(log_mass, nnz, l0, h, thetas):
    """:func:`log_mgf_grid` over the ``nnz`` entries with mass only (first
    steps with wide tail cells: most grid points are empty).

    The same blocks and Horner evaluation, over consecutive entries with
    mass: a gap of ``d`` grid points multiplies by ``r^d = e^{-|theta| h d}``
    (``exp`` once per distinct gap and theta, ~1 ulp), so each step rounds
    ~3 u.  Four thetas of one sign run through a block together: their
    recursions are independent, so the processor overlaps them (one alone
    waits on each multiply-add); each is computed exactly as alone.
    """
    idx = np.empty(nnz, dtype=np.int64)
    j = 0
    for i in range(log_mass.shape[0]):
        if log_mass[i] > -np.inf:
            idx[j] = i
            j += 1
    nb = (nnz + _MGF_BLOCK - 1) // _MGF_BLOCK
    bmax = np.full(nb, -np.inf)
    for j in range(nnz):
        b = j // _MGF_BLOCK
        if log_mass[idx[j]] > bmax[b]:
            bmax[b] = log_mass[idx[j]]
    e = np.empty(nnz)
    for j in range(nnz):
        e[j] = math.exp(log_mass[idx[j]] - bmax[j // _MGF_BLOCK])
    # (a first step's tail cells change the gap at almost every entry, but
    # it takes few distinct values)
    gaps = np.zeros(nnz, dtype=np.int64)
    for j in range(1, nnz):
        gaps[j] = idx[j] - idx[j - 1]
    distinct = np.unique(gaps)
    gap_id = np.searchsorted(distinct, gaps)
    nd = distinct.shape[0]
    nt = thetas.shape[0]
    rd = np.empty((4, nd))
    ms = np.full(nt, -np.inf)
    ss = np.zeros(nt)
    group = np.empty(4, dtype=np.int64)
    a = np.empty(4)
    acc = np.empty(4)
    for up in (True, False):
        members, cnt = _of_sign(thetas, up)
        for g0 in range(0, cnt, 4):
            for t in range(4):
                group[t] = members[min(g0 + t, cnt - 1)]
                a[t] = abs(thetas[group[t]]) * h
                for u in range(nd):
                    rd[t, u] = math.exp(-a[t] * distinct[u])
            live = min(4, cnt - g0)
            for b in range(nb):
                j0 = b * _MGF_BLOCK
                j1 = min(nnz, j0 + _MGF_BLOCK)
                span = idx[j1 - 1] - idx[j0]
                if up:
                    a0 = a1 = a2 = a3 = e[j0]
                    for j in range(j0 + 1, j1):
                        g = gap_id[j]
                        ej = e[j]
                        a0 = a0 * rd[0, g] + ej
                        a1 = a1 * rd[1, g] + ej
                        a2 = a2 * rd[2, g] + ej
                        a3 = a3 * rd[3, g] + ej
                    ref = idx[j1 - 1]
                else:
                    a0 = a1 = a2 = a3 = e[j1 - 1]
                    for j in range(j1 - 2, j0 - 1, -1):
                        g = gap_id[j + 1]
                        ej = e[j]
                        a0 = a0 * rd[0, g] + ej
                        a1 = a1 * rd[1, g] + ej
                        a2 = a2 * rd[2, g] + ej
                        a3 = a3 * rd[3, g] + ej
                    ref = idx[j0]
                acc[0], acc[1], acc[2], acc[3] = a0, a1, a2, a3
                for t in range(live):
                    k = group[t]
                    x = _block_log_sum(a[t] * span < 500.0, acc[t], bmax[b], thetas[k], l0, ref, h,
                                       log_mass, idx, j0, j1)
                    if x > -np.inf:
                        ms[k], ss[k] = _lse_add(ms[k], ss[k], x)
    return _lse_finish(ms, ss)


@called_with(F64, f64, f64, F64)
@njit(cache=True, nogil=True)
def log_mgf_grid(log_mass, l0, h, thetas):
    """``log sum_i exp(log_mass_i + theta (l0 + i h))`` for every ``theta``.

    The grid is cut into blocks of ``_MGF_BLOCK`` points.  Masses are scaled by
    their block maximum once (``e_i = exp(log_mass_i - M_b)``); for each theta a
    block sum ``sum_i e_i r^k`` with ``r = e^{-|theta| h} <= 1`` is a Horner
    evaluation referenced at the block end whose weight is largest, so no term
    exceeds one and nothing overflows, and block sums are combined in log
    space.  A block whose weights span more than ``e^{500}`` is summed term by
    term in log space instead.  Rounding: at most ~2 u per Horner step, i.e.
    ~1e-13 relative for 256 steps; masses that underflow in ``e_i`` are below
    ``e^{-745}`` of their block's largest term and weigh at most ``e^{-245}`` of
    it.  Callers inflate the result by 1e-12 relative.  (One ``exp`` per entry
    instead of one per entry and theta, as a log-space pass would need.)
    """
    n = log_mass.shape[0]
    # (typed int64 from the start: a literal 0 makes numba compile
    # _log_mgf_sparse a second time, for the literal, on a cold cache)
    nnz = np.int64(0)
    for i in range(n):
        if log_mass[i] > -np.inf:
            nnz += 1
    if 4 * nnz < n:
        return _log_mgf_sparse(log_mass, nnz, l0, h, thetas)
    nb = (n + _MGF_BLOCK - 1) // _MGF_BLOCK
    bmax = np.full(nb, -np.inf)
    for i in range(n):
        b = i // _MGF_BLOCK
        if log_mass[i] > bmax[b]:
            bmax[b] = log_mass[i]
    e = np.zeros(n)
    for i in range(n):
        lm = log_mass[i]
        if lm > -np.inf:
            e[i] = math.exp(lm - bmax[i // _MGF_BLOCK])
    pos = np.arange(n)
    nt = thetas.shape[0]
    ms = np.full(nt, -np.inf)
    ss = np.zeros(nt)
    # thetas of one sign in pairs (:func:`_horner_pair`); each theta's block
    # sums and their order are those it would have alone
    for up in (True, False):
        members, cnt = _of_sign(thetas, up)
        for g0 in range(0, cnt, 2):
            ka = members[g0]
            kb = members[min(g0 + 1, cnt - 1)]
            tha = thetas[ka]
            thb = thetas[kb]
            ra = math.exp(-abs(tha) * h)
            rb = math.exp(-abs(thb) * h)
            for b in range(nb):
                if bmax[b] == -np.inf:
                    continue
                i0 = b * _MGF_BLOCK
                i1 = min(n, i0 + _MGF_BLOCK)
                ha = abs(tha) * (i1 - 1 - i0) * h < 500.0
                hb = abs(thb) * (i1 - 1 - i0) * h < 500.0
                acc_a = acc_b = 0.0
                if ha and hb:
                    acc_a, acc_b = _horner_pair(e, i0, i1, ra, rb, up)
                elif ha:
                    acc_a = _horner_up(e, i0, i1, ra) if up else _horner_down(e, i0, i1, ra)
                elif hb:
                    acc_b = _horner_up(e, i0, i1, rb) if up else _horner_down(e, i0, i1, rb)
                # (reference at the block's top, theta >= 0: weights r^(i_ref - i); or its bottom)
                ref = (i1 - 1) if up else i0
                for t in range(2 if kb != ka else 1):
                    k = ka if t == 0 else kb
                    x = _block_log_sum(ha if t == 0 else hb, acc_a if t == 0 else acc_b, bmax[b],
                                       tha if t == 0 else thb, l0, ref, h, log_mass, pos, i0, i1)
                    if x > -np.inf:
                        ms[k], ss[k] = _lse_add(ms[k], ss[k], x)
    return _lse_finish(ms, ss)


@called_with(F64)
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


@called_with(F64, F64)
@njit(cache=True, nogil=True)
def dot_compensated(a, b):
    """``sum_i a_i b_i`` with Neumaier's compensated summation.

    For non-negative terms the result is within ``3 u`` (plus ``n u^2``)
    relative of the exact sum (each product rounds by ``u``, the compensated
    sum by ``2 u``), whatever ``n``: a naive or blocked dot can be ``n u`` off,
    1e-11 at 1e5 entries.  Also keeps BLAS (and its spinning threads) out
    of the query path.
    """
    s = 0.0
    c = 0.0
    for i in range(a.shape[0]):
        s, c = _neumaier_add(s, c, a[i] * b[i])
    return s + c


@njit(cache=True, nogil=True, inline="always")
def _neumaier_add(s, c, x):
    """One step of Neumaier's compensated sum: ``(s + x, c + the rounding lost)``."""
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c
