"""Numerical truth for one round of random allocation (Gaussian, 1 of ``t`` steps).

Shares no code with pld (numpy and scipy only).  The round's likelihood ratio is ``S/t``,
``S`` a sum of ``t`` iid log-normals (``log Y ~ N(-a^2/2, a^2)`` under ``Q``, ``a = 1/sigma``),
so ``delta_remove(eps) = E_Q[(S/t - e^eps)_+]`` and ``delta_add(eps) = E_Q[(1 - e^eps S/t)_+]``.

Method: ``Y`` on a uniform grid (cell masses from the normal CDF, each at its cell's middle;
cut where ``Q(Y > top)`` is ~1e-44), exponentially tilted so that the tilted mean of ``S``
sits at the threshold (``t e^eps`` or ``t e^-eps``), its ``t``-fold law one FFT power, then
untilted.  Tilted, the entries that decide delta are the bulk, where double precision is
relative.  Accuracy about 1e-5 relative (midpoint rule, ``O(h^2)``: halving ``h`` moves it
by ~1e-6 at ``per_sd = 300``).  Not certified: a check, as Monte Carlo is.  Cost grows as
``e^{14/sigma}``: meant for ``sigma >= 2.5`` (:func:`affordable`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

#: grid points per standard deviation of one coordinate
PER_SD = 300.0
#: most grid points of one coordinate (:func:`affordable`)
MAX_CELLS = 2_000_000


def _top(a: float) -> float:
    return math.exp(-a * a / 2 + 14.0 * a)


def affordable(sigma: float, per_sd: float = PER_SD) -> bool:
    """Whether one coordinate's grid stays within ``MAX_CELLS`` points."""
    a = 1.0 / sigma
    return _top(a) / (math.sqrt(math.expm1(a * a)) / per_sd) <= MAX_CELLS


def _cells(a: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """``Y``'s Q-mass on cells ``[(j - 1/2) h, (j + 1/2) h)`` (the first from 0), at ``j h``."""
    n = int(math.ceil(_top(a) / h)) + 1
    edges = (np.arange(n + 1) - 0.5) * h
    edges[0] = 0.0
    with np.errstate(divide="ignore"):
        z = (np.log(edges) + a * a / 2) / a
    # (upper tails above the median: their differences keep relative accuracy)
    mass = np.where(z[:-1] > 0, ndtr(-z[:-1]) - ndtr(-z[1:]), ndtr(z[1:]) - ndtr(z[:-1]))
    return np.arange(n) * h, np.maximum(mass, 0.0)


def round_delta(sigma: float, t: int, eps: float, direction: str = "remove", per_sd: float = PER_SD) -> float:
    """``delta(eps)`` of one round of 1-of-``t`` allocation in one direction."""
    a = 1.0 / sigma
    y, m = _cells(a, math.sqrt(math.expm1(a * a)) / per_sd)
    h = y[1]
    c = math.exp(eps if direction == "remove" else -eps)
    log_m = np.where(m > 0, np.log(np.maximum(m, 1e-320)), -np.inf)

    def tilted(theta: float) -> tuple[np.ndarray, float]:
        e = log_m + theta * y
        top = float(e.max())
        w = np.exp(e - top)
        return w / w.sum(), top + math.log(w.sum())

    theta = brentq(lambda th: t * float(np.dot(tilted(th)[0], y)) - t * c, -2000.0, 50.0, xtol=1e-12)
    w, log_mgf = tilted(theta)
    mean = t * float(np.dot(w, y))
    sd = math.sqrt(t * (float(np.dot(w, y * y)) - (mean / t) ** 2))
    size = 1 << max(14, int(math.ceil(math.log2((80.0 * sd + 10.0 * y[-1]) / h))))
    f = np.fft.irfft(np.fft.rfft(w, size) ** t, size)
    s = np.arange(size) * h
    s = s + np.round((mean - s) / (size * h)) * size * h  # (the circular index nearest the mean)
    gain = (s / t - c) if direction == "remove" else (1.0 - s / (t * c))
    keep = (gain > 0) & (f > 1e-250)
    logs = np.log(gain[keep]) + np.log(f[keep]) + t * log_mgf - theta * s[keep]
    top = float(logs.max())
    return math.exp(top) * float(np.exp(logs - top).sum())


def delta(sigma: float, t: int, eps: float) -> float:
    """The round's ``delta(eps)``: the larger direction's."""
    return max(round_delta(sigma, t, eps, "remove"), round_delta(sigma, t, eps, "add"))
