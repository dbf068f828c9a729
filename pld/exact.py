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
from typing import Union

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from pld import _validate as _v

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

FloatOrArray = Union[float, np.ndarray]

# Floor used for log(delta) inside root finders, so that they never see -inf.
_LOG_FLOOR = -1.0e6


def _scalar_or_array(out: np.ndarray, scalar: bool) -> FloatOrArray:
    return float(out) if scalar else out


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate for all ``x`` (Maechler 2012).

    Returns ``-inf`` for ``x >= 0`` (where the true value is ``log(0)`` or
    undefined; callers only reach ``x > 0`` through rounding).
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape, -np.inf)
    neg = x < 0
    xn = x[neg]
    small = xn > -math.log(2.0)
    res = np.empty_like(xn)
    with np.errstate(divide="ignore"):
        res[small] = np.log(-np.expm1(xn[small]))
        res[~small] = np.log1p(-np.exp(xn[~small]))
    out[neg] = res
    return out


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
    sigma = _v.real_array("noise_multiplier", noise_multiplier, low=0.0, high=math.inf, low_open=True, high_open=True)[0]
    sens = _v.real_array("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)[0]
    if sigma.ndim or sens.ndim:
        raise TypeError("noise_multiplier and sensitivity must be scalars")
    t = _v.count("steps", steps)
    return float(sens) * math.sqrt(t) / float(sigma)


def _gaussian_log_delta(eps: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """``log delta(eps)`` of the mu-Gaussian pair; broadcasts; handles edge cases.

    ``delta = Phi(a) - e^eps Phi(b)``, ``a = mu/2 - eps/mu``, ``b = -mu/2 - eps/mu``,
    evaluated as ``log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a)))``.
    """
    eps, mu = np.broadcast_arrays(np.asarray(eps, dtype=np.float64), np.asarray(mu, dtype=np.float64))
    out = np.empty(eps.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # mu == 0: P == Q, delta = (1 - e^eps)_+ .
        zero = mu == 0
        out[zero] = np.where(eps[zero] < 0, _log1mexp(np.minimum(eps[zero], 0.0)), -np.inf)
        # mu == inf: disjoint supports, delta = 1 for every finite eps.
        inf_mu = np.isinf(mu) & ~zero
        out[inf_mu] = np.where(eps[inf_mu] == np.inf, -np.inf, 0.0)
        reg = ~zero & ~inf_mu
        e, m = eps[reg], mu[reg]
        a = m / 2.0 - e / m
        b = -m / 2.0 - e / m
        la = special.log_ndtr(a)
        lb = special.log_ndtr(b)
        d = e + lb - la
        res = la + _log1mexp(np.minimum(d, 0.0))
        res = np.where(e == np.inf, -np.inf, res)
        res = np.where(e == -np.inf, 0.0, res)
        out[reg] = res
    return out


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
    out = np.exp(_gaussian_log_delta(eps, m))
    return _scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def _solve_log_profile(log_delta_fn, log_target: float, hi0: float) -> float:
    """Smallest ``eps >= 0`` with ``log_delta_fn(eps) <= log_target``.

    ``log_delta_fn`` must be continuous and strictly decreasing where finite and
    ``log_delta_fn(0) > log_target``. Uses ``brentq`` on a bracket that doubles.
    """

    def f(x: float) -> float:
        return max(float(log_delta_fn(x)), _LOG_FLOOR) - max(log_target, _LOG_FLOOR)

    lo, hi = 0.0, max(hi0, 1.0)
    while f(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:  # pragma: no cover - only for absurd inputs
            return math.inf
    if f(lo) <= 0.0:
        return lo
    return float(optimize.brentq(f, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))


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
        if float(_gaussian_log_delta(0.0, mi)) <= log_target:
            out[idx] = 0.0
            continue
        hi0 = mi * mi / 2.0 - mi * float(special.ndtri(di))
        out[idx] = _solve_log_profile(lambda x, mi=mi: _gaussian_log_delta(x, mi), log_target, hi0)
    return _scalar_or_array(out, scalar)


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
    return _scalar_or_array(np.asarray(out, dtype=np.float64), scalar)


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
    return _scalar_or_array(out, scalar)


# ---------------------------------------------------------------------------
# Randomized response
# ---------------------------------------------------------------------------


def _rr_tables(epsilon0: float, steps: int):
    """Losses and log tail sums for T-fold binary randomized response.

    Returns ``(loss, tail_p, tail_q)`` where ``loss[i] = (2i - T) eps0`` is
    non-decreasing and ``tail_p[j] = log P(I >= j)``, ``tail_q[j] = log Q(I >= j)``
    for ``j = 0..T+1`` (``tail[T+1] = -inf``), with ``I ~ Bin(T, p)`` under P
    and ``I ~ Bin(T, 1-p)`` under Q, ``p = e^eps0 / (1 + e^eps0)``.
    """
    i = np.arange(steps + 1, dtype=np.float64)
    log_comb = special.gammaln(steps + 1.0) - special.gammaln(i + 1.0) - special.gammaln(steps - i + 1.0)
    # log p and log(1-p) via log_expit: exact even when p rounds to 1 in float.
    lp = float(special.log_expit(epsilon0))
    lq = float(special.log_expit(-epsilon0))
    log_p = log_comb + i * lp + (steps - i) * lq
    log_q = log_comb + i * lq + (steps - i) * lp
    loss = (2.0 * i - steps) * epsilon0
    tail_p = np.append(np.logaddexp.accumulate(log_p[::-1])[::-1], -np.inf)
    tail_q = np.append(np.logaddexp.accumulate(log_q[::-1])[::-1], -np.inf)
    return loss, tail_p, tail_q


def _rr_log_delta_from_tables(eps: np.ndarray, loss, tail_p, tail_q) -> np.ndarray:
    j = np.searchsorted(loss, eps, side="right")  # first index with loss > eps
    lp = tail_p[j]
    lq = tail_q[j]
    with np.errstate(invalid="ignore"):
        d = np.where(np.isfinite(lp), eps + lq - lp, -np.inf)
    out = lp + _log1mexp(np.minimum(d, 0.0))
    return np.where(np.isfinite(lp), out, -np.inf)


def randomized_response_delta(epsilon: ArrayLike, epsilon0: float, steps: int) -> FloatOrArray:
    """Exact privacy profile of ``steps``-fold binary randomized response.

    One step reports the true bit with probability ``p = e^eps0/(1+e^eps0)``;
    the pair is ``P = Bern(p)``, ``Q = Bern(1-p)`` and the loss is ``+-eps0``
    [KOV15]_. After ``T`` steps the loss is ``L = (2I - T) eps0`` with
    ``I ~ Bin(T, p)`` under ``P`` and ``I ~ Bin(T, 1-p)`` under ``Q``, so

    .. math::

        \\delta(\\varepsilon) = \\sum_{i:\\,l_i > \\varepsilon} P(i)
            - e^{\\varepsilon} \\sum_{i:\\,l_i > \\varepsilon} Q(i),
        \\qquad Q(i) = P(i)\\, e^{-l_i}.

    Both tail sums are accumulated in log space from the binomial log-pmf
    ``log C(T,i) + i log p + (T-i) log(1-p)`` (with ``log p`` from
    ``scipy.special.log_expit``, so ``eps0`` may exceed 37 where ``p`` rounds
    to 1 in floating point; ``scipy.stats.binom.logpmf`` would return
    ``-inf`` there).

    Parameters
    ----------
    epsilon : float or array_like
        Real values.
    epsilon0 : float
        Per-step parameter in ``[0, inf)``.
    steps : int
        Number of steps ``T >= 0``.
    """
    scalar = np.ndim(epsilon) == 0
    eps = _v.real_array("epsilon", epsilon)[0]
    e0 = _v.real_scalar("epsilon0", epsilon0, low=0.0, high=math.inf, high_open=True)
    t = _v.count("steps", steps)
    tables = _rr_tables(e0, t)
    out = np.exp(_rr_log_delta_from_tables(eps, *tables))
    return _scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def randomized_response_epsilon(delta: ArrayLike, epsilon0: float, steps: int) -> FloatOrArray:
    """Exact epsilon of ``steps``-fold binary randomized response.

    :math:`\\delta(\\varepsilon)` is piecewise: between consecutive distinct
    losses :math:`l_{k-1} \\le \\varepsilon < l_k` the set
    :math:`\\{i : l_i > \\varepsilon\\}` is fixed, so
    :math:`\\delta(\\varepsilon) = A - e^{\\varepsilon} B` with constant tail
    sums ``A = P(L >= l_k)``, ``B = Q(L >= l_k)``. The function locates the piece
    containing the answer by evaluating the profile at the breakpoints
    ``{0} U {l_i > 0}``, then solves ``A - e^eps B = delta`` on that piece in
    closed form, :math:`\\varepsilon = \\log(A - \\delta) - \\log B` (clipped to the
    piece). The result is exact up to rounding, not a bisection estimate.

    Parameters
    ----------
    delta : float or array_like
        Target in ``[0, 1]``; ``delta = 0`` gives ``T * eps0`` (pure DP).
    epsilon0 : float
        Per-step parameter in ``[0, inf)``.
    steps : int
        Number of steps ``T >= 0``.

    Returns
    -------
    float or ndarray
        Smallest ``epsilon >= 0`` with ``delta(epsilon) <= delta``.
    """
    scalar = np.ndim(delta) == 0
    d = _v.real_array("delta", delta, low=0.0, high=1.0)[0]
    e0 = _v.real_scalar("epsilon0", epsilon0, low=0.0, high=math.inf, high_open=True)
    t = _v.count("steps", steps)
    loss, tail_p, tail_q = _rr_tables(e0, t)
    pos = np.unique(loss[loss > 0])
    breaks = np.concatenate(([0.0], pos))
    log_d_breaks = _rr_log_delta_from_tables(breaks, loss, tail_p, tail_q)
    out = np.zeros(d.shape)
    with np.errstate(divide="ignore"):
        log_target = np.log(d)
    for idx in np.ndindex(d.shape):
        lt = float(log_target[idx])
        if log_d_breaks[0] <= lt:
            out[idx] = 0.0
            continue
        # first breakpoint whose delta is <= target; exists because delta(max loss) = 0
        m = int(np.argmax(log_d_breaks <= lt))
        lo, hi = float(breaks[m - 1]), float(breaks[m])
        j = int(np.searchsorted(loss, lo, side="right"))
        la, lb = float(tail_p[j]), float(tail_q[j])
        if lt == -math.inf:
            log_a_minus_d = la
        else:
            log_a_minus_d = la + float(_log1mexp(np.array([min(lt - la, 0.0)]))[0])
        eps = log_a_minus_d - lb
        out[idx] = min(max(eps, lo), hi)
    return _scalar_or_array(out, scalar)


# ---------------------------------------------------------------------------
# Gaussian composed with randomized response
# ---------------------------------------------------------------------------


def _gaussian_rr_log_delta(eps: np.ndarray, mu: float, loss: np.ndarray, log_p: np.ndarray) -> np.ndarray:
    eps = np.asarray(eps, dtype=np.float64)
    shifted = eps[..., None] - loss  # (..., T+1)
    ld = _gaussian_log_delta(shifted, mu) + log_p
    return special.logsumexp(ld, axis=-1)


def _rr_log_pmf(epsilon0: float, steps: int):
    i = np.arange(steps + 1, dtype=np.float64)
    log_comb = special.gammaln(steps + 1.0) - special.gammaln(i + 1.0) - special.gammaln(steps - i + 1.0)
    log_p = log_comb + i * float(special.log_expit(epsilon0)) + (steps - i) * float(special.log_expit(-epsilon0))
    loss = (2.0 * i - steps) * epsilon0
    return loss, log_p


def gaussian_rr_delta(epsilon: ArrayLike, mu: float, epsilon0: float, steps_rr: int) -> FloatOrArray:
    """Exact profile of a mu-Gaussian composed with ``steps_rr``-fold randomized response.

    Derivation. The composed pair is ``P = N(mu,1) x P_RR``, ``Q = N(0,1) x Q_RR``
    and its loss is ``L = L_G(y) + l_K`` where ``K`` (the RR count) is
    independent of ``y`` under ``P``. Because the hockey stick is an expectation
    under ``P`` of a function of the loss,

    .. math::

        \\delta(\\varepsilon) = \\mathbb{E}_P\\big[(1 - e^{\\varepsilon - L_G - l_K})_+\\big]
          = \\sum_k P(K = k)\\, \\mathbb{E}\\big[(1 - e^{(\\varepsilon - l_k) - L_G})_+\\big]
          = \\sum_k P(K = k)\\, \\delta_G(\\varepsilon - l_k),

    with ``l_k = (2k - T) eps0``, ``P(K = k) = Bin(k; T, e^eps0/(1+e^eps0))`` and
    ``delta_G`` the Gaussian profile (:func:`gaussian_delta`), which is valid for
    every real argument (negative shifted epsilons included). No point mass at
    ``+inf`` arises because both components have ``Q > 0`` wherever ``P > 0``.
    The sum is taken with ``logsumexp`` over the log terms.

    Parameters
    ----------
    epsilon : float or array_like
        Real values.
    mu : float
        Gaussian-DP parameter in ``[0, inf)``.
    epsilon0 : float
        RR parameter in ``[0, inf)``.
    steps_rr : int
        Number of RR steps ``>= 0``.
    """
    scalar = np.ndim(epsilon) == 0
    eps = _v.real_array("epsilon", epsilon)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf, high_open=True)[0]
    if m.ndim:
        raise TypeError("mu must be a scalar")
    e0 = _v.real_scalar("epsilon0", epsilon0, low=0.0, high=math.inf, high_open=True)
    t = _v.count("steps_rr", steps_rr)
    loss, log_p = _rr_log_pmf(e0, t)
    out = np.exp(_gaussian_rr_log_delta(eps, float(m), loss, log_p))
    return _scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


def gaussian_rr_epsilon(delta: ArrayLike, mu: float, epsilon0: float, steps_rr: int) -> FloatOrArray:
    """Inverse of :func:`gaussian_rr_delta`: smallest ``eps >= 0`` with ``delta(eps) <= delta``.

    For ``mu > 0`` the profile is a positive mixture of strictly decreasing
    Gaussian profiles, so the root of ``log delta(eps) = log delta`` is found
    with ``brentq`` on a doubling bracket (as in :func:`gaussian_epsilon`).
    With ``mu = 0`` this reduces to :func:`randomized_response_epsilon`.

    Parameters
    ----------
    delta : float or array_like
        Target in ``[0, 1]``.
    mu, epsilon0, steps_rr
        As in :func:`gaussian_rr_delta`.
    """
    scalar = np.ndim(delta) == 0
    d = _v.real_array("delta", delta, low=0.0, high=1.0)[0]
    m = _v.real_array("mu", mu, low=0.0, high=math.inf, high_open=True)[0]
    if m.ndim:
        raise TypeError("mu must be a scalar")
    e0 = _v.real_scalar("epsilon0", epsilon0, low=0.0, high=math.inf, high_open=True)
    t = _v.count("steps_rr", steps_rr)
    mu_f = float(m)
    if mu_f == 0.0:
        return randomized_response_epsilon(delta, e0, t)
    loss, log_p = _rr_log_pmf(e0, t)
    out = np.empty(d.shape)
    hi0 = t * e0 + mu_f * mu_f / 2.0 + mu_f * 40.0
    for idx in np.ndindex(d.shape):
        di = float(d[idx])
        if di == 0.0:
            out[idx] = math.inf
            continue
        lt = math.log(di)
        if float(_gaussian_rr_log_delta(np.array(0.0), mu_f, loss, log_p)) <= lt:
            out[idx] = 0.0
            continue
        out[idx] = _solve_log_profile(
            lambda x: _gaussian_rr_log_delta(np.array(x), mu_f, loss, log_p), lt, hi0
        )
    return _scalar_or_array(out, scalar)


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
    return _scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


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
    return _scalar_or_array(out, scalar)
