"""Renyi-DP curves of single mechanisms: Gaussian, Poisson-subsampled Gaussian,
Laplace and randomized response.

Each function returns ``D_alpha(P || Q)`` for the worst neighbouring pair of
the mechanism, at every requested order ``alpha`` (a float gives a float, an
array an array).  They are the building blocks that :class:`pld.baselines.rdp.RdpCurve`
composes and :mod:`pld.baselines.rdp_conversion` turns into ``(epsilon, delta)``.

References
----------
.. [Mir17] I. Mironov. "Renyi differential privacy." CSF 2017 (arXiv:1702.07476).
.. [MTZ19] I. Mironov, K. Talwar and L. Zhang. "Renyi differential privacy of
   the sampled Gaussian mechanism." arXiv:1908.10530, 2019.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pld import _special as special
from pld import _validate as _v

__all__ = ["rdp_gaussian", "rdp_subsampled_gaussian", "rdp_laplace", "rdp_randomized_response"]

FloatOrArray = float | np.ndarray

# Fractional-order series: relative truncation tolerance and term budget.
_FRAC_TOL = 1e-16
_FRAC_MAX_TERMS = 1 << 21



def _finish(out: np.ndarray, scalar: bool) -> FloatOrArray:
    return float(out) if scalar else out


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


def _log_abs_comb_and_sign(alpha: float, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
