"""Delta queries: a direction that does not bind is settled on its coarse probe grid
(pld.engine.delta_queries._probe_below), as an epsilon query's is, so that a delta query costs about
what the matching epsilon query does; the brackets are those of the fully tuned path.

References: the same queries with the probe turned off (every direction tuned on its own grids),
and the single-step subsampled Gaussian's delta by quadrature (tests/oracles.py) in both
directions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import pld
from pld.engine import delta_queries as _queries

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles  # noqa: E402


def _delta_bounds(monkeypatch, build, eps, probe: bool):
    calls = []
    real = _queries._probe_below

    def spy(*args, **kwargs):
        out = real(*args, **kwargs) if probe else None
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_queries, "_probe_below", spy)
    lo, hi = build().delta_bounds(eps)
    monkeypatch.setattr(_queries, "_probe_below", real)
    return np.atleast_1d(lo), np.atleast_1d(hi), calls


@pytest.mark.parametrize("build, eps", [
    (lambda: pld.dpsgd(1.1, 256 / 60000, 14063), 2.3817),
    (lambda: pld.dpsgd(1.1, 256 / 60000, 14063), np.array([0.5, 1.0, 2.3817, 4.0])),
    (lambda: pld.dpsgd(2.0, 1e-3, 10**6), 2.42),
    (lambda: pld.dpsgd(0.7, 5e-4, 2 * 10**5), np.array([1.0, 2.4386])),
    (lambda: pld.dpsgd_schedule([(8.0, 0.004, 10), (1.2, 0.01, 5000)]), 1.5),
])
def test_a_direction_that_does_not_bind_is_settled_on_its_probe_grid(monkeypatch, build, eps):
    lo, hi, calls = _delta_bounds(monkeypatch, build, eps, probe=True)
    assert any(calls)  # (the add direction, below the remove one, settled on the probe grid)
    lo_full, hi_full, _ = _delta_bounds(monkeypatch, build, eps, probe=False)
    np.testing.assert_array_equal(lo, lo_full)
    assert np.all(hi <= hi_full)
    assert np.all(lo <= hi)


@pytest.mark.parametrize("sigma, q, eps", [(1.0, 0.1, 0.5), (0.8, 0.3, 1.0), (2.0, 0.01, 0.05)])
def test_single_step_delta_brackets_the_quadrature(sigma, q, eps):
    """One step of the Poisson-subsampled Gaussian: delta is the larger direction's, each
    computed by quadrature independently of the engine."""
    truth = max(oracles.subsampled_gaussian_delta_single(eps, sigma, q, "remove"),
                oracles.subsampled_gaussian_delta_single(eps, sigma, q, "add"))
    lo, hi = pld.dpsgd(sigma, q, 1).delta_bounds(eps)
    assert lo <= truth * (1 + 1e-9) and truth <= hi * (1 + 1e-9)
    assert hi - lo <= 1e-3 * truth + 1e-9


@pytest.mark.parametrize("build, eps", [
    (lambda: pld.dpsgd(2.384, 0.00058, 310000), 8.44),
    (lambda: pld.dpsgd(4.75, 1.5e-05, 3000), 0.0106),
    (lambda: pld.dpsgd_schedule([(5.451, 0.00073, 3), (3.33, 0.00061, 240000)]),
     np.array([4.39, 0.124, 20.1, 0.285])),
])
def test_a_direction_whose_probe_reaches_the_others_is_tuned_as_before(monkeypatch, build, eps):
    """Where the probe grid's upper delta reaches the lower ends found (here delta is ~1e-70 or
    exactly 0 at some points, so any upper end does), the direction is tuned on its own grids:
    the brackets are the fully tuned path's, bit for bit (taking the probe's upper end there
    raised them)."""
    lo, hi, _ = _delta_bounds(monkeypatch, build, eps, probe=True)
    lo_full, hi_full, _ = _delta_bounds(monkeypatch, build, eps, probe=False)
    np.testing.assert_array_equal(lo, lo_full)
    np.testing.assert_array_equal(hi, hi_full)


@pytest.mark.parametrize("build, eps", [
    (lambda: pld.dpsgd(1.0, 0.01, 1000), 1e4),
    (lambda: pld.PoissonSampled(pld.Gaussian(1.21, sensitivity=2.0), 0.0306).pld().self_compose(200_000),
     np.array([2e3, 1e6])),
])
def test_every_point_beyond_the_grids_is_read_from_the_far_grid_alone(monkeypatch, build, eps):
    """Where every epsilon lies beyond what grids can be tuned at and no mass sits at
    +inf, delta is (0, the far grid's truncation) and no grid is tuned at epsilon 0
    for them (one was: 1.9e6 points, 13.7 s, for sigma 1.21, q 0.0306, T 1.2e6 at
    epsilon 8769); where mass sits at +inf, that grid still gives its lower end."""
    run = build()
    asked = []
    real = _queries.delta_query

    def spy(engine, epsilon):
        asked.append(epsilon)
        return real(engine, epsilon)

    monkeypatch.setattr(_queries, "delta_query", spy)
    lo, hi = run.delta_bounds(eps)
    assert 0.0 not in asked
    assert np.all(np.atleast_1d(lo) == 0.0) and np.all(np.atleast_1d(hi) <= 1e-30)
    asked.clear()
    lo, hi = pld.ApproxDP(1.0, 1e-3).pld().self_compose(40).delta_bounds(1e200)
    inf_mass = 1.0 - (1.0 - 1e-3) ** 40
    assert asked == [0.0] and lo <= inf_mass * (1 + 1e-12) <= hi * (1 + 2e-12) and hi - lo <= 1e-9
