"""Loss model of a Gaussian on a sample drawn without replacement (substitute adjacency).

The pair is symmetric: both directions share it (Dong, Roth & Su 2022, Thm 4.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pld._special import erf as _erf
from pld.mechanisms.models import _NEG_INF, _PairInBase, normal_interval_logmass

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

    def sup_loss_bounds(self) -> tuple[float, float]:
        return math.inf, math.inf

    def inf_log_mass(self) -> float:
        return _NEG_INF
