"""Schedules whose phases differ in scale: the windows across components (pld.engine.composer).

One grid spacing serves every phase of a schedule.  A phase whose per-step loss is small next to
it is spread by a cell per step, which widens its composed law; the windows that cut the first
phases to their share of the final one must hold that law, not only the exact one, or its tail
goes to +inf on the dominating side and the upper end becomes the largest loss.  Truths from
outside pld: dp_accounting's pessimistic PLD (an upper estimate of epsilon), and a composition is at
least as leaky as each of its phases (post-processing), so its lower end is checked against the
leading phase's own.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import pld
from pld.engine.targets import LogEta

CASES = [
    # (phases, delta): upper ends 221.13 and 11723.11 (the largest losses) before
    ([(1.828, 3.8e-05, 2142), (1.877, 5.5e-05, 290), (0.643, 0.011, 19983)], 5e-10),
    ([(5.344, 0.000812, 50133), (2.0117, 2.74e-05, 98), (1.0292, 0.0293, 392846)], 8e-12),
]


@pytest.mark.parametrize("phases, delta", CASES)
def test_mixed_scale_schedule_meets_its_target(phases, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(delta)
        lead = max((pld.dpsgd(*ph).epsilon_bounds(delta) for ph in phases), key=lambda b: b[0])
    assert hi - lo <= 1e-4 * hi + 1e-6
    assert hi >= lead[0]  # at least as leaky as its leading phase


def test_mixed_scale_schedule_below_dp_accounting():
    """dp_accounting's pessimistic estimate (h = 1e-4: 42.55469) is above the
    true epsilon, so above pld's certified lower end; pld's upper end lies
    within that estimate's grid error (h per step of its largest loss)."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event

    phases, delta = CASES[0]
    lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(delta)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), t)
        for s, q, t in phases]))
    peer = acc.get_epsilon(delta)
    assert lo <= peer
    assert hi <= peer + 1e-2


def test_spread_phase_tail_is_not_sent_to_inf():
    """The add direction of a mild phase (50133 steps at q 8.1e-4, per-step
    loss sd 1.5e-4) beside a tiny one, on the spacing the schedule's leading
    phase sets (5.13e-4): the discretised law's variance is 2.7x the exact
    one, and cutting to windows of the exact law sent 1.1e-8 of it to +inf.
    The mass at +inf is now within the truncation budget (e^-45 per side,
    a few shares of it), far below the deltas of the queries."""
    p = pld.dpsgd_schedule([(5.344, 0.000812, 50133), (2.0117, 2.74e-05, 98)])
    pess, _ = p._engine().composer.materialize("add", 0.000513, 0.0, LogEta(-45.0, -45.0))
    assert pess.inf_mass < 1e-15
    # (its epsilon at a strict delta is then finite, not the largest loss)
    assert math.isfinite(float(pess.epsilon(1e-10)))
    assert np.all(np.isfinite(pess.delta(np.array([0.1, 0.3]))))


def test_infinite_upper_end_of_a_bounded_direction_is_refined(monkeypatch):
    """Where the grid's own mass at +inf puts a direction's upper end at
    infinity although its losses are bounded (the add direction here: each
    step's loss is at most -log(1 - q)), the planner refines the grid rather
    than calling the bracket done: with the windows of the exact laws alone
    (the failure above, forced) the upper end was the largest loss, 11723.1,
    for an epsilon of 404.8."""
    from pld.engine import composer
    from pld.engine import windows as w

    monkeypatch.setattr(composer, "_window",
                        lambda parts, held, lam, log_eta, h: w.window(w.Composite(parts), lam, log_eta, h))
    phases, delta = CASES[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(delta)
    assert 404.8 < lo <= hi < 404.85
