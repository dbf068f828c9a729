"""The atom kernels of the discretisation (pld.kernels.pessimistic_spread_atoms,
split_atoms_log) against the plain numpy statement of the same spreads.

An allocation round describes a direction by 1e5-1e6 atoms; the kernels find each atom's
cell themselves (from the previous atom's, galloping: sorted atoms cost O(1) each) and sum
the shares in a scaled linear form instead of ``logaddexp``.  References here: the spread
as numpy writes it (cells by ``searchsorted``, shares summed with ``np.logaddexp.at``,
pessimistic_spread for the dominating side's split), independent of the kernels' search and
summation; both directions of the comparison are checked on sorted and shuffled atoms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pld.kernels import pessimistic_spread, pessimistic_spread_atoms, split_atoms_log


def _reference_dominating(loss, lp, lq, pts, h, k0, n):
    """The dominating spread of atoms as the engine wrote it before the kernel: cells found in
    numpy, then pessimistic_spread on them."""
    m = pts.size
    l0 = k0 * h
    top = (k0 + pts[-1]) * h
    k = np.floor((loss - l0) / h)
    k = np.where(np.isfinite(k), k, 0).astype(np.int64)
    on_top = np.isclose(loss, top, rtol=0, atol=1e-12 * max(1.0, abs(top)))
    j = np.searchsorted(pts, k, side="right") - 1
    j = np.where((k >= n - 1) & on_top, m - 2, j)
    j = np.where(loss < l0, -1, j)
    j = np.where(loss > top + 1e-12 * max(1.0, abs(top)), m - 1, j)
    return pessimistic_spread(lp, lq, j.astype(np.int64), pts, h, k0)


def _reference_sizing(grid, loss, lp, lq):
    out = np.full(grid.size, -np.inf)
    sel = np.isfinite(loss) & (lp > -np.inf) & (loss >= grid[0]) & (loss <= grid[-1])
    tol = 1e-9 * (grid[-1] - grid[0]) / max(1, grid.size - 1)
    idx = np.clip(np.searchsorted(grid, loss[sel] - tol, side="left"), 0, grid.size - 1)
    on = np.abs(grid[idx] - loss[sel]) <= tol
    np.logaddexp.at(out, idx[on], lp[sel][on])
    cell = np.maximum(idx[~on] - 1, 0)
    lpc, lqc = lp[sel][~on], lq[sel][~on]
    lo, w = grid[cell], grid[cell + 1] - grid[cell]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        up = -np.expm1(np.minimum(lo + lqc - lpc, 0.0)) / -np.expm1(-w)
        up = np.clip(np.nan_to_num(up, nan=1.0), 0.0, 1.0)
        np.logaddexp.at(out, cell + 1, lpc + np.log(up))
        np.logaddexp.at(out, cell, lpc + np.log1p(-up))
    return out


def _atoms(rng, count, lo, hi, extremes=True):
    """Atoms with losses in ``[lo, hi]`` (and beyond it), masses over many orders of magnitude,
    some exactly on grid points, some at +-inf and without mass."""
    loss = rng.uniform(lo, hi, count)
    lp = rng.uniform(-60.0, -1.0, count)
    if extremes and count >= 8:
        loss[:3] = [np.inf, -np.inf, hi + 1.0]
        loss[3] = lo - 0.5
        lp[4] = -np.inf
        lp[5] = -740.0
    lq = lp - np.where(np.isfinite(loss), loss, 0.0) - rng.uniform(0.0, 1e-9, count)
    lq = np.where(np.isinf(loss) & (loss > 0), -np.inf, lq)
    return loss, lp, lq


def _close(a, b, rel=1e-12):
    fin = np.isfinite(a) | np.isfinite(b)
    assert np.array_equal(np.isfinite(a), np.isfinite(b))
    assert np.all(np.abs(a[fin] - b[fin]) <= rel * np.maximum(1.0, np.abs(b[fin]))), np.max(np.abs(a[fin] - b[fin]))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_dominating_atoms_spread_as_the_numpy_statement(seed, shuffle):
    rng = np.random.default_rng(seed)
    h, k0, n = 0.01 * (1 + seed), -50 - seed, 400
    # a non-uniform point set (wider cells where the law is thin), as cell_points gives
    pts = np.unique(np.concatenate(([0, n - 1], rng.choice(n, 120, replace=False)))).astype(np.int64)
    l0, top = k0 * h, (k0 + pts[-1]) * h
    loss, lp, lq = _atoms(rng, 5000, l0 - 0.2, top + 0.2)
    # atoms on points, on the top point (within the tolerance) and exactly between points
    loss[10:20] = (k0 + pts[rng.integers(0, pts.size, 10)]) * h
    loss[20] = top
    loss[21] = top + 1e-13
    order = np.argsort(loss, kind="stable")
    if shuffle:
        order = rng.permutation(loss.size)
    loss, lp, lq = loss[order], lp[order], lq[order]
    got, got_inf = pessimistic_spread_atoms(loss, lp, lq, pts, h, k0, n)
    ref, ref_inf = _reference_dominating(loss, lp, lq, pts, h, k0, n)
    _close(got, ref)
    assert got_inf == pytest.approx(ref_inf, rel=1e-12, abs=1e-12)
    # every atom with mass lands somewhere: total P-mass kept (at the points and at +inf)
    total = np.logaddexp.reduce(np.append(got, got_inf))
    assert total == pytest.approx(np.logaddexp.reduce(lp[lp > -np.inf]), rel=1e-12)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_sizing_split_as_the_numpy_statement(seed, shuffle):
    rng = np.random.default_rng(100 + seed)
    grid = np.sort(np.unique(np.round(rng.uniform(-1.0, 3.0, 300), 6)))
    loss, lp, lq = _atoms(rng, 4000, grid[0] - 0.1, grid[-1] + 0.1)
    loss[10:30] = grid[rng.integers(0, grid.size, 20)]  # on points
    loss[30] = grid[5] + 1e-15  # on a point up to rounding
    if not shuffle:
        order = np.argsort(loss, kind="stable")
        loss, lp, lq = loss[order], lp[order], lq[order]
    _close(split_atoms_log(grid, loss, lp, lq), _reference_sizing(grid, loss, lp, lq))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 60), st.integers(1, 300), st.floats(1e-4, 0.5))
def test_dominating_atoms_spread_property(seed, points, atoms, h):
    """Across point sets, spacings and atom counts: the kernel and the numpy statement agree,
    and the spread keeps the P-mass and moves none of it down (the dominating side's mean loss
    under P does not drop)."""
    rng = np.random.default_rng(seed)
    n = points + int(rng.integers(0, 40))
    pts = np.unique(np.concatenate(([0, n - 1], rng.integers(0, n, points)))).astype(np.int64)
    if pts.size < 2:
        return
    k0 = int(rng.integers(-200, 50))
    l0, top = k0 * h, (k0 + pts[-1]) * h
    loss, lp, lq = _atoms(rng, atoms, l0 - h, top + h, extremes=atoms >= 8)
    got, got_inf = pessimistic_spread_atoms(loss, lp, lq, pts, h, k0, n)
    ref, ref_inf = _reference_dominating(loss, lp, lq, pts, h, k0, n)
    _close(got, ref, rel=1e-11)
    if np.any(lp > -np.inf):
        kept = np.logaddexp.reduce(np.append(got, got_inf))
        assert kept == pytest.approx(np.logaddexp.reduce(lp[lp > -np.inf]), rel=1e-10, abs=1e-10)
        fin = (lp > -np.inf) & np.isfinite(loss) & (loss >= l0) & (loss <= top)
        if np.any(fin) and got_inf == -np.inf:
            grid = (k0 + pts) * h
            below = ~fin & (lp > -np.inf) & (loss < l0)
            mean_before = np.sum(np.exp(lp[fin]) * loss[fin]) + np.sum(np.exp(lp[below]) * l0)
            mean_after = np.sum(np.exp(got) * grid)
            assert mean_after >= mean_before - 1e-9 * max(1.0, abs(mean_before))


def test_empty_and_single_point_inputs():
    pts = np.array([0, 3, 7], dtype=np.int64)
    e = np.zeros(0)
    got, inf = pessimistic_spread_atoms(e, e, e, pts, 0.1, 0, 8)
    assert np.all(got == -np.inf) and inf == -np.inf
    grid = np.array([0.5])
    out = split_atoms_log(grid, np.array([0.5, 0.7]), np.array([math.log(0.25), 0.0]), np.array([0.0, 0.0]))
    assert out[0] == pytest.approx(math.log(0.25))


def test_one_point_grid_keeps_every_atom():
    """A grid of one point (never built by the engine, but the kernel's contract): atoms at or
    below it go to it, above it to +inf, as pessimistic_spread places them."""
    pts = np.array([0], dtype=np.int64)
    loss = np.array([-1.0, 0.5, 0.5 + 1e-14, 2.0])
    lp = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    got, inf = pessimistic_spread_atoms(loss, lp, lp - loss, pts, 0.5, 1, 1)
    assert math.exp(got[0]) == pytest.approx(0.6, rel=1e-12) and math.exp(inf) == pytest.approx(0.4, rel=1e-12)
    ref, ref_inf = _reference_dominating(loss, lp, lp - loss, pts, 0.5, 1, 1)
    _close(got, ref)
