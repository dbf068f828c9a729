"""Error bounds of the cell masses, against mpmath, and the dominated merge under them.

The dominated side places a merged cell on a grid point only if its computed
loss clears the point by a bound on that loss's error.  These tests check the
bounds against 50-digit arithmetic (not against pld's own numbers), and that
the merge stays dominated when its inputs are moved adversarially anywhere
within the bounds: the exact cell pair (computed in mpmath) must have at least
the merged grid's delta at every epsilon.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_ndtr

from pld.kernels import optimistic_merge_centred
from pld.mechanisms.models import LOG_NDTR_ULPS, LossModel, NormalBase, normal_interval_logmass_bounds

U = 2.0 ** -53
mp.mp.dps = 50


def _log_mass_exact(a: float, b: float, mean: float, sd: float):
    za = (mp.mpf(a) - mp.mpf(mean)) / mp.mpf(sd)
    zb = (mp.mpf(b) - mp.mpf(mean)) / mp.mpf(sd)
    # (the upper tail as 1 - Phi: 50 digits do not survive Phi(14) - Phi(13))
    m = mp.ncdf(zb) - mp.ncdf(za) if za + zb < 0 else mp.ncdf(-za) - mp.ncdf(-zb)
    return mp.log(m) if m > 0 else None


def test_log_ndtr_within_its_stated_error():
    rng = np.random.default_rng(7)
    z = np.concatenate([rng.uniform(-38.0, 38.0, 600), rng.uniform(-6.0, 6.0, 400)])
    lz = log_ndtr(z)
    worst = 0.0
    for zi, li in zip(z, lz):
        exact = mp.log(mp.ncdf(mp.mpf(float(zi))))
        worst = max(worst, float(abs(mp.mpf(float(li)) - exact) / (U * (1 + abs(exact)))))
    # the bound uses LOG_NDTR_ULPS; what we measured is well inside it
    assert worst <= LOG_NDTR_ULPS / 2, worst


@settings(max_examples=150, deadline=None)
@given(a=st.floats(-30.0, 30.0), log_width=st.floats(-9.0, 1.0), mean=st.floats(-3.0, 3.0),
       log_sd=st.floats(-1.0, 1.0))
def test_normal_interval_log_mass_within_its_bound(a, log_width, mean, log_sd):
    b = a + 10.0 ** log_width
    sd = 10.0 ** log_sd
    r, e = normal_interval_logmass_bounds(np.array([a]), np.array([b]), mean, sd)
    exact = _log_mass_exact(a, b, mean, sd)
    if exact is None or not np.isfinite(r[0]):
        return
    assert abs(mp.mpf(float(r[0])) - exact) <= e[0], (r[0], exact, e[0])


def _model(sigma: float, q: float, direction: str) -> LossModel:
    """The Poisson-subsampled Gaussian of DP-SGD, base loss x ~ N(+-mu^2/2, mu^2)."""
    mu = 1.0 / sigma
    empty = np.zeros(0)
    return LossModel(empty, empty, empty, NormalBase(mu * mu / 2, -mu * mu / 2, mu), q, direction)


def _exact_cell(model: LossModel, xa: float, xb: float):
    """log P', log Q' of the base cell (xa, xb] in 50 digits."""
    base = model.base
    assert isinstance(base, NormalBase)
    lp = _log_mass_exact(xa, xb, base.mean_p, base.sd)
    lq = _log_mass_exact(xa, xb, base.mean_q, base.sd)
    if lp is None or lq is None:
        return None
    q = mp.mpf(model.sampling_rate)
    mix = mp.log((1 - q) * mp.exp(lq) + q * mp.exp(lp))
    return (mix, lq) if model.direction == "remove" else (lq, mix)


@settings(max_examples=60, deadline=None)
@given(sigma=st.floats(0.4, 5.0), log_q=st.floats(-6.0, 0.0), direction=st.sampled_from(["remove", "add"]),
       log_h=st.floats(-9.0, -2.0), centre=st.floats(-3.0, 3.0))
def test_subsampled_cells_within_their_bounds(sigma, log_q, direction, log_h, centre):
    q = min(1.0, 10.0 ** log_q)
    model = _model(sigma, q, direction)
    lo, hi = model.loss_range()
    h = 10.0 ** log_h * max(hi - lo, 1e-12)
    mid = lo + (hi - lo) * (0.5 + centre / 8.0)
    grid = mid + h * np.arange(-20, 21)
    got = model.cells_with_errors(grid)
    assert got is not None
    lp, lq, loss_err, mass_err = got
    x = model.x_of_loss(grid)
    if direction == "add":
        x = x[::-1]
    edges = np.concatenate(([-np.inf], x, [np.inf]))
    checked = 0
    for i in range(1, len(grid)):
        j = i if direction == "remove" else len(grid) - i
        xa, xb = float(edges[j]), float(edges[j + 1])
        if not (np.isfinite(lp[i]) and np.isfinite(lq[i])) or not xa < xb:
            continue
        ex = _exact_cell(model, xa, xb)
        if ex is None:
            continue
        ex_lp, ex_lq = ex
        assert abs(mp.mpf(float(lp[i])) - ex_lp) <= mass_err[i], (i, lp[i], ex_lp, mass_err[i])
        got_loss = mp.mpf(float(lp[i])) - mp.mpf(float(lq[i]))
        assert abs(got_loss - (ex_lp - ex_lq)) <= loss_err[i], (i, got_loss, ex_lp - ex_lq, loss_err[i])
        checked += 1
    assert checked > 0


def _merged_delta_exceeds_exact(seed: int, push: float | None, told: float | None, weight: float = 1.0,
                                free: float = -math.inf) -> float:
    """Largest relative ``delta_merged(eps) - delta_exact(eps)`` over a range of eps.

    The merge's inputs are pushed up (each loss by its error bound when
    ``push`` is None, else by ``push`` spacings; P-masses up by their bound)
    and the kernel is told the bounds (``told`` None) or ``told`` spacings.
    ``weight`` (per spacing) and ``free`` steer the merge's choices (undone
    lifts, the bottom's rounding): validity must not depend on them.
    """
    rng = np.random.default_rng(seed)
    sigma, q = float(rng.uniform(0.6, 2.0)), float(10 ** rng.uniform(-5, -2))
    model = _model(sigma, q, "remove")
    mu = 1.0 / sigma
    width = q * mu * 6.0  # the bulk of one subsampled step
    h = width / 60.0
    k_lo = int(math.floor(-width / h))
    n = 2 * 60 + 1
    pts = np.arange(n, dtype=np.int64)
    edges = (k_lo + np.concatenate(([-0.5], 0.5 * (pts[:-1] + pts[1:]), [n - 0.5]))) * h
    lp, lq, loss_err, mass_err = model.cells_with_errors(edges)
    lp, lq, loss_err, mass_err = lp[1:], lq[1:], loss_err[1:], mass_err[1:]
    # exact cells in 50 digits, by the same base cuts
    xe = np.concatenate((model.x_of_loss(edges), [np.inf]))
    exact = [_exact_cell(model, float(xe[i]), float(xe[i + 1])) if xe[i] < xe[i + 1] else None
             for i in range(len(lp))]
    ok = np.isfinite(lp) & np.isfinite(lq)
    up = loss_err if push is None else np.full_like(lp, push * h)
    with np.errstate(invalid="ignore"):
        lp_adv = np.where(ok, lp + mass_err, lp)
        lq_adv = np.where(ok, lp_adv - (lp - lq) - up, lq)
    said_loss = loss_err if told is None else np.full_like(lp, told * h)
    said_mass = mass_err if told is None else np.zeros_like(lp)
    out = optimistic_merge_centred(lp_adv, lq_adv, k_lo + pts, h, np.where(ok, said_loss, np.inf), said_mass,
                                   weight / h, free)
    g = [mp.mpf(float((k_lo + int(k)) * h)) for k in pts]
    worst = -mp.inf
    for eps in np.linspace(-width, width, 41):
        e = mp.mpf(float(eps))
        d_out = mp.fsum(mp.mpf(float(o)) * (1 - mp.exp(e - gi)) for o, gi in zip(out, g) if o > 0 and gi > e)
        d_ex = mp.fsum(max(mp.mpf(0), mp.exp(c[0]) - mp.exp(e) * mp.exp(c[1])) for c in exact if c is not None)
        if d_ex > 0:
            worst = max(worst, (d_out - d_ex) / d_ex)
    return float(worst)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("weight, free", [(1e-6, -math.inf), (10.0, -math.inf), (1.0, 0.0)])
def test_dominated_merge_stays_dominated_within_the_error_bounds(seed, weight, free):
    assert _merged_delta_exceeds_exact(seed, None, None, weight, free) <= 0.0
    # inputs off by a third of a spacing, and the kernel told so
    assert _merged_delta_exceeds_exact(seed, 0.3, 0.3, weight, free) <= 0.0


def test_the_margins_matter():
    """Inputs off by a third of a spacing and the kernel told nothing break
    domination: the test above can fail."""
    assert max(_merged_delta_exceeds_exact(seed, 0.3, 0.0) for seed in range(4)) > 0.0


def test_consecutive_cells_take_the_same_bounds_as_single_ones():
    """The fast path for consecutive edges (what the discretiser asks) agrees
    with the cell-by-cell one, values and bounds."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        e = np.concatenate(([-np.inf], np.sort(rng.uniform(-30, 30, rng.integers(2, 50))), [np.inf]))
        mean, sd = rng.uniform(-2, 2), rng.uniform(0.2, 3)
        r1, e1 = normal_interval_logmass_bounds(e[:-1], e[1:], mean, sd)
        r2, e2 = normal_interval_logmass_bounds(e[:-1, None], e[1:, None], mean, sd)
        np.testing.assert_allclose(r1, r2.ravel(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(e1, e2.ravel(), rtol=1e-12, atol=0)
