"""The exceedance statistics' lower end for ``k``-of-``t`` allocation
(:mod:`pld.mechanisms.allocation.exceedances`), against references that do not come from pld:
the statistics' hockey-stick divergences in 60-digit arithmetic (mpmath), their laws by Monte
Carlo simulation of the mechanism, and the Gaussian mechanism's closed form without
amplification (an upper bound on the true epsilon, Balle & Wang 2018)."""

from __future__ import annotations

import math
import warnings

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import pld
from pld.mechanisms.allocation import exceedances as ex


def _mp_delta(p_law, q_law, epsilon: float) -> mp.mpf:
    """``sum_j (P_j - e^eps Q_j)_+`` of two exact laws (lists of mpf)."""
    g = mp.e ** mp.mpf(epsilon)
    return mp.fsum(max(p - g * q, mp.mpf(0)) for p, q in zip(p_law, q_law))


def _mp_binomial(n: int, p: mp.mpf) -> list:
    return [mp.binomial(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)]


def _check(law, p_law, q_law, delta: float) -> None:
    """The epsilon found on ``law`` has exact delta above ``delta`` (certified) and one 1e-6
    higher does not (tight); the delta lower bound the delta queries read lies below the exact
    sum and close to it (its margins are relative to the terms, which cancel: 1e-11 absolute)."""
    assert law is not None
    p_lo, q_hi, top = law
    eps = ex._epsilon_of(p_lo, q_hi, top, delta)
    assert eps > 0.0
    assert _mp_delta(p_law, q_law, eps) > delta
    assert _mp_delta(p_law, q_law, eps + 1e-6 * (1.0 + eps)) < delta
    for e in (0.0, 0.5 * eps, eps):
        exact = _mp_delta(p_law, q_law, e)
        assert exact * (1 - 1e-9) - 1e-11 <= ex._delta_lower(p_lo, q_hi, e) <= exact


def _probabilities(sigma: float, z: float) -> tuple[mp.mpf, mp.mpf]:
    """``p_0 = Phi(-z)``, ``p_1 = Phi(1/sigma - z)``: one step's exceedance without and with the record."""
    return mp.ncdf(-mp.mpf(z)), mp.ncdf(mp.mpf(1.0) / mp.mpf(sigma) - mp.mpf(z))


@pytest.mark.parametrize("sigma, t, k, rounds, delta, level", [
    (0.7287907091764241, 75578, 2, 3, 3.2684283051494384e-10, 9.0),  # the allocation sample's #12
    (0.5, 40, 3, 7, 1e-8, 3.0),
    (1.2, 2000, 10, 1, 1e-6, 1.0),
])
def test_indicator_is_certified_and_tight_against_exact_arithmetic(sigma, t, k, rounds, delta, level):
    """The rounds with an exceedance, ``Bin(E, a)`` against ``Bin(E, b)``."""
    z = float(norm.isf(10.0 ** -level / t))
    with mp.workdps(60):
        p0, p1 = _probabilities(sigma, z)
        a = 1 - (1 - p1) ** k * (1 - p0) ** (t - k)
        b = 1 - (1 - p0) ** t
        _check(ex._indicator(sigma, t, k, rounds, z), _mp_binomial(rounds, a), _mp_binomial(rounds, b), delta)


@pytest.mark.parametrize("sigma, t, k, rounds, delta, level", [
    (0.393, 693, 30, 3, 1.1e-11, 0.5),  # the allocation sample's #33
    (0.8, 50, 4, 5, 1e-7, 1.0),
])
def test_total_count_is_certified_and_tight_against_exact_arithmetic(sigma, t, k, rounds, delta, level):
    """The exceedances of all rounds together, ``Bin(E k, p_1) * Bin(E (t - k), p_0)`` against
    ``Bin(E t, p_0)`` (summed exactly in mpmath over the same outcomes)."""
    z = float(norm.isf(10.0 ** -level / t))
    with mp.workdps(60):
        p0, p1 = _probabilities(sigma, z)
        marked, unmarked = _mp_binomial(rounds * k, p1), _mp_binomial(rounds * (t - k), p0)
        n = len(marked) + 200  # (far past where either law has mass at this delta)
        p_law = [mp.fsum(marked[i] * unmarked[j - i] for i in range(max(0, j - len(unmarked) + 1),
                                                                       min(j, len(marked) - 1) + 1))
                 for j in range(n)]
        q_law = [mp.binomial(rounds * t, j) * p0 ** j * (1 - p0) ** (rounds * t - j) for j in range(n)]
        _check(ex._total(sigma, t, k, rounds, z), p_law, q_law, delta)


