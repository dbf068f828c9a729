"""The FFT convolution's round-off bound against exactly computed convolutions.

``pld.engine.fft.convolve(a, b)`` returns ``(c, bound)`` and promises
``||c - a*b||_2 <= bound`` for the exact convolution ``a*b`` of the float
inputs.  The exact convolution is computed here without floating-point error:

* small inputs: :class:`fractions.Fraction` arithmetic on the exact binary
  values of the floats;
* long inputs (up to 2^18 points): the inputs are fixed-point numbers
  ``A * 2^-E`` with integer ``A`` (the PMFs are rounded to such a grid
  first, so the tested input is exactly representable); ``A`` is split into 8-bit chunks, every
  chunk-by-chunk convolution is an integer vector small enough that an FFT
  rounds it exactly (checked: residuals from integers are tiny), and the exact
  result is reassembled as a double-double, so that the measured error
  ``||c - a*b||_2`` is itself accurate to many digits.

Besides ``measured <= bound`` the tests check that the bound is not absurdly
loose (``measured / bound`` above a floor) and record the ratios.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.fft

from pld.engine import fft as _fft

#: the bound may not be more than this many times the measured error (when that is non-zero)
MAX_LOOSENESS = 1e5

RATIOS: dict[str, float] = {}


# ---------------------------------------------------------------------------
# exact references
# ---------------------------------------------------------------------------


def exact_conv_fraction(a: np.ndarray, b: np.ndarray) -> list[Fraction]:
    fa = [Fraction(float(x)) for x in a]
    fb = [Fraction(float(x)) for x in b]
    out = [Fraction(0)] * (len(fa) + len(fb) - 1)
    for i, x in enumerate(fa):
        if x == 0:
            continue
        for j, y in enumerate(fb):
            out[i + j] += x * y
    return out


def l2_error_fraction(c: np.ndarray, exact: list[Fraction]) -> float:
    # each difference is exact; its square needs only a few correct digits
    return math.sqrt(sum(float(Fraction(float(ci)) - e) ** 2 for ci, e in zip(c, exact)))


_CHUNK = 8
_NCHUNK = 7  # 56 bits: integers up to 2^56 in magnitude


def _chunks(A: np.ndarray) -> list[np.ndarray]:
    """Signed 8-bit chunks: A = sum_k chunk_k 2^(8k), |chunk_k| < 2^8."""
    sgn = np.sign(A)
    mag = np.abs(A)
    assert np.all(mag < 2 ** (_CHUNK * _NCHUNK))
    return [(sgn * ((mag >> (_CHUNK * k)) & ((1 << _CHUNK) - 1))).astype(np.float64) for k in range(_NCHUNK)]


def exact_conv_fixed(A: np.ndarray, B: np.ndarray) -> list[np.ndarray]:
    """Exact integer convolution of int64 vectors as groups G_s with A*B = sum_s G_s 2^(8 s)."""
    ca, cb = _chunks(A), _chunks(B)
    n = A.size + B.size - 1
    nfft = scipy.fft.next_fast_len(n, real=True)
    fa = [scipy.fft.rfft(x, nfft) for x in ca]
    fb = fa if B is A else [scipy.fft.rfft(x, nfft) for x in cb]
    groups = [np.zeros(n, dtype=np.int64) for _ in range(2 * _NCHUNK - 1)]
    worst = 0.0
    for i in range(_NCHUNK):
        if not ca[i].any():
            continue
        for j in range(_NCHUNK):
            if not cb[j].any():
                continue
            v = scipy.fft.irfft(fa[i] * fb[j], nfft)[:n]
            r = np.rint(v)
            worst = max(worst, float(np.max(np.abs(v - r))))
            groups[i + j] += r.astype(np.int64)
    # entries are below 2^(16 + 18); their FFT round-off is far below 1/2, so rounding is exact
    assert worst < 0.05, f"chunk convolution not exactly rounded (residual {worst})"
    return groups


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bp = s - a
    return s, (a - (s - bp)) + (b - bp)


def l2_error_fixed(c: np.ndarray, groups: list[np.ndarray], scale_exp: int) -> float:
    """||c - exact||_2 with exact = 2^-scale_exp sum_s G_s 2^(8 s), via a double-double."""
    hi = np.zeros(c.size)
    lo = np.zeros(c.size)
    for s in reversed(range(len(groups))):
        g = groups[s]
        assert np.all(np.abs(g) < 2 ** 53)  # an exact double
        t = np.ldexp(g.astype(np.float64), _CHUNK * s - scale_exp)
        hi, e = _two_sum(hi, t)
        lo += e
    d = (c - hi) - lo
    return float(np.linalg.norm(d))


def fixed_point(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Round x to a grid 2^-E fine enough that the largest entry uses 52 bits.

    Returns ``(A, a, E)``: the integers, the exact float vector ``A 2^-E`` they
    stand for (the actual test input) and ``E``.
    """
    x = np.asarray(x, float)
    e = 52 - int(math.ceil(math.log2(float(np.max(np.abs(x))))))
    A = np.rint(np.ldexp(x, e)).astype(np.int64)
    return A, np.ldexp(A.astype(np.float64), -e), e


