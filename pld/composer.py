"""Composition: from settings ``(h, lam, log_eta, precision)`` to certified grids.

For one direction and one :class:`pld.planner.Settings` the composer

1. discretises every component onto the grid ``l = k h`` (connect-the-dots
   spread on the dominating side, centred merge on the dominated side,
   :mod:`pld.discretize`), inside a first-step window sized by the tilted law,
2. self-composes each component: the early levels by one FFT power with
   certified aliasing (:mod:`pld._power`; ``precision`` ``"extended"`` does
   its forward transform and powers in long double, for compositions whose
   bracket the power's round-off would dominate) or, for a long run on a
   large first grid in double, by a power of a block of steps re-gridded to a
   coarser spacing (:func:`_block_power_start`), the rest by repeated squaring with
   FFT convolutions on re-gridded levels, truncating each level to a
   Chernoff-sized window with the truncated mass moved to the safe side,
3. convolves the components (heterogeneous compositions), each partial
   result truncated to where the rest can still bring it into the final window.

Both sides share every sizing input (windows, cells, sizing laws): windows only
decide *what* is moved to the safe side, never *whether* moved mass is counted,
so sizing costs nothing in certification (Koskela et al. 2021; Doroshenko et
al. 2022 for the connect-the-dots discretisation).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from pld import _budget, _heap
from pld import _windows as w
from pld._fft import _canonical_size as _fft_size
from pld._models import LossModelProtocol
from pld._power import PRECISIONS, self_compose_powers
from pld.discretize import discretize, variance_weight
from pld.engine_cache import EngineCache, side_pool
from pld.grid import GridPLD
from pld.kernels import cell_points, optimistic_merge_centred
from pld.laws import Laws

#: largest number of grid points in any one array (memory cap: ~16 MB per array,
#: a few hundred MB at peak with the discretiser's temporaries)
MAX_GRID_POINTS = 1 << 21
#: a composed result used once (heterogeneous composition) is coarsened above this
LEVEL_POINTS = 1 << 16
#: largest transform for the FFT power of the early levels (a longer one
#: halves the power: squaring re-grids levels that outgrow this)
POWER_POINTS = 1 << 18
#: block power (_block_power_start): a block is re-gridded this many times
#: (4x its first spacing) before the second power ...
BLOCK_COARSENINGS = 2
#: ... at the cost of at most this share of the first discretisation's bias ...
BLOCK_BIAS_SHARE = 0.1
#: ... where at least this many blocks are composed (a power of n >> 2 of
#: them, squared twice) ...
BLOCK_MIN_BLOCKS = 16
#: ... and the first step's grid holds at least this many points (below, the
#: single power's transform is short and a second one only adds its costs)
BLOCK_MIN_POINTS = 1 << 13
#: a materialisation whose single-power level (``count >> 2`` steps) holds at
#: most this many points builds its two sides in the calling thread, and a
#: query whose leading direction's does starts no speculative builds
#: (:meth:`Composer.parallel`): its time is fixed costs
#: (windows, error bounds, a few hundred short kernel calls), which a second
#: thread only slows, every return from a nogil call waiting for the other's
#: Python (MNIST, tiny-loss, sigma 5 / delta 1e-10: the same wall time in one
#: thread as in two, with 30-50% more CPU in two; sigma 0.7, T 2e5, a 2e5-point
#: first step: 44 ms in two against 62 ms in one)
PARALLEL_POINTS = 1 << 17
#: levels at most this large are never re-gridded (no time to gain)
MIN_LEVEL_POINTS = 1 << 12
#: early levels are re-gridded only above this size: their law can still be
#: spiky (a mixture over how many steps drew the record), and a re-grid's
#: error is repeated count / c times; this size keeps the widening below ~10%
#: of the bracket's target on the peer configurations
EARLY_LEVEL_POINTS = 1 << 14
#: first-step windows longer than this may use wide cells in their tails
_WIDE_CELLS_FROM = 4096
#: a first step's window spans at most this many spacings: as many as its
#: widest cells (``2^(levels+1)`` spacings) can cover in ``MAX_GRID_POINTS``
#: points.  The exact law's tail can reach far beyond the window the planner
#: sized (a law with a near-atom tuned at a tiny spacing: ``PoissonSampled(
#: Gaussian(0.01), 0.25)``'s big-jump core at h = 2e-13 spanned 1.5e16
#: spacings); what a shorter window leaves out goes to the safe side, as at
#: every window's edge
STEP_SPAN_CAP = MAX_GRID_POINTS << (w._WIDE_CELL_LEVELS + 1)
_U = 2.0 ** -53


class GridTooLargeError(ValueError, MemoryError):
    """A fixed grid spacing (``value_discretization_interval``) needs more grid
    points than the memory cap allows.  A ``ValueError`` (the argument is out
    of range for the query) and a ``MemoryError`` (what it would cost)."""


@dataclass(eq=False)
class Materialized:
    """One direction's grids at one setting, and what building them shared."""

    prepared: list
    final_window: tuple
    dominating: GridPLD | None = None
    dominated: GridPLD | None = None
    #: window of the composition of the first k + 1 components
    partial_windows: list = field(default_factory=list)


