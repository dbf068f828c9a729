"""Random allocation's geometric construction (short rounds at small noise) against truths
not computed by pld: the sums of two laws by brute force over every pair, ``t = 2`` by
quadrature, ``t = 4`` by Monte Carlo, and the other certified constructions (two
certified brackets of the same quantity must overlap)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pld
from pld.kernels import geometric_sum_merge, geometric_sum_spread
from pld.mechanisms.allocation import AllocationAccuracyWarning, RandomAllocation, geometric
from pld.mechanisms.allocation.geometric import _band
from test_random_allocation import _check_two_steps, _mc_delta, _round_hs

H = 0.05
N = 200
G = np.concatenate(([0.0], 1e-3 * np.exp(H * np.arange(N - 1))))


def _law(seed: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.random(n) ** 4 * (rng.random(n) < 0.6)
    x[n // 2:] *= 0.0  # (room above, so no sum leaves the grid)
    return x / x.sum()


def _pair_spread(a: np.ndarray, b: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Every sum of two grid points spread onto the ends of its own cell, by brute force."""
    x, m = _pairs(a, b, g, g)
    x, m = x[m > 0], m[m > 0]
    k = np.searchsorted(g, x, side="right") - 1
    f = np.clip((x - g[k]) / (g[k + 1] - g[k]), 0.0, 1.0)
    return np.bincount(k, m * (1 - f), g.size) + np.bincount(k + 1, m * f, g.size)


def _check_merge(a: np.ndarray, b: np.ndarray, g: np.ndarray, band: int, rng, quantiles) -> None:
    """The merge of two laws with atoms anywhere in their cells against every pair: mass and
    moment kept, every call price at most the exact sum's (a conditional mean)."""
    va = g + rng.random(g.size) * np.append(np.diff(g), 0.0)
    vb = g + rng.random(g.size) * np.append(np.diff(g), 0.0)
    om, ov, over = geometric_sum_merge(a, a * va, b, b * vb, g, band)
    assert over == 0.0
    x, m = _pairs(a, b, va, vb)
    assert math.fsum(om) == pytest.approx(math.fsum(m), rel=1e-12)
    assert math.fsum(ov) == pytest.approx(math.fsum((x * m).tolist()), rel=1e-12)
    sel = om > 0
    v = ov[sel] / om[sel]
    for c in np.quantile(x[m > 0], quantiles):
        assert math.fsum((np.maximum(v - c, 0) * om[sel]).tolist()) <= math.fsum(
            (np.maximum(x - c, 0) * m).tolist()) * (1 + 1e-12)


#: a fine grid: long segments of pairs landing in one cell (windows of up to 2^7 entries)
H_FINE = 0.01
N_FINE = 1200
G_FINE = np.concatenate(([0.0], 1e-3 * np.exp(H_FINE * np.arange(N_FINE - 1))))


