"""The big-jump decomposition of heavy-tailed compositions (issue 19, pld.engine.big_jumps).

Truths that do not come from this module: the ordinary engine's certified
delta brackets where it is accurate (a different computation: one grid for
the whole law, no cut), exact binomial coefficients, the cut pair's masses
from the normal law directly, and published / peer values for the small-q
corner of the issue's table.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import pld
from pld.engine import big_jumps as bj

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracles import weighted_delta_estimates  # noqa: E402


def _model(sigma: float, q: float, steps: int):
    return pld.dpsgd(sigma, q, steps).components[0][0].loss_model("remove")


def test_log_binomial_matches_exact():
    for n, k in [(10, 0), (10, 3), (2_630_089, 7), (65_501, 24)]:
        assert bj._log_binomial(n, k) == pytest.approx(math.log(math.comb(n, k)), rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("sigma, q, cut", [(0.8, 2e-5, 0.02), (1.5, 3e-4, 0.05), (0.4, 5e-6, 1.0)])
def test_split_masses_are_the_normal_laws(sigma, q, cut):
    """Core and jump partition the step's P-mass; the jump's mass is the
    mixture's tail above the cut, computed here from scipy's normal law."""
    model = _model(sigma, q, 10)
    core, jump, log_b = bj.split(model, cut)
    # loss log(1 - q + q e^x) > cut  <=>  x > log1p(expm1(cut) / q); x = (2y - 1) / (2 sigma^2)
    x_cut = math.log1p(math.expm1(cut) / q)
    y_cut = (2 * sigma ** 2 * x_cut + 1) / 2
    b = (1 - q) * norm.sf(y_cut, scale=sigma) + q * norm.sf(y_cut, loc=1.0, scale=sigma)
    assert math.exp(log_b) == pytest.approx(b, rel=1e-9)
    grid = np.linspace(-0.01, 4 * cut + 40.0, 20001)
    lp_core, _ = core.cells(grid)
    lp_jump, _ = jump.cells(grid)
    assert float(np.exp(lp_core).sum()) == pytest.approx(1.0 - b, rel=1e-12, abs=1e-14)
    assert float(np.exp(lp_jump).sum()) == pytest.approx(1.0, rel=1e-9)
    # no core mass above the cut's cell, no jump mass below it
    i = int(np.searchsorted(grid, cut))
    assert np.all(lp_core[i + 2:] == -np.inf)
    assert np.all(lp_jump[:i] == -np.inf)


@settings(max_examples=12, deadline=None)
@given(sigma=st.floats(0.6, 3.0), log_q=st.floats(-4.0, -1.3), steps=st.integers(2, 400),
       frac=st.floats(0.2, 2.0), at=st.floats(0.3, 1.5))
def test_terms_agree_with_the_whole_law(sigma, log_q, steps, frac, at):
    """Where one grid resolves the whole law, the decomposition's certified
    delta bracket and the engine's must intersect (both are certified), and
    the decomposition's must not be looser than a fraction of delta."""
    q = 10.0 ** log_q
    p = pld.dpsgd(sigma, q, steps)
    eps_ref = p.epsilon_bounds(1e-6)[1]
    if not 1e-3 < eps_ref < 50:
        return
    eps = at * eps_ref
    terms = bj.build_terms(bj.Heavy(_model(sigma, q, steps), steps), 1e-6, eps, cut=frac * eps)
    if terms is None:
        return
    lo_t, hi_t = terms.delta_bounds(np.array([eps]))
    lo_e, hi_e = p.delta_bounds(eps)
    assert lo_t[0] <= hi_e * (1 + 1e-9) and lo_e <= hi_t[0] * (1 + 1e-9)
    assert lo_t[0] <= hi_t[0]
    if hi_e > 1e-12:
        assert hi_t[0] - lo_t[0] <= 0.05 * hi_e + 1e-15


@pytest.mark.parametrize("sigma, q, steps, delta, ref_lo, ref_hi", [
    # the table: truth in (0.100, 0.105) (tilted rounding oracle)
    (1.547, 3.12e-4, 4847, 1e-12, 0.100, 0.105),
    # dp_accounting 0.00417 (an upper estimate of the table)
    (1.191, 1.3e-5, 3500, 1e-10, 0.0, 0.00417 * (1 + 1e-3)),
])
def test_small_q_corner_within_target(sigma, q, steps, delta, ref_lo, ref_hi):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lo <= ref_hi and hi >= ref_lo


