"""Mechanisms: immutable descriptions of what ran on the data.

Each mechanism declares its neighbouring relation (:attr:`Mechanism.adjacency`,
see :mod:`pld.adjacency`) and whether its two directions share one pair
(:attr:`Mechanism.symmetric`), knows its *dominating pair* for both directions
(``remove``: P = output on D, Q = output on the neighbour D'; ``add``: the roles
reversed) and hands an exact loss model (:class:`pld._models.LossModel` or
another :class:`pld._models.LossModelProtocol`) to the discretiser.
``mechanism.pld()`` returns a :class:`pld.PLD`.

Conventions: ``sigma`` / ``noise_multiplier`` is the noise standard deviation
divided by the L2 sensitivity when ``sensitivity=1``; in general the Gaussian
pair is ``N(sensitivity, sigma^2)`` vs ``N(0, sigma^2)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pld import _validate as v
from pld import adjacency as adj
from pld import total_variation as tv
from pld._models import LaplaceBase, LossModel, LossModelProtocol, NormalBase
from pld._substitute_models import SymmetrizedSubsampledGaussianModel

_EMPTY = np.array([], dtype=float)
_PLD_MECHANISMS: dict[str, type] = {}
#: the PLD type, registered by pld.distribution when it is imported (it imports
#: this module, so this module cannot import it: mechanisms describe pairs and
#: know nothing of grids; ``pld()`` is only a convenience)
_PLD_TYPE: list[Any] = []


def register_pld_type(cls: type) -> None:
    """Make ``mechanism.pld()`` build instances of ``cls`` (called by pld.distribution)."""
    _PLD_TYPE[:] = [cls]


class Mechanism:
    """Base class.  Subclasses are frozen dataclasses.

    Contract: a subclass declares, as class attributes, properties or fields,

    * ``adjacency``: the neighbouring relation of its pair (one of
      :data:`pld.adjacency.RELATIONS`), and
    * ``symmetric``: True only if the ``add`` direction's PLD equals the
      ``remove`` direction's (then only ``remove`` is evaluated),

    and implements ``loss_model(direction)``.  Neither has a default: a new
    asymmetric pair that forgot to say so would silently lose its ``add``
    direction, so a subclass that declares neither is refused when defined.
    """

    adjacency: str
    symmetric: bool
    #: whether the pair the engine composes is the mechanism's *tight*
    #: dominating pair, so that both ends of a bracket bound the mechanism.
    #: A mechanism known only through a dominating pair that is not tight (a
    #: derived or block bound) says False and names, in :meth:`bound_parts`,
    #: the composition that bounds it from above and a dominated construction
    #: of the true mechanism (a post-processing of it, or a concrete pair of
    #: neighbouring datasets) that bounds it from below
    tight: bool = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in ("adjacency", "symmetric") if not hasattr(cls, name)]
        if missing:
            raise TypeError(f"mechanism {cls.__name__} must declare {' and '.join(missing)} "
                            "(see pld.mechanisms.Mechanism)")
        if cls.__module__.split(".")[0] == "pld":
            # pld's own mechanisms, by name: what saved files may name (pld.io)
            _PLD_MECHANISMS[cls.__name__] = cls

    @staticmethod
    def pld_classes() -> dict[str, type]:
        """pld's own mechanism classes by name (those defined in ``pld.*`` modules)."""
        return dict(_PLD_MECHANISMS)

    def loss_model(self, direction: str) -> LossModelProtocol:  # pragma: no cover - abstract
        raise NotImplementedError

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        """``(upper, lower)``: compositions ``((mechanism, count), ...)`` of tight
        pairs whose epsilon bounds this mechanism's from above and from below.

        A tight mechanism is its own bound both ways.  One that is not
        (:attr:`tight` False) returns a dominating composition and a
        dominated one, or None for the lower when no dominated construction is
        known (the lower end of a bracket is then 0).  Every part returned
        must be tight.
        """
        return ((self, 1),), ((self, 1),)

    def bound_notes(self) -> dict[str, str]:
        """What the two ends of a bracket bound, in words (reports, ``explain()``)."""
        if self.tight:
            return {"upper": "the tight dominating pair (dominating discretisation)",
                    "lower": "the tight dominating pair (dominated discretisation)"}
        raise NotImplementedError  # pragma: no cover - a non-tight mechanism states its constructions

    def tv_upper(self) -> float | None:
        """Upper bound on the total variation of the pair (both directions), or
        None when there is no closed form (:mod:`pld.total_variation`)."""
        return None

    def gaussian_mu(self) -> float | None:
        """``mu`` when the pair is exactly a Gaussian pair ``N(mu, 1)`` vs
        ``N(0, 1)`` (closed forms apply, :mod:`pld.gaussian_exact`), else None."""
        return None

    def pld(self, *, value_discretization_interval: float | None = None) -> Any:
        """The privacy loss distribution of one run of this mechanism.

        Parameters
        ----------
        value_discretization_interval : float, optional
            Fixed grid spacing for experts; by default the spacing is chosen per
            query so that the epsilon bracket is narrow.

        Returns
        -------
        pld.PLD
            One run (``count = 1``); compose with ``self_compose``/``compose``.
        """
        return _PLD_TYPE[0].from_mechanism(self, value_discretization_interval=value_discretization_interval)

    # helpers ---------------------------------------------------------------
    @staticmethod
    def _check_direction(direction: str) -> None:
        if direction not in ("remove", "add"):
            raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")


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


