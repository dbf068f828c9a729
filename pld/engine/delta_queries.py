"""Answering delta queries from grids: the delta curve.

``delta(eps) = max(delta_remove(eps), delta_add(eps))``, so a delta bracket is
the largest of the directions' brackets (:mod:`pld.engine.queries` for the
epsilon bracket).  Each direction's grids come from the planner and the
composer; every bracket read off them is certified, so intersecting brackets
from several grids is too.  Where the remove direction of a small sampling rate
is left to the big-jump terms (:mod:`pld.engine.big_jumps`), their delta
brackets at the loose points replace the grid's.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from pld.engine import big_jumps as _big_jumps
from pld.engine import budget as _budget
from pld.engine import windows as w
from pld.engine.pipeline import Engine
from pld.engine.queries import (
    JUMPS_FIRST_RTOL,
    _terms_cap,
    _try_terms,
    loss_cap,
)
from pld.engine.targets import EPS_ATOL, EPS_RTOL, FAR_QUERY, Query

#: delta curves: points whose bracket is wider than this (relative) get a grid
#: tuned at them, at most DELTA_EXTRA_GRIDS per call
DELTA_LOOSE = 1e-2
DELTA_EXTRA_GRIDS = 4


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
    # (the estimate reads the finite losses only: a delta below a direction's mass at +inf,
    # which no epsilon reaches, asks for grids at an infinite epsilon)
    if not -575.0 < est < math.log(0.25) or est < max(_log_inf_mass(engine, d) for d in engine.directions):
        return Query("epsilon", epsilon)
    return Query("delta", math.exp(est), EPS_RTOL)


def _log_inf_mass(engine: Engine, direction: str) -> float:
    """Log of a lower bound on a direction's composed mass at ``+inf`` (its delta at every
    epsilon): one component's, the largest (cached)."""
    def compute() -> float:
        return max((c.loss_model(direction).inf_log_mass() for c, _ in engine.laws.components), default=-math.inf)

    return engine.cache.scalar(("log_inf_mass", direction), compute)


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
    elif flat.size and max(_log_inf_mass(engine, d) for d in engine.directions) > -math.inf:
        reps = np.array([0.0])  # (a grid at epsilon 0 holds the mass at +inf, their delta, closely from below)
    else:
        # (every point lies beyond the grids and no mass sits at +inf: the far grid below
        # answers alone; one tuned at epsilon 0 as well cost seconds and moved nothing:
        # sigma 1.21, q 0.0306, T 1.2e6 at epsilon 8769, 13.7 s for (0, 7.1e-70))
        reps = flat[:0]
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
    # (a post-hoc split only where the grids were far off: see big_jumps.Heavy.post_hoc)
    scale = _big_jumps.POST_HOC_LOOSE if model.post_hoc else 1.0
    tried: set[float] = set()
    for _ in range(DELTA_EXTRA_GRIDS):
        if _budget.spent():
            break
        loose = _looseness(lo, hi)
        ok = np.isfinite(flat) & (flat > 0) & (flat < limit) & (
            loose > scale * (loose_above if not tried else DELTA_LOOSE))
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
