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

from pld import _special
from pld._special import log_ndtr
from pld.kernels import log_diff_exp, log_diff_exp_error, subsampled_mass_errors

_NEG_INF = -np.inf
#: unit roundoff of float64
_U = 2.0 ** -53


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

    def sup_loss_bounds(self) -> tuple[float, float]: ...

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


def poisson_subsampled_errors(lp: np.ndarray, lq: np.ndarray, ep: np.ndarray, eq: np.ndarray,
                              q: float, direction: str):
    """:func:`poisson_subsampled_masses` with error bounds carried through.

    Returns ``(log P', log Q', loss error, log P' error)``: bounds on the
    absolute errors of the computed ``log P' - log Q'`` and ``log P'`` given
    errors ``ep, eq`` of the base's ``lp, lq`` (the rounding of every
    operation included).  With ``s = q P / P'`` the share of the mixture that
    carries the record, the loss ``log(1 - q + q P/Q)`` moves by ``s`` times
    the base loss's error: a subsampled loss near 0 inherits a ``q``-small
    part of its base's error, which is what lets the dominated side resolve
    millions of steps.
    """
    if q == 1.0:
        loss_err = ep + eq + 2.0 * _U * (np.abs(lp) + np.abs(lq) + 1.0)
        if direction == "remove":
            return lp, lq, loss_err, ep
        return lq, lp, loss_err, eq
    # (one fused pass: subsampled_mass_errors)
    mix, loss_err, mix_err = subsampled_mass_errors(*(np.ascontiguousarray(a, dtype=float) for a in (lp, lq, ep, eq)),
                                                    math.log(q), math.log1p(-q))
    if direction == "remove":
        return mix, lq, loss_err, mix_err
    return lq, mix, loss_err, eq


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


#: absolute error of scipy's ``log_ndtr(z)``, in units of ``u (1 + |log Phi(z)|)``
#: (``u = 2^-53``): at most 4.2 against mpmath over ``z`` in [-40, 40]
#: (tests/test_cell_errors.py checks the bound on fresh samples); 16 keeps a 4x margin
LOG_NDTR_ULPS = 16.0
def _log_phi_error(z: np.ndarray, lz: np.ndarray) -> np.ndarray:
    """Bound on the error of ``lz = log_ndtr(z)`` as a value of ``log Phi`` at the
    exact ``z = (x - mean) / sd``: the function's own error, and the rounding of
    ``z`` (two operations, ``2.01 u |z|``) times the slope ``phi / Phi <= |z| + 1``
    (the Mills-ratio bound, Gordon 1941; below 0.8 for ``z > 0``)."""
    az = np.abs(z)
    with np.errstate(invalid="ignore", over="ignore"):
        err = _U * (LOG_NDTR_ULPS * (1.0 + np.abs(lz)) + 2.01 * az * (az + 1.0))
    # (an infinite edge: log_ndtr is exactly 0 or -inf there)
    return np.where(np.isfinite(z), err, 0.0)


