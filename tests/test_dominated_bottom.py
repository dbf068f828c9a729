"""The dominated discretisation at the bottom of a subsampled step's support, against independent truths.

A Poisson-subsampled step's loss starts at ``log(1 - q)`` with its density
rising from there: the lowest centred cells sit above their grid points and
the downward pass runs out of cells to lower them with.  Those few buckets
now join the bucket above, lifted back onto its point by a fraction of the
next (pass 3, ``kernels.merge_settle._settle_short``), instead of merging every
cell below a switch point upwards in pairs.  Truths, none from the engine:

* the single-step closed form of tests/oracles.py (remove direction, every
  eps from below the bottom of the support into the tail): the dominated
  grid of a multi-step query (no free rounding below 0) never exceeds it;
* the centred cells themselves, each an atom at its exact merged loss
  (scipy's normal CDFs through the model's cells): on MNIST's step the grid's
  log-MGF at the query's tilt, which a dominated pair cannot raise (data
  processing for Renyi divergences), stays below theirs and within 1.25
  times their own Jensen gap below the exact law's (the pairs lost 2.2
  times it).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pld
from pld.engine.composer import GridTooLargeError
from pld.engine.discretize import discretize, variance_weight
from pld.engine.targets import Query

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles  # noqa: E402


def _step(sigma: float, q: float, h: float, lam: float, steps: int):
    """The dominated grid of the first step of a ``steps``-step query, as the
    composer discretises it (its window, variance weight, no free rounding)."""
    eng = pld.dpsgd(sigma, q, steps)._engine()
    entry = eng.composer._prepare("remove", h, lam, eng.planner.log_eta("remove", Query("delta", 1e-8)))
    step = entry.prepared[0]
    weight = variance_weight(step.ex.mean_var()[1], steps)
    grid = discretize(step.model, h, step.k_lo, step.k_hi, lam, False, points=step.points, var_weight=weight)
    return step, grid


def _cells_log_mgf(step, h: float, theta: float, fine: int = 1) -> float:
    """log E[e^{theta L}] of the law cut into cells ``h / fine`` wide centred
    on the grid points, each an atom at its merged loss (``fine`` large: the
    exact law)."""
    n = (step.k_hi - step.k_lo) * fine + 1
    edges = (step.k_lo * fine + np.arange(n + 1) - 0.5) * h / fine
    lp, lq = step.model.cells(edges)
    lp, lq = lp[1:-1], lq[1:-1]
    ok = np.isfinite(lp) & np.isfinite(lq)
    x = lp[ok] + theta * (lp[ok] - lq[ok])
    top = float(np.max(x))
    return top + math.log(float(np.sum(np.exp(x - top))))


def _exact_delta(eps: float, sigma: float, q: float) -> float:
    if math.expm1(eps) + q <= 0.0:
        return -math.expm1(eps)  # (at or below the bottom of the support: L > eps everywhere)
    return oracles.subsampled_gaussian_delta_single(eps, sigma, q, "remove")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(sigma=st.floats(0.5, 3.0), log_q=st.floats(math.log(1e-4), math.log(0.3)),
       log_ratio=st.floats(math.log(0.005), math.log(0.3)), lam=st.floats(0.0, 8.0),
       log_steps=st.floats(math.log(100), math.log(1e6)))
def test_bottom_of_the_support_stays_below_the_closed_form(sigma, log_q, log_ratio, lam, log_steps):
    q = math.exp(log_q)
    h = math.exp(log_ratio) * q  # the bottom spans 3 to 200 cells
    try:
        step, lower = _step(sigma, q, h, lam, int(math.exp(log_steps)))
    except GridTooLargeError:
        assume(False)
    assume(lower.size < 400_000)
    bottom = math.log1p(-q)
    eps = np.concatenate((bottom + h * np.linspace(-1.0, 12.0, 53), np.linspace(0.0, 4.0, 9) * q + h / 3))
    exact = np.array([_exact_delta(float(e), sigma, q) for e in eps])
    lo = np.array([float(lower.delta(float(e))[0]) for e in eps])
    assert np.all(lo <= exact * (1 + 1e-9) + 1e-300), (eps[np.argmax(lo / exact)], np.max(lo / exact))


def test_mnist_step_loses_little_more_than_its_cells():
    sigma, q, steps, lam = 1.1, 256 / 60000, 14063, 4.77
    h = 8.9e-5  # the query's own spacing: log(1 - q) is 48 spacings below 0
    step, lower = _step(sigma, q, h, lam, steps)
    exact = _cells_log_mgf(step, h, lam, fine=64)
    cells = _cells_log_mgf(step, h, lam)
    grid = float(lower.log_mgf(np.array([lam]))[0])
    assert grid <= cells + 1e-12
    gap = exact - cells  # the centred cells' Jensen gap, ~ lam (lam + 1) h^2 / 24
    assert gap > 0.0
    assert exact - grid <= 1.25 * gap, ((exact - grid) / gap)


def _cells_delta(masses: np.ndarray, losses: np.ndarray, eps: float) -> float:
    sel = (masses > 0) & (losses > eps)
    return float(np.sum(masses[sel] * -np.expm1(eps - losses[sel])))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_rising_bottoms_stay_dominated_by_their_cells(seed):
    """Cells of a law rising from the end of its support with small positive
    offsets that fade upwards (the shape that sends buckets to pass 3: on
    this generator about half the cases move buckets there), random spacing,
    mass errors and variance weight: the merge's delta never exceeds the
    cells' own, at every eps (on a grid through the range, just below every
    cell's loss and at every grid point)."""
    from pld.kernels import optimistic_merge_centred

    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 120))
    h = 10 ** rng.uniform(-4, 0)
    points = np.arange(n, dtype=np.int64) + int(rng.integers(-n, 1))
    g = points * h
    i = np.arange(n)
    log_m = (rng.uniform(0.3, 3.0) * np.log(i + rng.uniform(0.01, 1.0)) - (i / rng.uniform(2, n)) ** 2
             + rng.normal(0, rng.uniform(0, 0.5), n))
    offsets = rng.uniform(0, 0.5) / (i + 1) ** rng.uniform(0.3, 2.0) - rng.uniform(0, 0.01)
    log_p = np.concatenate((log_m, [log_m.max() - rng.uniform(2, 12)]))
    log_p -= np.logaddexp.reduce(log_p)
    losses = np.concatenate((g + np.clip(offsets, -0.49, 0.49) * h, [g[-1] + h * rng.uniform(1, 5)]))
    err = np.full(n + 1, 10 ** rng.uniform(-16, -12))
    out = optimistic_merge_centred(log_p, log_p - losses, points, h, err, np.zeros(n + 1),
                                   math.exp(rng.uniform(-3, 6)), -math.inf)
    cells = np.exp(log_p)
    assert np.all(out >= 0.0) and out.sum() <= cells.sum() * (1 + 1e-12)
    for eps in np.concatenate((np.linspace(g[0] - 2 * h, g[-1] + 6 * h, 81), losses[:-1] - 1e-9 * h, g)):
        assert _cells_delta(out, g, eps) <= _cells_delta(cells, losses, eps) * (1 + 1e-12) + 1e-300, eps


