"""Epsilon after many step counts in one call (pld.epsilon_over_steps / epsilon_per_epoch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pld
from pld.accounting.epochs import epoch_steps
from pld.baselines import exact
from pld.report.rounding import bracket, round_up


def test_gaussian_rows_contain_the_exact_epsilon():
    # T Gaussian releases: exact epsilon from Balle & Wang's closed form (not from pld)
    counts = [1, 7, 120, 1000]
    table = pld.epsilon_over_steps(pld.Gaussian(8.0), counts, 1e-6)
    assert table.steps == (1, 7, 120, 1000)
    for t, lo, hi in zip(table.steps, table.epsilon_lower, table.epsilon_upper):
        truth = float(exact.gaussian_epsilon(1e-6, exact.gaussian_mu(8.0, t)))
        assert lo <= truth <= hi, (t, lo, truth, hi)
        assert hi - lo <= 1e-4 * hi + 1e-6
    assert np.all(np.diff(table.epsilon_upper) > 0)


def test_rows_are_the_single_queries_and_sorted():
    step = pld.PoissonSampled(pld.Gaussian(1.0), 0.01)
    table = pld.epsilon_over_steps(step, [1000, 10, 1000, 100], 1e-5)
    assert table.steps == (10, 100, 1000)  # sorted, duplicates merged
    for t, lo, hi in zip(table.steps, table.epsilon_lower, table.epsilon_upper):
        assert (lo, hi) == pld.dpsgd(1.0, 0.01, t).epsilon_bounds(1e-5)
    assert table.epsilon_upper[-1] == pytest.approx(1.8282, abs=1e-4)  # published (DESIGN.md)
    # a PLD is one step of a repeated block
    block = pld.dpsgd(1.0, 0.01, 10)
    assert pld.epsilon_over_steps(block, [100], 1e-5).epsilon_upper[0] == pld.dpsgd(1.0, 0.01, 1000).epsilon(1e-5)


def test_per_epoch_against_dp_accounting():
    dpa = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import PLDAccountant

    table = pld.epsilon_per_epoch(1.1, 256 / 60000, 3, 1e-5)
    assert table.epochs == (1.0, 2.0, 3.0)
    assert table.steps == (235, 469, 704)  # ceil(e * 60000 / 256)
    for t, lo, hi in zip(table.steps, table.epsilon_lower, table.epsilon_upper):
        acc = PLDAccountant()
        acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), t))
        # dp_accounting's pessimistic estimate: above the truth by its grid error (~1e-4 here)
        assert lo <= acc.get_epsilon(1e-5) <= hi + 2e-4 * hi


def test_epoch_step_counts():
    assert epoch_steps(3, 0.1) == [10, 20, 30]
    assert epoch_steps(2.5, 0.1) == [10, 20, 25]             # a partial last epoch gets its row
    assert epoch_steps(0.5, 0.1) == [5]
    assert epoch_steps(60, 256 / 60000)[-1] == math.ceil(60 * 60000 / 256) == 14063  # as pld dpsgd --epochs
    assert epoch_steps(3, 0.3, steps_per_epoch=4) == [4, 8, 12]  # a training loop's own count
    assert epoch_steps(3, 0.01) == [100, 200, 300]            # exact decimal q: no 300.00000000000006 -> 301
    t = pld.epsilon_per_epoch(2.0, 0.1, 2.5, 1e-5, steps_per_epoch=7)
    assert t.steps == (7, 14, 18) and t.epochs == (1.0, 2.0, 2.5)


def test_table_text_and_rows():
    t = pld.epsilon_per_epoch(2.0, 0.1, 2, 1e-5)
    rows = t.rows()
    assert [r["epoch"] for r in rows] == [1.0, 2.0] and [r["steps"] for r in rows] == [10, 20]
    assert len(t) == 2
    text = str(t).splitlines()
    assert text[0].split()[:3] == ["epoch", "steps", "epsilon"] and len(text) == 3
    # printed rounded up, the bracket outward: nothing shown is below the certificate
    assert round_up(rows[1]["epsilon_upper"], 4) in text[2]
    assert bracket(rows[1]["epsilon_lower"], rows[1]["epsilon_upper"]) in text[2]


@pytest.mark.parametrize("call, exc, fragment", [
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), [], 1e-5), ValueError, "at least one"),
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), 10, 1e-5), TypeError, "sequence of step counts"),
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), [0], 1e-5), ValueError, "steps[0]"),
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), [1, 2.5], 1e-5), (TypeError, ValueError), "steps[1]"),
    (lambda: pld.epsilon_over_steps("gaussian", [1], 1e-5), TypeError, "pld mechanism or a PLD"),
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), [1], 1.5), ValueError, "delta"),
    (lambda: pld.epsilon_over_steps(pld.Gaussian(1.0), range(1, 10_002), 1e-5), ValueError, "at most 10000"),
    (lambda: pld.epsilon_per_epoch(1.0, 0.01, 0, 1e-5), ValueError, "epochs"),
    (lambda: pld.epsilon_per_epoch(1.0, 1.5, 2, 1e-5), ValueError, "sampling_rate"),
    (lambda: pld.epsilon_per_epoch(1.0, 0.01, 20_000, 1e-5), ValueError, "at most 10000"),
    (lambda: pld.epsilon_per_epoch(1.0, 0.01, 2, 1e-5, sampling="sliced"), ValueError, "'without_replacement'"),
])
def test_bad_input_names_the_parameter(call, exc, fragment):
    with pytest.raises(exc) as err:
        call()
    assert fragment in str(err.value)