class Composer:
    """Builds (and caches) the grid pairs of one composition."""

    def __init__(self, laws: Laws, cache: EngineCache) -> None:
        self.laws = laws
        self.cache = cache
        _heap.settle()  # (the grids' arrays stay in the heap between queries)

    def grid_points(self, direction: str, h: float, lam: float, log_eta) -> int:
        """Largest array the materialisation at ``(h, lam)`` allocates.

        Levels are coarsened to at most ``LEVEL_POINTS``; the single-step grids
        are the only arrays whose size follows ``h``.
        """
        n = LEVEL_POINTS
        for lo, hi in self._step_windows(direction, lam, log_eta):
            n = max(n, int((hi - lo) / h) + 2)
        return n

    def parallel(self, direction: str, h: float, lam: float, log_eta) -> bool:
        """Whether building this direction's grids is worth a second thread:
        some component's level of ``count >> 2`` steps (the single FFT power's)
        spans more than :data:`PARALLEL_POINTS` points of spacing ``h``
        (sized from the exact law: sizing only)."""
        if side_pool() is None:
            return False
        key = ("parallel", direction, h, lam, log_eta)
        hit = self.cache.get(self.cache.spacings, key)
        if hit is None:
            sizing = self.laws.sizing(direction, log_eta)
            steps = sizing.steps()
            widest = 0.0
            for ex, count in sizing.parts:
                c = max(1, count >> 2)
                lo, hi = w.window(w.Composite([(ex, c)]), lam, w.shifted(log_eta, math.log(steps / c)), h)
                widest = max(widest, (hi - lo) / h)
            hit = (widest > PARALLEL_POINTS,)
            self.cache.put(self.cache.spacings, key, hit)
        return hit[0]

    def _step_windows(self, direction: str, lam: float, log_eta) -> list[tuple[float, float]]:
        """Each component's single-step window, within its support (cached:
        it does not depend on the spacing, and the planner sizes several
        spacings per tilt)."""
        key = ("step_windows", direction, lam, log_eta)
        hit = self.cache.get(self.cache.laws, key)
        if hit is None:
            comp = self.laws.sizing(direction, log_eta)
            steps = comp.steps()
            hit = []
            for ex, count in comp.parts:
                lo, hi = w.window(w.Composite([(ex, 1)]), lam,
                                  w.shifted(log_eta, _log_step_shares(steps, count, len(comp.parts))))
                hit.append((max(lo, ex.loss_min), min(hi, ex.loss_max)))
            self.cache.put(self.cache.laws, key, hit)
        return hit

    def power_steps(self, direction: str, h: float, lam: float, log_eta, precision: str = "double") -> list[int]:
        """Steps composed by one FFT power per component (1: squaring only)."""
        entry = self.cache.get(self.cache.grids, (direction, h, lam, log_eta, precision))
        if entry is None:
            return []
        return [step.power_steps.get(True, 1) for step in entry.prepared]

    def speculate(self, direction: str, h: float, lam: float, log_eta, precision: str = "double") -> None:
        """Start building a dominating grid in the background (two cores), if not known."""
        pool = side_pool()
        if pool is None:
            return
        key = (direction, h, lam, log_eta, precision)
        with self.cache.lock:
            if key in self.cache.grids or key in self.cache.inflight:
                return
            # (the pid: a forked child must not wait on its parent's threads)
            self.cache.inflight[key] = (os.getpid(), pool.submit(self.materialize, direction, h, lam, log_eta,
                                                                 precision, serial=True, lower=False))

    def materialize(self, direction: str, h: float, lam: float, log_eta, precision: str = "double", *,
                    serial: bool = False, lower: bool = True) -> tuple[GridPLD, GridPLD | None]:
        """``(dominating, dominated)`` grids of one direction (cached).

        The positional arguments are a :class:`pld.planner.Settings`
        (``materialize(d, *settings)``); ``precision`` is the FFT power's
        arithmetic (:data:`pld._power.PRECISIONS`).  ``lower=False`` may leave
        the dominated side out (None): a direction whose upper end stays below
        the other's lower end needs no lower end.  ``serial`` builds both sides
        in the calling thread (background builds).
        """
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        key = (direction, h, lam, log_eta, precision)
        cache = self.cache
        with cache.lock:
            hit = cache.grids.get(key)
            pending = None if hit is not None or serial else cache.inflight.get(key)
        if hit is None and pending is not None and pending[0] == os.getpid():
            pending[1].result()  # built in the background already
            hit = cache.get(cache.grids, key)
        if hit is not None and (hit.dominated is not None or not lower):
            return hit.dominating, hit.dominated
        entry = hit if hit is not None else self._prepare(direction, h, lam, log_eta)
        steps = self.laws.exploration(direction).steps()

        def side(pessimistic: bool) -> GridPLD:
            return _compose_components(entry, h, lam, pessimistic, steps, log_eta, precision)

        # The two sides share only read-only inputs from here on; the FFTs and
        # numba kernels release the GIL, so on two cores they run side by side.
        pool = side_pool() if not serial and self.parallel(direction, h, lam, log_eta) else None
        try:
            if entry.dominating is None and lower and pool is not None:
                future = pool.submit(side, True)
                entry.dominated = side(False)
                entry.dominating = future.result()
            else:
                if entry.dominating is None:
                    entry.dominating = side(True)
                if lower and entry.dominated is None:
                    entry.dominated = side(False)
            cache.put(cache.grids, key, entry)
        finally:
            if serial:
                with cache.lock:
                    cache.inflight.pop(key, None)
        assert entry.dominating is not None
        return entry.dominating, entry.dominated

    def _prepare(self, direction: str, h: float, lam: float, log_eta) -> Materialized:
        """What both sides of a materialisation share: windows, cells, sizing laws."""
        n_final = self.grid_points(direction, h, lam, log_eta)
        if n_final > MAX_GRID_POINTS:
            raise GridTooLargeError(
                f"value_discretization_interval = {h:g} needs {n_final} grid points for this query, above the "
                f"cap of {MAX_GRID_POINTS}: pass a spacing of at least {h * n_final / MAX_GRID_POINTS:.3g}, or "
                "none (pld then chooses the spacing per query)")
        comp = self.laws.exploration(direction)
        sizing = self.laws.sizing(direction, log_eta)
        entry = Materialized([_prepare_step(mech.loss_model(direction), ex, count, h, lam, comp.steps(),
                                            log_eta, ex_sizing, len(comp.parts))
                              for (mech, count), (ex, _), (ex_sizing, _)
                              in zip(self.laws.components, comp.parts, sizing.parts)],
                             w.window(sizing, lam, log_eta, h))
        entry.partial_windows = _partial_windows(sizing, lam, log_eta, h, entry.final_window)
        return entry