@dataclass(frozen=True)
class PoissonSampled(Mechanism):
    """``mechanism`` run on a Poisson subsample: each record kept w.p. ``sampling_rate``.

    Accounted under add-or-remove adjacency with the two dominating pairs of
    Zhu, Dong & Wang (AISTATS 2022): remove ``((1-q)Q + qP, Q)`` and add
    ``(Q, (1-q)Q + qP)``, built from the base mechanism's remove pair
    ``(P, Q)``.  The two directions differ for ``q < 1`` and both are composed.
    """

    adjacency = adj.ADD_OR_REMOVE

    mechanism: Mechanism
    sampling_rate: float
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise TypeError(f"mechanism must be a pld mechanism, got {type(self.mechanism).__name__}")
        q = v.real("sampling_rate", self.sampling_rate, low=0.0, high=1.0, low_open=True)
        object.__setattr__(self, "sampling_rate", q)
        object.__setattr__(self, "symmetric", q == 1.0 and self.mechanism.symmetric)
        self._base_pair()  # (refuses, now, a mechanism whose pair it cannot subsample)

    def tv_upper(self) -> float | None:
        return tv.subsampled_tv(self.sampling_rate, self.mechanism.tv_upper())

    def gaussian_mu(self) -> float | None:
        # (at rate 1 every step runs the base mechanism)
        return self.mechanism.gaussian_mu() if self.sampling_rate == 1.0 else None

    def loss_model(self, direction: str = "remove") -> LossModel:
        self._check_direction(direction)
        base, q = self._base_pair()
        return LossModel(base.atom_x, base.atom_log_p, base.atom_log_q, base.base, q, direction)

    def _base_pair(self) -> tuple[LossModel, float]:
        """The unsampled base pair and the overall rate (nested samplings multiply)."""
        inner: Mechanism = self.mechanism
        q = self.sampling_rate
        while isinstance(inner, PoissonSampled):  # Poisson sampling twice is sampling at q1*q2
            q *= inner.sampling_rate
            inner = inner.mechanism
        base = inner.loss_model("remove")
        if not isinstance(base, LossModel) or base.sampling_rate != 1.0 or base.direction != "remove":
            raise ValueError(
                f"mechanism of PoissonSampled must describe an unsampled pair (Gaussian, Laplace, randomized "
                f"response, ...), got {type(inner).__name__}, whose pair PoissonSampled cannot subsample")
        return base, q


def _check_substitute_gaussian(mech) -> None:
    """Arguments of a subsampled Gaussian under substitute adjacency (its pair
    is built for the Gaussian base only, and shifts by 2 C)."""
    name = type(mech).__name__
    if not isinstance(mech.mechanism, Mechanism):
        raise TypeError(f"mechanism must be a pld mechanism, got {type(mech.mechanism).__name__}")
    if not isinstance(mech.mechanism, Gaussian):
        raise TypeError(
            f"mechanism of {name} must be a pld.Gaussian: the substitute-adjacency dominating pair is "
            f"implemented for the Gaussian base only, got {type(mech.mechanism).__name__}")
    q = v.real("sampling_rate", mech.sampling_rate, low=0.0, high=1.0, low_open=True)
    object.__setattr__(mech, "sampling_rate", q)
    v.loss_scale("2 * sensitivity / sigma", 2.0 * mech.mechanism.mu, v.MAX_GAUSSIAN_MU)


