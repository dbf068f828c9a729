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
from functools import reduce
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.special import erf as _erf
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

    base: ContinuousBase | None
    sampling_rate: float
    direction: str

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


# ---------------------------------------------------------------------------
# Sampling without replacement under substitute adjacency (appended for DP-SGD)
# ---------------------------------------------------------------------------


def _log1mexp_neg(v: np.ndarray) -> np.ndarray:
    """``log(1 - e^{-v})`` for ``v >= 0``."""
    v = np.asarray(v, float)
    with np.errstate(divide="ignore"):
        return np.where(v < 0.6931, np.log(-np.expm1(-v)), np.log1p(-np.exp(-v)))


@dataclass(frozen=True)
class SymmetrizedSubsampledNormalBase:
    """Signed base coordinate ``z`` of :class:`SymmetrizedSubsampledGaussianModel`.

    Let ``x`` be the privacy loss of the Gaussian pair ``(N(mu, 1), N(0, 1))``:
    ``x ~ N(mu^2/2, mu^2)`` under ``P`` and ``N(-mu^2/2, mu^2)`` under ``Q``, and
    ``A = (1 - q) Q + q P`` the law with the record sampled.  The symmetrised
    pair lives on ``z in R`` (plus an atom, carried by the model):

    * ``z > 0``: ``x = z``, first law ``A``, second law ``Q``;
    * ``z < 0``: ``x = -z``, first law ``Q``, second law ``A`` (the mirror image).
    """

    mu: float
    q: float

    def _x_masses(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log A- and Q-mass of ``x in (a, b]``."""
        m2 = self.mu * self.mu / 2
        lp = normal_interval_logmass(a, b, m2, self.mu)
        lq = normal_interval_logmass(a, b, -m2, self.mu)
        if self.q == 1.0:
            return lp, lq
        la = np.logaddexp(np.log1p(-self.q) + lq, np.log(self.q) + lp)
        return la, lq

    def interval_logmasses(self, za: np.ndarray, zb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        za = np.asarray(za, float)
        zb = np.asarray(zb, float)
        pa, pq = self._x_masses(np.maximum(za, 0.0), np.maximum(zb, 0.0))
        na, nq = self._x_masses(-np.minimum(zb, 0.0), -np.minimum(za, 0.0))
        return np.logaddexp(pa, nq), np.logaddexp(pq, na)

    def x_range(self) -> tuple[float, float]:
        # beyond 38.5 standard deviations the normal mass is below 1e-320
        hi = self.mu * self.mu / 2 + 38.5 * self.mu
        return -hi, hi


@dataclass(frozen=True)
class SymmetrizedSubsampledGaussianModel(_PairInBase):
    """Gaussian mechanism on a sample drawn without replacement, substitute adjacency.

    Dominating pair of the tradeoff function ``C_q(G_mu) = min(f_q, f_q^{-1})**``
    with ``f_q = T((1 - q) N(0,1) + q N(mu,1), N(0,1))`` (Dong, Roth & Su 2022,
    Thm 4.2 for sampling without replacement under substitution; Zhu, Dong &
    Wang, AISTATS 2022, for its privacy loss distribution).  ``mu`` is the
    *substitute* sensitivity over the noise scale (``2 * clip / sigma`` for DP-SGD).

    Its privacy loss distribution ``omega`` is that of the subsampled pair
    ``(A, Q)`` on positive losses, its mirror image ``omega(-l) = e^{-l} omega(l)``
    on negative losses, and an atom at loss 0 with the remaining mass
    ``(1 - q) (Phi(mu/2) - Phi(-mu/2))`` under both laws.  The pair is symmetric
    (swapping the laws mirrors the outputs), so both orders of a neighbouring
    pair share it; and since either configuration of a step (record "in" vs a
    random other, or the reverse) is dominated by it, it stays valid when an
    adaptive adversary switches between them from step to step.

    The loss is ``sign(z) log(1 - q + q e^{|z|})``, increasing in ``z``;
    the interface mirrors :class:`LossModel` (``atoms``, ``cells``,
    ``loss_range``, ``inf_log_mass``, ``base``, ``pair_masses``).
    """

    mu: float
    sampling_rate: float
    #: not an add/remove direction: PoissonSampled refuses to wrap this model
    direction: str = "substitute"

    @property
    def base(self) -> SymmetrizedSubsampledNormalBase:
        return SymmetrizedSubsampledNormalBase(self.mu, self.sampling_rate)

    # ---- the monotone map between z and the loss --------------------------
    def loss_of_x(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, float)
        x = np.abs(z)
        q = self.sampling_rate
        if q == 1.0:
            return z.copy()
        with np.errstate(over="ignore"):
            small = np.log1p(q * np.expm1(np.minimum(x, 30.0)))
            large = x + math.log(q) + np.log1p((1 - q) / q * np.exp(-np.maximum(x, 30.0)))
        return np.sign(z) * np.where(x <= 30.0, small, large)

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`loss_of_x` (``+-inf`` for infinite losses)."""
        loss = np.asarray(loss, float)
        v = np.abs(loss)
        q = self.sampling_rate
        if q == 1.0:
            return loss.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            # x = log(1 + (e^v - 1)/q); for large v: x = v - log q + log(1 - (1 - q) e^{-v})
            small = np.log1p(np.expm1(np.minimum(v, 30.0)) / q)
            large = np.maximum(v, 30.0) - math.log(q) + np.log1p(-(1 - q) * np.exp(-np.maximum(v, 30.0)))
        return np.sign(loss) * np.where(v <= 30.0, small, large)


    # ---- pieces for the discretiser --------------------------------------
    def zero_log_mass(self) -> float:
        """log of the atom at loss 0: ``(1 - q) erf(mu / (2 sqrt 2))``."""
        q = self.sampling_rate
        if q == 1.0:
            return _NEG_INF
        e = float(_erf(self.mu / (2.0 * math.sqrt(2.0))))
        return math.log1p(-q) + math.log(e) if e > 0 else _NEG_INF

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lz = self.zero_log_mass()
        if lz == _NEG_INF:
            return np.array([], float), np.array([], float), np.array([], float)
        return np.array([0.0]), np.array([lz]), np.array([lz])

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P- and Q-mass between consecutive losses (see :meth:`LossModel.cells`)."""
        z = self.x_of_loss(np.asarray(grid, float))
        edges = np.concatenate(([-np.inf], z, [np.inf]))
        return self.base.interval_logmasses(edges[:-1], edges[1:])

    def loss_range(self) -> tuple[float, float]:
        _, hi = self.base.x_range()
        top = float(self.loss_of_x(np.array([hi]))[0])
        return -top, top

    def sup_loss(self) -> float:
        return math.inf

    def inf_log_mass(self) -> float:
        return _NEG_INF


# ---------------------------------------------------------------------------
# Pairs of Gaussian mixtures with a monotone likelihood ratio
# ---------------------------------------------------------------------------



def _log_add_all(parts: list[np.ndarray]) -> np.ndarray:
    # np.logaddexp is exact for -inf entries (scipy's logsumexp warns on them)
    return reduce(np.logaddexp, parts)


@dataclass(frozen=True)
class NormalMixtureBase:
    """Output ``y`` with ``P = sum_i a_i N(m_i, sd^2)`` and ``Q = sum_j b_j N(n_j, sd^2)``.

    Weights are stored as logs (``log_wp``, ``log_wq``), each family summing
    to one.
    """

    log_wp: tuple
    mean_p: tuple
    log_wq: tuple
    mean_q: tuple
    sd: float

    def interval_logmasses(self, ya: np.ndarray, yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp = _log_add_all([w + normal_interval_logmass(ya, yb, m, self.sd)
                           for w, m in zip(self.log_wp, self.mean_p)])
        lq = _log_add_all([w + normal_interval_logmass(ya, yb, m, self.sd)
                           for w, m in zip(self.log_wq, self.mean_q)])
        return lp, lq

    def x_range(self) -> tuple[float, float]:
        # beyond 38.5 standard deviations of every component the mass is below 1e-320
        means = self.mean_p + self.mean_q
        return min(means) - 38.5 * self.sd, max(means) + 38.5 * self.sd


def _end_weight(log_w: tuple, means: tuple, pick) -> tuple[float, float]:
    """``(mean, log total weight)`` of the components at the extreme mean ``pick(means)``."""
    m = pick(means)
    return m, float(np.logaddexp.reduce([w for w, x in zip(log_w, means) if x == m]))


@dataclass(frozen=True)
class MonotoneMixtureModel(_PairInBase):
    """One direction of a pair of Gaussian mixtures whose loss increases with the output.

    ``P = sum_i a_i N(m_i, sd^2)``, ``Q = sum_j b_j N(n_j, sd^2)`` on the real
    line with every ``m_i >= n_j``: the loss

        ``L(y) = log sum_i a_i e^{(m_i y - m_i^2/2)/sd^2} - log sum_j b_j e^{(n_j y - n_j^2/2)/sd^2}``

    then has derivative ``(E_w[m] - E_v[n]) / sd^2 >= 0`` (softmax weights
    ``w``, ``v``), so it is increasing and the discretiser can cut the output
    line at the grid losses.  (A pair whose loss decreases is handed over
    mirrored, ``y -> -y``, which leaves the loss law unchanged.)  The inverse
    ``x_of_loss`` is solved by bracketed Newton steps to a few ulps.

    The interface mirrors :class:`LossModel` (``atoms``, ``cells``,
    ``loss_range``, ``inf_log_mass``, ``base``, ``pair_masses``); the
    ``direction`` is not ``"remove"``, so :class:`pld.PoissonSampled` refuses
    to wrap it (its subsampling formula assumes an unsampled remove pair).
    """

    base: NormalMixtureBase
    sampling_rate: float = 1.0
    direction: str = "mixture"

    def __post_init__(self) -> None:
        b = self.base
        if not (b.sd > 0 and math.isfinite(b.sd)):
            raise ValueError(f"sd must be positive and finite, got {b.sd!r}")
        if min(b.mean_p) < max(b.mean_q):
            raise ValueError("every P-mean must be at least every Q-mean (monotone loss)")
        if max(b.mean_p) == min(b.mean_q):
            raise ValueError("P and Q are the same law: the pair has no privacy loss")

    # ---- the loss as a function of the output ----------------------------
    def _side(self, y: np.ndarray, log_w: tuple, means: tuple):
        """One law's ``log sum_i w_i e^{t_i}``, ``t_i = log w_i + (m_i y - m_i^2/2)/sd^2``,
        factored at its largest exponent ``t*``: returns ``(index of t*, t*,
        log1p(rest), rounding scale of log1p(rest), derivative in y)``."""
        s2 = self.base.sd ** 2
        t = np.stack([w + (m * y - 0.5 * m * m) / s2 for w, m in zip(log_w, means)])
        star = np.argmax(t, axis=0)
        top = np.take_along_axis(t, star[None], axis=0)[0]
        e = np.exp(t - top)
        np.put_along_axis(e, star[None], 0.0, axis=0)  # the rest, without the top's 1
        rest = e.sum(axis=0)
        m = np.asarray(means, float).reshape((-1,) + (1,) * np.ndim(y))
        top_mean = m.ravel()[star]
        slope = ((m * e).sum(axis=0) + top_mean) / (1.0 + rest) / s2
        # each e_i carries the rounding of t_i - t* (a few ulps of |t_i| + |t*|)
        scale = (e * (np.abs(t) + np.abs(top) + 1.0)).sum(axis=0)
        return star, top, np.log1p(rest), scale / (1.0 + rest), slope

    def _eval(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Loss, its derivative, and a bound on the rounding of the computed loss at ``y``.

        Each law's log-sum-exp is factored at its dominant component; where P
        and Q share it (the unsampled part ``(1-q) N(0)`` of a subsampled
        pair, over most of the line) the two dominant exponents cancel
        exactly and the loss ``log1p(rest_P) - log1p(rest_Q)`` keeps its
        relative accuracy even where it is tiny.
        """
        b = self.base
        y = np.asarray(y, float)
        ip, tp, rp, np_, sp = self._side(y, b.log_wp, b.mean_p)
        iq, tq, rq, nq, sq = self._side(y, b.log_wq, b.mean_q)
        same = (np.asarray(b.log_wp)[ip] == np.asarray(b.log_wq)[iq]) & \
            (np.asarray(b.mean_p)[ip] == np.asarray(b.mean_q)[iq])
        head = np.where(same, 0.0, tp - tq)
        loss = head + (rp - rq)
        eps = np.finfo(float).eps
        noise = 4.0 * eps * (np.where(same, 0.0, np.abs(tp) + np.abs(tq)) + np_ + nq
                             + np.abs(rp) + np.abs(rq) + np.abs(loss))
        return loss, sp - sq, noise

    def _loss_and_slope(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        loss, slope, _ = self._eval(y)
        return loss, slope

    def loss_limits(self) -> tuple[float, float]:
        """Infimum and supremum of the loss (``y -> -inf`` and ``y -> +inf``).

        At either end the components with the extreme mean dominate; with
        ``m_min >= n_min`` (and ``m_max >= n_max``) the loss tends to ``-inf``
        (``+inf``) unless the extreme means coincide, when the ``y`` terms
        cancel and it tends to the log ratio of their weights.
        """
        b = self.base
        mp, wp = _end_weight(b.log_wp, b.mean_p, min)
        mq, wq = _end_weight(b.log_wq, b.mean_q, min)
        lo = -math.inf if mp > mq else wp - wq
        mp, wp = _end_weight(b.log_wp, b.mean_p, max)
        mq, wq = _end_weight(b.log_wq, b.mean_q, max)
        hi = math.inf if mp > mq else wp - wq
        return lo, hi

    def loss_of_x(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, float)
        lo, hi = self.loss_limits()
        fin = np.isfinite(y)
        out = np.where(y > 0, hi, lo).astype(float)
        if np.any(fin):
            out[fin] = self._loss_and_slope(y[fin])[0]
        return out

    def _widen(self, t: np.ndarray, end: float, step: float, up: bool) -> tuple[np.ndarray, np.ndarray]:
        """Bracket ``[a, b]`` (``L(a) <= t < L(b)``) for targets beyond one end of the table."""
        inner = np.full(t.shape, end)  # the side already known
        outer = np.full(t.shape, np.nan)
        miss = np.ones(t.shape, bool)
        # the loss grows linearly towards an infinite limit and reaches a
        # finite one within rounding before |y| is 2^64 table widths away
        for _ in range(64):
            if not np.any(miss):
                break
            probe = end + step if up else end - step
            val = self._loss_and_slope(np.array([probe]))[0][0]
            hit = miss & ((val > t) if up else (val <= t))
            outer[hit] = probe
            inner[miss & ~hit] = probe
            miss &= ~hit
            step *= 2.0
        # within rounding of a finite loss limit: no mass to speak of there
        outer[miss] = inner[miss]
        return (inner, outer) if up else (outer, inner)

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`loss_of_x`; ``-inf``/``+inf`` outside the loss range.

        Solved by Newton steps kept inside a bracket ``L(a) <= t < L(b)``
        (bisection when a step leaves it).  Where it does not settle (losses
        within rounding of a finite loss limit, where the law has no mass to
        speak of) the lower end ``a`` is returned: an edge placed low moves
        mass to the cell above, the safe side for the dominating split.
        """
        t = np.asarray(loss, float)
        out = np.empty(t.shape)
        lo, hi = self.loss_limits()
        below = ~(t > lo)
        above = t >= hi
        out[below] = -np.inf
        out[above] = np.inf
        act = ~below & ~above
        if not np.any(act):
            return out
        tt = t[act]
        # a monotone table gives a bracket and a first guess for every target
        ya, yb = self.base.x_range()
        ytab = np.linspace(ya, yb, 257)
        ltab = np.maximum.accumulate(self._loss_and_slope(ytab)[0])
        k = np.searchsorted(ltab, tt, side="right")  # ltab[k-1] <= t < ltab[k]
        n = ytab.size
        a = ytab[np.clip(k - 1, 0, n - 1)].copy()
        b = ytab[np.clip(k, 0, n - 1)].copy()
        y = np.interp(tt, ltab, ytab)
        for sel, end, up in ((k == 0, ya, False), (k == n, yb, True)):
            if np.any(sel):
                a[sel], b[sel] = self._widen(tt[sel], end, yb - ya, up)
                y[sel] = 0.5 * (a[sel] + b[sel])
        todo = np.arange(tt.size)
        for _ in range(200):
            if todo.size == 0:
                break
            yy = y[todo]
            f, fp, noise = self._eval(yy)
            f = f - tt[todo]
            aa = np.where(f <= 0, yy, a[todo])
            bb = np.where(f > 0, yy, b[todo])
            a[todo], b[todo] = aa, bb
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                nxt = yy - f / fp
            bad = ~np.isfinite(nxt) | (nxt <= aa) | (nxt >= bb)
            nxt = np.where(bad, 0.5 * (aa + bb), nxt)
            eps = np.finfo(float).eps
            # |f| within the rounding of the computed loss counts as a root
            exact = np.abs(f) <= noise
            collapsed = bb - aa <= 2.0 * eps * np.maximum(np.abs(aa), np.abs(bb))
            settled = exact | collapsed | (np.abs(nxt - yy) <= 2.0 * eps * np.abs(nxt))
            # settled: the root is within a few ulps; keep the lower candidate
            y[todo] = np.where(settled, np.where(exact, yy, np.where(collapsed, aa, np.minimum(yy, nxt))), nxt)
            todo = todo[~settled]
        if todo.size:
            y[todo] = a[todo]
        out[act] = y
        return out


    # ---- pieces for the discretiser --------------------------------------
    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        e = np.array([], float)
        return e, e.copy(), e.copy()

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log P- and Q-mass between consecutive losses (see :meth:`LossModel.cells`)."""
        y = self.x_of_loss(np.asarray(grid, float))
        edges = np.concatenate(([-np.inf], y, [np.inf]))
        return self.base.interval_logmasses(edges[:-1], edges[1:])

    def loss_range(self) -> tuple[float, float]:
        ya, yb = self.base.x_range()
        lo, hi = self.loss_of_x(np.array([ya, yb]))
        return float(lo), float(hi)

    def sup_loss(self) -> float:
        """Exact supremum of the loss: its limit as ``y -> inf`` (``inf`` unless the
        largest P- and Q-means coincide, e.g. the add direction of a mixture
        with a zero sensitivity, where it is a log weight ratio)."""
        return self.loss_limits()[1]

    def inf_log_mass(self) -> float:
        return _NEG_INF


def mixture_pair_model(log_wp, mean_p, log_wq, mean_q, sd: float) -> MonotoneMixtureModel:
    """:class:`MonotoneMixtureModel` of the pair, mirrored if its loss decreases in ``y``.

    Zero-weight components are dropped; the means must be ordered one way or
    the other (every P-mean >= every Q-mean, or every P-mean <= every Q-mean).
    """
    p = [(float(w), float(m)) for w, m in zip(log_wp, mean_p) if w > -np.inf]
    q = [(float(w), float(m)) for w, m in zip(log_wq, mean_q) if w > -np.inf]
    if min(m for _, m in p) < max(m for _, m in q):
        p = [(w, -m) for w, m in p]
        q = [(w, -m) for w, m in q]
    return MonotoneMixtureModel(NormalMixtureBase(tuple(w for w, _ in p), tuple(m for _, m in p),
                                                  tuple(w for w, _ in q), tuple(m for _, m in q), float(sd)))


# ---------------------------------------------------------------------------
# Disjoint unions of pairs ("which pair ran" is revealed to the adversary)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LossUnionBase:
    """Base coordinate of :class:`LossUnionModel`: the privacy loss itself."""

    parts: tuple

    def interval_logmasses(self, la: np.ndarray, lb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        la = np.asarray(la, float)
        lb = np.asarray(lb, float)
        if la.ndim != 1 or la.shape != lb.shape or not np.array_equal(la[1:], lb[:-1]):
            raise ValueError("LossUnionBase takes consecutive cells only")
        edges = np.concatenate((la, lb[-1:]))
        cp, cq = [], []
        for lw, model in self.parts:
            p, q = model.cells(edges)
            cp.append(lw + p[1:-1])
            cq.append(lw + q[1:-1])
        return _log_add_all(cp), _log_add_all(cq)

    def x_range(self) -> tuple[float, float]:
        ranges = [m.loss_range() for _, m in self.parts]
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


@dataclass(frozen=True)
class LossUnionModel(_PairInBase):
    """One direction of the pair ``(sum_j w_j P_j, sum_j w_j Q_j)`` on disjoint outputs.

    A coin with probabilities ``w_j``, shown to the adversary, picks which of
    the pairs ``(P_j, Q_j)`` runs.  Its hockey-stick divergence is
    ``sum_j w_j H_a(P_j || Q_j)`` for every ``a``, so it dominates any pair that
    is a mixture (over the same weights) of pairs dominated by the ``(P_j,
    Q_j)`` -- the joint convexity of the hockey-stick divergence.  Its cells
    are the parts' cells, weighted and added (each part's loss is monotone in
    its own output, the union's is the loss itself).
    """

    parts: tuple  # ((log weight, model), ...), weights summing to one
    sampling_rate: float = 1.0
    direction: str = "union"

    @property
    def base(self) -> LossUnionBase:
        return LossUnionBase(self.parts)

    def loss_of_x(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, float).copy()

    def x_of_loss(self, loss: np.ndarray) -> np.ndarray:
        return np.asarray(loss, float).copy()


    def explore_pieces(self, cells: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """Each part's own exploration cells (in its own coordinate), weighted.

        Cells of equal width in the loss would blur where a part's loss piles
        up (the add direction of a subsampled pair near ``-log(1-q)``), and
        windows sized from them would cut real mass off.
        """
        from pld._windows import continuous_pieces

        ls, ps = [np.zeros(0)], [np.zeros(0)]
        for lw, model in self.parts:
            if model.base is not None:
                cl, cp = continuous_pieces(model, cells)
                ls.append(cl)
                ps.append(lw + cp)
        return np.concatenate(ls), np.concatenate(ps)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xs, ps, qs = [], [], []
        for lw, model in self.parts:
            x, p, q = model.atoms()
            xs.append(x)
            ps.append(lw + p)
            qs.append(lw + q)
        return np.concatenate(xs), np.concatenate(ps), np.concatenate(qs)

    def cells(self, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cp, cq = [], []
        for lw, model in self.parts:
            p, q = model.cells(grid)
            cp.append(lw + p)
            cq.append(lw + q)
        return _log_add_all(cp), _log_add_all(cq)

    def loss_range(self) -> tuple[float, float]:
        return self.base.x_range()

    def sup_loss(self) -> float:
        """The largest of the parts' suprema (every part has positive weight)."""
        return max(m.sup_loss() for _, m in self.parts)

    def inf_log_mass(self) -> float:
        return float(np.logaddexp.reduce([lw + m.inf_log_mass() for lw, m in self.parts]))