def check(label: str, a: np.ndarray, b: np.ndarray, measured_fn) -> float:
    c, bound = _fft.convolve(a, b)
    assert c.shape == (a.size + b.size - 1,)
    measured = measured_fn(c)
    assert math.isfinite(bound) and bound >= 0.0
    assert measured <= bound, f"{label}: measured l2 error {measured:.3g} exceeds the bound {bound:.3g}"
    ratio = measured / bound if bound > 0 else 0.0
    RATIOS[label] = ratio
    if measured > 0:
        assert ratio >= 1.0 / MAX_LOOSENESS, f"{label}: bound {bound:.3g} is {1 / ratio:.3g}x the error {measured:.3g}"
    print(f"{label}: measured {measured:.3g}, bound {bound:.3g}, ratio {ratio:.3g}")
    return ratio


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------


def gaussian_pmf(n: int, center: float, width: float) -> np.ndarray:
    i = np.arange(n)
    p = np.exp(-0.5 * ((i - center) / width) ** 2)
    return p / p.sum()


def tilted_pmf(n: int, width: float, lam: float) -> np.ndarray:
    """A Gaussian-like PMF times e^{lam * i}, renormalised: huge dynamic range, like a tilted PLD."""
    i = np.arange(n)
    lp = -0.5 * ((i - n / 3) / width) ** 2 + lam * i
    p = np.exp(lp - lp.max())
    return p / p.sum()


# ---------------------------------------------------------------------------
# tests: long vectors (FFT path), exact by integer chunks
# ---------------------------------------------------------------------------

LONG_CASES = [
    # label, n_a, n_b (None: self-convolution a is b), generator
    ("wide-gauss-2^18-self", 1 << 18, None, lambda n: gaussian_pmf(n, n / 2, n / 8)),
    ("concentrated-2^18-self", 1 << 18, None, lambda n: gaussian_pmf(n, n / 2, 3.0)),
    ("geometric-2^18-self", 1 << 18, None, lambda n: 0.5 ** np.arange(n) / 2.0),
    ("wide-gauss-2^16-self", 1 << 16, None, lambda n: gaussian_pmf(n, n / 2, n / 10)),
    ("tilted-2^15-self", 1 << 15, None, lambda n: tilted_pmf(n, n / 12, 3e-3)),
    ("odd-length-70001-self", 70001, None, lambda n: gaussian_pmf(n, n / 3, n / 20)),
]


@pytest.mark.parametrize("label,n,nb,gen", LONG_CASES, ids=[c[0] for c in LONG_CASES])
def test_fft_bound_long_self(label, n, nb, gen):
    A, a, e = fixed_point(gen(n))
    assert a.sum() > 0.99
    groups = exact_conv_fixed(A, A)
    check(label, a, a, lambda c: l2_error_fixed(c, groups, 2 * e))


PAIR_CASES = [
    ("wide-2^18 x narrow-2^10", 1 << 18, 1 << 10),
    ("wide-2^17 x wide-2^17 (distinct)", 1 << 17, 1 << 17),
    ("2^12 x 5000", 1 << 12, 5000),
    ("49 x 2^16", 49, 1 << 16),
]


@pytest.mark.parametrize("label,na,nb", PAIR_CASES, ids=[c[0] for c in PAIR_CASES])
def test_fft_bound_long_pair(label, na, nb):
    A, a, ea = fixed_point(gaussian_pmf(na, na / 2, na / 7))
    B, b, eb = fixed_point(gaussian_pmf(nb, nb / 3, max(2.0, nb / 50)))
    groups = exact_conv_fixed(A, B)
    check(label, a, b, lambda c: l2_error_fixed(c, groups, ea + eb))


