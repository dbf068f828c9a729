"""The machinery of :mod:`pld.report.risk`: one direction's certified trade-off curve.

:class:`_Lines` (a family of lines ``TPR <= c + s alpha`` or the lower
function's cell ends), :func:`_lattice_lines` (from one grid and the swapped
direction's), :class:`_Envelope` (several grids' lower ends at once),
:class:`_GaussianSource` (Gaussian compositions, from the closed form with
convex secants).  Why each bound holds: :mod:`pld.report.risk`'s docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from pld.engine import gaussian_exact
from pld.engine.grid import GridPLD

_U = 2.0 ** -53
#: relative rounding allowed on one line's value (exp within 2 ulps, a product, a sum, margin)
_SLACK = 64 * _U
#: lattice points above this loss are replaced by one line (e^700 is near the float range)
_MAX_EPS = 700.0


# ------------------------------------------------------------- line families
@dataclass(frozen=True)
class _Lines:
    """``TPR(alpha) <= min_j c_j + s_j alpha`` (``upper``) or ``>= max(alpha, min_j ...)``.

    ``eps`` is the epsilon each line comes from (for tuning only; negative: the
    swapped direction's ``-eps``); ``delta`` the delta it used there.
    """

    c: np.ndarray
    s: np.ndarray
    upper: bool
    eps: np.ndarray
    delta: np.ndarray

    def at(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bound at each alpha, and the index of the line that gives it."""
        out = np.empty(alpha.size)
        idx = np.empty(alpha.size, dtype=np.int64)
        for i, a in enumerate(alpha.ravel()):
            with np.errstate(over="ignore", invalid="ignore"):
                vals = self.c + self.s * a
            vals = np.where(np.isnan(vals), np.inf, vals)
            j = int(np.argmin(vals))
            idx[i] = j
            out[i] = vals[j]
        if self.upper:
            out = np.minimum(out * (1.0 + _SLACK), 1.0)
        else:
            out = np.maximum(out * (1.0 - _SLACK), alpha.ravel())
        return out.reshape(alpha.shape), idx.reshape(alpha.shape)

    def inverse(self, beta: np.ndarray) -> np.ndarray:
        """Upper lines: a lower bound on ``inf{alpha: TPR(alpha) >= beta}``; lower
        lines: an upper bound on it (``TPR(alpha) >= beta`` holds there)."""
        out = np.empty(beta.size)
        for i, b in enumerate(beta.ravel()):
            f = b / (1.0 + _SLACK) if self.upper else b / (1.0 - _SLACK)
            with np.errstate(divide="ignore", invalid="ignore"):
                need = np.where(self.s > 0, (f - self.c) / self.s, np.where(self.c >= f, -np.inf, np.inf))
            a = float(np.max(need)) if need.size else 0.0
            if self.upper:
                out[i] = min(max(a * (1.0 - 4 * _U) if a > 0 else a, 0.0), b)
            else:
                out[i] = min(max(a * (1.0 + 4 * _U), 0.0), b)
        return out.reshape(beta.shape)


def _points(grid: GridPLD) -> np.ndarray:
    """0 and the grid's lattice points in ``(0, _MAX_EPS]``."""
    pts = grid.losses()
    return np.concatenate(([0.0], pts[(pts > 0) & (pts <= _MAX_EPS)]))


def _lattice_lines(own: GridPLD, other: GridPLD, upper: bool) -> _Lines:
    """Lines of one direction from its grid (``own``) and the swapped direction's
    (``other``), both dominating (``upper``) or both dominated."""
    e1 = _points(own)
    d1 = own.delta(e1)
    e2 = _points(other)
    d2 = other.delta(e2)
    g1 = np.exp(e1)
    g2 = np.exp(-e2)
    c1, s1 = d1.copy(), g1
    c2, s2 = -np.expm1(-e2) + g2 * d2, g2
    if not upper:
        # the lattice point is the exact real (k0 + i) h, its float within
        # u |l| of it; the lower function moves by at most its Lipschitz
        # constant (e^eps (Q-mass + alpha), resp. 1 + alpha + 1) times that
        m1 = 4.0 * _U * np.abs(e1) * g1
        c1, s1 = c1 - m1, s1 * (1.0 - 4.0 * _U * np.abs(e1))
        c2 = c2 - 8.0 * _U * np.abs(e2)
        # beyond the last point on each side: the limits (delta* at +inf plus
        # e^700 alpha; 1 on the converted side), where the cells end
        inf_lo = float(own.delta(np.array([np.inf]))[0])
        c1 = np.concatenate((c1, [inf_lo]))
        s1 = np.concatenate((s1, [math.exp(_MAX_EPS)]))
        e1 = np.concatenate((e1, [math.inf]))
        d1 = np.concatenate((d1, [inf_lo]))
        c2 = np.concatenate((c2, [1.0]))
        s2 = np.concatenate((s2, [0.0]))
        e2 = np.concatenate((e2, [math.inf]))
        d2 = np.concatenate((d2, [0.0]))
    return _Lines(np.concatenate((c1, c2)), np.concatenate((s1, s2)), upper,
                  np.concatenate((e1, -e2)), np.concatenate((d1, d2)))


# ------------------------------------------------------------- one direction
class _GridSource:
    """One direction's trade-off brackets from the certified grids of an epsilon query."""

    def __init__(self, up: _Lines | None, lo: _Lines | None, grids: tuple | None = None):
        self.up, self.lo = up, lo
        #: the dominated grids (own, swapped direction's) behind ``lo``, for :class:`_Envelope`
        self.grids = grids

    def tpr(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hi = self.up.at(alpha)[0] if self.up is not None else np.ones(alpha.shape)
        lo = self.lo.at(alpha)[0] if self.lo is not None else alpha.copy()
        return lo, np.maximum(hi, lo)

    def fpr(self, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo = self.up.inverse(beta) if self.up is not None else np.zeros(beta.shape)
        hi = self.lo.inverse(beta) if self.lo is not None else beta.copy()
        return lo, np.maximum(hi, lo)

    def tv(self) -> tuple[float, float]:
        """Bracket on delta(0), the pair's total variation (the first point of each side is 0)."""
        return (float(self.lo.delta[0]) if self.lo is not None else 0.0,
                float(self.up.delta[0]) if self.up is not None else 1.0)

    def optimal_delta(self, alpha: float) -> tuple[float, float] | None:
        """``(delta, epsilon)`` of the line that gives the upper end at ``alpha`` (tuning only)."""
        if self.up is None:
            return None
        j = int(self.up.at(np.array([alpha]))[1][0])
        return float(self.up.delta[j]), float(self.up.eps[j])


class _Envelope:
    """The lower end from several dominated grids of one direction at once.

    Each grid's lower function is monotone between its own lattice points; on
    the common refinement (the union of all lattices) every grid's is monotone
    on every cell, and the true curve lies above each of them, so above their
    maximum: ``inf_cell g >= max_i min(g_i at the cell's ends)``.  A grid tuned
    for the tail (whose round-off bound swamps the bulk) and one tuned for the
    bulk then each bound the cells they resolve.
    """

    def __init__(self, pairs: list):
        self.halves = [self._half([own for own, _ in pairs]), self._half([other for _, other in pairs])]

    @staticmethod
    def _half(grids: list) -> tuple:
        pts = np.unique(np.concatenate([_points(g) for g in grids]))
        vals = np.vstack([g.delta(pts) for g in grids])
        tail = max(float(g.delta(np.array([np.inf]))[0]) for g in grids)
        return pts, vals, tail

    def at(self, alpha: np.ndarray) -> np.ndarray:
        out = np.empty(alpha.size)
        (e1, v1, tail1), (e2, v2, _) = self.halves
        g1, g2 = np.exp(e1), np.exp(-e2)
        eta1, eta2 = 4.0 * _U * np.abs(e1), 8.0 * _U * np.abs(e2)
        for i, a in enumerate(alpha.ravel()):
            with np.errstate(over="ignore", invalid="ignore"):
                f1 = v1 + g1 * a - g1 * (1.01 + a) * eta1
                f2 = 1.0 - g2 * (1.0 - a - v2) - eta2
            c1 = np.max(np.minimum(f1[:, :-1], f1[:, 1:]), axis=0) if e1.size > 1 else np.max(f1, axis=0)
            c2 = np.max(np.minimum(f2[:, :-1], f2[:, 1:]), axis=0) if e2.size > 1 else np.max(f2, axis=0)
            val = min(float(np.min(c1)), float(np.min(c2)), tail1 + float(g1[-1]) * a, 1.0)
            out[i] = max(a, val * (1.0 - _SLACK))
        return out.reshape(alpha.shape)


class _GaussianSource:
    """A composition of Gaussian mechanisms: one pair ``N(mu, 1)`` vs ``N(0, 1)``, symmetric."""

    #: points around the optimal epsilon, in units of mu
    OFFSETS = 1e-3 * np.arange(-10.0, 11.0)

    def __init__(self, mu: float):
        self.mu = mu

    def _one(self, a: float) -> tuple[float, float]:
        if a <= 0.0:
            return 0.0, 0.0  # no mass at infinite loss
        if a >= 1.0:
            return 1.0, 1.0
        mu = self.mu
        # the optimal epsilon of G_mu at alpha (only where the points go)
        center = -mu * float(ndtri(a)) - mu * mu / 2.0
        eps = center + mu * self.OFFSETS
        dlo, dhi = gaussian_exact.delta_bounds(mu, eps)
        gam = np.exp(eps)
        ghi = (dhi + gam * a) * (1.0 + _SLACK)
        glo = (dlo + gam * a) * (1.0 - _SLACK)
        hi = min(1.0, float(np.min(ghi)))
        lo = _convex_lower(gam, glo, ghi)
        lo = max(a, lo - 1e-9 * abs(lo))
        return min(lo, hi), hi

    def tpr(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pairs = [self._one(float(a)) for a in alpha.ravel()]
        lo = np.array([p[0] for p in pairs]).reshape(alpha.shape)
        hi = np.array([p[1] for p in pairs]).reshape(alpha.shape)
        return lo, hi

    def fpr(self, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Around the closed form ``Phi(Phi^-1(beta) - mu)``, each end moved
        outwards until the certified TPR bracket proves it."""
        lo = np.empty(beta.size)
        hi = np.empty(beta.size)
        for i, b in enumerate(beta.ravel()):
            if b <= 0.0 or b >= 1.0:
                lo[i] = hi[i] = min(max(b, 0.0), 1.0)
                continue
            a0 = float(ndtr(ndtri(b) - self.mu))
            lo[i], hi[i] = 0.0, b
            for r in (1e-9, 1e-7, 1e-5, 1e-3, 1e-1):
                if self._one(a0 * (1.0 - r))[1] < b:
                    lo[i] = a0 * (1.0 - r)
                    break
            for r in (1e-9, 1e-7, 1e-5, 1e-3, 1e-1):
                cand = min(a0 * (1.0 + r), b)
                if self._one(cand)[0] >= b:
                    hi[i] = cand
                    break
        return lo.reshape(beta.shape), hi.reshape(beta.shape)

    def tv(self) -> tuple[float, float]:
        lo, hi = gaussian_exact.delta_bounds(self.mu, np.array([0.0]))
        return float(lo[0]), float(hi[0])

    def optimal_delta(self, alpha: float) -> tuple[float, float] | None:
        return None  # (exact at every alpha: nothing to tune)


def _convex_lower(gam: np.ndarray, glo: np.ndarray, ghi: np.ndarray) -> float:
    """Lower bound on ``inf_{gamma > 0} g(gamma)`` for a convex ``g`` known to lie in
    ``[glo_j, ghi_j]`` at the sorted points ``gam_j`` (at least 4).

    Between ``gam_j`` and ``gam_{j+1}``, ``g`` lies above the secant through
    ``j-1, j`` extended to the right and the one through ``j+1, j+2`` extended
    to the left; beyond the ends, above the end secants extended.  Each secant
    is taken through the safe ends (``glo`` where it is the anchor, ``ghi`` at
    the far point), which lowers it.
    """
    n = gam.size
    cands = []
    # gamma in (0, gam_0]
    s = glo[0] - ghi[1]  # (g0 - g1) lowered: the slope of the left extension, sign flipped
    cands.append(glo[0] if s >= 0 else glo[0] + s * gam[0] / (gam[1] - gam[0]))
    # gamma >= gam_{n-1}
    s = glo[-1] - ghi[-2]
    cands.append(glo[-1] if s >= 0 else -math.inf)
    for j in range(n - 1):
        w = gam[j + 1] - gam[j]
        lines = []
        if j >= 1:
            # L1(t) = glo_j + (glo_j - ghi_{j-1}) * t w / (gam_j - gam_{j-1}), t in [0, 1]
            lines.append((glo[j], (glo[j] - ghi[j - 1]) * w / (gam[j] - gam[j - 1])))
        if j + 2 <= n - 1:
            # L2(t) = glo_{j+1} + (glo_{j+1} - ghi_{j+2}) (1 - t) w / (gam_{j+2} - gam_{j+1})
            k = (glo[j + 1] - ghi[j + 2]) * w / (gam[j + 2] - gam[j + 1])
            lines.append((glo[j + 1] + k, -k))
        if not lines:
            return -math.inf
        ts = [0.0, 1.0]
        if len(lines) == 2 and lines[0][1] != lines[1][1]:
            t = (lines[1][0] - lines[0][0]) / (lines[0][1] - lines[1][1])
            if 0.0 < t < 1.0:
                ts.append(t)
        cands.append(min(max(a + b * t for a, b in lines) for t in ts))
    return float(min(cands))
