"""Kernels that place a privacy-loss description onto a uniform loss grid.

A direction of a mechanism is described by *pieces*, sorted by privacy loss,
each with a P-mass and a Q-mass (in log space): cells of its continuous part
and atoms.

* ``pessimistic_spread`` builds a *dominating* grid PLD from cells cut at the
  grid points: every piece is split between the two end points of its cell
  so that both its P-mass and its Q-mass are preserved ("connect the dots",
  Doroshenko et al., PETS 2022).  Splitting a point mass into two points whose
  likelihood ratios bracket the original one is a spread, so the new pair
  dominates the old one and the bias is second order in the grid spacing.
* ``optimistic_merge_centred`` builds a *dominated* grid PLD from cells
  centred on the grid points, by post-processing: each cell is merged with
  fractions of its neighbours (a randomised post-processing) so that each
  bucket's merged loss ``log P(B)/Q(B)`` lands exactly on (never below) its
  grid point.  Merging outputs is post-processing, hence the resulting pair
  is dominated by the true one; losses that are not hit exactly are rounded
  *down*.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._signatures import F64, I64, called_with, f64, i64

# Relative slack (in units of the cell's P-mass) shifted to the upper end point
# on the pessimistic side.  It absorbs floating-point error in the log-CDF
# differences that produce the piece masses (about 1e-13 relative) so that the
# split never puts too little mass on the upper neighbour.
_PESSIMISTIC_SLACK = 1e-11


@called_with(F64, F64)
@njit(cache=True, nogil=True)
def log_diff_exp(la, lb):
    """``log(e^la - e^lb)`` entrywise where ``la > lb`` (else ``-inf``), for the
    log-CDF differences behind cell masses: ``log(-expm1(d))`` for
    ``d = lb - la`` near 0, ``log1p(-e^d)`` below ``-log 2`` (each accurate
    to a few ulps; :data:`_PESSIMISTIC_SLACK` absorbs them).  One pass: the
    numpy form needs eight array temporaries."""
    n = la.shape[0]
    out = np.empty(n)
    for i in range(n):
        a = la[i]
        b = lb[i]
        if a > b:
            d = b - a
            out[i] = a + (math.log(-math.expm1(d)) if d > -0.6931 else math.log1p(-math.exp(d)))
        else:
            out[i] = -np.inf
    return out


#: absolute error of scipy's ``log_ndtr`` in units of ``u (1 + |log Phi|)``
#: (see pld.mechanisms.models.LOG_NDTR_ULPS, which must match)
_LOG_NDTR_ULPS = 16.0


@njit(cache=True, nogil=True, inline="always")
def _log_phi_error(lz: float, z: float) -> float:
    if not math.isfinite(z):
        return 0.0  # (log_ndtr is exactly 0 or -inf at an infinite edge)
    az = abs(z)
    return 2.0 ** -53 * (_LOG_NDTR_ULPS * (1.0 + abs(lz)) + 2.01 * az * (az + 1.0))


@called_with(F64, F64, F64, F64, F64)
@njit(cache=True, nogil=True)
def log_diff_exp_error(la, lb, za, zb, r):
    """Error bound of ``r = log(e^la - e^lb)`` where ``la = log_ndtr(za)``,
    ``lb = log_ndtr(zb)`` (entrywise; 0 where ``r`` is not finite).

    Each edge's error is ``log_ndtr``'s own plus the rounding of ``z`` times
    the slope ``phi / Phi <= |z| + 1``; ``r = la + log(1 - e^d)`` with ``d =
    lb - la`` magnifies them by ``1 / expm1(-d)`` (narrow cells).  One pass
    (pld.mechanisms.models.normal_interval_logmass_bounds; its numpy form checks it).
    """
    n = la.shape[0]
    out = np.empty(n)
    u = 2.0 ** -53
    for i in range(n):
        ri = r[i]
        if not math.isfinite(ri):
            out[i] = 0.0
            continue
        ea = _log_phi_error(la[i], za[i])
        eb = _log_phi_error(lb[i], zb[i])
        d = lb[i] - la[i]
        spread = 0.0
        if math.isfinite(d):
            spread = (ea + eb + u * abs(d)) / math.expm1(-d)
        out[i] = ea + spread + 4.0 * u * (1.0 + abs(ri))
    return out


@called_with(F64, F64, F64, F64, f64, f64)
@njit(cache=True, nogil=True)
def subsampled_mass_errors(lp, lq, ep, eq, log_q, log_1mq):
    """Poisson-subsampled (remove) log masses with error bounds, entrywise.

    Returns ``(mix, loss_err, mix_err)``: ``mix = log((1-q) e^lq + q e^lp)``,
    and bounds on the errors of ``mix - lq`` and of ``mix`` given errors
    ``ep, eq`` of ``lp, lq``.  With ``s = q e^lp / e^mix`` the loss moves by
    ``s (ep + eq)``; every operation's rounding is added
    (pld.mechanisms.models.poisson_subsampled_errors states the argument).
    """
    n = lp.shape[0]
    mix = np.empty(n)
    loss_err = np.empty(n)
    mix_err = np.empty(n)
    u = 2.0 ** -53
    for i in range(n):
        a = log_1mq + lq[i]
        b = log_q + lp[i]
        m = _logaddexp(a, b)
        mix[i] = m
        share = 1.0
        if m > -np.inf:
            share = min(1.0, math.exp(b - m))
        rounding = 2.0 * u * (abs(lp[i]) + abs(lq[i]) + abs(log_q) + abs(m) + 4.0)
        loss_err[i] = share * (ep[i] + eq[i]) + rounding
        mix_err[i] = (1.0 - share) * eq[i] + share * ep[i] + rounding
    return mix, loss_err, mix_err


@njit(cache=True, nogil=True)
def _logaddexp(a: float, b: float) -> float:
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@called_with(F64, F64, I64, I64, f64, i64)
@njit(cache=True, nogil=True)
def pessimistic_spread(log_p, log_q, index, points, h, k0):
    """Spread pieces onto the points ``l_i = (k0 + points_i) h``, dominating side.

    Parameters
    ----------
    log_p, log_q : float64[m]
        log P-mass and log Q-mass of each piece.
    index : int64[m]
        Cell of each piece: the piece's losses lie in ``[l_index, l_index+1]``.
        ``index < 0`` sends the piece to ``l_0`` (mass below the window is moved
        *up*, which only increases delta); ``index >= n - 1`` sends it to
        ``+inf``.  An atom exactly on ``l_{n-1}`` belongs to cell ``n - 2``.
    points : int64[n]
        Increasing grid offsets of the points (``arange(n)`` for a uniform
        grid; wider cells where the law has negligible mass, see
        :func:`cell_points`).
    h : float
        Grid spacing.
    k0 : int
        Grid index of offset 0.

    Returns
    -------
    log_mass : float64[n]
        log of the P-mass at each point.
    log_inf : float
        log of the P-mass moved to ``+inf``.

    Notes
    -----
    With ``P`` and ``Q`` the masses of a piece in cell ``[l_i, l_{i+1}]`` of
    width ``w``, the upper share is ``b = (P - e^{l_i} Q) / (1 - e^{-w})`` and the
    lower share ``a = P - b``; written as ``b = P (1 - e^{l_i + log Q - log P}) /
    (1 - e^{-w})`` it has no cancellation beyond that of the piece's own loss.
    The width is formed as ``(points_{i+1} - points_i) h``, one rounding.
    """
    n = points.shape[0]
    out = np.full(n, -np.inf)
    log_inf = -np.inf
    last_w = -1
    denom = 1.0
    for j in range(log_p.shape[0]):
        lp = log_p[j]
        if lp == -np.inf:
            continue
        i = index[j]
        if i < 0:
            out[0] = _logaddexp(out[0], lp)
            continue
        if i >= n - 1:
            log_inf = _logaddexp(log_inf, lp)
            continue
        li = (k0 + points[i]) * h
        # fraction of P-mass that goes up: (1 - e^{l_i - m}) / (1 - e^{-w}), m = merged loss
        x = li + log_q[j] - lp
        if x >= 0.0:
            frac_up = 0.0
        else:
            wd = points[i + 1] - points[i]
            if wd != last_w:  # (one expm1 per change of cell width)
                last_w = wd
                denom = -math.expm1(-wd * h)
            frac_up = -math.expm1(x) / denom
        frac_up = min(1.0, frac_up + _PESSIMISTIC_SLACK)
        if frac_up < 1.0:
            out[i] = _logaddexp(out[i], lp + math.log1p(-frac_up))
        out[i + 1] = _logaddexp(out[i + 1], lp + math.log(frac_up))
    return out, log_inf


_U = 2.0 ** -53
#: cells above the lowest one with mass that the dry run of the downward
#: pass covers (it looks for buckets the lowering cannot serve)
_DRY_RUN_CELLS = 4096


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _swallow(P, Q, mb, p, loss, ref):
    """Add a whole cell ``(p, loss)`` to a bucket ``(P, Q, mb)``; ``Q`` is the
    bucket's Q-mass times ``e^{ref}``, formed on first use (``Q < 0``)."""
    if Q < 0.0:
        Q = P * math.exp(ref - mb)
    P += p
    Q += p * math.exp(ref - loss)
    return P, Q, math.log(P / Q) + ref


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _margin(e_loss, e_mass, lmin, lmax, k, li):
    """Bound on ``|computed - true|`` merged loss of a bucket of ``k`` cells.

    ``e_loss``: the largest loss error of its cells (the merged loss is a
    weighted log-mean of theirs, so it moves by at most that); ``e_mass``: the
    largest relative error of their P-masses, which tilts the weights by at
    most ``2 e_mass`` times the total variation between the bucket's P- and
    Q-weights, itself at most ``expm1(lmax - lmin)``; the bucket's own sums
    (``k`` terms each), ratio, log and reference shift.
    """
    spread = min(1.0, math.expm1(lmax - lmin))
    return e_loss + 2.01 * e_mass * spread + (2.0 * k + 8.0) * _U * max(1.0, abs(li))


