"""Self-composition by one FFT power (``pld.engine.power``) keeps the certificate.

Truths used here do not come from the power code:

* the exact delta of a composition of Gaussian mechanisms (``pld.baselines.exact``,
  closed form): the dominating grid's power must stay above it and the
  dominated grid's below it, on both sides of the query;
* the c-fold linear convolution of the same first-step vector in extended
  precision (``numpy.longdouble``, 11 more bits than the FFT): the power's
  result must lie within its stated l2 error of it, also when the composed law
  does not fit the transform and the circular convolution folds mass over;
* the mass at ``+inf`` of c approximate-DP steps, ``1 - (1 - delta0)^c``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pld.baselines.exact import gaussian_delta
from pld.engine import power as _power
from pld.engine.discretize import discretize
from pld.engine.grid import GridPLD
from pld.mechanisms import ApproxDP, Gaussian


def _gaussian_step(sigma: float, h: float, lam: float, pessimistic: bool) -> GridPLD:
    model = Gaussian(sigma).loss_model("remove")
    mu = 1.0 / sigma
    lo, hi = 0.5 * mu * mu - 14.0 * mu, 0.5 * mu * mu + 14.0 * mu
    return discretize(model, h, int(math.floor(lo / h)), int(math.ceil(hi / h)), lam, pessimistic)


def _window(g: GridPLD, c: int, width_sd: float = 14.0) -> tuple[float, float]:
    losses = g.losses()
    with np.errstate(under="ignore"):
        w = np.exp(g.log_masses() - np.max(g.log_masses()))
    w /= w.sum()
    m = float(np.dot(w, losses))
    sd = math.sqrt(float(np.dot(w, (losses - m) ** 2)))
    return c * m - width_sd * math.sqrt(c) * sd - g.h, c * m + width_sd * math.sqrt(c) * sd + g.h


@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.6, 4.0), c=st.integers(4, 3000), lam_frac=st.floats(0.0, 1.0),
       h_frac=st.floats(0.002, 0.03))
@example(sigma=1.0, c=4, lam_frac=5e-324, h_frac=0.015625)  # a denormal tilt (long run)
def test_power_brackets_exact_gaussian_composition(sigma, c, lam_frac, h_frac):
    mu1 = 1.0 / sigma
    h = h_frac * mu1
    mu = math.sqrt(c) * mu1
    # query points around the bulk and into the tail, tilt up to the Chernoff one there
    eps = 0.5 * mu * mu + mu * np.array([-1.0, 0.0, 1.5, 3.0, 5.0])
    lam = lam_frac * 4.0 / mu
    exact = np.asarray(gaussian_delta(eps, mu))
    for pessimistic in (True, False):
        g = _gaussian_step(sigma, h, lam, pessimistic)
        out = _power.self_compose_powers(g, (c,), (_window(g, c),), 1 << 20)
        assert out is not None
        d = out[0].delta(eps)
        if pessimistic:
            assert np.all(d >= exact * (1 - 1e-9)), (d, exact)
        else:
            assert np.all(d <= exact * (1 + 1e-9) + 1e-300), (d, exact)


def _reference_power(p: np.ndarray, c: int) -> np.ndarray:
    """c-fold linear convolution in extended precision (binary powering)."""
    base = p.astype(np.longdouble)
    acc: np.ndarray | None = None
    e = c
    while e:
        if e & 1:
            acc = base if acc is None else np.convolve(acc, base)
        e >>= 1
        if e:
            base = np.convolve(base, base)
    assert acc is not None  # (c >= 1)
    return acc


def _random_step(seed: int, n: int, h: float, lam: float) -> GridPLD:
    rng = np.random.default_rng(seed)
    losses = (-n // 3 + np.arange(n)) * h
    log_p = -0.5 * ((losses - losses.mean()) / (0.2 * n * h)) ** 2
    spikes = rng.choice(n, size=3, replace=False)
    log_p[spikes] += rng.uniform(0.0, 3.0, size=3)
    log_p += rng.uniform(-0.5, 0.0, size=n)
    return GridPLD.from_log_masses(log_p, -n // 3, h, lam, 0.0, bool(seed % 2))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 120), c=st.integers(4, 96),
       lam=st.floats(0.0, 3.0), narrow=st.booleans())
def test_power_within_its_error_of_extended_precision(seed, n, c, lam, narrow):
    h = 0.05
    g = _random_step(seed, n, h, lam)
    ref = _reference_power(g.p, c)
    s_lo = c * g.k0
    # a window of a few sd: the c-fold support no longer fits the transform,
    # so the circular result folds tail mass in and must say so in its error
    lo, hi = _window(g, c, 3.0 if narrow else 40.0)
    out = _power.self_compose_powers(g, (c,), ((lo, hi),), 1 << 16)
    assert out is not None
    r = out[0]
    # undo the normalisation: r.p * e^{log_scale} is the c-fold of g.p * e^{g.log_scale}
    scale = math.exp(r.log_scale - c * g.log_scale)
    idx = r.k0 - s_lo + np.arange(r.size)
    want = np.asarray(ref[idx], dtype=float)
    got = r.p * scale
    if r.pessimistic:
        # the lowest kept point also holds the mass moved up from below
        got, want = got[1:], want[1:]
    dist = float(np.linalg.norm(got - want))
    assert dist <= r.err * scale * 1.0001 + 1e-300, (dist, r.err * scale)


def test_aliasing_is_counted_when_the_law_outgrows_the_transform():
    """Exact aliasing: a wide step composed many times on a transform that
    cannot hold the c-fold support; the error bound covers the fold-over."""
    g = _random_step(7, 200, 0.05, 0.0)
    c = 64
    lo, hi = _window(g, c, 4.0)
    out = _power.self_compose_powers(g, (c,), ((lo, hi),), 1 << 14)
    assert out is not None
    r = out[0]
    assert (c * (g.size - 1) + 1) > 1 << 13  # support longer than any transform used here
    ref = _reference_power(g.p, c)
    scale = math.exp(r.log_scale - c * g.log_scale)
    idx = r.k0 - c * g.k0 + np.arange(1, r.size)
    dist = float(np.linalg.norm(r.p[1:] * scale - np.asarray(ref[idx], dtype=float)))
    assert dist <= r.err * scale


def test_power_and_remainder_share_one_transform():
    g = _random_step(3, 80, 0.05, 0.5)
    c, rem = 64, 23
    out = _power.self_compose_powers(g, (c, rem), (_window(g, c, 30.0), _window(g, rem, 30.0)), 1 << 16)
    assert out is not None and len(out) == 2
    for r, k in zip(out, (c, rem)):
        ref = _reference_power(g.p, k)
        scale = math.exp(r.log_scale - k * g.log_scale)
        idx = r.k0 - k * g.k0 + np.arange(1, r.size)
        dist = float(np.linalg.norm(r.p[1:] * scale - np.asarray(ref[idx], dtype=float)))
        assert dist <= r.err * scale * 1.0001 + 1e-300


@pytest.mark.parametrize("pessimistic", [True, False])
def test_infinity_mass_composes_exactly_on_the_safe_side(pessimistic):
    eps0, delta0, c = 0.3, 1e-4, 500
    model = ApproxDP(eps0, delta0).loss_model("remove")
    g = discretize(model, eps0 / 4, -8, 8, 0.0, pessimistic)
    out = _power.self_compose_powers(g, (c,), ((-c * eps0 - 1, c * eps0 + 1),), 1 << 16)
    assert out is not None
    exact = -math.expm1(c * math.log1p(-delta0))
    if pessimistic:
        assert out[0].inf_mass >= exact * (1 - 1e-12)
    else:
        assert out[0].inf_mass <= exact * (1 + 1e-12)
    assert out[0].inf_mass == pytest.approx(exact, rel=1e-6)


def test_too_long_a_transform_declines():
    g = _random_step(1, 5000, 0.01, 0.0)
    assert _power.self_compose_powers(g, (1024,), (_window(g, 1024),), 1 << 12) is None


@pytest.mark.parametrize("lam", [0.0, 1.5])
@pytest.mark.parametrize("seed", [10, 11])  # dominated (summed MGF) / dominating (carried MGF bound)
def test_alias_bound_covers_the_folded_mass(lam, seed):
    """The Chernoff bound on the mass outside ``N`` lattice points covers what a
    length-``N`` circular convolution folds back (computed exactly here), and
    is not vacuous."""
    g = _random_step(seed, 150, 0.05, lam)
    c = 40
    mgf = _power._tilted_log_mgf(g)
    ref = np.asarray(_reference_power(g.p, c), dtype=float)
    s_lo = c * g.k0
    centre = int(np.argmax(ref))
    for half in (100, 200, 300, 500):
        a0 = s_lo + max(0, centre - half)
        size = 2 * half
        a1 = a0 + size - 1
        i0 = a0 - s_lo
        folded = np.zeros(size)
        for j, v in enumerate(ref):  # circular convolution, exactly: index mod size
            folded[(j - i0) % size] += v
        linear = ref[i0: i0 + size]
        linear = np.concatenate((linear, np.zeros(size - linear.size)))
        outside = float(ref[:i0].sum() + ref[i0 + size:].sum())
        bound = math.exp(_power._log_tail(mgf, c, (a0 - 1) * g.h, (a1 + 1) * g.h))
        assert float(np.abs(folded - linear).sum()) <= outside * (1 + 1e-9) + 1e-300
        assert bound >= outside * (1 - 1e-9)
        assert bound <= max(1e4 * outside, 1e-250)  # Chernoff, not a vacuous bound


def test_tilted_mgf_bound_holds_for_the_error_ball():
    """Without an entrywise bound the tilted MGF uses the l2 ball: an
    adversarial vector at the edge of the ball stays below it."""
    g = _random_step(5, 100, 0.05, 1.0)
    err = 1e-6
    g_ball = GridPLD(g.h, g.k0, g.p, g.lam, g.log_scale, 0.0, err, g.pessimistic, None)
    th, pos, th_dn, neg = _power._tilted_log_mgf(g_ball)
    assert np.array_equal(th, th_dn)
    losses = g.losses()
    for k, t in enumerate(th):
        w = np.exp(t * losses)
        worst = g.p + err * w / np.linalg.norm(w)  # the ball's worst case for this theta
        assert math.log(float(np.dot(worst, w))) <= pos[k] + 1e-12
        w = np.exp(-t * losses)
        worst = g.p + err * w / np.linalg.norm(w)
        assert math.log(float(np.dot(worst, w))) <= neg[k] + 1e-12


@pytest.mark.parametrize("steps", [14040, 14043, 10_001])
def test_the_power_computes_an_exact_quotient_of_the_steps(steps):
    """The power computes ``steps >> 2`` steps (and the remainder ``< 4`` from
    the same transform), then two squarings: MNIST's 14040 = 3510 x 4.  The
    largest power of two, 2048, left six levels to add up.  The bracket must
    still contain the closed-form epsilon of the Gaussian composition."""
    import pld
    from pld.baselines.exact import gaussian_epsilon

    sigma, delta = 40.0, 1e-6
    p = pld.Gaussian(sigma).pld().self_compose(steps)
    lo, hi = p.epsilon_bounds(delta)
    exact = float(gaussian_epsilon(delta, math.sqrt(steps) / sigma))
    assert lo <= exact <= hi
    assert hi - lo <= 1e-4 * exact
    assert p.grids(delta)["remove"].power_steps == (steps >> 2,)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), shift=st.integers(-1000, 1000))
def test_rotate_left_in_place_matches_numpy_roll(n, shift):
    from pld.kernels import rotate_left

    a = np.arange(n, dtype=float)
    ref = np.roll(a, -shift) if n else a.copy()
    rotate_left(a, shift)
    assert np.array_equal(a, ref)


def test_power_results_do_not_share_the_transform_buffer():
    """The power writes into the pooled transform buffer; a later transform of
    the same length must leave earlier results untouched."""
    for seed in (2, 3):  # (even: the dominated side, whose truncation to a window
        # wider than the transform keeps the array itself)
        g = _random_step(seed, 80, 0.05, 0.5)
        wide = (-1e6, 1e6)
        first = _power.self_compose_powers(g, (64, 23), (wide, wide), 1 << 16)
        kept = [r.p.copy() for r in first]
        _power.self_compose_powers(g, (64, 23), (wide, wide), 1 << 16)
        for r, k in zip(first, kept):
            assert np.array_equal(r.p, k)
    # a result that fills the transform exactly is truncated to itself: it
    # must still be a copy (the buffer goes back to the pool)
    g = _random_step(2, 80, 0.05, 0.5)
    y = g.p.copy()
    r = _power._assemble(g, 1, y, g.k0, (-1e6, 1e6), None, 0.0, 1.0, float(np.linalg.norm(y)) * 1.01)
    assert r is not None and r.size == y.size and not np.shares_memory(r.p, y)


def test_a_remainder_of_a_few_steps_costs_no_width():
    """T = 4c + r with r < 4: the r steps ride on a copy of the power's level
    (c + r), not on a law of r steps re-gridded in one go to the final spacing
    at the end, which widened MNIST's 60-epoch bracket (T = 14063) by 30%
    over T = 14060's."""
    import pld

    def width(steps):
        lo, hi = pld.dpsgd(1.1, 256 / 60000, steps).epsilon_bounds(1e-5)
        return hi - lo

    assert width(14063) <= 1.15 * width(14060)


