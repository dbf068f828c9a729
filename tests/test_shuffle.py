"""Shuffling (issue 38): the number to publish and the best certified lower bound.

Truths outside pld: the Gaussian mechanism's closed form (tests/oracles.py) for the upper
end, and for the lower end the max-of-epoch pair of Chua et al. integrated by quadrature
(scipy only), which pld's sliced pair (a post-processing of it) may not exceed and should
come close to; their own cube-set bound (a coarser post-processing, their code's formula)
lies below it.  A shuffled run of one batch per epoch is the Gaussian mechanism itself:
there both ends must meet.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import optimize, stats

import pld
from pld.accounting.shuffle import max_of_epoch_pair, shuffle_bounds
from pld.mechanisms.allocation import RandomAllocation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracles as O  # noqa: E402
from test_cli import call  # noqa: E402

DELTA = 1e-5

# the upper end is the Gaussian mechanism answered from its closed form, as outside the tests
pytestmark = pytest.mark.closed_forms


def _log_cdf(c, sigma: float, t: int, mu: float):
    """log P(max_j y_j <= c) when one of t coordinates is N(mu, s^2) and the others N(0, s^2)."""
    return stats.norm.logcdf((c - mu) / sigma) + (t - 1) * stats.norm.logcdf(c / sigma)


def _log_density(c, sigma: float, t: int, mu: float):
    """log of its density: d/dc Phi((c - mu)/s) Phi(c/s)^(t-1)."""
    a, b = (c - mu) / sigma, c / sigma
    return np.logaddexp(stats.norm.logpdf(a) + (t - 1) * stats.norm.logcdf(b),
                        math.log(max(t - 1, 1e-300)) + stats.norm.logcdf(a) + (t - 2) * stats.norm.logcdf(b)
                        + stats.norm.logpdf(b)) - math.log(sigma)


def _max_pair_epsilon(sigma: float, t: int, delta: float, hi: float = 2.0, lo: float = 1.0) -> float:
    """Epsilon of the (unsliced) max-of-epoch pair of one epoch, both directions.

    Its privacy loss log f_hi(c) / f_lo(c) increases with c (checked on a grid here), so
    the optimal test of each direction is a threshold c*: delta_remove(eps) = S_hi(c*) -
    e^eps S_lo(c*) with loss(c*) = eps, delta_add(eps) = F_lo(c*) - e^eps F_hi(c*) with
    loss(c*) = -eps (S = 1 - F, from the closed-form CDF of the maximum)."""
    def loss(c):
        return _log_density(c, sigma, t, hi) - _log_density(c, sigma, t, lo)

    grid = np.linspace(-8 * sigma, hi + 12 * sigma, 20001)
    assert np.all(np.diff(loss(grid)) > 0), "the max-of-epoch pair's loss is not monotone here"
    a, b = grid[0], grid[-1]

    def sf(c, mu):
        return -math.expm1(_log_cdf(c, sigma, t, mu))

    def cdf(c, mu):
        return math.exp(_log_cdf(c, sigma, t, mu))

    def remove(eps):
        if eps >= loss(b):
            return sf(b, hi) - math.exp(eps) * sf(b, lo)
        c = optimize.brentq(lambda x: loss(x) - eps, a, b, xtol=1e-13)
        return sf(c, hi) - math.exp(eps) * sf(c, lo)

    def add(eps):
        if -eps <= loss(a):
            return 0.0
        c = optimize.brentq(lambda x: loss(x) + eps, a, b, xtol=1e-13)
        return cdf(c, lo) - math.exp(eps) * cdf(c, hi)

    out = 0.0
    for direction in (remove, add):
        if direction(0.0) <= delta:
            continue
        top = 1.0
        while direction(top) > delta:
            top *= 2
        out = max(out, optimize.brentq(lambda e, f=direction: f(e) - delta, 0.0, top, xtol=1e-12))
    return out


def _cube_epsilon(sigma: float, t: int, delta: float) -> float:
    """Chua et al.'s cube-set bound: max over thresholds C of P(max > C) - e^eps Q(max > C)."""
    caps = np.arange(-5.0, 15.0, 0.001)
    up = -np.expm1(stats.norm.logcdf((caps - 2) / sigma) + (t - 1) * stats.norm.logcdf(caps / sigma))
    low = -np.expm1(stats.norm.logcdf((caps - 1) / sigma) + (t - 1) * stats.norm.logcdf(caps / sigma))
    return optimize.brentq(lambda e: np.max(up - np.exp(e) * low) - delta, 0.0, 60.0, xtol=1e-10)


