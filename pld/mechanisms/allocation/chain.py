"""The refinement chain of a random-allocation round: which certified construction a missed
target tries next (:meth:`pld.mechanisms.allocation.RandomAllocation.refined`).

Every member is a certified pair of the same round; :class:`pld.PLD` intersects their brackets.
The order (and which members are left out) only trades time against width: the constants below
record where each member narrowed a bracket on seeded settings, and at what cost.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pld.mechanisms.allocation import geometric
from pld.mechanisms.allocation.heavy import fine_resolves, light_cut
from pld.mechanisms.allocation.levels import _windows_to, window
from pld.mechanisms.allocation.sums import GEOMETRIC_ONLY_SIGMA

if TYPE_CHECKING:
    from pld.mechanisms.allocation import RandomAllocation

#: most first-grid cells a refinement may ask for
_REFINE_CELLS = 1 << 20
#: smallest light-cut share a refinement of the split asks for (``t Q(Y > B)``)
_FINEST_KAPPA = 1e-6

#: most light-grid cells a refinement of the split may ask for
_REFINE_LIGHT_CELLS = 1 << 18
#: longest round, most points of a geometric grid and fewest of its cells per standard deviation
#: of log(S/t), with which a missed target tries geometric grids last (beyond, their sums cost
#: seconds and rarely moved an end)
_GEOMETRIC_LAST_STEPS, _GEOMETRIC_LAST_POINTS, _GEOMETRIC_LAST_RESOLVES = 1024, geometric.FINE_POINTS, 40.0
#: the split's light cut is refined (kappa / 100) from this noise multiplier on only
_KAPPA_REFINE_SIGMA = 0.7
#: a split round's add mass at +inf past which a missed target tries the light grid in medians
_ADD_INF_REFINE = 1e-10
#: longest round whose missed target tries the split on a light grid of half the spacing (1-2 s
#: at 2e4 steps, where it met targets the linear grid's finer one met in 8 s); from
#: ``_LONG_HALF_SIGMA`` to ``_HALF_BEFORE_LINEAR_SIGMA``, up to ``_LONG_HALF_STEPS`` steps too (2-3x
#: the split's build, 3-7 s at 6e4-2e5 steps; within target where the split and the linear grids
#: were not: the linear grid is tried after it, its upper end can be the lowest, sigma 2, 1e5
#: steps, delta 1e-10).  Beyond 3e5 steps the linear grid's lower end was the narrowest (7e5-1e6
#: steps), but not its finer grid's (26-80 s for at most 1e-7 of epsilon): those rounds try the
#: linear grid, not its finer one.  At sigma 3.7 the finer split narrowed nothing the linear
#: grids had not.  Below sigma 0.75 (no linear grid there) it narrows without reaching the
#: target: sigma 0.58, 1 of 185539 steps, delta 1.5e-7, 4.9x -> 1.3x the target in 8 s more
#: (a quarter of the spacing: 1.4x, 28 s).
_FINER_SPLIT_STEPS, _LONG_HALF_SIGMA, _LONG_HALF_STEPS = 20_000, 0.5, 300_000
#: rounds from which a split's missed target tries half the spacing before the further light cut
#: (sigma 0.8-1.2, 3721-19821 steps: the cut moved no end, 0.6-1.9 s each)
_HALF_BEFORE_CUT_STEPS = 1000
#: rounds from which, up to this noise multiplier, a split's missed target tries half the spacing
#: before the single linear grid (whose bracket there was wider than the split's, at 1-3.5 s a try:
#: sigma 0.97-2.1, 7676-19821 steps); above it, the linear grid and then its finer one before the
#: split's finer variants (the linear grid was the narrower there: sigma 2.9-7.3)
_HALF_BEFORE_LINEAR_STEPS, _HALF_BEFORE_LINEAR_SIGMA = 4096, 2.5
#: rounds from which a missed target tries the single linear grid with its partial sums re-gridded
#: at a quarter of the default ratio (its last levels four times finer), in place of the default one
#: (whose lower end could be 0 there: sigma 3.7, 262148 steps); the split gained little from it
#: where the linear grid exists, and where it does not (sigma 0.75-0.9, 6e5-7.5e5 steps) narrowed
#: both ends more than the further light cut it replaces (1.8-2.9x the target -> 1.5-2.3x)
_DENSE_LEVELS_STEPS, _DENSE_LEVELS_RATIO = 100_000, 0.125
#: most cells of such a round's last level (four times the default ratio's: about 8 s a build here;
#: sigma 5.7, 1.6e6 steps would take 3.6e6 cells, 15 s against 4 s, for 1e-5 of epsilon)
_DENSE_LEVELS_CELLS = 1 << 21

#: below this noise multiplier a short round's refinement tries the geometric grid first
_GEOMETRIC_FIRST_SIGMA = 1.0
#: a split round's refinement skips the single linear grid where, at its spacing of 0.02 standard
#: deviations, one coordinate's tail ``e^{a^2/2 + 7.6 a}`` spans more cells than this (beyond, it
#: moved no end on seeded settings and took most of their time)
_LINEAR_REFINE_CELLS = 200_000

#: finest first-grid spacing a missed target refines to (finer ones lose more of the dominated
#: side's tail to round-off than they gain in its bulk)
FINEST_SPACING = 0.01


def finer(r: RandomAllocation, construction: str, spacing: float, kappa: float) -> tuple | None:
    """The next finer variant of round ``r``'s linear grid or split, or None (the geometric
    grid's: :func:`geometric.finer_spacings`): the single grid at half the
    spacing (down to ``FINEST_SPACING``, within ``_REFINE_CELLS`` cells); the split with a
    light cut a hundred times further out (``kappa / 100``, down to ``_FINEST_KAPPA``, while
    the light grid stays within ``_REFINE_LIGHT_CELLS`` cells, from ``sigma = 0.7`` on)."""
    s, t = r.noise_multiplier, r.steps
    if construction == "linear":
        if spacing / 2 < FINEST_SPACING * (1 - 1e-9) or not r._fits_linear(spacing / 2):
            return None
        a = 1.0 / s
        with _windows_to(r.tail):
            w1 = window(a, 1, t)
        if 2 * w1 / (spacing * math.sqrt(math.expm1(min(a * a, 700.0)))) > _REFINE_CELLS:
            return None  # (a heavy tail's grid: twice the cells would cost minutes)
        return ("linear", spacing / 2, kappa)
    if construction == "split_fine" or s < _KAPPA_REFINE_SIGMA:
        return None  # (below, the light grid of a further cut costs tens of seconds and its gain was nil)
    if kappa / 100 < _FINEST_KAPPA * (1 - 1e-9) or light_cut(s, t, spacing, kappa / 100)[1] > _REFINE_LIGHT_CELLS:
        return None
    return ("split", spacing, kappa / 100)


def _dense_linear_cells(r: RandomAllocation) -> float:
    """About how many cells the last level of ``r``'s linear grid holds at ``_DENSE_LEVELS_RATIO``
    (sizing only): it spans ``S`` from 0 past its mean ``t`` on cells of the ratio times the spacing
    times ``sd(S) = sqrt(t) sd1`` (1.25x for the windows past the mean, as measured)."""
    sd1 = math.sqrt(math.expm1(min(1.0 / r.noise_multiplier ** 2, 700.0)))
    return 1.25 * math.sqrt(r.steps) / (_DENSE_LEVELS_RATIO * r.spacing * sd1)


def next_round(r: RandomAllocation) -> RandomAllocation | None:
    """The round after ``r`` in its refinement chain, or None.

    From ``construction="auto"`` the chain is: the other
    construction (the single linear grid or the light/heavy split, where
    it can be built), then the finer variant of the first (:func:`finer`), then
    that of the other, with the split at half the spacing (up to ``_FINER_SPLIT_STEPS``; up to
    ``_LONG_HALF_STEPS`` at sigma 0.75-2.5; longer rounds without the linear grid's finer one)
    before the linear grid's where the split came first (and, from ``_HALF_BEFORE_CUT_STEPS``
    steps, before the split's further light cut; from ``_HALF_BEFORE_LINEAR_STEPS`` steps up to
    ``_HALF_BEFORE_LINEAR_SIGMA``, before the other construction too, and above it after the
    linear grid's finer one); a short round also tries the
    geometric grid (first below sigma = 1, else last), then finer ones
    (:func:`geometric.finer_spacings`); a round of up to 1024 steps, last, those geometric
    grids that resolve its loss within ``geometric.FINE_POINTS``; from ``_DENSE_LEVELS_STEPS``
    steps the linear grid with its last levels finer (``coarse_ratio``; where that level stays
    within ``_DENSE_LEVELS_CELLS`` cells), first where it is the round's own construction (a split
    round without one: the split so, in place of its further light cut).  For ``participations > 1``
    (the block rounds are refined as rounds of their own): a first grid
    twice as fine, down to ``FINEST_SPACING``.
    """
    if r.participations > 1:
        if r.spacing / 2 < FINEST_SPACING * (1 - 1e-9):
            return None
        return type(r)(r.mechanism, r.steps, r.participations, r.spacing / 2, r.construction, r.kappa,
                       tail=r.tail, precise=r.precise)
    pending = list(r.refine_next)
    s, t = r.noise_multiplier, r.steps
    first = r._construction()
    fine_geo = [("geometric", x, r.kappa) for x in geometric.finer_spacings(s, t, r.spacing, FINEST_SPACING)]
    if r.construction == "auto" and first == "geometric":
        pending = list(fine_geo)
        if t > geometric.GEOMETRIC_STEPS and s >= GEOMETRIC_ONLY_SIGMA:  # (a long round: the split after)
            pending.append(("split", r.spacing, r.kappa))
    elif r.construction == "auto":
        other = "split" if first == "linear" else "linear"
        # (at the round's tail: a deeper round's windows may not fit one grid where the
        # shallow one's did, and "linear" would build the split again)
        can_other = t >= 2 and (other == "split" or (r._fits_linear(r.spacing)
                                                     and r._linear_cells(r.tail) <= _LINEAR_REFINE_CELLS))
        pending = [(other, r.spacing, r.kappa)] if can_other else []
        info = r.grid_info() if first == "split" else {}
        if ((info.get("gaussian_add") and fine_resolves(s, t, r.spacing, r.kappa))
                or info.get("inf_mass_upper_add", 0.0) > _ADD_INF_REFINE):
            # (small sigma: only a light grid in medians resolves the add direction, not a further cut)
            pending.insert(0, ("split_fine", r.spacing, r.kappa))
            first = "split_fine"
        finer_first = finer(r, first, r.spacing, r.kappa)
        finer_other = finer(r, other, r.spacing, r.kappa) if can_other else None
        long_round = (_FINER_SPLIT_STEPS < t <= _LONG_HALF_STEPS
                      and _LONG_HALF_SIGMA <= s <= _HALF_BEFORE_LINEAR_SIGMA)
        half = (("split", r.spacing / 2, r.kappa)
                if 2 <= t and (t <= _FINER_SPLIT_STEPS or long_round)
                and r.spacing / 2 >= FINEST_SPACING * (1 - 1e-9) else None)
        if t > _LONG_HALF_STEPS and other == "linear":
            # (the linear grid's finer one moved no end by over 1e-7 there, in 26-79 s)
            finer_other = None
        # (the split on a light grid twice as fine: before the finer linear grid, which costs four
        # times as much from 4096 steps on, where the split came first, and in a long round before
        # the split's further light cut too, which moved no end there)
        if first == "linear":
            pending += [finer_first, finer_other, half]
        elif first == "split" and t >= _HALF_BEFORE_CUT_STEPS:
            if (half is not None and t >= _HALF_BEFORE_LINEAR_STEPS and s <= _HALF_BEFORE_LINEAR_SIGMA
                    and pending[:1] == [(other, r.spacing, r.kappa)]):
                pending.insert(0, half)
                half = None
            if t >= _HALF_BEFORE_LINEAR_STEPS and s > _HALF_BEFORE_LINEAR_SIGMA and finer_other is not None:
                # (above, the linear grid was the narrower: its finer grid next)
                pending += [finer_other, half, finer_first]
            else:
                pending += [half, finer_first, finer_other]
        else:
            pending += [finer_first, half, finer_other]
        if 2 <= t <= geometric.GEOMETRIC_STEPS and geometric.fits(s, t, r.spacing):
            # (a short round: first below sigma = 1, where the split is loose; above, last)
            pending.insert(0 if s < _GEOMETRIC_FIRST_SIGMA else len(pending), ("geometric", r.spacing, r.kappa))
            pending += fine_geo
        elif 2 <= t <= _GEOMETRIC_LAST_STEPS:
            # (a longer round: last, the geometric grids, this one's and finer, whose cells
            # resolve the loss log(S/t) (sigma 1, 1-of-98, 2 epochs, delta 1e-5 meets its target
            # only at spacing 0.01; sigma 1.877, 1-of-70, 4 epochs, delta 6.4e-12 at 0.005); at
            # sigma 2, 1-of-1000, 6.7 cells a standard deviation, they were 10-100x wider)
            sd_loss = math.sqrt(math.expm1(min(1.0 / (s * s), 700.0)) / t)
            fine = [g for g in [("geometric", r.spacing, r.kappa)] + fine_geo
                    if geometric.grid_points(s, t, g[1]) <= _GEOMETRIC_LAST_POINTS
                    and sd_loss >= _GEOMETRIC_LAST_RESOLVES * geometric.log_ratio(g[1])]
            pending += fine
        if t >= _DENSE_LEVELS_STEPS:
            # (a long round's last levels finer: see _DENSE_LEVELS_STEPS)
            linear = ("linear", r.spacing, r.kappa)
            has_linear = first == "linear" or linear in pending
            if has_linear and _dense_linear_cells(r) <= _DENSE_LEVELS_CELLS:
                dense = (*linear, _DENSE_LEVELS_RATIO)
                pending = [dense if p == linear else p for p in pending]
                if first == "linear" and r.coarse_ratio is None:
                    pending.insert(0, dense)
            elif (not has_linear and finer_first is not None and finer_first in pending
                  and 4 * info.get("final_cells", math.inf) <= _DENSE_LEVELS_CELLS):
                # (no linear grid: the split itself, in place of its further light cut, which
                # narrowed both ends less there)
                pending[pending.index(finer_first)] = (first, r.spacing, r.kappa, _DENSE_LEVELS_RATIO)
    pending = [p for p in pending if p is not None]
    mine = (r._construction(), r.spacing, r.kappa, r.coarse_ratio)
    while pending:
        c, sp, kap, *ratio = pending.pop(0)
        nxt = type(r)(r.mechanism, r.steps, 1, sp, c, kap, tuple(pending), tail=r.tail, precise=r.precise,
                      coarse_ratio=ratio[0] if ratio else None)
        if (nxt._construction(), sp, kap, nxt.coarse_ratio) != mine:
            return nxt
        # (the same pair again: a construction that resolves to this round's own)
    return None
