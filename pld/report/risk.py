"""What an epsilon means, certified: attack risk read off the f-DP trade-off curve.

Every number here is a certified bracket derived from pld's certified delta
bounds, with each approximation (the supremum over epsilon, root finding,
rounding) taken on the safe side.

The trade-off curve
-------------------
One direction ``d`` of a neighbouring relation is a pair ``(P, Q)`` with
``delta_d(eps) = sup_S P(S) - e^eps Q(S)`` (pld's ``remove`` direction: ``P``
the output with the record, ``Q`` without; ``add``: the pair swapped).  A
membership test with rejection region ``S`` under the null ``Q`` has
``FPR = Q(S)`` and ``TPR = P(S) <= e^eps FPR + delta_d(eps)`` for *every*
real ``eps``, and by Neyman-Pearson the infimum over ``eps`` is attained by a
test, so

    ``TPR_d(alpha) = inf_{eps in R} [delta_d(eps) + e^eps alpha] = 1 - T(Q, P)(alpha)``

(Dong, Roth & Su, JRSS-B 2022, Prop. 2.12; Kulynych et al., "Attack-Aware Noise
Calibration for Differential Privacy", NeurIPS 2024).  Negative ``eps`` are
read off the swapped direction, ``delta_d(-e) = 1 - e^-e + e^-e delta_dbar(e)``
(``e >= 0``), so only the curves pld certifies as (epsilon, delta) guarantees
(``eps >= 0`` of both directions) enter:

    ``TPR_d(alpha) = min( inf_{e>=0} delta_d(e) + e^e alpha,
                         inf_{e>=0} 1 - e^-e (1 - alpha - delta_dbar(e)) )``.

``remove`` is the membership test (null: the record is absent); ``add`` the
reverse test; the mechanism's risk at ``alpha`` is the larger of the two.
(dp_accounting's ``get_true_positive_rates`` uses the symmetric curve of the
larger of the two delta curves, an upper bound on both.)

Why the brackets are certified
------------------------------
*Upper end.*  Each ``eps`` gives a valid line ``TPR <= c + s alpha`` from an
upper bound on delta there; any finite set of them bounds the infimum from
above.  pld takes every point of the dominating grid's lattice at or above 0
(and 0), where that grid's own curve has its kinks, so the bound is the
dominating grid's exact trade-off curve.

*Lower end.*  The dominated grid stands for a pair whose delta ``delta*`` is at
most the true one at every ``eps`` (a post-processing of the true pair), and
``delta*(eps) = A - e^eps B`` between two lattice points (``A``, ``B`` its P-
and Q-mass above).  So ``delta*(eps) + e^eps alpha = A - e^eps (B - alpha)``
and its converted form are monotone between lattice points: their infimum over
each cell is at one of its ends, where the evaluator's certified lower bound
(minus a rounding margin for the lattice point's floating-point value) is
taken.  The minimum over all lattice points of ``[0, inf)``, 0 itself and the
limits at infinity is then a lower bound on the true curve, valid at every
``alpha``.  This needs the true pair to be the composed one (``PLD.tight``);
otherwise the lower end is the trade-off curve of ``PLD.bounds()[1]``, a
construction the true mechanism realises, and ``alpha`` (``TPR >= FPR`` for
every pair) where none is known.

*Gaussian compositions* (no grid: one Gaussian pair with ``mu``) use
:func:`pld.engine.gaussian_exact.delta_bounds` at points around the optimal
``eps``: upper as above; lower from convexity of ``H(gamma) = delta(log gamma)``
in ``gamma`` (a supremum of affine functions): between two points a convex
function lies above the extensions of its neighbouring secants, built from the
brackets' safe ends.

Every value is rounded outward by a relative ``_SLACK`` that covers the
floating-point products and sums (and ``scipy``'s ``ndtri`` where used).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from pld import _validate as v
from pld.distribution import PLD, TargetMissedWarning
from pld.engine import gaussian_exact
from pld.engine.grid import GridPLD

__all__ = ["TPR_RTOL", "DEFAULT_FPRS", "TradeOff", "AttackRisk", "GDPFit", "tradeoff", "attack_risk",
           "tpr_bounds", "fpr_bounds", "advantage_bounds", "gdp_fit", "reconstruction_bounds"]

_U = 2.0 ** -53
#: relative rounding allowed on one line's value (exp within 2 ulps, a product, a sum, margin)
_SLACK = 64 * _U
#: relative target of a TPR bracket: ``upper - lower <= TPR_RTOL * upper + TPR_ATOL``
TPR_RTOL = 1e-4
TPR_ATOL = 1e-12
#: false-positive rates reported by default
DEFAULT_FPRS = (1e-4, 1e-3, 1e-2, 0.1)
#: delta of the epsilon query whose grids are read first (the report's default)
DEFAULT_DELTA = 1e-5
#: at most this many further epsilon queries, tuned at the delta of the optimal epsilon
MAX_RETUNES = 2
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

    def __init__(self, up: _Lines | None, lo: _Lines | None):
        self.up, self.lo = up, lo

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

    def optimal_delta(self, alpha: float) -> float | None:
        """delta at the epsilon whose line gives the upper end at ``alpha`` (tuning only)."""
        if self.up is None:
            return None
        j = int(self.up.at(np.array([alpha]))[1][0])
        return float(self.up.delta[j])


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

    def optimal_delta(self, alpha: float) -> float | None:
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


# ------------------------------------------------------------- results
@dataclass(frozen=True)
class AttackRisk:
    """Certified brackets on the best membership-inference attack's TPR at given FPRs.

    ``lower``/``upper``: the larger of the two directions (the mechanism's risk);
    ``by_direction[d] = (lower, upper)``; ``binding[i]`` the direction with the
    larger upper end, ``certain[i]`` whether its lower end is above every other
    direction's upper end (so the binding direction is proven).
    """

    fpr: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    by_direction: dict
    binding: tuple[str, ...]
    certain: tuple[bool, ...]
    target_met: tuple[bool, ...]
    tight: bool

    def as_dict(self) -> dict:
        return {"fpr": list(self.fpr), "tpr_lower": list(self.lower), "tpr_upper": list(self.upper),
                "binding_direction": list(self.binding), "binding_certain": list(self.certain),
                "target_met": list(self.target_met), "tight": self.tight,
                "by_direction": {d: {"tpr_lower": list(lo), "tpr_upper": list(hi)}
                                 for d, (lo, hi) in self.by_direction.items()}}

    def __str__(self) -> str:
        rows = ["      FPR   TPR upper   certified bracket           binding"]
        for i, a in enumerate(self.fpr):
            rows.append(f"{a:9.3g}   {_up(self.upper[i]):<9}   [{_down(self.lower[i])}, {_up(self.upper[i])}]"
                        f"   {self.binding[i]}{'' if self.certain[i] else ' (not proven)'}")
        return "\n".join(rows)


@dataclass(frozen=True)
class GDPFit:
    """The Gaussian-DP parameter that best fits the trade-off curve on ``[fpr_min, fpr_max]``.

    ``mu_lower``/``mu_upper`` bracket ``max_i Phi^-1(TPR(alpha_i)) - Phi^-1(alpha_i)``
    over the FPR grid (dp_accounting's estimate, with TPR the larger direction);
    ``mu_range_upper`` certifies that the mechanism is ``mu``-GDP on the whole
    range (``TPR(alpha) <= Phi(Phi^-1(alpha) + mu)`` for every alpha in it);
    ``gap_upper`` bounds how far below that Gaussian curve the true one can fall
    anywhere on the range (:meth:`within`).
    """

    mu_lower: float
    mu_upper: float
    mu_range_upper: float
    fpr_min: float
    fpr_max: float
    gap_upper: float

    def within(self, distance: float) -> bool:
        """True if the curve is proven within ``distance`` (in TPR) of ``G_mu_range_upper``."""
        return self.gap_upper <= distance


def _up(x: float) -> str:
    return f"{math.nextafter(float(f'{x:.5g}'), math.inf) if float(f'{x:.5g}') < x else float(f'{x:.5g}'):.5g}"


def _down(x: float) -> str:
    r = float(f"{x:.5g}")
    return f"{math.nextafter(r, -math.inf) if r > x else r:.5g}"


# ------------------------------------------------------------- the curve
class TradeOff:
    """The certified trade-off curves of a :class:`pld.PLD`, per direction.

    Built on the grids of the epsilon query at ``delta`` (default 1e-5; pass the
    delta you already queried and nothing is recomputed); where a TPR bracket
    misses :data:`TPR_RTOL`, grids tuned at the delta of its optimal epsilon
    are added (at most :data:`MAX_RETUNES`) and the brackets intersected.
    """

    def __init__(self, pld_obj: PLD, *, delta: float | None = None):
        if not isinstance(pld_obj, PLD):
            raise TypeError(f"pld_obj must be a pld.PLD, got {type(pld_obj).__name__}")
        self.pld = pld_obj
        self.delta = DEFAULT_DELTA if delta is None else v.real("delta", delta, low=v.MIN_DELTA, high=1.0,
                                                                   high_open=True)
        self.tight = pld_obj.tight
        self._views = pld_obj.bounds()
        self.directions = pld_obj.directions if self.tight else self._views[0].directions
        self._tunings: list[dict] = []
        self._tuned: set[float] = set()
        self._add_tuning(self.delta)

    def _add_tuning(self, delta: float) -> None:
        upper_view, lower_view = self._views
        ups = _sources(upper_view, delta, upper=True)
        los = _sources(lower_view, delta, upper=False) if lower_view is not None else None
        tuning = {}
        for d in self.directions:
            up = ups.get(d, ups.get("remove"))
            lo = None if los is None else los.get(d, los.get("remove"))
            tuning[d] = (up, lo)
        self._tunings.append(tuning)
        self._tuned.add(delta)

    def _direction_tpr(self, d: str, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = alpha.copy(), np.ones(alpha.shape)
        for tuning in self._tunings:
            up, low = tuning[d]
            hi = np.minimum(hi, up.tpr(alpha)[1])
            if low is not None:
                lo = np.maximum(lo, low.tpr(alpha)[0])
        return np.minimum(lo, hi), hi

    def tpr(self, fpr) -> AttackRisk:
        """Certified TPR brackets at ``fpr`` (scalar or sequence, each in [0, 1])."""
        alpha, _ = v.real_array("fpr", fpr, low=0.0, high=1.0)
        alpha = np.atleast_1d(alpha).ravel()
        for _ in range(MAX_RETUNES + 1):
            per = {d: self._direction_tpr(d, alpha) for d in self.directions}
            lo = np.max([p[0] for p in per.values()], axis=0)
            hi = np.max([p[1] for p in per.values()], axis=0)
            met = hi - lo <= TPR_RTOL * hi + TPR_ATOL
            if np.all(met) or not self._retune(int(np.flatnonzero(~met)[0]), alpha, per):
                break
        if not np.all(met):
            j = int(np.flatnonzero(~met)[0])
            why = ("a part is not tight: the lower end is a dominated construction's curve" if not self.tight
                   else "the grids' delta brackets leave this width")
            warnings.warn(f"TPR bracket [{lo[j]:.6g}, {hi[j]:.6g}] at FPR {alpha[j]:.3g} is wider than its target "
                          f"(upper - lower <= {TPR_RTOL:g} * upper): {why}. Both ends are certified.",
                          TargetMissedWarning, stacklevel=3)
        names = list(per)
        binding, certain = [], []
        for i in range(alpha.size):
            k = int(np.argmax([per[d][1][i] for d in names]))
            binding.append(names[k])
            certain.append(all(per[names[k]][0][i] > per[d][1][i] for d in names if d != names[k]))
        return AttackRisk(tuple(alpha.tolist()), tuple(lo.tolist()), tuple(hi.tolist()),
                          {d: (tuple(p[0].tolist()), tuple(p[1].tolist())) for d, p in per.items()},
                          tuple(binding), tuple(certain), tuple(bool(x) for x in met), self.tight)

    def _retune(self, j: int, alpha: np.ndarray, per: dict) -> bool:
        """Add grids tuned at the delta of the optimal epsilon at ``alpha[j]`` (a missed one)."""
        if len(self._tunings) > MAX_RETUNES:
            return False
        best = max(self.directions, key=lambda d: float(per[d][1][j]))
        target = self._tunings[-1][best][0].optimal_delta(float(alpha[j]))
        if target is None or not math.isfinite(target) or target <= 0.0:
            return False
        target = min(max(target, 10.0 * v.MIN_DELTA), 0.5)
        if any(abs(math.log(target / t)) < 0.05 for t in self._tuned):
            return False
        self._add_tuning(target)
        return True

    def advantage(self) -> tuple[float, float]:
        """Certified ``(lower, upper)`` on the largest ``TPR - FPR`` of any attack: the
        total variation ``delta(0)``, the same in both directions (so the smallest
        upper end and the largest lower end over directions and grids hold)."""
        lo, hi = 0.0, 1.0
        for tuning in self._tunings:
            for up, low in tuning.values():
                hi = min(hi, up.tv()[1])
                if low is not None:
                    lo = max(lo, low.tv()[0])
        return min(lo, hi), hi

    def tpr_bounds(self, fpr) -> tuple:
        """``(lower, upper)`` on the larger direction's TPR (scalar in, scalars out)."""
        _, scalar = v.real_array("fpr", fpr, low=0.0, high=1.0)
        r = self.tpr(fpr)
        if scalar:
            return r.lower[0], r.upper[0]
        return np.array(r.lower), np.array(r.upper)

    def fpr_bounds(self, tpr, *, direction: str | None = None) -> tuple:
        """Certified ``(lower, upper)`` on the smallest FPR at which an attack reaches TPR ``tpr``.

        ``direction=None``: the smaller over both directions (the mechanism's
        most effective test).  Via ``FPR(beta) = inf{alpha: TPR(alpha) >= beta}``:
        the upper lines give ``alpha`` below which even the upper bound stays
        under ``beta``, the lower lines an ``alpha`` from which the lower bound
        reaches it.
        """
        beta, scalar = v.real_array("tpr", tpr, low=0.0, high=1.0)
        b = np.atleast_1d(beta).ravel()
        dirs = self.directions if direction is None else (v.choice("direction", direction, self.directions),)
        lo, hi = np.ones(b.shape), np.ones(b.shape)
        for d in dirs:
            d_lo, d_hi = np.zeros(b.shape), b.copy()
            for tuning in self._tunings:
                up, low = tuning[d]
                d_lo = np.maximum(d_lo, up.fpr(b)[0])
                if low is not None:
                    d_hi = np.minimum(d_hi, low.fpr(b)[1])
            lo, hi = np.minimum(lo, d_lo), np.minimum(hi, np.maximum(d_hi, d_lo))
        if scalar:
            return float(lo[0]), float(hi[0])
        return lo.reshape(beta.shape), hi.reshape(beta.shape)

    def gdp(self, fprs=None) -> GDPFit:
        """The GDP ``mu`` that fits the curve, certified (see :class:`GDPFit`).

        ``fprs``: sorted grid in ``(0, 1/2]``, default dp_accounting's
        ``logspace(-12, log10(1/2), 500)``.  Both directions are read on it:
        the swapped direction's curve is this one's reflection, and with both
        the half ``alpha <= 1/2`` covers every point of either curve whose
        reflection has ``alpha >= fprs[0]``.
        """
        a = np.logspace(-12, math.log10(0.5), 500) if fprs is None else np.sort(np.atleast_1d(
            v.real_array("fprs", fprs, low=0.0, high=0.5, low_open=True)[0]).ravel())
        if a.size < 2:
            raise ValueError(f"fprs must hold at least two false-positive rates, got {a.size}")
        per = {d: self._direction_tpr(d, a) for d in self.directions}
        za = ndtri(a)
        pad = 1e-12
        mu_lo, mu_hi = -math.inf, -math.inf
        for lo, hi in per.values():
            with np.errstate(divide="ignore"):
                mu_lo = max(mu_lo, float(np.max(ndtri(lo) - za)) - pad)
                mu_hi = max(mu_hi, float(np.max(ndtri(hi) - za)) + pad)
        mu_lo, mu_hi = max(mu_lo, 0.0), max(mu_hi, 0.0)

        # on a cell [a_i, a_{i+1}]: TPR(alpha) <= hi(a_{i+1}) and Phi^-1(alpha) >= Phi^-1(a_i)
        # (a denser grid narrows the cells' slack, about log(a_{i+1}/a_i) / |Phi^-1(a_i)|)
        top = np.max([p[1] for p in per.values()], axis=0)
        low = np.max([p[0] for p in per.values()], axis=0)
        with np.errstate(divide="ignore"):
            mu_range = max(float(np.max(ndtri(top[1:]) - za[:-1])) + pad, mu_hi)
        # G_mu(alpha) - TPR(alpha) <= G_mu(a_{i+1}) - lo(a_i) on a cell (both increasing)
        gap = (float(np.max(ndtr(za[1:] + mu_range) * (1.0 + _SLACK) - low[:-1])) + pad
               if math.isfinite(mu_range) else 1.0)
        return GDPFit(mu_lo, mu_hi, max(mu_range, 0.0), float(a[0]), float(a[-1]), min(max(gap, 0.0), 1.0))


def _sources(view: PLD, delta: float, *, upper: bool) -> dict:
    """``{direction: source}`` of one view (a tight composition) from the grids at ``delta``."""
    mu = view._closed_form_mu()
    if mu is not None:
        return {"remove": _GaussianSource(mu)}
    grids = view.grids(delta)
    out = {}
    for d, pair in grids.items():
        other = grids.get("add" if d == "remove" else "remove", pair)
        if upper:
            out[d] = _GridSource(_lattice_lines(pair.dominating, other.dominating, True), None)
        else:
            out[d] = _GridSource(None, _lattice_lines(pair.dominated, other.dominated, False))
    return out


# ------------------------------------------------------------- functions
def tradeoff(pld_obj: PLD, *, delta: float | None = None) -> TradeOff:
    """The certified trade-off curves of ``pld_obj`` (see :class:`TradeOff`)."""
    return TradeOff(pld_obj, delta=delta)


def attack_risk(pld_obj: PLD, fprs=DEFAULT_FPRS, *, delta: float | None = None) -> AttackRisk:
    """Certified TPR of the best membership-inference attack at each FPR in ``fprs``.

    Examples
    --------
    >>> import pld
    >>> r = pld.risk.attack_risk(pld.Gaussian(sigma=2.0).pld(), [0.01])
    >>> r.lower[0] <= 0.0339 <= r.upper[0]      # Phi(Phi^-1(0.01) + 1/2)
    True
    """
    return TradeOff(pld_obj, delta=delta).tpr(fprs)


def tpr_bounds(pld_obj: PLD, fpr, *, delta: float | None = None):
    """Certified ``(lower, upper)`` on the TPR at ``fpr`` (the larger direction)."""
    return TradeOff(pld_obj, delta=delta).tpr_bounds(fpr)


def fpr_bounds(pld_obj: PLD, tpr, *, delta: float | None = None, direction: str | None = None):
    """Certified ``(lower, upper)`` on the smallest FPR at which some attack reaches ``tpr``."""
    return TradeOff(pld_obj, delta=delta).fpr_bounds(tpr, direction=direction)


def advantage_bounds(pld_obj: PLD, *, delta: float | None = None) -> tuple[float, float]:
    """Certified ``(lower, upper)`` on the largest advantage ``TPR - FPR`` of any attack.

    ``sup_S P(S) - Q(S)`` is the total variation of the pair, ``delta(0)``,
    the same in both directions (Kulynych et al. 2024; Yeom et al. 2018 define
    the advantage), read off the grids of the epsilon query at ``delta``
    (``pld_obj.delta_bounds(0.0)`` tunes grids of its own: narrower, slower).
    """
    return TradeOff(pld_obj, delta=delta).advantage()


def gdp_fit(pld_obj: PLD, fprs=None, *, delta: float | None = None) -> GDPFit:
    """The Gaussian-DP ``mu`` that best fits ``pld_obj``'s trade-off curve (:class:`GDPFit`)."""
    return TradeOff(pld_obj, delta=delta).gdp(fprs)


def reconstruction_bounds(pld_obj: PLD, candidates: int | None = None, *, baseline: float | None = None,
                          delta: float | None = None) -> tuple[float, float]:
    """Certified ``(lower, upper)`` on the bound of Hayes, Mahloujifar & Balle on
    the success of any reconstruction attack.

    Hayes, Mahloujifar & Balle, "Bounding Training Data Reconstruction in
    DP-SGD", NeurIPS 2023 (Thm. 2; with Kaissis et al. 2023's hypothesis-testing
    form): for an informed adversary who knows every other record, a target
    drawn from a prior whose most likely success region has probability
    ``kappa`` (the baseline: ``1/m`` for a uniform prior over ``m`` candidates
    and exact reconstruction), the probability that the reconstruction is
    correct is at most the blow-up ``B_kappa(P, Q) = sup{P(E): Q(E) <= kappa}``
    of a dominating pair with ``P`` the output with the target and ``Q``
    without it: ``TPR_remove(kappa)``, the remove direction's TPR at FPR
    ``kappa``.  The lower end is that bound's certified lower end: the bound
    is attained by the pair (not necessarily by a concrete attack).

    Parameters
    ----------
    candidates : int, optional
        ``m >= 2``, for the uniform prior over ``m`` candidates (``kappa = 1/m``).
    baseline : float, optional
        ``kappa`` in ``(0, 1]`` instead of ``candidates``.
    """
    if (candidates is None) == (baseline is None):
        raise TypeError("give exactly one of candidates (m >= 2) and baseline (kappa in (0, 1])")
    if candidates is not None:
        m = v.integer("candidates", candidates, low=2, high=v.MAX_COUNT)
        kappa = 1.0 / m
    else:
        kappa = v.real("baseline", baseline, low=0.0, high=1.0, low_open=True)
    t = TradeOff(pld_obj, delta=delta)
    r = t.tpr([kappa])
    lo, hi = r.by_direction["remove"]
    return lo[0], hi[0]



#: the false-positive rate of the ``pld dpsgd`` report's attack line
REPORT_FPR = 0.01


def report_summary(pld_obj: PLD, delta: float) -> dict:
    """The ``pld dpsgd`` report's attack line: the certified TPR at 1% FPR, read off
    the grids of the report's own epsilon query at ``delta`` (milliseconds).

    A bracket wider than its target is said in ``target_met`` (the report
    prints it as a bracket either way), not warned.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TargetMissedWarning)
        r = TradeOff(pld_obj, delta=delta).tpr([REPORT_FPR])
    return {"fpr": REPORT_FPR, "tpr_lower": r.lower[0], "tpr_upper": r.upper[0], "binding_direction": r.binding[0],
            "target_met": r.target_met[0]}