# ------------------------------------------------------------------ extended precision
needs_ld = pytest.mark.skipif(not _power._fft.extended_available(),
                              reason="long double is a double on this platform")


def _exact_power(p: np.ndarray, c: int) -> list:
    """The c-fold linear convolution of the doubles ``p`` (>= 0), exactly:
    the polynomial with coefficients ``p`` raised to the power c by one
    big-integer power (Kronecker substitution), read back as Fractions."""
    from fractions import Fraction

    fr = [Fraction(float(v)) for v in p]
    den = max(f.denominator for f in fr)
    ints = [int(f * den) for f in fr]
    assert all(f * den == i for f, i in zip(fr, ints))
    # a slot holds any coefficient of the c-th power: < (sum of ints)^c
    width = c * max(1, sum(ints)).bit_length() + 8
    packed = 0
    for i in reversed(ints):
        packed = (packed << width) | i
    power = packed ** c
    mask = (1 << width) - 1
    scale = Fraction(1, den ** c)
    out = []
    for _ in range(c * (len(ints) - 1) + 1):
        out.append((power & mask) * scale)
        power >>= width
    return out


@needs_ld
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 60), c=st.integers(2, 40),
       lam=st.floats(0.0, 2.0), narrow=st.booleans())
def test_extended_power_within_its_error_of_the_exact_power(seed, n, c, lam, narrow):
    """The extended-precision path (long double forward transform and powers,
    rounding to double, double inverse) against the exact c-fold of the
    stored vector.  The step is given an exact vector (``err = 0``), so the
    bound left is the computation's own (and the aliasing's, narrow
    windows): the test resolves it, where a long double reference could not."""
    g0 = _random_step(seed, n, 0.05, lam)
    g = GridPLD(g0.h, g0.k0, g0.p, g0.lam, g0.log_scale, 0.0, 0.0, False, None, 0.0)
    lo, hi = _window(g, c, 3.0 if narrow else 40.0)
    out = _power.self_compose_powers(g, (c,), ((lo, hi),), 1 << 16, precision="extended")
    assert out is not None
    r = out[0]
    ref = _exact_power(g.p, c)
    scale = math.exp(r.log_scale - c * g.log_scale)
    idx = r.k0 - c * g.k0 + np.arange(r.size)
    want = np.array([float(ref[i]) for i in idx])
    dist = float(np.linalg.norm(r.p * scale - want))
    assert dist <= r.err * scale * 1.0001 + 1e-300, (dist, r.err * scale)
    dbl = _power.self_compose_powers(g, (c,), ((lo, hi),), 1 << 16)[0]
    if not narrow and c >= 16:
        # (aliasing-free: the bound is the round-off alone, the forward
        # transform's share of it cut by u_ld / u)
        assert r.err <= 0.2 * dbl.err, (r.err, dbl.err)


