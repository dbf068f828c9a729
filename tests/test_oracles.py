"""Tests of the independent oracles in tests/oracles.py (numpy/scipy only; no pld here either).

Every oracle is checked against something that does not share its code: the closed forms
against numerical quadrature of (p - e^eps q)_+ and brute-force enumeration, the normal-mass
formula against mpmath at 50 digits, the FFT error constant against exact integer
convolutions, the rounding oracle and the Monte Carlo estimate against the closed forms.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.integrate
import scipy.special as sc
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles as O  # noqa: E402


def _quad_hockey(logp, logq, eps, lo, hi, points=()):
    """int (p - e^eps q)_+ dy by adaptive quadrature (the definition of delta(eps))."""
    f = lambda y: max(0.0, math.exp(logp(y)) - math.exp(eps + logq(y)))  # noqa: E731
    val, err = scipy.integrate.quad(f, lo, hi, points=points or None, limit=400, epsabs=1e-15, epsrel=1e-11)
    return val


# ---- closed forms -----------------------------------------------------------------------------


def test_gaussian_reference_numbers():
    # DESIGN.md: sigma = 8, 120 releases, delta = 1e-6 -> eps = 7.0168; delta(6) = 2.7264e-5
    mu = math.sqrt(120) / 8.0
    assert O.gaussian_epsilon(1e-6, mu) == pytest.approx(7.0167886, abs=5e-7)
    assert O.gaussian_delta(6.0, mu) == pytest.approx(2.7264e-5, rel=2e-5)


@pytest.mark.parametrize("mu,eps", [(0.5, 0.3), (1.37, 2.0), (3.0, -1.0), (0.2, 1.5)])
def test_gaussian_closed_form_equals_quadrature(mu, eps):
    logp = lambda y: -0.5 * y * y  # noqa: E731  (common constant cancels)
    logq = lambda y: -0.5 * (y - mu) ** 2  # noqa: E731
    # P = N(0,1), Q = N(mu,1): the loss is decreasing in y; mass where p > e^eps q is y < y*
    ystar = mu / 2.0 - eps / mu
    ref = _quad_hockey(logp, logq, eps, -40, 40, points=(ystar,)) / math.sqrt(2 * math.pi)
    assert O.gaussian_delta(eps, mu) == pytest.approx(ref, rel=1e-9, abs=1e-300)


def test_gaussian_tiny_delta_log_space():
    # log delta is smooth and monotone down to 1e-190; its slope is -lambda (the tilt), which
    # tends to (eps/mu^2 + 1/2) - 1 for large eps (a check of the log-space formula's shape)
    mu = 1.0
    eps = np.linspace(10, 30, 41)
    ld = np.array([O.gaussian_log_delta(e, mu) for e in eps])
    assert np.all(np.diff(ld) < 0) and ld[-1] < math.log(1e-190)
    slope = np.gradient(ld, eps)
    assert slope[-1] == pytest.approx(-(eps[-1] / mu**2 - 0.5), rel=0.02)
    e30 = O.gaussian_epsilon(1e-30, mu)
    assert O.gaussian_delta(e30, mu) == pytest.approx(1e-30, rel=1e-9)


def test_rr_one_step_and_enumeration():
    eps0 = 0.7
    # one step: delta(eps) = (e^eps0 - e^eps)/(1 + e^eps0) for eps in [-eps0, eps0]
    for e in (-0.5, 0.0, 0.3):
        assert O.rr_delta(e, eps0, 1) == pytest.approx((math.exp(eps0) - math.exp(e)) / (1 + math.exp(eps0)), rel=1e-13)
    # T steps by brute force over all 2^T outputs
    T = 9
    p = math.exp(eps0) / (1 + math.exp(eps0))
    outs = np.array(np.meshgrid(*[[0, 1]] * T)).reshape(T, -1).T
    k = outs.sum(axis=1)
    P = p**k * (1 - p) ** (T - k)
    Q = (1 - p) ** k * p ** (T - k)
    for e in (0.0, 1.0, 2.5, 5.0):
        ref = float(np.sum(np.maximum(P - math.exp(e) * Q, 0.0)))
        assert O.rr_delta(e, eps0, T) == pytest.approx(ref, rel=1e-12, abs=1e-300)
    d = 1e-3
    e = O.rr_epsilon(d, eps0, T)
    assert O.rr_delta(e, eps0, T) == pytest.approx(d, rel=1e-9)


@pytest.mark.parametrize("b,eps", [(1.0, 0.0), (1.0, 0.5), (0.5, 1.9), (2.0, -0.3), (1.0, -2.0), (1.0, 1.2)])
def test_laplace_closed_form_equals_quadrature(b, eps):
    logp = lambda y: -abs(y) / b  # noqa: E731
    logq = lambda y: -abs(y - 1.0) / b  # noqa: E731
    ref = _quad_hockey(logp, logq, eps, -60 * b, 60 * b, points=(0.0, 1.0, (1 - b * eps) / 2)) / (2 * b)
    assert O.laplace_delta(eps, b) == pytest.approx(ref, rel=1e-9, abs=1e-14)
    if 0 < O.laplace_delta(eps, b) < 1 and eps >= 0:
        assert O.laplace_epsilon(O.laplace_delta(eps, b), b) == pytest.approx(eps, abs=1e-12)


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("sigma,q,eps", [(1.0, 0.01, 0.005), (0.8, 0.2, 1.0), (2.0, 0.5, 0.05), (1.0, 1.0, 0.7)])
def test_subsampled_gaussian_single_step_equals_quadrature(direction, sigma, q, eps):
    def mix(y):
        return float(np.logaddexp(math.log1p(-q) - y * y / (2 * sigma**2) if q < 1 else -np.inf,
                                  math.log(q) - (y - 1) ** 2 / (2 * sigma**2)))
    g0 = lambda y: -y * y / (2 * sigma**2)  # noqa: E731
    logp, logq = (mix, g0) if direction == "remove" else (g0, mix)
    ref = (_quad_hockey(logp, logq, eps, -40 * sigma, 40 * sigma + 1, points=(0.0, 0.5, 1.0))
           / (sigma * math.sqrt(2 * math.pi)))
    assert O.subsampled_gaussian_delta_single(eps, sigma, q, direction) == pytest.approx(ref, rel=1e-8, abs=1e-15)


# ---- building blocks of the rounding oracle -------------------------------------------------------


def test_log_gauss_interval_against_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.uniform(-30, 30, 200), [-1e-9, 0.0, 5.0, -38.0, 37.0]])
    w = np.concatenate([10.0 ** rng.uniform(-12, 1, 200), [2e-9, 1e-3, 1e-2, 0.5, 1e-7]])
    got = O.log_gauss_interval(a, w)
    for ai, wi, gi in zip(a, w, got):
        A, W = mp.mpf(float(ai)), mp.mpf(float(wi))
        if A + W / 2 > 0:  # upper tail: Phi(-a) - Phi(-a - w) keeps its digits
            ref = mp.log(mp.ncdf(-A) - mp.ncdf(-A - W))
        else:
            ref = mp.log(mp.ncdf(A + W) - mp.ncdf(A))
        # relative accuracy of the mass: |log error| <= 1e-12, and ~u |log Phi| / (m w) in far
        # tails (oracles.TRUSTED_MASS_RTOL = 1e-11 is what the oracle assumes)
        tol = 1e-12 * max(1.0, abs(float(ref)) / 50.0)
        assert abs(gi - float(ref)) <= tol, (ai, wi, gi, float(ref))
        assert abs(gi - float(ref)) <= O.TRUSTED_MASS_RTOL


def test_step_law_masses_sum_to_one_and_match_the_single_step_delta():
    sigma, q, h = 1.0, 0.05, 1e-3
    for direction in ("remove", "add"):
        st = O.subsampled_gaussian_step(sigma, q, h, direction, z=12.0)
        total = math.exp(float(sc.logsumexp(st.logm)))
        top = math.exp(st.log_top) if st.log_top > -math.inf else 0.0
        assert total + top == pytest.approx(1.0, abs=1e-13)
        # rounding up brackets the one-step delta from above, rounding down from below
        x = st.losses
        m = np.exp(st.logm)
        for eps in (0.01, 0.05, 0.2):
            up = float(np.sum(m * np.maximum(0.0, -np.expm1(eps - x)))) + top
            dn = float(np.sum(m * np.maximum(0.0, -np.expm1(eps - (x - h)))))
            ref = O.subsampled_gaussian_delta_single(eps, sigma, q, direction)
            assert dn - 1e-14 <= ref <= up + 1e-14, (direction, eps, dn, ref, up)
            assert up - dn <= 1.5 * h * (1 + up)  # first order in h


def test_fft_error_constant_against_exact_integer_convolutions():
    # circular self-convolution powers of small nonnegative integer vectors are exact in int64
    # (object ints for safety); the FFT result must be within the bound used by the oracle
    rng = np.random.default_rng(3)
    worst = 0.0
    for n in (60, 243, 1000, 2048, 3 * 5**4):
        x = rng.integers(0, 50, n).astype(float)
        X = np.fft.rfft(x)
        y = np.fft.irfft(X * X, n=n)
        xi = x.astype(np.int64)
        exact = np.array([int(np.dot(xi, np.roll(xi[::-1], k + 1))) for k in range(n)], dtype=float)
        err = float(np.max(np.abs(y - exact)))
        # |X^2 - X'^2| <= 2 |X| |e|; e within g ||X||_2, inverse within g ||y||_2
        g = O.fft_error_constant(n)
        bound = (2.0 * g * np.linalg.norm(x) * np.linalg.norm(x) * 1.01 + g * np.linalg.norm(exact)) + 1e-9
        assert err <= bound, (n, err, bound)
        worst = max(worst, err / bound)
    assert worst > 1e-6  # round-off is really there, and the bound is not absurdly loose


# ---- the rounding oracle against closed forms -------------------------------------------------------


@pytest.mark.parametrize("sigma,T,delta", [(2.0, 10, 1e-10), (3.0, 50, 1e-30), (1.0, 4, 1e-6)])
def test_rounding_oracle_brackets_the_gaussian(sigma, T, delta):
    exact = O.gaussian_epsilon(delta, math.sqrt(T) / sigma)
    r = O.subsampled_gaussian_epsilon(sigma, 1.0, T, delta, width=2e-2 * exact, max_points=2**18)
    assert r.lower <= exact <= r.upper
    # the width is T h (rounding), two grid cells (the crossings are read on grid points) and
    # a negligible numerical part
    assert r.width <= 1.01 * (T + 2) * r.h + 1e-9
    assert r.width <= 2.5e-2 * exact


def test_rounding_oracle_one_step_against_closed_form():
    sigma, q = 0.9, 0.1
    for eps in (0.05, 0.5):
        h = 1e-3
        lo, hi = O.subsampled_gaussian_delta_bounds(sigma, q, 1, eps, h=h, z=10.0)
        ref = max(O.subsampled_gaussian_delta_single(eps, sigma, q, "remove"),
                  O.subsampled_gaussian_delta_single(eps, sigma, q, "add"))
        assert lo <= ref <= hi
        # first order in h: read one cell below eps and T + 1 = 2 cells above it; |d delta/d eps| <= e^eps
        assert hi - lo <= 4 * h * math.exp(eps)


def test_rounding_oracle_delta_bounds_gaussian_composition():
    sigma, T = 2.0, 8
    mu = math.sqrt(T) / sigma
    for eps in (1.0, 4.0):
        lo, hi = O.subsampled_gaussian_delta_bounds(sigma, 1.0, T, eps, h=2e-4, max_points=2**18)
        ref = O.gaussian_delta(eps, mu)
        assert lo <= ref <= hi
        assert (hi - lo) / ref < 0.05


def test_rounding_oracle_subsampled_refines_and_is_monotone():
    # no closed form: two brackets at nested deltas must be ordered, and the bracket at the
    # larger h must contain the one at the smaller h (both certified)
    coarse = O.subsampled_gaussian_epsilon(1.0, 0.1, 10, 1e-6, width=1e-1, max_points=2**15)
    fine = O.subsampled_gaussian_epsilon(1.0, 0.1, 10, 1e-6, width=3e-2, max_points=2**15)
    assert coarse.lower <= fine.upper and fine.lower <= coarse.upper
    assert fine.width < coarse.width
    looser = O.subsampled_gaussian_epsilon(1.0, 0.1, 10, 1e-5, width=3e-2, max_points=2**15)
    assert looser.upper <= fine.upper and looser.lower <= fine.lower


# ---- Monte Carlo --------------------------------------------------------------------------------


def test_mc_gaussian_within_its_interval():
    sigma, T = 1.5, 6
    eps = O.gaussian_epsilon(1e-10, math.sqrt(T) / sigma)
    ref = O.gaussian_delta(eps, math.sqrt(T) / sigma)
    r = O.mc_delta(O.SubsampledGaussianSampler(sigma, 1.0, "remove"), T, eps, n=20_000, seed=1, confidence=0.999)
    assert ref < 1e-6  # a rare event: plain sampling would see none of it in 20000 draws
    assert r.lower <= ref <= r.upper
    assert r.stderr / r.estimate < 0.05 and r.ess > 1000


def test_mc_randomized_response_within_its_interval():
    eps0, T, eps = 0.5, 30, 9.0
    p = math.exp(eps0) / (1 + math.exp(eps0))
    step = O.DiscreteSampler(losses=(eps0, -eps0), probs=(p, 1 - p))
    ref = O.rr_delta(eps, eps0, T)
    r = O.mc_delta(step, T, eps, n=20_000, seed=2, confidence=0.999)
    assert r.lower <= ref <= r.upper
    assert r.stderr / r.estimate < 0.05


def test_mc_add_direction_tilts_the_other_way():
    sigma, q, T, eps = 1.0, 0.3, 5, 1.5
    s = O.SubsampledGaussianSampler(sigma, q, "add")
    r = O.mc_delta(s, T, eps, n=10_000, seed=3, confidence=0.999)
    assert r.theta < 0  # large add-losses come from small y
    lo, hi = O.subsampled_gaussian_delta_bounds(sigma, q, T, eps, h=2e-4, max_points=2**18, directions=("add",))
    assert r.lower <= hi and lo <= r.upper


# ---- slow: the reference numbers of issue 19 -----------------------------------------------------------


@pytest.mark.slow
def test_rounding_oracle_issue19_tiny_delta_reference():
    # DESIGN.md: sigma = 4, q = 3.3e-4, T = 1e4, delta = 1.1e-18 has eps in (0.0665, 0.0680)
    r = O.subsampled_gaussian_epsilon(4.0, 3.3e-4, 10_000, 1.1e-18, width=1.5e-3)
    assert 0.0665 <= r.lower and r.upper <= 0.0680 + 1e-4
    assert r.width <= 1.6e-3


@pytest.mark.slow
def test_rounding_oracle_issue19_delta_1e_12_reference():
    # issue 19: sigma = 1.547, q = 3.12e-4, T = 4847, delta = 1e-12 has eps in (0.100, 0.105)
    r = O.subsampled_gaussian_epsilon(1.547, 3.12e-4, 4847, 1e-12, width=4e-3)
    assert r.lower <= 0.105 and r.upper >= 0.100
    assert r.width <= 8e-3


@pytest.mark.slow
def test_rounding_oracle_gaussian_fine_and_tiny_delta():
    for sigma, T, delta in [(8.0, 120, 1e-6), (0.5, 3, 1e-25)]:
        exact = O.gaussian_epsilon(delta, math.sqrt(T) / sigma)
        r = O.subsampled_gaussian_epsilon(sigma, 1.0, T, delta, width=1e-3 * exact)
        assert r.lower <= exact <= r.upper
        assert r.width <= 1.2e-3 * exact


@pytest.mark.slow
def test_mc_subsampled_gaussian_against_rounding_oracle():
    sigma, q, T, eps = 1.0, 0.05, 100, 1.0
    lo, hi = O.subsampled_gaussian_delta_bounds(sigma, q, T, eps, h=5e-5, max_points=2**20, directions=("remove",))
    r = O.mc_delta(O.SubsampledGaussianSampler(sigma, q, "remove"), T, eps, n=40_000, seed=5, confidence=0.999)
    assert (hi - lo) / hi < 0.05
    assert r.lower <= hi and lo <= r.upper
