"""Tests for pld.baselines.exact: exact privacy profiles (Gaussian, RR, Gaussian x RR, Laplace)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from pld.baselines.exact import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    gaussian_rr_delta,
    gaussian_rr_epsilon,
    laplace_delta,
    laplace_epsilon,
    privacy_loss_tail_delta_gaussian,
    privacy_loss_tail_epsilon_gaussian,
    randomized_response_delta,
    randomized_response_epsilon,
)

SEED_MU = math.sqrt(120) / 8.0  # sigma = 8, T = 120 unit-sensitivity releases


# ---------------------------------------------------------------------------
# seed-lab reference numbers (DESIGN.md, "Reference numbers")
# ---------------------------------------------------------------------------


def test_gaussian_mu():
    assert gaussian_mu(8.0, 120) == pytest.approx(SEED_MU, rel=1e-15)
    assert gaussian_mu(2.0, 4, sensitivity=3.0) == pytest.approx(3.0, rel=1e-15)
    assert gaussian_mu(1.0, 0) == 0.0
    assert gaussian_mu(1.0, 6000.0) == pytest.approx(math.sqrt(6000))


def test_seed_lab_exact_epsilon():
    eps = gaussian_epsilon(1e-6, gaussian_mu(8.0, 120))
    assert isinstance(eps, float)
    assert round(eps, 4) == 7.0168
    assert eps == pytest.approx(7.0167886, abs=5e-7)  # DESIGN: exact eps 7.0167886


def test_seed_lab_exact_delta_at_6():
    assert gaussian_delta(6.0, SEED_MU) == pytest.approx(2.7264e-5, rel=2e-5)


def test_seed_lab_tail():
    assert round(privacy_loss_tail_epsilon_gaussian(1e-6, SEED_MU), 2) == 7.45
    assert privacy_loss_tail_delta_gaussian(6.0, SEED_MU) == pytest.approx(1.090e-4, rel=5e-4)


# ---------------------------------------------------------------------------
# Gaussian profile
# ---------------------------------------------------------------------------


def _gaussian_delta_quad(eps: float, mu: float) -> float:
    """delta(eps) = int (p(y) - e^eps q(y))_+ dy for P = N(mu,1), Q = N(0,1)."""
    # p > e^eps q  <=>  y > y* = eps/mu + mu/2
    ystar = eps / mu + mu / 2.0
    f = lambda y: stats.norm.pdf(y, loc=mu) - math.exp(eps) * stats.norm.pdf(y)  # noqa: E731
    val, _ = integrate.quad(f, ystar, np.inf, epsabs=0, epsrel=1e-12, limit=200)
    return val


@pytest.mark.parametrize("mu", [0.3, 1.0, SEED_MU, 4.0])
@pytest.mark.parametrize("eps", [-2.0, -0.5, 0.0, 0.5, 1.0, 3.0])
def test_gaussian_delta_matches_integration(mu, eps):
    assert gaussian_delta(eps, mu) == pytest.approx(_gaussian_delta_quad(eps, mu), rel=1e-9, abs=1e-15)


def test_gaussian_delta_matches_naive_formula_in_bulk():
    eps = np.linspace(-3, 3, 61)
    for mu in (0.5, 1.0, 2.0):
        naive = stats.norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)
        np.testing.assert_allclose(gaussian_delta(eps, mu), naive, rtol=1e-10, atol=1e-15)


def test_gaussian_delta_limits_and_extremes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = gaussian_delta(np.array([-1e4, -50.0, 1e3, 1e4]), 1.0)
        assert d[0] == 1.0 and d[1] == pytest.approx(-math.expm1(-50.0), rel=1e-15)
        assert d[2] == 0.0 and d[3] == 0.0
        # very negative eps: 1 - e^eps for any mu
        assert gaussian_delta(-30.0, 3.0) == pytest.approx(-math.expm1(-30.0), rel=1e-14)
        assert gaussian_delta(0.5, 0.0) == 0.0
        assert gaussian_delta(-0.5, 0.0) == pytest.approx(-math.expm1(-0.5))
        assert gaussian_delta(5.0, np.inf) == 1.0
        assert gaussian_delta(np.inf, 1.0) == 0.0
        assert gaussian_delta(-np.inf, 1.0) == 1.0


@pytest.mark.parametrize(
    "mu,eps",
    [(10.0, 420.0), (1.0, 30.0), (1.0, 37.0), (0.1, 0.13), (30.0, 700.0), (100.0, 8600.0), (0.02, 0.01), (3.0, -2.0)],
)
def test_gaussian_delta_tails_against_mpmath(mu, eps):
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(80):
        m, e = mpmath.mpf(mu), mpmath.mpf(eps)
        ref = mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)
        ref = float(ref)
    assert ref > 1e-305
    assert gaussian_delta(eps, mu) == pytest.approx(ref, rel=1e-10)
    if ref < 0.5:
        assert gaussian_epsilon(ref, mu) == pytest.approx(eps, rel=1e-11)


def test_gaussian_delta_monotone_and_convex_in_exp_eps():
    eps = np.linspace(-5, 30, 3501)
    for mu in (0.2, 1.0, 5.0):
        d = gaussian_delta(eps, mu)
        assert np.all(np.diff(d) <= 0)
        # convex as a function of e^eps: slopes non-decreasing
        x = np.exp(eps[:1500])
        slopes = np.diff(d[:1500]) / np.diff(x)
        assert np.all(np.diff(slopes) >= -1e-9 * np.abs(slopes[1:]).max())


def test_gaussian_epsilon_monotone_small_delta():
    deltas = np.logspace(-300, -0.5, 400)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mu in (0.05, 1.0, SEED_MU, 20.0):
            eps = gaussian_epsilon(deltas, mu)
            assert np.all(np.isfinite(eps)) and np.all(eps >= 0)
            assert np.all(np.diff(eps) <= 0)
            np.testing.assert_allclose(gaussian_delta(eps[eps > 0], mu), deltas[eps > 0], rtol=1e-9)


def test_gaussian_epsilon_edge_cases():
    mu = 1.0
    d0 = gaussian_delta(0.0, mu)
    assert gaussian_epsilon(d0, mu) == 0.0
    assert gaussian_epsilon(min(1.0, d0 * 1.5), mu) == 0.0
    assert gaussian_epsilon(0.0, mu) == math.inf
    assert gaussian_epsilon(1e-6, 0.0) == 0.0
    # large mu / large eps: no overflow, round trip
    eps = gaussian_epsilon(1e-10, 1000.0)
    assert eps == pytest.approx(5e5, rel=1e-1)
    assert gaussian_delta(eps, 1000.0) == pytest.approx(1e-10, rel=1e-9)
    out = gaussian_epsilon(np.array([[1e-5, 1e-6]]), np.array([[1.0], [2.0]]))
    assert out.shape == (2, 2) and np.all(np.diff(out, axis=1) > 0)


@settings(max_examples=60, deadline=None)
@given(
    mu=st.floats(0.01, 100.0),
    eps=st.floats(1e-3, 5e3),
)
def test_gaussian_round_trip(mu, eps):
    d = gaussian_delta(eps, mu)
    if not (1e-300 < d < 0.5):
        return
    e2 = gaussian_epsilon(d, mu)
    assert e2 == pytest.approx(eps, rel=1e-11)


def test_tail_epsilon_is_looser_than_exact():
    deltas = np.logspace(-18, -1, 30)
    for mu in (0.1, 1.0, 5.0):
        tail = privacy_loss_tail_epsilon_gaussian(deltas, mu)
        exact = gaussian_epsilon(deltas, mu)
        assert np.all(tail >= exact)
        pos = tail > 0
        np.testing.assert_allclose(privacy_loss_tail_delta_gaussian(tail[pos], mu), deltas[pos], rtol=1e-9)
    assert privacy_loss_tail_epsilon_gaussian(0.9, 0.1) == 0.0  # clipped, never negative


# ---------------------------------------------------------------------------
# randomized response: brute force over all 2^T output sequences
# ---------------------------------------------------------------------------


def _rr_sequence_probs(eps0: float, steps: int):
    """P and Q probabilities of every one of the 2^T output sequences (no grouping)."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    bits = np.array(list(itertools.product((0, 1), repeat=steps)), dtype=float).reshape(2**steps, steps)
    pp = np.prod(np.where(bits == 1, p, 1 - p), axis=1)
    qq = np.prod(np.where(bits == 1, 1 - p, p), axis=1)
    return pp, qq


