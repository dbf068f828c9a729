"""The engine's certified grids as two sides per direction, for the curves.

For each direction of a :class:`pld.PLD` (``remove``, ``add``), :class:`Side`
holds one discretisation (``upper``: dominating; ``lower``: dominated) with its
round-off allowance, and answers ``delta(eps)``, log-moments and tail masses
from it; :class:`Direction` pairs the two sides.  :func:`directions` builds
them from the public API (see :mod:`pld.curves` for why each side bounds the
truth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from pld import _validate as _v

__all__ = ["Side", "Direction", "directions", "ROUND_OFF_FACTOR", "REL_SLACK", "CHORD_STEPS"]

#: safety factor on the engine's reported round-off bound (see module docstring)
ROUND_OFF_FACTOR = 2.0
#: relative slack for this module's own floating-point sums
REL_SLACK = 1e-12
#: chord widths (in eps) tried by the tail bounds, relative to the grid spacing
CHORD_STEPS = np.geomspace(0.5, 4000.0, 72)


@dataclass(frozen=True, eq=False)
class Side:
    """One discretised side of one direction, ready for vectorised queries.

    ``losses`` is the uniform grid, ``log_mass`` the untilted log P-masses,
    ``inf_mass`` the P-mass at ``+inf``; ``log_err`` is the log of the
    round-off bound (l2, tilted units) and ``log_scale``/``lam`` untilt it.
    """

    losses: np.ndarray
    log_mass: np.ndarray
    inf_mass: float
    upper: bool
    lam: float
    log_scale: float
    log_err: float

    @classmethod
    def build(cls, pld_obj, direction: str, side: str, delta: float, info: dict,
              tilt: float | None = None) -> Side:
        losses, masses, inf_mass = pld_obj.distribution(direction, side, delta=delta, tilt=tilt)
        losses = np.asarray(losses, dtype=np.float64)
        masses = np.asarray(masses, dtype=np.float64)
        if losses.size < 2:
            raise ValueError("the engine returned a grid with fewer than two points")
        if side == "upper":
            # the round-off bound below must describe this very grid
            lo_w, hi_w = info.get("loss_window", (losses[0], losses[-1]))
            tol = 1e-9 * max(1.0, abs(lo_w), abs(hi_w))
            if abs(losses[0] - lo_w) > tol or abs(losses[-1] - hi_w) > tol:
                raise RuntimeError("PLD.explain() and PLD.distribution() describe different grids; "
                                   "cannot attach the engine's round-off bound")
        with np.errstate(divide="ignore"):
            log_mass = np.log(np.maximum(masses, 0.0))
        lam = float(info["tilt"])
        err = float(info["fft_error_bound"]) * ROUND_OFF_FACTOR
        log_scale = float(special.logsumexp(log_mass + lam * losses)) if losses.size else 0.0
        log_err = math.log(err) if err > 0 else -math.inf
        return cls(losses, log_mass, float(inf_mass), side == "upper", lam, log_scale, log_err)

    # -- cached suffix sums ---------------------------------------------------
    def _suffix(self):
        cache = self.__dict__.get("_cache")
        if cache is None:
            l, lm = self.losses, self.log_mass
            mass = np.exp(lm)
            # A_k = sum_{i>=k} m_i ; B_k = sum_{i>=k} m_i e^{l_k - l_i}
            a = np.concatenate((np.cumsum(mass[::-1])[::-1], [0.0]))
            with np.errstate(invalid="ignore"):
                log_b_rev = np.logaddexp.accumulate((lm - l)[::-1])[::-1]
                b = np.exp(np.minimum(log_b_rev + l, 0.0))
            b = np.concatenate((b, [0.0]))
            # W_k = err * sqrt(sum_{i>=k} (e^{log_scale - lam l_i})^2): round-off allowance
            log_w = 0.5 * np.logaddexp.accumulate((-2.0 * self.lam * l)[::-1])[::-1] + self.log_scale + self.log_err
            with np.errstate(over="ignore"):
                w = np.concatenate((np.exp(np.minimum(log_w, 700.0)), [0.0]))
            cache = (a, b, w)
            object.__setattr__(self, "_cache", cache)
        return cache

    def delta(self, eps: np.ndarray) -> np.ndarray:
        """Bound on the hockey-stick divergence of this direction at ``eps`` (any reals)."""
        eps = np.asarray(eps, dtype=np.float64)
        a, b, w = self._suffix()
        l = self.losses
        n = l.size
        k = np.searchsorted(l, eps, side="right")  # first grid point with loss > eps
        lk = np.where(k < n, l[np.minimum(k, n - 1)], np.inf)
        with np.errstate(over="ignore", invalid="ignore"):
            fac = np.exp(np.minimum(eps - lk, 0.0))
            core = a[k] - fac * b[k]
        slack = REL_SLACK * a[k]
        if self.upper:
            val = np.maximum(core, 0.0) + slack + w[k]
            val = val + self.inf_mass * (1.0 + REL_SLACK)
        else:
            val = np.maximum(core - slack - w[k], 0.0) + self.inf_mass
        return np.clip(val, 0.0, 1.0)

    def log_moment(self, theta: np.ndarray, certified: bool = True) -> np.ndarray:
        """Bound on ``log E_P[e^{theta L}]`` over the finite part of the grid.

        Dominated side: a certified lower bound on the moment of the dominated
        pair.  Dropping terms only lowers a sum of non-negative terms, so the
        bound is the best over prefixes ``{l_i <= l_k}`` of (grid sum minus the
        round-off allowance ``err * ||weights||_2`` of that prefix); this keeps
        the tiny, round-off-dominated masses at the top of the window from
        swamping the bound at large ``theta``.

        Dominating side: the grid sum plus the round-off allowance of the whole
        grid (an upper bound on the finite part only; the caller handles the
        ``+inf`` atom).  ``certified=False`` returns the plain grid sum.
        """
        th = np.atleast_1d(np.asarray(theta, dtype=np.float64))
        l, lm = self.losses, self.log_mass
        terms = lm[None, :] + th[:, None] * l[None, :]
        if self.upper or not certified:
            main = special.logsumexp(terms, axis=1)
            if not certified:
                return main
            log_r = self.log_err + self.log_scale + 0.5 * special.logsumexp(
                2.0 * (th[:, None] - self.lam) * l[None, :], axis=1)
            return np.logaddexp(main, log_r) + REL_SLACK
        with np.errstate(invalid="ignore"):
            main = np.logaddexp.accumulate(terms, axis=1)
            log_r = self.log_err + self.log_scale + 0.5 * np.logaddexp.accumulate(
                2.0 * (th[:, None] - self.lam) * l[None, :], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(log_r < main, main + np.log1p(-np.exp(np.minimum(log_r - main, 0.0))), -np.inf)
        return np.max(bound, axis=1) - REL_SLACK

    def tail_grid(self, eps: np.ndarray) -> np.ndarray:
        """``P(L > eps)`` of this grid itself (an estimate, not a bound)."""
        a, _, _ = self._suffix()
        k = np.searchsorted(self.losses, np.asarray(eps, dtype=np.float64), side="right")
        return a[k] + self.inf_mass


@dataclass(frozen=True, eq=False)
class Direction:
    name: str
    upper: Side
    lower: Side

    @property
    def h(self) -> float:
        l = self.upper.losses
        return float(l[1] - l[0]) if l.size > 1 else 1.0


def directions(pld_obj, delta: float, tilt: float | None = None) -> list[Direction]:
    """Both sides of every direction the PLD distinguishes, from the public API."""
    delta = _v.real_scalar("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    info = pld_obj.explain(delta, tilt=tilt)["directions"]
    out = []
    for name, d_info in info.items():
        up = Side.build(pld_obj, name, "upper", delta, d_info, tilt)
        lo = Side.build(pld_obj, name, "lower", delta, d_info, tilt)
        out.append(Direction(name, up, lo))
    return out
