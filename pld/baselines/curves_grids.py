"""The engine's certified grids as two sides per direction, for the curves.

For each direction of a :class:`pld.PLD` (``remove``, ``add``), :class:`Side`
holds one discretisation (``upper``: dominating; ``lower``: dominated) with its
round-off allowance, and answers ``delta(eps)``, log-moments and tail masses
from it; :class:`Direction` pairs the two sides.  :func:`directions` builds
them from the public API (see :mod:`pld.baselines.curves` for why each side bounds the
truth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pld import _special as special
from pld import _validate as _v
from pld.engine.grid import GridPLD

__all__ = ["Side", "Direction", "directions", "REL_SLACK", "CHORD_STEPS"]

#: relative slack for this module's own floating-point sums
REL_SLACK = 1e-12
#: chord widths (in eps) tried by the tail bounds, relative to the grid spacing
CHORD_STEPS = np.geomspace(0.5, 4000.0, 72)


@dataclass(frozen=True, eq=False)
class Side:
    """One certified grid of one direction, ready for vectorised queries.

    ``grid`` is the engine's own :class:`pld.engine.grid.GridPLD`; ``losses`` its
    uniform grid, ``log_mass`` the untilted log P-masses, ``inf_mass`` the
    P-mass at ``+inf``; ``log_err`` is the log of the grid's round-off bound
    (l2, tilted units) and ``log_scale``/``lam`` untilt it.
    """

    grid: GridPLD
    losses: np.ndarray
    log_mass: np.ndarray
    inf_mass: float
    upper: bool
    lam: float
    log_scale: float
    log_err: float

    @classmethod
    def from_grid(cls, g: GridPLD) -> Side:
        if g.size < 2:
            raise ValueError("the engine returned a grid with fewer than two points")
        log_err = math.log(g.err) if g.err > 0 else -math.inf
        return cls(g, np.asarray(g.losses(), dtype=np.float64), np.asarray(g.log_masses(), dtype=np.float64),
                   float(g.inf_mass), bool(g.pessimistic), float(g.lam), float(g.log_scale), log_err)

    def _suffix_mass(self) -> np.ndarray:
        """``A_k = sum_{i>=k} m_i`` (cached), with ``A_n = 0``."""
        cache = self.__dict__.get("_cache")
        if cache is None:
            mass = np.exp(self.log_mass)
            cache = np.concatenate((np.cumsum(mass[::-1])[::-1], [0.0]))
            object.__setattr__(self, "_cache", cache)
        return cache

    def delta(self, eps: np.ndarray) -> np.ndarray:
        """Bound on the hockey-stick divergence of this direction at ``eps`` (any reals):
        the engine's own certified evaluator (:meth:`pld.engine.grid.GridPLD.delta`)."""
        eps = np.asarray(eps, dtype=np.float64)
        return np.clip(np.asarray(self.grid.delta(eps.ravel())).reshape(eps.shape), 0.0, 1.0)

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
        a = self._suffix_mass()
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
    """Both sides of every direction the PLD distinguishes (:meth:`pld.PLD.grids`)."""
    delta = _v.real_scalar("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    return [Direction(name, Side.from_grid(pair.dominating), Side.from_grid(pair.dominated))
            for name, pair in pld_obj.grids(delta, tilt=tilt).items()]
