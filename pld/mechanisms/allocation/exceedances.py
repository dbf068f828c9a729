"""A lower end for ``k``-of-``t`` allocation at a strict delta: does any step's output exceed a threshold?

Setting (see :mod:`pld.mechanisms.allocation.sums`): a round of ``t`` steps, the record in
``k`` of them chosen uniformly, step ``i`` releasing ``x_i ~ N(1[i in S], sigma^2)`` (unit
sensitivity).  The statistic ``I = 1{max_i x_i > z sigma}`` is a function of the outputs,
the same for every step, so under ``P_S`` (the record in the steps ``S``)

    ``P(I = 1) = a = 1 - (1 - p_1)^k (1 - p_0)^(t - k)``,  ``p_0 = Phi(-z)``, ``p_1 = Phi(1/sigma - z)``,

whichever ``S``: that is its law under the true ``P`` too, and under ``Q`` it is
``b = 1 - (1 - p_0)^t``.  It is a post-processing of the true remove pair; over ``E``
independent rounds the number of rounds with ``I = 1`` is ``Bin(E, a)`` against
``Bin(E, b)``, whose hockey-stick divergence is a finite sum.  Its epsilon is a lower end
of the true one, the best where one step's output far out decides (few participations
among many steps at a strict delta), which the label sums (cells of the likelihood ratio
a few standard deviations wide) do not resolve: sigma 0.73, 2 of 75578 steps, 3 rounds,
delta 3.3e-10: [0.1432, 0.2939] -> [0.2840, 0.2939].

Certified: ``a`` and ``b`` are bracketed (``ndtr``'s relative accuracy, the rounding of
``log1p`` and ``expm1``); a binary pair ``(a', b')`` with ``b <= b' <= a' <= a`` is a
garbling of ``(a, b)`` (the point ``(b', a')`` lies in the convex hull of ``(0, 0)``,
``(b, a)`` and ``(1, 1)``), so the ``E``-fold product of ``(a_lo, b_hi)`` is dominated by
the true pair's too; each binomial term carries a bound on its rounding (``lgamma`` and
the products, in logs), and an epsilon is returned only where the sum of the terms'
lower ends exceeds delta.  Any threshold gives a lower end; it is chosen on a grid.

References: Feldman & Shenfeld, "Privacy amplification by random allocation" (2025), for
the setting; Blackwell (1953) for comparisons of experiments by garbling.
"""

from __future__ import annotations

import math

import numpy as np

from pld import _special

__all__ = ["exceedance_lower", "exceedance_delta_lower"]

_U = 2.0 ** -53
#: ``log10`` of ``t p_0`` (the expected unmarked exceedances per round) tried first, one apart
_COARSE = tuple(range(0, 17))
#: ... then around the best of them, a quarter apart
_FINE = (-0.75, -0.5, -0.25, 0.25, 0.5, 0.75)
#: longest run of rounds summed term by term (beyond, the finite sum is not tried)
MAX_ROUNDS = 1 << 12
#: bisection steps on epsilon (relative to the largest loss: ~1e-12 of it)
_BISECTIONS = 40
#: most outcomes of the total exceedance count summed (beyond, that statistic is not tried)
_TOTAL_CELLS = 1 << 14


def _bracket(sigma: float, t: int, k: int, z: float) -> tuple[float, float] | None:
    """``(a_lo, b_hi)`` with ``a_lo <= a`` and ``b_hi >= b`` (None where ``a_lo <= b_hi``)."""
    p0 = float(_special.ndtr(-z))
    p1 = float(_special.ndtr(1.0 / sigma - z))
    if not (0.0 < p0 < p1 < 1.0):
        return None
    # (ndtr to ~1e-14 relative in its tails: a margin of 1e-12 on each probability, and
    # of a few ulps on each log1p, product and expm1)
    lo0, hi0 = p0 * (1.0 - 1e-12), p0 * (1.0 + 1e-12)
    lo1 = p1 * (1.0 - 1e-12)
    # a = -expm1(k log1p(-p1) + (t - k) log1p(-p0)) falls as the exponent rises: take the exponent high
    expo_a = k * math.log1p(-lo1) + (t - k) * math.log1p(-lo0)
    a_lo = -math.expm1(expo_a + 8.0 * _U * abs(expo_a) + 1e-300) * (1.0 - 4.0 * _U)
    expo_b = t * math.log1p(-hi0)
    b_hi = -math.expm1(expo_b - 8.0 * _U * abs(expo_b)) * (1.0 + 4.0 * _U)
    if not (0.0 < b_hi < a_lo < 1.0):
        return None
    return a_lo, b_hi


def _log_binomial(rounds: int, p: float) -> tuple[np.ndarray, np.ndarray]:
    """``log Bin(rounds, p)(j)`` for every ``j`` and a bound on each one's rounding (in logs)."""
    j = np.arange(rounds + 1, dtype=float)
    gl = _special.gammaln
    lc = gl(rounds + 1.0) - gl(j + 1.0) - gl(rounds - j + 1.0)
    lp, lq = math.log(p), math.log1p(-p)
    terms = lc + j * lp + (rounds - j) * lq
    # (each of the five parts to a few ulps of its magnitude, and of the logs of p, 1 - p)
    err = 1e-12 + 32.0 * _U * (gl(rounds + 1.0) + np.abs(j * lp) + np.abs((rounds - j) * lq) + rounds)
    return terms, err