def _pairs(a: np.ndarray, b: np.ndarray, va: np.ndarray, vb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every sum of two atoms, with its mass."""
    return (va[:, None] + vb[None, :]).ravel(), (a[:, None] * b[None, :]).ravel()


@pytest.mark.parametrize("seed, fine", [(1, False), (2, False), (3, False), (4, True), (5, True)])
def test_spread_sum_is_a_mean_preserving_spread_of_the_exact_sum(seed, fine):
    h, n, g = (H_FINE, N_FINE, G_FINE) if fine else (H, N, G)
    a, b = _law(seed, n), _law(seed + 10, n)
    band = _band(h)
    assert band < n // 2  # (the prefix-sum path is taken)
    out, over = geometric_sum_spread(a, b, g, h, band)
    assert over == 0.0
    x, m = _pairs(a, b, g, g)
    # mass and mean kept (up to the shares' rounding up)
    assert math.fsum(m) <= math.fsum(out) <= math.fsum(m) * (1 + 1e-9)
    mean = math.fsum((x * m).tolist())
    assert mean <= math.fsum((g * out).tolist()) <= mean * (1 + 1e-9)
    # the spread of each sum onto the ends of its own cell, pair by pair: the kernel's
    # segments give the same shares (up to their rounding up)
    exact = _pair_spread(a, b, g)
    assert np.all(out >= exact * (1 - 1e-12) - 1e-300)
    assert np.all(out <= exact * (1 + 1e-8) + 1e-9 * np.max(exact))
    # larger in the convex order: every call and put price at least the exact sum's
    for c in np.quantile(x[m > 0], [0.01, 0.2, 0.5, 0.8, 0.99]):
        assert math.fsum((np.maximum(g - c, 0) * out).tolist()) >= math.fsum((np.maximum(x - c, 0) * m).tolist())
        assert math.fsum((np.maximum(c - g, 0) * out).tolist()) >= math.fsum((np.maximum(c - x, 0) * m).tolist())


@pytest.mark.parametrize("seed, fine", [(1, False), (2, False), (3, True)])
def test_merged_sum_is_a_conditional_mean_of_the_exact_sum(seed, fine):
    h, n, g = (H_FINE, N_FINE, G_FINE) if fine else (H, N, G)
    _check_merge(_law(seed, n), _law(seed + 10, n), g, _band(h), np.random.default_rng(seed),
                 [0.01, 0.2, 0.5, 0.8, 0.99])


@settings(max_examples=25, deadline=None)
@given(h=st.floats(0.005, 0.2), extra=st.integers(20, 600), seed=st.integers(0, 2**31),
       sparse=st.floats(0.05, 1.0), start=st.floats(-40.0, 5.0))
def test_segments_match_every_pair_on_any_geometric_grid(h, extra, seed, sparse, start):
    """Both kernels against every pair, on random grids (relative spacing, size, first point)
    and random sparse laws: the spread at least each pair's own spread onto its cell's ends
    (and no more than rounding above it), the merge a conditional mean (mass and moment kept,
    every call price at most the exact sum's)."""
    n = int(math.log(2.0) / h) + 4 + extra
    g = np.concatenate(([0.0], math.exp(start) * np.exp(h * np.arange(n - 1))))
    rng = np.random.default_rng(seed)
    top = extra  # (room above: no sum leaves the grid)
    laws = []
    for _ in range(2):
        x = rng.random(n) ** 3 * (rng.random(n) < sparse)
        x[top:] = 0.0
        x[rng.integers(0, top)] += 0.1
        laws.append(x / x.sum())
    a, b = laws
    band = _band(h)
    out, over = geometric_sum_spread(a, b, g, h, band)
    assert over == 0.0
    exact = _pair_spread(a, b, g)
    assert np.all(out >= exact * (1 - 1e-12))
    assert np.all(out <= exact * (1 + 1e-8) + 1e-8 * np.max(exact))
    _check_merge(a, b, g, band, rng, [0.05, 0.5, 0.95])


def _geo(sigma: float, t: int, spacing: float = 0.02) -> RandomAllocation:
    return RandomAllocation(pld.Gaussian(sigma), t, construction="geometric", spacing=spacing)


@pytest.mark.parametrize("sigma", [0.35, 0.5, 0.8])
def test_two_steps_against_quadrature(sigma):
    _check_two_steps(_geo(sigma, 2), (0.5, 2.0, 5.0), 3e-4)


def test_four_steps_against_monte_carlo():
    sigma, t = 0.5, 4
    mech = _geo(sigma, t)
    for direction in ("remove", "add"):
        for eps in (0.5, 2.0):
            est, se = _mc_delta(sigma, t, eps, direction, n=200_000, seed=11)
            lo, hi = _round_hs(mech, direction, eps)
            assert lo <= est + 5 * se and hi >= est - 5 * se, (direction, eps, lo, est, se, hi)
            assert hi - lo < 1e-4 * est


@pytest.mark.parametrize("sigma, t, epochs, delta", [(0.364, 4, 31, 5.76e-5), (0.532, 4, 4, 3.6e-12),
                                                     (0.45, 10, 1, 1e-5), (0.4, 1000, 10, 1e-8)])
def test_short_rounds_at_small_noise_meet_the_target(sigma, t, epochs, delta):
    """Where the split bounded two heavy coordinates stochastically ([133.6, 175.1],
    [26.71, 32.24], [9.09, 11.39]; 1-of-1000 at sigma 0.4: 1.5x the target) the geometric grid
    meets the default target, and its bracket overlaps the split's (both certified)."""
    mech = RandomAllocation(pld.Gaussian(sigma), t)
    assert mech._construction() == "geometric"
    lo, hi = mech.pld().self_compose(epochs).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6, (lo, hi)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AllocationAccuracyWarning)
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        split = RandomAllocation(pld.Gaussian(sigma), t, construction="split")
        s_lo, s_hi = split.pld().self_compose(epochs).epsilon_bounds(delta, rtol=1e-2)
    assert s_lo <= hi and lo <= s_hi, (lo, hi, s_lo, s_hi)


@pytest.mark.parametrize("sigma, t", [(0.12, 100_000), (0.2, 4097)])
def test_long_rounds_at_very_small_noise_take_the_geometric_grid(sigma, t):
    """Below sigma 0.25 the split's light sums outgrew memory (sigma 0.12, 1e5 steps:
    MemoryError after 30 s; sigma 0.1, 1e5 steps in 3 of them was killed for memory) or stayed
    loose (sigma 0.2, 4097 steps, delta 1e-5: [24.79, 33.10] in 17 s).  The geometric grid
    holds those rounds: within the target, below one Gaussian step (no amplification), and
    the refinement chain never turns to the split."""
    mech = RandomAllocation(pld.Gaussian(sigma), t)
    assert mech._construction() == "geometric"
    lo, hi = mech.pld().epsilon_bounds(1e-5)
    assert 0.0 < lo <= hi
    assert hi - lo <= 1e-4 * hi + 1e-6, (lo, hi)
    assert hi <= pld.Gaussian(sigma).pld().epsilon_bounds(1e-5)[0]
    m = mech
    while (m := m.refined()) is not None:
        assert m._construction() == "geometric"


def test_refinement_chain():
    # small noise: auto is geometric, refined at half the spacing
    mech = RandomAllocation(pld.Gaussian(0.5), 4)
    nxt = mech.refined()
    assert nxt is not None and nxt.construction == "geometric" and nxt.spacing == pytest.approx(0.01)
    assert nxt.refined() is None  # (FINEST_SPACING)
    # larger noise: the geometric grid is the chain's last resort for a short round, then
    # finer ones (geometric.finer_spacings: halving while within FINE_POINTS)
    chain, m = [], RandomAllocation(pld.Gaussian(1.5), 8)
    while (m := m.refined()) is not None:
        chain.append((m.construction, m.spacing))
    first = chain.index(("geometric", 0.02))
    tail = chain[first:]
    assert all(c == "geometric" for c, _ in tail) and len(tail) >= 2
    assert [sp for _, sp in tail] == [0.02 / 2 ** j for j in range(len(tail))]
    assert all(geometric.grid_points(1.5, 8, sp) <= geometric.FINE_POINTS for _, sp in tail[2:])
    # a longer round takes those geometric grids last whose cells resolve the round's loss
    # (sigma 1, 98 steps: 53 and 106 cells per standard deviation of log(S/t) at spacing 0.01
    # and 0.005, 26 at 0.02) ...
    chain, m = [], RandomAllocation(pld.Gaussian(1.0), 98)
    while (m := m.refined()) is not None:
        chain.append((m.construction, m.spacing))
    assert chain[-2:] == [("geometric", 0.01), ("geometric", 0.005)] and len(chain) > 2
    assert ("geometric", 0.02) not in chain
    # ... not where it does not (sigma 1.5, 1000 steps: 9.5 cells), nor beyond 1024 steps
    for steps in (1000, 2000):
        m = RandomAllocation(pld.Gaussian(1.5), steps)
        while (m := m.refined()) is not None:
            assert m.construction != "geometric"


def test_refused_where_it_cannot_be_built():
    with pytest.raises(ValueError, match="construction"):
        RandomAllocation(pld.Gaussian(1.0), 4, construction="geometrical")


def test_explain_names_the_geometric_grid():
    e = RandomAllocation(pld.Gaussian(0.5), 4).explain(1e-5)
    assert e["grid"]["geometric"] and "geometric grid" in e["upper"] and "merged per cell" in e["lower"]
    assert e["epsilon_lower"] <= e["epsilon_upper"] <= e["epsilon_lower"] * (1 + 1e-4) + 1e-6
    # a k-of-t round's blocks on it; the structural gap said with what Monte Carlo measured
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.NotTightWarning)
        e = RandomAllocation(pld.Gaussian(0.5), 12, participations=2).explain(1e-5)
    assert "6 round(s)" not in e["upper"] and "2 round(s) of 1-of-6" in e["upper"]
    assert "Monte Carlo" in e["loose"] and e["width_parts"]["structural"] > 0


@settings(max_examples=6, deadline=None)
@given(sigma=st.floats(0.3, 1.5), t=st.integers(2, 64), eps=st.floats(0.0, 8.0))
def test_geometric_bracket_properties(sigma, t, eps):
    """Across the range: both directions' hockey sticks ordered (lower <= upper), non-increasing
    in epsilon, and in [0, 1]."""
    mech = _geo(sigma, t, spacing=0.08)
    for direction in ("remove", "add"):
        lo, hi = _round_hs(mech, direction, eps)
        lo2, hi2 = _round_hs(mech, direction, eps + 0.5)
        assert 0.0 <= lo <= hi <= 1.0 + 1e-9, (direction, lo, hi)
        assert lo2 <= lo + 1e-15 and hi2 <= hi + 1e-15
        assert lo2 <= hi2
