"""A round of 1-of-t random allocation that holds the record only with some probability.

A balls-in-bins epoch cut short after ``m`` of its ``t`` steps holds the record in one of
the ``m`` steps run with probability ``r = m / t``, uniformly among them, and not at all
otherwise: its remove pair is ``((1 - r) Q + r P, Q)`` and its add pair ``(Q, (1 - r) Q + r P)``,
with ``(P, Q)`` the remove pair of the 1-of-``m`` round.  A shuffled epoch whose loader drops
its last ``N mod b`` records holds, on a dataset whose other records contribute zero, the same
with ``r`` the probability that the record is kept.

The pairs follow atom by atom from the round's own (:class:`SubsampledRound`).  For an atom
``(p, q)`` of the round's remove pair, ``p' = (1 - r) q + r p`` and ``q' = q``, and

    ``p' - e^eps q' = r (p - e^eps' q)``,  ``e^eps' = (e^eps - 1 + r) / r``,

so the new remove delta at every ``eps > log(1 - r)`` is ``r`` times the round's at
``eps'``; below, every atom counts whole and delta is ``1 - e^eps`` given all of ``Q``'s
mass (the dominating side puts what its atoms leave of ``Q`` at the least loss,
``log(1 - r)``).  For an atom ``(p, q)`` of the round's add pair (``p`` the mass under the
dataset without the record), ``p'' = p``, ``q'' = (1 - r) p + r q``, and

    ``p'' - e^eps q'' = (1 - e^eps (1 - r)) (p - e^eps'' q)``,
    ``e^eps'' = e^eps r / (1 - e^eps (1 - r))``

(no atom counts where ``e^eps (1 - r) >= 1``).  Both are identities of the hockey-stick
curves, so a dominating (dominated) pair of the round gives one of the new pair, each
direction from its own (Balle, Barthe & Gaboardi 2018 for the amplification identity;
Zhu, Dong & Wang 2022 for the two directions of add-or-remove subsampling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld.mechanisms import Mechanism
from pld.mechanisms import adjacency as adj
from pld.mechanisms.allocation import RandomAllocation
from pld.mechanisms.allocation.pairs import _AtomsModel, _SidedModel

#: relative slack on the new atoms' masses and losses (a few roundings each), up on the
#: dominating side and down on the dominated one
_SLACK = 16.0 * 2.0 ** -53


def subsampled_atoms(atoms: tuple[np.ndarray, np.ndarray, np.ndarray], rate: float, direction: str,
                     dominating: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loss, log P, log Q)`` of the pair that holds ``atoms``' pair with probability ``rate``
    (see the module: ``atoms`` are the round's own pair in ``direction``)."""
    loss, lp, lq = (np.asarray(x, dtype=float) for x in atoms)
    log_r, log_1r = math.log(rate), (math.log1p(-rate) if rate < 1.0 else -math.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        if direction == "remove":
            new_p, new_q = np.logaddexp(log_1r + lq, log_r + lp), lq
            if dominating and rate < 1.0:
                # (what the atoms leave of Q's mass, at the least loss the pair can have; their
                # sum taken low by its rounding bound, so that the rest is not)
                q = np.exp(lq[lq > -np.inf])
                rest = 1.0 - float(np.sum(q)) * (1.0 - (q.size + 2) * 2.0 ** -53)
                if rest > 0.0:
                    new_p = np.append(new_p, log_1r + math.log(rest))
                    new_q = np.append(new_q, math.log(rest))
        else:
            new_p, new_q = lp, np.logaddexp(log_1r + lp, log_r + lq)
        keep = new_p > -np.inf
        new_p, new_q = new_p[keep], new_q[keep]
        new_loss = new_p - new_q
    sign = 1.0 if dominating else -1.0
    fin = np.isfinite(new_loss)
    new_loss[fin] += sign * _SLACK * (1.0 + np.abs(new_loss[fin]))
    return new_loss, new_p + sign * _SLACK, new_q


@dataclass(frozen=True, eq=False)
class _CappedModel(_SidedModel):
    """A held round's add pair: every loss at most ``top`` (the record's absence caps the
    likelihood ratio at ``1 / (1 - r)``), which the engine reads as the largest loss, where
    delta is exactly 0 (the round's own add pair reaches ``+inf``)."""

    top: float = math.inf

    def sup_loss(self) -> float:
        return self.top

    def sup_loss_bounds(self) -> tuple[float, float]:
        return self.top, self.top


@dataclass(frozen=True)
class SubsampledRound(Mechanism):
    """``round`` (1-of-``t`` random allocation) holding the record with probability ``rate``.

    The pair of a balls-in-bins epoch cut short after ``m`` of ``t`` steps is the round of
    ``m`` steps at ``rate = m / t``; see the module for the identities the two directions
    are built on.  Tight when the round is: each direction's dominating and dominated pairs
    are the round's own, transformed.

    Parameters
    ----------
    round : RandomAllocation
        One participation per round.
    rate : float
        In ``(0, 1]``.
    """

    adjacency = adj.ADD_OR_REMOVE

    round: RandomAllocation
    rate: float
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.round, RandomAllocation) or self.round.participations != 1:
            raise TypeError(f"round must be a RandomAllocation with one participation, got {self.round!r}")
        object.__setattr__(self, "rate", v.real("rate", self.rate, low=0.0, high=1.0, low_open=True))

    def loss_model(self, direction: str = "remove") -> _SidedModel:
        self._check_direction(direction)
        # (built once per direction: the engine asks for it many times, and the round's atoms
        # are hundreds of thousands; a cache beside the frozen fields, not one of them)
        models = self.__dict__.setdefault("_models", {})
        if direction not in models:
            models[direction] = self._model(direction)
        return models[direction]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_models"}  # (fields only: no atoms)

    def _model(self, direction: str) -> _SidedModel:
        own = self.round.loss_model(direction)
        upper = subsampled_atoms(own.atoms(), self.rate, direction, True)
        lower = None if own.lower is None else _AtomsModel(
            *subsampled_atoms(own.lower.atoms(), self.rate, direction, False), direction=direction)
        if direction == "add" and self.rate < 1.0 and upper[0].size:
            # (the dominating atoms' own largest loss: at least the pair's, -log(1 - r))
            top = max(float(np.max(upper[0])), -math.log1p(-self.rate))
            return _CappedModel(*upper, direction=direction, lower=lower, top=top)
        return _SidedModel(*upper, direction=direction, lower=lower)

    # (the round's accuracy settings, as pld.PLD's refinement chain asks for them)
    def refined(self) -> SubsampledRound | None:
        finer = self.round.refined()
        return None if finer is None else SubsampledRound(finer, self.rate)

    def deeper(self) -> SubsampledRound | None:
        deep = self.round.deeper()
        return None if deep is None else SubsampledRound(deep, self.rate)

    def tail_mass(self) -> float:
        return self.round.tail_mass()

    @property
    def refinement_family(self) -> str:
        return self.round.refinement_family

    @property
    def refinement_label(self) -> str:
        return f"{self.round.refinement_label}, held with probability {self.rate:g}"
