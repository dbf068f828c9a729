"""Curves read off a PLD (pld.baselines.curves): RDP, privacy-loss tail, f-DP trade-off.

References are closed forms (Gaussian) and the RDP accountant (subsampled
Gaussian).  PLDs are built once per module: the engine caches its grids, so
every later query on the same object is cheap.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pld
from pld.baselines import curves, exact, rdp

SIGMA, STEPS, DELTA = 8.0, 120, 1e-6
MU = math.sqrt(STEPS) / SIGMA

DPSGD_CASES = [  # (noise multiplier, sampling rate, steps); delta = 1e-5
    (1.0, 0.01, 1000),
    (1.1, 256 / 60000, 1000),
    (1.3, 0.0025, 6000),
]
DPSGD_DELTA = 1e-5
_dpsgd_cache: dict = {}


@pytest.fixture(scope="module")
def gauss():
    return pld.Gaussian(SIGMA).pld().self_compose(STEPS)


def _dpsgd(case):
    if case not in _dpsgd_cache:
        p = pld.dpsgd(*case)
        _dpsgd_cache[case] = (p, p.epsilon_bounds(DPSGD_DELTA))
    return _dpsgd_cache[case]


# --------------------------------------------------------------- delta curve
def test_delta_curve_brackets_exact_gaussian(gauss):
    eps = np.linspace(-1.0, 10.0, 221)
    lo, hi = curves.delta_curve(gauss, eps, delta=DELTA)
    ex = exact.gaussian_delta(eps, MU)
    assert np.all(lo <= ex) and np.all(ex <= hi)
    near = (eps > 5.0) & (eps < 8.0)
    assert np.max((hi - lo)[near] / ex[near]) < 2e-3
    assert np.all(np.diff(hi) <= 0) and np.all(np.diff(lo) <= 0)


def test_delta_curve_agrees_with_engine_bracket(gauss):
    eps = np.array([6.0, 7.0])
    lo, hi = curves.delta_curve(gauss, eps, delta=DELTA)
    elo, ehi = gauss.delta_bounds(eps)
    assert np.all(np.maximum(lo, elo) <= np.minimum(hi, ehi))  # the brackets overlap


# ----------------------------------------------------------------------- RDP
def test_rdp_from_pld_brackets_gaussian_closed_form(gauss):
    orders = np.array([1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 16.0])
    lo, hi = curves.rdp_from_pld(gauss, orders, delta=DELTA)
    closed = orders * STEPS / (2 * SIGMA ** 2)  # alpha T / (2 sigma^2)
    assert np.all(lo <= closed) and np.all(closed <= hi)
    # tight where the grid window holds the tilted law (orders up to the RDP-optimal ~5)
    assert np.all(lo[:5] >= closed[:5] * (1 - 3e-4))


def test_rdp_upper_is_infinite_when_the_grid_has_infinity_mass(gauss):
    lo, hi, info = curves.rdp_from_pld(gauss, 2.0, delta=DELTA, details=True)
    assert info["directions"]["remove"]["infinity_mass_upper"] > 0
    assert hi == math.inf and 0 < lo <= 2 * STEPS / (2 * SIGMA ** 2)


@pytest.mark.parametrize("case", DPSGD_CASES)
def test_rdp_from_pld_brackets_subsampled_gaussian(case):
    p, _ = _dpsgd(case)
    sigma, q, steps = case
    orders = np.array([1.5, 2.0, 4.0, 8.0, 32.0])
    lo, hi = curves.rdp_from_pld(p, orders, delta=DPSGD_DELTA)
    ref = rdp.rdp_subsampled_gaussian(orders, sigma, q) * steps
    assert np.all(lo <= ref * (1 + 1e-9)) and np.all(ref <= hi)
    assert np.all(lo[:3] >= ref[:3] * (1 - 1e-3))


def test_rdp_from_pld_rejects_bad_orders(gauss):
    for bad in (1.0, [2.0, 0.5], np.inf):
        with pytest.raises(ValueError):
            curves.rdp_from_pld(gauss, bad)


# ---------------------------------------------------------------------- tail
def test_tail_epsilon_gaussian_brackets_closed_form(gauss):
    lo, hi = curves.tail_epsilon(gauss, DELTA)
    ref = exact.privacy_loss_tail_epsilon_gaussian(DELTA, MU)  # 7.4464
    assert lo <= ref <= hi
    assert hi - lo < 0.05
    assert round(ref, 2) == 7.45


def test_tail_delta_gaussian_brackets_closed_form(gauss):
    eps = np.linspace(4.0, 9.0, 41)
    lo, hi = curves.tail_delta(gauss, eps, delta=DELTA)
    ref = exact.privacy_loss_tail_delta_gaussian(eps, MU)
    assert np.all(lo <= ref) and np.all(ref <= hi)
    assert np.all(hi / ref < 1.1) and np.all(lo / ref > 0.9)
    lo6, hi6 = curves.tail_delta(gauss, 6.0, delta=DELTA)
    assert lo6 <= 1.0902652e-4 <= hi6


def test_grid_tail_is_not_a_bound(gauss):
    """Why tail_epsilon does not just read the grids: domination does not order tails."""
    eps = np.linspace(5.0, 8.0, 601)
    ref = exact.privacy_loss_tail_delta_gaussian(eps, MU)
    losses, masses, inf_mass = gauss.distribution("remove", "upper", delta=DELTA)
    suffix = np.concatenate((np.cumsum(masses[::-1])[::-1], [0.0]))
    grid_tail = suffix[np.searchsorted(losses, eps, side="right")] + inf_mass
    assert np.any(grid_tail < ref)  # the dominating grid's tail undershoots the true tail
    assert np.any(grid_tail > ref)


@pytest.mark.parametrize("case", DPSGD_CASES)
def test_tail_epsilon_dpsgd_is_above_epsilon(case):
    p, (e_lo, e_hi) = _dpsgd(case)
    t_lo, t_hi, info = curves.tail_epsilon(p, DPSGD_DELTA, details=True)
    assert t_lo <= t_hi < math.inf
    assert t_hi >= e_lo  # delta(eps) <= P(L > eps): the tail epsilon is never below epsilon
    assert t_hi - t_lo < 0.02 * t_hi
    assert set(info["directions"]) == {"remove", "add"}


# ------------------------------------------------------------ RDP vs PLD order
@pytest.mark.parametrize("case", DPSGD_CASES)
def test_pld_below_rdp_improved_below_classic(case):
    p, (e_lo, e_hi) = _dpsgd(case)
    improved, _ = rdp.dpsgd_rdp_epsilon(*case, DPSGD_DELTA, "improved")
    classic, _ = rdp.dpsgd_rdp_epsilon(*case, DPSGD_DELTA, "classic")
    assert e_lo <= e_hi <= improved <= classic


def test_dpsgd_reference_numbers():
    _, (lo, hi) = _dpsgd((1.0, 0.01, 1000))
    assert abs(lo - 1.8282) < 2e-4 and abs(hi - 1.8282) < 2e-4  # DESIGN.md: eps ~ 1.8282
    _, (lo, hi) = _dpsgd((1.3, 0.0025, 6000))
    assert round(hi, 3) == 0.640
    assert round(rdp.dpsgd_rdp_epsilon(1.3, 0.0025, 6000, DPSGD_DELTA, "improved")[0], 3) == 0.724


# ------------------------------------------------------------------ trade-off
ALPHAS = np.concatenate(([0.0], np.geomspace(1e-8, 1e-2, 13), np.linspace(0.02, 1.0, 50)))


def _check_tradeoff_shape(lo, hi):
    cap = 1.0 - ALPHAS
    assert np.all(lo >= 0) and np.all(hi <= cap + 1e-15)
    assert np.all(lo <= hi)
    assert np.all(np.diff(lo) <= 1e-15) and np.all(np.diff(hi) <= 1e-15)  # non-increasing


def test_tradeoff_gaussian_brackets_gdp_curve(gauss):
    lo, hi = curves.tradeoff(gauss, ALPHAS, delta=DELTA)
    _check_tradeoff_shape(lo, hi)
    g = curves.gaussian_tradeoff(ALPHAS, MU)  # exact trade-off of mu-GDP
    assert np.all(lo <= g + 1e-12) and np.all(g <= hi + 1e-12)
    assert np.max(hi - lo) < 2e-3


@pytest.mark.parametrize("case", DPSGD_CASES)
def test_tradeoff_dpsgd_monotone_and_bounded(case):
    p, _ = _dpsgd(case)
    lo, hi = curves.tradeoff(p, ALPHAS, delta=DPSGD_DELTA)
    _check_tradeoff_shape(lo, hi)
    assert np.max(hi - lo) < 5e-3
    # (eps, delta)-DP at the certified epsilon implies beta >= 1 - delta - e^eps alpha
    _, e_hi = _dpsgd(case)[1]
    implied = np.maximum(0.0, 1.0 - DPSGD_DELTA - math.exp(e_hi) * ALPHAS)
    assert np.all(hi >= implied - 1e-12)


def test_tradeoff_scalar_and_validation(gauss):
    lo, hi = curves.tradeoff(gauss, 0.1, delta=DELTA)
    assert isinstance(lo, float) and lo <= curves.gaussian_tradeoff(0.1, MU) <= hi
    with pytest.raises(ValueError):
        curves.tradeoff(gauss, [0.5, 1.5])


@pytest.mark.parametrize("call", [
    lambda p: curves.delta_curve(p, 1.0, delta="0.5"),  # type: ignore[arg-type]  # invalid on purpose
    lambda p: curves.tail_epsilon(p, "0.5"),  # type: ignore[arg-type]  # invalid on purpose
    lambda p: curves.tradeoff(p, 0.1, delta="0.5"),  # type: ignore[arg-type]  # invalid on purpose
    lambda p: curves.gaussian_mu(p, delta="0.5"),  # type: ignore[arg-type]  # invalid on purpose
    lambda p: curves.delta_curve(p, "1.0"),
    lambda p: curves.tradeoff(p, "0.1"),
])
def test_string_numbers_are_refused(gauss, call):
    # a number written as text is a caller's mistake, not a value to convert
    with pytest.raises(TypeError, match="delta|epsilon|alpha"):
        call(gauss)


# --------------------------------------------------------------- Gaussian mu
def test_gaussian_mu_recovers_gaussian(gauss):
    mu, info = curves.gaussian_mu(gauss, delta=DELTA, details=True)
    assert mu == pytest.approx(MU, rel=1e-4)
    assert info["relative_spread"] < 1e-4
    for row in info["per_delta"]:
        assert row["mu_lower"] <= MU <= row["mu_upper"]


def test_gaussian_mu_is_a_summary_for_dpsgd():
    p, _ = _dpsgd(DPSGD_CASES[0])
    mu, info = curves.gaussian_mu(p, delta=DPSGD_DELTA, details=True)
    assert 0 < mu < 2
    assert info["relative_spread"] > 0.01  # subsampled losses are skewed: not Gaussian
