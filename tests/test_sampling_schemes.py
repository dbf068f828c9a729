"""The allocation-type sampling schemes through every front end (issue 20):
balls-in-bins, random allocation with k participations, shuffling.

The numerics of the pairs are tested against independent truths in
tests/test_random_allocation.py; here: what each front end accounts.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import pytest

import pld
from pld.baselines import exact
from pld.mechanisms import adjacency
from pld.mechanisms.allocation import RandomAllocation, Shuffling
from pld.mechanisms.allocation.subsampled import SubsampledRound

SIGMA, Q = 2.0, 0.1  # ten steps an epoch: quick grids


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        yield


def test_balls_in_bins_accounts_a_partial_epoch_as_the_round_of_its_steps_held_with_their_share():
    # 2.5 epochs of ten steps: two whole rounds, then five steps that hold the record with
    # probability 1/2, uniformly: the 1-of-5 round held with probability 1/2, tight.  (The
    # whole third epoch bounds it from above only; taken both ways, its lower end was too high.)
    d = pld.dpsgd(SIGMA, Q, 25, sampling="balls-and-bins")
    assert d.adjacency == adjacency.ADD_OR_REMOVE
    epoch = RandomAllocation(pld.Gaussian(SIGMA), 10)
    assert d.components == ((epoch, 2), (SubsampledRound(RandomAllocation(pld.Gaussian(SIGMA), 5), 0.5), 1))
    lo, hi = d.epsilon_bounds(1e-5)
    assert hi - lo <= 1e-4 * hi + 1e-6
    two, three = (epoch.pld().self_compose(k).epsilon_bounds(1e-5) for k in (2, 3))
    assert two[1] < lo <= hi < three[0]
    assert pld.dpsgd(SIGMA, Q, 30, sampling="balls-and-bins").components == ((epoch, 3),)


@pytest.mark.parametrize("sigma, eps", [(1.0, 0.5), (0.7, 1.0), (2.0, 0.1)])
def test_half_an_epoch_of_two_steps_is_one_poisson_step(sigma, eps):
    # One step of an epoch of two: the record is in it with probability 1/2, independently of
    # everything else, so the run is one Poisson-subsampled Gaussian step at q = 1/2 (exact
    # quadrature, tests/oracles.py).  Accounted as the whole epoch, the lower end was the
    # epoch's delta, above the run's (sigma 1, eps 0.5: the epoch's remove delta is 0.149).
    from oracles import subsampled_gaussian_delta_single

    truth = max(subsampled_gaussian_delta_single(eps, sigma, 0.5, d) for d in ("remove", "add"))
    lo, hi = pld.dpsgd(sigma, 0.5, 1, sampling="balls_in_bins").delta_bounds(eps)
    assert lo <= truth <= hi
    assert hi - lo <= 1e-4 * truth
    whole = RandomAllocation(pld.Gaussian(sigma), 2).pld().delta_bounds(eps)
    assert hi < whole[0]


def test_random_allocation_takes_participations_and_only_it():
    d = pld.dpsgd(SIGMA, 0.2, 20, sampling="random_allocation", participations=2)
    assert d.components == RandomAllocation(pld.Gaussian(SIGMA), 10, 2).pld().self_compose(2).components
    with pytest.raises(ValueError, match="takes no participations"):
        pld.dpsgd(SIGMA, Q, 20, participations=2)
    with pytest.raises(ValueError, match="needs whole batches per epoch .*dataset_size and batch_size"):
        pld.dpsgd(SIGMA, 0.3, 20, sampling="balls_in_bins")


def test_shuffling_is_certified_replace_special_and_refuses_other_relations():
    d = pld.dpsgd(SIGMA, Q, 20, sampling="shuffle")
    assert d.adjacency == adjacency.REPLACE_SPECIAL
    assert d.components == Shuffling(pld.Gaussian(SIGMA), 10).pld().self_compose(2).components
    lo, hi = d.epsilon_bounds(1e-5, rtol=1e-2)
    # the upper end is the Gaussian mechanism once per epoch (no amplification): the exact
    # profile of that mechanism is at most the upper end
    assert hi >= float(exact.gaussian_epsilon(1e-5, math.sqrt(2) / SIGMA)) * (1 - 1e-9)
    assert 0 < lo <= hi
    with pytest.raises(ValueError, match="different neighbouring relations"):
        d.compose(pld.dpsgd(SIGMA, Q, 20, sampling="without_replacement"))
    # replace-special composes with add-or-remove pairs (a zero record contributes nothing)
    assert d.compose(pld.dpsgd(SIGMA, Q, 20)).adjacency == adjacency.REPLACE_SPECIAL


def test_accountant_records_epochs_and_bounds_a_running_one_as_dpsgd_does():
    acc = pld.Accountant(sampling="balls_in_bins")
    for _ in range(25):
        acc.step(noise_multiplier=SIGMA, sampling_rate=Q)
    assert acc.steps == 25
    assert acc.history == [(RandomAllocation(pld.Gaussian(SIGMA), 10), 2)]
    lo, hi = acc.epsilon_bounds(1e-5)
    assert (lo, hi) == pld.dpsgd(SIGMA, Q, 25, sampling="balls_in_bins").epsilon_bounds(1e-5)
    assert hi < pld.dpsgd(SIGMA, Q, 30, sampling="balls_in_bins").epsilon_bounds(1e-5)[0]
    back = pld.Accountant.from_state_dict(json.loads(json.dumps(acc.state_dict())))
    assert back.steps == 25 and back.history == acc.history
    assert back.epsilon_bounds(1e-5) == acc.epsilon_bounds(1e-5)


def test_command_line_and_report_say_what_was_accounted():
    out = subprocess.run([sys.executable, "-m", "pld", "dpsgd", "--noise-multiplier", str(SIGMA),
                          "--sampling-rate", str(Q), "--steps", "20", "--sampling", "balls_in_bins", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["sampling"] == "balls_in_bins"
    assert res["neighbouring"].startswith("add-or-remove")
    lo, hi = pld.dpsgd(SIGMA, Q, 20, sampling="balls_in_bins").epsilon_bounds(1e-5)
    assert res["epsilon_lower"] <= hi and lo <= res["epsilon_upper"]


def test_dp_accountings_random_allocation_event_maps_to_random_allocation():
    """dp_accounting's RandomAllocationDpEvent (matched by name: the installed
    release may predate it, so a stand-in of the same shape is used then)."""
    dp_event = pytest.importorskip("dp_accounting.dp_event")
    from pld.interop.dp_accounting import PLDAccountant

    event_type = getattr(dp_event, "RandomAllocationDpEvent", None)
    if event_type is None:
        import attr

        @attr.s(frozen=True, slots=True, auto_attribs=True)
        class RandomAllocationDpEvent(dp_event.DpEvent):
            event: dp_event.DpEvent
            num_steps: int
            num_selected: int = 1

        event = RandomAllocationDpEvent(dp_event.GaussianDpEvent(SIGMA), 10)
    else:  # pragma: no cover - a dp_accounting that has it
        event = event_type(dp_event.GaussianDpEvent(SIGMA), 10)
    acc = PLDAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(event, 3))
    assert acc.get_epsilon(1e-5) == pld.dpsgd(SIGMA, Q, 30, sampling="balls_in_bins").epsilon(1e-5)


@pytest.mark.parametrize("sigma, eps", [(1.0, 0.5), (2.0, 0.2), (0.7, 1.0)])
def test_shuffling_with_drop_last_takes_no_lower_end_above_its_concrete_pair(sigma, eps):
    # Five records in batches of two, the last dropped: two batches an epoch, and on the
    # dataset whose other records contribute zero the record is in one of them with
    # probability u = 4/5, so the pair is ((1 - u) Q + u P, Q) with (P, Q) the 1-of-2
    # allocation, whose delta is u delta(eps') (remove) and (1 - e^eps (1 - u)) delta(eps'')
    # (add) at the shifted epsilons.  A lower end built on that dataset lies below them; the
    # allocation's own lower end, which the run took before, lay above.
    u = 0.8
    with pytest.warns(pld.NotTightWarning, match="probability 0.8 .drop_last"):
        lo, hi = pld.dpsgd(sigma, dataset_size=5, batch_size=2, epochs=1, sampling="shuffle",
                           drop_last=True).delta_bounds(eps)
    pair = RandomAllocation(pld.Gaussian(sigma), 2).pld()
    c = 1.0 - math.exp(eps) * (1.0 - u)
    remove = u * pair.delta_bounds(math.log((math.expm1(eps) + u) / u))[1]
    add = c * pair.delta_bounds(math.log(math.exp(eps) * u / c))[1]
    assert 0 < lo <= max(remove, add) < pair.delta_bounds(eps)[0] <= hi
    assert hi == pld.dpsgd(sigma, dataset_size=4, batch_size=2, epochs=1, sampling="shuffle").delta_bounds(eps)[1]


def test_cheap_runs_take_the_linear_grid_where_it_is_small_and_stay_certified():
    # (the calibration's coarse brackets: run_spacing(..., cheap=True) builds a 1-of-t round on
    # the single linear grid where its first window is small; a certified bracket all the same,
    # so it meets the default one, and both hold the Gaussian bounds every round obeys)
    from scipy.stats import norm  # (scipy's own: the reference is not pld's code)

    from pld.mechanisms.allocation import run_spacing

    def rounds(d: pld.PLD) -> list:
        return [m for m, _ in d.components]

    sigma, t, epochs, delta = 1.02, 100, 20, 1e-5
    with run_spacing(0.08, precise=False, cheap=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cheap = pld.dpsgd(sigma, 1.0 / t, t * epochs, sampling="balls_in_bins")
        lo_c, hi_c = cheap.epsilon_bounds(delta, rtol=1e-2)
        small_sigma = pld.dpsgd(0.8, 1.0 / t, t, sampling="balls_in_bins")
    assert [r.construction for r in rounds(cheap)] == ["linear"]
    assert [r.construction for r in rounds(small_sigma)] == ["auto"]  # (its window: 2e5 cells)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lo, hi = pld.dpsgd(sigma, 1.0 / t, t * epochs, sampling="balls_in_bins").epsilon_bounds(delta)
    assert lo_c <= hi and lo <= hi_c and hi_c - lo_c <= 1e-2 * hi_c
    # upper: no amplification (epochs x t steps of N(0, sigma^2) against N(1, sigma^2) would be
    # one Gaussian of sensitivity sqrt(epochs)); lower: the sum of each round's outputs
    def gaussian_eps(mu: float) -> float:
        f = lambda e: norm.cdf(mu / 2 - e / mu) - math.exp(e) * norm.cdf(-mu / 2 - e / mu) - delta
        a, b = 0.0, 100.0
        for _ in range(200):
            m = 0.5 * (a + b)
            a, b = (m, b) if f(m) > 0 else (a, m)
        return a
    assert gaussian_eps(math.sqrt(epochs) / (sigma * math.sqrt(t))) <= lo_c
    assert hi_c <= gaussian_eps(math.sqrt(epochs) / sigma)
