"""Answering queries from grids: the epsilon bracket and the delta curve.

``delta(eps) = max(delta_remove(eps), delta_add(eps))``, so an epsilon bracket
is the largest of the directions' brackets and a delta bracket the largest of
theirs.  Each direction's grids come from the planner (:mod:`pld.engine.planner`) and
the composer (:mod:`pld.engine.composer`); every bracket read off them is certified
(:mod:`pld.engine.grid`), so intersecting brackets from several grids is too.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from pld.engine import big_jumps as _big_jumps
from pld.engine import budget as _budget
from pld.engine import windows as w
from pld.engine.composer import GridTooLargeError
from pld.engine.grid import GridPLD
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.pipeline import Engine
from pld.engine.targets import EPS_ATOL, EPS_RTOL, FAR_QUERY, Query, Settings

#: delta curves: points whose bracket is wider than this (relative) get a grid
#: tuned at them, at most DELTA_EXTRA_GRIDS per call
DELTA_LOOSE = 1e-2
DELTA_EXTRA_GRIDS = 4
#: a remove-direction first grid above this many points sends an epsilon query
#: of a Poisson-subsampled Gaussian to the big-jump terms first (on the
#: coverage sample every setting over 1.8 s had one of >= 7e5 points, and
#: every one of >= 7e5 points took over 0.9 s)
JUMPS_FIRST_POINTS = 600_000
#: accuracy of the whole law's grid that tunes those terms: it only has to
#: put the tuning epsilon near the answer (from its grid without the
#: round-off bound), and a tuning off by more than 1% is retuned at the
#: terms' own bracket.  At 1e-2 and 3e-2 that grid was refined, and its
#: round-off (the heavy tail the terms exist for) sent it to extended
#: precision and stronger tilts: sigma 0.49, q 6.8e-6, T 4700 took 5.8 s at
#: 3e-2 and 1.7 s at 1e-1; the 21 terms-first settings of the coverage
#: sample 25.5 s in all at 3e-2, 22.7 s at 1e-1, none wider (at 0.3 two of
#: them missed by over 2x: its estimate tuned the terms too far off)
JUMPS_FIRST_RTOL = 1e-1
#: the terms take over (first, or at the cap) only below this sampling rate,
#: where a step's loss is a narrow core with a log-normal tail; above it a
#: grid needs many points for another reason (a huge epsilon: q 0.39,
#: epsilon 3e4), which the terms do not remove, and capping it loosened delta
#: brackets (2.2% -> 3.6% wide)
JUMPS_MAX_Q = 1e-3
#: where no terms could be built, a coarse bracket this many times wider than
#: its target falls back to the whole law's fine grid
JUMPS_FALLBACK = 2.0


# ------------------------------------------------------------ epsilon
def epsilon_bracket(engine: Engine, delta: float, rtol: float = EPS_RTOL) -> tuple[float, float, dict]:
    """``(lower, upper, settings per direction)`` on epsilon at ``delta``.

    A bracket the grids leave wider than its target is then narrowed, where
    it applies, by the big-jump decomposition of the remove direction
    (:func:`_refine_by_jumps`).  Where the whole law's first grid would be
    huge (:func:`_jumps_first`) the decomposition comes first, tuned on a
    coarse grid.  (Trying it first at every sampling rate below 1e-3 cost
    35% more time over 40 settings of the coverage sample: most of them
    have small grids.)
    """
    if _jumps_first(engine, delta, rtol):
        lo, hi, used = _grid_bracket(engine, delta, JUMPS_FIRST_RTOL, cap=JUMPS_FIRST_POINTS, coarse_first=True)
        if hi - lo > rtol * hi + EPS_ATOL and math.isfinite(hi):
            lo, hi = _refine_by_jumps(engine, delta, rtol, lo, hi, used)
        built = engine.cache.get(engine.cache.used, ("jumps", delta, rtol))
        if (built or hi - lo <= JUMPS_FALLBACK * (rtol * hi + EPS_ATOL) or not math.isfinite(hi)
                or _budget.spent()):
            # (a miss is reported as one: the whole law's fine grid, which
            # these terms replace because it costs 2-12 s, missed the same
            # settings by more; sigma 0.61, q 2.8e-5, T 1.8e6: terms 1.08x
            # the target, grid and terms 1.78x; sigma 0.67, q 4.5e-6, T 1.3e6:
            # terms 5.5x, the fine grid at the memory cap 9000x, 3.5 s more)
            engine.cache.put(engine.cache.used, (delta, rtol), used)
            return lo, hi, used
        # (no terms could be built: the whole law's fine grids, as below, and
        # the brackets intersected; both are certified)
        lo0, hi0 = lo, hi
        lo, hi, used = _grid_bracket(engine, delta, rtol)
        lo, hi = max(lo, lo0), max(min(hi, hi0), max(lo, lo0))
    else:
        lo, hi, used = _grid_bracket(engine, delta, rtol)
        if hi - lo > rtol * hi + EPS_ATOL or math.isinf(hi):
            # (an upper end of inf too: a heavy tail's Chernoff tilt can put
            # the whole law's window far from epsilon and its truncated mass
            # above delta, sigma 2.75, q 1.3e-4, T 660 at delta 3e-28)
            lo, hi = _refine_by_jumps(engine, delta, rtol, lo, hi, used)
    engine.cache.put(engine.cache.used, (delta, rtol), used)
    return lo, hi, used


def _terms_cap(engine: Engine, rtol: float) -> int | None:
    """Largest whole-law grid of the remove direction worth refining to when
    the big-jump terms can take over (None: they cannot).

    A first grid below ``JUMPS_FIRST_POINTS`` can still need refining to
    one far above it (sigma 0.32, q 4.1e-5, T 5.7e5: 4e5 points, then 1.5e6
    in double and extended precision, 13 s); the refinement stops there
    instead, and :func:`_refine_by_jumps` narrows the bracket.
    """
    if rtol >= JUMPS_FIRST_RTOL or engine.planner.h_fixed is not None:
        return None
    model = _big_jumps.applicable(engine.laws.components)
    if model is None or not model.sampling_rate < JUMPS_MAX_Q:
        return None
    return JUMPS_FIRST_POINTS


def _jumps_first(engine: Engine, delta: float, rtol: float) -> bool:
    """Whether the big-jump terms should come before the whole law's fine grid.

    Where a subsampled step's first grid must hold a core within ``q`` of 0
    at a spacing that resolves it and a tail out to losses of order 1 (small
    sampling rates, small noise), that grid has ~1e6 points and the bracket
    costs 2-12 s; the terms, tuned at the epsilon of a grid at
    ``JUMPS_FIRST_RTOL``, reach the same target in 0.2-1 s (coverage sample,
    the 14 settings over 1.8 s).  Predicted from the first grid's size, so
    that no other query pays for the coarse grid.
    """
    if _terms_cap(engine, rtol) is None or "remove" not in engine.directions:
        return False
    return engine.planner.predicted_points("remove", Query("delta", delta, rtol)) > JUMPS_FIRST_POINTS


def _grid_bracket(engine: Engine, delta: float, rtol: float,
                  cap: int | None = None, coarse_first: bool = False) -> tuple[float, float, dict]:
    """The bracket of one grid per direction, refined to ``rtol``.

    Directions are taken in order of their Chernoff estimates; ``lo`` is the
    largest lower end found so far: a direction whose upper end stays below it
    cannot move either end of the maximum, so it needs no refining and no
    dominated side.  Every other direction is first tried on a coarse probe
    grid (``PROBE_COARSENING`` times coarser): that grid does not depend on
    the leader's answer, so on two cores it is built while the leader is, and
    it usually shows the direction below the leader's lower end, even when
    the Chernoff estimates are within a few percent (tiny per-step losses:
    the add direction's fine grid cost as much as both of the leader's sides).
    The answer does not depend on it: a probe only settles a direction whose
    upper end it puts below the floor.  ``cap``: the remove direction's
    refinement builds no grid above it (default :func:`_terms_cap`: where
    the big-jump terms can take over); with ``coarse_first`` the remove
    direction's first grid too is coarsened to it.
    """
    planner, composer = engine.planner, engine.composer
    dirs = sorted(((d, planner.chernoff(d, delta)[1]) for d in engine.directions), key=lambda de: -de[1])
    query = Query("delta", delta, rtol)
    probes = {d: planner.probe_settings(d, query) for d, _ in dirs[1:]}
    # (beside a small leading grid nothing is built in the background: one
    # thread is as fast there, see pld.engine.composer.PARALLEL_POINTS)
    lead = planner.first_settings(dirs[0][0], query)
    parallel = lead is None or composer.parallel(dirs[0][0], *lead[:3])
    for d, probe in probes.items():
        if probe is not None and parallel:
            composer.speculate(d, *probe)
    # a direction without a probe (a remembered spacing, a probe above the
    # memory cap) starts on its first grid, whose dominating side alone often
    # shows it below the leader's lower end: that side too is built meanwhile
    for d, _ in dirs[1:]:
        if probes[d] is None and parallel:
            first = planner.first_settings(d, query)
            if first is not None:
                composer.speculate(d, *first)
    lo = hi = 0.0
    used: dict[str, Settings] = {}
    cap = _terms_cap(engine, rtol) if cap is None else cap
    for d, _ in dirs:
        settings = planner.settings(d, query, floor=lo, probe=probes.get(d),
                                    stop_above=cap if d == "remove" else None,
                                    first_cap=cap if d == "remove" and coarse_first else None)
        used[d] = settings
        upper, lo = _direction_ends(engine, d, settings, delta, lo)
        hi = max(hi, upper)
    return lo, max(hi, lo), used


def _direction_ends(engine: Engine, d: str, settings: Settings, delta: float, lo: float) -> tuple[float, float]:
    """``(upper end of direction d's epsilon at delta, lo raised by its lower
    end)``: the dominated side only where the upper end reaches ``lo`` (else
    this direction cannot move either end of the maximum)."""
    pess, _ = engine.composer.materialize(d, *settings, lower=False)
    # delta(eps) = E_P[(1 - e^{eps - L})_+] is exactly 0 from the largest
    # loss on (bounded: the add direction of Poisson sampling, at most
    # -T log(1 - q)), where a grid can still hold its round-off at +inf
    # (sigma 0.831, q 5.6e-6, T 50 at delta 9e-27: 1.6e-15 there, and an
    # upper end of inf for an epsilon below 2.8e-4)
    upper = direction_upper(engine, d, pess, delta)
    if upper > lo:
        _, opt = engine.composer.materialize(d, *settings)
        assert opt is not None
        lo = max(lo, opt.epsilon(delta))
    return upper, lo


def loss_cap(engine: Engine, d: str) -> float:
    """Direction ``d``'s largest loss, rounded up (summed exactly from bounds on
    each component's, :meth:`pld.engine.laws.Laws.largest_loss_bounds`): delta is
    exactly 0 from there on."""
    return engine.laws.largest_loss(d)


def direction_upper(engine: Engine, d: str, pess: GridPLD, delta: float) -> float:
    """Upper end of direction ``d``'s epsilon at ``delta`` from its dominating
    grid, capped at the direction's largest loss: from there on delta is
    exactly 0, where a grid can still hold its round-off at +inf."""
    return min(pess.epsilon(delta), max(0.0, loss_cap(engine, d)))


def _refine_by_jumps(engine: Engine, delta: float, rtol: float, lo: float, hi: float,
                     used: dict[str, Settings]) -> tuple[float, float]:
    """A bracket the grids left too wide, narrowed by the big-jump decomposition
    of the remove direction (:mod:`pld.engine.big_jumps`) where it applies.

    The terms are tuned at the epsilon the remove direction's dominating grid
    gives without its round-off bound, and once more at the middle of the
    resulting bracket if that estimate fell outside it.  Every bracket is
    certified, so their intersection is; the other directions keep their own
    upper ends.  A fixed spacing (``value_discretization_interval``) is the
    caller's choice of grid: no decomposition then.
    """
    model = _big_jumps.applicable(engine.laws.components)
    if model is None or "remove" not in used or engine.planner.h_fixed is not None:
        return lo, hi
    other = 0.0
    for d, settings in used.items():
        if d != "remove":
            other = max(other, direction_upper(engine, d, engine.composer.materialize(d, *settings, lower=False)[0],
                                               delta))
    known = engine.cache.get(engine.cache.used, ("jumps_bracket", delta, rtol))
    if known is not None:
        # (the terms' engines are not kept: a second query, explain() after
        # epsilon_bounds(), would build them all again; nor would the other
        # directions' refinement below be found without their settings)
        rem_lo, rem_hi, refined = known
        if refined is not None:
            used.update(refined[0])
            other, lo = refined[1], max(lo, refined[2])
        return max(lo, rem_lo), max(rem_hi, other, lo)
    rem_lo, rem_hi = lo, hi
    info = []
    # tuned first where the remove direction's dominating grid puts epsilon
    # with its round-off bound left out: an estimate only (it picks the grids,
    # it certifies nothing), usually close, where the bracket's ends are not
    pess = engine.composer.materialize("remove", *used["remove"], lower=False)[0]
    est = pess.without_error().epsilon(delta)
    if (est <= (pess.k0 + 1) * pess.h or not math.isfinite(est)) and lo > 0:
        # the grid's window starts above epsilon (tuned at a Chernoff estimate
        # that a heavy tail puts far out: sigma 1.59, q 3.3e-4, T 1.2e5 at
        # delta 1e-26, a window [3.4544, 3.4545] for an epsilon of 0.824): it
        # estimates nothing, the dominated side's end is the better guess
        est = lo
    eps0 = min(max(est, lo), hi) if math.isfinite(est) else lo
    if not eps0 > 0:
        eps0 = 0.5 * hi
    terms, r, previous = None, rtol, None
    for _ in range(2):
        if _budget.spent():
            break  # (the grids' bracket stands, certified)
        terms = _try_terms(model, delta, eps0, r, previous)
        if terms is None:
            break
        if not math.isfinite(rem_hi):
            rem_hi = _big_jumps.finite_upper(terms, delta, max(eps0, rem_lo))
        rem_lo, rem_hi = _big_jumps.epsilon_bracket(terms, delta, rem_lo, rem_hi)
        info.append({"tuned_at": eps0, "cut": terms.cut, "terms": len(terms.grids),
                     "jump_probability": math.exp(terms.log_b), "tail_bound": terms.tail,
                     "bracket": (rem_lo, rem_hi)})
        width, target = rem_hi - rem_lo, rtol * rem_hi + EPS_ATOL
        if width <= target or not math.isfinite(rem_hi):
            break
        mid = 0.5 * (rem_lo + rem_hi)
        if abs(mid - eps0) <= 0.01 * eps0:
            # tuned at (or next to) the answer, and the terms, each within
            # its share of the target, still add up to more than it (their
            # own slopes differ from the sum's): once more at the same cut,
            # each term refined from its grid, aiming lower by what was missed
            # (sigma 0.61, q 2.8e-5, T 1.8e6: 1.08x the target -> within)
            r, previous = r * max(0.25, 0.8 * target / width), terms
        else:
            previous = None  # (mistuned: a new cut at the new epsilon)
        eps0 = mid
    refined = None
    if other > rem_hi and other - max(lo, rem_lo) > rtol * other + EPS_ATOL:
        # another direction's end, from a grid tuned for a looser target (the
        # terms-first route's), is now the wide one: refined at this target
        # against the terms' lower end (sigma 1.10, q 1.3e-5, T 1e6 at delta
        # 5.2e-14: the add direction's coarse grid had an error bound of
        # 1e41 and its end was its largest loss, 13.2, for an epsilon of 0.098)
        other = 0.0
        for d in list(used):
            if d == "remove":
                continue
            settings = engine.planner.settings(d, Query("delta", delta, rtol), floor=max(lo, rem_lo))
            used[d] = settings
            upper, lo = _direction_ends(engine, d, settings, delta, max(lo, rem_lo))
            other = max(other, upper)
        refined = ({d: s for d, s in used.items() if d != "remove"}, other, lo)
    out = max(lo, rem_lo), max(rem_hi, other, lo)
    if info:
        if terms is not None:
            # delta at the reported upper end, from the terms (what a report
            # prints beside it; the remove direction's own grid is coarse here)
            d_lo, d_hi = terms.delta_bounds(np.array([out[1]]))
            info[-1]["delta_at_epsilon_upper"] = (float(d_lo[0]), float(d_hi[0]))
        engine.cache.put(engine.cache.used, ("jumps", delta, rtol), info)
        engine.cache.put(engine.cache.used, ("jumps_bracket", delta, rtol), (rem_lo, rem_hi, refined))
    return out


def used_settings(engine: Engine, delta: float) -> dict[str, Settings]:
    """The settings behind ``epsilon_bounds(delta)`` at the default target, per direction."""
    used = engine.cache.get(engine.cache.used, (delta, EPS_RTOL))
    if used is None:
        epsilon_bracket(engine, delta)
        used = engine.cache.get(engine.cache.used, (delta, EPS_RTOL))
    return used


def target_miss(engine: Engine, delta: float, rtol: float, lo: float, hi: float, used: dict) -> str | None:
    """Why a bracket is wider than its target, or None when it is not."""
    if math.isinf(hi):
        if math.isinf(lo):
            return None  # (epsilon = inf exactly: a mass at +inf above delta)
        return "the dominating grids could not bound epsilon (their mass at +inf exceeds delta)"
    if hi - lo <= rtol * hi + EPS_ATOL:
        return None
    budget = _budget.ran_out()
    if budget is not None:
        return (f"the query's time budget of {budget:g} s ran out while its grids were refined "
                "(PLD_TIME_BUDGET sets it)")
    if engine.planner.h_fixed is not None:
        return f"the grid spacing is fixed at value_discretization_interval = {engine.planner.h_fixed:g}"
    jumps = engine.cache.get(engine.cache.used, ("jumps", delta, rtol))
    if jumps:
        last = jumps[-1]
        return (f"the remove direction was split by its large steps (big-jump decomposition at loss "
                f"{last['cut']:.4g}, {last['terms']} terms, tuned at epsilon {last['tuned_at']:.6g}) and its "
                "terms' grids still leave this width")
    for d, s in used.items():
        width, _, _, round_off = engine.planner.width(d, Query("delta", delta, rtol), *s)
        if round_off > 0.5 * width:
            err = engine.composer.materialize(d, *s, lower=False)[0].err
            how = " (the FFT power already in extended precision)" if s.precision == "extended" else ""
            return (f"floating-point round-off of the FFT composition dominates it (its bound, {err:.3g} of the "
                    f"tilted law, grows with the number of steps; no finer grid removes it){how}")
    for d, s in used.items():
        if engine.composer.grid_points(d, s.h, s.lam, s.log_eta) * 2 > MAX_GRID_POINTS:
            return f"the grid reached its memory cap of {MAX_GRID_POINTS} points"
    return "refining the grid stopped narrowing it (a bias the spacing does not control)"


# -------------------------------------------------------------- delta
def tunable_epsilon(engine: Engine) -> float:
    """An epsilon above which no grid is tuned: beyond the composed loss's
    support delta is the mass at +inf on every grid, and beyond the
    Chernoff epsilon of ``FAR_QUERY``'s delta the finite part is below it (a
    grid tuned there would reach out to where the tilted law has e^-1e5 of
    its mass)."""

    def compute() -> float:
        top = 0.0
        for d in engine.directions:
            _, hi = engine.laws.exploration(d).support()
            far = engine.planner.chernoff(d, FAR_QUERY.value)[1]
            top = max(top, min(hi, far) if math.isfinite(far) else hi)
        return min(top, 1e12) if math.isfinite(top) else 1e12

    return engine.cache.scalar("tunable", compute)


def delta_query(engine: Engine, epsilon: float) -> Query:
    """The query whose grids a delta at ``epsilon`` is read from.

    The epsilon query at the saddle-point estimate of ``delta(epsilon)``
    (:func:`pld.engine.windows.saddle_log_delta`, within a few percent): its grids
    are refined until the epsilon bracket there meets its target, which is the
    delta bracket at ``epsilon`` that target implies, and they are the very
    grids (and remembered spacings) of that epsilon query, so a delta query
    costs what the matching epsilon query costs.  Below the mean loss, and
    where delta is not small, the delta target is used directly.
    """
    est = -math.inf
    for d in engine.directions:
        comp = engine.laws.exploration(d)
        lam = w.tilt_for_epsilon(comp, epsilon)
        if not lam > 0:
            return Query("epsilon", epsilon)
        m, log_d = w.saddle_log_delta(comp, lam)
        if math.isfinite(log_d):
            est = max(est, log_d - lam * (epsilon - m))
    if not -575.0 < est < math.log(0.25):
        return Query("epsilon", epsilon)
    return Query("delta", math.exp(est), EPS_RTOL)


def _found_delta_query(engine: Engine, epsilon: float, found_lo: float) -> Query:
    """The query for delta at ``epsilon`` once a certified lower end
    ``found_lo`` is known there: the epsilon query at that delta where it is
    far below :func:`delta_query`'s estimate (by 1e3 or more; the estimate
    otherwise, so that grids are shared with the first pass)."""
    est = delta_query(engine, epsilon)
    if est.kind == "delta" and 0.0 < found_lo < 1e-3 * est.value:
        return Query("delta", found_lo, EPS_RTOL)
    return est


def delta_pass(engine: Engine, flat: np.ndarray, queries: list[Query],
               known_lo: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """Brackets of delta at every point of ``flat`` from grids tuned for
    ``queries``, and whether the remove direction was left to the big-jump
    terms (its grid for a delta query coarse or short of its target).

    Directions are taken in order of their Chernoff estimates at the queries'
    deltas.  A later direction is first tuned against a floor, as for an
    epsilon (:func:`_grid_bracket`): for a delta query, the largest lower end
    of epsilon at its delta found so far.  Where that leaves its upper ends
    above the delta lower ends already found somewhere, it is refined after
    all, so the floor changes no bracket, only what a direction that does not
    bind costs (sigma 0.43, q 1.3e-3, T 1.4e4: delta at the epsilon bracket's
    upper end took 2.1 s refining the add direction to 2e6 points for a
    bracket the remove direction decides; its epsilon took 0.25 s).
    ``known_lo``: lower ends found before (by other grids), which the check
    takes into account.

    Where the big-jump terms can take over (:func:`_terms_cap`), the remove
    direction's grid for a delta query is no larger than they make worth it:
    a query whose first grid would exceed it is asked at
    ``JUMPS_FIRST_RTOL``, and refining stops at it.
    """
    planner, composer = engine.planner, engine.composer
    lo = np.zeros(flat.shape)
    hi = np.zeros(flat.shape)
    seen_lo = lo if known_lo is None else known_lo
    eps_floor: dict[Query, float] = {}
    cap = _terms_cap(engine, EPS_RTOL)
    short = False
    for i, d in enumerate(_directions_by_chernoff(engine, queries)):
        d_lo = np.zeros(flat.shape)
        d_hi = np.ones(flat.shape)
        # beyond this direction's largest loss (bounded: the add direction of
        # Poisson sampling, -T log(1 - q)) its delta is exactly 0; a grid
        # tuned there would only hold its truncation bound
        top = loss_cap(engine, d)
        inside = ~((flat >= top) & math.isfinite(top))
        if not np.any(inside):
            continue
        for query in queries:
            if query.kind == "epsilon" and not query.value < top:
                continue
            if query.kind == "epsilon":
                floor = float(np.min(lo)) if i > 0 and flat.size else -math.inf
            else:
                floor = eps_floor.get(query, -math.inf)
            # (the remove direction's whole-law grid no larger than the
            # big-jump terms make worth it: delta_curve hands a bracket left
            # short of its target to them)
            stop = cap if d == "remove" and query.kind == "delta" else None
            asked = query
            if stop is not None and planner.predicted_points(d, query) > stop:
                asked = Query("delta", query.value, JUMPS_FIRST_RTOL)
            if asked.kind == "delta" and i > 0:
                below = _probe_below(engine, d, asked, flat, np.where(inside, lo, np.inf))
                if below is not None:
                    d_hi = np.minimum(d_hi, below)
                    continue
            if asked.kind == "delta":
                pess, opt, q_hi = _floored(engine, d, asked, floor, flat,
                                           np.where(inside, np.maximum(lo, seen_lo), np.inf), stop_above=stop)
            else:
                pess, opt = composer.materialize(d, *planner.settings(d, asked, floor=floor))
                q_hi = pess.delta(flat)
            if stop is not None:
                short = short or asked is not query or planner.met_target(d, asked) is False
            assert opt is not None
            if query.kind == "delta":
                eps_floor[query] = max(eps_floor.get(query, -math.inf), opt.epsilon(query.value))
            d_hi = np.minimum(d_hi, q_hi)
            d_lo = np.maximum(d_lo, opt.delta(flat))
        hi = np.maximum(hi, np.where(inside, d_hi, 0.0))
        lo = np.maximum(lo, np.where(inside, d_lo, 0.0))
    return lo, hi, short


def _probe_below(engine: Engine, d: str, query: Query, flat: np.ndarray, lo: np.ndarray) -> np.ndarray | None:
    """Direction ``d``'s upper delta at ``flat`` from the dominating side of its coarse probe grid
    (:meth:`pld.engine.planner.Planner.probe_settings`), where it is at most ``lo`` (the lower ends
    the directions before it found) at every point, else None.

    There the direction moves neither end of the maximum: its own lower end is below its upper
    one, so no dominated side is needed, and its upper end leaves the maximum's as it is (as
    :func:`_direction_ends` settles an epsilon query's direction on the probe grid).
    """
    probe = engine.planner.probe_settings(d, query)
    if probe is None:
        return None
    try:
        pess, _ = engine.composer.materialize(d, *probe, lower=False)
    except (FloatingPointError, _budget.BudgetSpent):
        return None
    d_hi = pess.delta(flat)
    return d_hi if bool(np.all(d_hi <= lo)) else None


def _floored(engine: Engine, d: str, query: Query, floor: float, flat: np.ndarray, others_lo: np.ndarray,
             lower: bool = True, stop_above: int | None = None) -> tuple:
    """``(dominating, dominated, upper delta at flat)`` of direction ``d`` for
    a delta query, tuned first against ``floor`` (an epsilon: refining stops
    once the direction's epsilon at the query's delta is below it) and
    refined fully after all where its upper ends reach ``others_lo``, the
    lower ends the other directions have (the floor then changes no
    bracket, only what a direction that cannot bind costs)."""
    planner, composer = engine.planner, engine.composer
    pess, opt = composer.materialize(d, *planner.settings(d, query, floor=floor, stop_above=stop_above),
                                     lower=lower)
    d_hi = pess.delta(flat)
    if floor > -math.inf and np.any(d_hi > others_lo):
        pess, opt = composer.materialize(d, *planner.settings(d, query, stop_above=stop_above), lower=lower)
        d_hi = pess.delta(flat)
    return pess, opt, d_hi


def _directions_by_chernoff(engine: Engine, queries: list[Query]) -> list[str]:
    """The directions, largest Chernoff epsilon first at the smallest delta
    queried (engine order when only epsilons are)."""
    deltas = [q.value for q in queries if q.kind == "delta"]
    if not deltas:
        return list(engine.directions)
    at = min(deltas)
    return sorted(engine.directions, key=lambda d: -engine.planner.chernoff(d, at)[1])


def delta_curve(engine: Engine, flat: np.ndarray, epsilon_at_zero: float) -> tuple[np.ndarray, np.ndarray]:
    """Certified brackets on delta at every finite or infinite point of ``flat``.

    Grids are tuned at up to three representative epsilons (smallest, median,
    largest) among those the grids can resolve; every point is evaluated on
    each of them and the brackets intersected.  An epsilon at or beyond the
    largest finite loss has delta = the mass at +inf, which every grid holds:
    it tunes nothing, so it cannot change another entry's answer.
    """
    limit = tunable_epsilon(engine)
    tunable = flat[np.isfinite(flat) & (flat < limit)]
    if tunable.size:
        reps = np.unique(np.quantile(tunable, [0.0, 0.5, 1.0], method="nearest"))
    else:
        reps = np.array([0.0]) if flat.size else flat
    queries = [delta_query(engine, float(r)) for r in reps]
    if np.any(flat >= limit):
        # beyond every grid the upper end is the mass a grid sent to +inf,
        # truncated mass included; one grid tuned at a tiny delta (loosely:
        # only its windows matter) holds that below ~1e-40
        queries.append(FAR_QUERY)
    lo, hi, short = delta_pass(engine, flat, queries)
    # delta = 0 exactly from the largest loss with mass on (no mass at +inf),
    # and below it delta(eps) = E_P[(1 - e^{eps - L})_+] <= 1 - e^{eps - L_max}:
    # within the rounding interval of the largest loss (an atom a few ulps
    # above a user's epsilon) that is ~1e-15, where a grid's spread atom says more
    beyond = (flat >= epsilon_at_zero) & math.isfinite(epsilon_at_zero)
    lo, hi = np.where(beyond, 0.0, lo), np.where(beyond, 0.0, hi)
    if math.isfinite(epsilon_at_zero):
        with np.errstate(over="ignore", invalid="ignore"):
            cap = -np.expm1(np.minimum(flat - epsilon_at_zero, 0.0)) * (1.0 + 4.0 * 2.0 ** -53)
        hi = np.where(np.isfinite(flat), np.minimum(hi, cap), hi)
        lo = np.minimum(lo, hi)
    if short:
        # the remove direction left to the big-jump terms (a first grid too
        # large, or refining stopped at their cap): terms tuned at the
        # loosest point that is wider than the epsilon target implies, the
        # fall of delta over one epsilon target (read off the same grids one
        # step on), as an epsilon query's refinement asks (sigma 0.448,
        # q 6.3e-6, T 760: the coarse grid's bracket was 2.7e-4 wide for a
        # fall of 5.9e-3, and the terms took 20 s)
        step = EPS_RTOL * np.abs(flat) + EPS_ATOL
        lo2, hi2, _ = delta_pass(engine, flat + step, queries)
        with np.errstate(divide="ignore", invalid="ignore"):
            fall = np.where(hi > 0, np.maximum(lo - hi2, 0.0) / hi, 0.0)
        lo, hi = _refine_delta_by_jumps(engine, flat, lo, hi, limit,
                                        loose_above=np.minimum(0.5, np.maximum(fall, step)))
    if not short or np.any(_looseness(lo, hi) > DELTA_LOOSE):
        lo, hi = _refine_loose_points(engine, flat, lo, hi, {float(r) for r in reps}, limit)
        lo, hi = _refine_delta_by_jumps(engine, flat, lo, hi, limit)
    # delta(eps) is non-increasing: a lower bound at a larger epsilon holds at
    # every smaller one, an upper bound at a smaller epsilon at every larger one
    if flat.size > 1:
        order = np.argsort(flat, kind="stable")
        lo[order] = np.maximum.accumulate(lo[order][::-1])[::-1]
        hi[order] = np.minimum.accumulate(hi[order])
    # delta(-inf) = E_P[1] = 1 exactly
    lo = np.where(flat == -math.inf, 1.0, lo)
    hi = np.maximum(np.where(flat == -math.inf, 1.0, hi), lo)
    return lo, hi


def _try_terms(heavy: _big_jumps.Heavy, delta: float, eps0: float, rtol: float,
               previous: _big_jumps.Terms | None = None) -> _big_jumps.Terms | None:
    """The big-jump terms, or None where they cannot be built: the
    decomposition is an option, and the grids' bracket stands without it.
    ``previous``: the terms of an earlier tuning, whose engines and grids a
    retuning at the same cut reuses."""
    try:
        return _big_jumps.build_terms(heavy, delta, eps0, rtol=rtol, previous=previous)
    except (FloatingPointError, GridTooLargeError, _budget.BudgetSpent):
        return None


def _looseness(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Relative width of delta brackets (0 where the upper end is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(hi > 0, (hi - lo) / hi, 0.0)


def _refine_delta_by_jumps(engine: Engine, flat: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                           limit: float, loose_above: float | np.ndarray = DELTA_LOOSE
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Delta brackets still loose after the grids (relative width above
    ``loose_above``), narrowed by the big-jump decomposition of the remove
    direction (:mod:`pld.engine.big_jumps`), tuned at the loosest point: what
    :func:`_refine_by_jumps` does for an epsilon.  Points still wider than
    ``DELTA_LOOSE`` get terms of their own, loosest first, up to
    ``DELTA_EXTRA_GRIDS`` tunings in all (terms tuned at one epsilon can be
    loose at another: a report's curve kept 11% at its reported epsilon).

    The remove direction's bracket raises the lower ends; an upper end is the
    larger of the remove direction's new one and the other directions' own.
    """
    model = _big_jumps.applicable(engine.laws.components)
    if model is None or engine.planner.h_fixed is not None:
        return lo, hi
    tried: set[float] = set()
    for _ in range(DELTA_EXTRA_GRIDS):
        if _budget.spent():
            break
        loose = _looseness(lo, hi)
        ok = np.isfinite(flat) & (flat > 0) & (flat < limit) & (loose > (loose_above if not tried else DELTA_LOOSE))
        ok &= ~np.isin(flat, list(tried))
        if not np.any(ok):
            break
        j = int(np.flatnonzero(ok)[np.argmax(loose[ok])])
        tried.add(float(flat[j]))
        lo, hi = _delta_terms_at(engine, model, flat, lo, hi, j)
    return lo, hi


