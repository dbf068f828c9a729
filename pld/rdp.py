"""Renyi-DP (RDP) accountant: per-mechanism RDP curves, composition, conversion.

A mechanism ``M`` satisfies ``(alpha, r_alpha)``-RDP if the Renyi divergence of
order ``alpha`` between its output distributions on neighbouring inputs is at
most ``r_alpha`` (Mironov 2017 [Mir17]_):

.. math::

    D_\\alpha(P\\|Q) = \\frac{1}{\\alpha - 1}\\log \\mathbb{E}_{Q}\\Big[\\Big(\\frac{P}{Q}\\Big)^{\\alpha}\\Big].

RDP composes additively: the curve of a composition is the sum of the curves,
evaluated order by order. An RDP curve is converted to ``(epsilon, delta)``-DP by
minimising a conversion bound over the orders:

* classic (Mironov 2017, Prop. 3): ``eps = r_alpha + log(1/delta)/(alpha - 1)``;
* improved (Canonne, Kamath & Steinke 2020 [CKS20]_, Prop. 12; Balle et al.
  2020 [BBG+20]_, Thm. 21; Asoodeh et al. 2020, arXiv:2001.05990, Eq. 20):
  ``eps = r_alpha + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha - 1)``.

Both are minimised over a grid of orders and then refined by a continuous
one-dimensional minimisation in ``log alpha`` around the best grid order.

Only numpy/scipy are used at runtime (``dp_accounting`` is a test dependency).

References
----------
.. [Mir17] I. Mironov. "Renyi differential privacy." CSF 2017 (arXiv:1702.07476).
.. [MTZ19] I. Mironov, K. Talwar and L. Zhang. "Renyi differential privacy of
   the sampled Gaussian mechanism." arXiv:1908.10530, 2019.
.. [CKS20] C. Canonne, G. Kamath and T. Steinke. "The discrete Gaussian for
   differential privacy." NeurIPS 2020 (arXiv:2004.00010), Prop. 12.
.. [BBG+20] B. Balle, G. Barthe, M. Gaboardi, J. Hsu and T. Sato. "Hypothesis
   testing interpretations and Renyi differential privacy." AISTATS 2020.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from pld import _validate as _v

__all__ = [
    "DEFAULT_ORDERS",
    "rdp_gaussian",
    "rdp_subsampled_gaussian",
    "rdp_laplace",
    "rdp_randomized_response",
    "epsilon_from_rdp",
    "delta_from_rdp",
    "RdpCurve",
    "RdpAccountant",
    "dpsgd_rdp_epsilon",
]

FloatOrArray = Union[float, np.ndarray]
Conversion = Literal["improved", "classic"]
RdpFunction = Callable[[np.ndarray], np.ndarray]

#: Default grid of orders: fine fractional orders in (1, 2), every integer in
#: [2, 256] and a sparse set of large orders up to 4096 (small delta and large
#: epsilon need large orders; tiny noise needs orders close to 1). The
#: continuous refinement in :meth:`RdpCurve.epsilon` fills the gaps.
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [
        1.0 + np.arange(1, 20) / 20.0,  # 1.05, 1.10, ..., 1.95
        np.arange(2, 257, dtype=np.float64),
        np.array([288, 320, 384, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096], dtype=np.float64),
    ]
)
DEFAULT_ORDERS.setflags(write=False)

# Fractional-order series: relative truncation tolerance and term budget.
_FRAC_TOL = 1e-16
_FRAC_MAX_TERMS = 1 << 21


def _finish(out: np.ndarray, scalar: bool) -> FloatOrArray:
    return float(out) if scalar else out


# ---------------------------------------------------------------------------
# per-mechanism RDP curves
# ---------------------------------------------------------------------------


def rdp_gaussian(alpha: ArrayLike, sigma: float, sensitivity: float = 1.0) -> FloatOrArray:
    """RDP of the Gaussian mechanism: ``D_alpha = alpha * s^2 / (2 sigma^2)``.

    Mironov 2017 [Mir17]_, Prop. 7. Exact (both directions) for every
    ``alpha >= 1``; ``alpha = 1`` is the KL divergence and ``alpha = inf`` gives
    ``inf`` (unless ``s = 0``).

    Parameters
    ----------
    alpha : float or array_like
        Orders in ``[1, inf]``.
    sigma : float
        Noise standard deviation in ``(0, inf)``.
    sensitivity : float, default 1.0
        L2 sensitivity ``s`` in ``[0, inf)``.
    """
    scalar = np.ndim(alpha) == 0
    a = _v.real_array("alpha", alpha, low=1.0)[0]
    sig = _v.real_scalar("sigma", sigma, low=0.0, high=math.inf, low_open=True, high_open=True)
    s = _v.real_scalar("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)
    c = s * s / (2.0 * sig * sig)
    out = np.zeros_like(a) if c == 0.0 else a * c
    return _finish(out, scalar)


def _log_a_int(q: float, sigma: float, alpha: int) -> float:
    """``log A_alpha`` for integer ``alpha`` (Mironov, Talwar & Zhang 2019, Sec. 3.3).

    ``A_alpha = sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2 - k)/(2 sigma^2))``.
    Because the same sum without the exponential equals 1, we evaluate
    ``A_alpha - 1 = sum_{k>=2} C(alpha,k)(1-q)^(alpha-k) q^k expm1((k^2-k)/(2 sigma^2))``
    (all terms positive) and return ``log1p(A_alpha - 1)``: this keeps full
    relative accuracy when the RDP is tiny (small ``q``, large ``sigma``).
    """
    if alpha < 2:
        return 0.0
    k = np.arange(2, alpha + 1, dtype=np.float64)
    log_comb = special.gammaln(alpha + 1.0) - special.gammaln(k + 1.0) - special.gammaln(alpha - k + 1.0)
    x = (k * k - k) / (2.0 * sigma * sigma)
    # log(expm1(x)) = x + log(1 - exp(-x)), x > 0 here.
    log_expm1 = x + np.log(-np.expm1(-x))
    terms = log_comb + k * math.log(q) + (alpha - k) * math.log1p(-q) + log_expm1
    log_a_minus_1 = float(special.logsumexp(terms))
    return float(np.logaddexp(0.0, log_a_minus_1))


def _log_abs_comb_and_sign(alpha: float, k: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``log|C(alpha, k)|`` and its sign for real ``alpha > 0`` (non-integer) and integer ``k >= 0``.

    For ``k <= alpha`` all factors of ``alpha (alpha-1) ... (alpha-k+1)/k!`` are
    positive. For ``k > alpha`` use ``C(alpha,k) = (-1)^k Gamma(k-alpha)/(Gamma(-alpha) k!)``
    so that every ``gammaln`` argument except the constant ``-alpha`` is positive.
    """
    log_abs = np.empty_like(k)
    sign = np.ones_like(k)
    head = k <= alpha
    kh = k[head]
    log_abs[head] = special.gammaln(alpha + 1.0) - special.gammaln(kh + 1.0) - special.gammaln(alpha - kh + 1.0)
    kt = k[~head]
    log_abs[~head] = special.gammaln(kt - alpha) - special.gammaln(-alpha) - special.gammaln(kt + 1.0)
    sign[~head] = np.where(np.mod(kt, 2.0) == 0.0, 1.0, -1.0) * special.gammasgn(-alpha)
    return log_abs, sign


