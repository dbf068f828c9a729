"""Composition: from settings ``(h, lam, log_eta, precision)`` to certified grids.

For one direction and one :class:`pld.engine.targets.Settings` the composer

1. discretises every component onto the grid ``l = k h`` (connect-the-dots
   spread on the dominating side, centred merge on the dominated side,
   :mod:`pld.engine.discretize`), inside a first-step window sized by the tilted law,
2. self-composes each component: the early levels by one FFT power with
   certified aliasing (:mod:`pld.engine.power`; ``precision`` ``"extended"`` does
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

import math
import os
from dataclasses import dataclass, field

from pld.engine import heap as _heap
from pld.engine import windows as w
from pld.engine.cache import EngineCache, side_pool
from pld.engine.first_step import _log_step_shares, _prepare_step
from pld.engine.grid import GridPLD
from pld.engine.laws import Laws
from pld.engine.limits import LEVEL_POINTS, MAX_GRID_POINTS
from pld.engine.power import PRECISIONS
from pld.engine.self_compose import _fit, _same_grid, _self_compose, _truncate

#: a query whose leading direction's single-power level (``count >> 2``
#: steps) holds at most this many points starts no speculative builds of the
#: other directions (:meth:`Composer.parallel`): three threads then share two
#: cores and one GIL, and the leader's own two sides lose more than the probe
#: gains; beside a wider level the probe's transforms overlap enough
#: (benchmarks/RESULTS.md, "Bookkeeping compiled, and both sides on two cores")
PARALLEL_POINTS = 1 << 17

#: ... while the two sides of one materialisation go side by side from a
#: first step of this many cells: each side's time is then mostly its own
#: transforms, kernels and array passes, and a return from a nogil call
#: seldom waits long for the other side's Python.  Below (a randomized
#: response: 3 cells) a second thread costs more than the whole side.
SIDE_THREAD_CELLS = 1 << 10


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

    def __init__(self, laws: Laws, cache: EngineCache, max_points: int = MAX_GRID_POINTS) -> None:
        self.laws = laws
        self.cache = cache
        #: the largest grid this composition's materialisations may allocate
        self.max_points = max_points
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

        The positional arguments are a :class:`pld.engine.targets.Settings`
        (``materialize(d, *settings)``); ``precision`` is the FFT power's
        arithmetic (:data:`pld.engine.power.PRECISIONS`).  ``lower=False`` may leave
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
            return _compose_components(entry, h, lam, pessimistic, steps, log_eta, precision).ready_to_evaluate()

        # The two sides share only read-only inputs from here on; the FFTs and
        # numba kernels release the GIL, so on two cores they run side by side.
        pool = side_pool() if not serial and (_big_first_step(entry) or self.parallel(direction, h, lam, log_eta)) \
            else None
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
        if n_final > self.max_points:
            raise GridTooLargeError(
                f"value_discretization_interval = {h:g} needs {n_final} grid points for this query, above the "
                f"cap of {self.max_points}: pass a spacing of at least {h * n_final / self.max_points:.3g}, or "
                "none (pld then chooses the spacing per query)")
        comp = self.laws.exploration(direction)
        sizing = self.laws.sizing(direction, log_eta)
        prepared = [_prepare_step(mech.loss_model(direction), ex, count, h, lam, comp.steps(), log_eta,
                                  ex_sizing, len(comp.parts), self.max_points)
                    for (mech, count), (ex, _), (ex_sizing, _) in zip(self.laws.components, comp.parts, sizing.parts)]
        # (the discretised steps' laws beside the exact ones: see _window)
        held = [(step.ex_grid or ex, k) for step, (ex, k) in zip(prepared, sizing.parts)]
        entry = Materialized(prepared, _window(sizing.parts, held, lam, log_eta, h))
        entry.partial_windows = _partial_windows(sizing.parts, held, lam, log_eta, h, entry.final_window)
        return entry


def _big_first_step(entry: Materialized) -> bool:
    """Whether some component's first step holds :data:`SIDE_THREAD_CELLS` cells."""
    return any((step.k_hi - step.k_lo + 1 if step.points is None else step.points.size) >= SIDE_THREAD_CELLS
               for step in entry.prepared)


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


def _window(parts: list, held: list, lam: float, log_eta, h: float) -> tuple[float, float]:
    """The window of the composition of ``parts`` (exact laws) united with that of
    ``held`` (the laws the grids hold: each first step as discretised).

    A component whose per-step loss is small next to the spacing another one
    sets is spread by a cell per step, which widens its composed law (sigma
    5.34, q 8.1e-4, 50133 steps on h = 5.1e-4: 2.7x the exact variance); a
    window drawn from the exact law alone sent that law's tail to +inf when
    the first components were cut to their share of the final window, 1e-8
    of mass against a delta of 8e-12, and the upper end became the largest
    loss (the add direction of a schedule: [404.8, 11723]).  Within a
    component, the levels are sized from the discretised step for the same
    reason (:func:`pld.engine.first_step._level_window`).  Sizing only.
    """
    lo, hi = w.window(w.Composite(parts), lam, log_eta, h)
    lo_g, hi_g = w.window(w.Composite(held), lam, log_eta, h)
    return min(lo, lo_g), max(hi, hi_g)


def _partial_windows(parts: list, held: list, lam: float, log_eta, h: float,
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
    out = []
    for k in range(len(parts)):
        if k == len(parts) - 1:
            out.append(final)
            continue
        lo_r, hi_r = _window(parts[k + 1:], held[k + 1:], lam, log_eta, h)
        lo_o, hi_o = _window(parts[:k + 1], held[:k + 1], lam, log_eta, h)
        lo, hi = max(final[0] - hi_r, lo_o), min(final[1] - lo_r, hi_o)
        out.append((lo, hi) if lo < hi else (lo_o, hi_o))
    return out
