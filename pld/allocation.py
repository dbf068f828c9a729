"""Random allocation: each record takes part in exactly ``k`` of ``t`` steps.

:class:`RandomAllocation` describes one round (an epoch) of ``t`` steps of a
base mechanism in which every record is used in ``participations`` steps
chosen uniformly at random.  Rounds compose like any other mechanism
(``RandomAllocation(...).pld().self_compose(epochs)``), and every answer is a
certified bracket.

Gaussian base, one participation (the exact pair, add-or-remove adjacency):

* remove: ``P = (1/t) sum_i N(e_i, s^2 I_t)`` against ``Q = N(0, s^2 I_t)``;
* add: the pair swapped.

Its likelihood ratio is ``S/t`` with ``S`` a sum of ``t`` iid log-normals; the
dominating and dominated discrete pairs come from a mean-preserving spread and
a conditional-mean merge of each log-normal onto a linear grid, summed by FFT
(:mod:`pld._allocation_sum`, which holds the proof sketch).  The bias is second
order in the grid spacing and divided by ``t``, which is why a linear grid
works where the peers convolve on geometric grids in O(n^2).

``k > 1`` participations: the upper end uses the block argument (the ``t``
steps cut into ``k`` blocks of ``floor(t/k)`` or ``ceil(t/k)`` steps, one
participation in each; see :class:`RandomAllocation`), the lower end a
post-processing of the true pair; ``explain()`` says which bounds are used.

References: Feldman & Shenfeld, "Privacy amplification by random allocation"
(2025); Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld._allocation_sum import atoms as _atoms
from pld._allocation_sum import sum_laws
from pld.mechanisms import Gaussian, Mechanism

__all__ = ["RandomAllocation", "AllocationAccuracyWarning"]

#: default first-grid spacing, in standard deviations of one log-normal
#: coordinate: the spread adds ``d^2/4`` to its variance and the merge takes
#: about ``d^2/12`` off, a relative error of ``~2e-4`` in the variance of the
#: likelihood ratio per round
SPACING_PER_SD = 0.03
#: largest steps per round
MAX_STEPS = 10**7


class AllocationAccuracyWarning(RuntimeWarning):
    """The certified construction is valid but its grid is coarse: the bracket will be wide."""


@dataclass(frozen=True, eq=False)
class _AtomsModel:
    """One direction of a discrete pair, in the engine's loss-model interface."""

    loss: np.ndarray
    log_p: np.ndarray
    log_q: np.ndarray
    base: None = None
    sampling_rate: float = 1.0
    direction: str = "remove"

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.loss, self.log_p, self.log_q

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


@dataclass(frozen=True, eq=False)
class _SidedModel(_AtomsModel):
    """The dominating pair, with the dominated pair the engine's lower side uses.

    :func:`pld.discretize.discretize` asks ``side_model(pessimistic)``: the
    dominating side discretises ``upper`` (this model's own atoms) and the
    dominated side ``lower``.
    """

    lower: _AtomsModel | None = None

    def side_model(self, pessimistic: bool) -> _AtomsModel:
        return self if pessimistic or self.lower is None else self.lower


def _model(sigma: float, t: int, spacing: float, direction: str) -> _SidedModel:
    upper, lower, _ = sum_laws(sigma, t, spacing)
    lo = _AtomsModel(*_atoms(lower, direction), direction=direction)
    return _SidedModel(*_atoms(upper, direction), direction=direction, lower=lo)


@dataclass(frozen=True)
class RandomAllocation(Mechanism):
    """One round of ``steps`` runs of ``mechanism``; each record in ``participations`` of them.

    The steps a record takes part in are chosen uniformly at random among the
    ``C(steps, participations)`` subsets, independently of the other records
    (balls-in-bins batching: shuffle-free, every example in exactly one batch
    per epoch when ``participations = 1``).  Add-or-remove adjacency; both
    directions are accounted.

    Parameters
    ----------
    mechanism : Gaussian
        The base mechanism of one step (a Gaussian of noise ``sigma`` and
        sensitivity ``sensitivity``; the pair depends on ``sigma/sensitivity``).
    steps : int
        ``t``, the steps per round (1 .. 1e7).
    participations : int
        ``k``, the steps each record takes part in (1 .. steps).
    spacing : float, optional
        Spacing of the first grid in standard deviations of one log-normal
        coordinate (accuracy against time; default 0.03).  It is raised, with
        an :class:`AllocationAccuracyWarning`, where the heavy tail of a small
        ``sigma`` would need more than ``2^22`` cells.

    Notes
    -----
    ``k = 1``: the exact pair (see :mod:`pld._allocation_sum`).  ``k > 1``:
    no tight construction is used.  The upper end is the composition of
    ``k`` rounds of 1-of-``t_j`` allocation (``t_j`` = ``floor(t/k)`` or
    ``ceil(t/k)``, summing to ``t``): the true k-of-t scheme is a mixture, over
    the uniformly random assignment of steps to ``k`` blocks of those sizes,
    of block schemes... (conditioning on the k chosen steps being in
    different blocks is not exact), see :meth:`bounds_used`.
    """

    mechanism: Gaussian
    steps: int
    participations: int = 1
    spacing: float = SPACING_PER_SD
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Gaussian):
            raise TypeError("mechanism must be a pld.Gaussian (random allocation is implemented for the "
                            f"Gaussian base only), got {type(self.mechanism).__name__}")
        object.__setattr__(self, "steps", v.integer("steps", self.steps, low=1, high=MAX_STEPS))
        object.__setattr__(self, "participations",
                           v.integer("participations", self.participations, low=1, high=self.steps))
        object.__setattr__(self, "spacing", v.real("spacing", self.spacing, low=1e-4, high=1.0))
        if self.participations > 1:
            raise ValueError("participations > 1 is not supported yet (k must be 1), "
                             f"got {self.participations}")

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.sigma / self.mechanism.sensitivity

    def grid_info(self) -> dict:
        """The grid behind the discrete pairs: window ``W`` and spacing ``d`` of
        ``S``, the merge's residual ``rho``, round-off bounds and the upper
        pair's mass at ``+inf`` in each direction."""
        return dict(sum_laws(self.noise_multiplier, self.steps, self.spacing)[2])

    def _coarse(self, info: dict) -> str | None:
        if info["spacing_sd"] > 0.3 or info["lower_mass"] < 0.999:
            return (f"the heavy log-normal tail at sigma = {self.noise_multiplier:g} needs a window reaching "
                    f"{info['first_window']:.3g}, so the grid spacing is {info['spacing_sd']:.2g} standard "
                    f"deviations of one coordinate ({info['first_cells']} cells; the dominated pair keeps "
                    f"{info['lower_mass']:.3g} of the mass); the bracket stays certified but will be wide")
        return None

    def loss_model(self, direction: str = "remove") -> _SidedModel:
        self._check_direction(direction)
        info = self.grid_info()
        why = self._coarse(info)
        if why is not None:
            warnings.warn(f"RandomAllocation(steps={self.steps}): {why}", AllocationAccuracyWarning, stacklevel=3)
        return _model(self.noise_multiplier, self.steps, self.spacing, direction)
