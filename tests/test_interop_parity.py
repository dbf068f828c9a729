"""The dp_accounting adapter at parity with dp_accounting's head (issue 40).

The installed release lacks the newer events and methods, so the events are
stand-ins of the same names and fields (as at the head's ``dp_event.py``); the
adapter matches them by name.  Every mapped event is checked against a truth
outside pld: Kairouz-Oh-Viswanath for (epsilon, delta) events, enumeration for
the discrete Gaussian and the two-candidate selection pairs, randomized
response's closed form (tests/oracles.py) for the epsilon-DP upper ends.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import attr
import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event
from scipy.special import logsumexp
from scipy.stats import norm

import oracles
import pld
from peer_pmfs import epsilons_of_pld
from pld.interop.dp_accounting import PLDAccountant, UnsupportedEventError, from_dp_event


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    epsilon: float
    delta: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianDpEvent(dp_event.DpEvent):
    sigma: float
    sensitivity: float = 1.0
    dimension: Optional[int] = None  # noqa: UP045  (dp_accounting's spelling)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ExponentialMechanismDpEvent(dp_event.DpEvent):
    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PermuteAndFlipDpEvent(dp_event.DpEvent):
    epsilon: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class RandomAllocationDpEvent(dp_event.DpEvent):
    event: dp_event.DpEvent
    num_selected: int
    num_steps: int


def _quiet_bounds(p, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        return p.epsilon_bounds(delta)


def _eps_of(log_delta_of, delta, hi=60.0):
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if log_delta_of(mid) > math.log(delta):
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _pair_log_delta(p, q, k):
    """log delta(eps) of the k-fold product of a two-outcome pair (enumerated by counts)."""
    j = np.arange(k + 1)
    logc = np.array([math.lgamma(k + 1) - math.lgamma(i + 1) - math.lgamma(k - i + 1) for i in j])
    lp = logc + j * math.log(p[0]) + (k - j) * math.log(p[1])
    lq = logc + j * math.log(q[0]) + (k - j) * math.log(q[1])
    loss = lp - lq

    def f(eps):
        keep = loss > eps
        if not np.any(keep):
            return -math.inf
        return float(logsumexp(lp[keep] + np.log1p(-np.exp(eps - loss[keep]))))
    return f


# ------------------------------------------------------------ attack risk methods
def test_true_positive_rates_certified_and_shaped_like_dp_accountings():
    acc = PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 1000)
    one = acc.get_true_positive_rates(0.01)
    many = acc.get_true_positive_rates(np.array([1e-3, 1e-2, 0.1]))
    assert isinstance(one, float) and many.shape == (3,)
    assert many[1] == one and np.all(np.diff(many) > 0)
    lo, hi = acc.get_true_positive_rate_bounds(0.01)
    assert lo <= hi == one and hi - lo <= 1e-4 * hi
    # dp_accounting's documented (symmetric) method: it assumes more, so it is at least the truth,
    # which is at least pld's lower end; at FPRs where the remove direction alone decides both
    # curves meet, and dp_accounting's uncertified grid can sit inside pld's bracket
    dpa = dp_accounting.pld.PLDAccountant()
    dpa.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 1000)
    sym = 1.0
    deltas = np.concatenate(([0.0], np.logspace(-13, 0, 600)))
    epsilons = epsilons_of_pld(dpa._pld, deltas)
    for i in (0, 150, 300, 450, 600):
        assert epsilons[i] == dpa.get_epsilon(deltas[i]) or abs(epsilons[i] - dpa.get_epsilon(deltas[i])) <= 1e-9
    for delta, eps in zip(deltas, epsilons):
        sym = min(sym, math.exp(eps) * 0.01 + delta, 1.0 + (0.01 + delta - 1.0) * math.exp(-eps))
    assert lo <= sym and one <= sym * (1 + 1e-4)


def test_true_positive_rates_edge_accountants():
    assert PLDAccountant().get_true_positive_rates(0.25) == 0.25
    acc = PLDAccountant()
    acc.compose(dp_accounting.NonPrivateDpEvent())
    assert acc.get_true_positive_rates(0.01) == 1.0
    assert math.isinf(acc.get_gdp_parameter_estimate())
    with pytest.raises(ValueError, match="false_positive_rates"):
        PLDAccountant().get_true_positive_rates(2.0)


def test_gdp_parameter_of_a_gaussian_is_its_mu():
    acc = PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(2.0), 4)  # mu = sqrt(4) / 2 = 1
    mu = acc.get_gdp_parameter_estimate()
    assert 1.0 <= mu <= 1.0 + 1e-3
    # at FPRs where a Gaussian's TPR is resolved, the same from dp_accounting's formula
    a = np.array([1e-3, 1e-2, 0.1])
    tpr = acc.get_true_positive_rates(a)
    assert np.all(norm.ppf(tpr) - norm.ppf(a) >= 1.0 - 1e-9)


# ------------------------------------------------------------ the newer events
def test_epsilon_delta_event_is_kairouz_oh_viswanath():
    e0, d0, k = 0.5, 1e-4, 8
    p = from_dp_event(dp_accounting.SelfComposedDpEvent(EpsilonDeltaDpEvent(e0, d0), k))
    for eps in (0.5, 1.5, 3.0):
        # P-mass at +inf 1 - (1 - d0)^k, the rest k-fold randomized response
        truth = 1 - (1 - d0) ** k + (1 - d0) ** k * oracles.rr_delta(eps, e0, k)
        lo, hi = p.delta_bounds(eps)
        assert lo <= truth * (1 + 1e-9) and truth <= hi * (1 + 1e-9) and hi - lo <= 1e-3 * hi
    assert from_dp_event(EpsilonDeltaDpEvent(0.0, 0.0)).epsilon(1e-6) == 0.0
    with pytest.raises(pld.interop.dp_accounting.NonPrivateEventError):
        from_dp_event(EpsilonDeltaDpEvent(1.0, 1.0))


def test_discrete_gaussian_event_against_enumeration():
    sigma, k = 1.5, 2
    p = from_dp_event(DiscreteGaussianDpEvent(sigma, float(k), 1))
    x = np.arange(-200, 201)
    lw = -(x * x) / (2 * sigma ** 2)
    lp = lw - logsumexp(lw)
    loss = (k * k - 2.0 * k * x) / (2 * sigma ** 2)
    for eps in (0.2, 1.0, 2.0):
        keep = loss > eps
        truth = float(np.sum(np.exp(lp[keep]) * -np.expm1(eps - loss[keep])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pld.NotTightWarning)
            lo, hi = p.delta_bounds(eps)
        assert lo <= truth * (1 + 1e-9) and truth <= hi * (1 + 1e-9) and hi - lo <= 1e-3 * hi
    for bad, why in ((DiscreteGaussianDpEvent(1.0), "dimension must be 1"),
                     (DiscreteGaussianDpEvent(1.0, 1.0, 3), "dimension must be 1"),
                     (DiscreteGaussianDpEvent(1.0, 1.5, 1), "sensitivity must be an integer")):
        with pytest.raises(UnsupportedEventError, match=why):
            from_dp_event(bad)
        assert not PLDAccountant().supports(bad)


@pytest.mark.parametrize("event_cls,lower_pair", [
    (ExponentialMechanismDpEvent, lambda e: ((0.5, 0.5), (1 / (1 + math.exp(-e)), 1 / (1 + math.exp(e))))),
    (PermuteAndFlipDpEvent, lambda e: ((0.5, 0.5), (1 - 0.5 * math.exp(-e), 0.5 * math.exp(-e)))),
])
def test_selection_events_bracketed_by_pure_dp_and_a_two_candidate_instance(event_cls, lower_pair):
    e0, k, delta = 1.0, 10, 1e-5
    p = from_dp_event(dp_accounting.SelfComposedDpEvent(event_cls(e0), k))
    assert not p.tight
    lo, hi = _quiet_bounds(p, delta)
    upper_truth = oracles.rr_epsilon(delta, e0, k)  # epsilon-DP: the randomized-response pair
    pp, qq = lower_pair(e0)
    lower_truth = max(_eps_of(_pair_log_delta(pp, qq, k), delta), _eps_of(_pair_log_delta(qq, pp, k), delta))
    assert upper_truth <= hi <= upper_truth * (1 + 1e-4) + 1e-6
    assert lower_truth * (1 - 1e-4) - 1e-6 <= lo <= lower_truth
    assert lo < hi  # not tight: the gap is the epsilon-DP bound's
    assert from_dp_event(event_cls(0.0)).epsilon(1e-6) == 0.0


def test_random_allocation_event_one_step_is_the_gaussian():
    sigma = 2.0
    p = from_dp_event(RandomAllocationDpEvent(dp_accounting.GaussianDpEvent(sigma), 1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)  # (the allocation laws' own grid)
        lo, hi = p.epsilon_bounds(1e-6)
    truth = oracles.gaussian_epsilon(1e-6, 1.0 / sigma)
    assert lo <= truth <= hi
    assert from_dp_event(RandomAllocationDpEvent(dp_accounting.GaussianDpEvent(sigma), 0, 5)).epsilon(1e-6) == 0.0


@pytest.mark.parametrize("event,why", [
    (dp_event.RepeatAndSelectDpEvent(dp_accounting.GaussianDpEvent(1.0), 3.0, 1.0), "Papernot & Steinke"),
    (dp_event.ZCDpEvent(0.1), "zCDP"),
    (dp_event.SampledWithReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(1.0)), "with replacement"),
])
def test_refused_events_say_why(event, why):
    with pytest.raises(UnsupportedEventError, match=why):
        from_dp_event(event)
    assert not PLDAccountant().supports(event)
