"""Shuffling: one epoch of runs over a shuffled dataset cut into fixed batches (not tight).

The upper end assumes no amplification, the lower end is 1-of-``t`` random
allocation on a dataset whose other records contribute nothing
(:class:`Shuffling`; the round is :class:`pld.mechanisms.allocation.RandomAllocation`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from pld.mechanisms import Gaussian, Mechanism
from pld.mechanisms import adjacency as adj
from pld.mechanisms.allocation import (
    SPACING_PER_SD,
    AllocationAccuracyWarning,
    RandomAllocation,
    _check_round,
)

__all__ = ["Shuffling"]


@dataclass(frozen=True)
class Shuffling(Mechanism):
    """One epoch of ``steps`` runs of ``mechanism`` over a shuffled dataset cut into ``steps`` batches.

    No tight analysis of shuffling is known; this gives what is certified and
    is not tight:

    * upper end: no amplification.  Each record is in exactly one batch per
      epoch, so one epoch is at most one run of ``mechanism`` on the record
      (the batch it lands in is then a free choice of the adversary).  This
      assumes removing the record changes only its own batch (batches as
      fixed slots, e.g. the record's slot left empty), not the batches after
      it.
    * lower end: 1-of-``steps`` random allocation.  On a dataset whose other
      records contribute nothing (zero clipped gradients), the outputs are
      ``N(e_J, s^2 I)`` against ``N(0, s^2 I)`` with ``J``, the record's batch,
      uniform: exactly the random-allocation pair, so its dominated side is a
      lower bound for shuffling (Chua et al., "How Private are DP-SGD
      Implementations?", ICML 2024, build lower bounds for shuffling in this
      spirit).

    The gap between the two ends is the price of not knowing how much
    shuffling amplifies; :meth:`explain` reports it.  Neighbouring relation:
    ``replace_special`` (the record replaced by a zero record in its slot),
    the one under which the upper end holds; both ends compose only with
    add-or-remove and replace-special parts (:mod:`pld.mechanisms.adjacency`).
    """

    adjacency = adj.REPLACE_SPECIAL

    mechanism: Gaussian
    steps: int
    spacing: float = SPACING_PER_SD
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        _check_round(self, "shuffling")

    tight = False

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        try:
            lower: tuple | None = ((RandomAllocation(self.mechanism, self.steps, 1, self.spacing), 1),)
        except ValueError as exc:
            warnings.warn(f"Shuffling: no lower end beyond 0 ({exc})", AllocationAccuracyWarning, stacklevel=2)
            lower = None
        return ((self.mechanism, 1),), lower

    def bound_notes(self) -> dict[str, str]:
        return {"upper": "no amplification: one run of the mechanism per epoch (a dominating pair that is not "
                         "tight; no tight analysis of shuffling is known)",
                "lower": f"1-of-{self.steps} random allocation (a dataset whose other records contribute 0: "
                         "a concrete pair of neighbouring datasets)"}

    def loss_model(self, direction: str = "remove"):
        raise ValueError("Shuffling is bounded by two pairs (it is not tight): use its .pld()")

    def explain(self, delta: float | None = None, epochs: int = 1) -> dict:
        """The constructions of both ends and (with ``delta``) the bracket and its gap."""
        out: dict = {"steps": self.steps, "noise_multiplier": self.mechanism.sigma / self.mechanism.sensitivity,
                     "upper": "no amplification: one run of the mechanism per epoch",
                     "lower": f"1-of-{self.steps} random allocation (a dataset whose other records contribute 0)",
                     "tight": False}
        if delta is not None:
            d = self.pld().self_compose(epochs) if epochs > 1 else self.pld()
            lo, hi = d.epsilon_bounds(delta)
            out.update({"delta": delta, "epochs": epochs, "epsilon_lower": lo, "epsilon_upper": hi,
                        "gap": hi - lo})
        return out


# ------------------------------------------------------- sampling schemes
