"""The loss laws of a composition, explored once, for sizing its grids.

For each direction of the neighbouring relation (``remove``: P = D, Q = D';
``add``: the pair swapped) every component's loss model is explored
(:func:`pld.engine.windows.explore`: cell masses, moments, cumulant generating
function) and the components' laws are combined into a
:class:`pld.engine.windows.Composite`.  These laws decide tilts, windows and grid
sizes only; certification never depends on them (whatever a window leaves out
is bounded and moved to the safe side).
"""

from __future__ import annotations

import math
import threading

from pld.engine import windows as w
from pld.engine.cache import SMALL_ENTRIES, EngineCache, LRUStore, in_parallel
from pld.engine.outward import sum_bounds

DIRECTIONS = ("remove", "add")

#: explored laws shared by every PLD of this process, per (mechanism,
#: direction): a mechanism is an immutable description, and exploring it gives
#: the same law for every composition it is part of (an epoch table, a
#: calibration, a sweep over T), along with what the Exploration memoises
#: (psi values, truncated sizing laws, added variances)
_SHARED = LRUStore(SMALL_ENTRIES)
_SHARED_LOCK = threading.Lock()


def _shared(key, make):
    """``make()``, remembered process-wide under ``key`` (a key that cannot be
    hashed, a mechanism holding arrays, is not remembered)."""
    try:
        with _SHARED_LOCK:
            hit = _SHARED.get(key)
    except TypeError:
        return make()
    if hit is None:
        hit = make()  # (outside the lock: two threads may both explore; either result is the same)
        with _SHARED_LOCK:
            _SHARED.put(key, hit)
    return hit


class Laws:
    """Explored loss laws of ``components`` (``((mechanism, count), ...)``)."""

    def __init__(self, components: tuple, cache: EngineCache) -> None:
        self.components = components
        self.cache = cache
        # a pair whose two directions have the same loss law needs only one
        self.directions: tuple[str, ...] = (
            ("remove",) if all(m.symmetric for m, _ in components) else DIRECTIONS)

    def exploration(self, direction: str) -> w.Composite:
        """The exact composed law of one direction (every component explored)."""
        with self.cache.lock:
            c = self.cache.laws.get(direction)
            if c is None:
                c = w.Composite([(_shared((type(m), m, direction), lambda m=m: w.explore(m.loss_model(direction))), k)
                                 for m, k in self.components])
                self.cache.laws.put(direction, c)
            return c

    def sizing(self, direction: str, log_eta) -> w.Composite:
        """The law the grids hold, for sizing them (tilts, windows, point counts).

        Each step's mass above where its untilted upper tail is within
        ``e^log_eta_up / T`` goes to +inf at the first step (see
        :func:`pld.engine.windows.step_window`), so the composed grids never hold
        it; :func:`pld.engine.windows.truncated_above` leaves it out.  The exact
        law (:meth:`exploration`) still discretises every step.
        """
        comp = self.exploration(direction)
        up = log_eta[1] if isinstance(log_eta, tuple) else log_eta
        budget = up - math.log(max(comp.steps(), 1))
        key = (direction, budget)
        with self.cache.lock:
            hit = self.cache.laws.get(key)
            if hit is None:
                hit = w.Composite([(w.truncated_above(ex, budget), k) for ex, k in comp.parts])
                self.cache.laws.put(key, hit)
            return hit

    def largest_loss(self, direction: str) -> float:
        """Sum of the components' largest losses in one direction, rounded up
        (``inf``: unbounded, or a mass at +inf): delta is exactly 0 from there."""
        return self.largest_loss_bounds(direction)[1]

    def largest_loss_bounds(self, direction: str) -> tuple[float, float]:
        """``(lo, hi)`` around the sum of the components' largest losses in one
        direction, summed exactly and rounded outward (:func:`pld.engine.outward.sum_bounds`)."""
        def compute() -> tuple[float, float]:
            # (components whose laws are costly to build, such as a k-of-t round's block rounds
            # of two lengths, are built side by side first: the same laws, built once)
            # (each distinct one once: two threads building the same laws would both build them)
            costly = dict.fromkeys(m for m, _ in self.components if hasattr(m, "build_laws"))
            if len(costly) > 1:
                in_parallel(*(m.build_laws for m in costly))
            return sum_bounds((k, *m.loss_model(direction).sup_loss_bounds()) for m, k in self.components)
        return self.cache.scalar(("largest", direction), compute)
