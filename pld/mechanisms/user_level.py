"""User-level accounting: several records per user, and group privacy of a composition.

* :func:`example_level_user_step`: DP-SGD with example-level Poisson sampling
  when a user owns up to ``k`` records, each clipped on its own: adding or
  removing the user moves a step's clipped sum by at most ``J C`` with ``J ~
  Binomial(k, q)`` the number of the user's records sampled.  The pair is the
  mixture of Gaussians with sensitivities ``0 .. k`` and binomial weights
  (Charles, Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush, "Fine-Tuning
  Large Language Models with User-Level Differential Privacy", arXiv:2407.07737;
  jax_privacy's ``DpsgdTrainingUserLevelAccountant``; Ganesh 2024).
  **Tight**: given ``J`` the user's part of the sum has norm at most ``J C``
  and the vector mixture is dominated by the scalar one with the norms
  (Choquette-Choo et al. 2024, Cor. 4.7), while a user whose ``k`` clipped
  gradients are all the same vector of norm ``C`` (every step) realises it.
  With user-level sampling instead (a user joins a batch with probability
  ``q`` and the user's whole contribution is clipped to ``C``), the run is
  plain DP-SGD at the user level: ``pld.dpsgd(sigma, q, T)`` with ``q`` the
  user sampling rate.
* :func:`group_privacy`: the guarantee for a group of at most ``k`` records
  added or removed, part by part of a composition.
"""

from __future__ import annotations

import math

import numpy as np

from pld import _validate as v
from pld.mechanisms.base import Mechanism
from pld.mechanisms.basic import ApproxDP, DiscreteLaplace, Gaussian, Laplace, PureDP, RandomizedResponse
from pld.mechanisms.discrete_gaussian import DiscreteGaussian
from pld.mechanisms.matrix import Bracketed
from pld.mechanisms.mixtures import MixtureOfGaussians
from pld.mechanisms.subsampled import PoissonSampled

#: largest group / number of records per user
MAX_GROUP = 10**4


def binomial_weights(k: int, q: float) -> np.ndarray:
    """``P(Binomial(k, q) = j)`` for ``j = 0 .. k`` (log-space, summing to one)."""
    j = np.arange(k + 1)
    if q == 1.0:
        w = (j == k).astype(float)
        return w
    lg = np.array([math.lgamma(k + 1) - math.lgamma(i + 1) - math.lgamma(k - i + 1) for i in j])
    lw = lg + j * math.log(q) + (k - j) * math.log1p(-q)
    w = np.exp(lw - np.logaddexp.reduce(lw))
    return w / w.sum()


def example_level_user_step(noise_multiplier: float, sampling_rate: float, records_per_user: int,
                            sensitivity: float = 1.0) -> Mechanism:
    """One DP-SGD step for a user of ``records_per_user`` records under example-level Poisson sampling.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm ``C``.
    sampling_rate : float
        Every record joins the batch independently with this probability.
    records_per_user : int
        ``k``: the most records one user owns, in ``[1, 1e4]``.
    sensitivity : float
        One record's clipped contribution (``C`` in units of the clipping norm, 1).

    Returns
    -------
    Mechanism
        ``k = 1``: DP-SGD's ``PoissonSampled(Gaussian(sigma), q)``; otherwise
        ``MixtureOfGaussians(sigma, (0, C, ..., k C), Binomial(k, q))`` (tight;
        see the module docstring).
    """
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    q = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    k = v.integer("records_per_user", records_per_user, low=1, high=MAX_GROUP)
    s = v.real("sensitivity", sensitivity, low=0.0, low_open=True)
    if k == 1:
        return PoissonSampled(Gaussian(sigma, s), q)
    if q == 1.0:
        return Gaussian(sigma, k * s)
    w = binomial_weights(k, q)
    keep = w > 0.0
    return MixtureOfGaussians(sigma, tuple(float(s * j) for j in np.flatnonzero(keep)),
                              tuple(float(x) for x in w[keep]))


