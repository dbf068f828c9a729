"""User-level accounting and group privacy against closed forms, dp_accounting and the special cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.optimize
import scipy.stats as st

import pld
from oracles import gaussian_epsilon
from pld.mechanisms.user_level import binomial_weights, example_level_user_step, group_mechanism


def _mog_delta(eps: float, sigma: float, sens: np.ndarray, w: np.ndarray, direction: str) -> float:
    """One mixture-of-Gaussians step, both directions, in closed form: the loss is monotone in y,
    so delta is a difference of normal tails at the root y* of loss(y) = +-eps."""
    def log_ratio(y):  # log P/Q, P = sum w N(c, s^2), Q = N(0, s^2)
        return float(np.log(np.sum(w * np.exp((2 * sens * y - sens * sens) / (2 * sigma * sigma)))))
    if direction == "remove":
        y = scipy.optimize.brentq(lambda t: log_ratio(t) - eps, -60 * sigma, 60 * sigma + sens.max(), xtol=1e-14)
        return float(np.sum(w * st.norm.sf((y - sens) / sigma)) - math.exp(eps) * st.norm.sf(y / sigma))
    if -math.log(w[0]) <= eps:  # (the add direction's loss is below -log w_0)
        return 0.0
    y = scipy.optimize.brentq(lambda t: -log_ratio(t) - eps, -60 * sigma, 60 * sigma + sens.max(), xtol=1e-14)
    return float(st.norm.cdf(y / sigma) - math.exp(eps) * np.sum(w * st.norm.cdf((y - sens) / sigma)))


def test_one_record_per_user_is_dpsgd():
    a = pld.dpsgd(1.0, 0.01, 1000)
    b = pld.dpsgd(1.0, 0.01, 1000, records_per_user=1)
    assert a.components == b.components
    assert a.epsilon_bounds(1e-5) == b.epsilon_bounds(1e-5)


@pytest.mark.parametrize("k,q,sigma", [(3, 0.1, 1.5), (5, 0.02, 0.8)])
def test_user_step_against_closed_form(k, q, sigma):
    m = example_level_user_step(sigma, q, k)
    w = np.array([st.binom.pmf(j, k, q) for j in range(k + 1)])
    sens = np.arange(k + 1, dtype=float)
    p = m.pld()
    for eps in (0.2, 1.0, 3.0):
        exact = max(_mog_delta(eps, sigma, sens, w, "remove"), _mog_delta(eps, sigma, sens, w, "add"))
        lo, hi = p.delta_bounds(eps)
        assert lo <= exact * (1 + 1e-9) + 1e-15 and exact <= hi * (1 + 1e-9) + 1e-15


def test_user_level_run_beside_dp_accounting():
    """jax_privacy's user-level accountant composes dp_accounting's MixtureOfGaussiansDpEvent with
    binomial weights; pld's certified bracket and dp_accounting's estimate agree to its grid error."""
    dpa = pytest.importorskip("dp_accounting")
    k, q, sigma, steps = 4, 0.01, 1.2, 300
    event = dpa.dp_event.MixtureOfGaussiansDpEvent(sigma, list(range(k + 1)),
                                                   [float(st.binom.pmf(j, k, q)) for j in range(k + 1)])
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(event, steps)
    theirs = acc.get_epsilon(1e-6)
    lo, hi = pld.dpsgd(sigma, q, steps, records_per_user=k).epsilon_bounds(1e-6)
    assert lo - 1e-2 <= theirs <= hi + 1e-2
    assert hi - lo <= 1e-4 * hi + 1e-6


def test_records_per_user_needs_poisson():
    with pytest.raises(ValueError, match="records_per_user"):
        pld.dpsgd(1.0, 0.01, 100, sampling="balls_in_bins", records_per_user=2)
    with pytest.raises(ValueError, match="records_per_user"):
        pld.dpsgd(1.0, 0.01, 100, records_per_user=0)


def test_binomial_weights():
    w = binomial_weights(7, 0.3)
    assert np.allclose(w, st.binom.pmf(np.arange(8), 7, 0.3), rtol=1e-12, atol=0)
    assert binomial_weights(3, 1.0).tolist() == [0.0, 0.0, 0.0, 1.0]


def test_group_of_gaussians_is_exact():
    """A group of k moves every Gaussian's mean k times as far: mu -> k mu (closed form)."""
    p = pld.Gaussian(4.0).pld().self_compose(9)
    g = pld.group_privacy(p, 3)
    assert g.tight
    lo, hi = g.epsilon_bounds(1e-6)
    exact = gaussian_epsilon(1e-6, 3 * 3 / 4.0)
    assert lo <= exact <= hi


def test_group_of_one_is_the_pld():
    p = pld.dpsgd(1.0, 0.01, 100)
    assert pld.group_privacy(p, 1) is p
    assert pld.group_privacy(pld.Laplace(1.0), 1).components == pld.Laplace(1.0).pld().components


def test_group_of_dpsgd_is_user_level():
    p = pld.dpsgd(1.0, 0.01, 200)
    assert pld.group_privacy(p, 3).components == pld.dpsgd(1.0, 0.01, 200, records_per_user=3).components


def test_group_of_laplace_and_discrete():
    assert group_mechanism(pld.Laplace(2.0, 0.5), 4) == pld.Laplace(2.0, 2.0)
    assert group_mechanism(pld.DiscreteLaplace(2.0, 1), 3) == pld.DiscreteLaplace(2.0, 3)
    assert group_mechanism(pld.DiscreteGaussian(5.0, 2), 3) == pld.DiscreteGaussian(5.0, 6)


def test_group_of_pure_dp_is_bounded():
    g = pld.group_privacy(pld.PureDP(0.5).pld(), 3)
    assert not g.tight
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        lo, hi = g.epsilon_bounds(0.0)
    assert hi == pytest.approx(1.5, rel=1e-9) and lo == pytest.approx(0.5, rel=1e-9)
    notes = g.explain(1e-5)
    assert notes["tight"] is False
    a = group_mechanism(pld.ApproxDP(0.2, 1e-6), 3)
    up = a.bound_parts()[0][0][0]
    assert up.epsilon == pytest.approx(0.6) and up.delta >= 1e-6 * (1 + math.exp(0.2) + math.exp(0.4))


def test_group_unsupported_says_so():
    with pytest.raises(ValueError, match="not implemented"):
        pld.group_privacy(pld.dpsgd(1.0, 0.01, 100, sampling="balls_in_bins"), 2)
    with pytest.raises(ValueError, match="SubsampledRound is not implemented"):  # (a partial epoch)
        pld.group_privacy(pld.dpsgd(1.0, 0.01, 10, sampling="balls_in_bins"), 2)
    with pytest.raises(ValueError):
        pld.group_privacy(pld.Gaussian(1.0).pld(), 0)
