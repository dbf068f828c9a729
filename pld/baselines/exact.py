"""Exact privacy profiles used as references by the tests and the benchmarks.

Every function here evaluates a closed form (or a finite sum) for the
hockey-stick divergence of a dominating pair ``(P, Q)``,

.. math::

    \\delta(\\varepsilon) = \\mathbb{E}_{y\\sim P}\\big[(1 - e^{\\varepsilon - L(y)})_+\\big]
                          = P(L > \\varepsilon) - e^{\\varepsilon} Q(L > \\varepsilon),
    \\qquad L(y) = \\log \\frac{P(y)}{Q(y)},

and its inverse :math:`\\varepsilon(\\delta) = \\min\\{\\varepsilon \\ge 0 :
\\delta(\\varepsilon) \\le \\delta\\}`. Nothing here discretises a privacy-loss
distribution; the functions are the ground truth the PLD engine is checked
against.

All computations are done in log space (``scipy.special.log_ndtr``,
``logaddexp``) so that they neither overflow for :math:`\\varepsilon` up to
``1e4`` nor lose relative accuracy for :math:`\\delta` down to ``1e-300``.
Functions accept scalars or array-likes (broadcast together) and return a
Python ``float`` when every argument is a scalar, an ``ndarray`` otherwise.

References
----------
.. [BW18] B. Balle and Y.-X. Wang. "Improving the Gaussian mechanism for
   differential privacy: analytical calibration and optimal denoising."
   ICML 2018, Theorem 8.
.. [DRS19] J. Dong, A. Roth and W. Su. "Gaussian differential privacy."
   2019 (mu-GDP; T-fold composition of Gaussians is sqrt(T)-scaled).
.. [KOV15] P. Kairouz, S. Oh and P. Viswanath. "The composition theorem for
   differential privacy." ICML 2015 (randomized response).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pld import _special as special
from pld import _validate as _v
from pld.baselines.exact_core import FloatOrArray, gaussian_log_delta, scalar_or_array, solve_log_profile
from pld.baselines.exact_rr import (
    _rr_tables,  # noqa: F401  (the tests check its tables)
    gaussian_rr_delta,
    gaussian_rr_epsilon,
    randomized_response_delta,
    randomized_response_epsilon,
)

__all__ = [
    "gaussian_mu",
    "gaussian_delta",
    "gaussian_epsilon",
    "privacy_loss_tail_delta_gaussian",
    "privacy_loss_tail_epsilon_gaussian",
    "randomized_response_delta",
    "randomized_response_epsilon",
    "gaussian_rr_delta",
    "gaussian_rr_epsilon",
    "laplace_delta",
    "laplace_epsilon",
]

# ---------------------------------------------------------------------------
# Gaussian mechanism
# ---------------------------------------------------------------------------


def gaussian_mu(noise_multiplier: float, steps: int = 1, sensitivity: float = 1.0) -> float:
    """Gaussian-DP parameter of ``steps`` Gaussian releases.

    A release ``f(x) + N(0, sigma^2)`` with L2 sensitivity ``s`` has privacy
    loss ``L ~ N(mu^2/2, mu^2)`` with ``mu = s/sigma``; ``T`` independent
    releases compose to ``mu = s * sqrt(T) / sigma`` [DRS19]_.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation ``sigma`` (in the units of ``sensitivity``;
        with the default ``sensitivity=1`` this is the noise multiplier).
        Must be in ``(0, inf)``.
    steps : int, default 1
        Number ``T >= 0`` of composed releases.
    sensitivity : float, default 1.0
        L2 sensitivity ``s`` in ``[0, inf)``.

    Returns
    -------
    float
        ``mu = sensitivity * sqrt(steps) / noise_multiplier``.
    """
    sigma = _v.real_array("noise_multiplier", noise_multiplier,
                          low=0.0, high=math.inf, low_open=True, high_open=True)[0]
    sens = _v.real_array("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)[0]
    if sigma.ndim or sens.ndim:
        raise TypeError("noise_multiplier and sensitivity must be scalars")
    t = _v.count("steps", steps)
    return float(sens) * math.sqrt(t) / float(sigma)


def gaussian_delta(epsilon: ArrayLike, mu: ArrayLike) -> FloatOrArray:
    """Exact privacy profile of the Gaussian mechanism.

    For ``T`` releases with sensitivity ``s`` and noise ``sigma`` the pair is
    ``P = N(mu, 1)``, ``Q = N(0, 1)`` with ``mu = s * sqrt(T) / sigma`` and
    (Balle & Wang 2018, Theorem 8 [BW18]_)

    .. math::

        \\delta(\\varepsilon) = \\Phi\\Big(\\frac{\\mu}{2} - \\frac{\\varepsilon}{\\mu}\\Big)
            - e^{\\varepsilon}\\, \\Phi\\Big(-\\frac{\\mu}{2} - \\frac{\\varepsilon}{\\mu}\\Big),

    valid for every real :math:`\\varepsilon` (for :math:`\\varepsilon \\to -\\infty`
    it tends to :math:`1 - e^{\\varepsilon}`). It is evaluated as
    ``exp(log_ndtr(a)) * (-expm1(eps + log_ndtr(b) - log_ndtr(a)))``, which
    avoids the cancellation of the two terms and any overflow of ``e^eps``.

    Parameters
    ----------
    epsilon : float or array_like
        Any real values (``+-inf`` allowed).
    mu : float or array_like
        Gaussian-DP parameter in ``[0, inf]`` (see :func:`gaussian_mu`).
        ``mu = 0`` gives ``(1 - e^eps)_+``, ``mu = inf`` gives 1.

    Returns
    -------
    float or ndarray
        ``delta(epsilon)`` in ``[0, 1]``.
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(mu) == 0
    eps = _v.real_array("epsilon", epsilon)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf)[0]
    out = np.exp(gaussian_log_delta(eps, m))
    return scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def gaussian_epsilon(delta: ArrayLike, mu: ArrayLike) -> FloatOrArray:
    """Exact epsilon of the Gaussian mechanism: inverse of :func:`gaussian_delta`.

    Returns the smallest :math:`\\varepsilon \\ge 0` with
    :math:`\\delta(\\varepsilon) \\le \\delta`. Since :math:`\\delta(\\cdot)` is
    continuous and strictly decreasing for ``mu > 0``, this is the root of
    :math:`\\log\\delta(\\varepsilon) = \\log\\delta`, found with ``brentq`` (relative
    tolerance ``4u``) on a bracket ``[0, hi]`` where ``hi`` starts at the
    privacy-loss-tail epsilon (an upper bound, since ``delta(eps) <= P(L > eps)``)
    and doubles until it brackets. Solving in log space keeps full relative
    accuracy down to ``delta = 1e-300``.

    Parameters
    ----------
    delta : float or array_like
        Target in ``[0, 1]``. ``delta = 0`` gives ``inf`` (for ``mu > 0``);
        ``delta >= delta(0)`` gives ``0.0``.
    mu : float or array_like
        Gaussian-DP parameter in ``[0, inf)``.

    Returns
    -------
    float or ndarray
        ``epsilon >= 0``.
    """
    scalar = np.ndim(delta) == 0 and np.ndim(mu) == 0
    d = _v.real_array("delta", delta, low=0.0, high=1.0)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf, high_open=True)[0]
    d, m = np.broadcast_arrays(d, m)
    out = np.empty(d.shape)
    for idx in np.ndindex(d.shape):
        di, mi = float(d[idx]), float(m[idx])
        if mi == 0.0:
            out[idx] = 0.0
            continue
        if di == 0.0:
            out[idx] = math.inf
            continue
        log_target = math.log(di)
        if float(gaussian_log_delta(0.0, mi)) <= log_target:
            out[idx] = 0.0
            continue
        hi0 = mi * mi / 2.0 - mi * float(special.ndtri(di))
        out[idx] = solve_log_profile(lambda x, mi=mi: gaussian_log_delta(x, mi), log_target, hi0)
    return scalar_or_array(out, scalar)


