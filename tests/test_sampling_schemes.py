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

SIGMA, Q = 2.0, 0.1  # ten steps an epoch: quick grids


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pld.TargetMissedWarning)
        yield


def test_balls_in_bins_composes_whole_epochs_and_a_partial_one_as_whole():
    d = pld.dpsgd(SIGMA, Q, 25, sampling="balls-and-bins")  # 2.5 epochs
    assert d.components == RandomAllocation(pld.Gaussian(SIGMA), 10).pld().self_compose(3).components
    assert d.adjacency == adjacency.ADD_OR_REMOVE
    lo, hi = d.epsilon_bounds(1e-5, rtol=1e-2)
    # amplification: below the Gaussian mechanism run once per epoch (no sampling at all)
    no_amplification = float(exact.gaussian_epsilon(1e-5, math.sqrt(3) / SIGMA))
    assert 0 < lo <= hi < no_amplification


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


def test_accountant_records_epochs_and_counts_a_running_one_whole():
    acc = pld.Accountant(sampling="balls_in_bins")
    for _ in range(25):
        acc.step(noise_multiplier=SIGMA, sampling_rate=Q)
    assert acc.steps == 25
    assert acc.history == [(RandomAllocation(pld.Gaussian(SIGMA), 10), 2)]
    assert acc.epsilon_bounds(1e-5) == pld.dpsgd(SIGMA, Q, 30, sampling="balls_in_bins").epsilon_bounds(1e-5)
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