def _compose_components(entry: Materialized, h: float, lam: float, pessimistic: bool, steps: int,
                        log_eta, precision: str = "double") -> GridPLD:
    """One side: every component self-composed, then convolved in order."""
    total = None
    for k, step in enumerate(entry.prepared):
        g = _self_compose(step, h, lam, pessimistic, steps, log_eta, precision)
        if total is None:
            total = g
        else:
            a, b = _same_grid(total, g)
            total = _fit(_truncate(a.convolve(b), entry.partial_windows[k]))
    assert total is not None
    return total


def _partial_windows(sizing: w.Composite, lam: float, log_eta, h: float,
                     final: tuple[float, float]) -> list[tuple[float, float]]:
    """Where the composition of the first ``k + 1`` components must be kept.

    Tilting factorises over independent parts, so the tilted law of the whole
    is centred at the sum of the parts' centres: the first ``k + 1`` matter
    on ``[A - hi_rest, B - lo_rest]`` for the final window ``[A, B]`` and the
    window ``[lo_rest, hi_rest]`` of the components still to come (within
    the partial composition's own window).  Cutting a partial composition to
    the *final* window instead would move all of a small first part's mass up
    to the bottom of a window drawn around a large later part.  Sizing only:
    truncation moves what lies outside to the safe side either way.
    """
    parts = sizing.parts
    out = []
    for k in range(len(parts)):
        if k == len(parts) - 1:
            out.append(final)
            continue
        lo_r, hi_r = w.window(w.Composite(parts[k + 1:]), lam, log_eta, h)
        lo_o, hi_o = w.window(w.Composite(parts[:k + 1]), lam, log_eta, h)
        lo, hi = max(final[0] - hi_r, lo_o), min(final[1] - lo_r, hi_o)
        out.append((lo, hi) if lo < hi else (lo_o, hi_o))
    return out


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
                  parts: int = 1) -> _Step:
    """First-step window, cell masses and sizing law of one component."""
    shares = _log_step_shares(total_steps, count, parts)
    lo, hi = w.step_window(ex, lam, w.shifted(log_eta, shares), h)
    lo = max(lo, ex.loss_min)
    hi = min(hi, ex.loss_max)
    # a law cut at a loss (pld._big_jumps) has its densest part right at the
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
    for cap in (STEP_SPAN_CAP, MAX_GRID_POINTS):
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
        if (n if points is None else points.size) <= MAX_GRID_POINTS:
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
                 ex_sizing=ex if ex_sizing is None else ex_sizing)


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
    sel = np.isfinite(loss) & (lp > -np.inf) & (loss >= grid[0]) & (loss <= grid[-1])
    if np.any(sel):
        # (the tolerance: an atom on a point up to rounding belongs to it)
        tol = 1e-9 * (grid[-1] - grid[0]) / max(1, grid.size - 1)
        idx = np.clip(np.searchsorted(grid, loss[sel] - tol, side="left"), 0, grid.size - 1)
        on = np.abs(grid[idx] - loss[sel]) <= tol
        np.logaddexp.at(out, idx[on], lp[sel][on])
        cell = np.maximum(idx[~on] - 1, 0)
        _add_split(out, cell, lp[sel][~on], lq[sel][~on], grid[cell], grid[cell + 1] - grid[cell])
    return out


