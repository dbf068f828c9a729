"""Loss models: one direction of a dominating pair, described exactly.

A :class:`LossModel` is what a mechanism hands to the discretiser.  It holds

* atoms: outputs (or groups of outputs) with a single privacy loss, given by
  their P-mass and Q-mass in log space (loss ``+inf`` where ``Q = 0``);
* optionally a continuous part: a base coordinate ``x`` whose P- and Q-laws have
  closed-form interval masses, and a monotone map ``x -> loss``.

Poisson subsampling (add-or-remove adjacency) acts on a base pair ``(P, Q)``
(``P`` = output with the record, ``Q`` = without) pointwise in loss:

* remove: ``P' = (1-q) Q + q P``, ``Q' = Q``, loss ``log(1 - q + q e^x)``;
* add:    ``P' = Q``, ``Q' = (1-q) Q + q P``, loss ``-log(1 - q + q e^x)``,

where ``x = log P/Q`` is the base loss (Balle, Barthe & Gaboardi 2018; the
remove/add split follows Zhu, Dong & Wang 2022).  Both maps are monotone in
``x`` so the transformed model is again "atoms plus a monotone continuous
part", which is all the discretiser needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.special import log_ndtr, logsumexp

from pld.kernels import log_diff_exp

_NEG_INF = -np.inf


class ContinuousBase(Protocol):
    """The continuous part of a pair in its base coordinate ``x``."""

    def interval_logmasses(self, xa: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P- and Q-mass of ``(xa, xb]`` (in the base pair's coordinate)."""
        ...

    def x_range(self) -> tuple[float, float]:
        """Where the base coordinate has non-negligible mass."""
        ...


