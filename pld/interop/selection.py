"""Selection mechanisms of dp_accounting's newer events, bounded both ways.

dp_accounting (repository head) accounts ``ExponentialMechanismDpEvent(epsilon)``
as a black-box epsilon-DP mechanism and ``PermuteAndFlipDpEvent(epsilon)`` as
the Laplace mechanism with scale ``1/epsilon``.  pld certifies what is proven:

* **upper end**: both mechanisms are epsilon-DP (McSherry & Talwar 2007 for the
  exponential mechanism ``P(r) ∝ exp(epsilon u(D, r) / (2 Delta))``; McKenna &
  Sheldon, NeurIPS 2020, Thm. 1, for permute-and-flip), and the binary
  randomized-response pair with ``epsilon`` dominates every epsilon-DP
  mechanism (Kairouz, Oh & Viswanath 2015): :class:`pld.PureDP`.
* **lower end**: a pair of neighbouring datasets on two candidates that the
  mechanism realises (its outputs are a post-processing-free view of the
  mechanism itself), composed: a dominated construction in the sense of
  :attr:`pld.Mechanism.tight`.

  - Exponential mechanism: utilities ``u(D) = (0, 0)``, ``u(D') = (Delta, -Delta)``
    (or the monotone ``(Delta, 0)`` with ``exp(epsilon u / Delta)``: the same
    pair) give ``P = (1/2, 1/2)``, ``Q = (e^eps, 1) / (1 + e^eps)``; its losses
    lie in an interval of length epsilon, as for every epsilon-bounded-range
    mechanism (Durfee & Rogers 2019), so the randomized-response pair (losses
    ``±epsilon``) is not attained and the bracket is not tight.
  - Permute-and-flip: the same utilities; on ``D`` both candidates are best
    (each returned w.p. 1/2), on ``D'`` the worse one is returned only when it
    is examined first and its coin ``exp(epsilon (u - u*) / (2 Delta)) =
    e^-eps`` comes up: ``P = (1/2, 1/2)``, ``Q = (1 - e^-eps/2, e^-eps/2)``,
    which reaches loss ``epsilon``.

The gap between the two ends is the price of using the epsilon-DP bound, not a
numerical error (:class:`pld.NotTightWarning`); dp_accounting's Laplace pair for
permute-and-flip is not used: pld found no proof that it dominates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pld import _validate as v
from pld.mechanisms import FromPMFs, Mechanism, PureDP
from pld.mechanisms import adjacency as adj

__all__ = ["ExponentialMechanism", "PermuteAndFlip"]


def _check(mech) -> None:
    object.__setattr__(mech, "epsilon", v.loss_scale(
        "epsilon", v.real("epsilon", mech.epsilon, low=0.0, low_open=True)))


@dataclass(frozen=True)
class ExponentialMechanism(Mechanism):
    """The epsilon-DP exponential mechanism, bounded by :class:`pld.PureDP` above and a
    two-candidate instance below (see the module docstring)."""

    adjacency = adj.ANY
    symmetric = True

    epsilon: float
    tight: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        _check(self)

    def lower_pair(self) -> FromPMFs:
        e = self.epsilon
        return FromPMFs(p=(0.5, 0.5), q=(1.0 / (1.0 + math.exp(-e)), 1.0 / (1.0 + math.exp(e))))

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        return ((PureDP(self.epsilon), 1),), ((self.lower_pair(), 1),)

    def bound_notes(self) -> dict[str, str]:
        return {"upper": "epsilon-DP (McSherry & Talwar 2007): the randomized-response pair (Kairouz et al. 2015)",
                "lower": "two candidates, utilities (0, 0) vs (Delta, -Delta): P = (1/2, 1/2), "
                         "Q = (e^eps, 1) / (1 + e^eps)"}

    def loss_model(self, direction: str = "remove"):
        raise ValueError("ExponentialMechanism is bounded by two pairs: use its .pld()")


@dataclass(frozen=True)
class PermuteAndFlip(Mechanism):
    """Permute-and-flip (McKenna & Sheldon 2020), bounded by :class:`pld.PureDP` above and a
    two-candidate instance below (see the module docstring)."""

    adjacency = adj.ANY
    symmetric = True

    epsilon: float
    tight: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        _check(self)

    def lower_pair(self) -> FromPMFs:
        h = 0.5 * math.exp(-self.epsilon)
        return FromPMFs(p=(0.5, 0.5), q=(1.0 - h, h))

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        return ((PureDP(self.epsilon), 1),), ((self.lower_pair(), 1),)

    def bound_notes(self) -> dict[str, str]:
        return {"upper": "epsilon-DP (McKenna & Sheldon 2020, Thm. 1): the randomized-response pair",
                "lower": "two candidates, utilities (0, 0) vs (Delta, -Delta): P = (1/2, 1/2), "
                         "Q = (1 - e^-eps/2, e^-eps/2)"}

    def loss_model(self, direction: str = "remove"):
        raise ValueError("PermuteAndFlip is bounded by two pairs: use its .pld()")