def test_heavy_tail_case_is_split_and_says_so():
    """sigma 0.8, q 2.1e-5, T 128, delta 4.5e-12: one grid gave [0.0317, 0.0952]
    (round-off of the core against a log-normal tail); the decomposition
    meets the target, agrees with dp_accounting's fine-grid estimate, and
    explain() says it was used."""
    p = pld.dpsgd(0.802, 2.14e-5, 128)
    lo, hi = p.epsilon_bounds(4.49e-12)
    assert hi - lo <= 1e-4 * hi + 1e-6
    info = p.explain(4.49e-12)
    assert info["target_met"] is True
    assert info["big_jump_decomposition"] and "big-jump" in info["method"]
    # the report (--json, --verbose) carries it too
    from pld import report
    from pld.report import text as report_text
    numerics = report._numerics(info)
    assert numerics["big_jump_decomposition"] == info["big_jump_decomposition"]
    assert any("big jumps" in line for line in report_text._dir_lines(numerics))
    dp_accounting = pytest.importorskip("dp_accounting")
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-5)
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(2.14e-5, dp_accounting.GaussianDpEvent(0.802)), 128)
    acc.compose(event)
    estimate = acc.get_epsilon(4.49e-12)  # pessimistic estimate: above the truth up to its grid
    assert lo <= estimate * (1 + 1e-6)
    assert hi >= estimate * (1 - 1e-2)


