"""The numerical machinery behind one PLD: its laws, composer, planner and caches.

A PLD builds one :class:`Engine` on its first query.  The stages, in the order
a query flows through them: the explored loss laws (:mod:`pld.engine.laws`),
the planner that picks a grid for a question (:mod:`pld.engine.planner`), the
composer that builds certified grids (:mod:`pld.engine.composer`), all sharing
one cache (:mod:`pld.engine.cache`); :mod:`pld.engine.queries` reads answers
off the grids.
"""

from __future__ import annotations

from dataclasses import dataclass

from pld.engine.cache import EngineCache
from pld.engine.composer import Composer
from pld.engine.laws import Laws
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.planner import Planner


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