@needs_ld
@pytest.mark.parametrize("pessimistic", [True, False])
@pytest.mark.parametrize("lam", [0.0, 3.0])
def test_error_split_holds_entrywise_against_the_exact_vector(pessimistic, lam):
    """Every split ``(r_0, e_0)`` of a fresh discretisation's error: the
    entries within ``r_0`` of the exact tilted vector, computed in mpmath
    from the same log masses, and the others within ``e_0`` in l2."""
    from fractions import Fraction

    import mpmath as mp

    rng = np.random.default_rng(3)
    n, k0, h = 80, -30, 0.05
    losses = (k0 + np.arange(n)) * h
    lm = -0.5 * ((losses - losses.mean()) / 0.6) ** 2 + rng.uniform(-0.5, 0.0, n) - 40.0
    g = GridPLD.from_log_masses(lm, k0, h, lam, 0.0, pessimistic)
    split = _power.input_error_split(g)
    assert split[0] == (0.0, g.err) and len(split) > 2
    with mp.workdps(40):
        exact = []
        for i, v in enumerate(lm):
            loss = Fraction(g.k0 + i) * Fraction(g.h)
            e = mp.mpf(float(v)) + mp.mpf(Fraction(g.lam) * loss) - mp.mpf(g.log_scale)
            exact.append(mp.exp(e))
        diff = np.array([float(abs(mp.mpf(float(p)) - x)) for p, x in zip(g.p, exact)])
    for r0, e0 in split:
        rest = diff[diff > r0 * g.p]
        assert float(np.linalg.norm(rest)) <= e0, (r0, e0)
    # the relative part is where the vector is accurate: a split keeps almost all the mass
    assert min(e0 for r0, e0 in split if r0 <= 64 * 2.0 ** -53) < 0.1 * g.err


