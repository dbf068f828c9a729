"""k-of-t random allocation: the Poisson likelihood-ratio statistic's lower end (sum over the
steps of a label of log(1 + z Y), z = k/(t - k)) against truths not computed by pld: the
statistic's two laws by direct convolution of cell masses from scipy (every entry, far tails
included), Monte Carlo of the exact likelihood ratio e_k(Y)/C(t, k), the exact 1-of-t pair
(a statistic of it can only lose), and the block argument's upper end."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_ndtr

import pld
from pld.mechanisms.allocation import RandomAllocation
from pld.mechanisms.allocation.pairs import _PoissonStatistic
from pld.mechanisms.allocation.poisson_statistic import _settings, log_brackets, poisson_lr_pair
from test_allocation_log_labels import _quiet


def _cell_masses(sigma: float, t: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Q- and marked P-masses of the statistic's cells from scipy's normal law: log Y is
    N(-a^2/2, a^2) unmarked, N(a^2/2, a^2) marked; cell j is expm1(j w)/z < Y <= expm1((j+1) w)/z."""
    a = 1.0 / sigma
    z, w, n = _settings(a, t, k)
    with np.errstate(divide="ignore"):
        log_edges = np.log(np.expm1(w * np.arange(n + 1)) / z)

    def masses(mean: float) -> np.ndarray:
        x = (log_edges - mean) / a
        lo_cdf, hi_cdf = log_ndtr(x[:-1]), log_ndtr(x[1:])
        lo_sf, hi_sf = log_ndtr(-x[:-1]), log_ndtr(-x[1:])
        with np.errstate(divide="ignore", invalid="ignore"):
            below = hi_cdf + np.log1p(-np.exp(lo_cdf - hi_cdf))  # (cells below the median)
            above = lo_sf + np.log1p(-np.exp(hi_sf - lo_sf))
        return np.exp(np.where(x[:-1] > 0, above, below))

    return masses(-0.5 * a * a), masses(0.5 * a * a)


def _power(x: np.ndarray, m: int) -> np.ndarray:
    out = np.ones(1)
    for _ in range(m):
        out = np.convolve(out, x)  # (sums of non-negative products: relative rounding only)
    return out


def _entries(sigma: float, t: int, k: int):
    """Per law (P, then Q): ``(index, truth, lower, upper)`` of every bracketed entry inside
    the truth's support, the truth by direct convolution of scipy's cell masses."""
    q1, p1 = _cell_masses(sigma, t, k)
    rest = _power(q1, t - k)
    q_law, p_law = np.convolve(_power(q1, k), rest), np.convolve(_power(p1, k), rest)
    first, (lp_lo, lp_hi, lq_lo, lq_hi), _ = log_brackets(sigma, t, k)
    for law, lo, hi in ((p_law, lp_lo, lp_hi), (q_law, lq_lo, lq_hi)):
        idx = np.arange(first, first + lo.size)
        inside = idx < law.size
        yield idx[inside], law[idx[inside]], lo[inside], hi[inside]


