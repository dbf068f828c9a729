"""The low band of a long double DFT from block moments (pld.engine.fft_band), and
the FFT power's use of it (pld.engine.power._extended_powers).

References outside the module: the exact DFT (integer arithmetic on inputs
on a 2^-200 lattice, twiddles from mpmath at 80 digits), the full long double
transform with its own bound, and the full-transform path of the same power.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pld.engine import fft as _fft
from pld.engine import fft_band
from pld.engine import power as _power

pytestmark = pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double on this platform")

_FIX = 200


def _lattice(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to multiples of ``2^-_FIX`` (exact inputs for the reference)."""
    return np.ldexp(np.round(np.ldexp(np.asarray(x, float), _FIX)), -_FIX)


def _exact_dft_at(x: np.ndarray, n: int, at) -> list[tuple[Fraction, Fraction]]:
    """The exact DFT of ``x`` zero-padded to ``n`` at the indices ``at`` (up to
    twiddles rounded at ``2^-_FIX``)."""
    import mpmath as mp

    xs = [(j, int(Fraction(float(v)) * (1 << _FIX))) for j, v in enumerate(x) if v != 0.0]
    out = []
    with mp.workdps(80):
        cache: dict[int, tuple[int, int]] = {}

        def root(t: int) -> tuple[int, int]:
            hit = cache.get(t)
            if hit is None:
                hit = cache[t] = (int(mp.nint(mp.cos(2 * mp.pi * t / n) * (1 << _FIX))),
                                  int(mp.nint(mp.sin(2 * mp.pi * t / n) * (1 << _FIX))))
            return hit

        for k in at:
            re = im = 0
            for j, v in xs:
                c, s = root((j * int(k)) % n)
                re += v * c
                im -= v * s
            scale = Fraction(1 << (2 * _FIX))
            out.append((Fraction(re) / scale, Fraction(im) / scale))
    return out


def _error_full_count(values: np.ndarray, exact, at, n: int) -> float:
    """l2 distance over the whole spectrum (``k`` and ``n - k`` alike)."""
    sq = 0.0
    for v, (re, im), k in zip(values, exact, at):
        dr = float(Fraction(*np.longdouble(v.real).as_integer_ratio()) - re)
        di = float(Fraction(*np.longdouble(v.imag).as_integer_ratio()) - im)
        sq += (1.0 if k == 0 or 2 * k == n else 2.0) * (dr * dr + di * di)
    return math.sqrt(sq)


def _step_like(n_points: int, rng: np.random.Generator) -> np.ndarray:
    """A PLD step's shape: a narrow core holding most of the mass and a tail
    decaying over many orders of magnitude (blocks of every weight: heavy,
    light and negligible), perturbed at random."""
    j = np.arange(n_points, dtype=float)
    core = np.exp(-0.5 * ((j - 0.3 * n_points) / 9.0) ** 2)
    tail = 1e-3 * np.exp(-(j / (0.02 * n_points)))
    x = (core + tail) * rng.uniform(0.5, 1.0, n_points)
    x[x < 1e-55] = 0.0
    return _lattice(x / x.sum())


@pytest.mark.parametrize("n, n_points, seed", [(16384, 3000, 1), (24576, 5000, 2), (40960, 2500, 3),
                                               (65536, 1200, 4)])
def test_band_within_its_bound_of_the_exact_dft(n, n_points, seed):
    """Every index of a low band, computed from block moments, lies within the
    stated l2 bound of the exact DFT; the bound is not vacuous (within 1e5 of
    the error measured) and near the full long double transform's own."""
    rng = np.random.default_rng(seed)
    x = _step_like(n_points, rng)
    top = n // fft_band._MAX_BAND
    block = fft_band.plan(n, top)
    assert block >= fft_band._MIN_BLOCK
    at = np.arange(top + 1)
    values, err = fft_band.rfft_extended_band(x, n, at, block)
    assert values.dtype == np.clongdouble
    measured = _error_full_count(values, _exact_dft_at(x, n, at), at, n)
    assert 0.0 < measured <= err, (measured, err)
    assert err <= 1e5 * measured
    full_bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * math.sqrt(n) * float(np.linalg.norm(x))
    assert err <= 3.0 * full_bound


def test_band_matches_the_full_long_double_transform_on_scattered_indices():
    """Indices need not be contiguous (the live set is any set within the band):
    the band's values agree with the full transform's within both bounds."""
    rng = np.random.default_rng(7)
    n = 393216
    x = rng.random(120000) ** 12
    x /= x.sum()
    full = _fft.rfft_extended(x, n)
    at = np.sort(rng.choice(n // fft_band._MAX_BAND, 200, replace=False))
    block = fft_band.plan(n, int(at[-1]))
    values, err = fft_band.rfft_extended_band(x, n, at, block)
    diff = np.abs((values - full[at]).astype(np.clongdouble)).astype(float)
    full_bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * math.sqrt(n) * float(np.linalg.norm(x))
    assert math.sqrt(2.0 * float(np.sum(diff ** 2))) <= err + full_bound


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), mult=st.sampled_from([1, 3, 5, 7]), k=st.integers(13, 17),
       fill=st.floats(0.05, 0.9), spike=st.floats(0.0, 1.0), band=st.floats(0.0, 1.0))
