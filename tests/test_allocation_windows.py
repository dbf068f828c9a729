"""The windows of a round's partial sums (:func:`pld.mechanisms.allocation.levels._sum_levels`)
against exact convolutions.

An upper run with no limit cuts each level above its window and below its bulk and puts what it
cuts at ``+inf`` (``lost_q``); a lower-tail run (a limit) reads its entries below the limit as
exact and carries what its windows cut there as error.  Both claims are checked against the
``t``-fold convolution of the run's own first level, summed directly in ``np.longdouble``
(no transforms, no windows), on windows made narrow on purpose (a window tail of ``1e-3``
instead of ``1e-14``) so that what is cut is far above the round-off and a bound that left it
out would fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pld.mechanisms.allocation import levels
from pld.mechanisms.allocation.coordinate import _coordinate_upper, _run_upper
from pld.mechanisms.allocation.levels import _tail, _tilted, window
from pld.mechanisms.allocation.roundoff import Err


def _exact_sum(y: np.ndarray, t: int) -> np.ndarray:
    """The ``t``-fold convolution of ``y``, directly in long double."""
    y = np.asarray(y, dtype=np.longdouble)
    out = y
    for _ in range(t - 1):
        out = np.convolve(out, y)
    return out


def _cells_below(run, lv) -> int:
    """How many leading entries of the final level are zero (cut below its bulk)."""
    nz = np.flatnonzero(lv.q)
    return int(nz[0]) if nz.size else 0


def _setup(sigma: float, t: int, spacing: float = 0.05):
    a = 1.0 / sigma
    mu = -0.5 * a * a
    d = spacing * math.sqrt(math.expm1(a * a))
    n = int(math.ceil(window(a, 1, t) / d))
    return a, mu, d, n


@pytest.mark.parametrize("sigma,t", [(2.0, 24), (3.0, 40), (1.5, 17)])
@pytest.mark.parametrize("low_share", [None, 1.0])
def test_upper_run_windows_lose_only_what_they_count(sigma: float, t: int, low_share: float | None,
                                                     monkeypatch) -> None:
    if low_share is not None:  # (the cut below the bulk as deep as the window above)
        monkeypatch.setattr(levels, "_LOW_SHARE", low_share)
    token = _tail.set(1e-3)
    try:
        a, mu, d, n = _setup(sigma, t)
        coord = _coordinate_upper(mu, a, d, n, t)
        run, lv = _run_upper(a, d, t, coord, 0.0, 0.0)  # (coarse 0: no re-gridding, plain sums)
        cells_below = _cells_below(run, lv)
    finally:
        _tail.reset(token)
    if low_share is not None:
        assert cells_below > 10
    y, _, _ = _tilted(coord[0], np.arange(coord[0].size) * d, 0.0)
    exact = _exact_sum(y, t)
    got = np.zeros(exact.size, dtype=np.longdouble)
    got[: lv.q.size] = lv.q[: exact.size]
    e = lv.eq.entry
    slack = 1e-12 * np.abs(exact) + 1e-300
    # the windows cut for real here (else this test would check nothing)
    assert lv.lost_q > 1e-9
    # every kept entry is the exact one, less at most what was cut, within its error
    assert np.all(got <= exact + e + slack)
    assert np.all(got >= exact - e - lv.lost_q - slack)
    # what is missing altogether is at most the mass counted as lost (and the l1 error)
    assert float(np.sum(exact) - np.sum(got)) <= lv.lost_q + lv.eq.l1 + 1e-12


@pytest.mark.parametrize("sigma,t", [(2.0, 24), (3.0, 40)])
def test_lower_tail_run_carries_its_cuts_as_error(sigma: float, t: int, monkeypatch) -> None:
    monkeypatch.setattr(levels, "_LIMIT_TAIL_SHARE", 1.0)  # (its windows as narrow as the others')
    token = _tail.set(1e-3)
    try:
        a, mu, d, n = _setup(sigma, t)
        coord = _coordinate_upper(mu, a, d, n, t)
        limit = float(t)  # (the mean of the sum: the lower-tail runs' limit)
        theta = -1.0
        run, lv = _run_upper(a, d, t, coord, theta, 0.0, limit=limit)
    finally:
        _tail.reset(token)
    g = np.arange(coord[0].size) * d
    y, _, _ = _tilted(coord[0], g, theta)
    exact = _exact_sum(y, t)
    below = min(int(limit / d), exact.size, lv.q.size)
    got = np.asarray(lv.q[:below], dtype=np.longdouble)
    diff = np.abs(got - exact[:below])
    assert float(np.max(diff - 1e-12 * np.abs(exact[:below]))) <= lv.eq.entry
    assert float(np.sum(diff)) <= lv.eq.l1 * (1 + 1e-9) + 1e-12 * float(np.sum(np.abs(exact[:below])))
    # the run's own windows cut below the limit, far above round-off (else this test would
    # check nothing)
    assert lv.eq.l1 > 1e-11


def test_cut_error_bounds_the_entries_set_to_zero() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=50)
    e = Err(1e-3, 1e-4, 1e-5).cut(x[10:20])
    assert e.l1 >= 1e-3 + np.sum(np.abs(x[10:20]))
    assert e.l2 >= 1e-4 + np.sqrt(np.sum(x[10:20] ** 2))
    assert e.inf >= 1e-5 + np.max(np.abs(x[10:20]))
    assert Err(1.0, 2.0, 3.0).cut(x[:0]) == Err(1.0, 2.0, 3.0)


def _delta(side: tuple, eps: float) -> float:
    loss, lp, lq = side
    return float(np.sum(np.maximum(np.exp(lp) - np.exp(eps + lq), 0.0)))


@pytest.mark.parametrize("cut_sd", [None, 1.0])
def test_split_dominated_side_cut_below_stays_dominated(cut_sd: float | None, monkeypatch) -> None:
    # the dominated side's label sums are cut below their bulk on every tilt alike (one
    # post-processed pair, which may drop mass); cut hard (a standard deviation below the
    # mean) its pair loses mass but stays below the dominating pair at every epsilon
    from pld.mechanisms.allocation import heavy_lower
    from pld.mechanisms.allocation.sums import sum_laws

    if cut_sd is not None:
        monkeypatch.setattr(heavy_lower, "_LOW_CUT_SD", cut_sd)
    sum_laws.cache_clear()
    try:
        upper, lower, _ = sum_laws(1.0, 300, 0.05, "split", None, None, False)
    finally:
        sum_laws.cache_clear()
    for eps in (0.0, 0.05, 0.2, 0.5, 1.0):
        for up, lo in ((upper.remove, lower.remove), (upper.add, lower.add)):
            assert _delta(lo, eps) <= _delta(up, eps) * (1 + 1e-9) + 1e-15
    total = float(np.sum(np.exp(lower.remove[2])))
    if cut_sd is not None:
        assert total < 0.9  # (the hard cut dropped Q-mass: the test checks a real cut)
    else:
        assert total > 1 - 1e-6
