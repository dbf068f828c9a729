"""Compositions of Gaussian mechanisms, exactly.

A composition of Gaussian mechanisms with sensitivities ``s_i``, noise
``sigma_i`` and counts ``k_i`` has the privacy loss of one Gaussian mechanism
with ``mu^2 = sum_i k_i s_i^2 / sigma_i^2`` (the loss of each is
``N(mu_i^2/2, mu_i^2)`` and independent normals add), so

``delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``

for every real ``eps`` (Balle & Wang, ICML 2018, Thm. 8; Dong, Roth & Su,
JRSS-B 2022, Cor. 2.13).  No grid is needed: one closed form replaces the
FFT composition, at any count (the engine composed ``Gaussian(2.031)`` 4.8e11
times into a bracket of ``(0, 5.77e10)``).

Evaluation.  With ``a = mu/2 - eps/mu`` and ``b = a - mu``,
``e^eps phi(b) = phi(a)`` (since ``(b^2 - a^2)/2 = eps``), so

``delta = (e^{-a^2/2} / 2) [erfcx(-a/sqrt2) - erfcx(-b/sqrt2)]``

which keeps its relative accuracy where ``delta`` is far below the
floating-point range of ``Phi`` (large ``eps``) and where the two terms almost
cancel (``mu`` small next to ``|a|``); for ``a >= 0`` the direct form
``Phi(a) - e^eps Phi(b)`` with ``log_ndtr`` is used.  Brackets are certified
under the same assumption the engine's discretisation makes of scipy's normal
CDF (``log_ndtr``/``erfcx`` within 1e-13 relative): each value is widened by
``_REL`` on each side, plus a cancellation term proportional to the size of
the two terms, before it is compared with a target.
"""

from __future__ import annotations

import math

import numpy as np

from pld._special import erfcx, log_ndtr

__all__ = ["gaussian_mu", "delta_bounds", "epsilon_bounds"]

#: relative error allowed for each special-function value (scipy's erfcx and
#: log_ndtr are accurate to a few ulps; 1e-13 leaves a factor of ~500)
_REL = 1e-13
_U = 2.0 ** -53
_SQRT2 = math.sqrt(2.0)


def gaussian_mu(components) -> float | None:
    """``mu`` of a composition whose every component is a Gaussian mechanism
    (``mechanism.gaussian_mu()``: a Poisson-sampled one at rate 1 included), else None."""
    total = 0.0
    for m, k in components:
        mu = m.gaussian_mu()
        if mu is None:
            return None
        total += k * mu ** 2
    return math.sqrt(total)


