"""The dominated side's bulk shift: a subsampled step's bulk moved onto its grid point.

On a grid coarser than the sampling rate the bulk of a subsampled step sits
between grid points, where the dominated merge could only round it down a
whole cell per step; an exact per-step loss shift (the pair with Q scaled by
a constant) moves it onto its point, and is taken back off the composed
lattice on the safe side (:func:`_unshift`).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from pld.engine import windows as w
from pld.engine.discretize import discretize
from pld.engine.grid import GridPLD
from pld.engine.limits import _U
from pld.kernels import optimistic_merge_centred

#: the cells around the mode holding at least this P-mass are a bulk worth a
#: shift (see bulk_shift)
BULK_MASS = 0.5


#: how many cells each side of the mode count as the bulk's
BULK_CELLS = 2


#: a shifted bulk cell is aimed this far (relative to the shift, plus 1e-13
#: absolute for its loss's error bound) above its grid point
BULK_SHIFT_ROOM = 1e-6


#: a bulk cell holding this much is also tried a hair above its grid point
ON_POINT_MASS = 0.97


#: at most this many shifts across a spacing are compared
SEARCH_SHIFTS = 24


#: cells above the mode the candidate shifts are compared on
SCORE_CELLS = 256


#: the comparison starts at the window's bottom, or higher where the P-mass below is at most
#: this, or at most ``SCORE_CELLS_BELOW`` cells below the mode: what lies below is left out
#: alike for every candidate (as the window's own bottom leaves out what is below it) but for
#: a sliver of one cell at the bottom, and moves their scores far less than a shift of the
#: bulk does (``h / SEARCH_SHIFTS`` on most of the mass)
SCORE_TAIL_MASS = 1e-13
SCORE_CELLS_BELOW = 1 << 14


def bulk_shift(model, ex: w.Exploration, h: float, k_lo: int, k_hi: int, count: int,
               var_weight: float = 1.0, final_h: float | None = None) -> float:
    """Per-step loss shift that lets the dominated side merge a step's bulk
    with least loss, or 0.

    Without the record a Poisson-subsampled step's loss lies within about
    ``q`` of 0, most of it near the bottom of its support, ``log(1 - q)``.  On
    a grid whose spacing is near or above ``q`` that bulk spans a few cells,
    and where it sits on them decides what the dominated merge
    (:func:`pld.kernels.optimistic_merge_centred`) does with it: a bulk whose
    cells' merged losses lie near their grid points is placed with a small
    merge; one that straddles them must be rounded down (first order in
    ``h`` per step) or lifted with the tail above it, which folds several
    cells into one bucket and removes up to ``8 h^2`` of loss variance per
    step (sigma 0.505, q 3.2e-6, h 1.8e-6: delta 1.9% short after ten steps).

    Discretising ``L + s`` instead moves the law against the grid.  The shift
    is exact: it is the pair with Q scaled by ``e^-s`` (every loss moves by
    ``s``, nothing else), composing ``T`` such steps gives ``L_T + T s``, and
    :func:`_unshift` takes ``T s`` back off, rounded down on the result's
    lattice (safe on this side).  So any ``s`` is valid and only accuracy
    depends on it.  The candidates are ``s = m h / c`` for ``0 <= m < c``
    (at most :data:`SEARCH_SHIFTS` of them), ``c = count >> _power_shift(count)``
    the level the FFT power computes and the shift comes off: ``c s`` is then
    a whole number of spacings (``s`` rounded down so that it is at most
    that, :func:`_shift_down`) and comes off exactly.  Each is merged on the
    cells from the bottom of the window to :data:`SCORE_CELLS` above the mode
    (:func:`_merge_score`), and the one whose merged law keeps most of the
    mean loss plus ``var_weight`` times its variance
    (:func:`pld.engine.discretize.variance_weight`: what T steps' delta feels of
    each), ``count`` times, less what taking it off loses to the lattice
    (:func:`_unshift_loss`: nothing for those candidates), is taken if it
    beats no shift.  Where one cell holds :data:`ON_POINT_MASS` of the law
    the shift that puts it a hair above its grid point is tried too, as it
    is and rounded up onto the candidates.  A bulk of at least
    :data:`BULK_MASS` within :data:`BULK_CELLS` cells of the mode is searched;
    one step has no shift (it could not come off on its own lattice).
    Measured at sigma 0.505, q 3.2e-6, h 1.8e-6, eps 1e-5: the dominated
    delta 0.3% short of the dominating one after 10 steps (was 1.9%) and
    0.4% after 100 (was 6.5%).
    """
    if (getattr(model, "base", None) is None or getattr(model, "side_model", None) is not None
            or not np.any(np.isfinite(ex.log_p)) or count < 2):
        return 0.0
    mode = int(round(float(ex.loss[int(np.argmax(ex.log_p))]) / h))
    lo_j, hi_j = max(k_lo, mode - BULK_CELLS), min(k_hi, mode + BULK_CELLS)
    if hi_j < lo_j:
        return 0.0
    lp, _ = model.cells(np.array([lo_j - 0.5, hi_j + 0.5]) * h)
    if not lp[1] > math.log(BULK_MASS):
        return 0.0
    top = min(k_hi, max(mode, k_lo) + SCORE_CELLS)
    if top - k_lo < 2:
        return 0.0
    # (upwards only: s and s - h merge alike, a lattice point apart, but a law
    # shifted down made the FFT power decline levels it takes shifted up,
    # sigma 0.505, q 3.2e-6, h 1.8e-6, 100 steps)
    base = count >> _power_shift(count)
    if base <= SEARCH_SHIFTS:
        ms = list(range(base))
    else:
        ms = sorted({int(round(i / SEARCH_SHIFTS * base)) for i in range(SEARCH_SHIFTS)})
    # and, for a bulk in one cell (a grid much coarser than q), the shift that
    # puts that cell a hair above its grid point: with its tail far above it
    # can be neither lifted nor lowered, and a shift on the grid of
    # candidates would leave it up to h / SEARCH_SHIFTS above its point, all
    # of which rounding costs (sigma 0.317, q 4.1e-5, h 0.013: 0.04 h per
    # step).  (Where the bulk spans a few cells it gains next to nothing in
    # the score, and offered there it changed the planner's path for the
    # worse: sigma 0.458, q 8.8e-6, T 790000, delta 1e-8 ended at 1.24 of its
    # target with it from a cell of 0.9, 0.90 from 0.97.)
    lp, _ = model.cells(np.array([mode - 0.5, mode + 0.5]) * h)
    shifts = [_shift_down(m, base, h) for m in ms]
    if lp[1] > math.log(ON_POINT_MASS):
        on = _on_point_shift(model, h, mode)
        if on is not None:
            on -= math.floor(on / h) * h  # (into [0, h): a lattice point apart)
            # itself (taken off inexactly) and rounded up onto the candidates' grid
            shifts.append(on)
            m = math.ceil(on * base / h)
            if m < base:
                shifts.append(_shift_down(m, base, h))
    # what each keeps over count steps, less what taking it off loses
    scores = _merge_scores(model, h, _score_bottom(model, h, k_lo, mode), top, sorted(set(shifts)), var_weight)
    gains = {s: count * scores[s] - _unshift_loss(s, count, h, final_h) for s in scores}
    best = max(gains, key=lambda s: (gains[s], -abs(s)))
    return best if best != 0.0 and gains[best] > gains[0.0] else 0.0


def _score_bottom(model, h: float, k_lo: int, mode: int) -> int:
    """The lowest cell the shifts are compared on: ``k_lo``, or the first of ``mode -
    SCORE_CELLS 4^j`` (``j = 0, 1, ...``) above it with at most :data:`SCORE_TAIL_MASS` of
    P-mass below, and at most :data:`SCORE_CELLS_BELOW` below the mode (the comparison
    costs ``SEARCH_SHIFTS^2`` operations a cell, and an add direction's lower tail at small
    noise reaches far below its bulk on a fine grid)."""
    span = SCORE_CELLS
    while mode - span > k_lo:
        if span >= SCORE_CELLS_BELOW:
            return mode - SCORE_CELLS_BELOW
        lp, _ = model.cells(np.array([(mode - span - 0.5) * h]))
        if not lp[0] > math.log(SCORE_TAIL_MASS):
            return mode - span
        span *= 4
    return k_lo


def _unshift_loss(shift: float, count: int, h: float, final_h: float | None = None) -> float:
    """What :func:`_unshift` lowers the composed loss by beyond ``count *
    shift`` when the shift comes off the FFT power's levels as
    :func:`_power_start` first tries them (``count >> s`` steps, copied by
    the squarings, and the rest's level once) or, without a power, off the
    result: each level's total shift is rounded up to the lattice."""
    s = _power_shift(count)
    jump = count >> s
    rem = count - (jump << s)
    first = (jump + rem if 0 < rem and s <= 2 else rem) if jump >= 4 else 0
    if jump < 4:
        jump = count  # (no power: off the result, once)
    copies = (count - first) // jump
    lost = copies * _lattice_gap(jump * Fraction(shift), h)
    if first:
        lost += _lattice_gap(first * Fraction(shift), h)
    # (or off the result instead, once, on the spacing the levels reach:
    # whichever loses less, see _power_start)
    return min(lost, _lattice_gap(count * Fraction(shift), final_h or h))


def _lattice_gap(total: Fraction, h: float) -> float:
    """``ceil(total / h) h - total``: what rounding a shift up to the lattice adds."""
    q = total / Fraction(h)
    return float((-((-q.numerator) // q.denominator) - q) * Fraction(h))


def _on_point_shift(model, h: float, j: int) -> float | None:
    """The shift that puts the merged loss of the cell centred on ``j h`` a
    hair (:data:`BULK_SHIFT_ROOM`) above ``j h``, or None.  The cell's edges
    move with the shift, so it is found by a few fixed-point steps."""
    g = j * h
    shift = 0.0
    above = -math.inf
    for _ in range(8):
        lp, lq = model.cells(np.array([g - 0.5 * h, g + 0.5 * h]) - shift)
        if not (lp[1] > -np.inf and lq[1] > -np.inf):
            return None
        above = float(lp[1] - lq[1]) + shift - g  # the shifted cell's loss over its point
        room = BULK_SHIFT_ROOM * abs(shift) + 1e-13
        if room <= above <= 4.0 * room + 1e-12 * h:
            return shift
        shift -= above - 2.0 * room
        if not abs(shift) <= h:
            return None
    return shift if above >= 0.0 else None


def _shift_down(m: int, count: int, h: float) -> float:
    """The float nearest ``m h / count`` from below in exact arithmetic
    (``count s <= m h``: :func:`_unshift` then moves the lattice by ``m``
    points, and the losses by at most ``m h - count s``, a few ulps, more
    than the shift: safe on this side)."""
    s = m * h / count
    while Fraction(count) * Fraction(s) > m * Fraction(h):
        s = math.nextafter(s, -math.inf)
    return s


def _merge_scores(model, h: float, k_lo: int, k_hi: int, shifts: list, weight: float) -> dict:
    """:func:`_merge_score` of every shift in ``shifts`` (increasing, in
    ``[0, h)``), from one evaluation of the model's cells.

    The candidates' cell edges ``(k + 1/2) h - s`` interleave into one
    increasing grid (``k``-major: the shifts span less than a spacing), whose
    pieces the model gives at once; each candidate's cells are sums of
    ``len(shifts)`` consecutive pieces.  Only for choosing: the merge is run
    without error margins (a score, not a certificate; the chosen shift is
    discretised with them, :func:`pld.engine.discretize.discretize`).  A model with
    atoms takes the one-by-one path.
    """
    loss_a, lp_a, _ = model.atoms()
    if np.any((lp_a > -np.inf) & np.isfinite(loss_a)) or not shifts:
        return {s: _merge_score(model, h, k_lo, k_hi, s, weight) for s in shifts}
    m = len(shifts)
    n = k_hi - k_lo + 1
    desc = np.array(shifts[::-1])  # (decreasing shift: increasing edge within a k)
    ks = np.arange(k_lo - 1, k_hi + 1)  # upper edge of cell k is (k + 1/2) h; k_lo - 1: the lowest lower edge
    grid = ((ks[:, None] + 0.5) * h - desc[None, :]).ravel()
    lp, lq = model.cells(grid)  # len(grid) + 1: below, pieces, above
    out = {}
    pts = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    common = m * n + m - 1  # index in grid of the highest candidate's upper edge
    with np.errstate(invalid="ignore", divide="ignore"):
        rp, rq = np.logaddexp.reduce(lp[common + 1:]), np.logaddexp.reduce(lq[common + 1:])
        rest_p = math.exp(rp) if rp > -np.inf else 0.0
        rest_l = float(rp - rq) if rest_p > 0.0 and np.isfinite(rp - rq) else 0.0
    zeros = np.zeros(n + 1)
    err = np.full(n + 1, 1e-15)
    for j, s in enumerate(desc):
        # edge index of (k + 1/2) h - s in grid: (k - k_lo + 1) * m + j
        first = j  # the lower edge of cell k_lo
        cp = _lse_rows(lp[first + 1: first + 1 + m * n].reshape(n, m))  # cell k: m pieces
        cq = _lse_rows(lq[first + 1: first + 1 + m * n].reshape(n, m))
        top = first + m * n  # index in grid of the window's upper edge
        ap = np.logaddexp.reduce(lp[top + 1:])
        aq = np.logaddexp.reduce(lq[top + 1:])
        cell_p = np.concatenate((cp, [ap]))
        cell_q = np.concatenate((cq, [aq])) - s  # (the pair of L + s: Q scaled by e^-s)
        with np.errstate(invalid="ignore"):
            mass = optimistic_merge_centred(cell_p, cell_q, pts, h, err, zeros, float(weight), -math.inf)
        loss = pts * h - s
        # What the merge left of the law above the window (a fraction of it:
        # lifts take fractions) at its losses: the pieces up to the highest
        # candidate's window each at its own, the rest, the same for every
        # candidate, at its merged loss (lumped at a boundary that moved with
        # the shift, the tail's own spread would differ between candidates:
        # sigma 0.34, q 4.2e-3, T 1.6e6 read that as 700 spacings)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            total = float(np.exp(cell_p[np.isfinite(cell_p)]).sum())
            above = math.exp(ap) if ap > -np.inf else 0.0
            left = max(0.0, total - float(mass.sum()))
            frac = min(1.0, left / above) if above > 0.0 else 0.0
            pieces_p = np.exp(lp[top + 1: common + 1])
            pieces_l = np.where(pieces_p > 0.0, lp[top + 1: common + 1] - lq[top + 1: common + 1], 0.0)
        parts_m = np.concatenate((mass, frac * pieces_p, [frac * rest_p]))
        parts_l = np.concatenate((loss, pieces_l, [rest_l]))
        msum = float(parts_m.sum())
        if not msum > 0.0:
            out[float(s)] = -math.inf
            continue
        mean = float(np.dot(parts_m, parts_l)) / msum
        var = float(np.dot(parts_m, (parts_l - mean) ** 2)) / msum
        out[float(s)] = mean + weight * var
    return out


def _lse_rows(x: np.ndarray) -> np.ndarray:
    """log of the row sums of ``e^x`` (rows of ``-inf`` give ``-inf``)."""
    top = x.max(axis=1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(x - safe[:, None]).sum(axis=1))


def _merge_score(model, h: float, k_lo: int, k_hi: int, shift: float, weight: float) -> float:
    """Mean plus ``weight`` times variance of the dominated merge of
    ``L + shift`` on the grid points ``k_lo..k_hi`` (taken back by ``shift``),
    with what the merge left of the law above the window at its merged loss."""
    g = discretize(model, h, k_lo, k_hi, 0.0, False, loss_shift=shift, var_weight=weight)
    p = np.exp(g.log_masses())
    loss = (g.k0 + np.arange(p.size)) * h - shift
    lp, lq = model.cells(np.array([k_lo - 0.5, k_hi + 0.5]) * h - shift)
    with np.errstate(invalid="ignore", divide="ignore"):
        rest = max(0.0, math.exp(lp[1]) + math.exp(lp[2]) - float(p.sum()))
        rest_loss = float(lp[2] - lq[2]) if rest > 0.0 and np.isfinite(lp[2] - lq[2]) else 0.0
    mass = float(p.sum()) + rest
    if not mass > 0.0:
        return -math.inf
    mean = (float(np.dot(p, loss)) + rest * rest_loss) / mass
    var = (float(np.dot(p, (loss - mean) ** 2)) + rest * (rest_loss - mean) ** 2) / mass
    return mean + weight * var


def _unshift(g: GridPLD, total_shift: Fraction) -> GridPLD:
    """The dominated grid of ``L_T`` from that of ``L_T + total_shift``: the
    lattice moved down by ``ceil(total_shift / h)`` points (each loss lowered
    by less than one spacing more than the shift: safe on this side), the
    untilted masses kept (``log_scale`` moves by ``lam`` times the drop)."""
    q = total_shift / Fraction(g.h)
    k = -((-q.numerator) // q.denominator)  # ceil, exactly
    if k == 0:
        return g
    exact = Fraction(g.log_scale) - Fraction(g.lam) * Fraction(k) * Fraction(g.h)
    log_scale = float(exact)
    p = g.p * math.exp(float(exact - Fraction(log_scale)))
    l2 = float(np.sqrt(np.dot(p, p)))
    err = g.err * (1.0 + 1e-15) + 4.0 * _U * (abs(log_scale) + 2.0) * l2
    return dataclasses.replace(g, k0=g.k0 - k, p=p, log_scale=log_scale, err=err, rel_err=None)


def _power_shift(count: int) -> int:
    """Squarings after the FFT power: ``count = (count >> s) 2^s + r`` with
    the power computing ``count >> s`` steps (and ``r < 2^s``) from one
    transform, at the first late level (``8 c >= count``), where re-gridding
    may start.  An exact quotient rather than a power of two: 14040 steps are
    3510 x 4 (a power and two squarings), where the largest power of two,
    2048, would leave 1752 steps and six levels to add up."""
    return 2 if count >= 16 else 0
