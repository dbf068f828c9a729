"""Log-space primitives shared by the exact privacy profiles (:mod:`pld.baselines.exact`,
:mod:`pld.baselines.exact_rr`): ``log(1 - e^x)``, the Gaussian pair's ``log delta(eps)``
and the root finder that inverts a decreasing log-profile.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from pld import _special as special

__all__ = ["FloatOrArray", "LOG_FLOOR", "scalar_or_array", "log1mexp", "gaussian_log_delta", "solve_log_profile"]

FloatOrArray = float | np.ndarray

# Floor used for log(delta) inside root finders, so that they never see -inf.
LOG_FLOOR = -1.0e6


def scalar_or_array(out: np.ndarray, scalar: bool) -> FloatOrArray:
    return float(out) if scalar else out


def log1mexp(x: np.ndarray) -> np.ndarray:
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


def gaussian_log_delta(eps: ArrayLike, mu: ArrayLike) -> np.ndarray:
    """``log delta(eps)`` of the mu-Gaussian pair; broadcasts; handles edge cases.

    ``delta = Phi(a) - e^eps Phi(b)``, ``a = mu/2 - eps/mu``, ``b = -mu/2 - eps/mu``,
    evaluated as ``log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a)))``.
    """
    eps, mu = np.broadcast_arrays(np.asarray(eps, dtype=np.float64), np.asarray(mu, dtype=np.float64))
    out = np.empty(eps.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # mu == 0: P == Q, delta = (1 - e^eps)_+ .
        zero = mu == 0
        out[zero] = np.where(eps[zero] < 0, log1mexp(np.minimum(eps[zero], 0.0)), -np.inf)
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
        res = la + log1mexp(np.minimum(d, 0.0))
        res = np.where(e == np.inf, -np.inf, res)
        res = np.where(e == -np.inf, 0.0, res)
        out[reg] = res
    return out


def solve_log_profile(log_delta_fn, log_target: float, hi0: float) -> float:
    """Smallest ``eps >= 0`` with ``log_delta_fn(eps) <= log_target``.

    ``log_delta_fn`` must be continuous and strictly decreasing where finite and
    ``log_delta_fn(0) > log_target``. Uses ``brentq`` on a bracket that doubles.
    """

    def f(x: float) -> float:
        return max(float(log_delta_fn(x)), LOG_FLOOR) - max(log_target, LOG_FLOOR)

    lo, hi = 0.0, max(hi0, 1.0)
    while f(hi) > 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:  # pragma: no cover - only for absurd inputs
            return math.inf
    if f(lo) <= 0.0:
        return lo
    from scipy import optimize  # (here: importing scipy.optimize costs ~0.2 s, and `pld dpsgd` never needs it)

    return float(optimize.brentq(f, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