def test_fft_bound_signed_random():
    """The bound is stated for real vectors, not only PMFs."""
    rng = np.random.default_rng(1)
    A = rng.integers(-(2 ** 52), 2 ** 52, size=30000)
    B = rng.integers(-(2 ** 52), 2 ** 52, size=20011)
    a = np.ldexp(A.astype(np.float64), -52)
    b = np.ldexp(B.astype(np.float64), -52)
    groups = exact_conv_fixed(A, B)
    check("signed-random-30000x20011", a, b, lambda c: l2_error_fixed(c, groups, 104))


def test_fft_bound_random_pmf_self():
    rng = np.random.default_rng(2)
    A, a, e = fixed_point(rng.dirichlet(np.ones(1 << 14)))
    groups = exact_conv_fixed(A, A)
    check("dirichlet-2^14-self", a, a, lambda c: l2_error_fixed(c, groups, 2 * e))


def test_fft_bound_scipy_backend(monkeypatch):
    """The scipy.fft fallback (used without pyfftw and for very long transforms) obeys the same bound."""
    monkeypatch.setattr(_fft, "_HAVE_PYFFTW", False)
    A, a, ea = fixed_point(gaussian_pmf(1 << 16, 30000, 4000))
    B, b, eb = fixed_point(gaussian_pmf(3000, 1000, 50))
    g_same = exact_conv_fixed(A, A)
    check("scipy-backend-2^16-self", a, a, lambda c: l2_error_fixed(c, g_same, 2 * ea))
    g_pair = exact_conv_fixed(A, B)
    check("scipy-backend-2^16x3000", a, b, lambda c: l2_error_fixed(c, g_pair, ea + eb))


@pytest.mark.skipif(not _fft._HAVE_PYFFTW, reason="pyfftw is not installed")
def test_long_transforms_take_pooled_plans_within_the_bound(monkeypatch):
    """Transforms of millions of points (the allocation's label sums) go through a pooled
    pyfftw plan up to ``_MAX_PLAN_SIZE``; the convolution stays within the stated bound of
    scipy.fft's (the fallback, independent of FFTW): the two differ by at most both bounds."""
    na, nb = 1_200_000, 900_000
    n = _fft._canonical_size(na + nb - 1)
    assert 1 << 21 < n <= _fft._MAX_PLAN_SIZE
    a = gaussian_pmf(na, na / 2, na / 9)
    b = gaussian_pmf(nb, nb / 3, nb / 40)
    c, bound = _fft.convolve(a, b)
    assert n in _fft._plans
    monkeypatch.setattr(_fft, "_HAVE_PYFFTW", False)
    c_ref, bound_ref = _fft.convolve(a, b)
    assert bound == bound_ref
    assert float(np.linalg.norm(c - c_ref)) <= bound + bound_ref
    assert c.sum() == pytest.approx(1.0, rel=1e-12)


def test_fft_self_and_copy_agree_within_bound():
    """``a is b`` takes the squaring shortcut; an equal copy does not.  Both stay within the bound."""
    A, a, e = fixed_point(gaussian_pmf(1 << 15, 12000, 2000))
    groups = exact_conv_fixed(A, A)
    c1, b1 = _fft.convolve(a, a)
    c2, b2 = _fft.convolve(a, a.copy())
    assert b1 == pytest.approx(b2, rel=1e-12)
    for c, bd in ((c1, b1), (c2, b2)):
        assert l2_error_fixed(c, groups, 2 * e) <= bd


@pytest.mark.parametrize("pyfftw", [True, False])
def test_shared_transforms_give_convolve_bit_for_bit(monkeypatch, pyfftw):
    """``convolve_shared`` transforms each distinct array once; its values and bounds
    are ``convolve``'s on each pair exactly (squares, shared factors, both backends),
    and pairs of other lengths or short ones take ``convolve`` itself."""
    if not pyfftw:
        monkeypatch.setattr(_fft, "_HAVE_PYFFTW", False)
    rng = np.random.default_rng(5)
    q, p, d = (rng.random(3000) * np.exp(-rng.random(3000) * 30) for _ in range(3))
    q2, p2 = rng.random(2999), rng.random(2999)
    for pairs in ([(q, q), (p, q), (d, q)],
                  [(q, q2), (p, q2), (q, p2), (d, q2), (q, d)],
                  [(q, q), (q[:40], p)],  # a short pair: every pair by convolve
                  [(q, q), (q[:1000], p[:1000])]):  # two lengths
        for (c, bound), (a, b) in zip(_fft.convolve_shared(pairs), pairs):
            c0, bound0 = _fft.convolve(a, b)
            assert np.array_equal(c, c0)
            assert bound == bound0


