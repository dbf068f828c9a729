"""One component's first step: its window, its cells, and the law its levels are sized from.

The first step of every component is discretised onto the grid ``l = k h``
inside a window sized by the tilted law (:mod:`pld.engine.windows`); the
cells and the windows are shared by both sides of a materialisation.  What a
window leaves out goes to the safe side (:mod:`pld.engine.discretize`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld.engine import windows as w
from pld.engine.limits import MAX_GRID_POINTS
from pld.kernels import cell_points, split_atoms_log
from pld.mechanisms.models import LossModelProtocol

#: first-step windows longer than this may use wide cells in their tails
_WIDE_CELLS_FROM = 4096


#: spacings one of a first step's widest cells covers
SPAN_PER_POINT = 1 << (w._WIDE_CELL_LEVELS + 1)
#: a first step's window spans at most this many spacings: as many as its
#: widest cells can cover in ``MAX_GRID_POINTS`` points (in a composition's own
#: cap of points, ``Composer.max_points``, where that differs).  The exact
#: law's tail can reach far beyond the window the planner sized (a law with
#: a near-atom tuned at a tiny spacing: ``PoissonSampled(Gaussian(0.01),
#: 0.25)``'s big-jump core at h = 2e-13 spanned 1.5e16
#: spacings); what a shorter window leaves out goes to the safe side, as at
#: every window's edge
STEP_SPAN_CAP = MAX_GRID_POINTS * SPAN_PER_POINT


@dataclass(frozen=True, eq=False)
class _Step:
    """One component's inputs, shared by both sides of a materialisation."""

    model: LossModelProtocol
    ex: w.Exploration
    count: int
    k_lo: int
    k_hi: int
    cells: tuple
    #: sizing law of the levels, from the discretised step
    ex_grid: w.Exploration | None
    #: offsets of the first step's points from k_lo (None: every grid point)
    points: np.ndarray | None = None
    #: level windows by step count (both sides truncate at the same ones)
    windows: dict = field(default_factory=dict)
    #: steps composed by one FFT power, per side (True: dominating); 1 if none
    power_steps: dict = field(default_factory=dict)
    #: the step's law as the grids hold it (its tail beyond the first window
    #: left out), for the levels' windows
    ex_sizing: w.Exploration | None = None
    #: the largest grid of this composition (``Composer.max_points``)
    max_points: int = MAX_GRID_POINTS


def _level_window(ex: w.Exploration, ex_grid: w.Exploration | None, c: int, h: float, lam: float,
                  total_steps: int, log_eta) -> tuple[float, float]:
    """Truncation window of the level holding ``c`` steps.

    A window for ``c`` composed steps allows tilted mass ``eta * c / total_steps``
    outside it, since its truncation error is repeated ``total_steps / c`` times.
    The top comes from the discretised step's own law (``ex_grid``): the first
    step sent the exact law's tail beyond its window to +inf, so no level holds
    it (at small sampling rates that heavy tail would put the exact law's
    Chernoff top several times too far out).  The bottom unites both laws'
    (the exact law lacks the mass a spread pushes below its support).  Sizing
    only: whatever falls outside is still bounded and moved to the safe side.
    """
    budget = w.shifted(log_eta, math.log(total_steps / c))
    lo, hi = w.window(w.Composite([(ex, c)]), lam, budget, h)
    if ex_grid is not None:
        lo_g, hi_g = w.window(w.Composite([(ex_grid, c)]), lam, budget, h)
        lo, hi = min(lo, lo_g), hi_g
    return lo, hi


def _log_step_shares(total_steps: int, count: int, parts: int) -> float:
    """log of the number of shares of the truncation budget one first step
    may take: its window may leave out ``eta / shares``.

    One component: ``total_steps``.  Several: the budget is split evenly
    between the components and each one's part between its ``count`` steps
    (``parts * count`` shares; the steps' parts still add up to ``eta``).  A
    component composed a few times then gets a window for its own count: a
    big-jump term's one jump step, whose log-normal tail the shares of 1.8e6
    steps held out to loss 6 (2e6 points at h = 3e-6), reaches half as far.
    Sizing only: whatever a window leaves out goes to the safe side.
    """
    return math.log(total_steps if parts == 1 else parts * count)


