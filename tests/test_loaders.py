"""Loader shapes (issue 38): a run counted as its data loader made it, on every front end.

Truths here are exact counts (ceil / floor of N / b, epochs times steps) and the
mechanisms pld composes for them; the numerics of those mechanisms are tested
elsewhere against closed forms and peers.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

import pld
from pld.accounting.loaders import loader_steps_per_epoch, resolve_run, steps_of_rate
from pld.mechanisms import SampledWithoutReplacement
from pld.mechanisms.allocation import RandomAllocation
from pld.mechanisms.allocation.subsampled import SubsampledRound

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import call, warnings_in  # noqa: E402


def test_steps_per_epoch_of_a_loader():
    assert loader_steps_per_epoch(50000, 512) == 98 == math.ceil(50000 / 512)
    assert loader_steps_per_epoch(50000, 512, drop_last=True) == 97 == 50000 // 512
    assert loader_steps_per_epoch(512 * 98, 512) == loader_steps_per_epoch(512 * 98, 512, True) == 98
    with pytest.raises(ValueError, match="no batch is left"):
        loader_steps_per_epoch(10, 20, drop_last=True)


@pytest.mark.parametrize("q, m", [(1 / 98, 98), (0.01020408163265306, 98), (1 / 3, 3), (0.01, 100),
                                  (0.1, 10), (1.0, 1), (512 / (512 * 98), 98)])
def test_a_rate_within_a_few_ulps_of_one_over_m_is_m_steps(q, m):
    assert steps_of_rate(q) == m
    assert resolve_run("poisson", q, epochs=100).steps == 100 * m
    assert pld.epsilon_per_epoch(1.0, q, 3, 1e-5, rtol=1e-2).steps == (m, 2 * m, 3 * m)


@pytest.mark.parametrize("q", [512 / 50000, 256 / 60000, 0.3, 0.0102041])
def test_other_rates_count_expected_steps(q):
    assert steps_of_rate(q) is None
    from fractions import Fraction

    assert resolve_run("poisson", q, epochs=7).steps == math.ceil(7 / Fraction(repr(q)))


def test_cifar_shapes():
    """(N, b) = (50000, 512): 98 steps per epoch, 97 with drop_last; 1/98 over 100 epochs: 9800."""
    for sampling in ("poisson", "balls_in_bins", "shuffle", "without_replacement"):
        r = resolve_run(sampling, dataset_size=50000, batch_size=512, epochs=100)
        assert (r.steps_per_epoch, r.steps, r.steps_per_epoch_source) == (98, 9800, "ceil"), sampling
        r = resolve_run(sampling, dataset_size=50000, batch_size=512, epochs=100, drop_last=True)
        assert (r.steps_per_epoch, r.steps, r.dropped) == (97, 9700, 50000 - 97 * 512), sampling
    assert resolve_run("poisson", dataset_size=50000, batch_size=512, epochs=1).sampling_rate == 512 / 50000
    assert resolve_run("balls_in_bins", dataset_size=50000, batch_size=512, epochs=1).sampling_rate == 1 / 98
    assert pld.dpsgd(1.0, 0.01020408163265306, epochs=100).components[0][1] == 9800


def test_run_level_schemes_take_the_loaders_steps():
    bnb = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=100, sampling="balls_in_bins")
    assert bnb.components == ((RandomAllocation(pld.Gaussian(1.0), 98), 100),)
    # a float 1/98 is 98 steps an epoch, not 99: 100 epochs, not 101
    assert pld.dpsgd(1.0, 1 / 98, 9800, sampling="balls_in_bins").components == bnb.components
    ra = pld.dpsgd(1.0, steps=40, steps_per_epoch=20, participations=2, sampling="random_allocation")
    assert ra.components == RandomAllocation(pld.Gaussian(1.0), 20, 2).pld().self_compose(2).components
    shuffled = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=3, drop_last=True, sampling="shuffle")
    # drop_last leaves 336 records out of each epoch of 97 batches: above, every epoch with the
    # record (no amplification: one Gaussian step an epoch); below, the 1-of-97 allocation pair
    # of a dataset whose other records contribute zero, held with probability 49664/50000
    upper, lower = shuffled.bounds()
    assert upper.components == ((pld.Gaussian(1.0), 3),)
    assert lower is not None
    assert lower.components == ((SubsampledRound(RandomAllocation(pld.Gaussian(1.0), 97), 49664 / 50000), 3),)


def test_sampling_without_replacement_accounts_the_short_batch_at_its_own_rate():
    """Each epoch: 97 steps of 512 and one of 336 of 50000 records, each at its own rate; the
    short step's pair is dominated by a full one's (the trade-off q f + (1 - q) Id grows as q
    shrinks), so the run lies between the run without it and the run with it at the full rate."""
    r = resolve_run("without_replacement", dataset_size=50000, batch_size=512, epochs=2)
    assert r.short_batch == 50000 - 97 * 512 == 336
    assert r.step_counts() == [(512 / 50000, 194), (336 / 50000, 2)]
    d = pld.dpsgd(2.0, dataset_size=50000, batch_size=512, epochs=2, sampling="wor")
    assert d.components == ((SampledWithoutReplacement(pld.Gaussian(2.0), 512 / 50000), 194),
                            (SampledWithoutReplacement(pld.Gaussian(2.0), 336 / 50000), 2))
    lo, hi = d.epsilon_bounds(1e-5)
    full = pld.dpsgd(2.0, 512 / 50000, 196, sampling="wor").epsilon_bounds(1e-5)
    fewer = pld.dpsgd(2.0, 512 / 50000, 194, sampling="wor").epsilon_bounds(1e-5)
    assert fewer[0] <= lo <= hi <= full[1]
    assert resolve_run("wor", dataset_size=512 * 4, batch_size=512, epochs=1).short_batch is None
    assert resolve_run("wor", dataset_size=50000, batch_size=512, epochs=1, drop_last=True).short_batch is None


def test_gradient_accumulation_is_accounted_per_logical_batch():
    """A logical batch of 512 summed from 4 micro-batches of 128 is one noisy step at 512/N; the
    micro-batches accounted as steps (jax_privacy issue 234) understate epsilon several-fold."""
    logical = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=10)
    for kw in ({"physical_batch_size": 128}, {"physical_batch_size": 128, "accumulation_steps": 4}):
        assert pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=10, **kw).components == logical.components
    by_k = pld.dpsgd(1.0, dataset_size=50000, physical_batch_size=128, accumulation_steps=4, epochs=10)
    assert by_k.components == logical.components
    wrong = pld.dpsgd(1.0, dataset_size=50000, batch_size=128, epochs=10)
    assert wrong.epsilon(1e-5) < 0.8 * logical.epsilon(1e-5)
    r = resolve_run("poisson", dataset_size=50000, batch_size=500, physical_batch_size=128, epochs=1)
    assert r.accumulation_steps == 4 and "logical batch 500 = 4 accumulated micro-batches" in r.loader_text()


@pytest.mark.parametrize("kw, fragment", [
    ({"dataset_size": 100, "batch_size": 10, "sampling_rate": 0.1, "steps": 3}, "either sampling_rate or batch"),
    ({"batch_size": 10, "steps": 3}, "batch_size needs dataset_size"),
    ({"dataset_size": 10, "batch_size": 20, "steps": 3}, "larger than dataset_size"),
    ({"sampling_rate": 0.1, "drop_last": True, "steps": 3}, "drop_last needs dataset_size"),
    ({"sampling_rate": 0.1, "steps": 3, "epochs": 2}, "either steps or epochs"),
    ({"sampling_rate": 0.1}, "give steps or epochs"),
    ({"steps": 3}, "give sampling_rate"),
    ({"dataset_size": 100, "batch_size": 10, "physical_batch_size": 20, "steps": 3}, "larger than the logical"),
    ({"dataset_size": 100, "batch_size": 10, "physical_batch_size": 4, "accumulation_steps": 2, "steps": 3},
     "must be accumulation_steps x physical_batch_size = 2 x 4 = 8"),
    ({"dataset_size": 100, "accumulation_steps": 2, "steps": 3}, "accumulation_steps needs physical_batch_size"),
    ({"dataset_size": 100, "batch_size": 10, "steps": 3, "drop_last": "yes"}, "drop_last must be True or False"),
    ({"sampling_rate": 0.1, "epochs": 1, "steps_per_epoch": 0}, "steps_per_epoch"),
])
def test_bad_runs_name_the_parameter(kw, fragment):
    with pytest.raises((TypeError, ValueError), match=fragment):
        pld.dpsgd(1.0, **kw)


@pytest.mark.parametrize("sampling", ["balls_in_bins", "shuffle", "random_allocation"])
def test_run_level_schemes_say_what_they_need(sampling):
    with pytest.raises(ValueError, match=f"sampling='{sampling}' .*needs whole batches per epoch"):
        pld.dpsgd(1.0, 512 / 50000, epochs=100, sampling=sampling)
    with pytest.raises(ValueError, match="does not match dataset_size and batch_size"):
        pld.dpsgd(1.0, dataset_size=50000, batch_size=512, steps_per_epoch=100, epochs=1, sampling=sampling)


def test_accountant_takes_the_loaders_epoch():
    acc = pld.Accountant(sampling="balls_in_bins", steps_per_epoch=98)
    acc.step(noise_multiplier=1.0, sampling_rate=512 / 50000, count=196)  # the rate as a user has it: b / N
    assert acc.history == [(RandomAllocation(pld.Gaussian(1.0), 98), 2)]
    plain = pld.Accountant(sampling="balls_in_bins")
    plain.step(noise_multiplier=1.0, sampling_rate=0.01020408163265306, count=98)  # 1/98, as Opacus has it
    assert plain.history == [(RandomAllocation(pld.Gaussian(1.0), 98), 1)]
    with pytest.raises(ValueError, match="needs a sampling_rate"):
        pld.Accountant().step(noise_multiplier=1.0)


def test_spec_and_grid_files_take_the_loader(tmp_path):
    from pld.accounting.sweep_work import normalize

    c = normalize({"noise_multiplier": 1.0, "dataset_size": 50000, "batch_size": 512, "epochs": 100,
                   "sampling": "balls_in_bins"})
    assert (c["steps"], c["steps_per_epoch"], c["sampling_rate"]) == (9800, 98, 1 / 98)
    c = normalize({"noise_multiplier": 1.0, "sampling_rate": 0.01020408163265306, "epochs": 100})
    assert c["steps"] == 9800
    from pld.accounting.spec import parse_spec

    spec = parse_spec({"mechanisms": [{"type": "dpsgd", "noise_multiplier": 1.0, "dataset_size": 50000,
                                       "batch_size": 512, "epochs": 2}]})
    assert spec.pld.components == pld.dpsgd(1.0, 512 / 50000, 196).components


def test_command_line_counts_as_the_loader(capsys):
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-q", "0.01020408163265306", "--epochs", "100",
                          "--json")
    assert code == 0, err
    assert json.loads(out)["steps"] == 9800
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-n", "50000", "-b", "512", "--epochs", "100",
                          "--drop-last", "--json")
    res = json.loads(out)
    assert (res["steps"], res["steps_per_epoch"], res["drop_last"]) == (9700, 97, True)
    assert "97 steps per epoch = floor(50000 / 512)" in res["loader"]
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-n", "50000", "-b", "512", "--epochs", "100",
                          "--sampling", "balls_in_bins")
    assert code == 0 and warnings_in(err) == [], err
    first = out.splitlines()[0]
    assert first.startswith("(6.1") and "98 steps per epoch = ceil(50000 / 512)" in " ".join(out.split())
    lo, hi = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=100,
                       sampling="balls_in_bins").epsilon_bounds(1e-5)
    assert f"{hi:.4f}"[:4] in first
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1", "-n", "50000", "--batch-size", "512",
                          "--physical-batch-size", "128", "--epochs", "2")
    flat = " ".join(out.split())
    assert "logical batch 512 = 4 accumulated micro-batches of at most 128: accounted per logical batch" in flat


def test_head_one_is_the_answer():
    """Warnings go to stderr: `pld dpsgd ... | head -1` prints the answer line."""
    p = subprocess.run([sys.executable, "-m", "pld", "dpsgd", "--noise-multiplier", "0.5", "-q", "0.5", "-T", "20"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0
    assert p.stdout.splitlines()[0].startswith("(") and "-DP: certified epsilon in [" in p.stdout.splitlines()[0]
    assert "pld: warning: epsilon = " in p.stderr  # (a weak guarantee: said, on stderr)