def test_fft_repeated_plan_reuse():
    """Plans are cached per size: a second call of the same size is still correct."""
    A, a, ea = fixed_point(gaussian_pmf(5000, 2500, 300))
    B, b, eb = fixed_point(gaussian_pmf(5000, 1000, 30))
    g_ab = exact_conv_fixed(A, B)
    g_aa = exact_conv_fixed(A, A)
    for _ in range(2):
        check("plan-reuse-ab", a, b, lambda c: l2_error_fixed(c, g_ab, ea + eb))
        check("plan-reuse-aa", a, a, lambda c: l2_error_fixed(c, g_aa, 2 * ea))


# ---------------------------------------------------------------------------
# tests: small vectors, exact by fractions (both the direct and the FFT path)
# ---------------------------------------------------------------------------

SMALL_CASES = [
    ("direct-30x30", 30, 30),
    ("direct-48x400", 48, 400),
    ("direct-100x150", 100, 150),
    ("fft-49x500", 49, 500),
    ("fft-200x200", 200, 200),
    ("fft-150x301", 150, 301),
]


@pytest.mark.parametrize("label,na,nb", SMALL_CASES, ids=[c[0] for c in SMALL_CASES])
def test_bound_small_exact_fractions(label, na, nb):
    rng = np.random.default_rng(na * 1000 + nb)
    # full-precision floats with a wide dynamic range (no fixed-point rounding)
    a = rng.random(na) * np.exp(-rng.random(na) * 60)
    b = rng.random(nb) * np.exp(-rng.random(nb) * 60)
    a /= a.sum()
    b /= b.sum()
    ex = exact_conv_fraction(a, b)
    check(label, a, b, lambda c: l2_error_fraction(c, ex))


def test_bound_small_tilted_extreme_range():
    """Entries from 1 down to ~1e-300 (a strongly tilted PMF): the l2 bound still holds."""
    a = tilted_pmf(200, 8.0, 3.0)
    assert a.max() > 0.1 and 0 < a.min() < 1e-200
    ex = exact_conv_fraction(a, a)
    check("tilted-extreme-180-self", a, a, lambda c: l2_error_fraction(c, ex))


def test_bound_small_self_fractions():
    a = gaussian_pmf(220, 100, 25.0)
    ex = exact_conv_fraction(a, a)
    check("fft-220-self", a, a, lambda c: l2_error_fraction(c, ex))


def test_exact_inputs_give_exact_or_bounded_output():
    """Integer-valued inputs: the FFT result must be within the bound of the integer answer."""
    a = np.ones(1000)
    c, bound = _fft.convolve(a, a)
    k = np.arange(c.size)
    exact = np.minimum(k + 1, c.size - k).astype(float)
    assert float(np.linalg.norm(c - exact)) <= bound


def test_zero_and_single_point_inputs():
    c, bound = _fft.convolve(np.zeros(100), np.ones(100))
    assert np.all(c == 0.0) and bound >= 0.0
    c, bound = _fft.convolve(np.array([0.25]), np.array([0.5, 0.5]))
    np.testing.assert_array_equal(c, [0.125, 0.125])


def test_reference_exact_conv_fixed_against_python_ints():
    """The chunked integer reference reproduces exact big-integer convolution."""
    rng = np.random.default_rng(3)
    A = rng.integers(-(2 ** 55), 2 ** 55, size=300)
    B = rng.integers(0, 2 ** 53, size=170)
    groups = exact_conv_fixed(A, B)
    total = [sum(int(g[k]) << (_CHUNK * s) for s, g in enumerate(groups)) for k in range(A.size + B.size - 1)]
    direct = [0] * (A.size + B.size - 1)
    for i, x in enumerate(A.tolist()):
        for j, y in enumerate(B.tolist()):
            direct[i + j] += x * y
    assert total == direct


# ---------------------------------------------------------------------------
# the long double forward transform (pld.engine.fft.rfft_extended, used by the
# extended-precision FFT power): Higham's bound with u_ld
# ---------------------------------------------------------------------------

#: fixed-point scale of the exact reference DFT: inputs and twiddles are
#: integers times 2^-_FIX (inputs exactly, twiddles rounded at 2^-200, far
#: below the long double's 2^-64)
_FIX = 200


