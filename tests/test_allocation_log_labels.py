"""k-of-t random allocation at small noise: the log-label lower end (a post-processing of the
true pair) against truths not computed by pld: Monte Carlo of the exact likelihood ratio
e_k(Y)/C(t, k), the exact 1-of-t pair (a statistic of it can only lose), and the block
argument's upper end."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pld
from pld.mechanisms.allocation import RandomAllocation
from pld.mechanisms.allocation.labels import prefers_log_labels
from pld.mechanisms.allocation.pairs import _LabelSum
from test_random_allocation import _mc_k_of_t


def _quiet():
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore", pld.NotTightWarning)
    warnings.simplefilter("ignore", pld.TargetMissedWarning)
    return w


def test_small_noise_takes_the_log_labels():
    mech = RandomAllocation(pld.Gaussian(0.4), 8, participations=2)
    assert mech._lower_part().log_labels
    assert "log-label" in mech.explain()["lower"]
    # at larger noise, or where the label origin lies above most marked steps, the label sum
    assert not getattr(RandomAllocation(pld.Gaussian(0.9), 100, participations=4)._lower_part(), "log_labels", False)
    assert not prefers_log_labels(0.73, 4235)
    # nor where so many steps hold the record that the window is long (the sum of the outputs
    # is far ahead there: 39036 against 60 at 25000 of 1e5 steps)
    assert not RandomAllocation(pld.Gaussian(0.5), 10**5, participations=25_000)._lower_part().__dict__.get(
        "log_labels", False)


@pytest.mark.parametrize("eps", [1.0, 3.0, 6.0])
def test_log_labels_below_monte_carlo_of_the_true_pair(eps):
    """sigma 0.4, 2 of 8 steps, one round: the statistic's delta is at most the true one
    (Monte Carlo over every 2-subset, both directions), and far above the sum statistic's
    (the Gaussian mechanism of mu = k / (sigma sqrt(t)), the lower end here before)."""
    sigma, t, k = 0.4, 8, 2
    low = pld.PLD(((_LabelSum(sigma, t, k, 0.02, True), 1),))
    lo, _ = low.delta_bounds(eps)
    truth, truth_se = max(_mc_k_of_t(sigma, t, k, eps, "remove", n=200_000, seed=5),
                          _mc_k_of_t(sigma, t, k, eps, "add", n=200_000, seed=6))
    assert lo <= truth + 5 * truth_se, (eps, lo, truth, truth_se)
    assert lo >= 0.25 * truth, (eps, lo, truth)  # (measured: 0.96, 0.81, 0.27 of it at eps 1, 3, 6)
    before, _ = pld.Gaussian(sigma * math.sqrt(t) / k).pld().delta_bounds(eps)
    assert lo >= 1.5 * before, (eps, lo, before)
    # and the whole k-of-t bracket holds the truth
    w = _quiet()
    try:
        b_lo, b_hi = RandomAllocation(pld.Gaussian(sigma), t, participations=k).pld().delta_bounds(eps)
    finally:
        w.__exit__(None, None, None)
    assert b_lo <= truth + 5 * truth_se and b_hi >= truth - 5 * truth_se


@pytest.mark.parametrize("sigma, t", [(0.35, 10), (0.5, 40), (0.6, 200)])
def test_log_labels_of_one_participation_below_the_exact_pair(sigma, t):
    """With k = 1 the statistic is a post-processing of the exact 1-of-t pair, which pld
    brackets tightly: its delta stays below that pair's certified upper end."""
    low = pld.PLD(((_LabelSum(sigma, t, 1, 0.02, True), 1),))
    exact = RandomAllocation(pld.Gaussian(sigma), t).pld()
    for eps in (0.5, 2.0, 5.0):
        s_lo, _ = low.delta_bounds(eps)
        _, e_hi = exact.delta_bounds(eps)
        assert s_lo <= e_hi * (1 + 1e-9), (eps, s_lo, e_hi)


@settings(max_examples=8, deadline=None)
@given(sigma=st.floats(0.3, 0.74), t=st.integers(8, 400), share=st.floats(0.0, 1.0), epochs=st.integers(1, 20),
       log_delta=st.floats(-10.0, -4.0))
