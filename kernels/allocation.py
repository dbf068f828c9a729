"""Per-coordinate laws of random allocation (served through ``pld.kernels``).

The coordinate is ``Y = exp(X / s^2 - 1 / (2 s^2))`` with ``X ~ N(0, s^2)``,
i.e. ``log Y ~ N(m, a^2)`` with ``a = 1/s`` and ``m = -a^2/2`` (so ``E[Y] = 1``).
With ``F(y) = Phi((log y - m)/a)`` its CDF, the partial mean is
``G(y) = E[Y; Y <= y] = Phi((log y - m)/a - a)``.  Interval masses are taken
as differences of ``Phi`` on the lower side of the median and of ``Phi(-.)``
on the upper side, so both tails keep their relative accuracy.

Two laws on the grid ``g_k = k d`` are built:

* :func:`spread_law`: each cell ``[g_k, g_{k+1}]`` split between its two ends
  preserving its mass and its mean (a mean-preserving spread: larger in the
  convex order);
* :func:`merged_law`: cells ``(e_{k-1}, e_k]`` chosen left to right so that
  each cell's conditional mean is the grid point ``g_k`` (a conditional
  expectation: smaller in the convex order, and a post-processing).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, called_with, f64, i64

_U = 2.0 ** -53
_SQRT2 = math.sqrt(2.0)


@njit(cache=True, nogil=True)
def _phi(x):
    return 0.5 * math.erfc(-x / _SQRT2)


@njit(cache=True, nogil=True)
def _z(y, m, a):
    if y <= 0.0:
        return -math.inf
    return (math.log(y) - m) / a


@njit(cache=True, nogil=True)
def _interval(za, zb):
    """``Phi(zb) - Phi(za)`` for ``za <= zb``, and a bound on its rounding error."""
    if zb <= 0.0:
        hi, lo = _phi(zb), _phi(za)
    elif za >= 0.0:
        hi, lo = _phi(-za), _phi(-zb)
    else:
        hi, lo = 1.0 - _phi(-zb), _phi(za)
        return hi - lo, 8.0 * _U * (1.0 + hi + lo)
    return hi - lo, 8.0 * _U * (hi + lo)


@njit(cache=True, nogil=True)
def _cell(ya, yb, m, a):
    """Q-mass and partial mean of ``(ya, yb]`` with rounding bounds."""
    za, zb = _z(ya, m, a), _z(yb, m, a)
    qm, eq = _interval(za, zb)
    gm, eg = _interval(za - a, zb - a)
    return qm, eq, gm, eg


@called_with(f64, f64, f64, i64)
@njit(cache=True, nogil=True)
def spread_law(m, a, d, n):
    """Mean-preserving spread of ``Y`` restricted to ``[0, n d]`` onto ``g_k = k d``, rounded up.

    The cell ``[g_k, g_{k+1}]`` with mass ``Q`` and partial mean ``M`` sends
    ``(M - g_k Q)/d`` to ``g_{k+1}`` and the rest to ``g_k`` (both shares
    ``>= 0``; mass and mean preserved).  Each share is returned rounded *up*
    by a bound on its rounding error, so the returned masses are the exact
    spread plus non-negative extra mass at every point: an upper bound for
    every non-negative functional that is convex in ``Y`` (the extra mass is
    accounted for by the caller through the returned total and mean).
    """
    mass = np.zeros(n + 1)
    for k in range(n):
        _spread_cell(mass, k, k * d, (k + 1) * d, d, m, a)
    return mass


@njit(cache=True, nogil=True, inline="always")
def _spread_cell(mass, k, ya, yb, w, m, a):
    """Add cell ``(ya, yb]``'s spread onto points ``k`` and ``k + 1`` (``w``: their
    distance), each share rounded up by a bound on its rounding error."""
    qm, eq, gm, eg = _cell(ya, yb, m, a)
    up = (gm - ya * qm) / w
    # the rounding of the product and of the subtraction, relative to the terms
    e_up = (eg + ya * eq + 4.0 * _U * (abs(gm) + ya * abs(qm))) / w + 2.0 * _U * abs(up)
    up = min(max(up, 0.0), qm)
    low = max(qm - up, 0.0)
    # (+ eq: a share clamped at the cell's computed mass is still covered)
    mass[k + 1] += (up + e_up + eq) * (1.0 + 4.0 * _U)
    mass[k] += (low + e_up + eq + 2.0 * _U * qm) * (1.0 + 4.0 * _U)


@njit(cache=True, nogil=True)
def _solve_edge(e0, g, m, a, top):
    """Right edge ``e`` of the cell ``(e0, e]`` whose conditional mean is ``g``.

    ``h(e) = E[Y - g; e0 < Y <= e]`` is negative on ``(e0, g]`` and increasing
    beyond ``g`` (``h' = (e - g) f(e)``), so the root above ``g`` is unique.
    Returns ``-1`` when ``h(top) < 0`` (the cell cannot close below ``top``).
    """
    qm, _, gm, _ = _cell(e0, top, m, a)
    if gm - g * qm < 0.0:
        return -1.0
    lo = g
    hi = top
    e = min(max(2.0 * g - e0, g * (1.0 + 1e-15)), top)
    for _ in range(100):
        qm, eq, gm, eg = _cell(e0, e, m, a)
        h = gm - g * qm
        if abs(h) <= 4.0 * (eg + g * eq):
            return e  # as close as rounding lets h get
        if h < 0.0:
            lo = e
        else:
            hi = e
        z = _z(e, m, a)
        dens = math.exp(-0.5 * z * z) / (a * e * math.sqrt(2.0 * math.pi))
        slope = (e - g) * dens
        nxt = e - h / slope if slope > 0.0 else 0.5 * (lo + hi)
        if not (lo < nxt < hi):
            nxt = 0.5 * (lo + hi)
        # (any edge is valid: the caller measures the residual of the one returned)
        if abs(nxt - e) <= 4.0 * _U * e or hi - lo <= 4.0 * _U * hi:
            return nxt
        e = nxt
    return e


@called_with(f64, f64, f64, i64, f64)
@njit(cache=True, nogil=True)
def merged_law(m, a, d, n, rho_cap):
    """Conditional-mean merge of ``Y`` restricted to ``(0, e_last]`` onto ``g_k = k d``.

    Returns ``(mass, rho, top, err, err_g)``: ``mass[k]`` the Q-mass of the cell whose
    conditional mean is ``g_k`` (to rounding), ``rho`` a bound on
    ``|E[Y | cell] - g_k|`` over the kept cells, ``top`` the last edge (the
    mass above it is left out) and ``err`` an l2 bound on the masses' rounding.  A cell whose residual bound exceeds
    ``rho_cap`` is left out too (a dominated pair may drop outputs).  The
    residual is relative, ``|E[Y | cell] - g_k| <= rho g_k``, so that the sum's
    conditional mean is within a factor ``1 +- rho`` of the grid sum.
    """
    mass = np.zeros(n + 1)
    rho = 0.0
    err2 = 0.0
    errg2 = 0.0
    e0 = 0.0
    top = n * d
    for k in range(1, n + 1):
        g = k * d
        # a cell whose grid point lies just above its left edge would close
        # just above it too (a tiny cell, badly resolved); the next point
        # then gets a wide one.  Aiming only at points at least d/4 above the
        # left edge keeps every half-width in [d/4, 5d/4) where the density
        # is smooth on the scale d.
        if g - e0 < 0.25 * d:
            continue
        e = _solve_edge(e0, g, m, a, top)
        if e < 0.0:
            break
        qm, eq, gm, eg = _cell(e0, e, m, a)
        # (qm g can underflow where qm > 0: such a cell is left out, as a
        # dominated pair may drop outputs)
        if qm * g > 0.0:
            r = (abs(gm - g * qm) + eg + g * eq + 4.0 * _U * (abs(gm) + g * qm)) / (qm * g)
            if r <= rho_cap:
                mass[k] = qm
                rho = max(rho, r)
                err2 += eq * eq
                errg2 += (g * eq) * (g * eq)
        e0 = e
    return mass, rho, e0, math.sqrt(err2), math.sqrt(errg2)


@called_with(F64, F64, F64, i64, f64, f64)
@njit(cache=True, nogil=True)
def merge_half(q, p, dev, width_cap, e_in, unit):
    """Merge a law on ``i d`` onto ``2 j d`` with (nearly) exact conditional means.

    A left-to-right sweep fills one bucket per coarse point ``c``: atoms below
    ``c`` pull the bucket's mean down, atoms above push it up, and the atom
    that would overshoot is split so that the bucket's mean is ``c`` (a
    randomised post-processing: each atom goes to one or two buckets, with
    the same split for ``q``, ``p`` and ``dev``).  Returns ``(q', p', dev',
    widest)``.

    ``dev[i]`` bounds ``|m_i - v_i| Q_i`` (``m_i`` the atom's true conditional
    mean, ``v_i`` its value, ``Q_i`` its exact Q-mass; in units of ``unit``
    times the index, i.e. absolute), and so does ``dev'`` for the buckets:
    the split is computed from the given ``q``, which is within ``e_in`` of
    the exact law entrywise, so applied to the exact law a bucket's
    ``sum_i f_i Q_i (v_i - c)`` is at most ``e_in sum_i f_i |i - c|`` (plus the
    rounding of the running sums) instead of 0, and ``sum_i f_i Q_i |m_i -
    v_i| <= sum_i f_i dev_i``.  ``widest`` is the most atoms any bucket took
    from.  A last bucket that cannot close (its mean stays below its point,
    at the window's end) is dropped, and so is one that takes from more than
    ``width_cap`` atoms (where the law is sparse): a dominated pair may drop
    outputs.
    """
    n = q.size
    m = (n + 1) // 2 + 1
    qo = np.zeros(m)
    po = np.zeros(m)
    do = np.zeros(m)
    widest = 1
    i = 0
    rq = q[0]
    rp = p[0]
    rd = dev[0]
    while i < n:
        first = i
        c = (i + 1) // 2 * 2  # first coarse point at or above atom i
        mq = 0.0
        mp = 0.0
        md = 0.0
        h = 0.0  # sum of mass * (v - c), v in units of d
        habs = 0.0
        fdist = 0.0  # sum of fraction * |v - c|
        closed = False
        while i < n:
            dv = float(i - c)
            if dv > 0.0 and h + rq * dv >= 0.0:
                f = -h / (rq * dv) if h < 0.0 else 0.0
                f = min(max(f, 0.0), 1.0)
                mq += f * rq
                mp += f * rp
                md += f * rd
                habs += abs(f * rq) * dv
                # (the fraction of the whole atom: f of what the last bucket left)
                fa = min(max(f * rq / q[i], 0.0), 1.0) if q[i] != 0.0 else 1.0
                fdist += fa * dv
                rq -= f * rq
                rp -= f * rp
                rd -= f * rd
                closed = True
                break
            mq += rq
            mp += rp
            md += rd
            h += rq * dv
            habs += abs(rq * dv)
            fa = min(max(rq / q[i], 0.0), 1.0) if q[i] != 0.0 else 1.0
            fdist += fa * abs(dv)
            i += 1
            if i < n:
                rq = q[i]
                rp = p[i]
                rd = dev[i]
        width = i - first + 1
        if closed and width <= width_cap:
            qo[c // 2] += mq
            po[c // 2] += mp
            do[c // 2] += abs(md) * (1.0 + 8.0 * _U) + unit * (e_in * fdist + 16.0 * _U * (habs + abs(mq) * c))
            widest = max(widest, width)
    return qo, po, do, widest


@called_with(f64, f64, f64, i64)
@njit(cache=True, nogil=True)
def centred_cells(m, a, d, n):
    """Q-mass and P-mass (partial mean) of the cells ``((k - 1/2) d, (k + 1/2) d]``, ``k = 0..n``.

    Revealing only the cell of ``Y`` is a post-processing; the marked
    coordinate's law of the cell is ``E[Y; cell]`` (cell 0 is ``(0, d/2]``;
    what lies above the last cell is left out).  Returns ``(q, p, eq, ep)``
    with ``eq``, ``ep`` bounds on each mass's rounding (each difference of
    ``Phi`` is taken on one side of the median, so the tails keep their
    relative accuracy).
    """
    q = np.zeros(n + 1)
    p = np.zeros(n + 1)
    eq = np.zeros(n + 1)
    ep = np.zeros(n + 1)
    ya = 0.0
    for k in range(n + 1):
        yb = (k + 0.5) * d
        qm, e1, gm, e2 = _cell(ya, yb, m, a)
        q[k] = qm
        p[k] = gm
        eq[k] = e1
        ep[k] = e2
        ya = yb
    return q, p, eq, ep


@called_with(f64, f64, F64)
@njit(cache=True, nogil=True)
def spread_on(m, a, g):
    """Mean-preserving spread of ``Y`` restricted to ``[g_0, g_n]`` onto the points ``g`` (any
    increasing grid, e.g. geometric), rounded up as in :func:`spread_law`.

    The cell ``[g_k, g_{k+1}]`` of mass ``Q`` and partial mean ``M`` sends
    ``(M - g_k Q)/(g_{k+1} - g_k)`` to ``g_{k+1}`` and the rest to ``g_k``.
    """
    n = g.size - 1
    mass = np.zeros(n + 1)
    for k in range(n):
        _spread_cell(mass, k, g[k], g[k + 1], g[k + 1] - g[k], m, a)
    return mass


@called_with(f64, f64, F64)
@njit(cache=True, nogil=True)
def cells_on(m, a, g):
    """Q-mass and partial mean of each cell ``(g_k, g_{k+1}]`` of ``Y``, with rounding bounds:
    ``(q, eq, p, ep)``, ``p_k = E[Y; cell k]``."""
    n = g.size - 1
    q = np.zeros(n)
    p = np.zeros(n)
    eq = np.zeros(n)
    ep = np.zeros(n)
    for k in range(n):
        qm, e1, gm, e2 = _cell(g[k], g[k + 1], m, a)
        q[k] = qm
        p[k] = gm
        eq[k] = e1
        ep[k] = e2
    return q, eq, p, ep


@called_with(F64, f64, F64, F64, f64, f64, i64, i64, i64)
@njit(cache=True, nogil=True)
def sum_spread_geometric(r, dr, hv, hm, g0, log_ratio, n_out, lo, hi):
    """The law of ``R + H`` (``R`` on ``k dr`` with masses ``r``, ``H`` on the points ``hv``
    with masses ``hm``, independent) spread onto the geometric grid ``g_i = g0 e^{i log_ratio}``,
    ``i = 0..n_out-1``: its entries ``lo <= i < hi`` (the others 0).  Returns ``(g, mass, over)``.

    Each sum ``s = k dr + hv_j`` sends ``(s - g_i)/(g_{i+1} - g_i)`` of its mass
    to ``g_{i+1}`` and the rest to ``g_i`` (a mean-preserving spread: every
    point of the product law is spread on its own).  Every share is rounded
    up by ``slack`` (relative to the product): the computed fraction is within
    a few ulps of ``s`` over the spacing, ``~u / (e^{log_ratio} - 1)``, so each
    share is at least the exact spread's.  The grid ``g`` returned is the one
    the fractions were computed on.  Callers pass ``hv >= g0``; the mass of
    sums beyond the last point is ``over`` (counted where ``hi = n_out``).
    Additions: ``mass`` entries are sums of at most ``r.size * hv.size``
    positive terms (the caller rounds them up by that many ulps).

    Ranges ``[0, m)`` and ``[m, n_out)`` computed apart (two threads) give the
    whole range's entries bit for bit: each entry takes the same terms in the
    same order (``j``, then ``k``), and a pair's cell is the same wherever its
    ``j``'s scan starts (the first cell at or above the scan's start whose upper
    point is at least ``s``), so a range's scan of ``j`` starts at the first ``k``
    that reaches it and ends where it leaves it.
    """
    g = np.empty(n_out)
    for i in range(n_out):
        g[i] = g0 * math.exp(i * log_ratio)
    out = np.zeros(n_out)
    over = 0.0
    ratio = math.exp(log_ratio)
    slack = 32.0 * _U / (ratio - 1.0) + 8.0 * _U
    for j in range(hv.size):
        hj = hv[j]
        mj = hm[j]
        if mj == 0.0:
            continue
        # (s grows with k: the cell holding it is found by stepping on from the last one)
        i = int(math.floor(math.log(max(hj, g0) / g0) / log_ratio))
        i = min(max(i, 0), n_out - 1)
        while i > 0 and g[i] > hj:
            i -= 1
        k0 = 0
        if lo > 0 and i < lo - 1:
            # the first k whose sum lies above g[lo - 1] (its cell is then lo - 1 or above)
            k0 = max(0, int((g[lo - 1] - hj) / dr) - 1)
            while k0 < r.size and k0 * dr + hj <= g[lo - 1]:
                k0 += 1
            while k0 > 0 and (k0 - 1) * dr + hj > g[lo - 1]:
                k0 -= 1
            i = lo - 1
        for k in range(k0, r.size):
            w = r[k] * mj
            if w == 0.0:
                continue
            s = k * dr + hj
            while i < n_out - 1 and g[i + 1] < s:
                i += 1
            if i >= hi:
                break
            if i >= n_out - 1:
                over += w
                continue
            f = (s - g[i]) / (g[i + 1] - g[i])
            if f < 0.0:
                f = 0.0
            elif f > 1.0:
                f = 1.0
            if i >= lo:
                out[i] += w * (1.0 - f + slack)
            if i + 1 < hi:
                out[i + 1] += w * (f + slack)
    return g, out, over


@njit(cache=True, nogil=True)
def _block_table(x):
    """Sums of ``x`` over the aligned blocks ``[b 2^l, (b + 1) 2^l)``, level by level
    (level ``l`` starts at ``offsets[l]``); each a binary tree of additions."""
    n = x.size
    levels = 1
    while (1 << levels) <= n:
        levels += 1
    offsets = np.empty(levels + 1, np.int64)
    total = 0
    for lev in range(levels):
        offsets[lev] = total
        total += n >> lev
    offsets[levels] = total
    table = np.empty(total)
    table[:n] = x
    for lev in range(1, levels):
        a, b = offsets[lev - 1], offsets[lev]
        for i in range(n >> lev):
            table[b + i] = table[a + 2 * i] + table[a + 2 * i + 1]
    return table, offsets, levels


@njit(cache=True, nogil=True, inline="always")
def _range_sum(table, offsets, levels, lo, hi):
    """``sum(x[lo:hi])`` from at most ``2 log2 n`` aligned blocks of :func:`_block_table`."""
    s = 0.0
    while lo < hi:
        lev = 0
        while lev + 1 < levels and (lo & ((1 << (lev + 1)) - 1)) == 0 and lo + (1 << (lev + 1)) <= hi:
            lev += 1
        s += table[offsets[lev] + (lo >> lev)]
        lo += 1 << lev
    return s


@called_with(F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, f64, f64, i64)
@njit(cache=True, nogil=True)
def group_pairs(rq_lo, rq_hi, rp_lo, rp_hi, rv, hq_lo, hq_hi, hp_lo, hp_hi, hv, g0, log_ratio, n_out):
    """Products of two independent laws' masses, summed by a geometric group of ``rv_k + hv_j``.

    Group ``i`` holds the pairs with ``rv_k + hv_j`` below ``b_i = g0 e^{(i + 1) log_ratio}``
    and at or above ``b_{i - 1}`` (the last group: everything above; a deterministic
    grouping: revealing only the group is a post-processing).  ``rv`` must be
    non-decreasing.  Returns the sums in the order ``(A_lo, A_hi, B1_lo, B1_hi, B2_lo,
    B2_hi)`` with ``A = sum rq hq``, ``B1 = sum rq hp``, ``B2 = sum rp hq``, each from the
    lower or upper bounds of its factors (lower bounds of ``rq``, ``rp`` taken at least 0).

    For each ``j`` the ``k`` of one group form a run (``rv_k + hv_j`` grows with ``k``),
    found by bisection; its factor sums come from aligned block sums, so a run costs
    ``O(log n)`` instead of its length.  Round-off: every term is a product of
    non-negative numbers summed along a tree of depth at most ``3 log2 n + m + 1``, far
    below the ``n m`` terms the caller rounds each sum outward by.
    """
    a_lo = np.zeros(n_out)
    a_hi = np.zeros(n_out)
    b1_lo = np.zeros(n_out)
    b1_hi = np.zeros(n_out)
    b2_lo = np.zeros(n_out)
    b2_hi = np.zeros(n_out)
    n = rv.size
    if n == 0:
        return a_lo, a_hi, b1_lo, b1_hi, b2_lo, b2_hi
    bound = np.empty(n_out)
    for i in range(n_out):
        bound[i] = g0 * math.exp((i + 1) * log_ratio)
    t_ql, offsets, levels = _block_table(np.maximum(rq_lo, 0.0))
    t_qh = _block_table(rq_hi)[0]
    t_pl = _block_table(np.maximum(rp_lo, 0.0))[0]
    t_ph = _block_table(rp_hi)[0]
    i0 = 0
    for j in range(hv.size):
        hj = hv[j]
        # (the group of rv_0 + hv_j grows with j: stepped on from the last one)
        while i0 < n_out - 1 and rv[0] + hj >= bound[i0]:
            i0 += 1
        i = i0
        k = 0
        while k < n:
            kb = n
            if i < n_out - 1:
                # the first k' > k with rv_k' + hv_j >= b_i: galloping, then bisection
                lo, hi, step = k, k + 1, 1
                while hi < n and rv[hi] + hj < bound[i]:
                    lo = hi
                    step *= 2
                    hi = k + step
                hi = min(hi, n)
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if rv[mid] + hj < bound[i]:
                        lo = mid
                    else:
                        hi = mid
                kb = hi
            s_ql = _range_sum(t_ql, offsets, levels, k, kb)
            s_qh = _range_sum(t_qh, offsets, levels, k, kb)
            s_pl = _range_sum(t_pl, offsets, levels, k, kb)
            s_ph = _range_sum(t_ph, offsets, levels, k, kb)
            a_lo[i] += s_ql * hq_lo[j]
            a_hi[i] += s_qh * hq_hi[j]
            b1_lo[i] += s_ql * hp_lo[j]
            b1_hi[i] += s_qh * hp_hi[j]
            b2_lo[i] += s_pl * hq_lo[j]
            b2_hi[i] += s_ph * hq_hi[j]
            k = kb
            if k < n:
                s = rv[k] + hj
                while i < n_out - 1 and s >= bound[i]:
                    i += 1
    return a_lo, a_hi, b1_lo, b1_hi, b2_lo, b2_hi


@njit(cache=True, nogil=True)
def _offset_runs(hv, n):
    """Starts (ascending, the first at ``-n``) of the runs of partner offsets ``d = j - i <= 0``
    whose sums ``hv_{i+1} + hv_{j+1}`` round up to one point of a geometric grid from
    ``2 hv_0`` with the ratio of ``hv`` (``hv_{i+1} (1 + e^{d lr})`` lies ``i + 1 + c(d)``
    points up, ``c(d) = ceil((log(1 + e^{d lr}) - log 2) / lr)``): grouping only, the caller
    rounds each run up to its largest sum."""
    lr = math.log(hv[1] / hv[0]) if n >= 1 and hv[1] > hv[0] > 0.0 else 1.0
    depth = min(n, int(math.ceil((50.0 + math.log(1.0 / min(lr, 1.0)) + 1.0) / lr)))
    starts = np.empty(depth + 2, dtype=np.int64)
    m = 0
    prev = math.ceil((math.log1p(1.0) - math.log(2.0)) / lr)
    for e in range(1, depth + 1):  # d = -e
        c = math.ceil((math.log1p(math.exp(-e * lr)) - math.log(2.0)) / lr)
        if c != prev:
            starts[m] = -e + 1  # (a run from -e + 1 up to the previous start)
            m += 1
            prev = c
    starts[m] = -n
    m += 1
    return starts[:m][::-1].copy()


@called_with(F64, F64, F64, F64)
@njit(cache=True, nogil=True)
def sum_round_up(ca, cb, hv, g):
    """The law of ``A + B`` (independent; ``A`` in cell ``(hv_i, hv_{i+1}]`` with mass ``ca[i]``,
    ``B`` likewise with ``cb``), each cell's value rounded up to ``hv_{i+1}`` and each sum
    up to a point of the increasing grid ``g`` at or above it: a law that is
    stochastically larger.  Sums beyond ``g``'s last point go to ``over``.
    Returns ``(mass on g, over)``, each entry rounded up by its number of terms.

    Pairs are taken in runs (:func:`_offset_runs`): the partners ``j`` of one ``i`` whose sums
    land on one point of a geometric ``g`` of ``hv``'s ratio, each run at its largest sum and
    with its mass from suffix sums of the cells (summed from the top, where they are
    smallest), rounded up by the suffix sums' own error bound, ``2 (n - j + 1) u`` of the
    larger one.  About ``log(2) / lr`` runs a coordinate where there are ``n`` pairs."""
    n = ca.size
    out = np.zeros(g.size)
    terms = np.zeros(g.size + 1)
    over = 0.0
    sa = np.zeros(n + 1)
    sb = np.zeros(n + 1)
    for i in range(n - 1, -1, -1):
        sa[i] = sa[i + 1] + ca[i]
        sb[i] = sb[i + 1] + cb[i]
    starts = _offset_runs(hv, n)
    runs = starts.size
    for side in range(2):  # partners j <= i of each i, then partners i < j of each j
        x, sy = (ca, sb) if side == 0 else (cb, sa)
        for i in range(n):
            if x[i] == 0.0:
                continue
            k = np.searchsorted(g, hv[i + 1])  # (every sum of i's is above hv_{i+1})
            for r in range(runs):
                d_hi = starts[r + 1] - 1 if r + 1 < runs else 0
                if side == 1 and d_hi > -1:
                    d_hi = -1  # (the pairs j = i were the first side's)
                lo = i + starts[r]
                hi = i + d_hi
                if hi < 0 or d_hi < starts[r]:
                    continue
                if lo < 0:
                    lo = 0
                mass = sy[lo] - sy[hi + 1]
                w = x[i] * (max(mass, 0.0) + 2.0 * (n - lo + 1) * _U * sy[lo])
                if w == 0.0:
                    continue
                v = hv[i + 1] + hv[hi + 1]
                while k < g.size and g[k] < v:
                    k += 1
                if k >= g.size:
                    over += w
                else:
                    out[k] += w
                terms[k] += 1.0
    # (a sum of m non-negative products, each within 2u: within 2 (m + 2) u)
    for k in range(g.size):
        out[k] *= 1.0 + 2.0 * (terms[k] + 2.0) * _U
    return out, over * (1.0 + 2.0 * (terms[g.size] + 2.0) * _U)


@called_with(F64, F64, F64, F64, i64)
@njit(cache=True, nogil=True)
def bracket_convolve(a_lo, a_hi, b_lo, b_hi, cut):
    """Entries ``0 .. cut`` of the convolutions ``a_lo * b_lo`` and ``a_hi * b_hi`` (non-negative
    inputs), summed directly: ``(lo, hi)``.

    Each entry is a sum of at most ``min(a.size, b.size)`` non-negative products, whatever the
    order, so its relative rounding is below that many ulps plus one (the caller widens the
    pair by it); only the pairs ``i + j <= cut`` are formed, half the work of a full
    convolution truncated afterwards.
    """
    na, nb = a_lo.size, b_lo.size
    n = min(cut + 1, na + nb - 1) if na > 0 and nb > 0 else 0
    lo = np.zeros(max(n, 0))
    hi = np.zeros(max(n, 0))
    _axpy_rows(lo, a_lo, b_lo, n)
    _axpy_rows(hi, a_hi, b_hi, n)
    return lo, hi


@njit(cache=True, nogil=True)
def _axpy_rows(out, a, b, n):
    """``out[i + j] += a[i] b[j]`` for ``i + j < n`` (one row of ``b`` per entry of ``a``)."""
    nb = b.size
    for i in range(min(a.size, n)):
        x = a[i]
        if x == 0.0:
            continue
        top = min(nb, n - i)
        for j in range(top):
            out[i + j] += x * b[j]
