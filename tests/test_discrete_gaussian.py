"""The discrete Gaussian mechanism against enumeration in extended precision (mpmath) and,
at large sigma, against the continuous Gaussian within the Poisson-summation distance."""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest

import pld
from oracles import gaussian_delta
from pld.mechanisms.discrete_gaussian import DiscreteGaussianPair, cut, tail_mass_bound

mpmath.mp.dps = 60


def _dg_weights(sigma: float, reach: int) -> tuple[list[int], list]:
    """Integers -reach..reach and N_Z(0, sigma^2)'s masses there (the rest is below 1e-300)."""
    xs = list(range(-reach, reach + 1))
    w = [mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * mpmath.mpf(sigma) ** 2)) for x in xs]
    z = mpmath.fsum(w)
    return xs, [wi / z for wi in w]


def _composed_sum_law(sigma: float, count: int) -> dict[int, mpmath.mpf]:
    """Law of the sum of ``count`` independent N_Z(0, sigma^2) (exact convolution)."""
    xs, ps = _dg_weights(sigma, int(40 * sigma) + 10)
    law = {0: mpmath.mpf(1)}
    for _ in range(count):
        new: dict[int, mpmath.mpf] = {}
        for a, pa in law.items():
            for x, px in zip(xs, ps):
                new[a + x] = new.get(a + x, mpmath.mpf(0)) + pa * px
        law = new
    return law


def _delta(law: dict[int, mpmath.mpf], sigma: float, sens: int, count: int, eps: float) -> mpmath.mpf:
    """delta(eps) of ``count`` discrete Gaussians: the loss is (count D^2 - 2 D X)/(2 s^2), X the sum."""
    s2 = 2 * mpmath.mpf(sigma) ** 2
    total = mpmath.mpf(0)
    for x, px in law.items():
        loss = (count * sens * sens - 2 * sens * mpmath.mpf(x)) / s2
        if loss > eps:
            total += px * (1 - mpmath.exp(eps - loss))
    return total


@pytest.mark.parametrize("sigma,sens,count", [(0.7, 1, 1), (2.0, 1, 1), (1.5, 3, 1), (1.0, 1, 3)])
def test_delta_matches_enumeration(sigma, sens, count):
    """Both ends of pld's delta bracket hold the delta enumerated in 60 digits (the pair is
    symmetric, so one direction decides)."""
    law = _composed_sum_law(sigma, count)
    p = pld.DiscreteGaussian(sigma, sens).pld().self_compose(count)
    for eps in (0.1, 0.5, 1.0, 2.5):
        exact = float(_delta(law, sigma, sens, count, eps))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pld.TargetMissedWarning)
            lo, hi = p.delta_bounds(eps)
        assert lo <= exact * (1 + 1e-12) + 1e-300
        assert exact <= hi * (1 + 1e-12) + 1e-300
        assert hi - lo <= 1e-3 * exact + 1e-12


@pytest.mark.parametrize("sigma,sens", [(0.8, 1), (3.0, 2)])
def test_epsilon_matches_enumeration(sigma, sens):
    law = _composed_sum_law(sigma, 1)
    delta = 1e-5
    lo_e, hi_e = 0.0, 60.0
    for _ in range(200):  # the exact epsilon by bisection on the enumerated (decreasing) delta
        mid = (lo_e + hi_e) / 2
        if _delta(law, sigma, sens, 1, mid) > delta:
            lo_e = mid
        else:
            hi_e = mid
    lo, hi = pld.DiscreteGaussian(sigma, sens).pld().epsilon_bounds(delta)
    assert lo <= hi_e + 1e-12 and lo_e - 1e-12 <= hi
    assert hi - lo <= 1e-4 * hi + 1e-6


def test_tail_bound_covers_left_out_mass():
    """The bound on the mass beyond -m (and beyond m) holds in extended precision."""
    for sigma in (0.3, 1.0, 7.5):
        m = cut(sigma)
        s2 = 2 * mpmath.mpf(sigma) ** 2
        tail = mpmath.nsum(lambda x, s2=s2: mpmath.exp(-x * x / s2), [m + 1, mpmath.inf])
        assert tail <= tail_mass_bound(sigma, m)
        assert 0 < tail_mass_bound(sigma, m) < 1e-190


def test_pairs_and_claims():
    d = pld.DiscreteGaussian(2.0, 3)
    assert not d.tight and d.symmetric and d.adjacency == "any"
    up, low = d.bound_parts()
    assert up[0][0] == DiscreteGaussianPair(2.0, 3, "dominating")
    assert low is not None and low[0][0] == DiscreteGaussianPair(2.0, 3, "dominated")
    notes = d.pld().explain(1e-5)
    assert notes["tight"] is False
    with pytest.raises(ValueError, match="two finite pairs"):
        d.loss_model("remove")


@pytest.mark.parametrize("bad,exc", [({"sigma": 0.0}, ValueError), ({"sigma": 2e5}, ValueError),
                                     ({"sigma": 1.0, "sensitivity": 1.5}, TypeError),
                                     ({"sigma": 1.0, "sensitivity": 0}, ValueError),
                                     ({"sigma": "1"}, TypeError)])
def test_validation(bad, exc):
    with pytest.raises(exc):
        pld.DiscreteGaussian(**bad)


def _summation_distance(sigma: float, sens: int, eps: float) -> float:
    """|sum_Z g - int g| <= TV(g') / 12 for g = phi_sigma (1 - e^{eps - L})_+ (Poisson summation,
    integrating the Fourier coefficients by parts twice): TV(g') measured on a fine grid, x 2."""
    xstar = (sens * sens - 2 * sigma * sigma * eps) / (2 * sens)  # L(x*) = eps; g = 0 above x*
    x = np.linspace(xstar - 40 * sigma, xstar, 400001)
    phi = np.exp(-x * x / (2 * sigma * sigma)) / (sigma * math.sqrt(2 * math.pi))
    loss = (sens * sens - 2 * sens * x) / (2 * sigma * sigma)
    g = phi * (1 - np.exp(eps - loss))
    d1 = np.gradient(g, x)
    tv = float(np.abs(np.diff(d1)).sum()) + abs(float(d1[-1]))
    return 2.0 * tv / 12.0


@pytest.mark.parametrize("sigma", [12.0, 40.0])
def test_large_sigma_near_continuous(sigma):
    """At large sigma the discrete Gaussian's delta(eps) is within TV(g')/12 (plus the normaliser's
    4 e^{-2 pi^2 sigma^2}, nothing here) of the continuous Gaussian's (Balle & Wang's closed form)."""
    p = pld.DiscreteGaussian(sigma).pld()
    mu = 1.0 / sigma
    for eps in (0.5 * mu, mu, 2 * mu):
        cont = gaussian_delta(eps, mu)
        lo, hi = p.delta_bounds(eps)
        dist = _summation_distance(sigma, 1, eps)
        assert lo - dist <= cont <= hi + dist
        assert dist < 0.2 * cont  # (a distance that falls with sigma; measured gaps are ~100x smaller)