def _rr_brute_force_delta(eps: float, eps0: float, steps: int, probs=None) -> float:
    pp, qq = probs if probs is not None else _rr_sequence_probs(eps0, steps)
    return float(np.sum(np.maximum(0.0, pp - math.exp(eps) * qq)))


@pytest.mark.parametrize("eps0,steps", [(0.5, 1), (0.5, 6), (1.2, 9), (0.1, 10), (0.0, 4), (2.0, 0)])
def test_rr_delta_brute_force(eps0, steps):
    eps_grid = np.concatenate([np.linspace(-3, steps * eps0 + 1, 37), (2 * np.arange(steps + 1) - steps) * eps0])
    ours = randomized_response_delta(eps_grid, eps0, steps)
    ref = np.array([_rr_brute_force_delta(e, eps0, steps) for e in eps_grid])
    np.testing.assert_allclose(ours, ref, rtol=1e-11, atol=1e-15)


def _bisect_smallest_eps(delta_fn, target: float, hi: float) -> float:
    lo = 0.0
    if delta_fn(lo) <= target:
        return 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if delta_fn(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@pytest.mark.parametrize("eps0,steps", [(0.5, 6), (1.2, 9), (0.3, 10)])
def test_rr_epsilon_exact(eps0, steps):
    deltas = np.array([1e-12, 1e-6, 1e-4, 1e-3, 1e-2, 0.05, 0.2, 0.5])
    ours = randomized_response_epsilon(deltas, eps0, steps)
    assert np.all(np.diff(ours) <= 0)
    probs = _rr_sequence_probs(eps0, steps)
    for d, e in zip(deltas, ours):
        ref = _bisect_smallest_eps(lambda x: _rr_brute_force_delta(x, eps0, steps, probs), d, steps * eps0 + 1)
        assert e == pytest.approx(ref, abs=1e-9)
        if e > 0:
            # delta(eps) = A - e^eps B cancels near the root: absolute accuracy ~ u * A
            assert randomized_response_delta(e, eps0, steps) == pytest.approx(d, rel=1e-9, abs=1e-15)
            assert randomized_response_delta(e - 1e-7, eps0, steps) > d
    # delta = 0 -> pure DP epsilon T * eps0
    assert randomized_response_epsilon(0.0, eps0, steps) == pytest.approx(steps * eps0, rel=1e-14)


def test_rr_large_steps_and_eps0():
    # binomial log-pmf agrees with scipy where scipy is accurate
    from pld.baselines.exact import _rr_tables

    loss, tail_p, _ = _rr_tables(0.7, 200)
    p = math.exp(0.7) / (1 + math.exp(0.7))
    ref_tail = np.log(stats.binom.sf(np.arange(201) - 1, 200, p))
    np.testing.assert_allclose(tail_p[:150], ref_tail[:150], rtol=1e-10, atol=1e-13)
    # eps0 = 50: p rounds to 1 in floating point; exact T = 1 profile is (e^50 - e^eps)/(1 + e^50)
    assert randomized_response_delta(49.0, 50.0, 1) == pytest.approx(
        (math.exp(50) - math.exp(49)) / (1 + math.exp(50)), rel=1e-13
    )
    # many steps: smooth, monotone, no warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = randomized_response_delta(np.linspace(0, 200, 101), 0.05, 100_000)
        assert np.all(np.diff(d) <= 0)
        e = randomized_response_epsilon(np.logspace(-300, -1, 20), 0.05, 100_000)
        assert np.all(np.diff(e) <= 0) and np.all(np.isfinite(e))


# ---------------------------------------------------------------------------
# Gaussian composed with randomized response
# ---------------------------------------------------------------------------


def _gaussian_rr_brute_force(eps: float, mu: float, eps0: float, steps: int) -> float:
    """Hockey stick of (N(mu,1) x RR^T, N(0,1) x RR^T) by enumeration + quadrature."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    total = 0.0
    for bits in itertools.product((0, 1), repeat=steps):
        ones = sum(bits)
        pp = p**ones * (1 - p) ** (steps - ones)
        qq = (1 - p) ** ones * p ** (steps - ones)
        # P_o phi(y - mu) > e^eps Q_o phi(y)  <=>  y > (eps + log(qq/pp))/mu + mu/2
        ystar = (eps + math.log(qq / pp)) / mu + mu / 2.0
        c = 1.0 / math.sqrt(2 * math.pi)

        def f(y, pp=pp, qq=qq, c=c):
            return c * (pp * math.exp(-0.5 * (y - mu) ** 2) - math.exp(eps) * qq * math.exp(-0.5 * y * y))

        val, _ = integrate.quad(f, ystar, np.inf, epsabs=0, epsrel=1e-12, limit=200)
        total += val
    return total


@pytest.mark.parametrize("mu,eps0,steps", [(1.0, 0.3, 3), (0.5, 1.0, 4), (2.0, 0.1, 2)])
def test_gaussian_rr_brute_force(mu, eps0, steps):
    for eps in (-0.5, 0.0, 0.4, 1.0, 2.5):
        ref = _gaussian_rr_brute_force(eps, mu, eps0, steps)
        assert gaussian_rr_delta(eps, mu, eps0, steps) == pytest.approx(ref, rel=1e-8, abs=1e-14)


def test_gaussian_rr_limits_and_round_trip():
    eps = np.linspace(-1, 6, 29)
    np.testing.assert_allclose(gaussian_rr_delta(eps, 1.3, 0.4, 0), gaussian_delta(eps, 1.3), rtol=1e-13)
    np.testing.assert_allclose(
        gaussian_rr_delta(eps, 0.0, 0.4, 5), randomized_response_delta(eps, 0.4, 5), rtol=1e-12, atol=1e-16
    )
    d = gaussian_rr_delta(eps, 1.0, 0.3, 8)
    assert np.all(np.diff(d) < 0)
    for delta in (1e-12, 1e-6, 1e-3):
        e = gaussian_rr_epsilon(delta, 1.0, 0.3, 8)
        assert gaussian_rr_delta(e, 1.0, 0.3, 8) == pytest.approx(delta, rel=1e-10)
        # composing can only hurt: larger than each part alone
        assert e > gaussian_epsilon(delta, 1.0)
        assert e > randomized_response_epsilon(delta, 0.3, 8)


# ---------------------------------------------------------------------------
# Laplace
# ---------------------------------------------------------------------------


def _laplace_delta_quad(eps: float, b: float, s: float) -> float:
    p = lambda y: stats.laplace.pdf(y, loc=0.0, scale=b)  # noqa: E731
    q = lambda y: stats.laplace.pdf(y, loc=s, scale=b)  # noqa: E731
    f = lambda y: max(0.0, p(y) - math.exp(eps) * q(y))  # noqa: E731
    pts = sorted({0.0, s, min(max((s - b * eps) / 2, 0.0), s)})
    edges = [-np.inf] + pts + [np.inf]
    total = 0.0
    for a, c in zip(edges[:-1], edges[1:]):
        if c > a:
            total += integrate.quad(f, a, c, epsabs=1e-15, epsrel=1e-12, limit=200)[0]
    return total


@pytest.mark.parametrize("b,s", [(1.0, 1.0), (0.5, 1.0), (2.0, 3.0), (1.0, 0.2)])
def test_laplace_delta_matches_integration(b, s):
    r = s / b
    for eps in (-2 * r - 0.5, -r, -0.5 * r, 0.0, 0.3 * r, r, 1.5 * r):
        assert laplace_delta(eps, b, s) == pytest.approx(_laplace_delta_quad(eps, b, s), rel=1e-8, abs=1e-13)


def test_laplace_pieces_and_inverse():
    r = 2.0
    eps = np.linspace(-5, 5, 1001)
    d = laplace_delta(eps, 0.5)
    assert np.all(np.diff(d) <= 0)
    np.testing.assert_allclose(d[eps >= r], 0.0)
    np.testing.assert_allclose(d[eps < -r], -np.expm1(eps[eps < -r]), rtol=1e-14)
    mid = (eps >= -r) & (eps < r)
    np.testing.assert_allclose(d[mid], 1 - np.exp((eps[mid] - r) / 2), rtol=1e-12)
    for delta in (0.0, 1e-9, 0.1, 0.5):
        e = laplace_epsilon(delta, 0.5)
        if e > 0:
            # ill-conditioned near eps = r (eps - r is formed with cancellation)
            assert laplace_delta(e, 0.5) == pytest.approx(delta, rel=1e-6)
    assert laplace_epsilon(0.0, 0.5) == r
    assert laplace_epsilon(0.9, 0.5) == 0.0


# ---------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: gaussian_delta(1.0, -1.0), ValueError, "mu"),
        (lambda: gaussian_delta("a", 1.0), TypeError, "epsilon"),
        (lambda: gaussian_delta(float("nan"), 1.0), ValueError, "epsilon"),
        (lambda: gaussian_epsilon(1.5, 1.0), ValueError, "delta"),
        (lambda: gaussian_epsilon(-1e-3, 1.0), ValueError, "delta"),
        (lambda: gaussian_mu(0.0, 10), ValueError, "noise_multiplier"),
        (lambda: gaussian_mu(1.0, -1), ValueError, "steps"),
        (lambda: gaussian_mu(1.0, 1.5), ValueError, "steps"),  # type: ignore[arg-type]  # invalid on purpose
        (lambda: gaussian_mu(1.0, "3"), TypeError, "steps"),  # type: ignore[arg-type]  # invalid on purpose
        (lambda: gaussian_mu(1.0, True), TypeError, "steps"),
        (lambda: randomized_response_delta(0.0, -0.1, 3), ValueError, "epsilon0"),
        (lambda: randomized_response_epsilon(1e-3, 0.5, -2), ValueError, "steps"),
        (lambda: gaussian_rr_delta(0.0, 1.0, 0.5, 2.5), ValueError, "steps_rr"),  # type: ignore[arg-type]  # invalid on purpose
        (lambda: laplace_delta(0.0, 0.0), ValueError, "scale"),
        (lambda: laplace_delta(0.0, 1.0, -1.0), ValueError, "sensitivity"),
        (lambda: privacy_loss_tail_epsilon_gaussian(1e-5, 0.0), ValueError, "mu"),
    ],
)
def test_validation(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