def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """``log A_alpha`` for fractional ``alpha`` by the convergent series of MTZ19, Sec. 3.3.

    Split the real line at ``z0 = sigma^2 log(1/q - 1) + 1/2``, where the two
    mixture components are equal. On ``z <= z0`` expand
    ``((1-q) mu0 + q mu1)^alpha`` in powers of ``q mu1 / ((1-q) mu0) <= 1``, on
    ``z > z0`` in powers of the reciprocal (generalised binomial theorem):

    .. math::

        A_\\alpha = \\sum_{k\\ge 0} \\binom{\\alpha}{k}\\Big[
            (1-q)^{\\alpha-k} q^k e^{(k^2-k)/(2\\sigma^2)}\\,\\Phi\\big(\\tfrac{z_0-k}{\\sigma}\\big)
          + (1-q)^{k} q^{\\alpha-k} e^{(j^2-j)/(2\\sigma^2)}\\,\\Phi\\big(\\tfrac{j-z_0}{\\sigma}\\big)\\Big],
        \\quad j = \\alpha - k.

    The generalised binomial coefficients are *signed*: for ``k > alpha`` they
    alternate. (``dp_accounting`` sums absolute values, which gives a slightly
    larger, still valid, upper bound.) Both bracketed factors are positive and
    non-increasing in ``k`` and ``|C(alpha,k)|`` decreases for ``k > alpha``,
    so past ``k = ceil(alpha)`` the series is alternating with decreasing
    magnitudes and the truncation error is at most the first omitted term. We
    stop once that term is below ``1e-16`` of the partial sum. The tail decays
    only polynomially (like ``k^(-alpha-2)``), so terms are generated in
    vectorised chunks of doubling size. Positive and negative terms are summed
    separately with ``logsumexp``.
    """
    log_q = math.log(q)
    log_1mq = math.log1p(-q)
    s2 = 2.0 * sigma * sigma
    z0 = sigma * sigma * (log_1mq - log_q) + 0.5
    log_pos = -np.inf
    log_neg = -np.inf
    start = 0
    chunk = max(64, int(math.ceil(alpha)) + 64)
    while True:
        k = np.arange(start, start + chunk, dtype=np.float64)
        j = alpha - k
        log_c, sign = _log_abs_comb_and_sign(alpha, k)
        t0 = log_c + (alpha - k) * log_1mq + k * log_q + (k * k - k) / s2 + special.log_ndtr((z0 - k) / sigma)
        t1 = log_c + k * log_1mq + j * log_q + (j * j - j) / s2 + special.log_ndtr((j - z0) / sigma)
        lt = np.logaddexp(t0, t1)
        pos = sign > 0
        if pos.any():
            log_pos = float(np.logaddexp(log_pos, special.logsumexp(lt[pos])))
        if (~pos).any():
            log_neg = float(np.logaddexp(log_neg, special.logsumexp(lt[~pos])))
        start += chunk
        last = float(lt[-1])
        if start > alpha + 2 and last < log_pos + math.log(_FRAC_TOL):
            break
        if start >= _FRAC_MAX_TERMS:
            # Not converged: the true value lies between consecutive partial
            # sums; return the larger one (an upper bound on A_alpha).
            if sign[-1] < 0:
                log_neg = float(special.logsumexp([log_neg, last], b=[1.0, -1.0]))
            break
        chunk = min(2 * chunk, 1 << 16)
    if log_neg == -np.inf:
        return log_pos
    return log_pos + math.log1p(-math.exp(log_neg - log_pos))


