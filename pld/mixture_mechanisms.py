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
from pld import adjacency as adj
from pld._mixture_models import LossUnionModel, mixture_pair_model
from pld.mechanisms import Gaussian, Mechanism, PoissonSampled, _check_substitute_gaussian, _prob_vector


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
class TruncatedPoissonGaussian(Mechanism):
    """Gaussian on a Poisson sample truncated to at most ``max_batch_size`` records.

    Each of the ``dataset_size`` records joins the batch independently with
    probability ``sampling_rate`` = p; a batch larger than B =
    ``max_batch_size`` is cut to a uniformly random subset of size B; the sum
    of the batch (one record contributes at most norm 1) gets ``N(0, sigma^2
    I)`` noise.  (dp_accounting's ``TruncatedSubsampledGaussianDpEvent``;
    arXiv:2508.15089.)

    Dominating pair (derived here).  Fix the neighbouring record ``x`` and let
    K be how many of the m other records are sampled.

    * ``K <= B - 1``: nothing is cut; given the others' sample the pair is the
      Poisson-subsampled Gaussian's at rate p, sensitivity 1.
    * ``K >= B``: ``x``, if sampled, survives the cut with probability
      ``B/(K+1)`` and then displaces one of the other batch members.  Writing
      the batch without ``x`` as a uniform (B-1)-subset T of the others plus
      one more member y, the output given (T, y) is ``(1-r) N(T + y) + r N(T +
      x)`` with ``r = pB/(K+1)``, against ``N(T + y)``.  (T, y) has the same law
      for every K >= B (a uniform B-subset of a uniform K-subset is a uniform
      B-subset), so averaging over K gives the rate
      ``r_bar = E[pB/(K+1) | K >= B] = B P(Bin(m+1,p) >= B+1) / ((m+1) P(Bin(m,p) >= B))``
      with displacement ``x - y``, norm <= 2: the subsampled pair with
      sensitivity 2 at rate ``r_bar``.

    Whether truncation happened is shown to the adversary (a disjoint union,
    :class:`pld._mixture_models.LossUnionModel`): weight ``w = P(Bin(m,p) <= B-1)`` on
    the first pair, ``1 - w`` on the second; joint convexity of the
    hockey-stick divergence makes the union dominate.  ``adjacency``:

    * ``"add_or_remove"``: the record removed leaves m = n - 1 others and the
      record added m = n; both directions (remove, add: Zhu, Dong & Wang 2022)
      must cover both, so the union is ``w(n) P1 + (w(n-1) - w(n)) P* +
      (1 - w(n-1)) P2(max r_bar)`` with ``P*`` the subsampled pair at rate p,
      sensitivity 2, which dominates both ``P1`` and ``P2``.
    * ``"substitute"``: m = n - 1; the parts are
      :class:`PoissonSampledSubstitute` pairs with radius 1 and 2 (``x - y``
      and ``x' - y`` both have norm <= 2).
    * ``"replace_special"`` (a record replaced by a zero record, which still
      counts towards the batch size): the add-or-remove pair at rate p when
      nothing is cut, the radius-2 substitute pair when something is.

    The weights are computed with scipy's binomial tails; a relative
    ``1e-12`` of each tight part's weight is moved to ``P*`` (which dominates
    them) and ``r_bar`` is rounded up, so rounding never favours the bound.
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
        with np.errstate(over="ignore"):  # a cut batch shifts by up to 2 (4 between two replacements)
            v.loss_scale("4 / sigma", 4.0 / self.sigma, v.MAX_GAUSSIAN_MU)

    @property
    def symmetric(self) -> bool:  # type: ignore[override]
        return self.adjacency == "substitute"

    def _cut(self, m: int) -> tuple[float, float, float]:
        """``(P(K <= B-1), P(K >= B), r_bar)`` for K ~ Bin(m, p) (``r_bar`` = nan if no cut)."""
        from scipy.stats import binom  # (scipy.stats costs ~0.3 s to import: only when used)

        p, b = self.sampling_rate, self.max_batch_size
        keep = float(binom.cdf(b - 1, m, p))
        cut = float(binom.sf(b - 1, m, p))
        if cut <= 0.0:
            return keep, 0.0, math.nan
        r = b * float(binom.sf(b, m + 1, p)) / ((m + 1) * cut)
        return keep, cut, min(p, r * (1.0 + _WEIGHT_SLACK))

    def parts(self) -> tuple:
        """``((weight, mechanism), ...)``: the pairs of the disjoint union, weights summing to one."""
        n, p, s = self.dataset_size, self.sampling_rate, self.sigma
        g1, g2 = Gaussian(s), Gaussian(s, sensitivity=2.0)
        low: Mechanism
        star: Mechanism
        cut: Mechanism
        if self.adjacency == "add_or_remove":
            cuts = [self._cut(m) for m in (n - 1, n)]
            low, star = PoissonSampled(g1, p), PoissonSampled(g2, p)
        else:
            cuts = [self._cut(n - 1)]
            star = PoissonSampledSubstitute(g2, p)
            low = PoissonSampled(g1, p) if self.adjacency == "replace_special" else PoissonSampledSubstitute(g1, p)
        rates = [c[2] for c in cuts if c[1] > 0.0]
        if not rates:  # fewer other records than B: nothing is ever cut
            return ((1.0, low),)
        cut = (PoissonSampled(g2, max(rates)) if self.adjacency == "add_or_remove"
               else PoissonSampledSubstitute(g2, max(rates)))
        w_low = min(c[0] for c in cuts) * (1.0 - _WEIGHT_SLACK)
        w_cut = min(c[1] for c in cuts) * (1.0 - _WEIGHT_SLACK)
        w_star = max(0.0, 1.0 - w_low - w_cut)
        return tuple((w, m) for w, m in ((w_low, low), (w_cut, cut), (w_star, star)) if w > 0.0)

    def loss_model(self, direction: str = "remove"):
        self._check_direction(direction)
        pieces = self.parts()
        if len(pieces) == 1:
            return pieces[0][1].loss_model(direction)
        return LossUnionModel(tuple((math.log(w), m.loss_model(direction)) for w, m in pieces))
