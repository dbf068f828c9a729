"""The dominated pair of a split round of random allocation (:mod:`pld.mechanisms.allocation.heavy`).

Reveal ``N``, the number of heavy coordinates; on ``{N = 0}`` the sum of the cell
labels of the light coordinates (:func:`_lower_labels`, on tilted chains too); on
``{N = 1}`` a geometric group of the light rest's label plus the heavy cell
(:func:`lower_side`); on ``{N = 2}`` a geometric group of the two heavy cells
(:func:`_two_heavy_pairs`).  Every statistic is a function of the outputs (a
post-processing), so its pair of laws is dominated by the true pair.
"""

from __future__ import annotations

import math

import numpy as np

from pld import _special
from pld.mechanisms.allocation.coordinate import SideAtoms
from pld.mechanisms.allocation.levels import _U, _precise
from pld.mechanisms.allocation.powering import by_squaring
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

#: the dominated side's levels reach this many light caps beyond their bulk (what lies
#: beyond needs several light coordinates near the cap; a dominated pair may drop it)
_LOW_CAPS = 2.0
#: the dominated side's tilts: multiples of this many standard deviations of the sum
_LOW_TILT = 2.5
#: the dominated side's levels are cut this many of their standard deviations below their mean
#: (the same cut on every tilt, so all bound one post-processed pair, which may drop mass; the
#: lower tail of a sum of non-negative light coordinates is lighter than a Gaussian's, e^-60 there)
_LOW_CUT_SD = 11.0
#: P-mass a round's dominated pair may drop to its bulk's round-off before the bulk's runs are
#: redone with long double transforms (:func:`pld.mechanisms.allocation.roundoff.convolve_errs`)
_EXTENDED_DROP = 1e-10
#: {N = 2}: the heavy cells merged in runs of at least this many, and to at most this many cells
_PAIR_MERGE, _PAIR_CELLS = 8, 700


def lower_side(mu: float, a: float, d: float, n_l: int, t: int, coarse: float, big_b: float, w_top: float,
                lr: float) -> tuple[SideAtoms, int, float]:
    """The dominated pair of a split round (``{N = 0}`` by :func:`_lower_labels`, ``{N = 1}``
    by geometric groups), the label rows it used and the P-mass its bulk's round-off drops
    in double (where the round is precise, the bulk is then redone in long double)."""
    from pld.kernels import cells_on, group_pairs

    low0, top0, rows, rest, dropped = _lower_labels(mu, a, d, n_l, t, coarse, big_b)
    lo_edges = top0 * np.exp(np.arange(int(math.ceil(math.log(w_top / top0) / lr)) + 2) * lr)
    cq, ceq, cp, cep = cells_on(mu, a, lo_edges)
    # {N = 1}: reveal the light rest's label k (those resolved to 1%: the others are
    # dropped) and the heavy cell j, then only a geometric group of k step d + (cell j's left
    # edge): Q(k, j) = t R_q(k) Q_j, P(k, j) = R_q(k) M_j + (t - 1) R_p(k) Q_j
    rq_lo, rq_hi, rp_lo, rp_hi, rstep = rest
    good = (rq_lo > 0.99 * rq_hi) & (rp_lo > 0.99 * rp_hi)
    rv = np.nonzero(good)[0] * (rstep * d)
    n_grp = int(math.ceil(math.log((rv[-1] if rv.size else 0.0) / top0 + w_top / top0 + 1.0) / lr)) + 3
    sums = group_pairs(rq_lo[good], rq_hi[good], rp_lo[good], rp_hi[good], rv,
                       np.maximum(cq - ceq, 0.0), cq + ceq, np.maximum(cp - cep, 0.0), cp + cep,
                       lo_edges[:-1], top0, lr, n_grp)
    npairs = float(rv.size * cq.size)
    lo_f, hi_f = 1.0 - 4.0 * (npairs + 4) * _U, 1.0 + 4.0 * (npairs + 4) * _U
    a_lo, a_hi, b1_lo, b1_hi, b2_lo, b2_hi = (x * (lo_f if i % 2 == 0 else hi_f) for i, x in enumerate(sums))
    q1_lo, q1_hi = t * a_lo * lo_f, t * a_hi * hi_f
    p1_lo = (b1_lo + (t - 1) * b2_lo) * lo_f
    p1_hi = (b1_hi + (t - 1) * b2_hi) * hi_f

    q2_lo, q2_hi, p2_lo, p2_hi = _two_heavy_pairs(mu, a, t, top0, lo_edges, cq, ceq, cp, cep, lr)
    q1_lo, q1_hi = np.concatenate((q1_lo, q2_lo)), np.concatenate((q1_hi, q2_hi))
    p1_lo, p1_hi = np.concatenate((p1_lo, p2_lo)), np.concatenate((p1_hi, p2_hi))
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (p1_lo > 0) & (q1_lo > 0)
        lp, lq = np.log(p1_lo[ok]), np.log(q1_hi[ok])
        rem = (np.concatenate((low0.remove[0], lp - lq)), np.concatenate((low0.remove[1], lp)),
               np.concatenate((low0.remove[2], lq)))
        lp, lq = np.log(q1_lo[ok]), np.log(p1_hi[ok])
        add = (np.concatenate((low0.add[0], lp - lq)), np.concatenate((low0.add[1], lp)),
               np.concatenate((low0.add[2], lq)))
    return SideAtoms(rem, add), rows, dropped