def _add_split(out: np.ndarray, cell: np.ndarray, lp: np.ndarray, lq: np.ndarray, lo: np.ndarray,
               w: np.ndarray) -> None:
    """Add pieces ``(lp, lq)`` in cells ``[lo, lo + w]`` to ``out[cell]`` and
    ``out[cell + 1]`` in the connect-the-dots proportions (log space)."""
    has = lp > -np.inf
    if not np.any(has):
        return
    cell, lp, lq, lo, w = cell[has], lp[has], lq[has], lo[has], w[has]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        up = -np.expm1(np.minimum(lo + lq - lp, 0.0)) / -np.expm1(-w)
    up = np.clip(np.nan_to_num(up, nan=1.0), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        np.logaddexp.at(out, cell + 1, lp + np.log(up))
        np.logaddexp.at(out, cell, lp + np.log1p(-up))


class _Levels:
    """Windows and re-gridding rule of one component's squaring levels.

    Evolving discretisation: the level holding ``c`` steps is re-gridded to a
    doubled spacing when that is cheap in accuracy.  A re-grid at spacing
    ``h'`` biases the loss by about ``h'^2/4`` and is repeated ``count / c``
    times, so it is allowed while ``(count/c) h'^2 / 4`` stays below
    ``1/log2(count)`` of the first discretisation's bias ``count * b(h)``
    (``b`` = variance the spread adds per step).  Far from the first levels the
    spacing then grows like ``sqrt(c)``, as the composed law widens, and every
    FFT stays about the same size however large ``count`` is.
    """

    def __init__(self, step: _Step, h: float, lam: float, total_steps: int, log_eta) -> None:
        self.step, self.h, self.lam, self.total_steps, self.log_eta = step, h, lam, total_steps, log_eta
        ex = step.ex
        self.levels = max(1.0, math.log2(step.count))
        self.per_step_bias = max(ex.added_variance(h), h * h / 6)
        self.sd1 = math.sqrt(max(ex.mean_var()[1], 0.0))

    def window(self, c: int, loss_shift: float = 0.0) -> tuple[float, float]:
        """The level's window; for a law shifted by ``loss_shift`` per step
        (:func:`bulk_shift`), moved with it (``c`` times: over 10^5 steps a
        shift of 5e-6 moves the law by more than its window is wide)."""
        step = self.step
        hit = step.windows.get(c)
        if hit is None:
            hit = step.windows[c] = _level_window(step.ex_sizing or step.ex, step.ex_grid, c, self.h, self.lam,
                                                  self.total_steps, self.log_eta)
        if loss_shift:
            return hit[0] + c * loss_shift, hit[1] + c * loss_shift
        return hit

    def fit(self, g: GridPLD, c: int) -> GridPLD:
        # re-grid only a law that is wide on the grid: in the tails of a narrow
        # one (few steps, steep log-density) a re-grid costs far more than h^2
        h_allowed = min(math.sqrt(4.0 * c * self.per_step_bias / self.levels), math.sqrt(c) * self.sd1 / 50.0)
        # the memory cap wins over accuracy: a coarser grid stays certified,
        # the bracket just widens.  Early levels (multiplicity count/c large)
        # are re-gridded only when big (see EARLY_LEVEL_POINTS).
        late = 8 * c >= self.step.count
        while g.size > MAX_GRID_POINTS or (
                2 * g.h <= h_allowed and g.size > (MIN_LEVEL_POINTS if late else EARLY_LEVEL_POINTS)):
            g = g.coarsen()
        return g


def _self_compose(step: _Step, h: float, lam: float, pessimistic: bool, total_steps: int,
                  log_eta, precision: str = "double") -> GridPLD:
    """``count``-fold composition: one FFT power, then squaring with windowed truncation.

    The levels up to the first late one (``8 c >= count``) all sit on the
    first spacing, so the first of them, ``c = count >> s``, is computed at
    once as ``X^c`` in the frequency domain
    (:func:`pld._power.self_compose_powers`) and squared ``s`` times; the
    remainder ``r = count - c 2^s < 2^s`` comes from the same transform, as
    ``X^(c + r)`` when ``s = 2``.  A transform that would have to be too long
    to keep aliasing negligible halves ``c`` until it fits, down to plain
    squaring (see :class:`_Levels` for the re-gridding of later levels).
    """
    levels = _Levels(step, h, lam, total_steps, log_eta)
    weight = 1.0 if pessimistic else variance_weight(levels.sd1 ** 2, total_steps)
    final_h = _final_spacing(levels, h, step.count)
    shift = 0.0 if pessimistic else bulk_shift(step.model, step.ex, h, step.k_lo, step.k_hi, step.count,
                                               var_weight=weight, final_h=final_h)
    # (a step that is the whole composition is asked at eps >= 0, where its
    # mass below 0 does not count: its bulk is rounded down, not lifted)
    free = 0.0 if total_steps == 1 and step.count == 1 else -math.inf
    k_hi, points = step.k_hi, step.points
    if shift > 0.0:
        # (the law moved up by under a spacing: one more point at the top, or
        # the window would drop that much more of its tail, which a delta far
        # out is made of: sigma 0.311, q 8.5e-5, T 25320 at eps 27.5 lost
        # 0.004 of epsilon so)
        k_hi += 1
        if points is not None:
            points = np.append(points, points[-1] + 1)
    base = discretize(step.model, h, step.k_lo, k_hi, lam, pessimistic, cells=step.cells,
                      points=points, loss_shift=shift, var_weight=weight, free_below=free)
    step.power_steps[pessimistic] = 1
    # (a bulk shift comes off the power's levels on the first lattice, which
    # the block power's coarsened blocks no longer have: the plain power then)
    block = _block_power_start(step, base, h, levels, pessimistic) if not shift and precision == "double" else None
    if block is not None:
        result, result_count, cur, cur_count, remaining = block
    else:
        start = _power_start(step, base, h, levels, pessimistic, precision, shift, final_h)
        if start is None:
            result, result_count, cur, cur_count, remaining = None, 0, base, 1, step.count
        else:
            result, result_count, cur, cur_count, remaining, unshifted = start
            if unshifted:
                shift = 0.0  # (taken off the power's levels already, on their finer lattice)
    while True:
        _budget.check_hard()
        if remaining & 1:
            if result is None:
                result, result_count = cur, cur_count
            else:
                result_count += cur_count
                a, b = _same_grid(result, cur)
                result = levels.fit(_truncate(a.convolve(b), levels.window(result_count, shift)), result_count)
        remaining >>= 1
        if not remaining:
            break
        cur_count *= 2
        cur = levels.fit(_truncate(cur.convolve(cur), levels.window(cur_count, shift)), cur_count)
    assert result is not None
    # (the total shift exactly: count times the float shift the cells were cut with)
    return _unshift(result, Fraction(step.count) * Fraction(shift)) if shift else result


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
    (:func:`pld.discretize.variance_weight`: what T steps' delta feels of
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
    scores = _merge_scores(model, h, k_lo, top, sorted(set(shifts)), var_weight)
    gains = {s: count * scores[s] - _unshift_loss(s, count, h, final_h) for s in scores}
    best = max(gains, key=lambda s: (gains[s], -abs(s)))
    return best if best != 0.0 and gains[best] > gains[0.0] else 0.0


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


def _final_spacing(levels: _Levels, h: float, count: int) -> float:
    """The spacing :meth:`_Levels.fit` lets the ``count``-step level reach
    (h doubled while twice it is allowed; the grid's size may stop it short)."""
    allowed = min(math.sqrt(4.0 * count * levels.per_step_bias / levels.levels),
                  math.sqrt(count) * levels.sd1 / 50.0)
    out = h
    while 2.0 * out <= allowed:
        out *= 2.0
    return out


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
    discretised with them, :func:`pld.discretize.discretize`).  A model with
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


def _power_start(step: _Step, base: GridPLD, h: float, levels: _Levels, pessimistic: bool,
                 precision: str = "double", loss_shift: float = 0.0, final_h: float | None = None):
    """The early levels by one FFT power: ``(result, result_count, cur,
    cur_count, remaining)`` for the squaring loop, or None (squaring from one step).

    A transform no longer than squaring the first step would use is always a
    gain.  When no power fits that, one up to twice the level it computes is
    tried (squaring from one step would have to hold that level too, on the
    first spacing).  Allowing the second bound from the start would take one
    huge power at very long runs, slower and larger than a smaller jump and
    re-gridded squarings.
    """
    count = step.count
    # extended precision: every transform that holds its aliasing to its own
    # round-off first, then (rather than squaring from one step, with the
    # double round-off of every level) the double path's allowance
    for loose, generous in ([(False, False), (False, True), (True, False), (True, True)]
                            if precision == "extended" else [(False, False), (False, True)]):
        shift = _power_shift(count)
        while (count >> shift) >= 4:
            jump = count >> shift
            rem = count - (jump << shift)
            # With two squarings the remainder (< 4 steps) rides on a copy of
            # the level, jump + rem, and the sum is jump + rem + jump + 2 jump:
            # as many convolutions, and a law of a few steps is not re-gridded
            # in one go to the final spacing (which widened the bracket).
            # Further squarings (a transform that did not fit) keep it apart:
            # 2^s - 1 additions would cost more than s.
            folded = 0 < rem and shift <= 2
            first = jump + rem if folded else rem
            counts = (jump, first) if rem else (jump,)
            windows = tuple(_padded(levels.window(c, loss_shift), h) for c in counts)
            power_points = max(POWER_POINTS, _fft_size(2 * base.size))
            if generous:
                level = int((windows[0][1] - windows[0][0]) / h) + 1
                power_points = max(power_points, 2 * _fft_size(level))
            powered = self_compose_powers(base, counts, windows, min(power_points, 2 * MAX_GRID_POINTS),
                                          total=count, precision=precision, loose_aliasing=loose)
            if powered is not None:
                step.power_steps[pessimistic] = jump
                unshifted = False
                if loss_shift:
                    # a bulk shift (bulk_shift) comes off here, on the first
                    # spacing (the levels below are re-gridded to coarser
                    # ones), if what it loses there to the lattice, the jump
                    # level's rounding times its copies, is no more than
                    # what it would lose coming off the result, once, on the
                    # spacing the levels are expected to reach (sigma 0.311,
                    # q 8.5e-5, T 25320: a power of 395 steps copied 64
                    # times lost 43 h here; at sigma 0.33, q 7.7e-6,
                    # T 2.6e6 the result's spacing is far coarser)
                    copies = (count - (first if rem else 0)) // jump
                    lost = copies * _lattice_gap(jump * Fraction(loss_shift), h)
                    if rem:
                        lost += _lattice_gap(first * Fraction(loss_shift), h)
                    if lost <= _lattice_gap(count * Fraction(loss_shift), final_h or h):
                        powered = [_unshift(g, Fraction(c) * Fraction(loss_shift)) for g, c in zip(powered, counts)]
                        unshifted = True
                cur = levels.fit(powered[0], jump)
                result, result_count = (levels.fit(powered[1], first), first) if rem else (None, 0)
                return result, result_count, cur, jump, (1 << shift) - (1 if folded else 0), unshifted
            shift += 1
    return None


def _block_size(count: int, h: float, per_step_bias: float, coarsenings: int = BLOCK_COARSENINGS) -> int | None:
    """Steps per block of the block power (:func:`_block_power_start`), or None.

    Re-gridding a block of ``c`` steps from ``h`` to ``2^k h``
    (:meth:`GridPLD.coarsen`, ``k`` = ``coarsenings``) costs, once
    per block (``count / c`` times):

    * dominating side: a spread, which adds at most ``(2^k h)^2 / 4`` of loss
      variance (bounding the sum over its ``k`` levels);
    * dominated side: a merge, whose buckets sit on their grid points (the
      shares are balanced, :func:`pld.kernels.coarsen_dominated`), so that it
      loses its Jensen gap, the same order as the spread's.  (The earlier
      merge dropped a spacing for a fraction ``~(1 + 2 lam) h'`` of half of
      every odd point and needed blocks ``1 + 2 lam`` times longer: 10x on
      MNIST, too few blocks to pay.)

    That cost is held to :data:`BLOCK_BIAS_SHARE` of what the first
    discretisation adds, ``count`` times ``per_step_bias``:
    ``c >= (2^k h)^2 / (4 share bias)`` on either side.  Within ``[c, 2c)``,
    among the blocks that leave ``n - 1 = 4 j`` of the ``n`` whole blocks
    (the second power's level then squared twice, as the single power's: any
    other split costs convolutions of its own), the one that leaves the
    fewest steps over is taken.  None where fewer than
    :data:`BLOCK_MIN_BLOCKS` blocks would be composed, or no block in the
    range splits so.
    Accuracy only: every re-grid keeps the certificate.
    """
    if not per_step_bias > 0.0:
        return None
    reach = (2 ** coarsenings * h) ** 2 / 4.0
    c_min = max(2, math.ceil(reach / (BLOCK_BIAS_SHARE * per_step_bias)))
    if count // c_min < BLOCK_MIN_BLOCKS:
        return None
    fits = [c for c in range(c_min, 2 * c_min) if (count // c - 1) % 4 == 0]
    return min(fits, key=lambda c: (count % c, c)) if fits else None


def _block_power_start(step: _Step, base: GridPLD, h: float, levels: _Levels, pessimistic: bool):
    """The early levels by two FFT powers: ``(result, result_count, cur,
    cur_count, remaining)`` for the squaring loop, or None.

    The single power (:func:`_power_start`) holds a level of thousands of
    steps on the first spacing, where it spans tens of thousands of points
    (its window is the tilted law's reach, far wider than its bulk), or, where
    that does not fit one transform, composes fewer steps and leaves more
    levels to squaring.  Here one power composes a block of ``c`` steps
    (:func:`_block_size`) on the first spacing, the block is re-gridded
    :data:`BLOCK_COARSENINGS` times (evolving discretisation: a spread or a
    merge, so the certificate holds, :meth:`GridPLD.coarsen`), and a second
    power composes blocks on the coarser spacing.  With ``count = n c + r``:
    the same first transform gives a longer block of ``c + r`` steps,
    re-gridded alike (once, not ``n`` times: the ``r`` steps over never meet
    a coarser grid in one go, which on a spiky law of a few records cost up
    to a quarter of the bracket); the second power gives ``B^j`` and ``B^(j +
    e)`` for ``n - 1 = 4 j + e``, the longer block is convolved into the
    latter, and the squaring loop adds ``B^j`` and its square as it does the
    single power's level.  Both powers certify their aliasing and round-off
    (:mod:`pld._power`).  Measured per dominating side (one thread): sigma
    1.1, q 0.00427, T 14063: 6.4 -> 4.5 ms; sigma 0.7, q 5e-4, T 2e5: 39 ->
    19 ms; sigma 2, q 1e-3, T 1e6: 8.1 -> 5.4 ms; brackets within 2% of
    their width.  Only where the first step's grid holds at least
    :data:`BLOCK_MIN_POINTS` points (below, the single power's transform is
    short and a second one only adds its fixed costs) and
    :func:`_block_pays`.
    """
    count = step.count
    if base.size < BLOCK_MIN_POINTS or getattr(step.model, "bounded_above", False) or getattr(
            step.model, "bounded_below", False):
        # (nor for the big-jump terms' laws, cut at a loss (pld._big_jumps):
        # their densest part sits at the cut, which a block's re-grid blurs:
        # sigma 0.439, q 1.8e-5, T 1.6e6 took a worse refinement path and
        # ended at 2.1x its target, 0.65x without)
        return None
    coarsenings = BLOCK_COARSENINGS
    c = _block_size(count, h, levels.per_step_bias, coarsenings)
    if c is None:
        return None
    blocks, r = divmod(count, c)
    jump = (blocks - 1) >> 2
    if not _block_pays(levels, count, c, r, jump, h, coarsenings):
        return None
    counts = (c, c + r) if r else (c,)
    windows = tuple(_padded(levels.window(k), h) for k in counts)
    powered = self_compose_powers(base, counts, windows, max(POWER_POINTS, _fft_size(2 * base.size)),
                                  total=count)
    if powered is None:
        return None
    for _ in range(coarsenings):
        powered = [g.coarsen() for g in powered]
    block, longer = powered[0], powered[-1]
    rem = blocks - 1 - (jump << 2)
    counts_b = (jump, jump + rem) if rem else (jump,)
    windows_b = tuple(_padded(levels.window(k * c), block.h) for k in counts_b)
    out = self_compose_powers(block, counts_b, windows_b, max(POWER_POINTS, _fft_size(2 * block.size)),
                              total=count)
    if out is None:
        return None
    step.power_steps[pessimistic] = jump * c
    cur = levels.fit(out[0], jump * c)
    if not rem:
        # (the loop adds the 4 J blocks to the longer one)
        return longer, c + r, cur, jump * c, 4
    result_count = (jump + rem) * c + c + r
    result = levels.fit(_truncate(out[1].convolve(longer), levels.window(result_count)), result_count)
    # (the loop adds J and 2 J blocks)
    return result, result_count, cur, jump * c, 3


def _block_pays(levels: _Levels, count: int, c: int, r: int, jump: int, h: float, coarsenings: int) -> bool:
    """Whether the block power's two transforms are predicted to cost less
    than the single power's one (window points as the cost: the transforms
    are about as long as the windows they hold).

    The single power holds the ``count >> 2``-step level on the first spacing;
    above :data:`POWER_POINTS` it does not fit and composes fewer steps, with
    more squarings, where the block power always gained.  Below, the block
    power's first level (``c + r`` steps on the first spacing) and second
    (``jump`` blocks on the coarser one) must hold fewer points than the
    single level: at most 0.6 of them where the single power's count is a
    multiple of 4 (no remainder: one convolution fewer than the block
    power's), all of them otherwise.  Measured (per dominating side, one
    thread, 24 random DP-SGD settings with T >= 5000 and MNIST, sigma 0.7 /
    T 2e5, sigma 2 / T 1e6): it kept every setting where the block power was
    over 10% faster (down to 0.53x) but one, and every one it declined was at
    most 10% faster or slower (up to 1.3x).
    """
    lo, hi = levels.window(count >> 2)
    single = (hi - lo) / h
    if single > POWER_POINTS:
        return True
    a_lo, a_hi = levels.window(c + r)
    b_lo, b_hi = levels.window(jump * c)
    blocked = (a_hi - a_lo) / h + (b_hi - b_lo) / (2 ** coarsenings * h)
    return blocked < (1.0 if count % 4 else 0.6) * single


def _power_shift(count: int) -> int:
    """Squarings after the FFT power: ``count = (count >> s) 2^s + r`` with
    the power computing ``count >> s`` steps (and ``r < 2^s``) from one
    transform, at the first late level (``8 c >= count``), where re-gridding
    may start.  An exact quotient rather than a power of two: 14040 steps are
    3510 x 4 (a power and two squarings), where the largest power of two,
    2048, would leave 1752 steps and six levels to add up."""
    return 2 if count >= 16 else 0


def _padded(window: tuple[float, float], h: float) -> tuple[float, float]:
    return window[0] - h, window[1] + h


def _fit(g: GridPLD) -> GridPLD:
    """Cap a final (multiplicity one) result at ``LEVEL_POINTS`` points."""
    while g.size > LEVEL_POINTS:
        g = g.coarsen()
    return g


def _same_grid(a: GridPLD, b: GridPLD) -> tuple[GridPLD, GridPLD]:
    while a.h < b.h * (1 - 1e-9):
        a = a.coarsen()
    while b.h < a.h * (1 - 1e-9):
        b = b.coarsen()
    if a.h != b.h:  # equal up to rounding of repeated doubling
        b = GridPLD(a.h, b.k0, b.p, b.lam, b.log_scale, b.inf_mass, b.err, b.pessimistic, b.log_mgf_bound,
                    b.rel_err)
    return a, b


def _truncate(g: GridPLD, window: tuple[float, float]) -> GridPLD:
    return g.truncate(*_padded(window, g.h))