def test_small_q_corner_goes_to_the_terms_first():
    """sigma 0.56, q 2.1e-5, T 4020, delta 5.3e-9 (coverage row 151): the whole
    law's first grid would hold ~1.3e6 points (6.8 s), so the terms come
    first, tuned on a coarse grid.  Their bracket meets the target, overlaps
    the whole law's own certified bracket (one grid at a fixed spacing, no
    cut: a different computation) and dp_accounting's estimate, agrees with
    the delta query at its ends, and explain() names the decomposition."""
    from pld.engine import queries

    sigma, q, steps, delta = 0.5612, 2.09e-5, 4020, 5.3e-9
    p = pld.dpsgd(sigma, q, steps)
    engine = p._engine()
    assert engine.planner.predicted_points("remove", queries.Query("delta", delta)) > queries.JUMPS_FIRST_POINTS
    assert queries._jumps_first(engine, delta, 1e-4)
    lo, hi = p.epsilon_bounds(delta)
    assert 0 < lo <= hi <= lo + 1e-4 * hi + 1e-6
    info = p.explain(delta)
    assert info["target_met"] is True and info["big_jump_decomposition"]
    # the whole law on one grid at a fixed spacing (no terms then): wide, but
    # certified by another computation
    whole = pld.PLD(p.components, value_discretization_interval=2e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        w_lo, w_hi = whole.epsilon_bounds(delta)
    assert 0 < w_lo < w_hi < 1.05 * w_lo
    assert max(lo, w_lo) <= min(hi, w_hi)
    # dp_accounting's estimate (pessimistic up to its grid; 0.5827316 at 3e-5)
    dp_accounting = pytest.importorskip("dp_accounting")
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    estimate = acc.get_epsilon(delta)
    assert lo <= estimate * (1 + 1e-6) and hi >= estimate * (1 - 1e-3)
    # delta at the ends: delta(hi) <= delta <= delta(lo), certified both ways
    d_at_hi = p.delta_bounds(hi)
    d_at_lo = p.delta_bounds(lo)
    assert d_at_hi[0] <= delta * (1 + 1e-9)
    assert d_at_lo[1] >= delta * (1 - 1e-9)


def test_small_q_corner_delta_curve_and_report():
    """The corner's delta curve (several epsilons at once) and the delta a
    report prints at the reported epsilon come from the terms too: every
    bracket within 1%, non-increasing in epsilon, and delta at the upper end
    at most the delta asked (its certificate).  (The report's row was read
    off the coarse grid that tuned the terms: 11% wide.)"""
    sigma, q, steps, delta = 0.5612, 2.09e-5, 4020, 5.3e-9
    p = pld.dpsgd(sigma, q, steps)
    lo, hi = p.epsilon_bounds(delta)
    eps = np.array([0.4, 0.5, hi, 0.6, 0.7])
    d_lo, d_hi = p.delta_bounds(eps)
    assert np.all(d_lo <= d_hi) and np.all((d_hi - d_lo) <= 1e-2 * d_hi)
    assert np.all(np.diff(d_hi) <= 0) and np.all(np.diff(d_lo) <= 0)
    assert d_hi[2] <= delta * (1 + 1e-9)
    at = p.explain(delta)["directions"]["remove"]["delta_at_epsilon_upper"]
    assert at[0] <= at[1] <= delta * (1 + 1e-9) and at[1] - at[0] <= 1e-2 * at[1]


def test_refinement_stops_at_the_terms_cap():
    """sigma 0.32, q 4.1e-5, T 5.7e5, delta 5e-8 (found by a random probe):
    the first grid is below the cap (no terms first), but refining it would
    build 1.5e6 points twice (13 s).  The remove direction's grids stay under
    pld.engine.queries.JUMPS_FIRST_POINTS, the terms meet the target, and the
    bracket overlaps the whole law's at rtol 0.1 (no terms there)."""
    from pld.engine import queries

    sigma, q, steps, delta = 0.317, 4.1e-05, 570000, 5e-08
    p = pld.dpsgd(sigma, q, steps)
    engine = p._engine()
    assert not queries._jumps_first(engine, delta, 1e-4)
    lo, hi = p.epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert p.explain(delta)["big_jump_decomposition"]
    sizes = [engine.composer.grid_points(*key[:4]) for key in engine.cache.grids.keys() if key[0] == "remove"]
    assert sizes and max(sizes) <= queries.JUMPS_FIRST_POINTS
    whole = pld.dpsgd(sigma, q, steps)
    w_lo, w_hi = whole.epsilon_bounds(delta, rtol=0.1)
    assert whole._engine().cache.get(whole._engine().cache.used, ("jumps", delta, 0.1)) is None
    assert max(lo, w_lo) <= min(hi, w_hi)
    # delta at the ends, certified both ways, through the same cap
    assert p.delta_bounds(hi)[0] <= delta * (1 + 1e-9) <= p.delta_bounds(lo)[1] * (1 + 1e-9)


def _exact_single_step_delta(sigma: float, q: float, eps: float) -> float:
    """delta(eps) of one Poisson-subsampled Gaussian step, both directions, in
    closed form with mpmath (50 digits): the loss is monotone in the output
    y, so each direction's hockey-stick is two normal tails."""
    import mpmath as mp

    mp.mp.dps = 50
    s, q, e = mp.mpf(sigma), mp.mpf(q), mp.mpf(eps)

    def sf(x):
        return mp.ncdf(-x)

    # remove: P = (1-q) N(0) + q N(1), Q = N(0); L > eps <=> y > y_r
    y_r = s ** 2 * mp.log((mp.e ** e - 1 + q) / q) + mp.mpf(1) / 2
    remove = (1 - q) * sf(y_r / s) + q * sf((y_r - 1) / s) - mp.e ** e * sf(y_r / s)
    # add: P = N(0), Q = (1-q) N(0) + q N(1); L > eps <=> 1 - q + q e^{(2y-1)/(2 s^2)} < e^-eps
    inner = (mp.e ** (-e) - 1 + q) / q
    add = mp.mpf(0)
    if inner > 0:
        y_a = s ** 2 * mp.log(inner) + mp.mpf(1) / 2
        add = mp.ncdf(y_a / s) - mp.e ** e * ((1 - q) * mp.ncdf(y_a / s) + q * mp.ncdf((y_a - 1) / s))
    return float(max(remove, add, 0))


@pytest.mark.parametrize("sigma, q, delta", [(0.99147, 9.674e-6, 1.77e-14), (0.6, 1e-4, 1e-12)])
def test_single_small_q_step_against_closed_form(sigma, q, delta):
    """The issue's dpsgd(0.99147, 9.674e-6, 1) at delta 1.77e-14 (exact 0.004424;
    one grid gave [0.00333, 0.04669]): within target and containing the root
    of the closed form."""
    lo, hi = pld.dpsgd(sigma, q, 1).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert _exact_single_step_delta(sigma, q, hi) <= delta * (1 + 1e-9)
    if lo > 0:
        assert _exact_single_step_delta(sigma, q, lo) >= delta * (1 - 1e-9)


@settings(max_examples=8, deadline=None)
@given(sigma=st.floats(0.5, 2.0), log_q=st.floats(-5.0, -3.0), steps=st.integers(2, 2000),
       log_delta=st.floats(-12.0, -6.0))
def test_split_bracket_intersects_the_whole_law_bracket(sigma, log_q, steps, log_delta):
    """Across the small-q, strict-delta corner: the bracket the decomposition
    certifies (whatever it is narrowed to) and the one grid pair's bracket
    (the decomposition switched off) both contain epsilon, so they intersect."""
    from pld.engine import queries

    q, delta = 10.0 ** log_q, 10.0 ** log_delta
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
        keep = queries._refine_by_jumps
        try:
            queries._refine_by_jumps = lambda engine, d, r, a, b, used: (a, b)
            lo1, hi1 = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
        finally:
            queries._refine_by_jumps = keep
    assert 0.0 <= lo <= hi
    assert lo <= hi1 * (1 + 1e-12) and lo1 <= hi * (1 + 1e-12)
    assert hi - lo <= (hi1 - lo1) * (1 + 1e-9) + 1e-15  # never wider than without it


def _delta_importance_sampled(sigma: float, q: float, steps: int, epsilons, *, n: int = 200_000,
                              seed: int = 0, warmup: tuple[float, float, int] | None = None
                              ) -> list[tuple[float, float]]:
    """``(estimate, standard error)`` of delta(eps) (remove direction) by Monte
    Carlo with a defensive mixture proposal: one uniformly chosen step is
    drawn from N(mu, sigma^2) with mu where one step alone reaches epsilon
    (the single big jump), the others from the subsampled law itself.  The
    weight is P(y) / ((1/T) sum_j g(y_j) P(y) / p(y_j)); numpy only.
    ``warmup`` ``(sigma0, q0, steps0)``: a phase in front, its steps drawn
    from their own subsampled law (weight one) and their losses added."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(seed)
    eps_mid = float(np.mean(epsilons))
    mu = sigma ** 2 * math.log((math.exp(eps_mid) - 1 + q) / q) + 0.5 + 0.15 * sigma

    def log_p(y):
        return np.logaddexp(math.log1p(-q) - 0.5 * (y / sigma) ** 2, math.log(q) - 0.5 * ((y - 1) / sigma) ** 2)

    batches = []
    batch = 20_000
    for _ in range(n // batch):
        y = rng.normal(0.0, sigma, (batch, steps)) + (rng.random((batch, steps)) < q)
        j = rng.integers(0, steps, batch)
        y[np.arange(batch), j] = rng.normal(mu, sigma, batch)
        log_w = math.log(steps) - logsumexp(-0.5 * ((y - mu) / sigma) ** 2 - log_p(y), axis=1)
        z = (2 * y - 1) / (2 * sigma ** 2)
        loss = np.log1p(q * np.expm1(np.minimum(z, 700.0))).sum(axis=1)
        if warmup is not None:
            s0, q0, t0 = warmup
            y0 = rng.normal(0.0, s0, (batch, t0)) + (rng.random((batch, t0)) < q0)
            loss += np.log1p(q0 * np.expm1((2 * y0 - 1) / (2 * s0 ** 2))).sum(axis=1)
        batches.append((loss, log_w))
    return weighted_delta_estimates(batches, epsilons)


def test_split_bracket_against_importance_sampling():
    """sigma 0.8, q 2e-5, T 128, delta 1e-10 (a single rare large step decides
    delta): Monte Carlo with importance sampling, which shares nothing with
    pld, puts delta at the bracket's ends on the right sides of 1e-10 (within
    four standard errors, ~1.6%)."""
    sigma, q, steps, delta = 0.8, 2e-5, 128, 1e-10
    p = pld.dpsgd(sigma, q, steps)
    lo, hi = p.epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    (d_lo, se_lo), (d_hi, se_hi) = _delta_importance_sampled(sigma, q, steps, [lo, hi])
    assert se_lo < 0.01 * d_lo and se_hi < 0.01 * d_hi  # (the sampler works here)
    assert d_hi <= delta + 4 * se_hi  # the certified upper end is epsilon-DP at delta
    assert d_lo >= delta - 4 * se_lo  # and the lower end is not


def test_warmup_riding_along_is_cut_too():
    """The run of the test above with a short warm-up in front (sigma 2.071,
    q 1.1e-4, 3 steps: a stop hook's schedule).  Whole in every term, the
    warm-up's Gaussian tail held the terms' tilt down and the bracket was
    [0.024160, 0.024177] (5x its target); cut as well, the terms meet the
    target, and importance sampling (sharing nothing with pld) puts delta at
    the ends on the right sides of 1e-10."""
    warm, (sigma, q, steps), delta = (2.071, 1.1e-4, 3), (0.8, 2e-5, 128), 1e-10
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule([warm, (sigma, q, steps)]).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    (d_lo, se_lo), (d_hi, se_hi) = _delta_importance_sampled(sigma, q, steps, [lo, hi], warmup=warm, seed=3)
    assert se_lo < 0.01 * d_lo and se_hi < 0.01 * d_hi
    assert d_hi <= delta + 4 * se_hi
    assert d_lo >= delta - 4 * se_lo


@pytest.mark.parametrize("warm, main, delta", [
    ((2.0, 1e-3, 3), (0.9, 2e-5, 128), 1e-11),            # 179x the target when whole
    ((2.5, 5e-4, 10), (0.84, 1e-5, 300), 1e-10),          # 15x
    ((3.579, 0.0019, 5), (0.8613, 1.4e-5, 1600), 1e-9),   # 3.7x (a stop hook's probe)
])
def test_warmup_schedules_meet_the_target(warm, main, delta):
    """Short warm-ups in front of a heavy-tailed phase: within the default
    target, and at least the heavy phase's own lower end (a composition is
    at least as leaky as its part: an outside check on the lower end)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule([warm, main]).epsilon_bounds(delta)
        lo1, _ = pld.dpsgd(*main).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert hi >= lo1