def _lde_error(la: np.ndarray, lb: np.ndarray, ea: np.ndarray, eb: np.ndarray,
               r: np.ndarray) -> np.ndarray:
    """Error bound of ``r = log(e^la - e^lb)`` given errors ``ea, eb`` of ``la >= lb``.

    ``r = la + log(1 - e^d)`` with ``d = lb - la``, whose slope in ``d`` is
    ``-1 / expm1(-d)``: a narrow cell (``d`` near 0) magnifies the edges' errors.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        d = lb - la
        gain = 1.0 / np.expm1(-d)
        # (lb = -inf: the other edge adds nothing, exactly)
        spread = np.where(np.isfinite(d), (ea + eb + _U * np.abs(d)) * gain, 0.0)
        err = ea + spread + 4.0 * _U * (1.0 + np.abs(r))
    return np.where(np.isfinite(r), err, 0.0)


def normal_interval_logmass_bounds(a: np.ndarray, b: np.ndarray, mean: float,
                                   sd: float) -> tuple[np.ndarray, np.ndarray]:
    """``(log P(a < X <= b), bound on its absolute error)`` for ``X ~ N(mean, sd^2)``.

    The same value as :func:`normal_interval_logmass` (the lower side as
    ``Phi(z_b) - Phi(z_a)``, the upper as ``Phi(-z_a) - Phi(-z_b)``), with the
    propagated error of ``log_ndtr`` and of forming ``z`` (see
    :func:`_log_phi_error`, :func:`_lde_error`).  The dominated discretisation
    needs it: it places a merged cell on a grid point only if its loss clears
    the point by more than that loss's error.
    """
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if a.ndim == 1 and a.size > 1 and b.shape == a.shape and np.array_equal(a[1:], b[:-1]):
        # consecutive increasing cells (the usual call): each edge's log Phi
        # once, on the side its cells use, as normal_interval_logmass does
        z = (np.concatenate((a, b[-1:])) - mean) / sd
        with np.errstate(invalid="ignore"):
            if np.all(z[1:] >= z[:-1]):
                m = int(np.count_nonzero(z[:-1] + z[1:] < 0.0))
                zl, zu = z[:m + 1], -z[m:]
                lz, lnz = log_ndtr(zl), log_ndtr(zu)
                lower = _log_diff_exp(lz[1:], lz[:-1])
                upper = _log_diff_exp(lnz[:-1], lnz[1:])
                # (one fused pass per side: the numpy form below is ~10 passes)
                return (np.concatenate((lower, upper)),
                        np.concatenate((log_diff_exp_error(lz[1:], lz[:-1], zl[1:], zl[:-1], lower),
                                        log_diff_exp_error(lnz[:-1], lnz[1:], zu[:-1], zu[1:], upper))))
    za = (a - mean) / sd
    zb = (b - mean) / sd
    with np.errstate(invalid="ignore"):
        use_lower = za + zb < 0.0
        lza, lzb = log_ndtr(za), log_ndtr(zb)
        lna, lnb = log_ndtr(-za), log_ndtr(-zb)
        lower = _log_diff_exp(lzb, lza)
        upper = _log_diff_exp(lna, lnb)
        e_lower = _lde_error(lzb, lza, _log_phi_error(zb, lzb), _log_phi_error(za, lza), lower)
        e_upper = _lde_error(lna, lnb, _log_phi_error(za, lna), _log_phi_error(zb, lnb), upper)
    return np.where(use_lower, lower, upper), np.where(use_lower, e_lower, e_upper)


@dataclass(frozen=True)
class NormalBase:
    """Base loss ``x`` with ``x ~ N(m_p, sd^2)`` under P and ``N(m_q, sd^2)`` under Q."""

    mean_p: float
    mean_q: float
    sd: float

    def interval_logmasses(self, xa: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (normal_interval_logmass(xa, xb, self.mean_p, self.sd),
                normal_interval_logmass(xa, xb, self.mean_q, self.sd))

    def interval_logmasses_with_errors(self, xa: np.ndarray, xb: np.ndarray):
        """``(log P, log Q, error of log P, error of log Q)`` of ``(xa, xb]``."""
        lp, ep = normal_interval_logmass_bounds(xa, xb, self.mean_p, self.sd)
        lq, eq = normal_interval_logmass_bounds(xa, xb, self.mean_q, self.sd)
        return lp, lq, ep, eq

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

    def cells_with_errors(self, grid: np.ndarray):
        """:meth:`cells` with ``(loss error, log P error)`` bounds per cell, or
        None when the base does not bound its masses' errors.

        The dominated discretisation places a merged cell on a grid point
        only if its computed loss clears the point by the loss's error; without
        these bounds it assumes a fixed margin (``1e-11`` per unit of loss),
        which over a million steps shifts the lower end by ``1e-5``.
        """
        hook = getattr(self.base, "interval_logmasses_with_errors", None)
        if hook is None:
            return None
        x = self.x_of_loss(grid)
        if self.direction == "add":
            x = x[::-1]
        edges = np.concatenate(([-np.inf], x, [np.inf]))
        lp, lq, ep, eq = hook(edges[:-1], edges[1:])
        lp, lq, loss_err, mass_err = poisson_subsampled_errors(lp, lq, ep, eq, self.sampling_rate,
                                                               self.direction)
        if self.direction == "add":
            lp, lq = lp[::-1].copy(), lq[::-1].copy()
            loss_err, mass_err = loss_err[::-1].copy(), mass_err[::-1].copy()
        return lp, lq, loss_err, mass_err

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
        return float(_special.logsumexp(lp[sel])) if np.any(sel) else _NEG_INF

    def sup_loss(self) -> float:
        """Supremum of the loss over outcomes with positive P-mass, rounded up
        (``inf`` for a Gaussian part or an atom where ``Q = 0``)."""
        return self.sup_loss_bounds()[1]

    def sup_loss_bounds(self) -> tuple[float, float]:
        """``(lo, hi)`` around the exact supremum of the loss over outcomes with
        positive P-mass (``inf`` for a Gaussian part or an atom where ``Q = 0``).

        A Laplace part lies strictly between its two atoms, so the atoms
        decide.  An atom's loss is computed as ``log P - log Q`` from log masses
        that are themselves a few roundings away from the pair's: its error is
        bounded by ``16 u (|log P| + |log Q| + |loss| + 1)`` (``u = 2^-53``; a
        handful of correctly rounded ``log``, ``log1p``, ``exp`` and sums, each
        relative to the magnitudes it adds).  The add direction of a Poisson-
        subsampled Gaussian is bounded by ``-log(1 - q)``, computed by
        ``log1p`` to within one unit.
        """
        loss, lp, lq = self.atoms()
        sel = lp > _NEG_INF
        lo = hi = -math.inf
        if np.any(sel):
            with np.errstate(invalid="ignore"):
                err = 16.0 * _U * (np.abs(lp[sel]) + np.abs(np.where(np.isfinite(lq[sel]), lq[sel], 0.0))
                                   + np.abs(np.where(np.isfinite(loss[sel]), loss[sel], 0.0)) + 1.0)
            top = loss[sel]
            lo = float(np.max(np.where(np.isfinite(top), top - err, top)))
            hi = float(np.max(np.where(np.isfinite(top), top + err, top)))
        if self.base is not None and not isinstance(self.base, LaplaceBase):
            # a Gaussian base loss x is unbounded; the add direction of Poisson
            # sampling maps it to -log(1 - q + q e^x) < -log(1 - q), its limit
            if self.direction == "add" and self.sampling_rate < 1.0:
                v = -math.log1p(-self.sampling_rate)
                return max(lo, v * (1.0 - 4.0 * _U)), max(hi, v * (1.0 + 4.0 * _U))
            return math.inf, math.inf
        return (math.nextafter(lo, -math.inf) if math.isfinite(lo) else lo,
                math.nextafter(hi, math.inf) if math.isfinite(hi) else hi)
