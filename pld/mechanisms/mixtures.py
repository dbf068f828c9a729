"""Mechanisms whose pair is a mixture of Gaussians (dp_accounting's events).

* :class:`MixtureOfGaussians`: Gaussian noise on a query of random sensitivity;
* :class:`PoissonSampledSubstitute`: a Gaussian on a Poisson subsample under
  substitute adjacency;
* :class:`TruncatedPoissonGaussian`: a Gaussian on a Poisson sample cut to a
  largest batch size.

Each declares its neighbouring relation and symmetry as every mechanism does
(:class:`pld.mechanisms.Mechanism`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld.mechanisms import adjacency as adj
from pld.mechanisms.base import Mechanism
from pld.mechanisms.basic import Gaussian, _prob_vector
from pld.mechanisms.mixture_models import LossUnionModel, mixture_pair_model
from pld.mechanisms.subsampled import PoissonSampled, _check_substitute_gaussian


@dataclass(frozen=True)
class MixtureOfGaussians(Mechanism):
    """Gaussian noise on a query whose sensitivity is random (Mixture of Gaussians).

    The pair is the mechanism's definition: the output on the larger dataset
    is ``P = sum_i p_i N(c_i, sigma^2)`` and on the smaller one ``Q = N(0,
    sigma^2)`` (``c_i = sensitivities[i] >= 0``, ``p_i = probabilities[i]``);
    the remove direction is ``(P, Q)``, the add direction ``(Q, P)``.  Its
    loss ``log sum_i p_i e^{(2 c_i y - c_i^2)/(2 sigma^2)}`` is increasing in
    the output ``y``.  ``sensitivities = (0, 1)``, ``probabilities = (1-q, q)``
    is the Poisson-subsampled Gaussian; ``(0, 1, 2)`` with
    ``((1-q)^2, 2q(1-q), q^2)`` lets a record be sampled twice.

    The mechanism is ``MixtureOfGaussiansDpEvent`` of dp_accounting and the
    M_MoG of Choquette-Choo, Ganesh, Steinke & Thakurta, "Privacy
    Amplification for Matrix Mechanisms" (ICLR 2024, arXiv:2310.15526), whose
    Corollary 4.7 shows that a vector-valued mixture of Gaussians is dominated
    by this scalar pair with each sensitivity vector replaced by its norm.
    """

    adjacency = adj.ADD_OR_REMOVE

    sigma: float
    sensitivities: tuple
    probabilities: tuple
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.real("sigma", self.sigma, low=0.0, low_open=True))
        try:
            c = np.asarray(self.sensitivities, dtype=float)
        except (TypeError, ValueError):
            raise TypeError("sensitivities must be a sequence of real numbers") from None
        if c.ndim != 1 or c.size == 0:
            raise ValueError("sensitivities must be a non-empty 1-d sequence")
        if not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ValueError(f"sensitivities must be finite and >= 0, got {self.sensitivities!r}")
        p = _prob_vector("probabilities", self.probabilities)
        if p.shape != c.shape:
            raise ValueError(f"sensitivities and probabilities must have the same length, got {c.size} and {p.size}")
        if not np.any((c > 0) & (p > 0)):
            raise ValueError("at least one positive sensitivity must have positive probability "
                             "(otherwise the output does not depend on the record)")
        with np.errstate(over="ignore"):
            v.loss_scale("max(sensitivities) / sigma", float(c.max()) / self.sigma, v.MAX_GAUSSIAN_MU)
        object.__setattr__(self, "sensitivities", tuple(c.tolist()))
        object.__setattr__(self, "probabilities", tuple(p.tolist()))

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        with np.errstate(divide="ignore"):
            lw = np.log(np.array(self.probabilities))
        mix = (lw, self.sensitivities)
        ref = ((0.0,), (0.0,))
        p, q = (mix, ref) if direction == "remove" else (ref, mix)
        return mixture_pair_model(p[0], p[1], q[0], q[1], self.sigma)


@dataclass(frozen=True)
class PoissonSampledSubstitute(Mechanism):
    """A Gaussian run on a Poisson subsample, accounted under *substitute* adjacency.

    Each record joins the batch independently with probability
    ``sampling_rate`` = q; neighbouring datasets have the same size and differ
    in one record (``x`` replaced by ``x'``).  ``Gaussian(sigma, sensitivity)``
    is described as everywhere in pld: ``sensitivity`` = C bounds one record's
    contribution (DP-SGD's clipping norm) and the noise is ``N(0, sigma^2 I)``.
    The dominating pair is symmetric, so both directions share it:

        ``P = (1-q) N(0, sigma^2) + q N(C, sigma^2)``,  ``Q = (1-q) N(0, sigma^2) + q N(-C, sigma^2)``.

    For ``q = 1`` it is the Gaussian with sensitivity ``2 C``.  The pair is
    Koskela, Jälkö & Honkela, "Computing Tight Differential Privacy Guarantees
    Using FFT" (AISTATS 2020, Sec. 5.2: Poisson subsampling under the
    substitute relation) and dp_accounting's ``REPLACE`` adjacency for the
    subsampled Gaussian.  Why it dominates (a proof, since the sources state
    the pair without one):

    1. Conditioned on the other records' coins, the outputs are
       ``A_a = (1-q) N(s) + q N(s + a)`` and ``A_b`` (same shift ``s``,
       ``|a|, |b| <= C``); by joint convexity of the hockey-stick divergence
       ``H_alpha`` it suffices to bound ``H_alpha(A_a || A_b)`` with ``s = 0``.
    2. For ``alpha >= 1``, ``H_alpha(A_a||A_b) = q H_beta(N(a) || (1-r) N(0) +
       r N(b))`` with ``beta = 1 + (alpha-1)/q`` and ``r = alpha/beta`` (the
       common ``(1-q) N(0)`` moved to the second law; Balle, Barthe & Gaboardi
       2018, "advanced joint convexity").  Under ``y ~ N(a, sigma^2 I)`` the
       second law's likelihood ratio is ``R = (1-r) e^{Z_1} + r e^{Z_2}`` with
       ``Z_1, Z_2`` normal, ``E e^{Z_i} = 1``, standard deviations
       ``|a|/sigma <= C/sigma`` and ``|b-a|/sigma <= 2C/sigma``, and
       ``H_beta = E (1 - beta R)_+`` is a convex function of ``R``.
    3. ``R`` is below (in convex order) the comonotonic sum with the same
       marginals; a mean-one log-normal grows in convex order with its
       standard deviation; comonotonic sums preserve convex order (their
       stop-loss transform is ``min`` over splits of the retention of the
       marginals' stop-loss transforms).  Dhaene, Denuit, Goovaerts, Kaas &
       Vyncke, "The concept of comonotonicity in actuarial science and
       finance: theory", Insurance Math. Econom. 31 (2002).  The largest
       comonotonic sum, standard deviations ``C/sigma`` and ``2C/sigma``, is
       realised by ``a = C e``, ``b = -C e``: the pair above.
    4. For ``alpha < 1``, ``H_alpha(P||Q) = 1 - alpha + alpha H_{1/alpha}(Q||P)``
       and the relation is symmetric, while the pair is its own mirror image.

    Only the Gaussian base is supported.
    """

    adjacency = adj.SUBSTITUTE

    mechanism: Gaussian
    sampling_rate: float
    symmetric: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        _check_substitute_gaussian(self)

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)  # both directions share the symmetric pair
        q, g = self.sampling_rate, self.mechanism
        lw = (math.log1p(-q) if q < 1.0 else -math.inf, math.log(q))
        return mixture_pair_model(lw, (0.0, g.sensitivity), lw, (0.0, -g.sensitivity), g.sigma)


#: relative slack on the weights of a truncated batch's pairs (scipy's
#: binomial tails are accurate to ~1e-15): the share it takes from the two
#: tight pairs goes to a pair that dominates both
_WEIGHT_SLACK = 1e-12

_ADJACENCIES = (adj.ADD_OR_REMOVE, adj.SUBSTITUTE, adj.REPLACE_SPECIAL)


@dataclass(frozen=True)
class DisjointUnion(Mechanism):
    """A coin with probabilities ``weights``, shown to the adversary, picks which pair runs.

    Its hockey-stick divergence is ``sum_j w_j H_a(P_j || Q_j)`` at every
    ``a`` (:class:`pld.mechanisms.mixture_models.LossUnionModel`), so it dominates any
    pair that is a mixture, over the same weights, of pairs dominated by the
    ``(P_j, Q_j)``: the joint convexity of the hockey-stick divergence.  It is
    the tight pair of the union itself (the coin revealed), which is what a
    derived bound composes.  ``parts`` is ``((weight, mechanism), ...)`` with
    weights summing to one; ``relation`` the neighbouring relation the union
    is a bound for.
    """

    parts: tuple
    relation: str
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("parts must hold at least one (weight, mechanism) pair")
        for w, m in self.parts:
            if not isinstance(m, Mechanism):
                raise TypeError(f"parts must hold pld mechanisms, got {type(m).__name__}")
            v.real("weight", w, low=0.0, high=1.0, low_open=True)
        object.__setattr__(self, "symmetric", all(m.symmetric for _, m in self.parts))

    @property
    def adjacency(self) -> str:  # type: ignore[override]
        return self.relation

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        if len(self.parts) == 1:
            return self.parts[0][1].loss_model(direction)
        return LossUnionModel(tuple((math.log(w), m.loss_model(direction)) for w, m in self.parts))


@dataclass(frozen=True)
class RemovePairBothWays(Mechanism):
    """``mechanism``'s remove-direction pair, bounding both orderings of a symmetric relation.

    Under a relation whose family of worst-case pairs is closed under swapping
    the two datasets (substitution; a record replaced by a zero record, after
    a cut batch), the pair that bounds ``H_a(M(D) || M(D'))`` for ``a >= 1``
    bounds ``H_a(M(D') || M(D))`` too: one pair serves both directions.
    Internal: a part of :class:`TruncatedPoissonGaussian`'s bound.
    """

    mechanism: Mechanism
    relation: str
    symmetric: bool = field(default=True, init=False)

    @property
    def adjacency(self) -> str:  # type: ignore[override]
        return self.relation

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        return self.mechanism.loss_model("remove")


@dataclass(frozen=True)
class TruncatedPoissonGaussian(Mechanism):
    """Gaussian on a Poisson sample truncated to at most ``max_batch_size`` records.

    Each of the ``dataset_size`` records joins the batch independently with
    probability ``sampling_rate`` = p; a batch larger than B =
    ``max_batch_size`` is cut to a uniformly random subset of size B; the sum
    of the batch (one record contributes at most norm 1) gets ``N(0, sigma^2
    I)`` noise.  (dp_accounting's ``TruncatedSubsampledGaussianDpEvent``;
    arXiv:2508.15089.)  ``dataset_size`` is n, the size of the dataset that
    holds the record (under add-or-remove the larger of the two neighbours,
    as in dp_accounting), so m = n - 1 other records share the batch with it.

    **Not tight.**  pld composes a dominating pair derived here (the upper
    end) and a concrete pair of neighbouring datasets (the lower end);
    :meth:`bound_parts` returns both.

    *Upper end* (a proof).  Let K be how many of the m others are sampled.

    * ``K <= B - 1``: nothing is cut; given the others' sample the pair is the
      Poisson-subsampled Gaussian's at rate p, radius 1: under add-or-remove
      ``((1-p) N(0) + p N(a), N(0))``, ``|a| <= 1``; under substitution the
      radius-1 substitute pair; under replace-special (the record replaced by
      a zero record that still counts towards the batch) the add-or-remove pair.
    * ``K >= B``: the record, if sampled, survives the cut with probability
      ``B/(K+1)`` and displaces one of the other batch members.  Writing the
      batch without it as a uniform (B-1)-subset T of the others plus one more
      member y, the output given (T, y) is ``(1-r) N(T + y) + r N(T + x)``,
      ``r = pB/(K+1)``, and on the neighbour ``N(T + y)`` (removed),
      ``(1-r) N(T + y) + r N(T + x')`` (substituted) or ``(1-r) N(T + y) + r
      N(T)`` (replaced by zero).  (T, y) has the same law for every K >= B (a
      uniform B-subset of a uniform K-subset is a uniform B-subset), so the
      pairs mix over K at ``r_bar = E[pB/(K+1) | K >= B] = B P(Bin(n,p) >= B+1)
      / (n P(Bin(n-1,p) >= B))``.  Centred at ``T + y``, the two outputs are
      ``A_a = (1-r) N(0) + r N(a)`` and ``A_b`` with ``a = x - y`` (``|a| <= 2``)
      and ``b = 0`` (removed), ``b = x' - y`` (substituted: ``|b| <= 2``,
      ``|a - b| <= 2``) or ``b = -y`` (zero record: ``|b| <= 1``, ``|a - b| <=
      1``).  By the comonotonic argument of :class:`PoissonSampledSubstitute`
      (advanced joint convexity, then convex order of the likelihood ratio's
      log-normal terms, whose standard deviations are ``|a|/sigma`` and
      ``|b - a|/sigma``), ``H_alpha(A_a || A_b)``, ``alpha >= 1``, is at most
      that of the comonotonic sum with the largest standard deviations the
      constraints allow: ``2/sigma`` and ``2/sigma`` for a removal or a
      substitution, realised by ``b = 0``, ``a = 2e`` (records ``x = e``, ``y =
      x' = -e``): the add-or-remove pair ``((1-r) N(0) + r N(2), N(0))``.  A
      substitution's and a zero record's families are closed under swapping
      the datasets, so that pair (its remove direction) bounds both orders
      there; under add-or-remove the reversed order is the pair's add
      direction.  (Under replace-special the sharper ``2/sigma, 1/sigma`` is
      not a monotone pair; the bound keeps ``2/sigma, 2/sigma``.)

    Whether the batch was cut is shown to the adversary (a disjoint union,
    :class:`DisjointUnion`: weight ``w = P(Bin(n-1, p) <= B-1)`` on the first
    pair, ``1 - w`` on the second; joint convexity makes the union dominate
    the mixture the mechanism is).  The weights are computed with scipy's
    binomial tails; a relative ``1e-12`` of each part's weight is moved to the
    rate-p radius-2 pair (which dominates both, ``r_bar < p``) and ``r_bar`` is
    rounded up, so rounding never favours the bound.

    *Lower end*: a dataset whose other records all contribute 0 (zero
    gradients).  The record's part of the batch is then its own: it is in the
    (cut) batch with probability ``p_eff = p E[min(1, B/(K+1))] = p P(K <= B-1)
    + B P(Bin(n,p) >= B+1) / n``, and the outputs are exactly the
    Poisson-subsampled pair at rate ``p_eff`` (radius 1; the substitute pair
    with ``x = e``, ``x' = -e`` under substitution), rounded down (a smaller
    rate is dominated).  Its epsilon is at most the mechanism's.

    dp_accounting's construction (its ``from_truncated_subsampled_gaussian_
    mechanism``) mixes the same two cases with its replace-one pair of
    sensitivity 2 for the cut part, which dominates the add-or-remove pair
    used here, so pld's upper end is at most its value.
    """

    sigma: float
    dataset_size: int
    sampling_rate: float
    max_batch_size: int
    adjacency: str = "add_or_remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.real("sigma", self.sigma, low=0.0, low_open=True))
        object.__setattr__(self, "dataset_size", v.integer("dataset_size", self.dataset_size, low=1))
        object.__setattr__(self, "sampling_rate",
                           v.real("sampling_rate", self.sampling_rate, low=0.0, high=1.0, low_open=True))
        object.__setattr__(self, "max_batch_size", v.integer("max_batch_size", self.max_batch_size, low=1))
        if self.adjacency not in _ADJACENCIES:
            raise ValueError(f"adjacency must be one of {', '.join(map(repr, _ADJACENCIES))}, got {self.adjacency!r}")
        with np.errstate(over="ignore"):  # a cut batch shifts by up to 2
            v.loss_scale("2 / sigma", 2.0 / self.sigma, v.MAX_GAUSSIAN_MU)

    @property
    def symmetric(self) -> bool:  # type: ignore[override]
        return self.adjacency == "substitute"

    @property
    def tight(self) -> bool:  # type: ignore[override]
        """Tight only where no batch is ever cut (fewer other records than B)."""
        return self._cut()[1] <= 0.0

    def _cut(self) -> tuple[float, float, float, float]:
        """``(P(K <= B-1), P(K >= B), r_bar, p_eff)`` for K ~ Bin(n-1, p) (``r_bar`` = nan if no cut)."""
        from scipy.stats import binom  # (scipy.stats costs ~0.3 s to import: only when used)

        p, b, n = self.sampling_rate, self.max_batch_size, self.dataset_size
        keep = float(binom.cdf(b - 1, n - 1, p))
        cut = float(binom.sf(b - 1, n - 1, p))
        if cut <= 0.0:
            return keep, 0.0, math.nan, p
        tail = float(binom.sf(b, n, p))  # P(Bin(n, p) >= B + 1)
        r = b * tail / (n * cut)
        p_eff = p * keep + b * tail / n
        return keep, cut, min(p, r * (1.0 + _WEIGHT_SLACK)), min(p, p_eff * (1.0 - _WEIGHT_SLACK))

    def _radius(self, sensitivity: float, rate: float) -> Mechanism:
        """The pair of a batch that was not cut (radius ``sensitivity``, rate ``rate``)."""
        g = Gaussian(self.sigma, sensitivity=sensitivity)
        return PoissonSampledSubstitute(g, rate) if self.adjacency == "substitute" else PoissonSampled(g, rate)

    def _cut_pair(self, rate: float) -> Mechanism:
        """The pair of a cut batch: the add-or-remove pair of radius 2 (see the class docstring)."""
        pair = PoissonSampled(Gaussian(self.sigma, sensitivity=2.0), rate)
        return pair if self.adjacency == "add_or_remove" else RemovePairBothWays(pair, self.adjacency)

    def parts(self) -> tuple:
        """``((weight, mechanism), ...)``: the pairs of the dominating union, weights summing to one."""
        keep, cut, r_bar, _ = self._cut()
        low = self._radius(1.0, self.sampling_rate)
        if cut <= 0.0:  # fewer other records than B: nothing is ever cut
            return ((1.0, low),)
        w_low = keep * (1.0 - _WEIGHT_SLACK)
        w_cut = cut * (1.0 - _WEIGHT_SLACK)
        w_star = max(0.0, 1.0 - w_low - w_cut)
        star = self._cut_pair(self.sampling_rate)
        return tuple((w, m) for w, m in ((w_low, low), (w_cut, self._cut_pair(r_bar)), (w_star, star)) if w > 0.0)

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        parts = self.parts()
        if len(parts) == 1:
            return ((parts[0][1], 1),), ((parts[0][1], 1),)
        return ((DisjointUnion(parts, self.adjacency), 1),), ((self._radius(1.0, self._cut()[3]), 1),)

    def bound_notes(self) -> dict[str, str]:
        if self.tight:
            return super().bound_notes()
        keep, cut, r_bar, p_eff = self._cut()
        return {"upper": (f"dominating pair that is not tight: a batch cut or not, shown to the adversary "
                          f"(P(cut) = {cut:.4g}), the cut part as the radius-2 subsampled pair at rate "
                          f"{r_bar:.4g}"),
                "lower": (f"a concrete pair of neighbouring datasets (the other records contribute 0): the "
                          f"subsampled pair at the record's inclusion rate {p_eff:.6g}")}

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        if not self.tight:
            raise ValueError("TruncatedPoissonGaussian is bounded by two pairs (it is not tight): use its .pld()")
        return self.parts()[0][1].loss_model(direction)
