"""One coordinate's law and one round's two sides from it (random allocation).

A coordinate ``Y`` spread onto the grid (upper) or merged onto it (lower), the
tilted runs of the sum of ``t`` of them (:mod:`pld.mechanisms.allocation.levels`),
and the atoms each side's pair is read off (:class:`SideAtoms`).  See
:mod:`pld.mechanisms.allocation.sums` for the argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pld._special import ndtr
from pld.engine import fft as _fft
from pld.engine.cache import in_background, side_pool
from pld.engine.mgf_bounds import _mgf_bound_from
from pld.kernels import lump_blocks
from pld.mechanisms.allocation.levels import (
    _MAX_TILTS,
    _NEGLIGIBLE,
    _REL_OK,
    _RHO_CAP,
    _TILT_STRIDE,
    _U,
    _dev,
    _Level,
    _pad,
    _precise,
    _Run,
    _sum_levels,
    _tilted,
    window,
)
from pld.mechanisms.allocation.roundoff import Err


def coordinate_spread(mu: float, a: float, d: float, n: int) -> np.ndarray:
    from pld.kernels import spread_law

    return spread_law(mu, a, d, n)


def _coordinate_upper(mu: float, a: float, d: float, n: int, t: int, xs: np.ndarray | None = None) -> tuple:
    """One coordinate's spread on ``[0, n d]``, ``(total Q, total P, cut Q, cut P)`` of its measure,
    and bounds on its log-MGF at a range of Chernoff parameters.

    The tail beyond the window, ``Y > n d``, which the spread leaves out, is
    cut: its Q-mass ``1 - F`` and P-mass ``1 - G`` bounded above; the totals
    include the spread's rounding slack.
    """
    xs = coordinate_spread(mu, a, d, n) if xs is None else xs
    g = np.arange(n + 1) * d
    z_top = (math.log(n * d) - mu) / a
    tail_q = float(ndtr(-z_top)) * (1 + 1e-12) + 1e-300
    tail_p = float(ndtr(a - z_top)) * (1 + 1e-12) + 1e-300
    tot_q = math.fsum(xs.tolist()) * (1 + 4 * _U) + tail_q
    tot_p = math.fsum((g * xs).tolist()) * (1 + 8 * _U) + tail_p
    # log-MGF bounds of the measure at Chernoff parameters from the scale of
    # the whole sum to that of one coordinate's window
    # (negative ones, up to e^{-600} per cell, for the lower tail)
    chern = np.concatenate((-np.geomspace(0.1 / window(a, t, t), 600.0 / d, 48),
                            np.geomspace(0.1 / window(a, t, t), 600.0 / (n * d), 48)))
    with np.errstate(divide="ignore"):
        lx = np.log(xs)
    # (the engine's certified bound: one exp per entry, not one per entry and parameter)
    lmgf = _mgf_bound_from(lx, g, d, chern)
    return xs, (tot_q, tot_p, tail_q, tail_p), chern, lmgf


def _run_upper(a: float, d: float, t: int, coord: tuple, theta: float, coarse_sd: float,
               limit: float = math.inf, cap: float = math.inf, extended: bool = False) -> tuple[_Run, _Level]:
    xs, (tot_q, tot_p, tail_q, tail_p), chern, lmgf = coord
    g = np.arange(xs.size) * d
    y, c0, rel = _tilted(xs, g, theta)
    # (a lower-tail run reads its entries below the limit as exact: no level may be cut
    # below it by its own window, or what that cut would be missing there)
    run = _Run(a, d, t, theta, c0, True, tot_q, tot_p, chern, limit=limit, cap=cap,
               exact_below_limit=limit < math.inf, extended=extended)
    e0 = Err.of_entries(rel * y)
    py = g * y  # the marked coordinate's law (P-mass = value x Q-mass)
    ep0 = Err.of_entries((rel + 2.0 * _U) * py)
    lv = _Level(y, py, e0, ep0, 1, 1, tail_q, tail_p, lmgf)
    return run, _sum_levels(run, lv, coarse_sd)


def _bracket(run: _Run, lv: _Level, x: np.ndarray, e: float) -> tuple[np.ndarray, np.ndarray]:
    """Untilted ``(lower, upper)`` brackets on every entry of one of the run's final arrays."""
    lw = run.log_w(lv.m, lv.step, np.arange(x.size, dtype=float))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        w = np.exp(lw)
        lo = np.where(x > e, (x - e) * w, 0.0) * (1.0 - 1e-12)
        hi = (np.maximum(x, 0.0) + e) * w * (1.0 + 1e-12)
    # an untilting factor that overflows (a tilt whose tilted law is dominated by a
    # tail, its entries far below its total) tells nothing: [0, inf], never nan
    # (a nan would win the runs' entrywise minimum)
    lo = np.where(np.isfinite(lo), lo, 0.0)
    hi = np.where(np.isnan(hi), np.inf, hi)
    return lo, hi


