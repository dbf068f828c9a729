"""The closed form for compositions of Gaussian mechanisms (pld.engine.gaussian_exact)
against the Balle-Wang profile evaluated in 60-digit arithmetic (mpmath)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pld
from pld.engine import gaussian_exact as ge

mp.mp.dps = 60
pytestmark = pytest.mark.closed_forms


def _delta(mu, eps):
    mu, eps = mp.mpf(mu), mp.mpf(eps)
    return mp.ncdf(mu / 2 - eps / mu) - mp.exp(eps) * mp.ncdf(-mu / 2 - eps / mu)


def _epsilon(mu, delta):
    d = mp.mpf(delta)
    if _delta(mu, 0) <= d:
        return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(mu) ** 2 + 50 * mp.mpf(mu) + 50
    for _ in range(300):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _delta(mu, mid) > d else (lo, mid)
    return hi


@settings(max_examples=60, deadline=None)
@given(log_mu=st.floats(-4.0, 4.0), eps=st.floats(-50.0, 5e4))
def test_delta_bracket_contains_the_profile(log_mu, eps):
    mu = 10.0 ** log_mu
    lo, hi = ge.delta_bounds(mu, eps)
    exact = _delta(mu, eps)
    assert lo[0] <= exact <= hi[0]
    if exact > 1e-300:
        # (a difference of two normal CDFs near 1/2 where mu is tiny: ~1e-13
        # absolute, which moves epsilon by ~2e-13)
        assert hi[0] - lo[0] <= 1e-9 * exact + 1e-11


@settings(max_examples=60, deadline=None)
@given(log_mu=st.floats(-3.0, 3.5), log_delta=st.floats(-30.0, -0.01))
def test_epsilon_bracket_contains_the_profile_and_is_narrow(log_mu, log_delta):
    mu, delta = 10.0 ** log_mu, 10.0 ** log_delta
    lo, hi = ge.epsilon_bounds(mu, delta)
    exact = _epsilon(mu, delta)
    assert lo <= exact <= hi
    assert _delta(mu, hi) <= delta  # the upper end is a proof
    assert hi - lo <= 1e-6 * hi + 1e-12  # (the default target is 1e-4 * eps + 1e-6)


def test_compositions_of_gaussians_use_it_at_any_count():
    # issue 19: Gaussian(2.031) x 475 761 360 871 at delta = 8.6e-21 gave (0, 5.7689e10)
    p = pld.Gaussian(2.031).pld().self_compose(475_761_360_871)
    lo, hi = p.epsilon_bounds(8.6e-21)
    mu = math.sqrt(475_761_360_871) / 2.031
    exact = _epsilon(mu, 8.6e-21)
    assert lo <= exact <= hi and hi - lo <= 1e-4 * hi
    # (the issue quoted 5.76865e10; the profile says 5.767174e10: at 5.76865e10,
    # mu/2 - eps/mu = -54 and delta ~ Phi(-54), far below 8.6e-21)
    assert float(exact) == pytest.approx(5.767174e10, rel=1e-6)
    # heterogeneous: mu^2 adds, whatever the order
    d = (pld.Gaussian(1.0).pld().compose(pld.Gaussian(3.0).pld()).compose(pld.Gaussian(0.05).pld()))
    d2 = (pld.Gaussian(0.05).pld().compose(pld.Gaussian(1.0).pld()).compose(pld.Gaussian(3.0).pld()))
    mu = math.sqrt(1 + 1 / 9 + 400)
    for q in (d, d2):
        lo, hi = q.epsilon_bounds(1e-5)
        assert lo <= _epsilon(mu, 1e-5) <= hi
        assert float(_epsilon(mu, 1e-5)) == pytest.approx(285.0657, abs=1e-4)
    # sensitivities, and dpsgd at q = 1 (full batch) is the Gaussian too
    p = pld.Gaussian(2.0, sensitivity=3.0).pld().self_compose(7)
    lo, hi = p.delta_bounds(np.array([1.0, 10.0]))
    for i, e in enumerate((1.0, 10.0)):
        assert lo[i] <= _delta(math.sqrt(7) * 1.5, e) <= hi[i]
    lo, hi = pld.dpsgd(1.3, 1.0, 100).epsilon_bounds(1e-5)
    assert lo <= _epsilon(math.sqrt(100) / 1.3, 1e-5) <= hi
    assert pld.dpsgd(1.3, 1.0, 100).explain(1e-5)["method"].startswith("closed form")


def test_the_engine_agrees_with_the_closed_form(monkeypatch):
    import pld.distribution as engine

    p = pld.Gaussian(8.0).pld().self_compose(120)
    exact = p.epsilon_bounds(1e-6)
    monkeypatch.setattr(engine, "CLOSED_FORMS", False)
    fft = pld.Gaussian(8.0).pld().self_compose(120).epsilon_bounds(1e-6)
    assert fft[0] <= exact[0] <= exact[1] <= fft[1]
