"""Upper bounds on the total variation distance of a mechanism's pair.

``delta(0) = E_P[(1 - e^{-L})_+] = TV(P, Q)``, and total variation is
subadditive over independent compositions (a coupling of the product is the
product of couplings), so ``delta_T(eps) <= delta_T(0) <= sum_i k_i TV_i`` for
every ``eps >= 0``.  When that sum is at most ``delta`` the answer is
``epsilon = 0`` exactly, with no grid: a mechanism whose loss is below the
floating-point resolution (a sampling rate of 5e-324, ``ApproxDP(0, 0)``)
has nothing for a grid to resolve, and a tilt chosen for a tiny delta there
sent all its mass to +inf.

Closed forms (both directions of add-or-remove have the same TV):

* Gaussian, ``mu = sensitivity / sigma``: ``erf(mu / (2 sqrt 2))``;
* Laplace, ``c = sensitivity / scale``: ``1 - e^{-c/2}``;
* pairs made of atoms only: ``sum (P - Q)_+`` over the atoms;
* Poisson sampling at rate ``q`` (Zhu, Dong & Wang 2022 pairs):
  ``TV((1-q) Q + q P, Q) = q TV(P, Q)``;
* sampling without replacement, ``C_q(G_mu)`` (Dong, Roth & Su 2022): the
  tradeoff function's TV, ``max_a 1 - a - f(a)``, is a linear functional,
  maximal at a point of ``min(f_q, f_q^{-1})`` itself, so ``q TV(G_mu)``.

Every value is rounded up by a relative ``_SLACK``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["tv_upper", "composition_tv_upper"]

_SLACK = 1e-12


def tv_upper(mechanism) -> float | None:
    """An upper bound on the TV distance of ``mechanism``'s dominating pairs,
    or None for a mechanism without a closed form (``mechanism.tv_upper()``)."""
    return mechanism.tv_upper()


def gaussian_tv(mu: float) -> float:
    """TV of ``N(mu, 1)`` vs ``N(0, 1)``, ``erf(mu / (2 sqrt 2))``, rounded up."""
    return min(1.0, math.erf(mu / (2.0 * math.sqrt(2.0))) * (1 + _SLACK))


def laplace_tv(c: float) -> float:
    """TV of the Laplace pair with ``c = sensitivity / scale``, ``1 - e^{-c/2}``, rounded up."""
    return min(1.0, -math.expm1(-0.5 * c) * (1 + _SLACK))


def subsampled_gaussian_tv(sampling_rate: float, mu: float) -> float:
    """``q erf(mu / (2 sqrt 2))``, rounded up (sampling without replacement, ``C_q(G_mu)``)."""
    return min(1.0, sampling_rate * math.erf(mu / (2.0 * math.sqrt(2.0))) * (1 + _SLACK))


def subsampled_tv(sampling_rate: float, inner: float | None) -> float | None:
    """``q TV(P, Q)``: Poisson sampling (and sampling without replacement), rounded up."""
    return None if inner is None else min(1.0, sampling_rate * inner * (1 + _SLACK))


def atoms_tv(model) -> float:
    """``sum (P - Q)_+`` over the atoms of a pair made of atoms only, rounded up."""
    _, lp, lq = model.atoms()
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        p, q = np.exp(lp), np.exp(lq)
        diff = p - q
    # (each difference rounded: a few ulps of the terms themselves, which
    # for a tiny epsilon is all there is)
    tv = float(np.sum(np.where(diff > 0, diff, 0.0))) + 4.0 * 2.0 ** -53 * float(np.sum(p + q))
    return min(1.0, tv * (1 + _SLACK))


def composition_tv_upper(components) -> float | None:
    """``sum_i k_i TV_i`` over ``(mechanism, count)`` components, or None."""
    total = 0.0
    for m, k in components:
        tv = tv_upper(m)
        if tv is None:
            return None
        total += k * tv
    return min(1.0, total * (1 + _SLACK))