def test_band_agrees_with_the_full_transform_across_shapes(seed, mult, k, fill, spike, band):
    """Any non-negative input (smooth, spiky, tails over many orders of magnitude), any
    canonical length, any band the plan accepts: the band's values lie within its bound plus
    the full long double transform's of the full transform's."""
    rng = np.random.default_rng(seed)
    n = mult << k
    m = max(8, int(fill * n))
    j = np.arange(m, dtype=float)
    x = np.exp(-0.5 * ((j - rng.uniform(0, m)) / rng.uniform(2.0, m / 4)) ** 2)
    x += spike * rng.random(m) ** 20 + 1e-30 * rng.random(m)
    x /= x.sum()
    top = int(band * n / fft_band._MAX_BAND)
    block = fft_band.plan(n, top)
    if not block:
        return
    at = np.arange(top + 1)
    values, err = fft_band.rfft_extended_band(x, n, at, block)
    full = _fft.rfft_extended(x, n)[at]
    diff = np.abs(values - full).astype(float)
    full_bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * math.sqrt(n) * float(np.linalg.norm(x))
    assert math.sqrt(2.0 * float(np.sum(diff ** 2))) <= err + full_bound
    assert err <= 3.0 * full_bound


def test_plan_limits():
    n = 393216
    assert fft_band.plan(n, 287) == 128
    assert fft_band.plan(n, n // fft_band._MAX_BAND + 1) == 0  # (a wide band: the full transform)
    assert fft_band.plan(n, -1) == 0
    assert fft_band.plan(3 * 5 * 7, 0) == 0  # (no power-of-two factor to block on)
    for top in (0, 10, 100, 1000, 1500):
        d = fft_band.plan(n, top)
        if d:
            assert n % d == 0 and d <= fft_band._MAX_BLOCK and n // d >= 2 * top + 2
            assert 2 * math.pi * top / n * (d - 1) / 2 <= fft_band._Z_MAX
    with pytest.raises(ValueError, match="block"):
        fft_band.rfft_extended_band(np.ones(8), 1024, np.arange(600), 128)


def _long_run_power(monkeypatch, band: bool):
    """The extended power of a billion-step run's step, through the band or the full
    transform; returns (brackets, calls into the band)."""
    import pld

    calls = []
    real = fft_band.rfft_extended_band

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(fft_band, "rfft_extended_band", counted)
    if not band:
        monkeypatch.setattr(_power, "_BAND_COUNT", 1 << 62)
    out = pld.dpsgd(1.0, 1e-3, 10**9).epsilon_bounds([1e-6, 1e-9])
    return out, len(calls)


def test_long_run_through_the_band_agrees_with_the_full_transform(monkeypatch):
    """sigma 1, q 1e-3, 1e9 steps: the power goes through the band (both sides),
    and its certified brackets intersect the full transform's and are no wider."""
    (lo_b, hi_b), n_band = _long_run_power(monkeypatch, band=True)
    assert n_band >= 2
    monkeypatch.undo()
    (lo_f, hi_f), n_full = _long_run_power(monkeypatch, band=False)
    assert n_full == 0
    for a, b, c, d in zip(lo_b, hi_b, lo_f, hi_f):
        assert max(a, c) <= min(b, d)
        assert b - a <= (d - c) * (1.0 + 1e-6)


def test_entries_left_out_of_the_band_are_dead(monkeypatch):
    """Every entry the double transform rules out has an exact power below 1e-300:
    checked on the full long double transform (with its bound) of the same step."""
    import pld

    seen = []
    real = _power._extended_powers

    def spy(g, size, counts, *rest):
        out = real(g, size, counts, *rest)
        seen.append((g.p.copy(), size, counts, out))
        return out

    monkeypatch.setattr(_power, "_extended_powers", spy)
    pld.dpsgd(1.0, 1e-3, 10**9).epsilon_bounds(1e-6)
    assert seen
    for p, size, counts, per_count in seen:
        assert all(kind == "extended" for kind, _, _ in per_count)
        full = np.abs(_fft.rfft_extended(p, size)).astype(float)
        bound = _fft._C_ERR * _fft._U_LD * (math.log2(size) + 2.0) * math.sqrt(size) * float(np.linalg.norm(p))
        live = np.zeros(full.size, dtype=bool)
        for _, (at, _values), _ in per_count:
            live[at] = True
        dead = ~live
        assert dead.sum() > 0.99 * full.size
        assert np.all(min(counts) * np.log(full[dead] + bound) < math.log(1e-300))


def test_a_remainder_beside_a_long_power_is_powered_in_double(monkeypatch):
    """sigma 1, q 1e-3, 1e8 steps: the power (24414, 256) takes the long count through
    the band and the remainder from the double transform; both sides' brackets are
    certified, so they intersect the all-long-double path's, and are no wider."""
    import pld

    kinds = []
    real = _power._extended_powers

    def spy(*args):
        out = real(*args)
        kinds.append(tuple(kind for kind, _, _ in out))
        return out

    monkeypatch.setattr(_power, "_extended_powers", spy)
    lo, hi = pld.dpsgd(1.0, 1e-3, 10**8).epsilon_bounds(1e-6)
    assert ("extended", "double") in kinds
    monkeypatch.setattr(_power, "_BAND_COUNT", 1 << 62)
    lo_f, hi_f = pld.dpsgd(1.0, 1e-3, 10**8).epsilon_bounds(1e-6)
    assert max(lo, lo_f) <= min(hi, hi_f)
    assert hi - lo <= (hi_f - lo_f) * (1.0 + 1e-6)
