"""Side threads only where they pay (``pld.engine.composer.PARALLEL_POINTS``), and never change an answer.

A query whose single-power level is small (MNIST, tiny per-step losses) is all
fixed costs, which a second thread only slows: it builds both sides in the
calling thread and starts nothing in the background.  A long run on a wide
grid (sigma 0.7, q 5e-4, T 2e5) still builds its two sides side by side.  The
brackets are the same either way, to the bit.
"""

from __future__ import annotations

import threading

import pytest

import pld
from pld.engine import composer as C
from pld.engine.cache import side_pool, single_threaded

needs_two_cores = pytest.mark.skipif(side_pool() is None, reason="one core: no side threads at all")


def _threads_used(monkeypatch, sigma, q, steps, delta):
    """The threads that composed a side, and whether anything was speculated."""
    threads: set = set()
    speculated: list = []
    compose, speculate = C._compose_components, C.Composer.speculate

    def spy_compose(*a, **k):
        threads.add(threading.current_thread().name)
        return compose(*a, **k)

    def spy_speculate(self, *a, **k):
        speculated.append(a)
        return speculate(self, *a, **k)

    monkeypatch.setattr(C, "_compose_components", spy_compose)
    monkeypatch.setattr(C.Composer, "speculate", spy_speculate)
    bracket = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    return threads, speculated, bracket


@needs_two_cores
def test_a_small_query_stays_in_the_calling_thread(monkeypatch):
    threads, speculated, _ = _threads_used(monkeypatch, 1.1, 256 / 60000, 14063, 1e-5)
    assert threads == {threading.current_thread().name}
    assert speculated == []


@needs_two_cores
def test_a_wide_long_run_builds_its_sides_side_by_side(monkeypatch):
    threads, speculated, _ = _threads_used(monkeypatch, 0.7, 5e-4, 200_000, 1e-5)
    assert len(threads) >= 2
    assert speculated


@pytest.mark.parametrize("sigma, q, steps, delta", [
    (1.1, 256 / 60000, 14063, 1e-5),
    (0.7, 5e-4, 200_000, 1e-5),
])
def test_threads_never_change_the_bracket(sigma, q, steps, delta):
    default = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    with single_threaded():
        alone = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert default == alone
