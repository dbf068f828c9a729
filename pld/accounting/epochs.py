"""Epsilon after each of many step counts: a training run's privacy, epoch by epoch.

:func:`epsilon_over_steps` answers "what is epsilon after ``T_1``, ``T_2``, ...
steps of this mechanism?" in one call (prv_accountant's
``num_self_compositions=[...]``); :func:`epsilon_per_epoch` asks it for a DP-SGD
run at the end of every epoch (what Opacus users print during training).

Every row is its own certified query (``PLD.epsilon_bounds`` of the ``T``-fold
composition): nothing is interpolated between step counts, so each upper end
is a proof on its own.  The cost is one accounting per row (tens of
milliseconds each); ``rtol`` loosens the brackets for speed, both ends stay
certified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from pld import _validate as v
from pld.accounting.dpsgd import MAX_STEPS
from pld.accounting.loaders import resolve_run, run_pld, steps_of_rate
from pld.distribution import PLD
from pld.mechanisms import Mechanism
from pld.report.rounding import bracket, round_up

__all__ = ["EpsilonTable", "epsilon_over_steps", "epsilon_per_epoch", "epoch_steps"]

#: most rows one call accounts (each is a full certified query)
MAX_ROWS = 10_000


@dataclass(frozen=True)
class EpsilonTable:
    """Certified epsilon brackets after each of several step counts.

    Attributes
    ----------
    steps : tuple of int
        Step counts, increasing.
    epsilon_lower, epsilon_upper : numpy.ndarray
        Certified bracket of epsilon at ``delta`` after each count;
        ``epsilon_upper[i]`` is the epsilon to report after ``steps[i]`` steps.
    delta : float
        The target delta.
    epochs : tuple of float, optional
        The epoch each row ends (:func:`epsilon_per_epoch`), else ``None``.
    """

    steps: tuple
    epsilon_lower: np.ndarray
    epsilon_upper: np.ndarray
    delta: float
    epochs: tuple | None = None

    def rows(self) -> list[dict]:
        """One JSON-ready dict per row: ``steps``, ``epsilon_lower``,
        ``epsilon_upper`` (and ``epoch``)."""
        out = []
        for i, t in enumerate(self.steps):
            row = {"steps": int(t), "epsilon_lower": float(self.epsilon_lower[i]),
                   "epsilon_upper": float(self.epsilon_upper[i])}
            if self.epochs is not None:
                row = {"epoch": self.epochs[i], **row}
            out.append(row)
        return out

    def __len__(self) -> int:
        return len(self.steps)

    def __str__(self) -> str:
        head = (f"{'epoch':>8}  " if self.epochs is not None else "") + f"{'steps':>12}  {'epsilon':>10}  bracket"
        lines = [head]
        for r in self.rows():
            e = f"{r['epoch']:>8g}  " if self.epochs is not None else ""
            # epsilon rounded up, the bracket outward: nothing printed is below the certificate
            lines.append(f"{e}{r['steps']:>12d}  {round_up(r['epsilon_upper'], 4):>10}  "
                         f"{bracket(r['epsilon_lower'], r['epsilon_upper'])}")
        return "\n".join(lines)


def _unit(mechanism) -> PLD:
    if isinstance(mechanism, PLD):
        return mechanism
    if isinstance(mechanism, Mechanism):
        return mechanism.pld()
    raise TypeError(f"mechanism must be a pld mechanism or a PLD (one step), got {type(mechanism).__name__}")


def _counts(steps) -> tuple:
    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
        raise TypeError(f"steps must be a sequence of step counts, got {type(steps).__name__}")
    counts = [v.integer(f"steps[{i}]", t, low=1, high=MAX_STEPS) for i, t in enumerate(steps)]
    if not counts:
        raise ValueError("steps must contain at least one step count")
    if len(counts) > MAX_ROWS:
        raise ValueError(f"steps must hold at most {MAX_ROWS} counts (each is a full certified query), "
                         f"got {len(counts)}")
    return tuple(counts)


def epsilon_over_steps(mechanism, steps, delta: float, *, rtol: float | None = None) -> EpsilonTable:
    """Certified epsilon after each of several step counts of one mechanism.

    Parameters
    ----------
    mechanism : pld.Mechanism or pld.PLD
        One step (a PLD is one step of a repeated block, e.g. an epoch's schedule).
    steps : sequence of int
        Step counts in ``[1, 1e12]``, at most 10000 of them; they are sorted
        and duplicates merged.
    delta : float
        Target delta in ``(0, 1)``.
    rtol : float, optional
        Bracket target of every row, ``upper - lower <= rtol * epsilon + 1e-6``
        (default: the engine's 1e-4).  Looser is faster; both ends stay certified.

    Returns
    -------
    EpsilonTable
        ``steps`` (sorted), ``epsilon_lower``, ``epsilon_upper``, ``delta``.

    Raises
    ------
    TypeError
        If ``mechanism`` is neither a mechanism nor a PLD, or ``steps`` is not a sequence.
    ValueError
        If a count or ``delta`` is out of range (the message names it).

    Examples
    --------
    >>> import pld
    >>> step = pld.PoissonSampled(pld.Gaussian(1.0), 0.01)
    >>> t = pld.epsilon_over_steps(step, [1000, 10_000], 1e-5)
    >>> t.epsilon_upper.round(2).tolist()
    [1.83, 6.19]
    """
    unit = _unit(mechanism)
    counts = tuple(sorted(set(_counts(steps))))
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if rtol is not None:
        rtol = v.real("rtol", rtol, low=1e-7, high=1.0)
    lo = np.empty(len(counts))
    hi = np.empty(len(counts))
    for i, t in enumerate(counts):
        # each count is its own query: every row is certified by itself
        lo[i], hi[i] = unit.self_compose(t).epsilon_bounds(delta, rtol=rtol)
    return EpsilonTable(counts, lo, hi, delta)


def epoch_steps(epochs, sampling_rate: float, steps_per_epoch: int | None = None) -> list[int]:
    """Steps at the end of epochs ``1, 2, ...`` (and a final partial epoch).

    ``epochs`` may be fractional: the last row is then the partial epoch.
    With ``steps_per_epoch`` (e.g. Opacus' ``len(data_loader)``) epoch ``e``
    ends after ``ceil(e * steps_per_epoch)`` steps; so it does without when
    ``sampling_rate`` is within a few ulps of ``1 / steps_per_epoch`` (a rate
    ``1/m`` read back from a float counts ``m`` steps, not ``m + 1``: see
    :func:`pld.accounting.loaders.steps_of_rate`); any other rate counts
    ``ceil(e / q)`` steps, ``q`` read exactly from its decimal form (``e *
    dataset size / batch size`` rounded up).

    Examples
    --------
    >>> epoch_steps(3, 1 / 3), epoch_steps(2, 256 / 60000)
    ([3, 6, 9], [235, 469])
    """
    epochs = v.real("epochs", epochs, low=0.0, low_open=True)
    marks = _marks(epochs)
    if steps_per_epoch is None:
        steps_per_epoch = steps_of_rate(sampling_rate)
    if steps_per_epoch is not None:
        spe = v.integer("steps_per_epoch", steps_per_epoch, low=1, high=MAX_STEPS)
        out = [math.ceil(Fraction(repr(e)) * spe) for e in marks]
    else:
        q = Fraction(repr(float(sampling_rate)))
        out = [math.ceil(Fraction(repr(e)) / q) for e in marks]
    if out[-1] > MAX_STEPS:
        raise ValueError(f"epochs={epochs:g} needs more than {MAX_STEPS:.0e} steps")
    return out


def _marks(epochs: float) -> list[float]:
    """``1, 2, ..., floor(epochs)`` and ``epochs`` itself when fractional."""
    marks = [float(e) for e in range(1, int(math.floor(epochs)) + 1)]
    if not marks or marks[-1] < epochs:
        marks.append(epochs)
    if len(marks) > MAX_ROWS:
        raise ValueError(f"epochs must be at most {MAX_ROWS} (one certified query per epoch), got {epochs:g}")
    return marks


def epsilon_per_epoch(noise_multiplier: float, sampling_rate: float | None = None, epochs: float | None = None,
                      delta: float | None = None, *, steps_per_epoch: int | None = None, sampling: str = "poisson",
                      rtol: float | None = None, dataset_size: int | None = None, batch_size: int | None = None,
                      drop_last: bool = False, physical_batch_size: int | None = None,
                      accumulation_steps: int | None = None, participations: int | None = None) -> EpsilonTable:
    """Certified epsilon of a DP-SGD run at the end of every epoch.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm, in ``(0, inf)``.
    sampling_rate : float, optional
        Poisson rate, or batch size over dataset size, in ``(0, 1]``; or give
        ``dataset_size`` and ``batch_size`` (the run's loader, as in :func:`pld.dpsgd`).
    epochs : float
        Length of the run in epochs, ``> 0`` (at most 10000 rows); a fractional
        last epoch gets its own row.
    delta : float
        Target delta in ``(0, 1)``.
    steps_per_epoch : int, optional
        Steps in one epoch.  Default: ``ceil(N / b)`` (``floor`` with
        ``drop_last``) from the loader, ``m`` for a rate within a few ulps of
        ``1/m``, else epoch ``e`` ends after ``ceil(e / sampling_rate)`` steps;
        pass ``len(data_loader)`` to follow a training loop's own count.
    sampling : str
        Any scheme :func:`pld.dpsgd` accepts.
    rtol : float, optional
        Bracket target of every row (default: the engine's, ``upper - lower <=
        1e-4 epsilon + 1e-6``; a row that misses it warns, as every query does).
    dataset_size, batch_size, drop_last, physical_batch_size, accumulation_steps, participations
        The loader and the scheme's options, as in :func:`pld.dpsgd`.

    Returns
    -------
    EpsilonTable
        One row per epoch: ``epochs``, ``steps``, ``epsilon_lower``,
        ``epsilon_upper`` (print it for a table).

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message).

    Examples
    --------
    >>> import pld
    >>> pld.epsilon_per_epoch(1.1, 256 / 60000, 3, 1e-5).steps
    (235, 469, 704)
    >>> pld.epsilon_per_epoch(1.0, 1 / 3, 3, 1e-5).steps      # three steps an epoch
    (3, 6, 9)
    >>> pld.epsilon_per_epoch(1.0, epochs=2, delta=1e-5, dataset_size=50000, batch_size=512).steps
    (98, 196)
    """
    if epochs is None or delta is None:
        raise TypeError("epsilon_per_epoch needs epochs and delta")
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if rtol is not None:
        rtol = v.real("rtol", rtol, low=1e-7, high=1.0)
    shape = resolve_run(sampling, sampling_rate, epochs=epochs, dataset_size=dataset_size, batch_size=batch_size,
                        drop_last=drop_last, steps_per_epoch=steps_per_epoch,
                        physical_batch_size=physical_batch_size, accumulation_steps=accumulation_steps,
                        participations=participations)
    marks = _marks(float(epochs))
    counts = epoch_steps(epochs, shape.sampling_rate, shape.steps_per_epoch)
    lo = np.empty(len(counts))
    hi = np.empty(len(counts))
    for i, t in enumerate(counts):
        # each epoch is its own query of the run cut after t steps: every row is certified by itself
        lo[i], hi[i] = run_pld(noise_multiplier, replace(shape, steps=t, epochs=None)).epsilon_bounds(delta, rtol=rtol)
    return EpsilonTable(tuple(counts), lo, hi, delta, tuple(marks))
