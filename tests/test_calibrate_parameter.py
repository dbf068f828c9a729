"""pld.calibrate_parameter: any mechanism's parameter for a target epsilon.

Answers are checked against closed forms (pld.baselines.exact: Balle & Wang's Gaussian
profile, the Laplace and randomized-response profiles), not against pld, and
the search is compared with dp_accounting's calibrate_dp_mechanism driving
pld's own adapter (same engine per evaluation: the evaluation count is the cost).
"""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq

import pld
from pld.baselines import exact

DELTA = 1e-5


def _gauss_eps(sigma: float, k: int) -> float:
    return float(exact.gaussian_epsilon(DELTA, exact.gaussian_mu(sigma, k)))


@pytest.mark.parametrize("target", [0.5, 2.0, 8.0])
def test_gaussian_noise_against_the_closed_form(target):
    info = {}
    sigma = pld.calibrate_parameter(lambda s: pld.Gaussian(s).pld().self_compose(100), target, DELTA, info=info)
    truth = brentq(lambda s: _gauss_eps(s, 100) - target, 1e-3, 1e4, xtol=1e-12)
    # within budget (certified, hence also exactly), and at most rtol above the smallest sigma
    assert truth <= sigma <= truth * (1 + 2e-3)
    assert pld.Gaussian(sigma).pld().self_compose(100).epsilon(DELTA) <= target
    assert info["evaluations"] <= 6
    assert any(up > target and x < sigma for x, _, up in info["points"])  # the evaluated neighbour beyond


def test_count_is_discrete_and_largest():
    k = pld.calibrate_parameter(lambda n: pld.Gaussian(20.0).pld().self_compose(n), 2.0, DELTA, discrete=True)
    assert isinstance(k, int)
    truth = max(n for n in range(1, 400) if _gauss_eps(20.0, n) <= 2.0)
    assert k in (truth - 1, truth)
    assert pld.Gaussian(20.0).pld().self_compose(k).epsilon(DELTA) <= 2.0 < \
        pld.Gaussian(20.0).pld().self_compose(k + 1).epsilon(DELTA)


def test_direction_is_read_off_and_can_be_given():
    # per-step epsilon of 50 randomized responses: epsilon grows with the parameter
    e0 = pld.calibrate_parameter(lambda e: pld.RandomizedResponse(e).pld().self_compose(50), 2.0, DELTA,
                                 bounds=(1e-3, 20.0))
    truth = brentq(lambda e: float(exact.randomized_response_epsilon(DELTA, e, 50)) - 2.0, 1e-3, 20.0)
    # RR's epsilon(delta) is a step function in e0 near its jumps: compare through the profile
    assert e0 <= truth * (1 + 1e-9) and float(exact.randomized_response_epsilon(DELTA, e0, 50)) <= 2.0
    assert e0 >= truth / (1 + 2e-3)
    # one Laplace release, scale searched with the direction given
    b = pld.calibrate_parameter(pld.Laplace, 0.25, DELTA, increasing=False)
    truth = brentq(lambda s: float(exact.laplace_epsilon(DELTA, s)) - 0.25, 0.1, 100.0)
    assert truth <= b <= truth * (1 + 2e-3)


def test_dpsgd_steps_agree_with_calibrate_steps():
    info = {}
    t = pld.calibrate_parameter(lambda n: pld.dpsgd(1.0, 0.01, n), 2.0, DELTA, discrete=True, info=info)
    assert t == pld.calibrate_steps(2.0, DELTA, 1.0, 0.01)
    assert info["evaluations"] <= 4


def test_fewer_evaluations_than_dp_accounting_with_pld_as_its_backend():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting import mechanism_calibration as mc

    from pld.interop.dp_accounting import PLDAccountant

    calls = [0]

    def event(s):
        calls[0] += 1
        return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(s), 100)

    theirs = mc.calibrate_dp_mechanism(PLDAccountant, event, 2.0, DELTA, mc.LowerEndpointAndGuess(0.0, 1.0),
                                       tol=0.02)
    info = {}
    ours = pld.calibrate_parameter(lambda s: pld.Gaussian(s).pld().self_compose(100), 2.0, DELTA, info=info)
    assert ours == pytest.approx(theirs, abs=0.03)
    assert 2 * info["evaluations"] <= calls[0], (info["evaluations"], calls[0])


@pytest.mark.parametrize("kwargs, exc, fragment", [
    (dict(make=3), TypeError, "make must be callable"),
    (dict(make=lambda x: x), TypeError, "must return a pld.PLD or a pld mechanism"),
    (dict(bounds=(2.0, 1.0)), ValueError, "bounds[1]"),
    (dict(bounds=(0.0, 1.0)), ValueError, "bounds[0]"),
    (dict(bounds=(1.0, math.inf)), ValueError, "bounds[1] must be finite"),
    (dict(bounds=3), TypeError, "bounds must be a pair"),
    (dict(bounds=(1e-3, 1.0)), ValueError, "no parameter in bounds"),
    (dict(target_epsilon=0.0), ValueError, "target_epsilon"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(make=lambda x: pld.Gaussian(1.0)), ValueError, "does not change"),
    (dict(discrete=True, bounds=(1.2, 1.8)), ValueError, "at least two integers"),
])
def test_bad_input(kwargs, exc, fragment):
    args = dict(make=lambda s: pld.Gaussian(s).pld().self_compose(100), target_epsilon=2.0, delta=DELTA)
    args.update(kwargs)
    with pytest.raises(exc) as err:
        pld.calibrate_parameter(args.pop("make"), args.pop("target_epsilon"), args.pop("delta"), **args)
    assert fragment in str(err.value)
