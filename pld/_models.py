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

import numpy as np
from scipy.special import log_ndtr, logsumexp

from pld.kernels import log_diff_exp

_NEG_INF = -np.inf


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

    def _subsample(self, lp: np.ndarray, lq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = self.sampling_rate
        if q == 1.0:
            return (lp, lq) if self.direction == "remove" else (lq, lp)
        mix = np.logaddexp(np.log1p(-q) + lq, np.log(q) + lp)
        if self.direction == "remove":
            return mix, lq
        return lq, mix

    # ---- pieces for the discretiser --------------------------------------
    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Final losses and log P/Q masses of the atoms (after subsampling)."""
        lp, lq = self._subsample(np.asarray(self.atom_log_p, float), np.asarray(self.atom_log_q, float))
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
        lp, lq = self._subsample(lp, lq)
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

import math  # noqa: E402  (appended section)

from scipy.special import erf as _erf  # noqa: E402

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
class SymmetrizedSubsampledGaussianModel:
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
    ``loss_range``, ``inf_log_mass``, ``base``, ``_subsample``).
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

    def _subsample(self, lp: np.ndarray, lq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the base already returns the final masses
        return lp, lq

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