@needs_ld
@pytest.mark.parametrize("steps", [14040, 200_001])
def test_extended_power_brackets_the_exact_gaussian_composition(steps):
    """End to end: the grids of a long Gaussian composition built with the
    FFT power in extended precision (the planner's settings with the
    precision replaced) bracket the closed-form epsilon and delta, with a
    much smaller error bound than in double."""
    import pld
    from pld.baselines.exact import gaussian_delta, gaussian_epsilon

    sigma, delta = 40.0 * math.sqrt(steps / 14040), 1e-6
    p = pld.Gaussian(sigma).pld().self_compose(steps)
    mu = math.sqrt(steps) / sigma
    exact = float(gaussian_epsilon(delta, mu))
    pair = p.grids(delta)["remove"]
    assert pair.settings.precision == "double"  # (the planner has no need of it here)
    engine = p._engine()
    s = pair.settings._replace(precision="extended")
    pess, opt = engine.composer.materialize("remove", *s)
    assert engine.composer.power_steps("remove", *s)[0] > 1  # the power did compose steps
    assert opt.epsilon(delta) <= exact <= pess.epsilon(delta)
    eps = exact + mu * np.array([-1.0, 0.0, 0.5, 2.0])
    d_exact = np.asarray(gaussian_delta(eps, mu))
    assert np.all(opt.delta(eps) <= d_exact * (1 + 1e-12))
    assert np.all(pess.delta(eps) >= d_exact * (1 - 1e-12))
    assert pess.err < 0.1 * pair.dominating.err
    assert pess.epsilon(delta) - opt.epsilon(delta) <= 1e-4 * exact