def test_bracket_is_ordered_at_small_noise(sigma, t, share, epochs, log_delta):
    k = max(2, int(share * t / 4))
    w = _quiet()
    try:
        lo, hi = RandomAllocation(pld.Gaussian(sigma), t, participations=k).pld().self_compose(
            epochs).epsilon_bounds(10.0 ** log_delta, rtol=1e-2)
    finally:
        w.__exit__(None, None, None)
    assert 0.0 <= lo <= hi and math.isfinite(lo), (lo, hi)


def test_long_windows_by_fft_below_monte_carlo(monkeypatch):
    """The FFT path (windows too long to convolve directly, l2 error bounds) is a lower end too."""
    import pld.mechanisms.allocation.labels as labels

    monkeypatch.setattr(labels, "_DIRECT_CELLS", 0)
    labels.log_label_pair.cache_clear()
    try:
        sigma, t, k, eps = 0.4, 8, 2, 3.0
        side, info = labels.log_label_pair(sigma, t, k, 0.02)
        assert not info["direct"]
        lo, _ = pld.PLD(((_LabelSum(sigma, t, k, 0.02, True), 1),)).delta_bounds(eps)
        truth, truth_se = max(_mc_k_of_t(sigma, t, k, eps, "remove", n=200_000, seed=5),
                              _mc_k_of_t(sigma, t, k, eps, "add", n=200_000, seed=6))
        assert 0.25 * truth <= lo <= truth + 5 * truth_se, (lo, truth, truth_se)
    finally:
        labels.log_label_pair.cache_clear()


def test_many_participations_keep_the_sum_statistic():
    """Where many steps hold the record the sum of the outputs can be the stronger statistic:
    the lower end is the larger of the two (sigma 0.584, 279 of 2611, 4 epochs: log labels
    77.25, the sum statistic 289.4)."""
    sigma, t, k, epochs, delta = 0.584, 2611, 279, 4, 3.3e-10
    mech = RandomAllocation(pld.Gaussian(sigma), t, participations=k)
    alternatives = mech.lower_alternatives()
    assert mech._lower_part().log_labels and not getattr(alternatives[-1][0][0], "log_labels", False)
    w = _quiet()
    try:
        d = mech.pld().self_compose(epochs)
        lo, hi = d.epsilon_bounds(delta)
        info = d.explain(delta)
    finally:
        w.__exit__(None, None, None)
    gauss_lo, _ = pld.Gaussian(sigma * math.sqrt(t) / (k * math.sqrt(epochs))).pld().epsilon_bounds(delta)
    assert lo >= gauss_lo * (1 - 1e-4) and lo <= hi  # (the same statistic on its own grid: within the target)
    assert info["epsilon_lower"] == pytest.approx(lo, rel=1e-12)
    assert "the largest of the statistics" in mech.explain()["lower"]


def test_bracketed_direct_convolution_matches_long_double_sums() -> None:
    # (pld.kernels.bracket_convolve behind _conv_direct: entries 0..cut of both convolutions,
    # each within its relative bound of the exact sum, here a long double direct sum)
    from pld.mechanisms.allocation.labels import _conv_direct

    rng = np.random.default_rng(5)
    for na, nb, cut in ((50, 70, 60), (33, 33, 32), (10, 90, 200), (1, 5, 3)):
        a = rng.lognormal(0.0, 3.0, na)
        b = rng.lognormal(0.0, 3.0, nb)
        a[rng.random(na) < 0.2] = 0.0
        lo, hi = _conv_direct((a, 1.5 * a), (b, 2.0 * b), cut)
        exact = np.convolve(a.astype(np.longdouble), b.astype(np.longdouble))[: cut + 1]
        assert lo.size == hi.size == min(cut + 1, na + nb - 1)
        assert np.all(lo <= exact) and np.all(hi >= 3.0 * exact)
        assert np.all(lo >= exact * (1 - 1e-12)) and np.all(hi <= 3.0 * exact * (1 + 1e-12) + 1e-290)
