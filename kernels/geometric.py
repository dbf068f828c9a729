"""Sums of two independent non-negative laws on one geometric grid (served through ``pld.kernels``).

The grid is ``g_0 = 0`` and ``g_k = g_1 e^{(k - 1) h}`` for ``k >= 1``.  For random
allocation's short rounds at small noise (:mod:`pld.mechanisms.allocation.geometric`) the
law of ``S = Y_1 + ... + Y_t`` is built by pairwise sums of partial sums:

* :func:`geometric_sum_spread`: every sum ``g_i + g_j`` of the two laws' points is spread
  onto its two neighbouring grid points, preserving its mass and its mean (the sum of two
  independent spreads, spread again: larger in the convex order than the true sum);
* :func:`geometric_sum_merge`: atoms ``(mass, mass x value)`` per cell; the sums of two
  atoms are merged into the cell holding their value (a conditional expectation:
  smaller in the convex order, a post-processing).

A pair ``(i, j)`` with ``g_i <= g_j (e^h - 1) e^{-h}`` adds less than one cell to ``g_j``:
those pairs are handled together from prefix sums of mass and first moment (``band``
is how many cells below ``j`` are summed otherwise).  Within the band the pairs of one
``j`` whose sums land in one cell form a segment of offsets ``i - j`` that does not
depend on ``j`` (:func:`_segments`: the grid is geometric), and a segment's mass and
moment come from windows of ``2^p`` entries (:func:`_windows`, sums of non-negative
terms, so relatively accurate where prefix differences would not be): about
``log(2)/h`` segments a point instead of ``band ~ log(1/h)/h`` pairs, so a sum costs
``O(n log(2)/h)`` rather than ``O(n^2)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, called_with, f64, i64

_U = 2.0 ** -53


@njit(cache=True, nogil=True)
def _prefix(x, g):
    """Prefix sums of the masses and first moments: ``pm[i] = sum_{l < i} x_l``,
    ``px[i] = sum_{l < i} x_l g_l``."""
    n = x.size
    pm = np.zeros(n + 1)
    px = np.zeros(n + 1)
    for i in range(n):
        pm[i + 1] = pm[i] + x[i]
        px[i + 1] = px[i] + x[i] * g[i]
    return pm, px


@njit(cache=True, nogil=True)
def _segments(log_ratio, band, shift=0.0, exact=True):
    """The pairs ``(i, j)``, ``1 <= j - band <= i <= j``, grouped by the cell their sum lands in.

    On the geometric part of the grid ``g_i / g_j = e^{dh}`` (``d = i - j``), so
    ``g_i + g_j = g_j (1 + e^{dh})`` lies ``rho(d) = log(1 + e^{dh}) / h`` cells above
    ``g_j``, whatever ``j``: the offsets ``d`` in ``[start, stop)`` of a segment put every
    sum in cell ``j + r``.  An offset whose ``rho`` is within ``1e-6`` of an integer (its
    sum within ``1e-6 h`` of a grid point, where the grid's own rounding, ``~40 u`` relative,
    could decide the cell) is a segment of its own with ``r = -1``: done pair by pair.
    Returns ``(start, stop, r)``.  ``shift``: the larger point at ``g_j (1 + shift)``
    instead (the merge's atoms lie inside their cells); ``exact=False``: no pair-by-pair
    segments (a merge may group any atoms).
    """
    nd = band + 1
    start = np.empty(nd, np.int64)
    stop = np.empty(nd, np.int64)
    cell = np.empty(nd, np.int64)
    m = 0
    prev = -2
    for idx in range(nd):
        d = idx - band
        rho = math.log1p(shift + math.exp(d * log_ratio)) / log_ratio
        r = int(math.floor(rho))
        if exact and abs(rho - math.floor(rho + 0.5)) < 1e-6:
            r = -1
        if r == prev and r >= 0:
            stop[m - 1] = d + 1
        else:
            start[m] = d
            stop[m] = d + 1
            cell[m] = r
            m += 1
        prev = r
    return start[:m], stop[:m], cell[:m]


@njit(cache=True, nogil=True)
def _windows(x, y, levels):
    """``w[0, p, i] = x_i + ... + x_{i + 2^p - 1}`` and ``w[1, p, i]`` the same of ``y`` (cut
    at the end), by pairs of the level below: each a sum of non-negative terms, its relative
    rounding below ``p u``.  (Laid out by level, then ``i``: the callers read one window of
    a segment for ``j``, ``j + 1``, ..., so consecutive reads share cache lines.)"""
    n = x.size
    w = np.zeros((2, levels + 1, n))
    for i in range(n):
        w[0, 0, i] = x[i]
        w[1, 0, i] = y[i]
    for p in range(1, levels + 1):
        half = 1 << (p - 1)
        for c in range(2):
            for i in range(n):
                if i + half < n:
                    w[c, p, i] = w[c, p - 1, i] + w[c, p - 1, i + half]
                else:
                    w[c, p, i] = w[c, p - 1, i]
    return w


@njit(cache=True, nogil=True)
def _range_sum(w, start, stop, levels):
    """``(x_start + ... + x_{stop-1}, the same of y)`` from the windows: at most ``levels + 1``
    of them, so its relative rounding is below ``2 (levels + 1) u``."""
    total_x = 0.0
    total_y = 0.0
    p = levels
    i = start
    while i < stop:
        while (1 << p) > stop - i:
            p -= 1
        total_x += w[0, p, i]
        total_y += w[1, p, i]
        i += 1 << p
    return total_x, total_y


@njit(cache=True, nogil=True)
def _levels(start, stop):
    """Window levels that cover the longest segment."""
    longest = 1
    for m in range(start.size):
        longest = max(longest, stop[m] - start[m])
    p = 0
    while (1 << p) < longest:
        p += 1
    return p


@njit(cache=True, nogil=True)
def _terms(start, stop, levels):
    """Each segment as windows: ``(level, offset)`` for ``ptr[m] <= q < ptr[m + 1]``, the
    windows :func:`_range_sum` takes (they depend on the length only)."""
    ptr = np.zeros(start.size + 1, np.int64)
    for m in range(start.size):
        count = 0
        length = stop[m] - start[m]
        while length:
            count += length & 1
            length >>= 1
        ptr[m + 1] = ptr[m] + count
    lev = np.empty(ptr[-1], np.int64)
    at = np.empty(ptr[-1], np.int64)
    for m in range(start.size):
        q = ptr[m]
        i = start[m]
        p = levels
        while i < stop[m]:
            while (1 << p) > stop[m] - i:
                p -= 1
            lev[q] = p
            at[q] = i
            q += 1
            i += 1 << p
    return ptr, lev, at


@njit(cache=True, nogil=True, inline="always")
def _segment_sums(wx, wy, lev, at, q0, q1, j):
    """Mass and moment of a whole segment at ``j``: its windows ``q0 .. q1 - 1`` (:func:`_terms`).
    (Inlined: as a call, with the windows' array passed whole, it took over half of a sum.)"""
    m0 = 0.0
    m1 = 0.0
    for q in range(q0, q1):
        m0 += wx[lev[q], j + at[q]]
        m1 += wy[lev[q], j + at[q]]
    return m0, m1


@njit(cache=True, nogil=True)
def _spread_pass(big, small, pm, px, g, log_ratio, band, inclusive, out, seg_start, seg_stop, seg_cell):
    """Pairs with the larger point from ``big`` (index ``j``) and the smaller from ``small``
    (index ``i <= j``, or ``< j`` unless ``inclusive``); returns the mass past the last point.

    The pairs of one ``j`` that land in one cell are spread together (:func:`_segments`):
    the spread of a sum onto the two ends of its cell is linear in the sum, so a
    segment's shares follow from its mass and first moment (:func:`_windows`), the same
    shares as pair by pair up to rounding."""
    n = g.size
    over = 0.0
    # (the rounding of a segment's shares: its sums' relative rounding (window sums, below
    # 2 (levels + 2) u) over the cell's relative width e^h - 1; and of a pair's fraction)
    levels = _levels(seg_start, seg_stop)
    slack = (8.0 * (levels + 8) * _U + 32.0 * _U) / math.expm1(log_ratio) + 8.0 * _U
    win = _windows(small, small * g, levels)
    ptr, lev, at = _terms(seg_start, seg_stop, levels)
    wx, wy = win[0], win[1]
    for j in range(n):
        bj = big[j]
        if bj == 0.0:
            continue
        lo = max(0, j - band)
        hi = j if inclusive else j - 1
        if lo > 0:
            # every g_i, i < lo, adds less than one cell: g_i + g_j in [g_j, g_{j+1})
            mass = pm[lo]
            if mass > 0.0:
                if j + 1 >= n:
                    over += bj * mass
                else:
                    # (g_{j+1} <= 2 g_j: the difference is exact)
                    f = px[lo] / (g[j + 1] - g[j])
                    f = min(f, mass)
                    # (px and pm are sums of up to n terms: f's rounding is below n u mass)
                    e = bj * mass * (slack + (n + 8) * _U)
                    out[j + 1] += bj * f + e
                    out[j] += bj * (mass - f) + e
        if lo == 0 and hi >= 0:
            # (the point 0 is not on the geometric part: its pair alone)
            over += _spread_pairs(bj, small, g, j, 0, 1, slack, out)
        if j >= 1:
            for sg in range(seg_start.size):
                a0 = max(j + seg_start[sg], 1)
                a1 = min(j + seg_stop[sg], hi + 1)
                if a1 <= a0:
                    if j + seg_start[sg] > hi:
                        break  # (segments run upwards: the rest lie above hi)
                    continue
                if seg_cell[sg] < 0:
                    over += _spread_pairs(bj, small, g, j, a0, a1, slack, out)
                    continue
                if a1 - a0 == seg_stop[sg] - seg_start[sg]:
                    m0, m1 = _segment_sums(wx, wy, lev, at, ptr[sg], ptr[sg + 1], j)
                else:
                    m0, m1 = _range_sum(win, a0, a1, levels)
                if m0 == 0.0:
                    continue
                k = j + seg_cell[sg]
                w = bj * m0
                if k + 1 >= n:
                    over += w
                    continue
                # (the segment's mean point, then its place in the cell; masses below ~1e-290
                # lose relative precision to underflow here as pair by pair)
                f = (m1 / m0 - (g[k] - g[j])) / (g[k + 1] - g[k])
                f = min(max(f, 0.0), 1.0)
                out[k] += w * (1.0 - f + slack)
                out[k + 1] += w * (f + slack)
    return over


@njit(cache=True, nogil=True)
def _spread_pairs(bj, small, g, j, i0, i1, slack, out):
    """The pairs ``(i, j)``, ``i0 <= i < i1``, one by one; returns the mass past the last point."""
    n = g.size
    over = 0.0
    k = j
    for i in range(i0, i1):
        w = bj * small[i]
        if w == 0.0:
            continue
        x = g[i] + g[j]
        while k > 0 and g[k] > x:
            k -= 1
        while k + 1 < n and g[k + 1] <= x:
            k += 1
        if k + 1 >= n:
            over += w
            continue
        f = (x - g[k]) / (g[k + 1] - g[k])
        f = min(max(f, 0.0), 1.0)
        out[k] += w * (1.0 - f + slack)
        out[k + 1] += w * (f + slack)
    return over


@called_with(F64, F64, F64, f64, i64)
@njit(cache=True, nogil=True)
def geometric_sum_spread(a, b, g, log_ratio, band):
    """The law of ``A + B`` (masses ``a``, ``b`` on the points ``g``, independent), each sum
    spread onto its neighbouring points.  Returns ``(mass, over)``.

    A sum ``x = g_i + g_j`` in ``[g_k, g_{k+1})`` sends ``(x - g_k)/(g_{k+1} - g_k)`` of its
    mass to ``g_{k+1}`` and the rest to ``g_k``; both shares are rounded up by a bound on
    the fraction's rounding (``~u / (e^h - 1)``), so every entry is at least the exact
    spread's share; ``over`` is the mass of sums past the last point.  Pairs
    ``g_i`` below ``g_j`` by more than ``band`` cells are spread from prefix sums (the
    caller picks ``band`` so that those sums stay in ``g_j``'s cell); the pairs of a segment
    (:func:`_segments`) are spread together: the spread is linear in the sum, so the
    segment's mass and first moment give the same shares, their rounding (window sums)
    covered by the shares' rounding up.  Additions: each entry is a sum of at most
    ``4 (log(2)/h + 3) (band + 2)`` non-negative terms (at most the pairs within a band of
    the cells within ``log(2)/h + 1`` below it, both passes; the caller rounds the masses
    up by that many ulps).
    """
    out = np.zeros(g.size)
    pma, pxa = _prefix(a, g)
    pmb, pxb = _prefix(b, g)
    seg = _segments(log_ratio, band)
    over = _spread_pass(b, a, pma, pxa, g, log_ratio, band, True, out, seg[0], seg[1], seg[2])
    over += _spread_pass(a, b, pmb, pxb, g, log_ratio, band, False, out, seg[0], seg[1], seg[2])
    return out, over


#: the merge's segment tables, by where the larger atom lies in its cell
_SHIFTS = 8


@njit(cache=True, nogil=True)
def _merge_tables(log_ratio, band):
    """Segments (:func:`_segments`) for atoms ``g_j (1 + s)``, ``s`` at the centres of
    ``_SHIFTS`` equal parts of ``[0, e^h - 1)``, concatenated: table ``b`` is segments
    ``tab[b] <= m < tab[b + 1]``; with their windows (:func:`_terms`) and levels."""
    width = math.expm1(log_ratio)
    parts = []
    tab = np.zeros(_SHIFTS + 1, np.int64)
    for b in range(_SHIFTS):
        st, sp, _ = _segments(log_ratio, band, (b + 0.5) * width / _SHIFTS, False)
        parts.append((st, sp))
        tab[b + 1] = tab[b] + st.size
    start = np.empty(tab[-1], np.int64)
    stop = np.empty(tab[-1], np.int64)
    for b in range(_SHIFTS):
        start[tab[b]:tab[b + 1]] = parts[b][0]
        stop[tab[b]:tab[b + 1]] = parts[b][1]
    levels = _levels(start, stop)
    ptr, lev, at = _terms(start, stop, levels)
    return start, stop, tab, ptr, lev, at, levels


@njit(cache=True, nogil=True)
def _merge_pass(bm, bv, sm, sv, pm, pv, g, band, inclusive, om, ov, tables):
    n = g.size
    over = 0.0
    seg_start, seg_stop, tab, ptr, lev, at, levels = tables
    win = _windows(sm, sv, levels)
    wx, wy = win[0], win[1]
    width = math.expm1(math.log(g[2] / g[1]))
    for j in range(n):
        mj = bm[j]
        if mj == 0.0:
            continue
        lo = max(0, j - band)
        hi = j if inclusive else j - 1
        if lo > 0 and pm[lo] > 0.0:
            # all cells below lo merged with cell j into one atom (any merge is dominated)
            m = mj * pm[lo]
            v = mj * pv[lo] + bv[j] * pm[lo]
            k = j + 1 if (j + 1 < n and v >= g[j + 1] * m) else j
            om[k] += m
            ov[k] += v
        # the atoms of one segment (their sums in about one cell) merged into one first;
        # the segments of the table for where this atom lies in its cell
        k = j
        b = 0
        if j >= 1:
            b = min(max(int((bv[j] / mj / g[j] - 1.0) / width * _SHIFTS), 0), _SHIFTS - 1)
        for sg in range(tab[b], tab[b + 1]):
            a0 = max(j + seg_start[sg], 0)
            a1 = min(j + seg_stop[sg], hi + 1)
            if a1 <= a0:
                if j + seg_start[sg] > hi:
                    break
                continue
            if a1 - a0 == seg_stop[sg] - seg_start[sg]:
                mi, vi = _segment_sums(wx, wy, lev, at, ptr[sg], ptr[sg + 1], j)
            else:
                mi, vi = _range_sum(win, a0, a1, levels)
            if mi == 0.0:
                continue
            m = mj * mi
            if m == 0.0:
                continue  # (underflow: a sub-pair drops it)
            v = mj * vi + bv[j] * mi
            x = v / m
            while k > 0 and g[k] > x:
                k -= 1
            while k + 1 < n and g[k + 1] <= x:
                k += 1
            if k + 1 >= n:
                over += m
                continue
            om[k] += m
            ov[k] += v
    return over


@called_with(F64, F64, F64, F64, F64, i64)
@njit(cache=True, nogil=True)
def geometric_sum_merge(am, av, bm, bv, g, band):
    """The law of ``A + B`` for laws given as atoms per cell (``am`` masses, ``av`` masses
    times values; cell ``k`` holds values in ``[g_k, g_{k+1})``), merged per cell.
    Returns ``(mass, moment, over)``.

    Every pair of atoms becomes one atom (mass ``am_i bm_j``, moment
    ``am_i bv_j + bm_j av_i``) added to the cell holding its value; the pairs with
    ``i < j - band`` are merged into one atom per ``j`` first, and so are those of a
    segment (:func:`_merge_tables`: the offsets whose sums land in one cell, for where
    the atom ``j`` lies in its cell; their masses and moments from window sums, each with
    relative rounding below ``2 (log2(band) + 2) u``).  Summing atoms into a
    cell is a conditional expectation of the sum, whatever the cells: the
    result is smaller in the convex order than the exact sum of the two laws.
    ``over``: the mass of sums past the last point (dropped by the caller: a
    sub-pair).  Every output is a sum of at most ``4 (log(2)/h + 3) (band + 2)`` products of
    two inputs and of the far groups' prefix sums of ``n`` terms (the caller carries the
    relative rounding).
    """
    n = g.size
    om = np.zeros(n)
    ov = np.zeros(n)
    pma = np.zeros(n + 1)
    pva = np.zeros(n + 1)
    pmb = np.zeros(n + 1)
    pvb = np.zeros(n + 1)
    for i in range(n):
        pma[i + 1] = pma[i] + am[i]
        pva[i + 1] = pva[i] + av[i]
        pmb[i + 1] = pmb[i] + bm[i]
        pvb[i + 1] = pvb[i] + bv[i]
    # (the segments of the grid's own ratio: any grouping of atoms is a merge, so the
    # grid's rounding only moves atoms between neighbouring groups)
    tables = _merge_tables(math.log(g[2] / g[1]), band)
    over = _merge_pass(bm, bv, am, av, pma, pva, g, band, True, om, ov, tables)
    over += _merge_pass(am, av, bm, bv, pmb, pvb, g, band, False, om, ov, tables)
    return om, ov, over