@dataclass(frozen=True)
class SampledWithoutReplacement(Mechanism):
    """``mechanism`` run on a fixed-size batch drawn without replacement.

    The batch holds a fraction ``sampling_rate`` (``m / n``) of the dataset.
    Sampling without replacement pairs with *substitute* adjacency (the dataset
    size is public; a neighbour replaces one record), never with add-or-remove.

    Only the Gaussian base is supported.  ``Gaussian(sigma, sensitivity)`` is
    described as everywhere in pld: ``sensitivity`` bounds one record's
    contribution (DP-SGD's clipping norm), so replacing a record moves the query
    by up to ``2 * sensitivity`` and the base tradeoff function is
    ``G_mu`` with ``mu = 2 * sensitivity / sigma``.  The subsampled mechanism is
    ``C_q(G_mu)``-DP with ``C_q(f) = min(f_q, f_q^{-1})**`` and
    ``f_q = q f + (1 - q) Id`` (Dong, Roth & Su 2022, Thm 4.2); its dominating
    pair is symmetric (see
    :class:`pld._substitute_models.SymmetrizedSubsampledGaussianModel`), so the two
    directions coincide.  For ``sampling_rate = 1`` it is the Gaussian mechanism
    with sensitivity ``2 * sensitivity``.

    Note that the three-point pair ``(q N(1) + (1-q) N(0), q N(-1) + (1-q) N(0))``
    is *not* a dominating pair here: datasets whose other records share the
    gradient of one of the two swapped records realise the pair
    ``((1-q) N(0) + q N(2), N(0))``, whose hockey-stick divergence is larger.

    **Not tight when composed** (``sampling_rate < 1``).  One step's
    symmetrized pair is attained, but its composition also covers every way
    an adaptive adversary can switch the two orders of the pair between
    steps, and no concrete pair of datasets is known to attain that.  So
    (:meth:`bound_parts`) the upper end composes the symmetrized pair
    (:class:`SymmetrizedSubsampledGaussian`), and the lower end the pair those
    datasets realise at every step (the record ``x = C e``, every other record
    and ``x' = -C e``): the Poisson-subsampled Gaussian of sensitivity ``2 C``
    at rate ``q``, both orders.  MNIST's run (sigma 1.1, q 256/60000, 14063
    steps, delta 1e-5): [14.718, 18.455].
    """

    adjacency = adj.SUBSTITUTE

    mechanism: Gaussian
    sampling_rate: float
    symmetric: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        _check_substitute_gaussian(self)

    @property
    def tight(self) -> bool:  # type: ignore[override]
        return self.sampling_rate == 1.0

    def _pair(self) -> SymmetrizedSubsampledGaussian:
        g = self.mechanism
        return SymmetrizedSubsampledGaussian(2.0 * g.sensitivity / g.sigma, self.sampling_rate)

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        if self.tight:
            return super().bound_parts()
        g = self.mechanism
        return ((self._pair(), 1),), ((PoissonSampled(Gaussian(g.sigma, 2.0 * g.sensitivity), self.sampling_rate), 1),)

    def bound_notes(self) -> dict[str, str]:
        if self.tight:
            return super().bound_notes()
        return {"upper": "the symmetrized pair C_q(G_mu) of Dong, Roth & Su, composed: a dominating pair that is "
                         "not tight when composed (it covers every adaptive switch of the pair's two orders)",
                "lower": "a concrete pair of neighbouring datasets (x = Ce, every other record and x' = -Ce): the "
                         "Poisson-subsampled Gaussian of sensitivity 2C at the same rate, both orders"}

    def tv_upper(self) -> float | None:
        g = self.mechanism
        return tv.subsampled_gaussian_tv(self.sampling_rate, 2.0 * g.sensitivity / g.sigma)

    def gaussian_mu(self) -> float | None:
        # (at rate 1 the batch is the dataset: the Gaussian of sensitivity 2C)
        return 2.0 * self.mechanism.mu if self.sampling_rate == 1.0 else None

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)  # both directions share the symmetric pair
        return self._pair().loss_model(direction)


@dataclass(frozen=True)
class SymmetrizedSubsampledGaussian(Mechanism):
    """The symmetrized pair of a Gaussian on a sample without replacement, as a mechanism.

    Its pair is its definition (tight for itself): the dominating pair of
    ``C_q(G_mu)`` (:class:`pld._substitute_models.SymmetrizedSubsampledGaussianModel`),
    ``mu`` the substitute sensitivity over the noise.  The upper end of
    :class:`SampledWithoutReplacement`.
    """

    adjacency = adj.SUBSTITUTE

    mu: float
    sampling_rate: float
    symmetric: bool = field(default=True, init=False)

    def tv_upper(self) -> float | None:
        return tv.subsampled_gaussian_tv(self.sampling_rate, self.mu)

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        return SymmetrizedSubsampledGaussianModel(self.mu, self.sampling_rate)