def test_split_moves_to_the_part_that_jumps():
    """sigma 0.695, q 8.1e-5, 70709 steps beside sigma 1.801, q 7.9e-4,
    127076 steps at delta 6e-11: split by step count, the second part has no
    step above the cut (one term) and the first rode along whole (7.5x the
    target, 10 s).  The split moves to the part that jumps: within the target,
    at least as leaky as either phase, and below dp_accounting's pessimistic
    estimate (1.3823 at h = 1e-4)."""
    phases, delta = [(0.695, 8.1e-05, 70709), (1.801, 0.00079, 127076)], 6e-11
    heavy = bj.applicable(pld.dpsgd_schedule(phases).components)
    assert heavy.steps == 127076  # (by count)
    moved = bj._heaviest_at(heavy, 0.68, delta)
    assert moved.steps == 70709 and moved.others[0][1] == 127076
    assert bj._heaviest_at(moved, 0.68, delta) is moved  # (a part with jumps keeps the split)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(delta)
        lead = max(pld.dpsgd(*ph).epsilon_bounds(delta)[0] for ph in phases)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lead <= hi and lo <= 1.3823


def test_cut_others_keeps_long_and_atom_parts_whole():
    """Only short, cuttable parts are cut; each cut part's left-out weight is
    at most its share, and what is left out is added to the tail."""
    short = _model(2.0, 1e-3, 3)
    long_ = _model(0.7, 1e-4, 5000)
    rr = pld.RandomizedResponse(1.0).loss_model("remove")
    kept, tail = bj._cut_others(((short, 3), (long_, 5000), (rr, 2)), 0.01, math.log(1e-18))
    assert kept[1] == (long_, 5000) and kept[2] == (rr, 2)
    core, c = kept[0]
    assert c == 3 and core is not short and core.bounded_above
    assert 0.0 < tail <= 1e-18 * (1 + 1e-6)
    # the left-out weight is the normal law's mass above the core's cut, 3 steps
    # (loss log(1 - q + q e^x) > cut <=> x > log1p(expm1(cut) / q), x = (2y - 1) / (2 sigma^2))
    x_cut = math.log1p(math.expm1(core.loss_hi) / 1e-3)
    y_cut = (2 * 2.0 ** 2 * x_cut + 1) / 2
    exact = 3 * ((1 - 1e-3) * norm.sf(y_cut, scale=2.0) + 1e-3 * norm.sf(y_cut, loc=1.0, scale=2.0))
    assert tail == pytest.approx(exact, rel=1e-6)