@needs_ld
def test_the_planner_switches_to_extended_precision_where_round_off_dominates(monkeypatch):
    """DP-SGD at q = 1e-5 over 3e5 steps: in double the FFT power's round-off
    alone exceeds the remove direction's target; the planner redoes that
    grid in extended precision (explain says so) and the bracket narrows.
    With no wider type (simulated) it stays in double."""
    import pld

    args, delta = (2.0, 1e-5, 300_000), 1e-7

    def round_off_part(pair) -> float:
        pe, op = pair.dominating, pair.dominated
        return (pe.epsilon(delta) - pe.without_error().epsilon(delta)
                + op.without_error().epsilon(delta) - op.epsilon(delta))

    p = pld.dpsgd(*args)
    lo, hi = p.epsilon_bounds(delta)
    info = p.explain(delta)["directions"]
    assert info["remove"]["fft_precision"] == "extended"
    ext = p.grids(delta)["remove"]
    assert ext.settings.precision == "extended"
    monkeypatch.setattr(_power._fft, "extended_available", lambda: False)
    q = pld.dpsgd(*args)
    lo_d, hi_d = q.epsilon_bounds(delta)
    assert all(d["fft_precision"] == "double" for d in q.explain(delta)["directions"].values())
    # both certified: they overlap; the extended one is narrower, by its round-off
    # (what is left is the dominated side's per-step margin, ~T 1e-11)
    assert max(lo, lo_d) <= min(hi, hi_d)
    assert hi - lo < 0.9 * (hi_d - lo_d)
    assert round_off_part(ext) < 0.05 * round_off_part(q.grids(delta)["remove"])