def rdp_subsampled_gaussian(alpha: ArrayLike, noise_multiplier: float, sampling_rate: float) -> FloatOrArray:
    """RDP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar & Zhang 2019).

    With ``mu0 = N(0, sigma^2)``, ``mu1 = N(1, sigma^2)`` and
    ``mu = (1-q) mu0 + q mu1`` the RDP at order ``alpha`` is
    ``D_alpha(mu || mu0) = log(A_alpha)/(alpha - 1)`` with
    ``A_alpha = E_{z~mu0}[(mu(z)/mu0(z))^alpha]``, which MTZ19 show
    dominates the reverse direction ``D_alpha(mu0 || mu)``, so it covers both
    add and remove adjacency. Integer orders use the finite binomial sum,
    fractional orders the convergent two-sided series of MTZ19, Sec. 3.3 (see
    :func:`_log_a_frac`); both in log space, stable for ``sigma`` down to
    ``0.3``, ``q`` up to 1 and orders up to ``1e4`` or more. ``q = 1`` is the
    plain Gaussian ``alpha/(2 sigma^2)``; ``q = 0`` gives 0.

    Parameters
    ----------
    alpha : float or array_like
        Orders in ``(1, inf]`` (``inf`` gives ``inf`` for ``q > 0``).
    noise_multiplier : float
        Noise standard deviation divided by the L2 sensitivity, in ``(0, inf)``.
    sampling_rate : float
        Poisson sampling probability ``q`` in ``[0, 1]``.

    Returns
    -------
    float or ndarray
        The RDP values (non-negative).
    """
    scalar = np.ndim(alpha) == 0
    a = _v.real_array("alpha", alpha, low=1.0, low_open=True)[0]
    sigma = _v.real_scalar("noise_multiplier", noise_multiplier, low=0.0, high=math.inf, low_open=True, high_open=True)
    q = _v.real_scalar("sampling_rate", sampling_rate, low=0.0, high=1.0)
    if q == 0.0:
        return _finish(np.zeros_like(a), scalar)
    if q == 1.0:
        return _finish(a / (2.0 * sigma * sigma), scalar)
    out = np.empty_like(a)
    flat_in = a.ravel()
    flat_out = out.ravel()
    cache: dict = {}
    for i, order in enumerate(flat_in):
        order = float(order)
        if order in cache:
            flat_out[i] = cache[order]
            continue
        if math.isinf(order):
            val = math.inf
        elif order == math.floor(order):
            val = _log_a_int(q, sigma, int(order)) / (order - 1.0)
        else:
            val = _log_a_frac(q, sigma, order) / (order - 1.0)
        val = max(val, 0.0)
        cache[order] = val
        flat_out[i] = val
    return _finish(flat_out.reshape(a.shape), scalar)


def rdp_laplace(alpha: ArrayLike, scale: float, sensitivity: float = 1.0) -> FloatOrArray:
    """RDP of the Laplace mechanism (Mironov 2017, Prop. 6), exact in both directions.

    With ``eps = s/b`` (the pure-DP parameter),

    .. math::

        D_\\alpha = \\frac{1}{\\alpha-1}\\log\\Big(\\frac{\\alpha}{2\\alpha-1}e^{(\\alpha-1)\\varepsilon}
                  + \\frac{\\alpha-1}{2\\alpha-1}e^{-\\alpha\\varepsilon}\\Big)
                = \\varepsilon + \\frac{1}{\\alpha-1}\\log\\Big(1 + (\\alpha-1)\\,
                  \\frac{e^{(1-2\\alpha)\\varepsilon} - 1}{2\\alpha-1}\\Big),

    evaluated in the second form as ``eps + c * log1p(x)/x`` with
    ``c = expm1((1-2 alpha) eps)/(2 alpha - 1)`` and ``x = (alpha-1) c``, which is
    stable as ``alpha -> 1``. Limits: ``alpha = 1`` (KL) gives
    ``eps + e^{-eps} - 1``; ``alpha = inf`` gives ``eps``.

    Parameters
    ----------
    alpha : float or array_like
        Orders in ``[1, inf]``.
    scale : float
        Laplace scale ``b`` in ``(0, inf)``.
    sensitivity : float, default 1.0
        L1 sensitivity ``s`` in ``[0, inf)``.
    """
    scalar = np.ndim(alpha) == 0
    a = _v.real_array("alpha", alpha, low=1.0)[0]
    b = _v.real_scalar("scale", scale, low=0.0, high=math.inf, low_open=True, high_open=True)
    s = _v.real_scalar("sensitivity", sensitivity, low=0.0, high=math.inf, high_open=True)
    eps = s / b
    out = np.empty_like(a)
    inf = np.isinf(a)
    out[inf] = eps
    af = a[~inf]
    c = np.expm1((1.0 - 2.0 * af) * eps) / (2.0 * af - 1.0)
    x = (af - 1.0) * c
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(x == 0.0, 1.0, np.log1p(x) / np.where(x == 0.0, 1.0, x))
    out[~inf] = eps + c * ratio
    return _finish(np.maximum(out, 0.0), scalar)