def group_mechanism(mechanism: Mechanism, k: int) -> Mechanism:
    """``mechanism``'s pair for a group of at most ``k`` records added or removed.

    Exact (tight) where the group pair is known in closed form:

    * a mechanism stated through a sensitivity (``Gaussian``, ``Laplace``,
      ``DiscreteLaplace``, ``DiscreteGaussian``): ``k`` records move the query
      by at most ``k`` times the sensitivity (triangle inequality along any
      chain of neighbours), and a counting query moves it by exactly that, so
      the pair is the mechanism at ``k`` times the sensitivity (the Gaussian:
      ``mu -> k mu``);
    * ``PoissonSampled(Gaussian)`` under add-or-remove: ``k`` records added
      or removed are each sampled independently, so the pair is the mixture
      of Gaussians with sensitivities ``0 .. k`` times the sensitivity and
      ``Binomial(k, q)`` weights (the user-level pair above; tight, the ``k``
      records' gradients aligned).

    Bounded, not tight, for a pair known only through a privacy parameter:
    ``PureDP(eps)`` and ``RandomizedResponse(eps)`` are ``k eps``-DP for
    groups of ``k`` and ``ApproxDP(eps, delta)`` is ``(k eps, delta (1 +
    e^eps + ... + e^{(k-1) eps}))``-DP (Dwork & Roth 2014, Thm 2.2 and its
    approximate form; Dong, Roth & Su 2022, Thm 2.14, give the same for these
    trade-off functions); the lower end is the mechanism's one-record pair
    (a group of at most ``k`` records contains a single record).  Any other
    mechanism raises ``ValueError``: no certified group bound is implemented
    for it.
    """
    k = v.integer("k", k, low=1, high=MAX_GROUP)
    if k == 1:
        return mechanism
    m = mechanism
    exact = type(m)  # (subclasses may change the pair: only the classes themselves)
    if isinstance(m, Gaussian) and exact is Gaussian:
        return Gaussian(m.sigma, k * m.sensitivity)
    if isinstance(m, Laplace) and exact is Laplace:
        return Laplace(m.scale, k * m.sensitivity)
    if isinstance(m, DiscreteLaplace) and exact is DiscreteLaplace:
        return DiscreteLaplace(m.scale, k * m.sensitivity)
    if isinstance(m, DiscreteGaussian) and exact is DiscreteGaussian:
        return DiscreteGaussian(m.sigma, k * m.sensitivity)
    if isinstance(m, PoissonSampled) and exact is PoissonSampled:
        base: Mechanism = m
        q = 1.0
        while isinstance(base, PoissonSampled):  # (nested sampling multiplies the rates)
            q *= base.sampling_rate
            base = base.mechanism
        if isinstance(base, Gaussian) and type(base) is Gaussian:
            return example_level_user_step(base.sigma, q, k, base.sensitivity)
    if isinstance(m, (PureDP, RandomizedResponse)) and exact in (PureDP, RandomizedResponse):
        eps = m.epsilon
        return _bounded(m, PureDP(k * eps), k, f"pure DP's group bound: PureDP({k} x {eps:g})")
    if isinstance(m, ApproxDP) and exact is ApproxDP:
        eps, d = m.epsilon, m.delta
        dk = d * sum(math.exp(i * eps) for i in range(k)) * (1.0 + 1e-12)
        if dk >= 1.0 - 1e-16:
            raise ValueError(f"group of {k}: ApproxDP({eps:g}, {d:g})'s group delta reaches 1 (nothing is certified)")
        return _bounded(m, ApproxDP(k * eps, dk), k, f"approximate DP's group bound: ApproxDP({k * eps:g}, {dk:.4g})")
    raise ValueError(f"group privacy of {type(mechanism).__name__} is not implemented: supported are Gaussian, "
                     "Laplace, DiscreteLaplace, DiscreteGaussian, PoissonSampled(Gaussian) (exact) and PureDP, "
                     "RandomizedResponse, ApproxDP (bounded)")


def _bounded(mechanism: Mechanism, upper: Mechanism, k: int, note: str) -> Bracketed:
    return Bracketed(name=f"Group{k}({type(mechanism).__name__})", upper=((upper, 1),),
                     lower=((mechanism, 1),), relation=mechanism.adjacency,
                     upper_note=f"groups of {k} records: {note} (an upper bound, not tight in general)",
                     lower_note="the one-record pair (a group of at most k records may hold one record)")


def group_privacy(pld_or_mechanism, k: int):
    """Group privacy: the PLD for a group of at most ``k`` records added or removed.

    The neighbouring relation becomes ``D`` against ``D'`` = ``D`` plus (or
    minus) a group of at most ``k`` records.  (Parts stated through a
    sensitivity or a privacy parameter hold for any ``k`` steps of their
    relation, substitutions included; the Poisson-subsampled Gaussian's
    binomial mixture is for the group added or removed as a whole.)

    Parameters
    ----------
    pld_or_mechanism : pld.PLD or Mechanism
        What ran (every part of a composition ran on the same data).
    k : int
        Group size, in ``[1, 1e4]``; ``1`` returns the PLD itself.

    Returns
    -------
    pld.PLD
        Each part replaced by its group pair (:func:`group_mechanism`): the
        same data pair at distance ``k`` for every part, so the group pairs
        compose.  Tight where every part's group pair is exact (Gaussian:
        ``mu -> k mu``; Poisson-subsampled Gaussian: the binomial mixture);
        otherwise ``tight`` is False and ``explain()`` says which part is
        bounded and how.

    Raises
    ------
    ValueError
        For a part whose group pair pld cannot certify (the message names it).
    """
    from pld.distribution import PLD  # (mechanisms sit below the PLD type)

    k = v.integer("k", k, low=1, high=MAX_GROUP)
    if isinstance(pld_or_mechanism, Mechanism):
        pld_or_mechanism = pld_or_mechanism.pld()
    if not isinstance(pld_or_mechanism, PLD):
        raise TypeError(f"group_privacy takes a pld.PLD or a mechanism, got {type(pld_or_mechanism).__name__}")
    if k == 1:
        return pld_or_mechanism
    parts = []
    for m, count in pld_or_mechanism.components:
        if not m.tight:
            raise ValueError(f"group privacy of {m!r}: its pair is not tight (no group bound is implemented for "
                             "bounded mechanisms)")
        parts.append((group_mechanism(m, k), count))
    return PLD(tuple(parts), value_discretization_interval=pld_or_mechanism.value_discretization_interval)


__all__ = ["binomial_weights", "example_level_user_step", "group_mechanism", "group_privacy"]