def _next_tilt(values: np.ndarray, rel_bound: np.ndarray, s: np.ndarray, covering: np.ndarray,
               thetas: list[float], upward: bool) -> tuple[float | None, int]:
    """The next tilt for one tail (None when that tail is resolved) and the frontier.

    ``values``: the best untilted estimates, ``rel_bound``: their relative
    round-off bound; the frontier is the last entry (towards the tail) still
    resolved to ``_REL_OK`` (or to 30 times the best entry's bound).  A
    Gaussian-like law ``e^{-(s - mu)^2 / (2 v)}`` tilted by ``theta`` is
    resolved on a range of the same width centred ``theta v`` further out,
    so a tilt ``theta_f + 2.5 (slope - theta_f)`` (``slope``: the law's decay
    rate at the frontier, ``theta_f`` the tilt that resolves it) continues
    the resolved range (an overlap of 1/4 of the range).
    """
    ok = _resolved(rel_bound)
    if ok is None:
        return None, -1
    idx = np.nonzero(ok)[0]
    f = int(idx[-1]) if upward else int(idx[0])
    if f == (values.size - 1 if upward else 0):
        return None, f
    beyond = slice(f + 1, None) if upward else slice(0, f)
    # (what lies beyond: bounded by the best bracket's upper end)
    rest = float(np.sum(values[beyond] * (1.0 + np.minimum(rel_bound[beyond], 1e300))))
    if rest <= _NEGLIGIBLE:
        return None, f
    j = max(1, min(8, f if upward else values.size - 1 - f))
    f2 = f - j if upward else f + j
    if values[f] <= 0 or values[f2] <= 0:
        return None, f
    slope = -(math.log(values[f]) - math.log(values[f2])) / (s[f] - s[f2])
    th_f = thetas[int(covering[f])]
    nxt = th_f + _TILT_STRIDE * (slope - th_f)
    if (upward and nxt <= th_f * 1.05) or (not upward and nxt >= th_f * 1.05):
        return None, f
    return nxt, f


def _resolved(rel_bound: np.ndarray) -> np.ndarray | None:
    """The entries resolved to ``_REL_OK`` (or to 30 times the best entry's bound); None if
    no entry has a finite bound."""
    finite = np.isfinite(rel_bound)
    if not np.any(finite):
        return None
    return rel_bound <= max(_REL_OK, 30.0 * float(np.min(rel_bound[finite])))


def _resolved_from_bulk(rel_bound: np.ndarray) -> int:
    """The last entry upwards of the range around the best-resolved entry (the bulk) resolved
    throughout (:func:`_resolved`; -1 if none): below :func:`_next_tilt`'s frontier where a run
    tilted too far resolves entries beyond a gap, whose entries are lumped."""
    ok = _resolved(rel_bound)
    if ok is None:
        return -1
    start = int(np.argmin(np.where(np.isfinite(rel_bound), rel_bound, np.inf)))
    gaps = np.nonzero(~ok[start:])[0]
    return start + int(gaps[0]) - 1 if gaps.size else rel_bound.size - 1


