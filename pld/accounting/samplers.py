"""Batch samplers that run what pld accounts: Poisson, balls-in-bins and shuffling.

An accounting holds for the sampler that actually ran.  These samplers make
the batches of a DP-SGD run and hand the accountant exactly the scheme, rate
and step count they ran::

    sampler = pld.samplers.BallsInBinsSampler(dataset_size=50000, batch_size=512, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)   # or a plain loop
    for epoch in range(100):
        for batch in loader:
            ...                                  # one noisy step per batch (an empty one too)
    sampler.pld(noise_multiplier=1.0).epsilon(1e-5)      # what ran: 100 epochs of 98 steps

They are framework-agnostic: each step is a sorted ``numpy.ndarray`` of record
indices (``int64``); ``len(sampler)`` is the steps of an epoch; iterating the
sampler runs one epoch.  pld does not import torch: a PyTorch
``DataLoader(batch_sampler=...)`` only needs ``__iter__`` and ``__len__``.

Randomness is seeded per epoch (``numpy.random.SeedSequence(seed, spawn_key=(epoch,))``),
so a run resumed at epoch ``e`` (:meth:`set_epoch`) draws the batches it would
have drawn; ``seed=None`` draws a seed once, kept in ``.seed``.

* :class:`PoissonSampler`: every record joins every step independently with
  probability ``q`` (``batch_size / dataset_size``): batch sizes are
  ``Binomial(N, q)``, empty batches included (a step is still a noisy step).
  Accounted tightly (add-or-remove, Zhu, Dong & Wang 2022).
* :class:`BallsInBinsSampler`: every epoch each record goes to one of the
  ``m`` steps, uniformly and independently of the others (Chua et al.,
  "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025); ``m = ceil(N / b)``.
  Accounted tightly (random allocation, :class:`pld.RandomAllocation`).
  Nobody else ships it for PyTorch.
* :class:`ShuffleSampler`: a permutation cut into batches of ``b`` (a short
  last batch, or dropped).  For completeness: no tight analysis of shuffling
  is known (:func:`pld.shuffle_bounds`).

Gradient accumulation: a sampler's batch is the logical batch (noise is
added once per logical batch); :func:`micro_batches` cuts it into physical
ones.  Accounting the micro-batches as steps understates epsilon.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator
from fractions import Fraction

import numpy as np

from pld import _validate as v
from pld.accounting.loaders import MAX_STEPS, loader_steps_per_epoch, steps_of_rate

__all__ = ["PoissonSampler", "BallsInBinsSampler", "ShuffleSampler", "micro_batches"]


class _Sampler:
    """What every sampler shares: seeding, epochs, the steps run and the hand-over to the accountant."""

    #: the scheme of pld.accounting.sampling this sampler runs
    sampling = ""

    def __init__(self, dataset_size: int, seed: int | None):
        self.dataset_size = v.integer("dataset_size", dataset_size, low=1, high=10**10)
        self.seed = secrets.randbits(63) if seed is None else v.integer("seed", seed, low=0)
        self.epoch = 0
        self.steps_run = 0

    # -------------------------------------------------------------- epochs
    def __len__(self) -> int:
        """Steps (batches) of one epoch."""
        return self.steps_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """The next iteration draws epoch ``epoch``'s batches (a resumed run draws what it would have)."""
        self.epoch = v.integer("epoch", epoch, low=0)

    def rng(self, epoch: int | None = None) -> np.random.Generator:
        """The generator of epoch ``epoch`` (default: the next one)."""
        e = self.epoch if epoch is None else epoch
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(e,)))

    def __iter__(self) -> Iterator[np.ndarray]:
        """One epoch: ``len(self)`` arrays of record indices, one per step."""
        rng = self.rng()
        self.epoch += 1
        for batch in self._epoch(rng):
            self.steps_run += 1
            yield batch

    def _epoch(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        raise NotImplementedError

    # ----------------------------------------------------------- accounting
    def _steps(self, steps: int | None, epochs: float | None) -> int:
        if steps is not None and epochs is not None:
            raise ValueError("give steps or epochs, not both")
        if epochs is not None:
            e = v.real("epochs", epochs, low=0.0, low_open=True)
            return max(1, math.ceil(Fraction(repr(e)) * self.steps_per_epoch))
        if steps is not None:
            return v.integer("steps", steps, low=1, high=MAX_STEPS)
        if self.steps_run == 0:
            raise ValueError("no step has run yet: give steps or epochs to account a run not made")
        return self.steps_run

    def accounting(self, steps: int | None = None, *, epochs: float | None = None) -> dict:
        """Keyword arguments of :func:`pld.dpsgd` for what this sampler ran.

        Parameters
        ----------
        steps, epochs : optional
            The run to account (default: the steps run so far).

        Returns
        -------
        dict
            ``sampling`` and the rate and step counts, e.g. ``pld.dpsgd(1.0, **sampler.accounting())``.
        """
        raise NotImplementedError

    def pld(self, noise_multiplier: float, steps: int | None = None, *, epochs: float | None = None):
        """The :class:`pld.PLD` of the run (default: the steps run so far) at ``noise_multiplier``."""
        from pld.accounting.dpsgd import dpsgd

        return dpsgd(noise_multiplier, **self.accounting(steps, epochs=epochs))

    def accountant(self):
        """A :class:`pld.Accountant` for this sampler: record each noisy step with
        ``acc.step(noise_multiplier=sigma)`` (its rate and epoch length are the sampler's)."""
        from pld.accounting.accountant import Accountant

        return Accountant(sampling=self.sampling, sampling_rate=self.sampling_rate,
                          steps_per_epoch=self.steps_per_epoch)

    @property
    def sampling_rate(self) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(dataset_size={self.dataset_size}, steps_per_epoch={self.steps_per_epoch}, "
                f"sampling_rate={self.sampling_rate:.6g}, seed={self.seed}, epoch={self.epoch}, "
                f"steps_run={self.steps_run})")


class PoissonSampler(_Sampler):
    """Poisson sampling: every record in every step independently with probability ``q``.

    Parameters
    ----------
    dataset_size : int
        ``N``.
    batch_size : int, optional
        Expected batch ``b``: ``q = b / N``, ``ceil(N / b)`` steps per epoch
        (``floor`` with ``drop_last``), as a data loader of that batch size has.
    sampling_rate : float, optional
        ``q`` instead of ``batch_size``; an epoch is then ``m`` steps for ``q =
        1/m`` (Opacus: ``1/len(loader)``), else ``ceil(1/q)``.
    steps_per_epoch : int, optional
        The steps of an epoch, given.
    drop_last : bool
        ``floor(N / b)`` steps per epoch.
    seed : int, optional

    Notes
    -----
    A step's batch has ``Binomial(N, q)`` records, uniformly chosen given their
    number: the law of independent inclusions.  Empty batches are yielded: the
    step still adds noise (to a zero sum), and skipping it would change the
    accounting.  PyTorch's default ``collate_fn`` fails on an empty list: give
    a ``DataLoader`` one that returns an empty batch (Opacus' ``DPDataLoader``
    does the same).
    """

    sampling = "poisson"

    def __init__(self, dataset_size: int, batch_size: int | None = None, *, sampling_rate: float | None = None,
                 steps_per_epoch: int | None = None, drop_last: bool = False, seed: int | None = None):
        super().__init__(dataset_size, seed)
        n = self.dataset_size
        if (batch_size is None) == (sampling_rate is None):
            raise ValueError("give exactly one of batch_size and sampling_rate")
        if batch_size is not None:
            b = v.integer("batch_size", batch_size, low=1, high=n)
            self._q = b / n
            m = loader_steps_per_epoch(n, b, drop_last)
        else:
            self._q = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
            m = steps_of_rate(self._q) or math.ceil(1.0 / self._q)
        self._m = m if steps_per_epoch is None else v.integer("steps_per_epoch", steps_per_epoch, low=1,
                                                              high=MAX_STEPS)

    @property
    def sampling_rate(self) -> float:
        return self._q

    @property
    def steps_per_epoch(self) -> int:
        return self._m

    def _epoch(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        n = self.dataset_size
        for _ in range(self._m):
            k = int(rng.binomial(n, self._q))
            yield np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)

    def accounting(self, steps: int | None = None, *, epochs: float | None = None) -> dict:
        return {"sampling": self.sampling, "sampling_rate": self._q, "steps": self._steps(steps, epochs),
                "steps_per_epoch": self._m}


class BallsInBinsSampler(_Sampler):
    """Balls-in-bins: each epoch, every record in exactly one of ``m`` steps, chosen uniformly.

    Parameters
    ----------
    dataset_size : int
        ``N``.
    batch_size : int, optional
        Expected batch: ``m = ceil(N / b)`` steps per epoch (``floor`` with
        ``drop_last``; every record is still placed).
    steps_per_epoch : int, optional
        ``m`` given instead.
    drop_last : bool
    seed : int, optional

    Notes
    -----
    The steps of different records are independent, so a step's batch has
    ``Binomial(N, 1/m)`` records; the accounting needs only ``m``
    (:class:`pld.RandomAllocation` with ``steps=m``, one round per epoch).
    """

    sampling = "balls_in_bins"

    def __init__(self, dataset_size: int, batch_size: int | None = None, *, steps_per_epoch: int | None = None,
                 drop_last: bool = False, seed: int | None = None):
        super().__init__(dataset_size, seed)
        n = self.dataset_size
        if (batch_size is None) == (steps_per_epoch is None):
            raise ValueError("give exactly one of batch_size and steps_per_epoch")
        if batch_size is not None:
            self._m = loader_steps_per_epoch(n, v.integer("batch_size", batch_size, low=1, high=n), drop_last)
        else:
            self._m = v.integer("steps_per_epoch", steps_per_epoch, low=1, high=10**7)

    @property
    def sampling_rate(self) -> float:
        return 1.0 / self._m

    @property
    def steps_per_epoch(self) -> int:
        return self._m

    def _epoch(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        bins = rng.integers(self._m, size=self.dataset_size)
        order = np.argsort(bins, kind="stable").astype(np.int64)  # (stable: each bin's indices sorted)
        ends = np.cumsum(np.bincount(bins, minlength=self._m))
        start = 0
        for end in ends:
            yield order[start:end]
            start = int(end)

    def accounting(self, steps: int | None = None, *, epochs: float | None = None) -> dict:
        return {"sampling": self.sampling, "steps_per_epoch": self._m, "steps": self._steps(steps, epochs)}


class ShuffleSampler(_Sampler):
    """Shuffling: each epoch a permutation cut into batches of ``batch_size`` (``DataLoader(shuffle=True)``).

    Parameters
    ----------
    dataset_size : int
        ``N``.
    batch_size : int
        ``b``: ``ceil(N / b)`` batches per epoch, the last one short, or
        ``floor(N / b)`` with ``drop_last``.
    drop_last : bool
    seed : int, optional

    Notes
    -----
    For completeness: no tight analysis of shuffling is known;
    :meth:`bounds` gives what is certified (publish its upper end).
    """

    sampling = "shuffle"

    def __init__(self, dataset_size: int, batch_size: int, *, drop_last: bool = False, seed: int | None = None):
        super().__init__(dataset_size, seed)
        self.batch_size = v.integer("batch_size", batch_size, low=1, high=self.dataset_size)
        self.drop_last = bool(drop_last)
        self._m = loader_steps_per_epoch(self.dataset_size, self.batch_size, self.drop_last)

    @property
    def sampling_rate(self) -> float:
        return 1.0 / self._m

    @property
    def steps_per_epoch(self) -> int:
        return self._m

    def _epoch(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        perm = rng.permutation(self.dataset_size).astype(np.int64)
        b = self.batch_size
        for j in range(self._m):
            yield np.sort(perm[j * b:(j + 1) * b])

    def accounting(self, steps: int | None = None, *, epochs: float | None = None) -> dict:
        return {"sampling": self.sampling, "dataset_size": self.dataset_size, "batch_size": self.batch_size,
                "drop_last": self.drop_last, "steps": self._steps(steps, epochs)}

    def accountant(self):
        raise ValueError("no tight analysis of shuffling is known: account a shuffled run with "
                         "sampler.bounds(noise_multiplier, delta) (pld.shuffle_bounds), or run a PoissonSampler or "
                         "BallsInBinsSampler")

    def bounds(self, noise_multiplier: float, delta: float, steps: int | None = None, *,
               epochs: float | None = None, **options):
        """:func:`pld.shuffle_bounds` of the run: publish its ``epsilon_upper``."""
        from pld.accounting.shuffle import shuffle_bounds

        kw = self.accounting(steps, epochs=epochs)
        kw.pop("sampling")
        return shuffle_bounds(noise_multiplier, delta=delta, **kw, **options)


def micro_batches(batch: np.ndarray, physical_batch_size: int) -> list[np.ndarray]:
    """A logical batch cut into physical micro-batches of at most ``physical_batch_size``
    (gradient accumulation: sum their clipped gradients, add noise once).

    Examples
    --------
    >>> [m.tolist() for m in micro_batches(np.arange(5), 2)]
    [[0, 1], [2, 3], [4]]
    """
    p = v.integer("physical_batch_size", physical_batch_size, low=1)
    batch = np.asarray(batch)
    return [batch[i:i + p] for i in range(0, len(batch), p)]