def test_terms_resolve_a_subsampled_bulk():
    """sigma 0.35, q 8.8e-6, T 2.2e5, delta 4.8e-9: the core law's bulk lies
    within q of 0; on a spacing wider than that the dominated side rounds it
    down a whole cell per step (the bracket was [9.109, 9.140], 34x its
    target).  The terms start at q / 2 and meet the target, and the bracket
    meets prv_accountant's certified interval (eps_error 0.002, computed once:
    855 s; [9.137529, 9.142598], estimate 9.140063).  (dp_accounting's PLD
    accountant gives 9.13731 at its 1e-4 grid, below that certified interval,
    and 9.14261 at 1e-5: no bound here.)"""
    sigma, q, steps, delta = 0.34634946304797637, 8.815094767049764e-06, 217640, 4.7596917509542085e-09
    lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lo <= 9.142598 and 9.137528 <= hi


def test_delta_curve_uses_the_split_too():
    """A delta query costs and resolves what the matching epsilon query does:
    at the heavy-tail case the delta brackets at the epsilon bracket's ends
    are narrow, bracket delta from the right sides, and nest in the one-grid
    brackets (the decomposition switched off)."""
    from pld.engine import delta_queries

    delta = 4.49e-12
    p = pld.dpsgd(0.802, 2.14e-5, 128)
    lo, hi = p.epsilon_bounds(delta)
    d_lo, d_hi = p.delta_bounds([lo, hi])
    assert d_hi[0] >= delta and d_lo[1] <= delta  # consistent with the epsilon bracket
    assert np.all(d_hi - d_lo <= 1e-3 * d_hi)
    keep = delta_queries._refine_delta_by_jumps
    try:
        setattr(delta_queries, "_refine_delta_by_jumps", lambda engine, flat, a, b, limit: (a, b))  # noqa: B010
        g_lo, g_hi = pld.dpsgd(0.802, 2.14e-5, 128).delta_bounds([lo, hi])
    finally:
        delta_queries._refine_delta_by_jumps = keep
    assert np.all(g_lo <= d_lo) and np.all(d_hi <= g_hi)