def _exact_rdft(x: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    """``2^(2 _FIX)`` times the real DFT ``X_k``, ``k = 0 .. n/2``, of ``x``
    zero-padded to ``n``: integer real and imaginary parts, exact up to the
    twiddles' rounding (cos and sin from mpmath at 80 digits)."""
    import mpmath as mp

    xs = []
    for v in x:
        f = Fraction(float(v)) * (1 << _FIX)
        assert f.denominator == 1  # every input is a multiple of 2^-_FIX
        xs.append(int(f))
    with mp.workdps(80):
        cos = [int(mp.nint(mp.cos(2 * mp.pi * t / n) * (1 << _FIX))) for t in range(n)]
        sin = [int(mp.nint(mp.sin(2 * mp.pi * t / n) * (1 << _FIX))) for t in range(n)]
    re, im = [], []
    for k in range(n // 2 + 1):
        r = i = 0
        for j, v in enumerate(xs):
            if v:
                t = (j * k) % n
                r += v * cos[t]
                i -= v * sin[t]
        re.append(r)
        im.append(i)
    return re, im


def _ld_fraction(v) -> Fraction:
    return Fraction(*np.longdouble(v).as_integer_ratio())


def _ld_rfft_error(got: np.ndarray, x: np.ndarray, n: int) -> float:
    """l2 distance (over the whole spectrum) of a long-double half spectrum
    from the exact DFT of ``x`` zero-padded to ``n``."""
    re, im = _exact_rdft(x, n)
    scale = Fraction(1 << (2 * _FIX))
    sq = 0.0
    for k in range(n // 2 + 1):
        dr = float(_ld_fraction(got[k].real) - Fraction(re[k]) / scale)
        di = float(_ld_fraction(got[k].imag) - Fraction(im[k]) / scale)
        # the half spectrum stands for the whole: k and n - k alike
        sq += (1.0 if k == 0 or 2 * k == n else 2.0) * (dr * dr + di * di)
    return math.sqrt(sq)


#: lengths the FFT power uses (pld.engine.fft._canonical_size: 2^k, 5 2^(k-3),
#: 3 2^(k-2), 7 2^(k-3)), up to 512
_LD_SIZES = [16, 24, 40, 56, 64, 96, 112, 160, 192, 224, 256, 320, 384, 448, 512]


@pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double on this platform")
@pytest.mark.parametrize("n", _LD_SIZES)
def test_long_double_rfft_within_higham_bound_of_the_exact_dft(n):
    """``||fl_ld(F x) - F x||_2 <= C u_ld (log2 N + 1) ||F x||_2`` (full spectrum,
    ``||F x||_2 = sqrt(N) ||x||_2``) on random non-negative vectors, a PMF-like
    spiky one and a half-filled one (the power's zero padding), against the
    exact DFT."""
    assert _fft._U_LD == 2.0 ** -64
    rng = np.random.default_rng(n)
    cases = [rng.random(n), rng.random(n // 2 + 1) ** 8, np.exp(-0.5 * ((np.arange(n) - n / 3) / (n / 20)) ** 2)]
    assert _fft._canonical_size(n) == n
    worst = 0.0
    for x in cases:
        # inputs on the 2^-_FIX lattice (exactly representable, as the reference needs)
        x = np.round(np.asarray(x, float) * 2.0 ** 60) * 2.0 ** -60
        got = _fft.rfft_extended(x, n)
        assert got.dtype == np.clongdouble
        err = _ld_rfft_error(got, x, n)
        norm_full = math.sqrt(n) * float(np.linalg.norm(x))
        bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * norm_full
        assert err <= bound, (n, err, bound)
        worst = max(worst, err / bound)
        # the reference resolves far below the long double: the error measured is the transform's
        assert err > 0
    assert worst * MAX_LOOSENESS >= 1.0
    RATIOS[f"rfft_ld_{n}"] = worst


@pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double on this platform")
@pytest.mark.parametrize("n", [3072, 3584, 4096, 5120])
def test_long_double_rfft_bound_on_longer_zero_padded_transforms(n):
    """As the FFT power uses it: a step of a few hundred points zero-padded
    to a transform many times longer (the exact reference costs only the
    non-zero inputs)."""
    rng = np.random.default_rng(n)
    m = 200
    x = np.exp(-0.5 * ((np.arange(m) - m / 3) / (m / 12)) ** 2) * rng.uniform(0.5, 1.0, m)
    x = np.round(x * 2.0 ** 60) * 2.0 ** -60
    err = _ld_rfft_error(_fft.rfft_extended(x, n), x, n)
    bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * math.sqrt(n) * float(np.linalg.norm(x))
    assert 0 < err <= bound, (n, err, bound)
    RATIOS[f"rfft_ld_padded_{n}"] = err / bound


# ---------------------------------------------------------------------------
# long double transforms through pooled plans (pld.engine.fft.transform_extended:
# FFTW's fftwl where pyfftw has it, else pocketfft), as random allocation's
# precise runs convolve with them
# ---------------------------------------------------------------------------

def _ld_backends() -> list[str]:
    out = ["pocketfft"]
    if _fft._ld_plans_available():
        out.append("fftw")
    return out


@pytest.fixture(params=_ld_backends())
def ld_backend(request, monkeypatch):
    if request.param == "pocketfft":
        monkeypatch.setattr(_fft, "_ld_plans_available", lambda: False)
    return request.param


@pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double on this platform")
@pytest.mark.parametrize("n", [40, 96, 224, 512, 3072])
def test_transform_extended_forward_within_higham_bound_of_the_exact_dft(n, ld_backend):
    """Each backend's forward transform against the exact DFT: within ``C u_ld (log2 N + 1)
    ||F x||_2`` (the bound the precise runs charge), and not absurdly far inside it."""
    rng = np.random.default_rng(n)
    m = min(n, 300)
    for x in (rng.random(m), rng.random(m // 2 + 1) ** 8):
        x = np.round(np.asarray(x, float) * 2.0 ** 60) * 2.0 ** -60
        with _fft.transform_extended(n) as (buf, spec, out, fwd, inv):
            assert buf.dtype == np.longdouble and spec.dtype == np.clongdouble
            buf[: x.size] = x
            buf[x.size:] = 0.0
            fwd()
            got = spec.copy()
        err = _ld_rfft_error(got, x, n)
        bound = _fft._C_ERR * _fft._U_LD * (math.log2(n) + 1.0) * math.sqrt(n) * float(np.linalg.norm(x))
        assert 0 < err <= bound, (ld_backend, n, err, bound)
        assert err * MAX_LOOSENESS >= bound


@pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double on this platform")
@pytest.mark.parametrize("na, nb", [(7, 5), (60, 61), (300, 200), (1000, 1)])
def test_precise_convolutions_within_their_bound(na, nb, ld_backend):
    """random allocation's long double convolutions (roundoff._extended): the result, rounded
    to doubles, is within the transform's bound plus the stated rounding of every entry (the
    l2 form convolve_errs charges) of the exact convolution (fractions); shared inputs and
    squares included."""
    from pld.mechanisms.allocation.roundoff import _extended

    rng = np.random.default_rng(na * 1000 + nb)
    a = rng.random(na) * np.exp(rng.normal(0.0, 4.0, na))
    b = rng.random(nb) ** 3
    pairs = [(a, b), (a, a), (b, a)]
    got = _extended(pairs, {})
    for (x, y), (c, f_err, r) in zip(pairs, got):
        assert c.dtype == np.float64 and c.size == x.size + y.size - 1
        err = l2_error_fraction(c, exact_conv_fraction(x, y))
        allowed = f_err + r * float(np.linalg.norm(c))
        assert err <= allowed, (ld_backend, na, nb, err, allowed)
        # a long double transform: far inside what a double one would charge
        n = _fft._canonical_size(c.size)
        assert f_err < _fft._fft_bound(n, *_fft_norms(x), *_fft_norms(y)) / 1000


def _fft_norms(x: np.ndarray) -> tuple[float, float]:
    return float(np.sum(np.abs(x))), float(np.linalg.norm(x))


def test_long_double_plans_are_pooled(monkeypatch):
    """A second transform of a length takes the pooled plan (and a held one is not shared);
    without FFTW's long double plans, fresh pocketfft buffers each time."""
    if not _fft._ld_plans_available():
        with _fft.transform_extended(640) as first, _fft.transform_extended(640) as second:
            assert first[0] is not second[0] and first[0].dtype == np.longdouble
        return
    monkeypatch.setattr(_fft, "_ld_plans", {})
    monkeypatch.setattr(_fft, "_ld_plan_budget", {"bytes": 0, "cap": 128 << 20, "per_point": 48})
    with _fft.transform_extended(640) as first:
        with _fft.transform_extended(640) as second:
            assert first[0] is not second[0]
    with _fft.transform_extended(640) as again:
        assert again[0] is first[0] or again[0] is second[0]
    assert len(_fft._ld_plans[640]) == 2