def privacy_loss_tail_delta_gaussian(epsilon: ArrayLike, mu: ArrayLike) -> FloatOrArray:
    """Tail probability :math:`P(L > \\varepsilon)` for ``L ~ N(mu^2/2, mu^2)``.

    This is the privacy loss of the mu-Gaussian pair under ``P``:
    :math:`P(L > \\varepsilon) = \\Phi((\\mu^2/2 - \\varepsilon)/\\mu)`. It upper
    bounds :func:`gaussian_delta` (a sufficient, not tight, check).

    Parameters
    ----------
    epsilon : float or array_like
        Real values.
    mu : float or array_like
        Gaussian-DP parameter in ``(0, inf)``.
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(mu) == 0
    eps = _v.real_array("epsilon", epsilon)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf, low_open=True, high_open=True)[0]
    out = special.ndtr((m * m / 2.0 - eps) / m)
    return scalar_or_array(np.asarray(out, dtype=np.float64), scalar)


def privacy_loss_tail_epsilon_gaussian(delta: ArrayLike, mu: ArrayLike) -> FloatOrArray:
    """Privacy-loss-tail epsilon of the Gaussian mechanism.

    The smallest :math:`\\varepsilon \\ge 0` with :math:`P(L > \\varepsilon) \\le
    \\delta` for :math:`L \\sim N(\\mu^2/2, \\mu^2)`:

    .. math::

        \\varepsilon = \\max\\big(0,\\ \\mu^2/2 - \\mu\\, \\Phi^{-1}(\\delta)\\big).

    Because :math:`\\delta(\\varepsilon) \\le P(L > \\varepsilon)` this is a valid
    but loose epsilon (the seed lab's "tail epsilon"). ``ndtri(delta)`` is
    accurate for tiny ``delta`` (no ``1 - delta`` is formed).

    Parameters
    ----------
    delta : float or array_like
        Target in ``[0, 1]`` (``0`` gives ``inf``).
    mu : float or array_like
        Gaussian-DP parameter in ``(0, inf)``.
    """
    scalar = np.ndim(delta) == 0 and np.ndim(mu) == 0
    d = _v.real_array("delta", delta, low=0.0, high=1.0)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf, low_open=True, high_open=True)[0]
    with np.errstate(invalid="ignore"):
        out = m * m / 2.0 - m * special.ndtri(d)
    out = np.maximum(np.asarray(out, dtype=np.float64), 0.0)
    return scalar_or_array(out, scalar)


# ---------------------------------------------------------------------------
# Laplace mechanism
# ---------------------------------------------------------------------------


def _laplace_r(scale: float, sensitivity: float) -> float:
    b = _v.real_array("scale", scale, low=0.0, high=math.inf, low_open=True, high_open=True)[0]
    s = _v.real_array("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)[0]
    if b.ndim or s.ndim:
        raise TypeError("scale and sensitivity must be scalars")
    return float(s) / float(b)


def laplace_delta(epsilon: ArrayLike, scale: float, sensitivity: float = 1.0) -> FloatOrArray:
    """Exact privacy profile of the Laplace mechanism.

    Derivation. Take ``P = Lap(0, b)``, ``Q = Lap(s, b)`` and ``r = s/b``. The
    loss ``L(y) = (|y - s| - |y|)/b`` equals ``r`` for ``y <= 0``, ``-r`` for
    ``y >= s`` and ``(s - 2y)/b`` in between. For ``|eps| <= r``,
    ``L > eps  <=>  y < y* = (s - b eps)/2 in [0, s]`` and

    .. math::

        P(y < y^*) = 1 - \\tfrac12 e^{-(r-\\varepsilon)/2},\\qquad
        Q(y < y^*) = \\tfrac12 e^{-(r+\\varepsilon)/2},

    so :math:`\\delta(\\varepsilon) = P - e^{\\varepsilon} Q = 1 - e^{(\\varepsilon - r)/2}`.
    For ``eps >= r`` no output has ``L > eps`` and ``delta = 0``; for
    ``eps < -r`` every output does and ``delta = 1 - e^eps E_P[e^{-L}] = 1 - e^eps``.
    The three pieces agree at ``eps = +-r`` (continuity).

    Parameters
    ----------
    epsilon : float or array_like
        Real values.
    scale : float
        Laplace scale ``b`` in ``(0, inf)``.
    sensitivity : float, default 1.0
        L1 sensitivity ``s`` in ``[0, inf)``.
    """
    scalar = np.ndim(epsilon) == 0
    eps = _v.real_array("epsilon", epsilon)[0]
    r = _laplace_r(scale, sensitivity)
    with np.errstate(over="ignore"):
        mid = -np.expm1((np.minimum(eps, r) - r) / 2.0)
        low = -np.expm1(np.minimum(eps, 0.0))
    out = np.where(eps >= r, 0.0, np.where(eps < -r, low, mid))
    return scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def laplace_epsilon(delta: ArrayLike, scale: float, sensitivity: float = 1.0) -> FloatOrArray:
    """Exact epsilon of the Laplace mechanism: inverse of :func:`laplace_delta`.

    On ``[0, r]`` the profile is ``1 - e^{(eps - r)/2}``, hence
    ``eps(delta) = max(0, r + 2 log(1 - delta))`` (``r`` for ``delta = 0``).

    Parameters
    ----------
    delta : float or array_like
        Target in ``[0, 1]``.
    scale, sensitivity
        As in :func:`laplace_delta`.
    """
    scalar = np.ndim(delta) == 0
    d = _v.real_array("delta", delta, low=0.0, high=1.0)[0]
    r = _laplace_r(scale, sensitivity)
    with np.errstate(divide="ignore"):
        out = np.maximum(r + 2.0 * np.log1p(-d), 0.0)
    return scalar_or_array(out, scalar)
