"""Exact privacy profiles of randomized response, alone and composed with a
Gaussian: finite sums over the binomial law of the composed loss (Kairouz, Oh
and Viswanath 2015), in log space.  Re-exported by :mod:`pld.baselines.exact`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pld import _special as special
from pld import _validate as _v
from pld.baselines.exact_core import FloatOrArray, gaussian_log_delta, log1mexp, scalar_or_array, solve_log_profile

__all__ = ["randomized_response_delta", "randomized_response_epsilon", "gaussian_rr_delta", "gaussian_rr_epsilon"]


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
    out = lp + log1mexp(np.minimum(d, 0.0))
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
    return scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


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
            log_a_minus_d = la + float(log1mexp(np.array([min(lt - la, 0.0)]))[0])
        eps = log_a_minus_d - lb
        out[idx] = min(max(eps, lo), hi)
    return scalar_or_array(out, scalar)


# ---------------------------------------------------------------------------
# Gaussian composed with randomized response
# ---------------------------------------------------------------------------


def _gaussian_rr_log_delta(eps: np.ndarray, mu: float, loss: np.ndarray, log_p: np.ndarray) -> np.ndarray:
    eps = np.asarray(eps, dtype=np.float64)
    shifted = eps[..., None] - loss  # (..., T+1)
    ld = gaussian_log_delta(shifted, mu) + log_p
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
    return scalar_or_array(np.clip(out, 0.0, 1.0), scalar)


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
        out[idx] = solve_log_profile(
            lambda x: _gaussian_rr_log_delta(np.array(x), mu_f, loss, log_p), lt, hi0
        )
    return scalar_or_array(out, scalar)
