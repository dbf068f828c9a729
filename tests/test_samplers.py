"""pld.samplers: the batch samplers run the laws pld accounts, and hand over what they ran.

Laws are checked statistically over 10^4 simulated epochs with fixed seeds: every
inclusion frequency lies within 4 standard errors of its law (a family of at most a
few hundred cells: a false alarm has probability below 1% for a fresh seed, and
the seeds are fixed), batch sizes of Poisson sampling follow Binomial(N, q), and
balls-in-bins and shuffling use every record exactly once per epoch (exact
counting, no statistics).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pld
from pld.accounting import samplers as S

EPOCHS = 10_000


def _within(observed: np.ndarray, expected: np.ndarray, trials: int, sigmas: float = 4.0) -> None:
    """Counts of Bernoulli(p) events over ``trials`` draws within ``sigmas`` standard errors."""
    p = expected
    se = np.sqrt(trials * p * (1 - p))
    z = np.abs(observed - trials * p) / se
    assert z.max() <= sigmas, f"largest deviation {z.max():.2f} standard errors"


def test_poisson_inclusions_and_batch_sizes_follow_their_laws():
    n, b = 40, 4          # q = 0.1, 10 steps per epoch
    s = S.PoissonSampler(n, b, seed=12345)
    assert len(s) == 10 and s.sampling_rate == 0.1
    counts = np.zeros(n)
    sizes = []
    for _ in range(EPOCHS):
        for batch in s:
            assert batch.dtype == np.int64 and np.all(np.diff(batch) > 0)  # sorted, distinct
            counts[batch] += 1
            sizes.append(len(batch))
    steps = EPOCHS * 10
    assert s.steps_run == steps and s.epoch == EPOCHS
    _within(counts, np.full(n, 0.1), steps)  # every record in every step w.p. q
    # batch sizes: Binomial(40, 0.1), cell by cell (cells expected >= 20 times)
    hist = np.bincount(sizes, minlength=n + 1)
    pmf = np.array([math.comb(n, k) * 0.1**k * 0.9 ** (n - k) for k in range(n + 1)])
    cells = pmf * steps >= 20
    _within(hist[cells], pmf[cells], steps)
    assert hist[0] > 0  # empty batches are yielded (a step is a step)


def test_balls_in_bins_uses_every_record_once_per_epoch_in_a_uniform_step():
    n, b = 20, 4          # 5 steps per epoch
    s = S.BallsInBinsSampler(n, b, seed=7)
    assert len(s) == 5 and s.sampling_rate == 0.2
    where = np.zeros((n, 5))
    for _ in range(EPOCHS):
        batches = list(s)
        assert len(batches) == 5
        assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(n))  # exactly once (counting)
        for j, batch in enumerate(batches):
            where[batch, j] += 1
    _within(where.ravel(), np.full(n * 5, 0.2), EPOCHS)  # each record in each step w.p. 1/m


def test_balls_in_bins_places_records_independently():
    """Pairs of records share a step with probability 1/m (independent uniform steps), not 0
    or a fixed share as a partition into fixed-size batches would give."""
    n, m = 12, 4
    s = S.BallsInBinsSampler(n, steps_per_epoch=m, seed=99)
    same = np.zeros((n, n))
    for _ in range(EPOCHS):
        step_of = np.empty(n, int)
        for j, batch in enumerate(s):
            step_of[batch] = j
        same += step_of[:, None] == step_of[None, :]
    iu = np.triu_indices(n, 1)
    _within(same[iu], np.full(len(iu[0]), 1 / m), EPOCHS)


@pytest.mark.parametrize("drop_last", [False, True])
def test_shuffling_cuts_a_uniform_permutation(drop_last):
    n, b = 23, 5          # 5 batches (the last of 3), or 4 with drop_last
    s = S.ShuffleSampler(n, b, drop_last=drop_last, seed=2024)
    m = 4 if drop_last else 5
    sizes = [5, 5, 5, 5] + ([] if drop_last else [3])
    assert len(s) == m
    where = np.zeros((n, m))
    for _ in range(EPOCHS):
        batches = list(s)
        assert [len(x) for x in batches] == sizes
        used = np.concatenate(batches)
        assert len(np.unique(used)) == len(used) == sum(sizes)  # exactly once, at most
        for j, batch in enumerate(batches):
            where[batch, j] += 1
    if not drop_last:
        assert np.all(where.sum(axis=1) == EPOCHS)  # every record in every epoch
    law = np.tile(np.array(sizes) / n, (n, 1))    # record i in batch j w.p. |B_j| / N
    _within(where.ravel(), law.ravel(), EPOCHS)


def test_seeds_and_epochs_reproduce_the_batches():
    a = S.BallsInBinsSampler(100, 10, seed=5)
    first = [x.copy() for x in a]
    second = [x.copy() for x in a]
    b = S.BallsInBinsSampler(100, 10, seed=5)
    b.set_epoch(1)  # a run resumed at its second epoch draws what it would have
    assert all(np.array_equal(x, y) for x, y in zip(second, b))
    assert not all(np.array_equal(x, y) for x, y in zip(first, second))
    c = S.PoissonSampler(100, 10)  # a seed is drawn and kept
    assert isinstance(c.seed, int) and c.seed >= 0


def test_each_sampler_hands_over_what_it_ran():
    s = S.BallsInBinsSampler(50000, 512, seed=0)
    for _ in range(2):
        for _ in s:
            pass
    assert s.accounting() == {"sampling": "balls_in_bins", "steps_per_epoch": 98, "steps": 196}
    ref = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=2, sampling="balls_in_bins")
    assert s.pld(1.0).components == ref.components
    p = S.PoissonSampler(50000, 512, seed=0)
    assert p.accounting(epochs=100) == {"sampling": "poisson", "sampling_rate": 512 / 50000, "steps": 9800,
                                        "steps_per_epoch": 98}
    assert pld.dpsgd(1.0, **p.accounting(epochs=3)).components == pld.dpsgd(1.0, 512 / 50000, 294).components
    opacus_like = S.PoissonSampler(50000, sampling_rate=1 / 98)  # Opacus: q = 1 / len(loader)
    assert len(opacus_like) == 98 and opacus_like.accounting(epochs=100)["steps"] == 9800
    sh = S.ShuffleSampler(50000, 512, drop_last=True)
    assert len(sh) == 97 and sh.accounting(epochs=1)["steps"] == 97
    with pytest.raises(ValueError, match="no step has run yet"):
        S.PoissonSampler(10, 2).accounting()
    with pytest.raises(ValueError, match="no tight analysis of shuffling"):
        sh.accountant()


def test_the_accountant_of_a_sampler_records_its_epochs():
    s = S.BallsInBinsSampler(1000, 100, seed=1)
    acc = s.accountant()
    for _ in range(2):
        for _ in s:
            acc.step(noise_multiplier=2.0)
    assert acc.steps == 20
    assert acc.history == list(pld.dpsgd(2.0, steps=20, steps_per_epoch=10, sampling="balls_in_bins").components)
    q = S.PoissonSampler(1000, 100, seed=1).accountant()
    q.step(noise_multiplier=2.0, count=5)
    assert q.history == [(pld.PoissonSampled(pld.Gaussian(2.0), 0.1), 5)]
    back = pld.Accountant.from_state_dict(acc.state_dict())
    assert back.state_dict() == acc.state_dict()


def test_micro_batches_split_a_logical_batch():
    parts = S.micro_batches(np.arange(10), 4)
    assert [len(x) for x in parts] == [4, 4, 2] and np.array_equal(np.concatenate(parts), np.arange(10))


def test_pld_exposes_the_module_lazily():
    assert pld.samplers is S
    assert "samplers" in dir(pld)


@pytest.mark.parametrize("make, fragment", [
    (lambda: S.PoissonSampler(10), "exactly one of batch_size and sampling_rate"),
    (lambda: S.PoissonSampler(10, 20), "batch_size"),
    (lambda: S.PoissonSampler(0, 1), "dataset_size"),
    (lambda: S.BallsInBinsSampler(10, 2, steps_per_epoch=3), "exactly one of"),
    (lambda: S.ShuffleSampler(10, 20, drop_last=True), "batch_size"),
    (lambda: S.PoissonSampler(10, 2, seed=-1), "seed"),
])
def test_bad_arguments_name_the_parameter(make, fragment):
    with pytest.raises((TypeError, ValueError), match=fragment):
        make()


@pytest.mark.torch
def test_a_torch_data_loader_takes_them_as_its_batch_sampler():
    torch = pytest.importorskip("torch", reason="needs torch and opacus (pip install '.[opacus]')")
    data = torch.utils.data.TensorDataset(torch.arange(30.0))
    loader = torch.utils.data.DataLoader(data, batch_sampler=S.ShuffleSampler(30, 7, seed=3))
    seen = torch.cat([x for (x,) in loader])
    assert len(loader) == 5 and sorted(seen.tolist()) == list(range(30))