def _rounding_of_a(mu: float, eps: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Bound on the rounding of ``a = mu/2 - eps/mu`` as computed (``eps / mu``
    rounded, the difference rounded; ``mu / 2`` is exact)."""
    return 2.0 * _U * (np.abs(eps) / mu + np.abs(a) + mu / 2.0)


def _terms(mu: float, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(delta, absolute error bound)`` of the closed form at each ``eps``."""
    eps = np.asarray(eps, float)
    a = mu / 2.0 - eps / mu
    b = a - mu
    da = _rounding_of_a(mu, eps, a)
    db = da + _U * np.abs(b)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        # direct form: Phi(a) - exp(eps + log Phi(b)), for a >= 0 (delta >= ~1/2 Phi(a))
        pa = np.exp(log_ndtr(a))
        pb = np.exp(np.minimum(eps + log_ndtr(b), 0.0))
        direct = pa - pb
        # (the values' own error, the rounding of eps + log Phi(b) and of a
        # and b: Phi moves by at most phi <= 0.4 per unit of its argument,
        # e^eps Phi(b) by e^eps phi(b) = phi(a) <= 0.4)
        direct_err = (4.0 * _REL * (pa + pb) + 4.0 * _REL * np.abs(eps) * pb
                      + 4.0 * _U * (np.abs(eps) + np.abs(log_ndtr(b))) * pb + 0.4 * (da + db))
        # scaled form: e^{-a^2/2}/2 (erfcx(-a/sqrt2) - erfcx(-b/sqrt2)), for a < 0
        za, zb = -a / _SQRT2, -b / _SQRT2
        ea, eb = erfcx(za), erfcx(zb)
        scale = 0.5 * np.exp(-0.5 * a * a)
        scaled = scale * (ea - eb)
        # (erfcx's own error on both terms; its logarithmic derivative, 2z -
        # 2/(sqrt(pi) erfcx(z)), is below 2|z| + 2, carried over the rounding
        # of z; exp's rounding, of a^2/2 and, through |a|, of a itself)
        rel_a = _REL + (2.0 * np.abs(za) + 2.0) * (da / _SQRT2 + _U * np.abs(za))
        rel_b = _REL + (2.0 * np.abs(zb) + 2.0) * (db / _SQRT2 + _U * np.abs(zb))
        rel_scale = 4.0 * _U * (1.0 + 0.5 * a * a) + np.abs(a) * da
        scaled_err = (scale * (ea * rel_a + eb * rel_b + 2.0 * _U * np.abs(ea - eb))
                      + np.abs(scaled) * rel_scale)
    use_direct = a >= 0.0
    val = np.where(use_direct, direct, scaled)
    err = np.where(use_direct, direct_err, scaled_err)
    val = np.where(np.isnan(val), 0.0, val)
    err = np.where(np.isnan(err), 0.0, err)
    # eps = -inf: delta = 1; eps = +inf: delta = 0
    val = np.where(eps == -np.inf, 1.0, np.where(eps == np.inf, 0.0, val))
    err = np.where(np.isinf(eps), 0.0, err)
    return val, err


def _complement(mu: float, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(1 - delta, absolute error bound)``, from ``1 - delta = Phi(-a) + e^eps Phi(b)``:
    two positive terms, each to its own relative accuracy, where ``delta`` is
    near 1 and its own value cannot resolve how near (``Gaussian(0.01)`` at
    ``delta = 1 - 1e-11``).  Finite ``eps`` only."""
    eps = np.asarray(eps, float)
    a = mu / 2.0 - eps / mu
    b = a - mu
    da = _rounding_of_a(mu, eps, a)
    db = da + _U * np.abs(b)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        la, lb = log_ndtr(-a), log_ndtr(b)
        qa = np.exp(la)
        pb = np.exp(np.minimum(eps + lb, 0.0))
        # (d log Phi(x) / dx = phi(x) / Phi(x) <= |x| + 1 for x <= 0 and <= 1 above)
        rel_qa = _REL * (1.0 + np.abs(la)) + 4.0 * _U * (1.0 + np.abs(la)) + (np.abs(a) + 1.0) * da
        rel_pb = (_REL * (1.0 + np.abs(lb)) + 4.0 * _U * (1.0 + np.abs(eps) + np.abs(lb))
                  + (np.abs(b) + 1.0) * db)
        c = qa + pb
        err = qa * rel_qa + pb * rel_pb + 2.0 * _U * c
    return np.where(np.isnan(c), 0.0, c), np.where(np.isnan(err), 1.0, err)


def delta_bounds(mu: float, eps) -> tuple[np.ndarray, np.ndarray]:
    """Certified ``(lower, upper)`` on ``delta(eps)`` of the Gaussian pair with ``mu``."""
    eps = np.atleast_1d(np.asarray(eps, float))
    if mu == 0.0:
        d = np.where(eps < 0, -np.expm1(np.minimum(eps, 0.0)), 0.0)
        return d, d.copy()
    val, err = _terms(mu, eps)
    lo = np.clip(val - err, 0.0, 1.0)
    hi = np.clip(val + err, 0.0, 1.0)
    near_one = (val > 0.5) & np.isfinite(eps)
    if np.any(near_one):
        # (1 - delta, resolved: the upper end 1 - (c - e) rounded up, the lower
        # 1 - (c + e) rounded down, each by a unit of 1)
        c, ce = _complement(mu, eps[near_one])
        lo[near_one] = np.maximum(lo[near_one], np.clip(1.0 - (c + ce) - _U, 0.0, 1.0))
        hi[near_one] = np.minimum(hi[near_one], np.clip(1.0 - (c - ce) + _U, 0.0, 1.0))
    # delta(eps) >= (1 - e^eps)_+ for every pair; at eps <= 0 that is exact enough
    with np.errstate(over="ignore"):
        floor = np.where(eps < 0, -np.expm1(np.minimum(eps, 0.0)) * (1.0 - 4.0 * _U), 0.0)
    lo = np.maximum(lo, np.minimum(floor, hi))
    # delta > 0 at every finite eps: an upper end that underflowed is the
    # smallest positive float, not 0
    hi = np.where(np.isfinite(eps), np.maximum(hi, np.nextafter(0.0, 1.0)), hi)
    return lo, np.maximum(hi, lo)


def _side(mu: float, eps: float, delta: float) -> tuple[bool, bool]:
    """``(delta_upper(eps) <= delta, delta_lower(eps) > delta)``, proven; near
    ``delta = 1`` on the complement ``1 - delta`` (exact for ``delta >= 1/2``)."""
    if delta >= 0.5 and math.isfinite(eps):
        c, ce = _complement(mu, np.array([eps]))
        target = 1.0 - delta  # (exact: Sterbenz)
        if float(_terms(mu, np.array([eps]))[0][0]) > 0.25:
            return bool(c[0] - ce[0] >= target), bool(c[0] + ce[0] < target)
    lo, hi = delta_bounds(mu, eps)
    return bool(hi[0] <= delta), bool(lo[0] > delta)


def epsilon_bounds(mu: float, delta: float) -> tuple[float, float]:
    """Certified ``(lower, upper)`` on ``epsilon(delta)`` (``0 < delta < 1``).

    Bisection on the central value (near ``delta = 1`` on ``1 - delta``), then
    each end moved outwards until the bracketed closed form proves it:
    ``delta_upper(upper) <= delta`` and ``delta_lower(lower) > delta`` (or
    ``lower = 0``).
    """
    if mu == 0.0:
        return 0.0, 0.0
    if delta_bounds(mu, 0.0)[1][0] <= delta:
        return 0.0, 0.0
    # delta(eps) <= Phi(mu/2 - eps/mu) <= exp(-(eps/mu - mu/2)^2 / 2): a root below
    top = mu * mu / 2.0 + mu * math.sqrt(2.0 * max(-math.log(delta), 1.0)) + 1.0
    lo, hi = 0.0, top
    near_one = delta >= 0.5
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if near_one:
            above = _complement(mu, np.array([mid]))[0][0] < 1.0 - delta
        else:
            above = _terms(mu, np.array([mid]))[0][0] > delta
        if above:
            lo = mid
        else:
            hi = mid
    upper = _prove(mu, delta, hi, +1.0)
    lower = _prove(mu, delta, lo, -1.0)
    return lower, max(upper, lower)


def _prove(mu: float, delta: float, eps: float, direction: float) -> float:
    """Move ``eps`` outwards (``direction`` +1: up, -1: down) until the bracket
    proves it an upper (lower) end."""
    step = 1e-15 * max(1.0, abs(eps))
    for _ in range(200):
        if direction > 0:
            if _side(mu, eps, delta)[0]:
                return eps
        else:
            if eps <= 0.0:
                return 0.0
            if _side(mu, eps, delta)[1]:
                return eps
        eps += direction * step
        step *= 2.0
    return math.inf if direction > 0 else 0.0