def _holds(truth: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Where the truth is representable: its log in ``[lo, hi]`` (to 1e-9)."""
    ok = truth > 1e-250
    lt = np.log(truth[ok])
    return (lo[ok] <= lt + 1e-9) & (hi[ok] >= lt - 1e-9)


@pytest.mark.parametrize("sigma, t, k", [(1.0, 12, 3), (0.6, 10, 2), (2.5, 16, 5)])
def test_brackets_hold_every_entry_of_the_direct_convolution(sigma, t, k):
    """Every entry of both laws (the far tails a strict delta reads included) lies in its
    certified bracket, and the bulk's brackets are narrow: the tilts and the windows'
    dropped mass are accounted, and they resolve what they should."""
    for idx, truth, lo, hi in _entries(sigma, t, k):
        assert np.all(_holds(truth, lo, hi)), (sigma, t, k)
        # the upper side, down to 1e-12 of the largest entry (one untilted transform's error
        # is ~1e-16 of the largest there: a bracket ~1e-4 wide, relative), to 1e-4
        mean = float(np.dot(idx, truth) / truth.sum())
        upper = (truth > 1e-12 * truth.max()) & (idx >= mean)
        assert np.all(hi[upper] - lo[upper] <= 1e-4), (sigma, t, k, float(np.max(hi[upper] - lo[upper])))
        # entries the law does not reach have no lower end above 0
        assert np.all(lo[truth == 0.0] == -np.inf)


def test_narrow_windows_still_bracket_every_entry(monkeypatch):
    """Windows of 1.5 standard deviations drop most of each tilted law: what they drop joins
    the error bound, so every entry is still bracketed (only wider)."""
    from pld.mechanisms.allocation import poisson_statistic

    monkeypatch.setattr(poisson_statistic, "_KEEP_SD", 1.5)
    for _, truth, lo, hi in _entries(1.0, 40, 4):
        assert np.all(_holds(truth, lo, hi))
        assert np.any(np.isfinite(lo[truth > 1e-250]))


def _log_ek(logy: np.ndarray, k: int) -> np.ndarray:
    """log e_k(Y) row by row (the recursion e_j <- e_j + y e_{j-1}, scaled by the row's largest)."""
    top = logy.max(axis=1, keepdims=True)
    y = np.exp(logy - top)
    e = np.zeros((y.shape[0], k + 1))
    e[:, 0] = 1.0
    for i in range(y.shape[1]):
        e[:, 1:] = e[:, 1:] + y[:, i:i + 1] * e[:, :-1]
    return np.log(e[:, k]) + k * top[:, 0]


def _mc_delta(sigma: float, t: int, k: int, eps: float, direction: str, n: int = 100_000,
              seed: int = 11) -> tuple[float, float]:
    """delta of the true k-of-t pair in one direction, by Monte Carlo of e_k(Y)/C(t, k) under P."""
    rng = np.random.default_rng(seed)
    a = 1.0 / sigma
    logy = -0.5 * a * a + a * rng.standard_normal((n, t))
    if direction == "remove":
        logy[:, :k] += a * a  # (by symmetry, the record in the first k steps)
    loss = _log_ek(logy, k) - (math.lgamma(t + 1) - math.lgamma(k + 1) - math.lgamma(t - k + 1))
    loss = loss if direction == "remove" else -loss
    f = np.maximum(-np.expm1(eps - loss), 0.0)
    return float(f.mean()), float(f.std() / math.sqrt(n))


def _atoms_delta(atoms: tuple, eps: float) -> float:
    loss, lp, _ = atoms
    sel = loss > eps
    return float(np.sum(np.exp(lp[sel]) * -np.expm1(eps - loss[sel])))


@pytest.mark.parametrize("sigma, t, k, eps", [(1.0, 40, 4, 1.0), (1.0, 40, 4, 2.0), (0.7, 30, 6, 3.0),
                                              (2.0, 120, 30, 1.0)])
def test_each_direction_below_monte_carlo_of_the_true_pair(sigma, t, k, eps):
    """Each direction's atoms give a delta at most the true one (5 standard errors) and, in
    the bulk, close to it (measured 0.93-1.0 of it): the statistic is nearly sufficient."""
    side, _ = poisson_lr_pair(sigma, t, k)
    for direction, atoms in (("remove", side.remove), ("add", side.add)):
        mean, se = _mc_delta(sigma, t, k, eps, direction)
        got = _atoms_delta(atoms, eps)
        assert got <= mean + 5 * se, (direction, got, mean, se)
        assert got >= 0.85 * mean - 5 * se, (direction, got, mean, se)


@pytest.mark.parametrize("sigma, t", [(0.8, 10), (1.5, 50), (3.0, 200)])
def test_one_participation_below_the_exact_pair(sigma, t):
    """k = 1 (z = 1/(t - 1)): a statistic of the exact 1-of-t pair, which pld brackets
    tightly, so its delta stays below that pair's certified upper end (close to it in the
    bulk; in the far tail log(1 + z Y) keeps less than the sum of the Y, the sufficient
    statistic there: 64% of delta at sigma 0.8, 10 steps, epsilon 1.5)."""
    low = pld.PLD(((_PoissonStatistic(sigma, t, 1), 1),))
    exact = RandomAllocation(pld.Gaussian(sigma), t).pld()
    for eps in (0.1, 0.5, 1.5):
        s_lo, _ = low.delta_bounds(eps)
        e_lo, e_hi = exact.delta_bounds(eps)
        assert s_lo <= e_hi * (1 + 1e-9), (eps, s_lo, e_hi)
        if eps == 0.1:
            assert s_lo >= 0.9 * e_lo, (eps, s_lo, e_lo)


def test_many_participations_close_on_the_block_argument():
    """sigma 1, 64 of 1024 steps, delta 1e-5: the lower end was the label sum's 12.028 under
    the block argument's 13.752 (12.5% of the width structural); the Poisson statistic gives
    13.358, and explain() names it."""
    w = _quiet()
    try:
        mech = RandomAllocation(pld.Gaussian(1.0), 1024, participations=64)
        lo, hi = mech.pld().epsilon_bounds(1e-5)
        info = mech.explain()
    finally:
        w.__exit__(None, None, None)
    assert 13.3 <= lo <= hi <= 13.76
    assert (hi - lo) / hi <= 0.03
    assert "Poisson likelihood-ratio statistic" in info["lower"]


def test_tilts_whose_laws_outgrow_their_budget_are_left_out():
    """sigma 0.3, 3 of 1e5 steps: the untilted laws fit (3.3e5 cells), but a tilt moves a
    coordinate's mass into its heavy tail (tilts 1, 2, 3: 6.7e5, 1.4e6, 1e8 cells; built, they
    ran out of memory): only the untilted laws are built, in well under a second."""
    from pld.mechanisms.allocation import poisson_statistic as ps

    assert ps.fits(0.3, 100_000, 3)
    _, info = poisson_lr_pair(0.3, 100_000, 3)
    assert info["tilts"] == (0.0,) and info["cells"] <= ps.MAX_WINDOW
    # where every tilt fits, all are built
    assert poisson_lr_pair(1.0, 1024, 64)[1]["tilts"] == ps.TILTS


def test_coarser_cells_where_the_finest_do_not_fit():
    """sigma 0.5, 25000 of 1e5 steps, delta 1e-12: at 0.01-nat cells one law's windows need
    1.2e6 cells; at 2.5x wider ones they fit, and the lower end rises from the sum of the
    outputs' 13611 to about 24788 under the block argument's 28829."""
    from pld.mechanisms.allocation import poisson_statistic as ps

    sigma, t, k = 0.5, 100_000, 25_000
    assert ps.fits(sigma, t, k) and ps.window_cells(sigma, t, k) <= ps.MAX_WINDOW
    assert ps._settings(1.0 / sigma, t, k)[1] > ps._MAX_WIDTH
    w = _quiet()
    try:
        lo, hi = RandomAllocation(pld.Gaussian(sigma), t, participations=k).pld().epsilon_bounds(1e-12)
    finally:
        w.__exit__(None, None, None)
    assert 24_000 <= lo <= hi <= 29_000


def test_long_rounds_whose_laws_do_not_fit_keep_the_other_statistics():
    """sigma 0.729, 2 of 75578 steps: the cells would number millions (z ~ 3e-5): the
    statistic is not built, the label sum is."""
    mech = RandomAllocation(pld.Gaussian(0.729), 75578, participations=2)
    assert not isinstance(mech._sum_statistic(), _PoissonStatistic)
    assert not any(isinstance(m, _PoissonStatistic) for alt in mech.lower_alternatives() for m, _ in alt)


@settings(max_examples=10, deadline=None)
@given(sigma=st.floats(0.5, 3.0), t=st.integers(4, 300), share=st.floats(0.0, 1.0), epochs=st.integers(1, 20),
       log_delta=st.floats(-10.0, -4.0))
def test_statistic_below_the_block_argument(sigma, t, share, epochs, log_delta):
    """Across the space: the statistic's lower end is at most the block argument's upper end
    (two certificates from different constructions that must be ordered), and the whole
    bracket is ordered."""
    k = 2 + int(share * (t // 2 - 2)) if t >= 6 else 2
    delta = 10.0 ** log_delta
    w = _quiet()
    try:
        mech = RandomAllocation(pld.Gaussian(sigma), t, participations=k)
        stat = pld.PLD(((_PoissonStatistic(sigma, t, k), epochs),))
        full = mech.pld().self_compose(epochs) if epochs > 1 else mech.pld()
        s_lo, _ = stat.epsilon_bounds(delta)
        lo, hi = full.epsilon_bounds(delta)
    finally:
        w.__exit__(None, None, None)
    assert 0.0 <= lo <= hi
    assert s_lo <= hi * (1 + 1e-9), (s_lo, hi)
    assert lo >= s_lo * (1 - 1e-9) or s_lo == 0.0