# ------------------------------------------------------------ public
@dataclass(frozen=True, eq=False)
class SideAtoms:
    """One side's discrete pairs, per direction: ``(loss, log P, log Q)`` with the ``+inf`` atom."""

    remove: tuple[np.ndarray, np.ndarray, np.ndarray]
    add: tuple[np.ndarray, np.ndarray, np.ndarray]


def bracket_atoms(p_lo: np.ndarray, p_hi: np.ndarray, q_lo: np.ndarray, q_hi: np.ndarray) -> SideAtoms:
    """A dominated pair from entrywise brackets of the two laws of a statistic (the same
    outcomes): remove atoms take the lower P-mass against the upper Q-mass, add atoms the
    lower Q-mass against the upper P-mass (lower P-masses and losses: dominated)."""
    with np.errstate(divide="ignore"):
        sel = p_lo > 0
        lp, lq = np.log(p_lo[sel]), np.log(q_hi[sel])
        remove = (lp - lq, lp, lq)
        sel = q_lo > 0
        lp, lq = np.log(q_lo[sel]), np.log(p_hi[sel])
        add = (lp - lq, lp, lq)
    return SideAtoms(remove, add)


def by_loss(side: SideAtoms) -> SideAtoms:
    """``side`` with each direction's atoms in increasing loss (stable; the same pairs): the
    engine's spreads find an atom's cell from the previous one's
    (:func:`pld.kernels.pessimistic_spread_atoms`), at a constant cost when they come in order."""
    def ordered(d: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        loss = d[0]
        if loss.size < 2 or not np.any(loss[1:] < loss[:-1]):
            return d
        order = np.argsort(loss, kind="stable")
        return loss[order], d[1][order], d[2][order]
    return SideAtoms(ordered(side.remove), ordered(side.add))


def atoms(side: SideAtoms, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loss, log P, log Q)`` of one direction's discrete pair, ``+inf`` atom included."""
    return side.remove if direction == "remove" else side.add


def _with_inf(loss, lp, lq, inf: float):
    if inf > 0.0:
        loss = np.append(loss, np.inf)
        lp = np.append(lp, math.log(inf))
        lq = np.append(lq, -np.inf)
    return loss, lp, lq


def _upper_atoms(q_hi: np.ndarray, p_hi: np.ndarray, s: np.ndarray, t: int, lost_q: float, lost_p: float,
                 extra_remove: list, extra_add: list) -> SideAtoms:
    """Atoms at the grid values' losses: remove with P-masses ``p_hi``, add with
    ``q_hi``; plus the lumped round-off, as ``(loss, P-mass)`` atoms (Q-mass
    ``P e^{-loss}``), and the masses at ``+inf``."""
    def extra(lst):
        if not lst:
            return np.zeros(0), np.zeros(0)
        lo, m = np.array(lst, dtype=float).T
        return lo, np.log(m)

    with np.errstate(divide="ignore"):
        sel = (p_hi > 0) & (s > 0)
        el, elp = extra(extra_remove)
        lam = np.concatenate((np.log(s[sel] / t), el))
        lp = np.concatenate((np.log(p_hi[sel]), elp))
        remove = _with_inf(lam, lp, lp - lam, min(1.0, lost_p))
        sel = (q_hi > 0) & (s > 0)
        el, elp = extra(extra_add)
        lam = np.concatenate((-np.log(s[sel] / t), el))
        lq = np.concatenate((np.log(q_hi[sel]), elp))
        # Lambda = 0 (every Y at the grid's first point) is a loss of +inf when added
        add = _with_inf(lam, lq, lq - lam, min(1.0, lost_q + float(q_hi[0])))  # (s[0] = 0)
    return SideAtoms(remove, add)


def _lower_merged(mu: float, a: float, d: float, n: int, t: int,
                  coarse_sd: float) -> tuple[SideAtoms, float, float]:
    """The dominated pair: conditional-mean merges (every atom's likelihood ratio is
    its grid value times ``1 +- rho``), untilted.

    The first merge cuts ``Y`` into cells whose conditional means are the
    grid points (:func:`pld.kernels.allocation.merged_law`); each re-grid
    merges with exact conditional means (:func:`_merge`).  The losses are
    then known to ``rho`` whatever the round-off: the remove direction takes
    ``log(v (1 - rho) / t)`` with P-mass ``p - E_p``, the add direction
    ``-log(v (1 + rho) / t)`` with P-mass ``q - E_q`` (lower, both; a pair
    with smaller masses and smaller losses is dominated).
    """
    from pld.kernels import merged_law

    g = np.arange(n + 1) * d
    xm, rho0, _, e_xm, e_gxm = merged_law(mu, a, d, n, _RHO_CAP)
    e0 = Err.of_l2(e_xm, xm.size).mapped(1.0, 1.0, 2.0 * _U, xm)
    gx = (1.0 - rho0) * g * xm
    # (the products round by an ulp or two each)
    e0p = Err.of_l2(e_gxm, gx.size).mapped(1.0, 1.0, 4.0 * _U, gx)
    # the merged cells' means are g (1 +- rho0): the marked law at the grid
    # values times (1 - rho0) is below the true one
    first = _Level(xm, gx, e0, e0p, 1, 1, rho_s=rho0 * (1.0 + 1e-12))
    lv = _sum_levels(_Run(a, d, t, 0.0, 0.0, False, merge=True), first, coarse_sd)
    assert lv.p is not None
    dev, edev = _dev(lv, d)
    p = lv.p - lv.ep.entry
    q = lv.q - lv.eq.entry
    v = np.arange(q.size) * (lv.step * d)
    # each atom's relative deviation |m - v| / v <= rho_k
    ok = (q > 0) & (v > 0)
    rho = np.full(q.size, np.inf)
    rho[ok] = (dev[ok] + edev) / (q[ok] * v[ok]) * (1.0 + 1e-12)
    lam = np.zeros(q.size)
    lam[ok] = np.log(v[ok] / t)
    with np.errstate(divide="ignore", invalid="ignore"):
        sel = ok & (p > 0) & (rho < 0.5)
        lr = lam[sel] + np.log1p(-rho[sel])
        lp = np.log(p[sel])
        remove = (lr, lp, lp - lr)
        sel = ok & (rho < 0.5)
        la = lam[sel] + np.log1p(rho[sel])
        lq = np.log(q[sel])
        add = (-la, lq, lq + la)
    worst = float(np.max(rho[ok & (rho < 0.5)])) if np.any(ok & (rho < 0.5)) else 0.0
    return SideAtoms(remove, add), float(np.median(rho[ok])) if np.any(ok) else 0.0, worst


@dataclass(eq=False)
class _UpperRuns:
    """The upper side's tilted runs on one object, their entrywise brackets combined."""

    thetas: list
    step: int
    size: int
    s: np.ndarray
    q_hi: np.ndarray
    p_hi: np.ndarray
    lost_q: float
    lost_p: float
    #: lumped round-off for the remove direction, whose loss grows with the value:
    #: (smallest value / m, largest value / m, Q-mass, P-mass) per block, placed
    #: at its largest value (see :mod:`pld.kernels.lumps`)
    lumps: list
    #: set when an upward tilt was refused for the cost of its coordinate cut (a
    #: heavy upper tail): the cut (first-grid index) it wanted
    heavy_cut: int | None
    roundoff: float
    base_lmgf: np.ndarray
    base_chern: np.ndarray
    #: the same for the add direction (loss falls with the value): placed at the smallest
    lumps_add: list
    #: the untilted run's lumped round-off (Q- plus P-mass) as built in double: past
    #: ``_EXTENDED_LUMPS`` a precise round redoes it in long double
    lumped: float = 0.0


def _upper_runs(a: float, d: float, n: int, t: int, coarse: float, cut, coord_of, fixed_cut: int | None = None,
                m: int | None = None, valley=None, fits=None, cap: float = math.inf) -> _UpperRuns:
    """The ``m``-fold (default ``t``) sum of the upper side: an untilted run, then tilts.

    ``cut(theta)``: the coordinate cut of a tilt; ``coord_of(nb)``: the
    coordinate measure cut at ``nb`` (see :func:`_coordinate_upper`).  With
    ``fixed_cut`` every run uses that cut (one object: their entries mix
    without extra cut mass) and an upward tilt is kept only while its own cut
    reaches it.
    """
    m = t if m is None else m
    coords: dict[int, tuple] = {}
    # a lower-tail run (theta < 0) serves the entries below the mean of S only
    low_limit = float(m)
    base_cut = n if fixed_cut is None else fixed_cut

    def coordinate(nb: int) -> tuple:
        if nb not in coords:
            coords[nb] = coord_of(nb)
        return coords[nb]

    def run_up(theta: float, extended: bool = False):
        if theta < 0:
            nb = min(base_cut, int(math.ceil(low_limit / d)) + 1)
        else:
            nb = base_cut if (fixed_cut is not None or theta == 0) else cut(theta)
        return nb, _run_upper(a, d, m, coordinate(nb), theta, coarse, low_limit if theta < 0 else math.inf, cap,
                              extended)

    thetas = [0.0]
    runs_up = [run_up(0.0)]
    # (a precise round nearly always redoes the untilted run in long double, below: started
    # now on the other core, beside the tilts, which do not depend on it; the same run as if
    # started there, so the same pairs)
    precise_run = (in_background(lambda: run_up(0.0, extended=True))
                   if _precise.get() and _fft.extended_available() and side_pool() is not None else None)
    size = runs_up[0][1][1].q.size
    step = runs_up[0][1][1].step
    s = np.arange(size) * (step * d)

    def brackets() -> tuple[np.ndarray, np.ndarray]:
        los, his = [], []
        for _, (r, lv) in runs_up:
            assert lv.step == step
            lo, hi = _bracket(r, lv, lv.q, lv.eq.entry)
            lo, hi = _pad(lo, size), _pad(hi, size)
            if r.limit < math.inf:
                out = s >= r.limit
                lo[out], hi[out] = 0.0, math.inf
            los.append(lo)
            his.append(hi)
        return np.vstack(los), np.vstack(his)

    def lost(runs) -> tuple[float, float]:
        # runs on the same coordinate cut bound the same object (the smallest
        # bound of its cut masses holds); different cuts add
        by_cut: dict[int, tuple[float, float]] = {}
        for nb, (r, lv) in runs:
            if r.limit < math.inf:
                continue  # (its entries are exact below its limit: nothing cut)
            q0, p0 = by_cut.get(nb, (math.inf, math.inf))
            by_cut[nb] = (min(q0, lv.lost_q), min(p0, lv.lost_p))
        return sum(v[0] for v in by_cut.values()), sum(v[1] for v in by_cut.values())

    def relative() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        los, his = brackets()
        i = np.argmin(his, axis=0)
        hi = his[i, np.arange(size)]
        lo = np.max(los, axis=0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return lo, hi, np.where(lo > 0, (hi - lo) / np.maximum(lo, 1e-300), np.inf), i

    heavy_cut = None
    for upward in (True, False):
        frontier, between, known = -1, upward and fixed_cut is not None, None
        # (a first grid of more cells than _TILT_CELLS gets no tilted runs: each
        # would cost as much as the untilted one; its tails are lumped instead)
        for _ in range(_MAX_TILTS if base_cut <= _TILT_CELLS else 0):
            lo, hi, rel, i = known if known is not None else relative()
            known = None
            th, f = _next_tilt(0.5 * (lo + hi), rel, s, i, thetas, upward)
            bulk = _resolved_from_bulk(rel) if between and len(thetas) > 1 else f
            if (between and (bulk < f or (th is not None and f == frontier)) and bulk >= 0
                    and thetas[int(i[bulk])] < thetas[-1]):
                # the last tilt went too far: it resolves nothing new (its tilted law at the
                # window's edge: sigma 3, 1-of-161) or only beyond a gap, whose entries would be
                # lumped (sigma 5.6, 1-of-162).  Once, a tilt halfway between the one that covers
                # the bulk's range and the last, kept where it resolves the gap from the bulk on
                between = False
                mid = 0.5 * (thetas[int(i[bulk])] + thetas[-1])
                new = run_up(mid)
                if new[1][1].step == step and (fits is None or fits(mid, fixed_cut)):
                    thetas.append(mid)
                    runs_up.append(new)
                    known = relative()  # (the next pass's brackets, if the run stays)
                    if _resolved_from_bulk(known[2]) >= max(f, bulk + 1):
                        continue
                    known = None
                    thetas.pop()
                    runs_up.pop()
            if th is None or f == frontier:
                break  # resolved, or the last tilt did not move the frontier
            frontier = f
            if upward and fixed_cut is not None and fits is not None and not fits(th, fixed_cut):
                break  # on a fixed cut, the tilted tail would outweigh the bulk
            if upward and fixed_cut is None and cut(th) < 8:
                if valley is not None and valley(th) >= 8:
                    heavy_cut = valley(th)  # a heavy tail from the bulk on: tilt a light part only
                break  # no bulk left to tilt
            new = run_up(th)
            if new[1][1].step != step:
                # (the re-grid schedule stops at 64 entries: a lower-tail run on a short
                # window can end on another spacing, and its entries would not line up)
                break
            before = lost(runs_up)
            after = lost(runs_up + [new])
            if max(after[0] - before[0], after[1] - before[1]) > max(before[0], before[1], _CUT_COST):
                heavy_cut = new[0]
                break  # its coordinate cut would cost more at +inf than it resolves (a heavy tail)
            thetas.append(th)
            runs_up.append(new)

    # the tightest upper bracket of each entry; every run's cut mass; entries
    # resolved to worse than _LUMP keep their estimate and their round-off is
    # lumped, per run over the entries it covers (sum |e_k| w_k at most the smallest
    # of E_2 ||w||_2, E_inf ||w||_1 and E_1 max w: not n E), in blocks of consecutive entries
    def read() -> tuple[np.ndarray, np.ndarray, list, list, float, float]:
        _, his = brackets()
        best = np.argmin(his, axis=0)
        q_hi = his[best, np.arange(size)]
        p_hi = v * q_hi
        lumps: list[tuple[float, float, float, float]] = []
        lumps_add: list[tuple[float, float, float, float]] = []
        first = 0.0  # (the untilted run's lumped P- and Q-mass)
        slack = 0.0  # (and the Q-mass its round-off adds to the entries it brackets)
        for j, (_, (r, lv)) in enumerate(runs_up):
            assert lv.p is not None
            x = _pad(lv.q, size)
            noisy = (best == j) & (lv.eq.entry > _LUMP * np.maximum(x, 0.0))
            noisy[0] = False  # (entry 0 keeps its bracket; a Chernoff bound may tighten it)
            if j == 0:
                kept = np.nonzero((best == 0) & ~noisy)[0].astype(float)
                slack = lv.eq.entry * float(np.sum(np.exp(np.minimum(r.log_w(lv.m, lv.step, kept), 700.0))))
            if not np.any(noisy):
                continue
            idx = np.nonzero(noisy)[0]
            lw_all = r.log_w(lv.m, lv.step, idx.astype(float))
            y_all = _pad(lv.p, size)[idx]
            bounds = np.linspace(0, idx.size, _LUMP_BLOCKS + 1).astype(np.int64)
            # (the remove direction's P-masses from the run's own P-law: its round-off E_p is
            # not multiplied by the likelihood ratio)
            q_k, p_k, remove, add = lump_blocks(v[idx], lw_all, x[idx], y_all, bounds, _norms(lv.eq), _norms(lv.ep),
                                                _LUMP_NATS, float(_LUMP_DEPTH))
            q_hi[idx], p_hi[idx] = q_k, p_k
            blocks = [tuple(row) for row in remove.tolist()]
            lumps += blocks
            lumps_add += [tuple(row) for row in add.tolist()]
            if j == 0:
                for row in blocks:
                    first += row[2] + row[3]
        return q_hi, p_hi, lumps, lumps_add, first, slack

    lost_q, lost_p = lost(runs_up)
    v = s / m
    q_hi, p_hi, lumps, lumps_add, first, slack = read()
    lumped = first
    # (the untilted run's round-off, lumped where no tilt resolves it or added to the entries
    # it brackets, is a share of what strict deltas read: that run again with long double
    # transforms; its grids follow the sizes alone, so its entries line up with the others')
    redo = first + slack > _EXTENDED_LUMPS
    if precise_run is not None and not redo:
        precise_run.wait()  # (not needed after all; a thread left running would compete with the rest)
    if _precise.get() and redo and _fft.extended_available():
        again = precise_run.result() if precise_run is not None else run_up(0.0, extended=True)
        if again[1][1].step == step and again[1][1].q.size == size:
            runs_up[0] = again
            lost_q, lost_p = lost(runs_up)
            q_hi, p_hi, lumps, lumps_add, first, _ = read()
    # entry 0 (every coordinate spread to 0: Lambda = 0, an add-direction loss of
    # +inf): Chernoff for the lower tail, Q(S = 0) <= E[e^{theta S}], theta < 0
    r0, base = runs_up[0][1]
    assert base.lmgf is not None and r0.chern is not None
    neg = r0.chern < 0
    q_hi[0] = min(float(q_hi[0]), math.exp(min(float(np.min(base.lmgf[neg])), 0.0)) * (1 + 1e-9))
    return _UpperRuns(thetas, step, size, s, q_hi, p_hi, lost_q, lost_p, lumps, heavy_cut,
                      max(lv.eq.entry for _, (_, lv) in runs_up), base.lmgf, r0.chern, lumps_add, lumped)


def _norms(e: Err) -> np.ndarray:
    """``(l1, l2, inf)`` of an error bound: :func:`pld.kernels.lump_blocks` takes them as an array."""
    return np.array([e.l1, e.l2, e.inf], dtype=np.float64)


def _regrid_to(x: np.ndarray, d: float, df: float) -> np.ndarray:
    """A measure on ``i d`` spread onto ``j df`` (mean-preserving, shares rounded up)."""
    g = np.arange(x.size) * d
    j = np.floor(g / df).astype(np.int64)
    frac = np.clip(g / df - j, 0.0, 1.0)
    out = np.zeros(int(j[-1]) + 2)
    np.add.at(out, j, x * (1.0 - frac))
    np.add.at(out, j + 1, x * frac)
    return out * (1.0 + 1e-12)


def _upper_jump(mu: float, a: float, d: float, n: int, t: int, coarse: float, nb: int, spread_full: np.ndarray,
                cut, fits):
    """The upper side by the number of heavy coordinates (``Y > nb d``).

    With ``L`` the spread measure of one coordinate on ``[0, nb d]`` and ``H``
    on ``(nb d, n d]`` (the entry at ``nb`` taken whole: more mass is safe),
    the ``t``-fold sum's Q-measure is ``sum_j C(t, j) L^{*(t-j)} * H^{*j}``.
    ``j = 0, 1`` are ``R * (L + t H)`` with ``R = L^{*(t-1)}`` (tilted runs on
    one object: ``L`` is light-tailed, so upward tilts resolve ``R``'s tail),
    convolved directly (positive terms: relative rounding) after re-gridding
    the last coordinate to ``R``'s spacing (a spread); ``j >= 2`` and the tail
    beyond the first window go to ``+inf`` (their masses bounded).  Returns the
    pieces of the upper atoms, or None when ``t < 2``.
    """
    if t < 2:
        return None
    xs_l, _, _, _ = coord_l = _coordinate_upper(mu, a, d, nb, t)
    # nothing of L is cut at the first level: the heavy part is counted below
    (tot_q, tot_p, _, _) = coord_l[1]
    coord_l = (xs_l, (tot_q, tot_p, 0.0, 0.0), coord_l[2], coord_l[3])
    up = _upper_runs(a, d, n, t, coarse, cut, lambda k: coord_l if k == nb else _light(coord_l, k), fixed_cut=nb,
                     m=t - 1, fits=fits)
    df = up.step * d
    g = np.arange(n + 1) * d
    heavy = np.zeros(n + 1)
    heavy[nb:] = spread_full[nb:]
    light = np.zeros(n + 1)
    light[: nb + 1] = xs_l
    kern = _regrid_to(light + t * heavy, d, df)
    r = np.maximum(up.q_hi, 0.0)
    q = np.convolve(r, kern) * (1.0 + 2.0 * (min(r.size, kern.size) + 4) * _U)
    s = np.arange(q.size) * df
    v = s / t
    q_h = math.fsum(spread_full[nb:].tolist()) * (1 + 1e-12)
    p_h = math.fsum((g[nb:] * spread_full[nb:]).tolist()) * (1 + 1e-12)
    t_k = math.fsum(kern.tolist()) * (1 + 1e-12)
    t_gk = math.fsum((np.arange(kern.size) * df * kern).tolist()) * (1 + 1e-12)
    big = max(1.0, tot_q + q_h) ** t  # (a bound on every total raised to at most t)
    # R's cut parts times the last coordinate (P: the mean of S/t over them)
    lost_q = up.lost_q * t_k
    lost_p = ((t - 1) * up.lost_p * t_k + up.lost_q * t_gk) / t
    # the tail beyond the first window (as in _coordinate_upper), and j >= 2
    z_top = (math.log(n * d) - mu) / a
    tail_q = float(ndtr(-z_top)) * (1 + 1e-12) + 1e-300
    tail_p = float(ndtr(a - z_top)) * (1 + 1e-12) + 1e-300
    lost_q += (t * tail_q + 0.5 * t * (t - 1) * q_h * q_h) * big
    lost_p += (tail_p + (t - 1) * tail_q + p_h * (t - 1) * q_h + tot_p * 0.5 * (t - 1) * (t - 2) * q_h * q_h) * big
    # R's lumped round-off lands within one window above its block
    w_top = (kern.size - 1) * df
    extra_remove, extra_add = [], []
    for _, vmax, dq, _ in up.lumps:
        top = vmax * (t - 1) + w_top
        extra_remove.append((math.log(top / t), dq * t_k * top / t))
    for vmin, _, dq, _ in up.lumps_add:
        if vmin > 0:
            extra_add.append((-math.log(vmin * (t - 1) / t), dq * t_k))
        else:
            lost_q += dq * t_k
    p_hi = v * q
    return q, p_hi, s, min(1.0, lost_q), min(1.0, lost_p), extra_remove, extra_add


def _light(coord_l: tuple, k: int) -> tuple:
    """``coord_l`` cut further at ``k`` (the lower-tail runs: entries below their limit only)."""
    xs, (tot_q, tot_p, _, _), chern, lmgf = coord_l
    return xs[: k + 1].copy(), (tot_q, tot_p, 0.0, 0.0), chern, lmgf


#: largest first grid that gets tilted runs
_TILT_CELLS = 1 << 20
#: relative round-off above which an entry's round-off is lumped (at the largest
#: loss of its block of consecutive entries)
_LUMP = 1e-3
#: blocks per run of lumped entries
_LUMP_BLOCKS = 64
#: the untilted run's lumped round-off (its Q- plus P-mass) and the Q-mass its round-off adds
#: to the entries it brackets, past which that run is redone in long double (the lumps of a
#: round are placed at their blocks' largest loss; the added mass widens the bulk: sigma 2.46,
#: 1 of 700968, lumping nothing, read its upper end 3.9e-6 higher in double)
_EXTENDED_LUMPS = 1e-12
#: a block's lumps are cut where its entries' untilting weight falls by this many nats ...
_LUMP_NATS = 4.0
#: ... down to this many cuts (what lies lower is one part: its share is below e^-48)
_LUMP_DEPTH = 12
#: cut mass (at +inf) a tilted run may add without doubling the cut mass
_CUT_COST = 1e-11


