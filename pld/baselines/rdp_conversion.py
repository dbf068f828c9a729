"""From a Renyi-DP curve to ``(epsilon, delta)``: the per-order conversion bounds
and the continuous search over orders.

* classic (Mironov 2017, Prop. 3): ``eps = r_alpha + log(1/delta)/(alpha - 1)``;
* improved (Canonne, Kamath & Steinke 2020 [CKS20]_, Prop. 12; Balle et al.
  2020 [BBG+20]_, Thm. 21; Asoodeh et al. 2020, arXiv:2001.05990, Eq. 20):
  ``eps = r_alpha + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha - 1)``.

:func:`epsilon_from_rdp` and :func:`delta_from_rdp` minimise over a grid of
orders; :func:`refine_order` then minimises continuously in ``log alpha``
around the best grid order (used by :meth:`pld.baselines.rdp.RdpCurve.epsilon`).

References
----------
.. [CKS20] C. Canonne, G. Kamath and T. Steinke. "The discrete Gaussian for
   differential privacy." NeurIPS 2020 (arXiv:2004.00010), Prop. 12.
.. [BBG+20] B. Balle, G. Barthe, M. Gaboardi, J. Hsu and T. Sato. "Hypothesis
   testing interpretations and Renyi differential privacy." AISTATS 2020.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize

from pld import _validate as _v

__all__ = ["epsilon_from_rdp", "delta_from_rdp", "eps_per_order", "log_delta_per_order", "refine_order", "Conversion"]

Conversion = Literal["improved", "classic"]



def orders_and_rdp(orders, rdp) -> tuple[np.ndarray, np.ndarray]:
    """``(orders, rdp)`` as flat arrays of one length, orders > 1 and rdp >= 0 (else ValueError)."""
    o = _v.real_array("orders", orders, low=1.0, low_open=True)[0].ravel()
    r = _v.real_array("rdp", rdp)[0].ravel()
    if o.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same length, got {o.size} and {r.size}")
    if o.size == 0:
        raise ValueError("orders must not be empty")
    if (r < 0).any():
        raise ValueError("rdp values must be >= 0")
    return o, r

def eps_per_order(orders: np.ndarray, rdp: np.ndarray, log_delta: float, conversion: str) -> np.ndarray:
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


def log_delta_per_order(orders: np.ndarray, rdp: np.ndarray, epsilon: float, conversion: str) -> np.ndarray:
    """Per-order ``log delta`` bound at ``epsilon``, capped at 0 (``delta <= 1``)."""
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
) -> tuple[float, float]:
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
    conv = _v.choice("conversion", conversion, ("improved", "classic"))
    o, r = orders_and_rdp(orders, rdp)
    d = _v.real_scalar("delta", delta, low=0.0, high=1.0)
    if d == 0.0:
        if np.all(r == 0.0):
            return 0.0, float(o[0])
        i = int(np.argmin(np.where(np.isinf(o), r, np.inf)))
        return (float(r[i]) if np.isinf(o[i]) else math.inf), float(o[i])
    eps = eps_per_order(o, r, math.log(d), conv)
    eps = np.where(r == 0.0, 0.0, eps)  # D_alpha = 0 for some alpha > 1 means P = Q
    if conv == "improved":
        with np.errstate(invalid="ignore"):
            tv_ok = d * d + np.expm1(-r) >= 0.0
        eps = np.where(tv_ok, 0.0, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(o[i])


def delta_from_rdp(
    orders: ArrayLike, rdp: ArrayLike, epsilon: float, conversion: Conversion = "improved"
) -> tuple[float, float]:
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
    conv = _v.choice("conversion", conversion, ("improved", "classic"))
    o, r = orders_and_rdp(orders, rdp)
    e = _v.real_scalar("epsilon", epsilon, low=0.0, high=math.inf)
    if math.isinf(e):
        return 0.0, float(o[0])
    ld = log_delta_per_order(o, r, e, conv)
    ld = np.where(r == 0.0, -np.inf, ld)  # D_alpha = 0 means P = Q
    if conv == "improved":
        with np.errstate(divide="ignore"):
            ld_tv = 0.5 * np.log(-np.expm1(-r))
        ld = np.minimum(ld, ld_tv)
    i = int(np.argmin(ld))
    return min(1.0, math.exp(float(ld[i]))), float(o[i])


def refine_order(
    fn: Callable[[float], float], orders: np.ndarray, best_order: float
) -> tuple[float, float] | None:
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
    best: tuple[float, float] | None = None
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


def _minimize_bounded(fn: Callable[[float], float], lo: float, hi: float) -> tuple[float, float] | None:
    """Bounded scalar minimisation on ``[lo, hi]``; returns ``(x, f(x))`` or ``None``."""
    if not hi > lo:
        return None
    res = optimize.minimize_scalar(fn, bounds=(lo, hi), method="bounded", options={"xatol": 1e-9})
    if not np.isfinite(res.fun):
        return None
    return float(res.x), float(res.fun)