#: pass 3 aims its unions this far (in loss) above their margin: a merged
#: loss computed from sums that nearly cancel lands within a few ulps of its
#: aim, on either side, and the union is only placed if it clears the margin
_SETTLE_AIM = 1e-14

#: variance pass 3 (``_settle_short``) is predicted to remove per unit of the
#: failing buckets' mass, in squared spacings: each moves up by about one
#: spacing and about as much is lifted down from the bucket above
_SETTLE_COST = 2.0


@njit(cache=True, nogil=True, inline="always")
def _give(pb, qb, ref, first, last, frac, point, above):
    """Pass 3's sources, from ``first`` to ``last`` (either way): every
    bucket with mass on the given side of grid index ``point`` gives all of
    itself, ``last`` only ``frac`` where that is below one (a fraction of a
    bucket keeps its merged loss)."""
    step = 1 if last >= first else -1
    for k in range(first, last + step, step):
        if not (pb[k] > 0.0 and qb[k] > 0.0 and (ref[k] > point if above else ref[k] < point)):
            continue
        if k == last and frac < 1.0:
            pb[k] *= 1.0 - frac
            qb[k] *= 1.0 - frac
        else:
            pb[k] = 0.0
            qb[k] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _store(k, P, Q, point, m, el, em, lmin, lmax, kc, pb, qb, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc):
    """Bucket ``k`` becomes a union ``(P, Q)`` placed at grid index ``point``
    (its merged loss clears it by the margin ``m``), with its error summary."""
    pb[k], qb[k] = P, Q
    target[k] = point
    marg[k] = m
    b_el[k], b_em[k], b_lmin[k], b_lmax[k], b_kc[k] = el, em, lmin, lmax, kc