def test_the_statistic_has_the_law_the_bound_uses_by_simulation():
    """Monte Carlo of one round (t = 6 steps, the record in 2 chosen at random): the share of
    rounds with an output above the threshold matches ``a`` with the record and ``b`` without,
    whichever steps hold it (the law does not depend on them)."""
    sigma, t, k, z = 0.5, 6, 2, 2.0
    rng = np.random.default_rng(7)
    n = 400_000
    marks = np.zeros((n, t))
    for row, cols in enumerate(np.argsort(rng.random((n, t)), axis=1)[:, :k]):
        marks[row, cols] = 1.0
    with_record = np.any(marks + sigma * rng.standard_normal((n, t)) > z * sigma, axis=1).mean()
    without = np.any(sigma * rng.standard_normal((n, t)) > z * sigma, axis=1).mean()
    p0, p1 = norm.sf(z), norm.sf(z - 1.0 / sigma)
    a = 1 - (1 - p1) ** k * (1 - p0) ** (t - k)
    b = 1 - (1 - p0) ** t
    for est, exact in ((with_record, a), (without, b)):
        assert abs(est - exact) <= 5.0 * math.sqrt(exact * (1 - exact) / n)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Epsilon of the Gaussian mechanism with ``mu = 1/sigma`` at ``delta`` (Balle & Wang 2018)."""
    def d(e: float) -> float:
        return norm.cdf(-e / mu + mu / 2) - math.exp(min(e + norm.logcdf(-e / mu - mu / 2), 700.0))
    lo, hi = 0.0, 1.0
    while d(hi) > delta:
        hi *= 2.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


@settings(max_examples=40, deadline=None)
@given(sigma=st.floats(0.3, 3.0), log_t=st.floats(math.log(3), math.log(1e5)), share=st.floats(0.0, 1.0),
       rounds=st.integers(1, 300), log_delta=st.floats(math.log(1e-12), math.log(1e-4)))
def test_never_above_the_unamplified_gaussian(sigma, log_t, share, rounds, log_delta):
    """A lower end: never above the epsilon of the ``k E`` Gaussian steps without any
    amplification (the true epsilon lies below that)."""
    t = int(math.exp(log_t))
    k = 2 + int(share * (min(t - 1, 400) - 2))
    delta = math.exp(log_delta)
    lower = ex.exceedance_lower(sigma, t, k, rounds, delta)
    assert 0.0 <= lower <= _gaussian_epsilon(math.sqrt(k * rounds) / sigma, delta) * (1 + 1e-9)


def test_the_composition_reads_it_and_says_so():
    """sigma 0.393, 30 of 693 steps, 3 epochs, delta 1.1e-11 (the allocation sample's #33): the
    label sums' lower end was 60.92 under an upper end of 210.9; the total exceedances give
    132.1, and the Poisson likelihood-ratio statistic more (184.6).  explain() names the
    statistic whose lower end is taken."""
    mech = pld.RandomAllocation(pld.Gaussian(0.393), 693, 30)
    d = mech.pld().self_compose(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lo, hi = d.epsilon_bounds(1.1e-11)
        info = d.explain(1.1e-11)
        exceed = mech.epsilon_lower(1.1e-11, rounds=3)
    assert 130.0 <= exceed <= lo <= hi
    assert 180.0 <= lo
    assert hi <= _gaussian_epsilon(math.sqrt(90) / 0.393, 1.1e-11)
    assert info["epsilon_lower"] == lo
    assert "Poisson likelihood-ratio statistic" in info["bounds"]["lower"]["what"]
    # the delta queries read the same statistics: just below the lower end, delta is certified
    # above 1.1e-11, and the bracket stays ordered
    d_lo, d_hi = d.delta_bounds(0.999 * lo)
    assert 1.1e-11 < d_lo <= d_hi