@runtime_checkable
class LossModelProtocol(Protocol):
    """What the discretiser, the explorer and the engine need of one direction of a pair.

    Every loss model implements these public members; nothing else is called
    from other modules.  The loss is a non-decreasing function of a base
    coordinate ``x`` (``loss_of_x``, with ``x_of_loss`` its inverse), the
    continuous part has closed-form interval masses in ``x`` (``base``, or None
    for a pair of atoms only), and ``pair_masses`` maps the base's masses to
    the pair's (Poisson subsampling for :class:`LossModel`, the identity for
    models whose base already holds the pair).
    """

    @property
    def base(self) -> ContinuousBase | None: ...

    @property
    def sampling_rate(self) -> float: ...

    @property
    def direction(self) -> str: ...

    def loss_of_x(self, x: np.ndarray) -> np.ndarray: ...

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray: ...

    def pair_masses(self, lp: np.ndarray, lq: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def loss_range(self) -> tuple[float, float]: ...

    def sup_loss(self) -> float: ...

    def inf_log_mass(self) -> float: ...


def poisson_subsampled_masses(lp: np.ndarray, lq: np.ndarray, q: float,
                              direction: str) -> tuple[np.ndarray, np.ndarray]:
    """log masses of the Poisson-subsampled pair from the base pair's ``(lp, lq)``.

    remove: ``((1-q) Q + q P, Q)``; add: ``(Q, (1-q) Q + q P)`` (Zhu, Dong &
    Wang 2022); at ``q = 1`` the base pair, swapped for ``add``.
    """
    if q == 1.0:
        return (lp, lq) if direction == "remove" else (lq, lp)
    mix = np.logaddexp(np.log1p(-q) + lq, np.log(q) + lp)
    if direction == "remove":
        return mix, lq
    return lq, mix


class _PairInBase:
    """Mixin of models whose base already returns the pair's masses."""

    def pair_masses(self, lp: np.ndarray, lq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lp, lq


def _log_diff_exp(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """``log(e^la - e^lb)`` for ``la >= lb`` without cancellation trouble."""
    la = np.asarray(la, dtype=float)
    lb = np.asarray(lb, dtype=float)
    if la.ndim == 1 and la.shape == lb.shape:
        return log_diff_exp(np.ascontiguousarray(la), np.ascontiguousarray(lb))
    out = np.full(np.broadcast(la, lb).shape, _NEG_INF)
    ok = la > lb
    d = np.where(ok, lb - la, -1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = la + np.where(d > -0.6931, np.log(-np.expm1(d)), np.log1p(-np.exp(d)))
    out[ok] = np.broadcast_to(val, out.shape)[ok]
    return out


def normal_interval_logmass(a: np.ndarray, b: np.ndarray, mean: float, sd: float) -> np.ndarray:
    """``log P(a < X <= b)`` for ``X ~ N(mean, sd^2)``, accurate in both tails."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    # lower side: Phi(zb) - Phi(za); upper side: Phi(-za) - Phi(-zb)
    if a.ndim == 1 and a.size > 1 and b.shape == a.shape and np.array_equal(a[1:], b[:-1]):
        # consecutive cells (the usual call): each edge's log Phi once, not
        # twice, and on increasing edges only the side each cell uses: the
        # lower cells (z_a + z_b < 0) form a prefix
        z = (np.concatenate((a, b[-1:])) - mean) / sd
        with np.errstate(invalid="ignore"):
            use_lower = z[:-1] + z[1:] < 0.0
            if np.all(z[1:] >= z[:-1]):  # (repeated -inf edges are fine)
                m = int(np.count_nonzero(use_lower))
                lz = log_ndtr(z[:m + 1])
                lnz = log_ndtr(-z[m:])
                return np.concatenate((_log_diff_exp(lz[1:], lz[:-1]), _log_diff_exp(lnz[:-1], lnz[1:])))
            lz, lnz = log_ndtr(z), log_ndtr(-z)
            lower = _log_diff_exp(lz[1:], lz[:-1])
            upper = _log_diff_exp(lnz[:-1], lnz[1:])
        return np.where(use_lower, lower, upper)
    za = (a - mean) / sd
    zb = (b - mean) / sd
    with np.errstate(invalid="ignore"):
        lower = _log_diff_exp(log_ndtr(zb), log_ndtr(za))
        upper = _log_diff_exp(log_ndtr(-za), log_ndtr(-zb))
    return np.where(za + zb < 0.0, lower, upper)


@dataclass(frozen=True)
class NormalBase:
    """Base loss ``x`` with ``x ~ N(m_p, sd^2)`` under P and ``N(m_q, sd^2)`` under Q."""

    mean_p: float
    mean_q: float
    sd: float

    def interval_logmasses(self, xa: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (normal_interval_logmass(xa, xb, self.mean_p, self.sd),
                normal_interval_logmass(xa, xb, self.mean_q, self.sd))

    def x_range(self) -> tuple[float, float]:
        # beyond 38.5 standard deviations the normal mass is below 1e-320
        lo = min(self.mean_p, self.mean_q) - 38.5 * self.sd
        hi = max(self.mean_p, self.mean_q) + 38.5 * self.sd
        return lo, hi


@dataclass(frozen=True)
class LaplaceBase:
    """Continuous part of the Laplace pair ``Lap(s, b)`` vs ``Lap(0, b)``.

    With ``c = s/b`` the base loss ``x`` lies in ``(-c, c)`` on ``0 < y < s`` and
    has P-density ``e^{x/2 - c/2}/4`` and Q-density ``e^{-x/2 - c/2}/4``; the atoms
    at ``x = +-c`` are carried separately.
    """

    c: float

    def interval_logmasses(self, xa: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xa = np.clip(np.asarray(xa, float), -self.c, self.c)
        xb = np.clip(np.asarray(xb, float), -self.c, self.c)
        base = np.log(0.5) - self.c / 2
        lp = base + _log_diff_exp(xb / 2, xa / 2)
        lq = base + _log_diff_exp(-xa / 2, -xb / 2)
        return lp, lq

    def x_range(self) -> tuple[float, float]:
        return -self.c, self.c


@dataclass(frozen=True)
class LossModel:
    """One direction of a dominating pair, ready to be discretised.

    Attributes
    ----------
    atom_x, atom_log_p, atom_log_q : arrays
        Base losses and log masses of the atoms (``x = +inf`` where ``Q = 0``,
        ``x = -inf`` where ``P = 0``).
    base : NormalBase | LaplaceBase | None
        Continuous part in the base coordinate ``x``.
    sampling_rate : float
        ``q`` of Poisson subsampling (1.0: none).
    direction : str
        ``"remove"`` or ``"add"``: which subsampled pair is built from the base.
    """

    atom_x: np.ndarray
    atom_log_p: np.ndarray
    atom_log_q: np.ndarray
    base: NormalBase | LaplaceBase | None = None
    sampling_rate: float = 1.0
    direction: str = "remove"

    # ---- the monotone map between base loss x and final loss ---------------
    def loss_of_x(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, float)
        q = self.sampling_rate
        if q == 1.0:
            return x.copy() if self.direction == "remove" else -x
        with np.errstate(over="ignore"):
            # log(1 - q + q e^x) = log1p(q expm1(x)), and x + log(q + (1-q) e^{-x}) for large x
            small = np.log1p(q * np.expm1(np.minimum(x, 30.0)))
            large = x + np.log(q) + np.log1p((1 - q) / q * np.exp(-np.maximum(x, 30.0)))
        v = np.where(x <= 30.0, small, large)
        return v if self.direction == "remove" else -v

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`loss_of_x`; ``-inf``/``+inf`` outside the range."""
        loss = np.asarray(loss, float)
        q = self.sampling_rate
        v = loss if self.direction == "remove" else -loss
        if q == 1.0:
            return v.copy() if self.direction == "remove" else v
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # x = log1p(expm1(v)/q); for large v, x = v - log q + log1p(-(1-q) e^{-v}) ...
            u = np.expm1(np.minimum(v, 30.0)) / q
            small = np.where(u > -1.0, np.log1p(np.maximum(u, -1.0)), -np.inf)
            large = np.maximum(v, 30.0) - np.log(q) + np.log1p(-(1 - q) * np.exp(-np.maximum(v, 30.0)))
        x = np.where(v <= 30.0, small, large)
        # x_of_loss is increasing in v; in the add direction loss = -v so the
        # caller gets the base coordinate of loss through v = -loss.
        return x

    def pair_masses(self, lp: np.ndarray, lq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The subsampled pair's log masses from the base pair's."""
        return poisson_subsampled_masses(lp, lq, self.sampling_rate, self.direction)

    # ---- pieces for the discretiser --------------------------------------
    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Final losses and log P/Q masses of the atoms (after subsampling)."""
        lp, lq = self.pair_masses(np.asarray(self.atom_log_p, float), np.asarray(self.atom_log_q, float))
        with np.errstate(invalid="ignore"):
            loss = np.where(lq == _NEG_INF, np.inf, lp - lq)
        loss = np.where(lp == _NEG_INF, -np.inf, loss)
        return loss, lp, lq

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P- and Q-mass of the continuous part between consecutive losses.

        ``grid`` is increasing; the returned arrays have ``len(grid) + 1``
        entries: below ``grid[0]``, the ``len(grid) - 1`` cells, above ``grid[-1]``.
        """
        n = len(grid)
        if self.base is None:
            empty = np.full(n + 1, _NEG_INF)
            return empty, empty.copy()
        x = self.x_of_loss(grid)
        if self.direction == "add":
            x = x[::-1]  # loss decreases in x: walk x upwards, then reverse
        edges = np.concatenate(([-np.inf], x, [np.inf]))
        lp, lq = self.base.interval_logmasses(edges[:-1], edges[1:])
        lp, lq = self.pair_masses(lp, lq)
        if self.direction == "add":
            lp, lq = lp[::-1].copy(), lq[::-1].copy()
        return lp, lq

    def loss_range(self) -> tuple[float, float]:
        """Smallest and largest finite loss with non-negligible mass."""
        vals = []
        loss, lp, _ = self.atoms()
        fin = np.isfinite(loss) & (lp > _NEG_INF)
        vals.extend(loss[fin].tolist())
        if self.base is not None:
            lo, hi = self.base.x_range()
            vals.extend(self.loss_of_x(np.array([lo, hi])).tolist())
        if not vals:
            return 0.0, 0.0
        return float(min(vals)), float(max(vals))

    def inf_log_mass(self) -> float:
        loss, lp, _ = self.atoms()
        sel = loss == np.inf
        return float(logsumexp(lp[sel])) if np.any(sel) else _NEG_INF

    def sup_loss(self) -> float:
        """Exact supremum of the loss over outcomes with positive P-mass (``inf``
        for a Gaussian part or an atom where ``Q = 0``).  A Laplace part lies
        strictly between its two atoms, so the atoms decide."""
        loss, lp, _ = self.atoms()
        sel = lp > _NEG_INF
        top = float(np.max(loss[sel])) if np.any(sel) else -math.inf
        if self.base is not None and not isinstance(self.base, LaplaceBase):
            # a Gaussian base loss x is unbounded; the add direction of Poisson
            # sampling maps it to -log(1 - q + q e^x) <= -log(1 - q)
            if self.direction == "add" and self.sampling_rate < 1.0:
                return max(top, float(-np.log1p(-self.sampling_rate)) * (1.0 + 1e-15))
            return math.inf
        return top
