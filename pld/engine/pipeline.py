"""The numerical machinery behind one PLD: its laws, composer, planner and caches.

A PLD builds one :class:`Engine` on its first query.  The stages, in the order
a query flows through them: the explored loss laws (:mod:`pld.engine.laws`),
the planner that picks a grid for a question (:mod:`pld.engine.planner`), the
composer that builds certified grids (:mod:`pld.engine.composer`), all sharing
one cache (:mod:`pld.engine.cache`); :mod:`pld.engine.queries` reads answers
off the grids, and :class:`GridPair` hands one direction's grids to a caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pld.engine.cache import EngineCache
from pld.engine.composer import Composer
from pld.engine.grid import GridPLD
from pld.engine.laws import Laws
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.planner import Planner
from pld.engine.targets import Settings


@dataclass(frozen=True, eq=False)
class Engine:
    """The numerical machinery behind one PLD, built on its first query."""

    laws: Laws
    composer: Composer
    planner: Planner
    cache: EngineCache

    @classmethod
    def build(cls, components: tuple, h_fixed: float | None, max_points: int = MAX_GRID_POINTS) -> Engine:
        """``max_points``: the grid cap of this engine (:data:`pld.engine.limits.MAX_GRID_POINTS`)."""
        cache = EngineCache()
        laws = Laws(components, cache)
        composer = Composer(laws, cache, max_points)
        return cls(laws, composer, Planner(laws, composer, cache, h_fixed), cache)

    @property
    def directions(self) -> tuple[str, ...]:
        return self.laws.directions


@dataclass(frozen=True)
class GridPair:
    """One direction's certified grids behind an answer (read-only).

    ``dominating`` bounds delta from above at every epsilon (its error bound
    and mass at +inf included), ``dominated`` from below; ``settings`` are the
    spacing, tilt, truncation budget and FFT power precision they were built
    with, and ``power_steps`` the steps each component composed by one FFT power.
    """

    direction: str
    settings: Settings
    dominating: GridPLD
    dominated: GridPLD
    power_steps: tuple[int, ...]

    def delta_bounds(self, epsilons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` on this direction's delta at ``epsilons`` (an array of reals), each
        in ``[0, 1]``: the dominated grid's certified evaluator below, the dominating grid's above
        (:meth:`pld.engine.grid.GridPLD.delta`, its round-off bound included)."""
        eps = np.asarray(epsilons, dtype=np.float64)

        def at(g: GridPLD) -> np.ndarray:
            return np.clip(np.asarray(g.delta(eps.ravel())).reshape(eps.shape), 0.0, 1.0)

        return at(self.dominated), at(self.dominating)
