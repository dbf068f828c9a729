"""Round-off bounds in three norms (:mod:`pld.mechanisms.allocation.roundoff`) against exact
convolutions, and what they buy a split round's dominated pair.

The reference convolutions are direct sums in ``np.longdouble`` of the exact inputs (their own
error ~1e-19 relative, far below every bound tested), independent of pld's transforms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import ndtr  # (scipy's, not pld's: the closed forms below are the references)

from pld.engine import fft as _fft
from pld.mechanisms.allocation.roundoff import Err, convolve_errs


def _norms(x: np.ndarray) -> tuple[float, float, float]:
    x = np.abs(np.asarray(x, dtype=np.longdouble))
    return float(np.sum(x)), float(np.sqrt(np.sum(x * x))), float(np.max(x))


def _within(err: np.ndarray, bound: Err) -> None:
    l1, l2, inf = _norms(err)
    assert l1 <= bound.l1 and l2 <= bound.l2 and inf <= bound.inf
    assert bound.inf <= bound.l2 and bound.entry == bound.inf


def _perturbed(rng, n: int, scale: float) -> tuple[np.ndarray, np.ndarray, Err]:
    """An exact law (long double), a computed one off by at most ``scale`` of each entry, its bound."""
    exact = rng.lognormal(0.0, 2.0, n).astype(np.longdouble)
    exact /= np.sum(exact)
    e = scale * np.asarray(exact, dtype=np.float64)
    computed = np.asarray(exact, dtype=np.float64) + e * rng.uniform(-1.0, 1.0, n)
    return exact, computed, Err.of_entries(e + 2.0 ** -53 * np.abs(computed))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 600), st.integers(2, 600), st.sampled_from([0.0, 1e-14, 1e-9]), st.booleans(),
       st.integers(0, 2**31))
def test_convolution_error_within_its_three_norms(na, nb, scale, extended, seed):
    rng = np.random.default_rng(seed)
    xa, a, ea = _perturbed(rng, na, scale)
    xb, b, eb = _perturbed(rng, nb, scale)
    (c, ec), = convolve_errs([(a, ea, b, eb)], extended=extended)
    exact = np.convolve(xa, xb)
    _within(exact - c.astype(np.longdouble), ec)


def test_a_squaring_chain_with_halvings_stays_within_its_bounds():
    """Twelve squarings of a skewed law, halving the grid whenever it passes 4096 cells,
    the exact chain run alongside in long double (the two follow the same linear maps)."""
    rng = np.random.default_rng(7)
    exact, x, e = _perturbed(rng, 300, 1e-15)
    for _ in range(12):
        (x, e), = convolve_errs([(x, e, x, e)])
        exact = np.convolve(exact, exact)
        if x.size > 4096:
            f = 1.0 if x.size % 3 else 0.999
            xx = np.append(x, 0.0) if x.size % 2 else x
            ee = np.append(exact, 0.0) if exact.size % 2 else exact
            x = xx[0::2] + f * xx[1::2]
            exact = ee[0::2] + np.longdouble(f) * ee[1::2]
            e = e.mapped(max(1.0, f), 1.0 + f, 4.0 * 2.0 ** -53, xx)
        _within(exact - x.astype(np.longdouble), e)
    assert e.entry < 0.5 * e.l2  # (the l-infinity route pays)


def test_mixture_error():
    rng = np.random.default_rng(3)
    xa, a, ea = _perturbed(rng, 500, 1e-12)
    xb, b, eb = _perturbed(rng, 500, 1e-13)
    out = 0.3 * a + 0.7 * b
    _within(np.longdouble(0.3) * xa + np.longdouble(0.7) * xb - out.astype(np.longdouble),
            ea.mixed(0.3, eb, 0.7, a, b))


@pytest.mark.skipif(not _fft.extended_available(), reason="long double is a double here")
def test_extended_transforms_carry_a_smaller_bound():
    rng = np.random.default_rng(11)
    _, a, ea = _perturbed(rng, 20000, 0.0)
    (_, plain), = convolve_errs([(a, ea, a, ea)])
    (_, ext), = convolve_errs([(a, ea, a, ea)], extended=True)
    assert ext.l2 < 0.1 * plain.l2


def test_split_round_dominated_pair_keeps_the_light_rounds():
    """sigma 0.626, 1-of-19762 (a stop-hook probe: 37 epochs at delta 4e-5 were 17x their
    target, the lower end the loose one): the dominated pair of {N = 0} (no heavy coordinate)
    kept P(N = 0) less 1.8e-6 a round, every label of the light sum losing its l2 round-off
    bound (1.5e-9); 37 rounds dropped more than delta.  The exact P(N = 0) is closed form:
    ``(1 - p_h) (1 - q_h)^(t - 1)`` with ``p_h``, ``q_h`` the marked and unmarked coordinate's
    chance to pass the light cut."""
    import pld.mechanisms.allocation.heavy_lower as hl
    from pld.mechanisms.allocation.sums import sum_laws

    seen = {}
    original = hl._lower_labels

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen["atoms"], seen["args"] = out[0], args
        return out

    sigma, t = 0.626, 19762
    dropped = {}
    for precise in (False, True):
        sum_laws.cache_clear()
        hl._lower_labels = spy
        try:
            info = sum_laws(sigma, t, 0.02, "split", 1e-4, None, precise)[2]
        finally:
            hl._lower_labels = original
            sum_laws.cache_clear()
        _, a, d, n = seen["args"][:4]
        top = math.log((n + 0.5) * d)
        q_h = float(ndtr(-(top + 0.5 * a * a) / a))
        p_h = float(ndtr(-(top - 0.5 * a * a) / a))
        exact = (1.0 - p_h) * (1.0 - q_h) ** (t - 1)
        kept = float(np.sum(np.exp(seen["atoms"].remove[1])))
        assert kept <= exact * (1 + 1e-12)
        dropped[precise] = exact - kept
        assert info["lumped_upper"] > 0.0
    # three norms in double: 1.8e-6 -> ~1e-7; a precise round (long double where it drops
    # more than 1e-10) ~3e-9
    assert dropped[False] < 2e-7
    assert dropped[True] < (1e-8 if _fft.extended_available() else 2e-7)


def test_round_off_a_share_of_delta_sends_the_chain_to_the_precise_round():
    """A round built in double only (``precise=False``) counts its lumped and dropped round-off
    in its tail_mass() (the share of delta past which pld.PLD goes on from its deeper() pair),
    and deeper() is the same round built precise (long double where it lumps or drops); the
    chain goes on precise from there.  sigma 1.294, 1-of-662, delta 1e-9: the lumps were a
    tenth of delta (48x its target)."""
    import pld
    from pld.mechanisms.allocation import RandomAllocation

    assert RandomAllocation(pld.Gaussian(1.294), 662).precise
    r = RandomAllocation(pld.Gaussian(1.294), 662, precise=False)
    info = r.grid_info()
    assert info["lumped_upper"] > 1e-12 and r.tail_mass() >= info["lumped_upper"]
    deep = r.deeper()
    # (the round-off outweighs the tails at +inf: first the same round precise, its tails as they were)
    assert deep is not None and deep.precise and deep.tail is None and deep.tail_mass() < info["lumped_upper"]
    deepest = deep.deeper()
    assert deepest is not None and deepest.tail is not None and deepest.precise and deepest.deeper() is None
    after = deep.refined()
    assert after is not None and after.precise
    d = pld.PLD(((r, 1),))
    lo, hi = d.epsilon_bounds(1e-9)
    assert hi - lo <= 1.3e-4 * hi  # (48x its target before)
    assert d._deep_box and d._deep_box[0] is not None


@pytest.mark.parametrize("sigma, t", [(1.206, 402), (0.8, 60), (2.5, 3000)])
def test_label_quantiles_bound_the_light_sum(sigma, t):
    """The light sum's upper quantiles from its labels (light_quantiles.py) against Monte Carlo
    of the sum itself (numpy draws of the log-normal coordinates given Y <= B): every
    quantile at or above the sample's (its tail frequency at most tau plus four standard
    errors), and in the bulk within a fifth of a standard deviation of it (Chernoff's are
    0.5-1.2 standard deviations above).  The labels' cells at the split's own resolution
    (a quarter of the light sums' coarsening)."""
    from pld.kernels import cells_on
    from pld.mechanisms.allocation.heavy import light_cut
    from pld.mechanisms.allocation.light_quantiles import label_quantiles

    a = 1.0 / sigma
    mu = -0.5 * a * a
    d, n_l = light_cut(sigma, t, 0.02, 1e-4)
    cq, ceq, cp, cep = cells_on(mu, a, np.arange(n_l + 1) * d)
    taus = np.array([0.9, 0.7, 0.5, 0.3, 0.1, 0.03, 1e-2, 1e-4, 1e-8])
    got, marked = label_quantiles(cq, ceq, cp, cep, d, t - 1, taus, 0.0025)
    assert np.all(np.diff(got) >= 0) and np.all(marked >= got)
    rng = np.random.default_rng(5)
    n = 20000
    big_b = n_l * d
    y = np.exp(rng.normal(mu, a, (n, t - 1)))
    while np.any(y > big_b):  # (given light: redraw the heavy ones)
        bad = y > big_b
        y[bad] = np.exp(rng.normal(mu, a, int(bad.sum())))
    sums = y.sum(axis=1)
    sd = float(np.std(sums))
    for tau, s_k in zip(taus, got):
        assert math.isfinite(s_k) or tau < 1e-4  # (past what the computed law resolves: +inf)
        freq = float(np.mean(sums > s_k))
        assert freq <= tau + 4.0 * math.sqrt(tau * (1 - tau) / n) + 1.0 / n, (tau, s_k, freq)
        if 0.1 <= tau <= 0.9:
            assert s_k <= float(np.quantile(sums, 1.0 - tau)) + 0.2 * sd