def _delta_lower(lp_lo: np.ndarray, lq_hi: np.ndarray, epsilon: float) -> float:
    """A lower bound on ``sum_j (P_j - e^eps Q_j)_+`` from lower ``log P_j``, upper ``log Q_j``."""
    # (the margins in the logs, >= 1e-12, cover exp's rounding; an e^eps Q_j that underflows
    # to 0 is below 1e-300, charged per term)
    diff = np.exp(lp_lo) - np.exp(np.minimum(lq_hi + epsilon * (1.0 + 4.0 * _U), 709.0))
    pos = diff[diff > 0.0]
    return math.fsum(pos.tolist()) * (1.0 - pos.size * 4.0 * _U) - pos.size * 1e-300 if pos.size else 0.0


def _epsilon_of(lp_lo: np.ndarray, lq_hi: np.ndarray, top: float, delta: float) -> float:
    """The largest epsilon below ``top`` found (by bisection) whose delta lower bound still
    exceeds ``delta`` (0 if none)."""
    if not _delta_lower(lp_lo, lq_hi, 0.0) > delta:
        return 0.0
    lo, hi = 0.0, top
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if _delta_lower(lp_lo, lq_hi, mid) > delta:
            lo = mid
        else:
            hi = mid
    return lo


def _indicator(sigma: float, t: int, k: int, rounds: int, z: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The rounds with an exceedance, ``Bin(E, a)`` against ``Bin(E, b)`` (see the module):
    ``(lower log P_j, upper log Q_j, largest loss)``, or None."""
    pair = _bracket(sigma, t, k, z)
    if pair is None:
        return None
    a, b = pair
    la, ea = _log_binomial(rounds, a)
    lb, eb = _log_binomial(rounds, b)
    return la - ea, lb + eb, rounds * math.log(a / b) * (1.0 + 1e-9) + 1e-9


def _total(sigma: float, t: int, k: int, rounds: int, z: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The exceedances of all rounds together: ``Bin(E k, p_1) * Bin(E (t - k), p_0)`` against
    ``Bin(E t, p_0)``, on ``0 .. n`` (the outcomes above ``n`` left out of both: a sub-pair);
    as :func:`_indicator`."""
    p0 = float(_special.ndtr(-z))
    p1 = float(_special.ndtr(1.0 / sigma - z))
    if not (0.0 < p0 < p1 < 1.0):
        return None
    nm, nu = rounds * k, rounds * (t - k)
    mean = nm * p1 + nu * p0
    n = int(min(rounds * t, mean + 12.0 * math.sqrt(mean + 1.0) + 32.0))
    if n > _TOTAL_CELLS:
        return None

    def law(m: int, p: float) -> tuple[np.ndarray, np.ndarray]:
        # log Bin(m, p)(j), j = 0 .. min(m, n), and its rounding, widened by what p's own
        # (1e-12 relative) uncertainty moves it: |d log pmf / d log p| <= j + m p / (1 - p)
        j = np.arange(min(m, n) + 1, dtype=float)
        gl = _special.gammaln
        lc = gl(m + 1.0) - gl(j + 1.0) - gl(m - j + 1.0)
        lp, l1 = math.log(p), math.log1p(-p)
        terms = lc + j * lp + (m - j) * l1
        err = (1e-12 + 32.0 * _U * (gl(m + 1.0) + np.abs(j * lp) + np.abs((m - j) * l1) + m)
               + 1e-12 * (j + 2.0 * m * p / (1.0 - p)))
        return terms, err

    (lm, em), (lu, eu), (lq, eq) = law(nm, p1), law(nu, p0), law(rounds * t, p0)
    # (sums of non-negative products: each within (terms + 2) u of its exact value)
    conv = np.convolve(np.exp(lm - em), np.exp(lu - eu))[: n + 1] * (1.0 - (min(nm, n) + 3) * _U)
    with np.errstate(divide="ignore"):
        lp_lo = np.log(conv)
    lq_hi = (lq + eq)[: lp_lo.size]
    lp_lo = lp_lo[: lq_hi.size]
    top = float(np.max(lp_lo - lq_hi)) if lp_lo.size else 0.0
    return lp_lo, lq_hi, max(top, 0.0) * (1.0 + 1e-9) + 1e-9


def _best(sigma: float, t: int, k: int, rounds: int, value) -> float:
    """The largest ``value(law)`` over both statistics and a grid of thresholds (0 if none)."""
    def at(statistic, level: float) -> float:
        tail = min(10.0 ** -level / t, 0.5)
        law = statistic(sigma, t, k, rounds, float(-_special.ndtri(tail)))
        return 0.0 if law is None else value(law)

    best = 0.0
    for statistic in (_indicator, _total):
        coarse = {lv: at(statistic, float(lv)) for lv in _COARSE}
        level = max(coarse, key=lambda lv: coarse[lv])
        if coarse[level] > 0.0:
            best = max(best, coarse[level], *(at(statistic, level + f) for f in _FINE))
    return best


def exceedance_lower(sigma: float, t: int, k: int, rounds: int, delta: float) -> float:
    """A certified lower end on the epsilon at ``delta`` of ``rounds`` rounds of
    ``k``-of-``t`` allocation of the Gaussian mechanism (noise multiplier ``sigma``), from
    the exceedances of a threshold (see the module); 0 where they give none."""
    if not (rounds <= MAX_ROUNDS and 0.0 < delta < 1.0 and 1 <= k < t):
        return 0.0
    return _best(sigma, t, k, rounds, lambda law: _epsilon_of(law[0], law[1], law[2], delta))


def exceedance_delta_lower(sigma: float, t: int, k: int, rounds: int, epsilon: float) -> float:
    """A certified lower end on delta at ``epsilon`` of the same rounds, from the same statistics."""
    if not (rounds <= MAX_ROUNDS and 1 <= k < t and math.isfinite(epsilon)):
        return 0.0
    return min(1.0, _best(sigma, t, k, rounds, lambda law: _delta_lower(law[0], law[1], max(epsilon, 0.0))))