def _laplace_remove_delta(eps: float, b: float, q: float) -> float:
    """delta(eps) of one Poisson-sampled Laplace step, remove direction, in
    closed form: P = (1 - q) Lap(0, b) + q Lap(1, b), Q = Lap(0, b); the
    likelihood ratio is e^{-1/b} below 0, e^{1/b} above 1 (the two atoms of
    the loss) and e^{(2x - 1)/b} between."""
    c = 1.0 - q
    e = math.exp(eps)
    out = (0.5 * max(0.0, c + q * math.exp(-1.0 / b) - e)
           + 0.5 * math.exp(-1.0 / b) * max(0.0, c + q * math.exp(1.0 / b) - e))
    arg = (e - c) / q
    x0 = 0.0 if arg <= 0.0 else min(1.0, max(0.0, (b * math.log(arg) + 1.0) / 2.0))
    if x0 < 1.0:
        out += (c - e) * (math.exp(-x0 / b) - math.exp(-1.0 / b)) / 2.0 + q * (1.0 - math.exp((x0 - 1.0) / b)) / 2.0
    return max(out, 0.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(scale=st.floats(0.3, 5.0), log_q=st.floats(math.log(1e-3), math.log(0.5)),
       log_ratio=st.floats(math.log(1e-4), math.log(0.05)), lam=st.floats(0.0, 40.0),
       log_steps=st.floats(math.log(50), math.log(1e5)))
def test_laplace_atoms_stay_below_the_closed_form(scale, log_q, log_ratio, lam, log_steps):
    """Poisson-sampled Laplace: the loss is constant beyond the sensitivity,
    two atoms, the upper one the largest loss, usually between grid points,
    where pass 3 now lowers it with the buckets below instead of rounding it
    down.  The composer's dominated step stays below the closed form at every
    eps, around both atoms and through the continuous part."""
    q = math.exp(log_q)
    top = math.log1p(q * math.expm1(1.0 / scale))
    h = math.exp(log_ratio) * top
    eng = pld.PLD(pld.PoissonSampled(pld.Laplace(scale), q).pld().self_compose(int(math.exp(log_steps)))
                  .components)._engine()
    try:
        entry = eng.composer._prepare("remove", h, lam, eng.planner.log_eta("remove", Query("delta", 1e-8)))
    except GridTooLargeError:
        assume(False)
    step = entry.prepared[0]
    assume(step.k_hi - step.k_lo < 400_000)
    lower = discretize(step.model, h, step.k_lo, step.k_hi, lam, False, points=step.points,
                       var_weight=variance_weight(step.ex.mean_var()[1], int(math.exp(log_steps))))
    bottom = math.log1p(q * math.expm1(-1.0 / scale))
    eps = np.concatenate((np.linspace(bottom - h, top + h, 41), top - h * np.array([0.0, 0.25, 0.5, 1.0, 2.0, 5.0]),
                          bottom + h * np.array([0.0, 0.25, 0.5, 1.0, 2.0])))
    exact = np.array([_laplace_remove_delta(float(e), scale, q) for e in eps])
    lo = np.array([float(lower.delta(float(e))[0]) for e in eps])
    assert np.all(lo <= exact * (1 + 1e-9) + 1e-15), (eps[np.argmax(lo - exact)], np.max(lo - exact))


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_heavy_top_atoms_stay_dominated_by_their_cells(seed):
    """A heavy atom in the top cell, a fraction of a spacing above or below
    its grid point, over a thin continuous part whose cells sit a hair below theirs
    (pass 1 lifts each of them, so pass 2 finds nothing left to lower the
    atom with; pass 3 lowers it with the buckets below): the merge's delta
    never exceeds the cells' own, at every eps."""
    from pld.kernels import optimistic_merge_centred

    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 200))
    h = 10 ** rng.uniform(-6, -1)
    points = np.arange(n, dtype=np.int64) + int(rng.integers(-2 * n, n))
    g = points * h
    log_m = math.log(10 ** rng.uniform(-7, -2)) + rng.normal(0, rng.uniform(0, 0.3), n)
    log_m[-1] = math.log(10 ** rng.uniform(-2, 0))  # the atom
    offsets = -rng.uniform(0, 1e-3, n)
    offsets[-1] = rng.uniform(-0.5, 0.5)  # (below its point too: then aimed at the point below)
    log_p = np.concatenate((log_m, [-np.inf]))
    log_p[:-1] -= np.logaddexp.reduce(log_m)
    losses = np.concatenate((g + offsets * h, [g[-1] + h]))
    err = np.full(n + 1, 10 ** rng.uniform(-16, -11))
    with np.errstate(invalid="ignore"):
        log_q = log_p - losses
    out = optimistic_merge_centred(log_p, log_q, points, h, err, np.zeros(n + 1), math.exp(rng.uniform(-3, 6)),
                                   -math.inf)
    cells = np.exp(log_p)
    assert np.all(out >= 0.0) and out.sum() <= cells.sum() * (1 + 1e-12)
    for eps in np.concatenate((np.linspace(g[0] - 2 * h, g[-1] + 2 * h, 81), losses[:-1] - 1e-9 * h, g)):
        assert _cells_delta(out, g, eps) <= _cells_delta(cells, losses, eps) * (1 + 1e-12) + 1e-300, eps