@pytest.mark.parametrize("sigma, t", [(1.0, 10), (0.7, 50), (2.0, 4)])
def test_max_of_epoch_lower_end_is_a_post_processing_of_the_pair(sigma, t):
    b = shuffle_bounds(sigma, steps=t, steps_per_epoch=t, delta=DELTA, alternatives=False, random_allocation=False)
    (c,) = b.constructions
    exact = _max_pair_epsilon(sigma, t, DELTA)
    assert c.epsilon_lower <= exact * (1 + 1e-7)          # below the pair it post-processes
    assert c.epsilon_lower >= exact * (1 - 2e-3)          # and close: slices lose little
    # the threshold tests are coarser; the engine's lower end lies within its bracket target below its pair's
    assert c.epsilon_lower >= _cube_epsilon(sigma, t, DELTA) * (1 - 2e-4)
    assert c.epsilon_lower <= b.epsilon_upper


def test_sliced_masses_carry_a_small_error_bound():
    pair, eta = max_of_epoch_pair(1.0, 98)
    assert 0 < eta < 1e-9
    assert abs(sum(pair.p) - 1) < 1e-12 and abs(sum(pair.q) - 1) < 1e-12 and len(pair.p) > 1000
    # the record's law puts more mass on large maxima: the pair's losses increase along the slices
    loss = np.log(pair.p) - np.log(pair.q)
    assert np.all(np.diff(loss[1:-1]) > 0)


def test_one_batch_per_epoch_is_the_gaussian_mechanism_and_both_ends_meet():
    b = shuffle_bounds(2.0, steps=10, steps_per_epoch=1, delta=DELTA, alternatives=False)
    exact = O.gaussian_epsilon(DELTA, math.sqrt(10) / 2.0)
    assert b.epsilon_lower <= exact <= b.epsilon_upper
    assert b.epsilon_upper - b.epsilon_lower <= 1e-3 * exact


def test_cifar_shuffle_bounds():
    """sigma 1, 50000 records in batches of 512 (98 a epoch, the last of 336), 100 epochs: the
    upper end is the Gaussian mechanism at mu = 10 (no amplification), the lower end at least
    random allocation's 1-of-98 bound (here: the max-of-epoch pair binds, far above it)."""
    b = shuffle_bounds(1.0, dataset_size=50000, batch_size=512, epochs=100, delta=DELTA)
    exact = O.gaussian_epsilon(DELTA, 10.0)
    assert exact <= b.epsilon_upper <= exact * (1 + 1e-9) + 1e-9
    assert (b.steps_per_epoch, b.steps, b.epochs, b.whole_epochs) == (98, 9800, 100, 100)
    ra = RandomAllocation(pld.Gaussian(1.0), 98).pld().self_compose(100).epsilon_bounds(DELTA, rtol=1e-3)
    assert b.epsilon_lower >= ra[0]
    assert b.binding == "max of an epoch (Chua et al.)" and 30.8 < b.epsilon_lower < 31
    names = [c.name for c in b.constructions]
    assert names == ["max of an epoch (Chua et al.)", "random allocation 1-of-98"]
    alt = b.alternatives
    bnb = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=100, sampling="balls_in_bins").epsilon(DELTA)
    assert alt["balls_in_bins"]["epsilon_upper"] == pytest.approx(bnb, rel=1e-9)  # what its own report gives
    assert alt["poisson"]["sampling_rate"] == 512 / 50000 and alt["poisson"]["steps"] == 9800