def rdp_randomized_response(alpha: ArrayLike, epsilon0: float) -> FloatOrArray:
    """RDP of binary randomized response with parameter ``eps0``.

    The pair is ``P = Bern(p)``, ``Q = Bern(1-p)``, ``p = e^eps0/(1+e^eps0)``:

    .. math::

        D_\\alpha = \\frac{1}{\\alpha-1}\\log\\big(p^\\alpha (1-p)^{1-\\alpha}
                  + (1-p)^\\alpha p^{1-\\alpha}\\big)
                  = \\frac{1}{\\alpha-1}\\log\\big(p\\,e^{x} + (1-p)\\,e^{-x}\\big),
        \\quad x = (\\alpha - 1)\\varepsilon_0,

    symmetric in ``P, Q``. For ``x <= 1`` it is evaluated as
    ``log1p(p expm1(x) + (1-p) expm1(-x))/(alpha-1)`` (no cancellation as
    ``alpha -> 1``), otherwise with ``logaddexp``. Limits: ``alpha = 1`` gives
    the KL divergence ``eps0 tanh(eps0/2)``; ``alpha = inf`` gives ``eps0``.

    Parameters
    ----------
    alpha : float or array_like
        Orders in ``[1, inf]``.
    epsilon0 : float
        Randomized-response parameter in ``[0, inf)``.
    """
    scalar = np.ndim(alpha) == 0
    a = _v.real_array("alpha", alpha, low=1.0)[0]
    e0 = _v.real_scalar("epsilon0", epsilon0, low=0.0, high=math.inf, high_open=True)
    out = np.empty_like(a)
    if e0 == 0.0:
        return _finish(np.zeros_like(a), scalar)
    log_p = float(special.log_expit(e0))
    log_1mp = float(special.log_expit(-e0))
    p = math.exp(log_p)
    inf = np.isinf(a)
    one = a == 1.0
    out[inf] = e0
    out[one] = e0 * math.tanh(e0 / 2.0)
    reg = ~inf & ~one
    ar = a[reg]
    x = (ar - 1.0) * e0
    small = x <= 1.0
    res = np.empty_like(ar)
    xs = x[small]
    res[small] = np.log1p(p * np.expm1(xs) + (1.0 - p) * np.expm1(-xs)) / (ar[small] - 1.0)
    xl = x[~small]
    res[~small] = np.logaddexp(log_p + xl, log_1mp - xl) / (ar[~small] - 1.0)
    out[reg] = res
    return _finish(np.maximum(out, 0.0), scalar)


# ---------------------------------------------------------------------------
# conversions
# ---------------------------------------------------------------------------


def _check_conversion(conversion: str) -> str:
    if conversion not in ("improved", "classic"):
        raise ValueError(f"conversion must be 'improved' or 'classic', got {conversion!r}")
    return conversion


