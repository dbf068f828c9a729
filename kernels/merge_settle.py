"""Pass 3 of the centred merge: buckets the downward pass left short, settled.

A bucket the lowering pass could not bring onto its grid point either joins
the bucket above, lifted back onto that bucket's point by a fraction of the
next (:func:`_join_above`), or is lowered onto its point by a fraction of the
buckets below it (:func:`_lower_from_below`).  Both moves send whole buckets
and fixed fractions of buckets on: one more Markov kernel on the buckets, so
the pair stays dominated (:func:`pld.kernels.merge.optimistic_merge_centred`).
"""

from __future__ import annotations

import math

from numba import njit

#: unit round-off of float64
_U = 2.0 ** -53



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
