"""The compiled passes behind truncation and the FFT power's assembly, against
the array expressions and exact arithmetic they replace.

* ``untilted_mass_bound``: the mass a truncation moves, bounded in one pass;
  checked against the exact sum of its terms (rationals) and the error ball.
* ``chernoff_exponent``, ``log_two_tails``: Chernoff minima over a table of
  log-MGF bounds, bit for bit the array expressions (NaN and -inf included).
* ``exact_sum``: sums of products of doubles and integers against exact rationals.
* ``GridPLD._truncated`` on a scaled buffer: the same grid as scaling first.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pld.engine.grid import GridPLD
from pld.engine.mgf_bounds import THETA
from pld.engine.outward import exact_sum
from pld.kernels import chernoff_exponent, log_two_tails, untilted_mass_bound


def _terms(p, start, stop, k0, h, lam, log_scale, div, mul):
    i = np.arange(start, stop)
    w = np.exp(log_scale - lam * ((k0 + i) * h))
    q = np.maximum((p[start:stop] / div) * mul, 0.0)
    return q, w


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(0, 400), k0=st.integers(-10 ** 6, 10 ** 6),
       h=st.floats(1e-6, 1.0), lam=st.floats(0.0, 50.0), log_scale=st.floats(-50.0, 50.0),
       err=st.floats(0.0, 1e-6), scaled=st.booleans())
def test_untilted_mass_bound_covers_the_exact_sum_and_the_error_ball(seed, n, k0, h, lam, log_scale, err, scaled):
    rng = np.random.default_rng(seed)
    p = rng.exponential(1.0, n) * np.where(rng.random(n) < 0.1, -1e-3, 1.0)
    start, stop = sorted(int(x) for x in rng.integers(0, n + 1, 2))
    div, mul = (float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 2.0))) if scaled else (1.0, 1.0)
    got = untilted_mass_bound(p, start, stop, k0, h, lam, log_scale, err, div, mul)
    if stop == start:
        assert got == 0.0
        return
    expo = log_scale - lam * ((k0 + np.arange(start, stop)) * h)
    if expo.max() > 700.0:
        assert got == math.inf
        return
    q, _ = _terms(p, start, stop, k0, h, lam, log_scale, div, mul)
    # the exact weights e^{log_scale - lam (k0 + i) h} (40 digits: the real
    # exponent of the stored doubles, not the rounded one), the exact sum
    # against the entries as stored, and the worst error ball err ||w||_2
    with mpmath.workdps(40):
        w = [mpmath.exp(mpmath.mpf(log_scale) - mpmath.mpf(lam) * (k0 + i) * mpmath.mpf(h))
             for i in range(start, stop)]
        exact = mpmath.fsum(mpmath.mpf(float(a)) * b for a, b in zip(q, w))
        ball = err * mpmath.sqrt(mpmath.fsum(b * b for b in w))
        need = exact + ball
    assert got >= need
    floors = (stop - start) * 2.0 ** -1074 + err * math.sqrt(2.0 * (stop - start) * 2.0 ** -1074)
    assert got <= need * (1.0 + 1e-7) + floors * 1.01 + 1e-300


def test_untilted_mass_bound_gives_up_where_a_weight_overflows():
    p = np.ones(8)
    # the weights grow downwards (lam > 0): the first entry's exponent is 701
    assert untilted_mass_bound(p, 0, 8, 0, 1.0, 1.0, 701.0, 0.0, 1.0, 1.0) == math.inf
    assert math.isfinite(untilted_mass_bound(p, 2, 8, 0, 1.0, 1.0, 701.0, 0.0, 1.0, 1.0))


finite_or_not = st.one_of(st.floats(-1e4, 1e4), st.just(-math.inf), st.just(math.inf), st.just(math.nan))


@settings(max_examples=300, deadline=None)
@given(b=st.lists(finite_or_not, min_size=THETA.size, max_size=THETA.size), t=st.floats(-1e3, 1e3),
       upper=st.booleans())
@example(b=[-math.inf] * THETA.size, t=1.0, upper=True)
def test_chernoff_exponent_bounds_the_exact_minimum(b, t, upper):
    """At least the exact ``min (b_j - theta_j t)`` (rational arithmetic), and
    above the rounded array expression by no more than its rounding."""
    arr = np.array(b)
    sel = THETA > 0 if upper else THETA < 0
    with np.errstate(invalid="ignore"):
        rounded = float((arr[sel] - THETA[sel] * t).min())
    got = chernoff_exponent(arr, THETA, t, 1 if upper else -1)
    if math.isnan(rounded) or not math.isfinite(rounded):
        assert got == rounded or (math.isnan(got) and math.isnan(rounded))
        return
    exact = min(Fraction(x) - Fraction(float(th)) * Fraction(t) for x, th in zip(b, THETA[sel]) if math.isfinite(x))
    assert Fraction(got) >= exact
    scale = max(abs(x) for x in b if math.isfinite(x)) + float(np.max(np.abs(THETA))) * abs(t)
    assert got - rounded <= 1e-14 * scale + 1e-300


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 45), seed=st.integers(0, 2 ** 32 - 1), c=st.integers(1, 10 ** 9),
       lo=st.floats(-1e3, 1e3), hi=st.floats(-1e3, 1e3), holes=st.booleans())
def test_log_two_tails_bounds_the_exact_value(k, seed, c, lo, hi, holes):
    """At least ``log(e^up + e^dn)`` of the exact minima (40-digit mpmath),
    and within its rounding of the array expression."""
    rng = np.random.default_rng(seed)
    th_up, th_dn = rng.uniform(1e-3, 1e3, k), rng.uniform(1e-3, 1e3, k)
    pos, neg = rng.normal(0.0, 1.0, k), rng.normal(0.0, 1.0, k)
    if holes:
        pos[rng.integers(0, k)] = -math.inf
        neg[:] = -math.inf
    rounded = float(np.logaddexp(float(np.min(c * pos - th_up * hi)), float(np.min(c * neg + th_dn * lo))))
    got = log_two_tails(th_up, pos, th_dn, neg, float(c), lo, hi)
    with mpmath.workdps(40):
        def side(vals, ths, x, s):
            # (a bound of -inf: that parameter's MGF, and so the tail, is 0)
            return min(c * mpmath.mpf(float(v)) + s * mpmath.mpf(float(t)) * mpmath.mpf(x)
                       if math.isfinite(v) else mpmath.mpf("-inf") for v, t in zip(vals, ths))
        total = mpmath.exp(side(pos, th_up, hi, -1)) + mpmath.exp(side(neg, th_dn, lo, 1))
        exact = mpmath.log(total) if total > 0 else mpmath.mpf("-inf")
        assert mpmath.mpf(got) >= exact
    if math.isfinite(rounded):
        assert got - rounded <= 1e-14 * (abs(rounded) + c * 4.0 + 1e3 * 1e3) + 1e-300
    else:
        assert got == rounded


@settings(max_examples=500, deadline=None)
@given(c=st.one_of(st.integers(0, 10 ** 6), st.integers(0, 2 ** 60)),
       x=st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
                   st.floats(min_value=-1e-250, max_value=1e-250)))
@example(c=3, x=1e-310)
@example(c=2 ** 53 + 1, x=0.1)
def test_an_integer_scale_is_the_rounded_product_and_its_rounded_rest(c, x):
    exact = Fraction(c) * Fraction(x)
    try:
        s = float(exact)
    except OverflowError:
        return
    if math.isinf(s):
        return
    got = exact_sum((c, x))
    assert got == (s, float(exact - Fraction(s)))
    assert math.copysign(1.0, got[0]) == math.copysign(1.0, s)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(3, 300), pessimistic=st.booleans(),
       lam=st.floats(0.0, 20.0), carry=st.booleans())
def test_truncating_a_scaled_buffer_is_truncating_the_scaled_grid(seed, n, pessimistic, lam, carry):
    rng = np.random.default_rng(seed)
    raw = rng.exponential(1.0, n)
    div, mul = float(raw.sum()), float(rng.uniform(0.99, 1.01))
    h, k0 = 0.01, int(rng.integers(-n, n))
    bound = None
    if pessimistic and carry:
        bound = np.full(THETA.size, 0.0) + np.abs(THETA) * 5.0
    grid = GridPLD(h, k0, raw, lam, 0.3, 1e-9, 1e-12, pessimistic, bound, None, 0.0)
    lo, hi = sorted(float(x) for x in rng.uniform((k0 - 2) * h, (k0 + n + 2) * h, 2))
    beyond = (float(rng.uniform(0, 1e-9)), 0.0) if pessimistic else (0.0, 0.0)
    got = grid._truncated(raw, (div, mul), lo, hi, beyond)
    scaled = raw / div
    scaled *= mul
    want = GridPLD(h, k0, scaled, lam, 0.3, 1e-9, 1e-12, pessimistic, bound, None, 0.0).truncate(lo, hi, beyond)
    assert got.p is not raw and not np.shares_memory(got.p, raw)
    assert got.k0 == want.k0 and np.array_equal(got.p, want.p)
    assert got.inf_mass == want.inf_mass and got.err == want.err
    assert (got.log_mgf_bound is None) == (want.log_mgf_bound is None)
    if got.log_mgf_bound is not None:
        assert np.array_equal(got.log_mgf_bound, want.log_mgf_bound)


@settings(max_examples=300, deadline=None)
@given(a=st.floats(-1e3, 1e3), lam=st.floats(-1e3, 1e3), k=st.integers(-10 ** 12, 10 ** 12),
       h=st.floats(1e-12, 10.0), c=st.floats(-1e3, 1e3))
@example(a=0.0, lam=0.0, k=0, h=1.0, c=-0.0)
@example(a=1e-310, lam=1e-300, k=3, h=1e-20, c=-1e-310)
def test_exact_sum_is_rational_arithmetic_rounded(a, lam, k, h, c):
    exact = Fraction(a) + Fraction(lam) * Fraction(k) * Fraction(h) + Fraction(c)
    s = float(exact)
    got = exact_sum((a,), (lam, k, h), (c,))
    assert got == (s, float(exact - Fraction(s)))
    assert math.copysign(1.0, got[0]) == math.copysign(1.0, s)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(1, 3000), k0=st.integers(-10 ** 6, 10 ** 6),
       h=st.floats(1e-5, 0.5), sparse=st.booleans())
def test_lattice_mgf_bound_is_the_bound_on_the_formed_losses(seed, n, k0, h, sparse):
    from pld.engine.mgf_bounds import _mgf_bound_from, _mgf_bound_lattice

    rng = np.random.default_rng(seed)
    lm = rng.normal(-8.0, 3.0, n)
    if sparse:
        lm[rng.random(n) < 0.9] = -np.inf
    loss = (k0 + np.arange(n)) * h
    assert np.array_equal(_mgf_bound_lattice(lm, k0, h), _mgf_bound_from(lm, loss, h))


def test_untilted_mass_bound_covers_the_rounding_of_its_exponents():
    """Weights e^{log_scale - lam l} with lam l ~ 1e3 and exponents near 0:
    the computed exponent is off by ~1e-13, far more than the dot product's
    own rounding; the bound must cover the exact weights anyway (the array
    form this kernel replaced fell below the exact sum in ~40% of such cases)."""
    rng = np.random.default_rng(1)
    for _ in range(60):
        k0, n = int(rng.integers(10 ** 5, 10 ** 6)), 50
        h, lam = float(rng.uniform(1e-4, 1e-3)), float(rng.uniform(1, 5))
        log_scale = float(lam * (k0 + 25) * h + rng.uniform(-5, 5))
        p = rng.exponential(1.0, n)
        got = untilted_mass_bound(p, 0, n, k0, h, lam, log_scale, 1e-9, 1.0, 1.0)
        with mpmath.workdps(40):
            w = [mpmath.exp(mpmath.mpf(log_scale) - mpmath.mpf(lam) * (k0 + i) * mpmath.mpf(h)) for i in range(n)]
            need = (mpmath.fsum(mpmath.mpf(float(a)) * b for a, b in zip(p, w))
                    + 1e-9 * mpmath.sqrt(mpmath.fsum(b * b for b in w)))
        assert need <= got <= need * (1.0 + 1e-11)