def test_random_allocation_binds_at_large_noise():
    b = shuffle_bounds(4.0, steps_per_epoch=100, epochs=50, delta=DELTA, alternatives=False)
    assert b.binding == "random allocation 1-of-100"
    assert b.epsilon_lower == max(c.epsilon_lower for c in b.constructions)


def test_drop_last_mixes_in_the_epochs_a_record_sits_out():
    b = shuffle_bounds(1.0, dataset_size=1030, batch_size=100, drop_last=True, epochs=5, delta=DELTA,
                       alternatives=False)
    assert b.steps_per_epoch == 10 and b.steps == 50
    assert [c.name for c in b.constructions] == ["max of an epoch (Chua et al.)", "max of an epoch, zero others"]
    assert "with probability 1000/1030" in b.constructions[0].pair
    assert 0 < b.epsilon_lower <= b.epsilon_upper
    full = shuffle_bounds(1.0, steps_per_epoch=10, epochs=5, delta=DELTA, alternatives=False, random_allocation=False)
    assert b.epsilon_lower <= full.epsilon_lower  # sitting out is a chance of no signal: never stronger


def test_partial_epochs_count_whole_above_and_not_at_all_below():
    b = shuffle_bounds(1.0, steps=25, steps_per_epoch=10, delta=DELTA, alternatives=False, random_allocation=False)
    assert (b.epochs, b.whole_epochs) == (3, 2)
    assert b.epsilon_upper == pytest.approx(O.gaussian_epsilon(DELTA, math.sqrt(3)), rel=1e-9)
    two = shuffle_bounds(1.0, steps=20, steps_per_epoch=10, delta=DELTA, alternatives=False, random_allocation=False)
    assert b.epsilon_lower == two.epsilon_lower


def test_the_shuffling_report_leads_with_the_number_to_publish(capsys):
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-n", "50000", "-b", "512", "--epochs", "100",
                          "--sampling", "shuffle")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("(91.8173, 1e-05)-DP: certified epsilon in [30.8")
    flat = " ".join(out.split())
    assert "publish 91.8173, the certified upper end: no amplification by shuffling" in flat
    assert "No analysis can give less than 30.8" in flat and "max of an epoch (Chua et al.) binds" in flat
    assert "random allocation 1-of-98: 6.11" in flat
    assert "instead no tight analysis of shuffling is known" in flat
    assert "--sampling balls_in_bins) gives 6.1162" in flat and "(--sampling poisson) 6.2889" in flat
    assert "TargetMissed" not in err and "wider than its target" not in err
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-n", "50000", "-b", "512", "--epochs", "100",
                          "--sampling", "shuffle", "--json")
    res = json.loads(out)
    assert res["shuffle"]["binding"] == "max of an epoch (Chua et al.)"
    assert res["epsilon_upper"] == res["shuffle"]["epsilon_upper"]
    assert set(res["shuffle"]["alternatives"]) == {"poisson", "balls_in_bins"}


def test_one_batch_per_epoch_is_the_gaussian_at_both_ends():
    """A full batch (one step per epoch): shuffling is the Gaussian mechanism, both ends equal it
    (the lower end's 1-of-1 allocation was refused below sigma 0.55)."""
    b = pld.shuffle_bounds(0.5, dataset_size=1000, batch_size=1000, epochs=100, delta=1e-5)
    g_lo, g_hi = pld.Gaussian(0.5).pld().self_compose(100).epsilon_bounds(1e-5)
    assert b.epsilon_upper == g_hi and g_lo <= b.epsilon_lower <= g_hi
    assert b.binding.startswith("random allocation 1-of-1")