@njit(cache=True, nogil=True, error_model="numpy")
def _join_above(i, pb, qb, ref, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, round_cost, mb_i):
    """Bucket ``i`` joins the next bucket with mass above it (``G``), the
    union lifted back onto ``G``'s point by the fraction of the buckets above
    ``G`` that makes its merged loss that point plus its margin (enlarged by
    1e-12).  Applied only where its removed variance (weighted by ``vw``)
    costs less than ``round_cost``; returns whether it was."""
    n = pb.shape[0]
    gi = g[ref[i]]
    G = i + 1
    while G < n and not (pb[G] > 0.0 and qb[G] > 0.0 and ref[G] > ref[i]):
        G += 1
    if G >= n:
        return False
    rg = ref[G]
    lg = g[rg]
    # masses in G's frame: Q-masses times e^{g[rg]}
    PC = pb[i] + pb[G]
    QC = qb[i] * math.exp(lg - gi) + qb[G]
    el, em = max(b_el[i], b_el[G]), max(b_em[i], b_em[G])
    lmin, lmax = min(b_lmin[i], b_lmin[G]), max(b_lmax[i], b_lmax[G])
    kc = b_kc[i] + b_kc[G]
    m = _margin(el, em, lmin, lmax, kc, lg)
    spread = pb[i] * (lg - mb_i) ** 2
    # the buckets lifted from: up to the first one only partly taken
    H = G + 1
    last = -1
    frac = 1.0
    while math.log(PC / QC) < m:
        while H < n and not (pb[H] > 0.0 and qb[H] > 0.0 and ref[H] > rg):
            H += 1
        if H >= n:
            return False
        QH = qb[H] * math.exp(lg - g[ref[H]])
        m_h = _margin(max(el, b_el[H]), max(em, b_em[H]), min(lmin, b_lmin[H]), max(lmax, b_lmax[H]),
                      kc + b_kc[H], lg)
        if not math.log(pb[H] / QH) > m_h:
            return False  # (a bucket that cannot lift it)
        el, em = max(el, b_el[H]), max(em, b_em[H])
        lmin, lmax = min(lmin, b_lmin[H]), max(lmax, b_lmax[H])
        kc += b_kc[H]
        m = m_h
        e = math.exp(m + _SETTLE_AIM)
        f = (e * QC - PC) / (pb[H] - e * QH) * (1.0 + 1e-12)
        last = H
        if f < 1.0:
            frac = f
            PC += f * pb[H]
            QC += f * QH
            spread += f * pb[H] * (g[ref[H]] - lg) ** 2
            break
        PC += pb[H]
        QC += QH
        spread += pb[H] * (g[ref[H]] - lg) ** 2
        H += 1
    if not math.log(PC / QC) >= m or not vw * spread < round_cost:
        return False
    if last >= 0:
        _give(pb, qb, ref, G + 1, last, frac, rg, True)
    _store(G, PC, QC, rg, m, el, em, lmin, lmax, kc, pb, qb, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc)
    pb[i] = 0.0
    qb[i] = 0.0
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _lower_from_below(i, pb, qb, ref, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, round_cost):
    """Bucket ``i`` takes, from the buckets below it (nearest first), the
    fraction that lowers its merged loss to its point plus its margin
    (reduced by 1e-12), as pass 2 takes from cells.  Applied only where its
    removed variance (weighted by ``vw``) costs less than ``round_cost``;
    returns whether it was."""
    ri = ref[i]
    li = g[ri]
    P, Q = pb[i], qb[i]  # (Q times e^{g[ri]}: i's own frame)
    el, em, lmin, lmax, kc = b_el[i], b_em[i], b_lmin[i], b_lmax[i], b_kc[i]
    m = _margin(el, em, lmin, lmax, kc, li)
    spread = 0.0
    H = i - 1
    last = -1
    frac = 1.0
    while math.log(P / Q) > m:
        while H >= 0 and not (pb[H] > 0.0 and qb[H] > 0.0 and ref[H] < ri):
            H -= 1
        if H < 0:
            return False
        QH = qb[H] * math.exp(li - g[ref[H]])
        m_h = _margin(max(el, b_el[H]), max(em, b_em[H]), min(lmin, b_lmin[H]), max(lmax, b_lmax[H]),
                      kc + b_kc[H], li)
        if not math.log(pb[H] / QH) < m_h or not math.log(P / Q) > m_h:
            return False  # (a bucket that cannot lower it, or a margin it no longer clears)
        el, em = max(el, b_el[H]), max(em, b_em[H])
        lmin, lmax = min(lmin, b_lmin[H]), max(lmax, b_lmax[H])
        kc += b_kc[H]
        m = m_h
        e = math.exp(m + _SETTLE_AIM)
        # (P + f P_H) / (Q + f Q_H) = e^{m + aim}
        f = (P - e * Q) / (e * QH - pb[H]) * (1.0 - 1e-12)
        last = H
        if f < 1.0:
            frac = f
            P += f * pb[H]
            Q += f * QH
            spread += f * pb[H] * (li - g[ref[H]]) ** 2
            break
        P += pb[H]
        Q += QH
        spread += pb[H] * (li - g[ref[H]]) ** 2
        H -= 1
    if not math.log(P / Q) >= m or not vw * spread < round_cost:
        return False
    if last >= 0:
        _give(pb, qb, ref, i - 1, last, frac, ri, False)
    _store(i, P, Q, ri, m, el, em, lmin, lmax, kc, pb, qb, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc)
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _settle_short(pb, qb, ref, target, marg, short, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, free_below):
    """Pass 3 of :func:`optimistic_merge_centred`: the buckets the downward
    pass could not lower (no cells left below them) would be rounded down to
    their grid points, a cost first order in the spacing.  Two such places:

    * the bottom of a support whose density rises from its end (subsampled
      losses near ``log(1 - q)``): nothing below at all.  The bucket joins
      the next bucket above, lifted back onto its point by a fraction of the
      buckets above that (:func:`_join_above`);
    * a heavy atom at the top of a support (Poisson-sampled Laplace: the
      loss is constant beyond the sensitivity, an atom of mass ~0.3 that is
      the largest loss) between grid points: pass 1 has already made every
      cell below it a bucket of its own.  The bucket takes the fraction of
      the buckets below it that lowers it onto its point
      (:func:`_lower_from_below`); one that sits below its point (pass 1
      found nothing above to lift it with) onto the point below, where it
      would otherwise be placed.

    From the lowest up; each only where its removed variance (weighted by
    ``vw``) costs less than rounding the bucket down (its mass times its
    height above its point, or above ``free_below``).  Every bucket is an
    output of a fixed Markov kernel applied to the cells; sending a whole
    bucket, or a fixed fraction of one, to another bucket is one more
    (post-processing), and a fraction of a bucket keeps that bucket's merged
    loss.  Each union's margin is formed from its parts' error summaries as
    for any bucket, and a union is placed only at a grid point its merged
    loss clears by it, so validity is as in passes 1 and 2.
    """
    n = pb.shape[0]
    for i in range(n):
        if not short[i] or not pb[i] > 0.0 or not qb[i] > 0.0:
            continue
        gi = g[ref[i]]
        mb_i = math.log(pb[i] / qb[i]) + gi
        if target[i] < 0:
            # below its own point with nothing above to lift it (an atom at
            # the top of a support a fraction of a spacing below a grid
            # point): it would be placed at the point below, so aim there
            r0 = ref[i]
            if r0 < 1 or not (g[r0 - 1] < mb_i < gi):
                continue
            round_cost = pb[i] * max(0.0, mb_i - max(g[r0 - 1], free_below))
            q0 = qb[i]
            ref[i] = r0 - 1
            qb[i] = q0 * math.exp(g[r0 - 1] - gi)
            if not _lower_from_below(i, pb, qb, ref, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw,
                                     round_cost):
                ref[i] = r0
                qb[i] = q0
            continue
        round_cost = pb[i] * max(0.0, mb_i - max(gi, free_below))
        if not round_cost > 0.0:
            continue
        if _join_above(i, pb, qb, ref, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, round_cost, mb_i):
            continue
        _lower_from_below(i, pb, qb, ref, target, marg, b_el, b_em, b_lmin, b_lmax, b_kc, g, vw, round_cost)


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


