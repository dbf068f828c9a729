"""The dominated side's centred merge (:func:`optimistic_merge_centred`): passes 1 and 2.

See :mod:`pld.kernels.discretize` for the two discretisations; pass 3, which
settles buckets the downward pass left short, is in :mod:`pld.kernels.merge_settle`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, I64, called_with, f64
from .merge_settle import _SETTLE_COST, _U, _margin, _settle_short, _swallow

#: cells above the lowest one with mass that the dry run of the downward
#: pass covers (it looks for buckets the lowering cannot serve)
_DRY_RUN_CELLS = 4096


@called_with(F64, F64, I64, f64, F64, F64, f64, f64)
@njit(cache=True, nogil=True, error_model="numpy")
def optimistic_merge_centred(log_p, log_q, points, h, loss_err, mass_err, var_weight, free_below):
    """Dominated discretisation of a continuous part cut into centred cells.

    Parameters
    ----------
    log_p, log_q : float64[n + 1]
        log P- and Q-mass of the cells centred on the points
        ``l_i = points_i h`` (``i < n``; cell ``i`` ends half way to the next
        point), then of everything above the last cell.
    points : int64[n]
        Increasing grid indices of the points (consecutive on a uniform grid;
        further apart where the law has negligible mass).
    h : float
        Grid spacing.
    loss_err, mass_err : float64[n + 1]
        Bounds on the absolute error of each cell's computed loss
        ``log_p - log_q`` and of its ``log_p`` (``pld.engine.discretize._cells_with_errors``
        and the default it falls back to).  A cell whose error is not finite is
        dropped (safe on this side).
    var_weight : float
        What a unit of loss variance removed per step costs next to a unit of
        mean loss removed per step (about ``z / (2 sd)`` with ``sd`` the
        standard deviation of the composed loss and ``z`` the query's distance
        from its mean in those units; see ``pld.engine.discretize.VAR_Z``).  It only
        steers choices between valid merges (where the bottom switches, and
        for one step whether a lift is worth it), never validity.
    free_below : float
        Loss (relative to the points' origin, like ``points * h``) below which
        rounding a bucket down costs nothing: ``-inf`` in general; a single
        step asked at ``eps >= 0`` only has its delta changed by mass above
        ``eps``, so there (shifted to the kernel's frame) its bulk below 0 is
        rounded down rather than lifted with the tail, and lifts are undone
        where rounding costs less (see pass 1).  Steers choices only.

    Returns
    -------
    mass : float64[n]
        P-mass at each point.

    Notes
    -----
    Cell ``i`` has merged loss ``L_i = log P_i/Q_i``, within ``O(h^2)`` of
    ``l_i`` wherever the law is smooth on the scale of ``h``.  Bucket ``i``
    starts from what is left of cell ``i``:

    * pass 1 (upwards): if ``L_i < l_i`` it takes, from the next cells, the
      fraction ``f = P_B expm1(l_i - m_B) / (-P_j expm1(l_i - L_j))`` that lifts
      its merged loss ``m_B`` exactly to ``l_i`` (enlarged by 1e-12), whole
      cells first if one is not enough;
    * pass 2 (downwards): if ``L_i >= l_i`` it takes, from the cells below, the
      fraction that lowers it exactly to ``l_i`` (reduced by 1e-12).

    Every outcome is thus sent to its own bucket or to one nearby with fixed
    probabilities: a randomised post-processing, so the merged pair is
    dominated by the true one.  Targets carry a margin of ``1e-11 max(1,
    |l|)`` for the error of the cell masses, so each merged loss is at least
    its grid point, where the bucket's mass is placed; a bucket that cannot
    reach its target (nothing left to take) is placed at the highest grid
    point its merged loss clears.  Rounding losses down only lowers every
    composed delta.

    Buckets are one cell wide and centred, so merging removes about
    ``h^2/12`` of loss variance per step.  Merging whole grid cells
    ``[l_i, l_{i+1}]`` greedily, each bucket aimed at the first grid point
    above it, needs two cells per bucket, ``h^2/3``: four times as much, and
    twice the ``h^2/6`` the connect-the-dots spread adds on the dominating
    side, so the dominated side would dominate the bracket width.  Rounding
    a bucket down to ``l_i`` instead of lowering it costs ``L_i - l_i`` per
    step, of order ``s h^2 / 12`` with ``s`` the log-density slope: far too
    much for the narrow per-step laws of subsampled mechanisms, hence the
    lowering pass.  Near the bottom of a steeply rising support the lowering
    pass runs out of mass: there either the few buckets it cannot lower join
    the bucket above, lifted back onto its point by a fraction of the next
    (pass 3, :func:`_settle_short`), or, where that is predicted to cost
    more, every cell below a switch point is merged upwards (see ``bottom``
    below).  On MNIST's step (sigma 1.1, q 0.00427, h 8.9e-5, the support's
    end 48 spacings below 0) the pairs removed 2.2 times the centred cells'
    Jensen gap at the query's tilt, pass 3 1.04 times it: the lower end of
    the 14063-step bracket moved from 8.5e-5 to 4.4e-5 below the truth.

    Why every choice below is dominated.  Let ``(P, Q)`` be the pair of
    cells (each cell an outcome with masses ``(P_i, Q_i)``; the cells are
    themselves a post-processing of the true pair, so they are dominated by
    it).  Every bucket is built by sending each cell ``i``, with fixed
    probabilities ``f_ib`` (``sum_b f_ib <= 1``, the rest dropped), to the
    buckets ``b``: a Markov kernel ``K`` applied to both ``P`` and ``Q``, so
    ``(KP, KQ)`` is dominated by ``(P, Q)`` (data processing for every
    hockey-stick divergence, ``eps`` of either sign).  Bucket ``b``'s loss
    ``log KP(b) / KQ(b)`` is then placed at a grid point ``l <= `` it (the
    margin covers the computed loss's error): lowering losses keeps each
    ``E_P[(1 - e^{eps - L})_+]`` from growing, and convolution is monotone
    in that order, so every composition of such steps stays below the
    composition of the true ones.  Undoing a lift (below) restores the
    fractions it took before any other bucket used them: the final ``f_ib``
    are still fixed numbers, summing to at most one per cell.  Pass 3 sends
    whole buckets and fixed fractions of buckets on to other buckets: one
    more Markov kernel, applied to the buckets, and each union is placed at
    a grid point its merged loss clears by its margin.  ``var_weight``
    and ``free_below`` only choose between such kernels; no choice can make
    the result exceed its cells' delta (tests/test_bulk_dominated.py checks
    that directly, at every eps).
    """
    n = points.shape[0]
    g = np.empty(n)        # the points' losses
    gap = np.empty(n)      # distance to the next point (to the previous at the top)
    for i in range(n):
        g[i] = points[i] * h
    for i in range(n):
        gap[i] = (points[i + 1] - points[i]) * h if i + 1 < n else (g[i] - g[i - 1] if n > 1 else h)
    p = np.zeros(n + 1)
    loss = np.zeros(n + 1)
    for i in range(n + 1):
        # (cells below e^{-700} are dropped: dropping mass is safe on this
        # side, and denormal masses would spoil the merged losses)
        if log_p[i] > -700.0 and log_q[i] > -np.inf and math.isfinite(loss_err[i] + mass_err[i]):
            p[i] = math.exp(log_p[i])
            loss[i] = log_p[i] - log_q[i]
    # A cell whose merged loss is its grid point up to rounding stays there,
    # but only where its error bound, too, keeps it at or above the point (a
    # continuous cell's loss is known to ~1e-13, not to a few ulps: one that
    # lands within a few ulps of a point may lie below it, and must be merged
    # like any other).
    ongrid = np.zeros(n + 1, dtype=np.bool_)
    for i in range(n):
        li = g[i]
        if (p[i] > 0.0 and abs(loss[i] - li) <= 8.0 * 2.220446049250313e-16 * max(1.0, abs(li))
                and loss[i] - loss_err[i] - 4.0 * 2.220446049250313e-16 * max(1.0, abs(li)) >= li):
            ongrid[i] = True
    avail = p.copy()        # P-mass of each cell not yet given to a bucket
    pb = np.zeros(n)        # P-mass of each bucket
    qb = np.zeros(n)        # its Q-mass times e^{g[ref[i]]} (ratios only matter)
    ref = np.zeros(n, dtype=np.int64)  # each bucket's reference point (its target)
    lifted = np.zeros(n, dtype=np.bool_)
    # Cells below `bottom` are merged upwards only (each bucket aims at the
    # next grid point its merged loss has not passed).  The lowest buckets of
    # a law rising steeply from the end of its support (subsampled losses
    # near log(1 - q)) sit above their grid points with too little mass below
    # to lower them, and rounding them down costs (L - l) P per step, first
    # order in h.  Merging upwards costs about h^2/4 of extra variance per
    # unit of mass instead, and the switch to centred buckets leaves the
    # bucket at `bottom` unlowered; the switch goes above the highest bucket
    # a dry run of the downward pass cannot lower, where the sum of the two
    # costs is least (variance weighted by var_weight, about d eps / d var of the
    # compositions, var_weight, plus the half unit of mean a merge removes
    # per unit of variance).
    vw = var_weight + 0.5
    fail = -1
    short_mass = 0.0
    dry = p.copy()
    # (only the lowest cells can fail: the dry run starts a few thousand
    # cells above the first one with mass, where the demand passed down is
    # negligible; `bottom` only steers the merge, never its validity)
    first = 0
    while first < n and p[first] == 0.0:
        first += 1
    for i in range(min(n - 1, first + _DRY_RUN_CELLS), -1, -1):
        li = g[i]
        if dry[i] == 0.0 or loss[i] <= li:
            continue
        need = dry[i] * (-math.expm1(li - loss[i]))  # P-weighted excess to offset
        j = i - 1
        while j >= 0 and need > 0.0:
            cap = dry[j] * math.expm1(li - loss[j]) if loss[j] < li else 0.0
            if cap >= need:
                dry[j] -= dry[j] * need / cap
                need = 0.0
            else:
                need -= cap
                dry[j] = 0.0
            j -= 1
        if need > 1e-3 * dry[i] * (-math.expm1(li - loss[i])):
            if fail < 0:
                fail = i
            short_mass += dry[i]
    bottom = 0
    if fail >= 0:
        best = np.inf
        below = 0.0
        # (from the failing bucket itself: rounding it down may be cheapest,
        # e.g. a bulk shifted a hair above its grid point, see
        # pld.engine.bulk_shift.bulk_shift)
        for i in range(fail):
            below += p[i]
        for i in range(fail, n):
            cost = p[i] * max(0.0, loss[i] - max(g[i], free_below)) + vw * 0.25 * gap[i] * gap[i] * below
            if cost < best:
                best = cost
                bottom = i
            elif vw * 0.25 * gap[i] * gap[i] * below > best:
                break
            below += p[i]
        # The alternative (pass 3): no upward pairs at all; the few lowest
        # buckets the downward pass cannot lower each join the bucket above,
        # lifted back onto its point by a fraction of the next one.  It moves
        # about the failing buckets' mass by a spacing or two, where the pairs
        # move every cell below `bottom` by one.
        if vw * _SETTLE_COST * short_mass * gap[fail] * gap[fail] < best:
            bottom = 0
    # Pass 1, upwards: buckets below their grid point take the next cells
    # (the fraction that lifts them exactly to the target, enlarged by a few
    # ulps).  A bucket's Q-mass is only formed when it swallows a whole cell;
    # one that hits its target is placed there without recomputing its loss.
    # The target is the grid point plus the bucket's margin, recomputed as
    # cells join (a cell is only taken if it still lies above the raised
    # target).
    #
    # A lift that cannot reach its target (too little above it) is undone:
    # the cells it took get their mass back and the bucket is left to pass 2,
    # which lowers it or rounds it down.  (A failed lift used to swallow
    # everything above it and be rounded down all the same: a one-step
    # remove law on a spacing above q lost its whole tail so.)  Where rounding
    # below free_below is free (a one-step query), so is a lift whose merging
    # removes more (variance weighted by var_weight) than rounding the bucket
    # down would (its mass times its distance above free_below, or to the
    # grid point it would be placed at): the bulk below 0 is rounded down
    # rather than merged with the tail.  (In a composition that comparison
    # also measured tighter, but it changed the refinement path of erratic
    # laws, Poisson-sampled Laplace with its atoms, for the worse: kept to
    # the one step.)
    target = np.full(n, -1, dtype=np.int64)  # grid index of a bucket that hit it
    marg = np.zeros(n)                        # each bucket's final margin
    # what each bucket's margin was formed from (pass 3 merges buckets)
    b_el = np.zeros(n)
    b_em = np.zeros(n)
    b_lmin = np.zeros(n)
    b_lmax = np.zeros(n)
    b_kc = np.zeros(n, dtype=np.int64)
    short = np.zeros(n, dtype=np.bool_)  # pass 2 ran out of cells below it
    undo_j = np.empty(n + 1, dtype=np.int64)  # cells a lift took from, and what they held
    undo_v = np.empty(n + 1)
    for i in range(n):
        if avail[i] == 0.0 or ongrid[i]:
            continue
        li = g[i]
        el, em, lmin, lmax, kc = loss_err[i], mass_err[i] + 2.0 * _U, loss[i], loss[i], 1
        m = _margin(el, em, lmin, lmax, kc, li)
        t = li + m
        k = i
        if loss[i] >= t:
            if i >= bottom or i + 1 >= n:
                continue
            k = i + 1  # aim at the next grid point up
            li = g[k]
            m = _margin(el, em, lmin, lmax, kc, li)
            t = li + m
            round_cost = avail[i] * max(0.0, loss[i] - max(g[i], free_below))
        else:
            round_cost = avail[i] * max(0.0, loss[i] - max(g[i - 1], free_below)) if i > 0 else np.inf
        lifted[i] = True
        P = P0 = avail[i]
        mb = loss[i]
        Q = -1.0
        avail[i] = 0.0
        spread = P * (loss[i] - li) ** 2  # P-weighted square distance of the parts to the target
        nu = 0
        exact = False  # hit its target with a fraction (its loss is then t, Q not tracked)
        j = i + 1
        while j <= n:
            if avail[j] > 0.0 and loss[j] > t:
                if mb >= t:
                    target[i] = k
                    break
                m_j = _margin(max(el, loss_err[j]), max(em, mass_err[j] + 2.0 * _U), min(lmin, loss[j]),
                              max(lmax, loss[j]), kc + 1, li)
                if loss[j] <= li + m_j:
                    j += 1  # (too close to the target to lift it once it joins)
                    continue
                el, em, lmin, lmax, kc, m = (max(el, loss_err[j]), max(em, mass_err[j] + 2.0 * _U),
                                             min(lmin, loss[j]), max(lmax, loss[j]), kc + 1, m_j)
                t = li + m
                den = -avail[j] * math.expm1(t - loss[j])
                f = P * math.expm1(t - mb) / den * (1.0 + 1e-12) if den > 0.0 else 2.0
                undo_j[nu] = j
                undo_v[nu] = avail[j]
                nu += 1
                if f < 1.0:
                    take = f * avail[j]
                    P += take
                    spread += take * (loss[j] - li) ** 2
                    avail[j] = max(0.0, avail[j] - take)
                    target[i] = k
                    exact = True
                    break
                spread += avail[j] * (loss[j] - li) ** 2
                P, Q, mb = _swallow(P, Q, mb, avail[j], loss[j], li)
                avail[j] = 0.0
            j += 1
        if (target[i] < 0 and round_cost < np.inf) or (free_below > -np.inf and vw * spread > round_cost):
            # undo the lift (see above)
            for u in range(nu - 1, -1, -1):
                avail[undo_j[u]] = undo_v[u]
            avail[i] = P0
            lifted[i] = False
            target[i] = -1
            continue
        pb[i] = P
        # (a fraction's Q was not added: a bucket that hit its target has
        # loss t = li + m, up to the rounding its margin covers)
        qb[i] = P * math.exp(-m) if exact else (P * math.exp(li - mb) if Q < 0.0 else Q)
        ref[i] = k
        marg[i] = m
        b_el[i], b_em[i], b_lmin[i], b_lmax[i], b_kc[i] = el, em, lmin, lmax, kc
    # Pass 2, downwards: buckets at or above their target keep what is left
    # of their cell and take the lower cells' fraction that lowers them
    # exactly there (reduced by a few ulps, so they stay at or above it).
    for i in range(n - 1, -1, -1):
        if lifted[i] or avail[i] == 0.0:
            continue
        if ongrid[i]:
            pb[i] = avail[i]
            avail[i] = 0.0
            continue  # placed below, on its grid point
        li = g[i]
        el, em, lmin, lmax, kc = loss_err[i], mass_err[i] + 2.0 * _U, loss[i], loss[i], 1
        m = _margin(el, em, lmin, lmax, kc, li)
        t = li + m
        P = avail[i]
        mb = loss[i]
        Q = -1.0
        avail[i] = 0.0
        exact = False
        j = i - 1
        while j >= 0 and mb > t:
            if avail[j] > 0.0 and loss[j] < t:
                m_j = _margin(max(el, loss_err[j]), max(em, mass_err[j] + 2.0 * _U), min(lmin, loss[j]),
                              max(lmax, loss[j]), kc + 1, li)
                if mb <= li + m_j:
                    break  # taking cell j would leave the bucket below its raised target
                el, em, lmin, lmax, kc, m = (max(el, loss_err[j]), max(em, mass_err[j] + 2.0 * _U),
                                             min(lmin, loss[j]), max(lmax, loss[j]), kc + 1, m_j)
                t = li + m
                if loss[j] >= t:
                    j -= 1  # (no longer below the raised target: it cannot lower the bucket)
                    continue
                den = avail[j] * math.expm1(t - loss[j])
                f = P * (-math.expm1(t - mb)) / den * (1.0 - 1e-12) if den > 0.0 else 2.0
                if f < 1.0:
                    take = f * avail[j]
                    P += take
                    avail[j] = max(0.0, avail[j] - take)
                    target[i] = i
                    exact = True
                    break
                P, Q, mb = _swallow(P, Q, mb, avail[j], loss[j], li)
                avail[j] = 0.0
            j -= 1
        if mb >= t:
            target[i] = i  # (at or above its target: rounded down to its grid point)
            if j < 0 and target[i] == i and mb > t:
                short[i] = True
        elif target[i] < 0:
            short[i] = True  # (below its target, nothing above lifted it: see pass 3)
        pb[i] = P
        qb[i] = P * math.exp(-m) if exact else (P * math.exp(li - mb) if Q < 0.0 else Q)
        ref[i] = i
        marg[i] = m
        b_el[i], b_em[i], b_lmin[i], b_lmax[i], b_kc[i] = el, em, lmin, lmax, kc
    # (pass 3: where the downward pass ran out of cells)
    if np.any(short):
        _settle_short(pb, qb, ref, target, marg, short, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, free_below)
    out = np.zeros(n)
    # (what is left above the window is dropped: safe on this side, and at most
    # the truncation budget; kept at the top point it would stand for a heavy
    # atom there and stretch every Chernoff range drawn from this grid)
    for i in range(n):
        if not pb[i] > 0.0:
            continue  # (masses near underflow can round to <= 0)
        if ongrid[i]:
            out[i] += pb[i]
            continue
        if target[i] >= 0:
            out[target[i]] += pb[i]  # merged loss at (or above) that grid point
            continue
        # a bucket that missed its target: the highest grid point its merged
        # loss clears by its margin
        if not qb[i] > 0.0:
            out[ref[i]] += pb[i]  # infinite merged loss
            continue
        mb = math.log(pb[i] / qb[i]) + g[ref[i]]
        mb -= marg[i] + 4.0 * _U * max(1.0, abs(mb))
        k = min(i + 1, n - 1)
        while k >= 0 and g[k] > mb:
            k -= 1
        if k >= 0:
            out[k] += pb[i]
    return out
