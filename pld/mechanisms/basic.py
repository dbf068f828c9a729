"""Mechanisms with a closed-form pair.

Gaussian, Laplace, randomized response, pure and approximate DP, discrete
Laplace, and a pair given by its masses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld.engine import total_variation as tv
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import _EMPTY, Mechanism
from pld.mechanisms.models import LaplaceBase, LossModel, NormalBase


def _atoms(x, lp, lq) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.asarray(x, float), np.asarray(lp, float), np.asarray(lq, float)


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: add ``N(0, sigma^2)`` noise to a query of L2 sensitivity ``sensitivity``.

    The privacy loss is ``L ~ N(mu^2/2, mu^2)`` with ``mu = sensitivity / sigma``
    (Balle & Wang, ICML 2018).
    """

    adjacency = adj.ANY
    symmetric = True

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.real("sigma", self.sigma, low=0.0, low_open=True))
        object.__setattr__(self, "sensitivity", v.real("sensitivity", self.sensitivity, low=0.0, low_open=True))
        with np.errstate(over="ignore"):
            v.loss_scale("sensitivity / sigma", self.sensitivity / self.sigma, v.MAX_GAUSSIAN_MU)

    @property
    def mu(self) -> float:
        return self.sensitivity / self.sigma

    def gaussian_mu(self) -> float | None:
        return self.mu if type(self) is Gaussian else None

    def tv_upper(self) -> float | None:
        return tv.gaussian_tv(self.mu) if type(self) is Gaussian else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        mu = self.mu
        return LossModel(_EMPTY, _EMPTY, _EMPTY, NormalBase(mu * mu / 2, -mu * mu / 2, mu))


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism with noise scale ``scale`` and L1 sensitivity ``sensitivity``.

    With ``c = sensitivity/scale`` the loss is ``c`` w.p. 1/2, ``-c`` w.p.
    ``e^{-c}/2`` and continuous on ``(-c, c)`` in between.
    """

    adjacency = adj.ANY
    symmetric = True

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", v.real("scale", self.scale, low=0.0, low_open=True))
        object.__setattr__(self, "sensitivity", v.real("sensitivity", self.sensitivity, low=0.0, low_open=True))
        v.loss_scale("sensitivity / scale", self.sensitivity / self.scale)

    def tv_upper(self) -> float | None:
        return tv.laplace_tv(self.sensitivity / self.scale) if type(self) is Laplace else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        c = self.sensitivity / self.scale
        x, lp, lq = _atoms([c, -c], [math.log(0.5), math.log(0.5) - c], [math.log(0.5) - c, math.log(0.5)])
        return LossModel(x, lp, lq, LaplaceBase(c))


def _binary_pair(eps: float, log_keep: float = 0.0):
    # P = (e^eps, 1)/(1 + e^eps), Q = (1, e^eps)/(1 + e^eps), times (1 - delta)
    lz = -np.logaddexp(0.0, eps)
    return [eps, -eps], [log_keep + eps + lz, log_keep + lz], [log_keep + lz, log_keep + eps + lz]


@dataclass(frozen=True)
class RandomizedResponse(Mechanism):
    """Binary randomized response: report the true bit w.p. ``e^eps / (1 + e^eps)``."""

    adjacency = adj.ANY
    symmetric = True

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.loss_scale(
            "epsilon", v.real("epsilon", self.epsilon, low=0.0, low_open=True)))

    def tv_upper(self) -> float | None:
        return tv.atoms_tv(self.loss_model("remove")) if type(self) is RandomizedResponse else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        return LossModel(*_atoms(*_binary_pair(self.epsilon)))


@dataclass(frozen=True)
class PureDP(Mechanism):
    """Any ``epsilon``-DP mechanism, through its worst-case pair (binary randomized response)."""

    adjacency = adj.ANY
    symmetric = True

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.loss_scale(
            "epsilon", v.real("epsilon", self.epsilon, low=0.0, low_open=True)))

    def tv_upper(self) -> float | None:
        return tv.atoms_tv(self.loss_model("remove")) if type(self) is PureDP else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        return LossModel(*_atoms(*_binary_pair(self.epsilon)))


@dataclass(frozen=True)
class ApproxDP(Mechanism):
    """Any ``(epsilon, delta)``-DP mechanism, through its worst-case pair.

    ``P = (delta, (1-delta) e^eps/(1+e^eps), (1-delta)/(1+e^eps), 0)`` and ``Q``
    its mirror image (Kairouz, Oh & Viswanath, ICML 2015).
    """

    adjacency = adj.ANY
    symmetric = True

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", v.loss_scale("epsilon", v.real("epsilon", self.epsilon, low=0.0)))
        object.__setattr__(self, "delta", v.real("delta", self.delta, low=0.0, high=1.0, high_open=True))

    def tv_upper(self) -> float | None:
        return tv.atoms_tv(self.loss_model("remove")) if type(self) is ApproxDP else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        keep = math.log1p(-self.delta)
        ld = math.log(self.delta) if self.delta > 0 else -math.inf
        if self.epsilon == 0.0:
            x, lp, lq = [0.0], [keep], [keep]
        else:
            x, lp, lq = _binary_pair(self.epsilon, keep)
        x = [math.inf, *x, -math.inf]
        lp = [ld, *lp, -math.inf]
        lq = [-math.inf, *lq, ld]
        return LossModel(*_atoms(x, lp, lq))


@dataclass(frozen=True)
class DiscreteLaplace(Mechanism):
    """Discrete Laplace mechanism: integer noise with ``P(k) ∝ exp(-|k|/scale)``.

    ``sensitivity`` is an integer; the loss takes the values ``(2k - s)/scale``
    for ``k = 0..s`` (Ghazi et al., 2022, discrete mechanisms).
    """

    adjacency = adj.ANY
    symmetric = True

    scale: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", v.real("scale", self.scale, low=0.0, low_open=True))
        object.__setattr__(self, "sensitivity", v.integer("sensitivity", self.sensitivity, low=1, high=10**6))
        v.loss_scale("sensitivity / scale", self.sensitivity / self.scale)

    def tv_upper(self) -> float | None:
        return tv.atoms_tv(self.loss_model("remove")) if type(self) is DiscreteLaplace else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        a, s = 1.0 / self.scale, self.sensitivity
        lz = math.log(-math.expm1(-a)) - math.log1p(math.exp(-a))  # log normaliser
        ltail = -math.log1p(math.exp(-a))  # log P(k >= s) under P = log 1/(1+e^{-a})
        ks = np.arange(1, s)
        x = np.concatenate(([s * a], (2 * ks - s) * a, [-s * a]))
        lp = np.concatenate(([ltail], lz - a * (s - ks), [ltail - a * s]))
        lq = np.concatenate(([ltail - a * s], lz - a * ks, [ltail]))
        return LossModel(x, lp, lq)


@dataclass(frozen=True)
class FromPMFs(Mechanism):
    """A dominating pair supplied as two probability vectors over the same outcomes.

    ``p`` is the output law on the larger dataset and ``q`` on the smaller one;
    the remove direction uses ``(p, q)`` and the add direction ``(q, p)``.
    """

    adjacency = adj.ANY

    p: tuple
    q: tuple
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        pa = _prob_vector("p", self.p)
        qa = _prob_vector("q", self.q)
        if pa.shape != qa.shape:
            raise ValueError(f"p and q must have the same length, got {pa.size} and {qa.size}")
        object.__setattr__(self, "p", tuple(pa.tolist()))
        object.__setattr__(self, "q", tuple(qa.tolist()))

    def tv_upper(self) -> float | None:
        return tv.atoms_tv(self.loss_model("remove")) if type(self) is FromPMFs else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        pa, qa = np.array(self.p), np.array(self.q)
        if direction == "add":
            pa, qa = qa, pa
        with np.errstate(divide="ignore"):
            lp, lq = np.log(pa), np.log(qa)
        with np.errstate(invalid="ignore"):
            x = np.where(qa == 0, np.inf, np.where(pa == 0, -np.inf, lp - lq))
        return LossModel(x, lp, lq)


def _prob_vector(name: str, value) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of probabilities") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence of probabilities")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must contain finite probabilities in [0, 1]")
    if abs(arr.sum() - 1.0) > 1e-9:
        raise ValueError(f"{name} must sum to 1 (within 1e-9), got sum {arr.sum()!r}")
    return arr / arr.sum()
