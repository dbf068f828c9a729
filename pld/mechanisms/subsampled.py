"""Subsampled mechanisms: Poisson sampling (add-or-remove) and sampling without replacement (substitution)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pld import _validate as v
from pld.engine import total_variation as tv
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import Mechanism
from pld.mechanisms.basic import Gaussian
from pld.mechanisms.models import LossModel
from pld.mechanisms.substitute_models import SymmetrizedSubsampledGaussianModel


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
    :class:`pld.mechanisms.substitute_models.SymmetrizedSubsampledGaussianModel`), so the two
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
    ``C_q(G_mu)`` (:class:`pld.mechanisms.substitute_models.SymmetrizedSubsampledGaussianModel`),
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