def _eps_per_order(orders: np.ndarray, rdp: np.ndarray, log_delta: float, conversion: str) -> np.ndarray:
    """Per-order epsilon bound (not yet clipped or minimised)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        finite = np.isfinite(orders)
        am1 = orders - 1.0
        if conversion == "classic":
            eps = rdp - log_delta / am1
        else:
            eps = rdp + np.log1p(-1.0 / orders) - (log_delta + np.log(orders)) / am1
        eps = np.where(finite, eps, rdp)  # alpha = inf: pure DP, eps = r_inf
        eps = np.where(np.isnan(eps), np.inf, eps)
    return eps


def _log_delta_per_order(orders: np.ndarray, rdp: np.ndarray, epsilon: float, conversion: str) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        finite = np.isfinite(orders)
        am1 = orders - 1.0
        if conversion == "classic":
            ld = am1 * (rdp - epsilon)
        else:
            ld = am1 * (rdp - epsilon + np.log1p(-1.0 / orders)) - np.log(orders)
        ld = np.where(finite, ld, np.where(rdp <= epsilon, -np.inf, 0.0))
        ld = np.where(np.isnan(ld), 0.0, ld)
    return np.minimum(ld, 0.0)


def epsilon_from_rdp(
    orders: ArrayLike, rdp: ArrayLike, delta: float, conversion: Conversion = "improved"
) -> Tuple[float, float]:
    """Smallest epsilon certified by an RDP curve on a grid of orders.

    classic (Mironov 2017, Prop. 3):
        ``eps = min_alpha r_alpha + log(1/delta)/(alpha - 1)``.
    improved (Canonne, Kamath & Steinke 2020, Prop. 12; Balle et al. 2020, Thm. 21):
        ``eps = min_alpha r_alpha + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha - 1)``.
        Its per-order gap to the classic bound is
        ``log(1 - 1/alpha) - log(alpha)/(alpha-1) < 0``, so improved <= classic.
        It is further combined with ``delta(0) = TV(P, Q) <= sqrt(1 - exp(-r_alpha))``
        (Bretagnolle--Huber, using ``KL <= D_alpha``): if ``delta`` is at
        least that, ``eps = 0`` (as in ``dp_accounting``).

    The order ``alpha = inf`` (pure DP) contributes ``eps = r_inf``; an order
    with ``r_alpha = 0`` (which forces ``P = Q``) contributes 0. The result is
    clipped at 0.

    Parameters
    ----------
    orders : array_like
        Orders in ``(1, inf]``.
    rdp : array_like
        RDP values ``>= 0``, same shape as ``orders``.
    delta : float
        Target in ``[0, 1]``. ``delta = 0`` gives ``inf`` unless the curve is 0.
    conversion : {"improved", "classic"}

    Returns
    -------
    (epsilon, order)
        The bound and the order attaining it.
    """
    conv = _check_conversion(conversion)
    o = _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
    r = _v.real_array("rdp", rdp)[0].ravel()
    if o.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same length, got {o.size} and {r.size}")
    if o.size == 0:
        raise ValueError("orders must not be empty")
    if (r < 0).any():
        raise ValueError("rdp values must be >= 0")
    d = _v.real_scalar("delta", delta, low=0.0, high=1.0)
    if d == 0.0:
        if np.all(r == 0.0):
            return 0.0, float(o[0])
        i = int(np.argmin(np.where(np.isinf(o), r, np.inf)))
        return (float(r[i]) if np.isinf(o[i]) else math.inf), float(o[i])
    eps = _eps_per_order(o, r, math.log(d), conv)
    eps = np.where(r == 0.0, 0.0, eps)  # D_alpha = 0 for some alpha > 1 means P = Q
    if conv == "improved":
        with np.errstate(invalid="ignore"):
            tv_ok = d * d + np.expm1(-r) >= 0.0
        eps = np.where(tv_ok, 0.0, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(o[i])


def delta_from_rdp(
    orders: ArrayLike, rdp: ArrayLike, epsilon: float, conversion: Conversion = "improved"
) -> Tuple[float, float]:
    """Smallest delta certified by an RDP curve at ``epsilon`` (inverse of :func:`epsilon_from_rdp`).

    classic: ``delta = min_alpha exp((alpha - 1)(r_alpha - eps))``.
    improved (CKS20 Prop. 12 solved for delta):
    ``delta = min_alpha exp((alpha-1)(r_alpha - eps + log(1 - 1/alpha)) - log alpha)``,
    also capped by ``sqrt(1 - exp(-r_alpha))`` (Bretagnolle--Huber). Capped at 1.

    Parameters
    ----------
    orders, rdp
        As in :func:`epsilon_from_rdp`.
    epsilon : float
        Target in ``[0, inf]``.
    conversion : {"improved", "classic"}

    Returns
    -------
    (delta, order)
    """
    conv = _check_conversion(conversion)
    o = _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
    r = _v.real_array("rdp", rdp)[0].ravel()
    if o.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same length, got {o.size} and {r.size}")
    if o.size == 0:
        raise ValueError("orders must not be empty")
    if (r < 0).any():
        raise ValueError("rdp values must be >= 0")
    e = _v.real_scalar("epsilon", epsilon, low=0.0, high=math.inf)
    if math.isinf(e):
        return 0.0, float(o[0])
    ld = _log_delta_per_order(o, r, e, conv)
    ld = np.where(r == 0.0, -np.inf, ld)  # D_alpha = 0 means P = Q
    if conv == "improved":
        with np.errstate(divide="ignore"):
            ld_tv = 0.5 * np.log(-np.expm1(-r))
        ld = np.minimum(ld, ld_tv)
    i = int(np.argmin(ld))
    return min(1.0, math.exp(float(ld[i]))), float(o[i])


# ---------------------------------------------------------------------------
# RDP curve (composable)
# ---------------------------------------------------------------------------


def _refine_order(
    fn: Callable[[float], float], orders: np.ndarray, best_order: float
) -> Optional[Tuple[float, float]]:
    """Minimise ``fn(log alpha)`` between the grid neighbours of ``best_order``.

    Uses bounded ``scipy.optimize.minimize_scalar`` in ``x = log alpha``. If the
    best order is the smallest (largest) finite grid order, the bracket extends
    towards 1 (towards larger orders) and keeps extending while the minimiser
    sits on that open edge. Returns ``(alpha, fn(log alpha))`` or ``None``.
    """
    srt = np.unique(orders[np.isfinite(orders)])
    pos = int(np.searchsorted(srt, best_order))
    low_edge = pos == 0
    high_edge = pos + 1 >= srt.size
    lo = float(srt[pos - 1]) if not low_edge else 1.0 + (best_order - 1.0) / 2.0
    hi = float(srt[pos + 1]) if not high_edge else 2.0 * best_order
    best: Optional[Tuple[float, float]] = None
    for _ in range(40):
        res = _minimize_bounded(fn, math.log(lo), math.log(hi))
        if res is None:
            break
        if best is None or res[1] < best[1]:
            best = res
        x = res[0]
        width = math.log(hi) - math.log(lo)
        if low_edge and x - math.log(lo) < 1e-3 * width and lo - 1.0 > 1e-12:
            hi, lo = lo, 1.0 + (lo - 1.0) / 8.0
            continue
        if high_edge and math.log(hi) - x < 1e-3 * width and hi < 1e12:
            lo, hi = hi, 8.0 * hi
            continue
        break
    if best is None:
        return None
    return math.exp(best[0]), best[1]


_BUILTIN_RDP = {
    "gaussian": rdp_gaussian,
    "subsampled_gaussian": rdp_subsampled_gaussian,
    "laplace": rdp_laplace,
    "randomized_response": rdp_randomized_response,
}


def _builtin_function(kind: str, params: Tuple[float, ...]) -> RdpFunction:
    """Vectorised ``orders -> rdp`` for a built-in mechanism, tagged with a value key."""
    base = _BUILTIN_RDP[kind]

    def fn(a: np.ndarray) -> np.ndarray:
        return np.asarray(base(a, *params), dtype=np.float64)

    fn._rdp_key = (kind,) + tuple(params)  # type: ignore[attr-defined]
    fn.__name__ = f"rdp_{kind}"
    return fn


@functools.lru_cache(maxsize=256)
def _builtin_grid(kind: str, params: Tuple[float, ...], orders_bytes: bytes) -> np.ndarray:
    """Cached grid evaluation (step-by-step accounting re-uses the same grid)."""
    orders = np.frombuffer(orders_bytes, dtype=np.float64)
    out = np.asarray(_BUILTIN_RDP[kind](orders, *params), dtype=np.float64).copy()
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class RdpCurve:
    """An RDP curve ``alpha -> r_alpha`` sampled on a grid of orders.

    Curves compose by ``+`` (RDP adds under composition) and self-compose by
    ``curve * k`` for an integer ``k >= 0``. A curve built from mechanism
    functions (the classmethods, or :meth:`from_function`) also remembers
    those functions, so it can be evaluated at orders off the grid: that is
    what powers the continuous refinement of the optimal order in
    :meth:`epsilon` / :meth:`delta`, and lets curves on different grids be
    added (on the union grid).

    Attributes
    ----------
    orders : ndarray
        Orders in ``(1, inf]`` (read-only).
    rdp : ndarray
        RDP values ``>= 0`` at those orders (read-only).
    terms : tuple of (int, callable)
        ``(count, fn)`` pairs with ``rdp == sum(count * fn(orders))``; empty for
        a curve given only by samples.
    """

    orders: np.ndarray
    rdp: np.ndarray
    terms: Tuple[Tuple[int, RdpFunction], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        o = _v.real_array("orders", self.orders, low=1.0, low_open=True)[0].ravel().copy()
        r = _v.real_array("rdp", self.rdp)[0].ravel().copy()
        if o.shape != r.shape:
            raise ValueError(f"orders and rdp must have the same length, got {o.size} and {r.size}")
        if o.size == 0:
            raise ValueError("orders must not be empty")
        if (r < 0).any():
            raise ValueError("rdp values must be >= 0")
        o.setflags(write=False)
        r.setflags(write=False)
        object.__setattr__(self, "orders", o)
        object.__setattr__(self, "rdp", r)
        object.__setattr__(self, "terms", tuple(self.terms))

    # -- constructors ------------------------------------------------------

    @classmethod
    def from_function(cls, fn: RdpFunction, orders: Optional[ArrayLike] = None) -> "RdpCurve":
        """Curve of a mechanism given as a vectorised function ``orders -> rdp``."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        r = np.asarray(fn(np.asarray(o, dtype=np.float64)), dtype=np.float64).reshape(o.shape)
        return cls(o, r, ((1, fn),))

    @classmethod
    def _builtin(cls, kind: str, params: Tuple[float, ...], orders: Optional[ArrayLike]) -> "RdpCurve":
        fn = _builtin_function(kind, params)
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        r = _builtin_grid(kind, params, np.ascontiguousarray(o, dtype=np.float64).tobytes())
        return cls(o, r, ((1, fn),))

    @classmethod
    def gaussian(cls, sigma: float, sensitivity: float = 1.0, orders: Optional[ArrayLike] = None) -> "RdpCurve":
        """Curve of one Gaussian release (see :func:`rdp_gaussian`)."""
        rdp_gaussian(2.0, sigma, sensitivity)  # validate eagerly
        return cls._builtin("gaussian", (float(sigma), float(sensitivity)), orders)

    @classmethod
    def subsampled_gaussian(
        cls, noise_multiplier: float, sampling_rate: float, orders: Optional[ArrayLike] = None
    ) -> "RdpCurve":
        """Curve of one Poisson-subsampled Gaussian step (see :func:`rdp_subsampled_gaussian`)."""
        rdp_subsampled_gaussian(2.0, noise_multiplier, sampling_rate)
        return cls._builtin("subsampled_gaussian", (float(noise_multiplier), float(sampling_rate)), orders)

    @classmethod
    def laplace(cls, scale: float, sensitivity: float = 1.0, orders: Optional[ArrayLike] = None) -> "RdpCurve":
        """Curve of one Laplace release (see :func:`rdp_laplace`)."""
        rdp_laplace(2.0, scale, sensitivity)
        return cls._builtin("laplace", (float(scale), float(sensitivity)), orders)

    @classmethod
    def randomized_response(cls, epsilon0: float, orders: Optional[ArrayLike] = None) -> "RdpCurve":
        """Curve of one binary randomized-response release (see :func:`rdp_randomized_response`)."""
        rdp_randomized_response(2.0, epsilon0)
        return cls._builtin("randomized_response", (float(epsilon0),), orders)

    # -- evaluation --------------------------------------------------------

    @property
    def is_continuous(self) -> bool:
        """Whether the curve can be evaluated at arbitrary orders."""
        return len(self.terms) > 0

    def __call__(self, alpha: ArrayLike) -> FloatOrArray:
        """Evaluate the curve at arbitrary orders (needs mechanism functions)."""
        if not self.terms:
            raise ValueError("this RdpCurve holds only samples; it cannot be evaluated off its grid")
        scalar = np.ndim(alpha) == 0
        a = _v.real_array("alpha", alpha, low=1.0, low_open=True)[0]
        total = np.zeros(a.shape)
        for count, fn in self.terms:
            total = total + count * np.asarray(fn(a), dtype=np.float64).reshape(a.shape)
        return _finish(total, scalar)

    # -- composition -------------------------------------------------------

    def __add__(self, other: "RdpCurve") -> "RdpCurve":
        if not isinstance(other, RdpCurve):
            return NotImplemented
        if self.terms and other.terms:
            terms = _merge_terms(self.terms, other.terms)
        elif not self.terms and not np.any(self.rdp):
            terms = other.terms  # adding the zero curve keeps the other's functions
        elif not other.terms and not np.any(other.rdp):
            terms = self.terms
        else:
            terms = ()
        if self.orders.shape == other.orders.shape and np.array_equal(self.orders, other.orders):
            return RdpCurve(self.orders, self.rdp + other.rdp, terms)
        if not terms:
            raise ValueError(
                "cannot add RdpCurves sampled on different orders unless both can be "
                "evaluated off-grid (built from mechanism functions)"
            )
        union = np.union1d(self.orders, other.orders)
        merged = RdpCurve(union, np.zeros_like(union), terms)
        return RdpCurve(union, np.asarray(merged(union)), terms)

    def __radd__(self, other: Any) -> "RdpCurve":
        if isinstance(other, numbers.Number) and not isinstance(other, bool) and other == 0:
            return self  # lets sum() work
        return NotImplemented

    def __mul__(self, count: int) -> "RdpCurve":
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral):
            return NotImplemented
        k = _v.count("count", count)
        terms = tuple((c * k, fn) for c, fn in self.terms if c * k > 0)
        if k == 0:
            terms = ()
        return RdpCurve(self.orders, self.rdp * k, terms)

    __rmul__ = __mul__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RdpCurve):
            return NotImplemented
        return bool(np.array_equal(self.orders, other.orders) and np.array_equal(self.rdp, other.rdp))

    __hash__ = None  # type: ignore[assignment]

    # -- conversion --------------------------------------------------------

    def epsilon(
        self, delta: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> Tuple[float, float]:
        """Epsilon certified at ``delta``; returns ``(epsilon, optimal_order)``.

        Minimises the chosen conversion (see :func:`epsilon_from_rdp`) over the
        grid, then (if ``optimize`` and the curve is evaluable off-grid) runs a
        bounded ``scipy.optimize.minimize_scalar`` in ``log alpha`` between the
        grid neighbours of the best order and keeps the smaller value. Any
        order gives a valid bound, so the refinement can only tighten it.
        """
        conv = _check_conversion(conversion)
        eps, order = epsilon_from_rdp(self.orders, self.rdp, delta, conv)
        d = float(delta)
        if not (optimize and self.terms) or eps == 0.0 or not math.isfinite(eps) or d == 0.0 or math.isinf(order):
            return eps, order
        log_d = math.log(d)

        def objective(x: float) -> float:
            a = math.exp(x)
            r = float(self(a))
            if conv == "improved" and d * d + math.expm1(-r) >= 0.0:
                return 0.0
            v = float(_eps_per_order(np.array([a]), np.array([r]), log_d, conv)[0])
            return v if math.isfinite(v) else 1e300

        res = _refine_order(objective, self.orders, order)
        if res is not None and res[1] < eps:
            return max(0.0, res[1]), res[0]
        return eps, order

    def delta(
        self, epsilon: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> Tuple[float, float]:
        """Delta certified at ``epsilon``; returns ``(delta, optimal_order)``.

        Grid minimisation of :func:`delta_from_rdp` then, as in :meth:`epsilon`,
        a continuous refinement of the order in ``log alpha``.
        """
        conv = _check_conversion(conversion)
        dlt, order = delta_from_rdp(self.orders, self.rdp, epsilon, conv)
        if not (optimize and self.terms) or dlt == 0.0 or dlt >= 1.0 or math.isinf(order):
            return dlt, order
        e = float(epsilon)

        def objective(x: float) -> float:
            a = math.exp(x)
            r = float(self(a))
            ld = float(_log_delta_per_order(np.array([a]), np.array([r]), e, conv)[0])
            if conv == "improved" and r > 0:
                ld = min(ld, 0.5 * math.log(-math.expm1(-r)))
            return ld

        res = _refine_order(objective, self.orders, order)
        if res is not None and math.exp(res[1]) < dlt:
            return min(1.0, math.exp(res[1])), res[0]
        return dlt, order


def _minimize_bounded(fn: Callable[[float], float], lo: float, hi: float) -> Optional[Tuple[float, float]]:
    """Bounded scalar minimisation on ``[lo, hi]``; returns ``(x, f(x))`` or ``None``."""
    if not hi > lo:
        return None
    res = optimize.minimize_scalar(fn, bounds=(lo, hi), method="bounded", options={"xatol": 1e-9})
    if not np.isfinite(res.fun):
        return None
    return float(res.x), float(res.fun)


def _merge_terms(a: Sequence[Tuple[int, RdpFunction]], b: Sequence[Tuple[int, RdpFunction]]):
    """Concatenate ``(count, fn)`` lists, merging equal mechanisms (flat, no recursion).

    Functions built by the :class:`RdpCurve` constructors carry a value key
    (mechanism name and parameters), so composing the same mechanism step by
    step keeps a single term; other callables are merged by identity.
    """
    out: list = []
    index: dict = {}
    for count, fn in list(a) + list(b):
        key = getattr(fn, "_rdp_key", None) or ("id", id(fn))
        if key in index:
            j = index[key]
            out[j] = (out[j][0] + count, fn)
        else:
            index[key] = len(out)
            out.append((count, fn))
    return tuple(out)


# ---------------------------------------------------------------------------
# accountant
# ---------------------------------------------------------------------------


class RdpAccountant:
    """Stateful RDP accountant: compose mechanisms, then ask for epsilon or delta.

    Examples
    --------
    >>> acc = RdpAccountant()
    >>> acc.compose_subsampled_gaussian(1.0, 0.01, count=1000)  # doctest: +ELLIPSIS
    <...RdpAccountant...>
    >>> eps, order = acc.get_epsilon(1e-5)

    Parameters
    ----------
    orders : array_like, optional
        Orders in ``(1, inf]``; defaults to :data:`DEFAULT_ORDERS`.
    """

    def __init__(self, orders: Optional[ArrayLike] = None) -> None:
        o = DEFAULT_ORDERS if orders is None else _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
        if o.size == 0:
            raise ValueError("orders must not be empty")
        self._curve = RdpCurve(o, np.zeros(o.shape), ())
        self._empty = True

    @property
    def orders(self) -> np.ndarray:
        return self._curve.orders

    @property
    def rdp(self) -> np.ndarray:
        return self._curve.rdp

    @property
    def curve(self) -> RdpCurve:
        """The composed curve so far."""
        return self._curve

    def compose(self, mechanism: Union[RdpCurve, RdpFunction, Any], count: int = 1) -> "RdpAccountant":
        """Compose ``count`` copies of ``mechanism``; returns ``self`` for chaining.

        ``mechanism`` may be an :class:`RdpCurve` (sampled on this accountant's
        orders, or evaluable off-grid), a vectorised callable ``orders -> rdp``,
        or any object with a method ``rdp(orders) -> rdp``.
        """
        k = _v.count("count", count)
        if isinstance(mechanism, RdpCurve):
            curve = mechanism
            if not (curve.orders.shape == self.orders.shape and np.array_equal(curve.orders, self.orders)):
                if not curve.is_continuous:
                    raise ValueError("mechanism curve is sampled on different orders and cannot be re-evaluated")
                curve = RdpCurve(self.orders, np.asarray(curve(self.orders)), curve.terms)
        elif hasattr(mechanism, "rdp") and callable(getattr(mechanism, "rdp")):
            curve = RdpCurve.from_function(mechanism.rdp, self.orders)
        elif callable(mechanism):
            curve = RdpCurve.from_function(mechanism, self.orders)
        else:
            raise TypeError(
                "mechanism must be an RdpCurve, a callable orders -> rdp, or an object with an "
                f"rdp(orders) method; got {type(mechanism).__name__}"
            )
        if k == 0:
            return self
        if self._empty:
            self._curve = curve * k
            self._empty = False
        else:
            cur, new = self._curve, curve * k
            terms = _merge_terms(cur.terms, new.terms) if (cur.terms and new.terms) else ()
            self._curve = RdpCurve(self.orders, cur.rdp + new.rdp, terms)
        return self

    def compose_gaussian(self, sigma: float, sensitivity: float = 1.0, count: int = 1) -> "RdpAccountant":
        """Compose ``count`` Gaussian releases (:func:`rdp_gaussian`)."""
        return self.compose(RdpCurve.gaussian(sigma, sensitivity, self.orders), count)

    def compose_subsampled_gaussian(
        self, noise_multiplier: float, sampling_rate: float, count: int = 1
    ) -> "RdpAccountant":
        """Compose ``count`` Poisson-subsampled Gaussian steps (:func:`rdp_subsampled_gaussian`)."""
        return self.compose(RdpCurve.subsampled_gaussian(noise_multiplier, sampling_rate, self.orders), count)

    def compose_laplace(self, scale: float, sensitivity: float = 1.0, count: int = 1) -> "RdpAccountant":
        """Compose ``count`` Laplace releases (:func:`rdp_laplace`)."""
        return self.compose(RdpCurve.laplace(scale, sensitivity, self.orders), count)

    def compose_randomized_response(self, epsilon0: float, count: int = 1) -> "RdpAccountant":
        """Compose ``count`` binary randomized-response releases (:func:`rdp_randomized_response`)."""
        return self.compose(RdpCurve.randomized_response(epsilon0, self.orders), count)

    def get_epsilon(
        self, delta: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> Tuple[float, float]:
        """``(epsilon, optimal_order)`` at ``delta``; see :meth:`RdpCurve.epsilon`."""
        return self._curve.epsilon(delta, conversion, optimize)

    def get_delta(
        self, epsilon: float, conversion: Conversion = "improved", optimize: bool = True
    ) -> Tuple[float, float]:
        """``(delta, optimal_order)`` at ``epsilon``; see :meth:`RdpCurve.delta`."""
        return self._curve.delta(epsilon, conversion, optimize)


def dpsgd_rdp_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    conversion: Conversion = "improved",
    orders: Optional[ArrayLike] = None,
    optimize: bool = True,
) -> Tuple[float, float]:
    """RDP epsilon of DP-SGD with Poisson sampling (add/remove adjacency).

    ``steps`` compositions of the subsampled Gaussian (MTZ19), converted with
    the chosen bound. Returns ``(epsilon, optimal_order)``.

    Parameters
    ----------
    noise_multiplier : float
        ``sigma`` in ``(0, inf)``.
    sampling_rate : float
        ``q`` in ``[0, 1]``.
    steps : int
        Number of steps ``>= 0``.
    delta : float
        Target in ``[0, 1]``.
    conversion : {"improved", "classic"}
    orders : array_like, optional
        Grid of orders (default :data:`DEFAULT_ORDERS`).
    optimize : bool, default True
        Refine the optimal order continuously.
    """
    t = _v.count("steps", steps)
    curve = RdpCurve.subsampled_gaussian(noise_multiplier, sampling_rate, orders) * t
    return curve.epsilon(delta, conversion, optimize)
