"""One-sided components: a composition whose upper and lower ends come from different pairs.

Where no single discrete pair is both close above and close below the true
one (k-of-t allocation, shuffling), the engine composes

* an *upper-only* component: its dominating side is a pair that dominates
  the true mechanism, its dominated side the identity pair (``P = Q``, loss 0),
* a *lower-only* component: its dominated side is a pair dominated by the
  true mechanism, its dominating side the identity.

The composition of the dominating sides is then (upper pair) x (identity) =
the upper pair, which dominates the truth, and the composition of the
dominated sides is (identity) x (lower pair) = the lower pair, which the
truth dominates: both ends stay certified.  Windows are sized from the
side that carries the law (sizing only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import adjacency as adj
from pld.mechanisms import Mechanism


@dataclass(frozen=True, eq=False)
class _Identity:
    """The pair ``P = Q``: all mass at loss 0."""

    base: None = None
    sampling_rate: float = 1.0
    direction: str = "identity"

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.zeros(1), np.zeros(1), np.zeros(1)

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        empty = np.full(len(grid) + 1, -np.inf)
        return empty, empty.copy()

    def loss_range(self) -> tuple[float, float]:
        return 0.0, 0.0

    def inf_log_mass(self) -> float:
        return -math.inf

    def sup_loss(self) -> float:
        return 0.0


IDENTITY = _Identity()


class _OneSidedModel:
    """A loss model whose two sides differ; everything else (sizing) is ``sizing``'s."""

    def __init__(self, upper, lower, sizing) -> None:
        self._upper, self._lower, self._sizing = upper, lower, sizing

    def side_model(self, pessimistic: bool):
        return self._upper if pessimistic else self._lower

    def sup_loss(self) -> float:
        # a bound on the dominating side's largest loss (a larger one is safe)
        return max(self._upper.sup_loss(), self._sizing.sup_loss())

    def __getattr__(self, name):
        return getattr(self._sizing, name)


def _sides(model):
    hook = getattr(model, "side_model", None)
    if hook is None:  # an exact model: the engine derives both sides from it
        return model, model
    return hook(True), hook(False)


@dataclass(frozen=True)
class OneSided(Mechanism):
    """``mechanism`` counted on one side only (``side = "upper"`` or ``"lower"``).

    Internal: see the module docstring for why a composition of one upper-only
    and one lower-only part keeps both ends of every bracket certified.
    """

    mechanism: Mechanism
    side: str
    #: the neighbouring relation the part is accounted under (None: the mechanism's own)
    relation: str | None = None
    #: whether a missed target may refine the mechanism (not where the gap between
    #: the two ends is structural: refining would cost time and not close it)
    refine: bool = True
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.side not in ("upper", "lower"):
            raise ValueError(f"side must be 'upper' or 'lower', got {self.side!r}")
        if self.relation is not None and self.relation not in adj.RELATIONS:
            raise ValueError(f"relation must be one of {adj.RELATIONS} or None, got {self.relation!r}")

    def refined(self) -> OneSided | None:
        """The same part with its mechanism refined (see :meth:`pld.PLD`), or None."""
        finer = getattr(self.mechanism, "refined", lambda: None)() if self.refine else None
        return None if finer is None else OneSided(finer, self.side, self.relation, self.refine)

    @property
    def adjacency(self) -> str:  # type: ignore[override]
        return self.relation if self.relation is not None else self.mechanism.adjacency

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        model = self.mechanism.loss_model(direction)
        up, lo = _sides(model)
        if self.side == "upper":
            return _OneSidedModel(up, IDENTITY, model)
        return _OneSidedModel(IDENTITY, lo, model)