def _prepare_step(model, ex: w.Exploration, count: int, h: float, lam: float,
                  total_steps: int, log_eta, ex_sizing: w.Exploration | None = None,
                  parts: int = 1, max_points: int = MAX_GRID_POINTS) -> _Step:
    """First-step window, cell masses and sizing law of one component (at most ``max_points``
    points; see ``STEP_SPAN_CAP``)."""
    shares = _log_step_shares(total_steps, count, parts)
    lo, hi = w.step_window(ex, lam, w.shifted(log_eta, shares), h)
    lo = max(lo, ex.loss_min)
    hi = min(hi, ex.loss_max)
    # a law cut at a loss (pld.engine.big_jumps) has its densest part right at the
    # cut, which the explored cells resolve too coarsely for a window to
    # reach: hold all of its support on that side (the dominated side drops
    # what lies outside: 8% of a jump law's mass was lost so)
    budget = w.shifted(log_eta, shares)
    if getattr(model, "bounded_above", False) and model.cut_log_mass > (
            budget[1] if isinstance(budget, tuple) else budget):
        # (only where the law still has mass at the cut worth a window: a
        # window reaching far beyond the law's range tilts its bulk away)
        hi = max(hi, ex.loss_max)
    if getattr(model, "bounded_below", False):
        lo = min(lo, ex.loss_min)
    core = w.window(w.Composite([(ex_sizing or ex, 1)]), lam, budget)
    for cap in (max_points * SPAN_PER_POINT, max_points):
        lo, hi = _capped_span(lo, hi, h, core, cap)
        k_lo = int(math.floor(lo / h))
        k_hi = max(int(math.ceil(hi / h)), k_lo + 1)
        n = k_hi - k_lo + 1
        points = None
        if model.base is not None and n > _WIDE_CELLS_FROM:
            # wide cells where the law has negligible mass (the tails of a
            # subsampled step are most of its window)
            points = cell_points(*w.tail_offsets(ex, lam, k_lo, h, n, budget_scale=total_steps / count), n)
            if points.size > 0.8 * n:
                points = None
        if (n if points is None else points.size) <= max_points:
            break
        # (wide cells did not bring the window within the cap: it is cut to
        # the cap in plain cells)
    offsets = np.arange(n) if points is None else points
    grid = (k_lo + offsets) * h
    cells = model.cells(grid)
    # Size the composed levels from the discretised step: a spread onto a grid
    # coarse next to the step's own range (tiny sampling rates) pushes mass up
    # to a cell beyond the exact law's support, and windows drawn from the
    # exact law would send that mass to +inf at every level.
    ex_grid = w.from_grid(grid, _spread_masses(model, cells, grid))
    if ex_grid is not None:
        # fill its psi cache here, not racing in the two side threads
        ex_grid.psi_around(lam)
        ex_grid.psi_around(0.0)
    return _Step(model, ex, count, k_lo, k_hi, cells, ex_grid, points,
                 ex_sizing=ex if ex_sizing is None else ex_sizing, max_points=max_points)


def _capped_span(lo: float, hi: float, h: float, core: tuple[float, float], cap: float) -> tuple[float, float]:
    """``[lo, hi]`` cut to at most ``cap`` spacings (less two), around ``core``
    (the window the law the grids hold asks for), evenly on both sides."""
    span = (cap - 2) * h
    if hi - lo <= span:
        return lo, hi
    c_lo, c_hi = max(lo, core[0]), min(hi, core[1])
    room = max(span - (c_hi - c_lo), 0.0) / 2.0
    new_lo, new_hi = max(lo, c_lo - room), min(hi, c_hi + room)
    if new_hi - new_lo > span:  # (the core alone is too wide)
        mid = 0.5 * (c_lo + c_hi)
        new_lo, new_hi = mid - 0.5 * span, mid + 0.5 * span
    return new_lo, new_hi


def _spread_masses(model, cells: tuple, grid: np.ndarray) -> np.ndarray:
    """log P-mass on the increasing points ``grid`` with each cell's (and each
    atom's) mass split between the points around it as the dominating
    discretisation splits it (sizing only).

    Connect-the-dots (Doroshenko et al. 2022) gives a piece of P-mass ``P``,
    Q-mass ``Q`` in ``[l_i, l_i + w]`` the upper share
    ``(1 - e^{l_i - l*}) / (1 - e^{-w})`` of ``P``, ``l* = log P/Q``: about the
    linear interpolation, so the sizing law keeps the discretised step's mean
    to second order in ``w`` (levels of ``c`` steps drift by ``c O(w^2)``, not
    ``c w / 2`` as with every mass at its cell's upper end, which put the
    windows of 1e12 steps ten times too wide) and still reaches the point
    above every piece, where a coarse grid pushes mass beyond the exact law's
    support.
    """
    cell_lp, cell_lq = cells
    out = np.full(grid.size, -np.inf)
    lo_pts, w = grid[:-1], np.diff(grid)
    _add_split(out, np.arange(grid.size - 1), cell_lp[1:-1], cell_lq[1:-1], lo_pts, w)
    loss, lp, lq = model.atoms()
    if loss.size and grid.size:
        # (an atom on a point up to rounding belongs to it; see split_atoms_log)
        out = np.logaddexp(out, split_atoms_log(*(np.ascontiguousarray(x, dtype=np.float64)
                                                  for x in (grid, loss, lp, lq))))
    return out


def _add_split(out: np.ndarray, cell: np.ndarray, lp: np.ndarray, lq: np.ndarray, lo: np.ndarray,
               w: np.ndarray) -> None:
    """Add pieces ``(lp, lq)`` in cells ``[lo, lo + w]`` to ``out[cell]`` and
    ``out[cell + 1]`` in the connect-the-dots proportions (log space).  ``cell``
    holds each cell once (the cells of a grid, in order): every point gets at most one
    upper and one lower share, added as ``np.logaddexp.at`` would, upper shares first."""
    has = lp > -np.inf
    if not np.any(has):
        return
    cell, lp, lq, lo, w = cell[has], lp[has], lq[has], lo[has], w[has]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        up = -np.expm1(np.minimum(lo + lq - lp, 0.0)) / -np.expm1(-w)
    # (clipped to [0, 1], a NaN share as 1: np.clip's wrapper costs more than the pass)
    up = np.minimum(np.maximum(np.where(np.isnan(up), 1.0, up), 0.0), 1.0)
    with np.errstate(divide="ignore"):
        out[cell + 1] = np.logaddexp(out[cell + 1], lp + np.log(up))
        out[cell] = np.logaddexp(out[cell], lp + np.log1p(-up))