def _two_heavy_pairs(mu: float, a: float, t: int, top0: float, edges: np.ndarray, cq: np.ndarray, ceq: np.ndarray,
               cp: np.ndarray, cep: np.ndarray, lr: float) -> tuple[np.ndarray, ...]:
    """``{N = 2}``: reveal ``N`` and a geometric group of the sum of the two heavy coordinates'
    cells (``(Q_lo, Q_hi, P_lo, P_hi)`` per group; none for ``t < 2``).

    Its likelihood ratio is ``E_Q[S/t | the statistic]``: for two given coordinates in cells
    ``j1``, ``j2`` and the other ``t - 2`` light, ``Q = L^(t-2) Q_j1 Q_j2`` and ``P = L^(t-2)
    ((t - 2) (M_L / L) Q_j1 Q_j2 + M_j1 Q_j2 + Q_j1 M_j2) / t`` (``L``, ``M_L``: one coordinate's
    light mass and partial mean, closed form; ``Q_j``, ``M_j``: a heavy cell's), summed over the
    ``C(t, 2)`` pairs and the cell pairs of a group.  Where strict deltas are read at a small
    noise the rounds with two heavy coordinates carry a share of delta (sigma 1.2, 1-of-402,
    delta 8e-11: 0.1%) that dropping them took off the lower end.  The heavy cells are merged
    in runs (a coarser statistic) so that at most ``_PAIR_CELLS`` remain.
    """
    empty = np.zeros(0)
    if t < 2 or cq.size == 0:
        return empty, empty, empty, empty
    k = max(_PAIR_MERGE, int(math.ceil(cq.size / _PAIR_CELLS)))
    m = (cq.size + k - 1) // k

    def merged(x: np.ndarray) -> np.ndarray:
        return np.concatenate((x, np.zeros(m * k - x.size))).reshape(m, k).sum(axis=1)

    q_lo, q_hi = merged(np.maximum(cq - ceq, 0.0)), merged(cq + ceq)
    p_lo, p_hi = merged(np.maximum(cp - cep, 0.0)), merged(cp + cep)
    left = edges[: cq.size: k]
    glr = k * lr
    grp = np.floor(np.log((left[:, None] + left[None, :]) / (2.0 * top0)) / glr).astype(np.int64).ravel()
    grp = np.maximum(grp, 0)
    size = int(grp.max()) + 1

    def sums(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.bincount(grp, weights=(x[:, None] * y[None, :]).ravel(), minlength=size)

    qq_lo, qq_hi = sums(q_lo, q_lo), sums(q_hi, q_hi)
    mq_lo, mq_hi = 2.0 * sums(p_lo, q_lo), 2.0 * sums(p_hi, q_hi)  # (M_j1 Q_j2 + Q_j1 M_j2, by symmetry)
    z = (math.log(top0) - mu) / a
    light = (float(_special.ndtr(z)) * (1 - 1e-14), min(1.0, float(_special.ndtr(z)) * (1 + 1e-14)))
    light_m = (float(_special.ndtr(z - a)) * (1 - 1e-14), float(_special.ndtr(z - a)) * (1 + 1e-14))
    log_c = math.log(0.5 * t * (t - 1))
    w_lo = math.exp(log_c + (t - 2) * math.log(light[0]) * (1 + 1e-15) - 1e-12)
    w_hi = math.exp(log_c + (t - 2) * math.log(light[1]) * (1 - 1e-15) + 1e-12)
    f_lo, f_hi = 1.0 - 4.0 * (m * m + 8) * _U, 1.0 + 4.0 * (m * m + 8) * _U
    ml_lo, ml_hi = light_m[0] / light[1], light_m[1] / light[0]
    q2_lo, q2_hi = w_lo * qq_lo * f_lo, w_hi * qq_hi * f_hi
    p2_lo = w_lo * ((t - 2) * ml_lo * qq_lo + mq_lo) / t * f_lo
    p2_hi = w_hi * ((t - 2) * ml_hi * qq_hi + mq_hi) / t * f_hi
    return q2_lo, q2_hi, p2_lo, p2_hi


def _lower_labels(mu: float, a: float, d: float, n: int, t: int, coarse_sd: float,
                  cap: float) -> tuple[SideAtoms, float, int, tuple, float]:
    """The dominated pair of ``{N = 0}``: a statistic of the outputs built from cell labels.

    Each coordinate gets the label ``c`` of its cell ``((c - 1/2) d, (c + 1/2) d]``
    (``Y`` above ``top = (n + 1/2) d`` is heavy: that output is not in ``{N = 0}``);
    labels are added along a binary tree (the same for every run), a partial sum
    being halved (``floor(c / 2)``) while its cell stays below ``coarse_sd``
    standard deviations of the sum, as the upper side's levels are.  Any
    function of the outputs is a post-processing, so the pair of laws of the
    final label is dominated by the true pair restricted to ``{N = 0}``; under
    ``P`` the marked coordinate is in either half of a sum in proportion to its
    size (``p = (m_a/m) p_a * q_b + (m_b/m) q_a * p_b``), the first level's P-law
    being the partial means ``E[Y; cell]``.  Unlike a conditional-mean merge this
    needs no grid point inside each cell (at small ``sigma`` most of a coordinate
    lies in the first cell), and each atom's likelihood ratio is its own ``P/Q``.

    Round-off: the chain is run on exponentially tilted laws too (labels
    weighted by ``e^{theta c d}``, normalised; tilting commutes with the sums, and
    the halving becomes another fixed linear map), so an entry far in a tail
    is known relative to the tilted mass near it; each entry takes the
    tightest of the runs' brackets (all bound the same exact laws).  The remove
    direction takes ``(P_lo, Q_hi)``, the add direction ``(Q_lo, P_hi)`` (smaller
    P-masses and larger Q-masses: dominated); what no run resolves is dropped,
    and so is what a level's window cuts.

    Returns the atoms, ``top``, the final number of labels and brackets on the
    level of the first ``t - 1`` coordinates, ``(Q_lo, Q_hi, P_lo, P_hi, step)``
    (the light rest of ``{N = 1}``).
    """
    from pld.kernels import centred_cells

    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    q1, p1, eq1, ep1 = centred_cells(mu, a, d, n)
    g = np.arange(n + 1) * d
    with np.errstate(divide="ignore"):
        lq1 = np.log(q1)
    peak = int(np.argmax(q1[: max(2, int(min(n, 10.0 * (1.0 + sd1) / d))) + 1]))

    def fits(theta: float) -> bool:
        # the tilted light law stays a bulk (its mass past the valley at most e^-5 of the rest)
        e = lq1 + theta * g
        if theta <= 0:
            return True
        valley = peak + int(np.argmin(e[peak:]))
        if valley >= e.size - 1:
            return True
        with np.errstate(divide="ignore"):
            return float(np.logaddexp.reduce(e[valley:])) <= float(np.logaddexp.reduce(e[:valley])) - 5.0

    def keep(m: int, step: int) -> int:
        z = float(-_special.ndtri(1e-14 * m / t))
        bulk = m + z * math.sqrt(m * sd1 * sd1)
        return int(min(bulk + _LOW_CAPS * cap, m * cap) / (step * d)) + 2

    # (a light coordinate's label law, untilted: its mean and spread size the cut below)
    w1 = math.fsum(q1.tolist())
    mean1 = math.fsum((g * q1).tolist()) / w1
    sd_l = math.sqrt(max(math.fsum((g * g * q1).tolist()) / w1 - mean1 * mean1, 0.0))

    def low(m: int, step: int) -> int:
        return max(0, int(math.floor((m * mean1 - _LOW_CUT_SD * math.sqrt(m) * sd_l) / (step * d))) - 1)

    def run(theta: float, extended: bool = False):
        with np.errstate(divide="ignore"):
            lw = theta * g
            c0 = float(np.logaddexp.reduce(lq1 + lw))
        w = np.exp(lw - c0)
        rel = 4.0 * _U * (2.0 + np.abs(lw) + abs(c0))
        q0, p0 = q1 * w, p1 * w
        # (each tilted entry: the cell's bound times its weight, and the weight's rounding)
        e_q = Err.of_entries(eq1 * w + rel * q0)
        e_p = Err.of_entries(ep1 * w + rel * p0)

        def halve(x, step):
            q, p, eq, ep, m, s0, k0 = x
            if k0 % 2:  # (labels pair up from an even one, as on every other run)
                q, p, k0 = np.concatenate(([0.0], q)), np.concatenate(([0.0], p)), k0 - 1
            f = math.exp(-theta * s0 * d)  # (label 2j + 1 joins 2j: its tilt is one old cell higher)
            qq = np.append(q, 0.0) if q.size % 2 else q
            pp = np.append(p, 0.0) if p.size % 2 else p
            q2, p2 = qq[0::2] + f * qq[1::2], pp[0::2] + f * pp[1::2]
            # (each output takes an even input and f times an odd one, rounded by 4 ulps of both)
            col, row = max(1.0, f), 1.0 + f
            return (q2, p2, eq.mapped(col, row, 4.0 * _U, qq), ep.mapped(col, row, 4.0 * _U, pp), m, 2 * s0,
                    k0 // 2)

        def fit(x):
            # (the size test counts the labels cut below: the schedule stays the one of sizes alone)
            while 2 * x[5] * d <= coarse_sd * sd1 * math.sqrt(x[4]) and x[6] + x[0].size > 64:
                x = halve(x, x[5])
            return x

        def to_step(x, step):
            while x[5] < step:
                x = halve(x, x[5])
            return x

        def combine(x, y):
            qa, pa, eqa, epa, ma, step, ka = x
            qb, pb, eqb, epb, mb, _, kb = y
            m = ma + mb
            k0 = ka + kb
            # (one call: each array transformed once)
            items = [(qa, eqa, qb, eqb), (pa, epa, qb, eqb)] + ([] if x is y else [(qa, eqa, pb, epb)])
            done = convolve_errs(items, extended)
            (q, eq), (pa_, e1) = done[0], done[1]
            if x is y:
                p, ep = pa_, e1
            else:
                pb_, e2 = done[2]
                p = (ma / m) * pa_ + (mb / m) * pb_
                ep = e1.mixed(ma / m, e2, mb / m, pa_, pb_)
            # (cut to the same labels on every run: below the bulk and above the window)
            top = max(0, keep(m, step) - k0)
            cut = min(max(0, low(m, step) - k0), top)
            return fit((q[cut:top].copy(), p[cut:top].copy(), eq, ep, m, step, k0 + cut))

        def add(r, c):
            r = to_step(r, c[5])
            return combine(r, to_step(c, r[5]))

        def whole(x):  # (entry 0 at label 0 again)
            q, p, eq, ep, m, s0, k0 = x
            head = np.zeros(k0)
            return np.concatenate((head, q)), np.concatenate((head, p)), eq, ep, m, s0, 0

        first = (q0, p0, e_q, e_p, 1, 1, 0)
        result = by_squaring(first, t - 1, lambda c: combine(c, c), add)
        return c0, whole(result), whole(combine(result, to_step(first, result[5])))

    def brackets(c0: float, theta: float, x) -> tuple:
        q, p, eq, ep, m, step, _ = x
        lw = m * c0 - theta * (np.arange(q.size) * (step * d))
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.exp(lw)
            out = []
            for y, e in ((q, eq.entry), (p, ep.entry)):
                lo = np.where(y > e, (y - e) * w, 0.0) * (1.0 - 1e-12)
                hi = (np.maximum(y, 0.0) + e) * w * (1.0 + 1e-12)
                out += [np.where(np.isfinite(lo), lo, 0.0), np.where(np.isnan(hi), np.inf, hi)]
        return tuple(out)

    sd_sum = sd1 * math.sqrt(t)
    thetas = [0.0] + [th for th in (k * _LOW_TILT / sd_sum for k in (1, 2, 3, -1)) if fits(th)]
    rest_b: list = []
    full_b: list = []
    step = 1
    for th in thetas:
        c0, rest, full = run(th)
        rest_b.append(brackets(c0, th, rest))
        full_b.append(brackets(c0, th, full))
        step = rest[5]

    def best(bs: list) -> tuple:
        return (np.max([b[0] for b in bs], axis=0), np.min([b[1] for b in bs], axis=0),
                np.max([b[2] for b in bs], axis=0), np.min([b[3] for b in bs], axis=0))

    q_lo, q_hi, p_lo, p_hi = best(full_b)
    dropped = 0.5 * float(np.sum(np.minimum(p_hi, 1.0) - p_lo))
    if _precise.get() and dropped > _EXTENDED_DROP:
        # (the bulk's round-off, entry by entry, drops more than _EXTENDED_DROP of P: the
        # bulk's runs again with long double transforms; every run's bracket holds, the best is kept)
        for th in [th for th in thetas if th <= 0]:
            c0, rest, full = run(th, extended=True)
            rest_b.append(brackets(c0, th, rest))
            full_b.append(brackets(c0, th, full))
        q_lo, q_hi, p_lo, p_hi = best(full_b)
    with np.errstate(divide="ignore"):
        sel = (p_lo > 0) & np.isfinite(q_hi)
        lp, lq = np.log(p_lo[sel]), np.log(q_hi[sel])
        remove = (lp - lq, lp, lq)
        sel = (q_lo > 0) & np.isfinite(p_hi)
        lp, lq = np.log(q_lo[sel]), np.log(p_hi[sel])
        add = (lp - lq, lp, lq)
    return SideAtoms(remove, add), (n + 0.5) * d, int(q_lo.size), best(rest_b) + (step,), dropped
