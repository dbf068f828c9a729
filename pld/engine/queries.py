"""Answering queries from grids: the epsilon bracket (the delta curve:
:mod:`pld.engine.delta_queries`).

``delta(eps) = max(delta_remove(eps), delta_add(eps))``, so an epsilon bracket
is the largest of the directions' brackets and a delta bracket the largest of
theirs.  Each direction's grids come from the planner (:mod:`pld.engine.planner`) and
the composer (:mod:`pld.engine.composer`); every bracket read off them is certified
(:mod:`pld.engine.grid`), so intersecting brackets from several grids is too.
"""

from __future__ import annotations

import math

import numpy as np

from pld.engine import big_jumps as _big_jumps
from pld.engine import budget as _budget
from pld.engine.composer import GridTooLargeError
from pld.engine.grid import GridPLD
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.pipeline import Engine
from pld.engine.targets import EPS_ATOL, EPS_RTOL, Query, Settings

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
    if model is None or model.post_hoc or not model.sampling_rate < JUMPS_MAX_Q:
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
    if model.post_hoc and hi - lo <= _big_jumps.POST_HOC_LOOSE * (rtol * hi + EPS_ATOL):
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
    # (at most two passes at a fresh cut and one refining a pass's terms from their grids:
    # where the first was tuned away from the answer, the second cuts anew at the new
    # epsilon and refines nothing, and a third refines it; a second refinement costs far
    # more, its grids finer still, than the few percent of the target it gains)
    fresh = 0
    refined = None
    for _ in range(3):
        if _budget.spent():
            break  # (the grids' bracket stands, certified)
        fresh += previous is None
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
        if refined is None and _others_wide(other, lo, rem_lo, rem_hi, rtol):
            # another direction's end lies above the terms' bracket: refined
            # now, before another pass (each builds grids of up to 2^23 points)
            other, lo, refined = _refine_others(engine, used, delta, rtol, max(lo, rem_lo))
        mid = 0.5 * (rem_lo + rem_hi)
        if abs(mid - eps0) <= 0.01 * eps0:
            if other - rem_hi > rtol * other + EPS_ATOL:
                # that end, refined, still lies beyond the target's reach of the
                # terms' bracket (a grid at its memory cap): refining terms tuned
                # at the answer would only move the lower end within their own
                # bracket (sigma 0.7155, q 3.4e-6, T 3.7e8 at delta 3.3e-3: 19 s
                # for 7e-6 of it, and under the time budget the add direction
                # was never refined: [0.276138, 0.276726] in 41 s)
                break
            # tuned at (or next to) the answer, and the terms, each within
            # its share of the target, still add up to more than it (their
            # own slopes differ from the sum's): once more at the same cut,
            # each term refined from its grid, aiming lower by what was missed
            # (sigma 0.61, q 2.8e-5, T 1.8e6: 1.08x the target -> within)
            if previous is not None:
                break
            r, previous = r * max(0.25, 0.8 * target / width), terms
        else:
            if fresh >= 2 or previous is not None:
                break
            previous = None  # (mistuned: a new cut at the new epsilon)
        eps0 = mid
    if refined is None and _others_wide(other, lo, rem_lo, rem_hi, rtol):
        other, lo, refined = _refine_others(engine, used, delta, rtol, max(lo, rem_lo))
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
        if not hi > last["bracket"][1]:
            return (f"the remove direction was split by its large steps (big-jump decomposition at loss "
                    f"{last['cut']:.4g}, {last['terms']} terms, tuned at epsilon {last['tuned_at']:.6g}) and its "
                    "terms' grids still leave this width")
        # (the terms' upper end is below another direction's: the width is that one's)
        used = {d: s for d, s in used.items() if d != "remove"}
    for d, s in used.items():
        width, _, _, round_off = engine.planner.width(d, Query("delta", delta, rtol), *s)
        if round_off > 0.5 * width:
            err = engine.composer.materialize(d, *s, lower=False)[0].err
            how = " (the FFT power already in extended precision)" if s.precision == "extended" else ""
            return (f"floating-point round-off of the FFT composition dominates it (its bound, {err:.3g} of the "
                    f"tilted law, grows with the number of steps; no finer grid removes it){how}")
    for d, s in used.items():
        if engine.composer.grid_points(d, s.h, s.lam, s.log_eta) * 2 > MAX_GRID_POINTS:
            return f"the {d} direction's grid reached its memory cap of {MAX_GRID_POINTS} points"
    return "refining the grid stopped narrowing it (a bias the spacing does not control)"


def _others_wide(other: float, lo: float, rem_lo: float, rem_hi: float, rtol: float) -> bool:
    """Whether the other directions' upper end ``other`` lies above the terms'
    bracket ``[rem_lo, rem_hi]`` and leaves the answer wider than its target."""
    return other > rem_hi and other - max(lo, rem_lo) > rtol * other + EPS_ATOL


def _refine_others(engine: Engine, used: dict[str, Settings], delta: float, rtol: float,
                   floor: float) -> tuple[float, float, tuple]:
    """The directions other than remove refined at this target against ``floor``
    (the terms' lower end): ``(their largest upper end, floor raised by their
    lower ends, what the cache keeps of it)``; ``used`` gets their settings.

    Their grids come from the terms-first route, tuned for a looser target,
    and an end of theirs can be the wide one (sigma 1.10, q 1.3e-5, T 1e6 at
    delta 5.2e-14: the add direction's coarse grid had an error bound of 1e41
    and its end was its largest loss, 13.2, for an epsilon of 0.098)."""
    other, lo = 0.0, floor
    for d in list(used):
        if d == "remove":
            continue
        settings = engine.planner.settings(d, Query("delta", delta, rtol), floor=lo)
        used[d] = settings
        upper, lo = _direction_ends(engine, d, settings, delta, lo)
        other = max(other, upper)
    return other, lo, ({d: s for d, s in used.items() if d != "remove"}, other, lo)


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