@called_with(I64, I64, i64)
@njit(cache=True, nogil=True)
def cell_points(lo_off, hi_off, n):
    """Offsets of the points of a grid with wide cells in its tails.

    Parameters
    ----------
    lo_off, hi_off : int64[Z]
        Cells of width ``2^(z+1)`` are allowed wholly at or below offset
        ``lo_off[z]`` or wholly at or above ``hi_off[z]`` (nested: ``lo_off``
        decreasing, ``hi_off`` increasing in ``z``).
    n : int
        Number of grid points (offsets ``0 .. n-1``).

    Returns
    -------
    points : int64[m]
        Increasing offsets from 0 to ``n - 1``: consecutive in the middle,
        widening by powers of two towards each end.
    """
    # (counted first, then written: n may be far larger than the points, a
    # window reaching deep into a tail of wide cells, and an array of n
    # offsets would not fit in memory)
    m = _walk_points(lo_off, hi_off, n, np.empty(0, dtype=np.int64))
    out = np.empty(m, dtype=np.int64)
    _walk_points(lo_off, hi_off, n, out)
    return out


@njit(cache=True, nogil=True)
def _walk_points(lo_off, hi_off, n, out):
    """The walk of :func:`cell_points`: writes the offsets into ``out`` when it
    has room for them, and returns how many there are."""
    write = out.size > 0
    if write:
        out[0] = 0
    m = 1
    i = 0
    while i < n - 1:
        w = _allowed_width(lo_off, hi_off, i)
        while w > 1 and _allowed_width(lo_off, hi_off, min(i + w, n - 1)) < w:
            w //= 2
        i = min(i + w, n - 1)
        if write:
            out[m] = i
        m += 1
    return m


@njit(cache=True, nogil=True, inline="always")
def _allowed_width(lo_off, hi_off, i):
    w = 1
    for z in range(lo_off.shape[0]):
        if i <= lo_off[z] or i >= hi_off[z]:
            w = 2 << z
    return w