@pytest.mark.parametrize("phases, delta", [
    ([(2.506, 0.0098, 1), (3.331, 0.00075, 110)], 3e-12),     # 1.22x: the warm-up step is the heavy part
    ([(2.254, 0.0041, 2), (2.3239, 1.7e-05, 8300)], 2e-12),   # 2.44x (100x before the riders were cut)
])
def test_split_part_without_jumps_gives_way(phases, delta):
    """Where the part split by step count has no step above the cut, the part
    that jumps is split instead and the old one rides along cut at the same
    cut (its jumps there weigh below the tail share): within the target, and
    at least as leaky as the leading phase."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(delta)
        lead = max(pld.dpsgd(*ph).epsilon_bounds(delta)[0] for ph in phases)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lead <= hi


def test_one_jump_term_gets_the_larger_grid_cap():
    """sigma 0.457, q 3.4e-6, T 480000, delta 5e-5: the one-jump term's law spans
    from the cut to a loss of ~4, and at the spacing its bulk needs its first
    grid passed the general cap (2^21 points): the term stopped at 2x its share
    and the bracket at 1.67x its target.  Term engines take twice the cap: within
    the target, inside the bracket without the terms, and below dp_accounting's
    pessimistic estimate (0.138286 at h = 1e-4)."""
    assert bj.TERM_GRID_POINTS > bj.MAX_GRID_POINTS
    sigma, q, steps, delta = 0.457, 3.4e-6, 480000, 5e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lo <= 0.138286
    lo1, hi1 = _bracket_without_terms(sigma, q, steps, delta)
    assert lo1 <= hi * (1 + 1e-12) and lo <= hi1 * (1 + 1e-12)


def _bracket_without_terms(sigma: float, q: float, steps: int, delta: float) -> tuple[float, float]:
    """The bracket the whole law's grids certify with the big-jump refinement switched off."""
    from pld.engine import queries

    keep = queries._refine_by_jumps
    try:
        queries._refine_by_jumps = _grids_only
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pld.TargetMissedWarning)
            return pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    finally:
        queries._refine_by_jumps = keep