def _delta_terms_at(engine: Engine, model, flat: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    j: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` narrowed by big-jump terms tuned at ``flat[j]``."""
    eps0 = float(flat[j])
    terms = _try_terms(model, max(float(lo[j]), 1e-6 * float(hi[j])), eps0,
                       EPS_RTOL)
    if terms is None:
        return lo, hi
    sel = np.flatnonzero(np.isfinite(flat))
    r_lo, r_hi = terms.delta_bounds(flat[sel])
    other = np.zeros(sel.size)
    # the other directions tuned at the delta found here, not the saddle
    # point's estimate: that can be off by orders of magnitude beside a heavy
    # tail, and a grid tuned for it holds a truncation floor of about
    # e^-18 of it (sigma 1, q 1e-5, T 1e5 at epsilon 0.8155: delta 1e-30, the
    # estimate 3e-10, the add direction's floor 2.8e-19 was the upper end)
    query = _found_delta_query(engine, eps0, max(float(r_lo[np.searchsorted(sel, j)]), float(lo[j])))
    for d in engine.directions:
        if d != "remove":
            # first against the floor of an epsilon query (tuned only until
            # this direction's epsilon at the query's delta is below eps0),
            # refined only if its upper ends then reach the terms' lower
            # ends (sigma 0.56, q 2.1e-5, T 4020: the add direction refined
            # to 1e6 points, 2 s, for ends 1e-4 of the remove direction's)
            top = loss_cap(engine, d)
            if not eps0 < top:
                continue  # (delta is exactly 0 from this direction's largest loss on)
            _, _, d_hi = _floored(engine, d, query, eps0, flat[sel], np.maximum(r_lo, lo[sel]), lower=False)
            other = np.maximum(other, np.where(flat[sel] >= top, 0.0, d_hi))
    lo, hi = lo.copy(), hi.copy()
    lo[sel] = np.maximum(lo[sel], r_lo)
    hi[sel] = np.maximum(np.minimum(hi[sel], np.maximum(r_hi, other)), lo[sel])
    return lo, hi


def _refine_loose_points(engine: Engine, flat: np.ndarray, lo: np.ndarray, hi: np.ndarray, tried: set,
                         limit: float) -> tuple[np.ndarray, np.ndarray]:
    """A point between two tuning epsilons whose tails differ by orders of
    magnitude is resolved by neither grid: the loosest few get their own."""
    for _ in range(DELTA_EXTRA_GRIDS):
        if _budget.spent():
            break
        loose = _looseness(lo, hi)
        cand = [j for j in np.argsort(-loose, kind="stable")
                if loose[j] > DELTA_LOOSE and float(flat[j]) not in tried and abs(flat[j]) < limit]
        if not cand:
            break
        r = float(flat[cand[0]])
        tried.add(r)
        lo_r, hi_r, _ = delta_pass(engine, flat, [_found_delta_query(engine, r, float(lo[cand[0]]))], known_lo=lo)
        lo, hi = np.maximum(lo, lo_r), np.minimum(hi, hi_r)
    return lo, hi


#: a delta bracket whose ends differ by more than this factor is reported
#: (an epsilon target never asks for that much: delta falls by e^{lam rtol eps}
#: over one target, ~1.1 at the largest epsilons of the coverage sample)
DELTA_LOOSE_FACTOR = 10.0


def warn_if_loose(flat: np.ndarray, lo: np.ndarray, hi: np.ndarray, h_fixed: float | None,
                  limit: float, category: type[Warning]) -> None:
    """Never silent: a delta bracket an order of magnitude wide (or ``[0, x]``) is reported as
    ``category`` (both ends stay certified); not beyond ``limit`` (:func:`tunable_epsilon`),
    where no grid is tuned and the upper end is what every grid sends to +inf, below ~1e-40."""
    with np.errstate(invalid="ignore"):
        loose = (np.abs(flat) < limit) & (hi > 1e-200) & (hi > DELTA_LOOSE_FACTOR * lo)
    if not np.any(loose):
        return
    j = int(np.flatnonzero(loose)[0])
    why = (f"the grid spacing is fixed at value_discretization_interval = {h_fixed:g}" if h_fixed is not None
           else "the grids could not resolve it")
    warnings.warn(f"delta bracket [{lo[j]:.4g}, {hi[j]:.4g}] at epsilon = {flat[j]:.6g}"
                  + (f" (and {int(loose.sum()) - 1} more points)" if loose.sum() > 1 else "")
                  + f" is wider than a factor {DELTA_LOOSE_FACTOR:g}: {why}. Both ends are still certified.",
                  category, stacklevel=4)
