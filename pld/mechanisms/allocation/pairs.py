"""The discrete pairs of one round of random allocation, in the engine's loss-model interface.

:class:`_AtomsModel` (one direction's atoms), :class:`_SidedModel` (the dominating atoms with
the dominated ones the engine's lower side reads) and the lower pairs of ``k`` of ``t``
(:class:`_LabelSum`: the label sum, or at small noise the log labels); the constructions
behind them are in :mod:`pld.mechanisms.allocation.sums`, :mod:`pld.mechanisms.allocation.heavy`
and :mod:`pld.mechanisms.allocation.labels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld.mechanisms import Mechanism
from pld.mechanisms import adjacency as adj
from pld.mechanisms.allocation.coordinate import atoms as _atoms
from pld.mechanisms.allocation.labels import ORIGIN, log_label_pair
from pld.mechanisms.allocation.poisson_statistic import poisson_lr_pair
from pld.mechanisms.allocation.sums import sum_laws
from pld.mechanisms.models import _PairInBase

#: the label-sum statistic's cell width, in standard deviations of one coordinate
LABEL_SPACING = 0.05


@dataclass(frozen=True, eq=False)
class _AtomsModel(_PairInBase):
    """One direction of a discrete pair, in the engine's loss-model interface
    (:class:`pld.mechanisms.models.LossModelProtocol`; atoms only, no continuous part)."""

    loss: np.ndarray
    log_p: np.ndarray
    log_q: np.ndarray
    base: None = None
    sampling_rate: float = 1.0
    direction: str = "remove"

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.loss, self.log_p, self.log_q

    def loss_of_x(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, float).copy()  # (no continuous part: the identity, never asked for)

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        return np.asarray(loss, float).copy()

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        empty = np.full(len(grid) + 1, -np.inf)
        return empty, empty.copy()

    def loss_range(self) -> tuple[float, float]:
        fin = np.isfinite(self.loss) & (self.log_p > -np.inf)
        if not np.any(fin):
            return 0.0, 0.0
        return float(self.loss[fin].min()), float(self.loss[fin].max())

    def inf_log_mass(self) -> float:
        sel = self.loss == np.inf
        return float(np.logaddexp.reduce(self.log_p[sel])) if np.any(sel) else -np.inf

    def sup_loss(self) -> float:
        # the true pair's loss is unbounded in both directions (a Gaussian
        # coordinate can make S/t as large or as small as one likes)
        return math.inf

    def sup_loss_bounds(self) -> tuple[float, float]:
        return math.inf, math.inf


@dataclass(frozen=True, eq=False)
class _SidedModel(_AtomsModel):
    """The dominating pair, with the dominated pair the engine's lower side uses.

    :func:`pld.engine.discretize.discretize` asks ``side_model(pessimistic)``: the
    dominating side discretises ``upper`` (this model's own atoms) and the
    dominated side ``lower``.
    """

    lower: _AtomsModel | None = None

    def side_model(self, pessimistic: bool) -> _AtomsModel:
        return self if pessimistic or self.lower is None else self.lower


def _model(direction: str, *laws_args) -> _SidedModel:
    """One direction of the round :func:`pld.mechanisms.allocation.sums.sum_laws` builds from ``laws_args``."""
    upper, lower, _ = sum_laws(*laws_args)
    lo = _AtomsModel(*_atoms(lower, direction), direction=direction)
    return _SidedModel(*_atoms(upper, direction), direction=direction, lower=lo)


@dataclass(frozen=True)
class _LabelSum(Mechanism):
    """The lower pair of ``k``-of-``t`` allocation from the sum of the cell labels of
    the per-step likelihood ratios (:func:`pld.mechanisms.allocation.sums.label_sum_pair`),
    or with ``log_labels`` of their logarithms (:func:`pld.mechanisms.allocation.labels.log_label_pair`,
    ``spacing`` then the rounds' spacing); internal, used as a lower-only part."""

    adjacency = adj.ADD_OR_REMOVE

    sigma: float
    steps: int
    participations: int
    spacing: float
    log_labels: bool = False
    #: the log labels' origin (see :data:`pld.mechanisms.allocation.labels.ORIGIN`)
    origin: float = ORIGIN
    symmetric: bool = field(default=False, init=False)

    def loss_model(self, direction: str = "remove") -> _SidedModel:
        self._check_direction(direction)
        from pld.mechanisms.allocation.sums import label_sum_pair

        if self.log_labels:
            side, _ = log_label_pair(self.sigma, self.steps, self.participations, self.spacing, self.origin)
        else:
            side, _ = label_sum_pair(self.sigma, self.steps, self.participations, self.spacing)
        lo = _AtomsModel(*_atoms(side, direction), direction=direction)
        return _SidedModel(*_atoms(side, direction), direction=direction, lower=lo)


@dataclass(frozen=True)
class _PoissonStatistic(Mechanism):
    """The lower pair of ``k``-of-``t`` allocation from the Poisson likelihood-ratio statistic
    ``sum_i log(1 + z Y_i)``, ``z = k/(t - k)``
    (:func:`pld.mechanisms.allocation.poisson_statistic.poisson_lr_pair`); internal, used as a
    lower-only part."""

    adjacency = adj.ADD_OR_REMOVE

    sigma: float
    steps: int
    participations: int
    symmetric: bool = field(default=False, init=False)

    def loss_model(self, direction: str = "remove") -> _SidedModel:
        self._check_direction(direction)
        side, _ = poisson_lr_pair(self.sigma, self.steps, self.participations)
        lo = _AtomsModel(*_atoms(side, direction), direction=direction)
        return _SidedModel(*_atoms(side, direction), direction=direction, lower=lo)