def _grids_only(engine, delta: float, rtol: float, lo: float, hi: float, used) -> tuple[float, float]:
    return lo, hi


@pytest.mark.parametrize("sigma, q, steps, delta, dp_accounting_upper", [
    # the probe's two misses (1.19x and 1.67x their targets with terms capped at 2^22 points);
    # dp_accounting's pessimistic estimates at h = 1e-5 (connect the dots), above the truth
    (0.586, 9.3e-6, 350000, 3e-6, 0.0982724),
    (0.5868611239968413, 1.046779440280364e-05, 1418523, 1.1222944833681328e-07, 0.3877120),
])
def test_one_jump_term_past_a_stalled_spacing(sigma, q, steps, delta, dp_accounting_upper):
    """A one-jump term whose refinement stalls near the sampling rate (its width erratic in
    the spacing) reaches its share through the neighbouring spacings the larger cap leaves
    room for: within the target, below dp_accounting's pessimistic estimate, and inside the
    bracket the whole law's grids certify without the terms."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert lo <= dp_accounting_upper
    lo1, hi1 = _bracket_without_terms(sigma, q, steps, delta)
    assert lo1 <= lo and hi <= hi1


def test_third_pass_refines_after_a_mistuned_first(monkeypatch):
    """sigma 0.586, q 9.3e-6, T 350000, delta 3e-6 with terms capped at 2^22 points: the
    first pass is tuned 1.5% from the answer, the second cuts anew there and misses 1.19x;
    the third refines the terms from the second's grids and meets the target."""
    monkeypatch.setattr(bj, "TERM_GRID_POINTS", 2 * bj.MAX_GRID_POINTS)
    passes = []
    build = bj.build_terms

    def counted(*args, **kwargs):
        passes.append(kwargs.get("previous") is not None)
        return build(*args, **kwargs)

    monkeypatch.setattr(bj, "build_terms", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd(0.586, 9.3e-6, 350000).epsilon_bounds(3e-6)
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert passes == [False, False, True]
    assert lo <= 0.0982724


def test_miss_names_the_direction_whose_end_is_wide(monkeypatch):
    """sigma 0.7155, q 3.4e-6, T 3.7e8, delta 3.3e-3 (a stop-hook probe's extreme draw): the
    remove direction's terms bracket epsilon within [0.27614, 0.27620], but the add
    direction's grid, at its memory cap, leaves its upper end at 0.27638.  The warning names
    the add direction's cap, not the terms; the bracket holds the terms' lower end.  The add
    direction is refined as soon as its end lies above the terms' bracket, and once it stays
    beyond the target's reach of it the terms are not refined further: a fresh cut at the
    answer, no third pass (at 2^23 points that pass took 19 s and moved nothing, and under the
    default time budget the add direction was never refined: [0.276138, 0.276726] in 41 s).
    (The terms' grids are capped at the whole law's cap here, 2^21 points instead of 2^23: the
    same attribution and ends to 1e-6 in 7 s, against 40-90 s.)"""
    monkeypatch.setattr(bj, "TERM_GRID_POINTS", bj.MAX_GRID_POINTS)
    run = pld.dpsgd(0.7155, 3.4e-6, 371706450)
    with pytest.warns(pld.TargetMissedWarning, match="add direction's grid reached its memory cap"):
        lo, hi = run.epsilon_bounds(0.00328)
    assert 0.2761 < lo < 0.27620 < hi < 0.2765
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)  # (the report repeats the miss)
        passes = run.explain(0.00328)["big_jump_decomposition"]
    assert len(passes) == 2 and abs(passes[1]["tuned_at"] - 0.27617) < 1e-4
    assert passes[1]["bracket"][1] < hi - (1e-4 * hi + 1e-6)  # (the add direction's end sets hi)