def test_default_workloads_stay_in_double_precision():
    import pld

    p = pld.dpsgd(1.1, 256 / 60000, 14063)
    assert all(d["fft_precision"] == "double" for d in p.explain(1e-5)["directions"].values())


@needs_ld
def test_extended_takes_the_double_aliasing_allowance_where_its_own_does_not_fit():
    """Holding aliasing to the extended path's smaller round-off asks for a
    longer transform; where that does not fit, ``loose_aliasing`` takes the
    double path's allowance, and the result is still at least as accurate
    as the double power's (the composer tries it before squaring from one
    step, which would carry the double round-off of every level)."""
    g = _random_step(21, 100, 0.05, 0.0)
    c = 3200  # (the double range fits 20480 points, the extended one does not)
    win = (_window(g, c, 0.5),)
    double = _power.self_compose_powers(g, (c,), win, 1 << 20, total=c)
    assert double is not None
    # the longest transform the double path needs: the strict extended one does not fit it
    mgf = _power._tilted_log_mgf(g)
    est = c * _power._C_ERR * _power._U * 20.0 * float(np.linalg.norm(g.p))
    size = _power._ranges(mgf, g, (c,), win, math.log(1e-3 * est))[1]
    assert _power.self_compose_powers(g, (c,), win, size, total=c, precision="extended") is None
    ext = _power.self_compose_powers(g, (c,), win, size, total=c, precision="extended", loose_aliasing=True)
    assert ext is not None
    assert ext[0].err <= double[0].err


@pytest.mark.parametrize("counts", [(24414, 256), (30517, 18944), (7, 300), (513, 0), (1, 2)])
def test_extended_powers_keep_each_counts_live_entries(counts):
    """``_powers_extended`` narrows to the larger count's own live entries once
    the smaller count is done: every entry it leaves out has that count's
    power below 1e-300 (the bound's per-entry term), and every entry it keeps
    is the power by repeated squaring, computed alone."""
    c_a, c_b = counts
    rng = np.random.default_rng(c_a + c_b)
    # a smooth spectrum: moduli from 1 down to 1e-3, random phases
    mod = np.exp(np.linspace(0.0, -7.0, 4000) ** 2 / 7.0 * -1.0)
    x = (mod * np.exp(1j * rng.uniform(0, 2 * np.pi, mod.size))).astype(np.clongdouble)
    got = _power._powers_extended(x, c_a, c_b)
    for (live, vals), c in zip(got, (c_a, c_b)):
        if c <= 0:
            assert live.size == 0 and vals.size == 0
            continue
        out = np.zeros(x.size, dtype=np.clongdouble)
        for k in live:
            z = x[k]
            acc, base, e = np.clongdouble(1), z, c
            while e:
                if e & 1:
                    acc = acc * base
                base = base * base
                e >>= 1
            out[k] = acc
        ref = out[live].astype(np.complex128)
        assert np.allclose(vals, ref, rtol=1e-12, atol=1e-300)
        dropped = np.setdiff1d(np.arange(x.size), live)
        assert np.all(np.abs(x[dropped].astype(np.complex128)) ** c < 1e-300)
