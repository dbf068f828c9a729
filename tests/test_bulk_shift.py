"""The dominated side's bulk shift (pld.engine.bulk_shift.bulk_shift), against independent truths.

A Poisson-subsampled step on a grid coarser than its sampling rate has its
bulk in one cell, which the dominated side used to round down a whole cell per
step.  Shifting the step's loss by a constant puts the bulk on its grid point;
the shift is exact and comes off the composed lattice on the safe side.  The
truths here are the single-step closed form and the tilted rounding oracle of
tests/oracles.py (numpy/scipy only).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import pld
from pld.accounting.dpsgd import dpsgd_mechanism
from pld.engine import bulk_shift as C
from pld.engine import self_compose
from pld.engine.composer import GridTooLargeError
from pld.engine.discretize import discretize
from pld.engine.grid import GridPLD
from pld.engine.targets import Query

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles  # noqa: E402


def _first_step(sigma: float, q: float, h: float):
    eng = pld.dpsgd(sigma, q, 1000)._engine()
    query = Query("delta", 1e-8)
    entry = eng.composer._prepare("remove", h, 0.0, eng.planner.log_eta("remove", query))
    return entry.prepared[0]


@settings(max_examples=100, deadline=None)
@given(sigma=st.floats(0.3, 2.0), log_q=st.floats(math.log(3e-6), math.log(1e-4)), ratio=st.floats(4.0, 40.0))
def test_one_shifted_step_stays_below_the_closed_form(sigma, log_q, ratio):
    q = math.exp(log_q)
    h = ratio * q
    step = _first_step(sigma, q, h)
    shift = C.bulk_shift(step.model, step.ex, h, step.k_lo, step.k_hi, 10**9)
    g = discretize(step.model, h, step.k_lo, step.k_hi, 0.0, False, points=step.points, loss_shift=shift)
    assert g.k0 == step.k_lo
    # the grid holds L + shift: delta of L at eps is the grid's at eps + shift
    for eps in np.concatenate((np.linspace(-q, 3 * h, 9), [0.05, 0.5, 2.0])):
        exact = oracles.subsampled_gaussian_delta_single(float(eps), sigma, q, "remove")
        got = float(g.delta(eps + shift)[0])
        assert got <= exact * (1 + 1e-9) + 1e-300, (eps, got, exact, shift)


def test_the_shift_is_found_where_the_bulk_is_stuck():
    # (sigma 0.8, q 2e-5: nearly all mass within q of log(1 - q), one cell at 5 q)
    q = 2e-5
    step = _first_step(0.8, q, 5 * q)
    assert C.bulk_shift(step.model, step.ex, 5 * q, step.k_lo, step.k_hi, 10**6) != 0.0
    # a grid that resolves the bulk needs none
    fine = _first_step(0.8, q, q / 8)
    assert C.bulk_shift(fine.model, fine.ex, q / 8, fine.k_lo, fine.k_hi, 10**6) == 0.0


def test_unshift_moves_the_lattice_down_and_keeps_the_masses():
    rng = np.random.default_rng(5)
    p = rng.random(50)
    g = GridPLD.from_log_masses(np.log(p / p.sum()), -20, 0.01, 3.0, 0.0, False)
    total = Fraction(0.0234)  # 2.34 spacings: down by 3
    out = C._unshift(g, total)
    assert out.k0 == g.k0 - 3 and out.h == g.h
    np.testing.assert_allclose(out.log_masses(), g.log_masses(), rtol=0, atol=1e-13)
    assert out.err >= g.err
    up = C._unshift(g, -total)  # a negative shift moves it up, by 2 (never past the shift)
    assert up.k0 == g.k0 + 2


@pytest.mark.parametrize("sigma, q, steps, delta", [(1.0, 5e-5, 5000, 1e-6)])
def test_a_coarse_composition_with_the_shift_brackets_the_oracle(sigma, q, steps, delta, monkeypatch):
    """At a fixed spacing of 2 q the lower end is certified (below the oracle's
    upper end) and far tighter than without the shift (which gives 0)."""
    ref = oracles.subsampled_gaussian_epsilon(sigma, q, steps, delta)
    mech = dpsgd_mechanism(sigma, q)
    h = 2 * q
    lo, hi = mech.pld(value_discretization_interval=h).self_compose(steps).epsilon_bounds(delta)
    assert lo <= ref.upper and hi >= ref.lower, (lo, hi, ref)
    monkeypatch.setattr(self_compose, "bulk_shift", lambda *a, **k: 0.0)  # (where the composer looks it up)
    lo0, _ = mech.pld(value_discretization_interval=h).self_compose(steps).epsilon_bounds(delta)
    assert lo > lo0 + 0.5 * (hi - lo0)


def _few_steps_delta(sigma: float, q: float, steps: int, h: float, eps: float) -> tuple[float, float]:
    """(dominated, dominating) delta at ``eps`` of ``steps`` remove steps on a fixed spacing, untilted."""
    eng = pld.dpsgd(sigma, q, steps)._engine()
    log_eta = eng.planner.log_eta("remove", Query("delta", 1e-7))
    pess, opt = eng.composer.materialize("remove", h, 0.0, log_eta)
    assert opt is not None
    return float(opt.delta(eps)[0]), float(pess.delta(eps)[0])


def test_dominated_bulk_near_q_is_still_a_bound():
    """The single step on a spacing above q holds the exact delta (its
    dominated side collapses to 0 there, see below, but stays a bound)."""
    exact = oracles.subsampled_gaussian_delta_single(1e-5, 0.505, 3.2e-6, "remove")
    for h in (5e-6, 1.8e-6):
        lower, upper = _few_steps_delta(0.505, 3.2e-6, 1, h, 1e-5)
        assert lower <= exact <= upper


@pytest.mark.parametrize("steps, h, share", [(10, 1.8e-6, 5e-3), (100, 1.8e-6, 5e-3), (2, 5e-6, 2e-2)])
def test_dominated_bulk_near_q_keeps_delta(steps, h, share):
    """sigma 0.505, q 3.2e-6 at eps 1e-5 (about 3q): the dominated side holds
    delta within 0.5% of the dominating side on a spacing near q/2 (it was
    1.9% short at ten steps and 6.5% at a hundred), and within 2% on one
    above q (it was 0: the bulk's lift swallowed the tail).  (Two steps at
    h = 1.56 q: the bulk sits in about two cells, and a dominated law keeps
    only the variance between its buckets.)"""
    lower, upper = _few_steps_delta(0.505, 3.2e-6, steps, h, 1e-5)
    assert lower >= (1 - share) * upper


def test_one_step_above_q_keeps_delta():
    """One step (no shift: it could not come off) on h = 5e-6 > q = 3.2e-6:
    the dominated delta was 0 (the bulk's bucket, below its grid point, was
    lifted with the whole tail).  Now it is within 1% of the exact one at
    eps = 2h, a grid point, and within 0.5% half way between grid points.

    Closer at a grid point is not to be had from a grid law dominated at every
    eps: its delta is convex and piecewise linear in e^eps with kinks at the
    grid points only, so to touch the exact (convex) delta at a grid point it
    must follow the tangent there across both neighbouring cells; touching the
    exact curve at the cells' middles instead (the centred merge does about
    that) leaves the grid points below it by the curvature times (h/2)^2 / 2,
    here 0.65% at 2h (the better of the two tangents gives 0.99345 of it)."""
    sigma, q, h = 0.505, 3.2e-6, 5e-6
    for eps, share in ((2 * h, 1e-2), (2.5 * h, 5e-3), (3.5 * h, 5e-3)):
        exact = oracles.subsampled_gaussian_delta_single(eps, sigma, q, "remove")
        lower, upper = _few_steps_delta(sigma, q, 1, h, eps)
        assert (1 - share) * exact <= lower <= exact * (1 + 1e-9) and upper >= exact * (1 - 1e-9), (eps, lower, exact)


def test_shift_down_comes_off_exactly():
    h = 1.8e-6
    for base in (1, 3, 7, 10, 25, 17500, 325000):
        for m in (0, 1, base // 3, base - 1):
            s = C._shift_down(m, base, h)
            total = Fraction(base) * Fraction(s)
            assert total <= m * Fraction(h)
            q = total / Fraction(h)
            assert -((-q.numerator) // q.denominator) == m  # _unshift moves the lattice by exactly m


@settings(max_examples=15, deadline=None)
@given(sigma=st.floats(0.5, 2.0), log_q=st.floats(math.log(3e-6), math.log(1e-3)), ratio=st.floats(2.0, 40.0),
       direction=st.sampled_from(["remove", "add", "add"]))
def test_the_comparison_window_leaves_out_only_a_negligible_tail(sigma, log_q, ratio, direction):
    """The shifts are compared from :func:`C._score_bottom` up, not from the window's bottom:
    at most ``SCORE_TAIL_MASS`` of P-mass lies below it (the model's own masses, read at the
    edge), and the shift chosen is the one the whole window's comparison chooses."""
    q = math.exp(log_q)
    h = ratio * q
    eng = pld.dpsgd(sigma, q, 1000)._engine()
    try:
        entry = eng.composer._prepare(direction, h, 0.0, eng.planner.log_eta(direction, Query("delta", 1e-8)))
    except GridTooLargeError:
        assume(False)
    step = entry.prepared[0]
    mode = int(round(float(step.ex.loss[int(np.argmax(step.ex.log_p))]) / h))
    bottom = C._score_bottom(step.model, h, step.k_lo, mode)
    assert step.k_lo <= bottom <= max(step.k_lo, mode - C.SCORE_CELLS)
    if bottom > step.k_lo:
        lp, _ = step.model.cells(np.array([(bottom - 0.5) * h]))
        assert lp[0] <= math.log(C.SCORE_TAIL_MASS)
    count = 10**6
    got = C.bulk_shift(step.model, step.ex, h, step.k_lo, step.k_hi, count)
    keep = C._score_bottom
    try:
        C._score_bottom = lambda model, h, k_lo, mode: k_lo
        whole = C.bulk_shift(step.model, step.ex, h, step.k_lo, step.k_hi, count)
    finally:
        C._score_bottom = keep
    assert got == whole
