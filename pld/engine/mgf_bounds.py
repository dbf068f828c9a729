"""Rigorous bounds on the moment generating function a dominating grid carries.

Truncation moves mass to the safe side; how much is bounded, not estimated:
a pessimistic :class:`pld.engine.grid.GridPLD` carries an upper bound on
``log E[e^{theta L}]`` of its exact object on the fixed grid :data:`THETA`,
propagated through convolution (logs add), coarsening and truncation, and
Chernoff's inequality turns it into tail masses (:func:`_chernoff`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pld.kernels import chernoff_exponent, log_mgf_grid

#: Chernoff parameters at which pessimistic PLDs carry an MGF bound
#: (8 per decade where Chernoff parameters of truncation windows fall: a grid
#: point within a factor r of the optimal theta keeps 1 - (1 - 1/r)^2 of the
#: Chernoff exponent, 94% at 8 per decade, 72% at the 3 per decade used elsewhere)
_POSITIVE = np.sort(np.concatenate((np.logspace(-3, -2, 4), np.logspace(-2, 3, 41), np.logspace(3, 6, 10))))
# (np.unique's values, without np.unique: since numpy 2.3 it imports numpy.ma,
# 10 ms of every process start)
THETA = np.concatenate((-np.logspace(-3, 6, 28)[::-1], [0.0],
                        _POSITIVE[np.concatenate(([True], _POSITIVE[1:] != _POSITIVE[:-1]))]))
_I0 = int(np.flatnonzero(THETA == 0.0)[0])
#: the positive Chernoff parameters (mask and values), formed once: a
#: truncation that moves mass onto a point raises the bound at each of them
_POS = THETA > 0
_TH_POS = THETA[_POS]


@functools.lru_cache(maxsize=64)
def _coarsen_mgf_growth(h: float) -> np.ndarray:
    """``max(log F(theta), 0)`` on ``THETA``, ``F`` the factor a dominating re-grid
    from ``h`` to ``2h`` multiplies ``E[e^{theta L}]`` by (see
    :meth:`GridPLD.coarsen`); cached, spacings repeat across levels and queries."""
    f = np.logaddexp(-h - THETA * h, THETA * h) - math.log1p(math.exp(-h))
    out = np.maximum(f, 0.0)
    out.flags.writeable = False
    return out


#: entries summed exactly at each end for steep Chernoff parameters
_MGF_EDGE = 512


def _mgf_bound_from(log_mass: np.ndarray, loss: np.ndarray, h: float,
                    thetas: np.ndarray | None = None) -> np.ndarray:
    """Upper bound on ``log sum_i e^{log_mass_i + theta l_i}`` on ``THETA`` (or ``thetas``).

    Computed to rounding (:func:`pld.kernels.log_mgf_grid`, ~1e-13 relative
    in the sum) and inflated by 1e-12 plus the rounding of the exponents
    ``log_mass_i + theta l_i`` themselves, a few ulps of their magnitude (it
    matters only at large ``theta l``); any looseness here would be multiplied
    by the number of composed steps.  ``loss`` the increasing points
    ``l_i = l_0 + i h``.
    """
    ends = (float(loss[0]), float(loss[-1])) if loss.size else (0.0, 0.0)
    return _mgf_bound_core(log_mass, *ends, loss.__getitem__, h, thetas)


def _mgf_bound_lattice(log_mass: np.ndarray, k0: int, h: float) -> np.ndarray:
    """:func:`_mgf_bound_from` on ``THETA`` at the points ``l_i = (k0 + i) h``,
    formed only where the bound reads them (a first step's grid is long and
    mostly empty)."""
    n = log_mass.size
    return _mgf_bound_core(log_mass, k0 * h, (k0 + n - 1) * h, lambda idx: (k0 + idx) * h, h, None)


def _mgf_bound_core(log_mass: np.ndarray, l_first: float, l_last: float, loss_at: Callable[[Any], Any],
                    h: float, thetas: np.ndarray | None) -> np.ndarray:
    theta = THETA if thetas is None else np.ascontiguousarray(thetas, dtype=float)
    if log_mass.size == 0:
        return np.full(theta.size, -np.inf)
    # the spacing as given, not loss[1] - loss[0]: that difference carries the
    # rounding of loss[0], which n steps of the kernel would multiply by n
    lm = np.ascontiguousarray(log_mass, dtype=float)
    fin_idx = np.flatnonzero(np.isfinite(lm))
    body = lm[fin_idx]
    top_lm = float(np.max(np.abs(body))) if body.size else 0.0
    top_l = max(abs(l_first), abs(l_last))
    slack = 1e-12 + 8.0 * 2.0 ** -53 * (top_lm + np.abs(theta) * top_l)
    # |theta| h > 2 on a long grid: the kernel's exact pass (an exp per entry)
    # would dominate, yet the sum lives in the last entries on the theta side.
    # Sum those _MGF_EDGE exactly and bound the rest by its total mass at the
    # largest weight it can have (a wall, e.g. the bounded losses of the add
    # direction, needs these large theta: they are not dropped).
    steep = (np.abs(theta) * h > 2.0) & (fin_idx.size > 4 * _MGF_EDGE)
    out = np.empty(theta.size)
    out[~steep] = log_mgf_grid(lm, l_first, h, theta[~steep])
    if np.any(steep):
        k = _MGF_EDGE
        # (the entries with mass, in order: the k at each end exactly)
        for positive in (True, False):
            idx = np.flatnonzero(steep & ((theta > 0) if positive else (theta < 0)))
            if idx.size == 0:
                continue
            th = theta[idx][:, None]
            # the k entries at the theta side, exactly, and the rest at most
            # its total mass at the largest weight it can have
            if positive:
                edge, edge_l = body[-k:], loss_at(fin_idx[-k:])
                rest = _lse_rows(body[:-k][None, :])[0]
                wall = loss_at(fin_idx[-k - 1])
            else:
                edge, edge_l = body[:k], loss_at(fin_idx[:k])
                rest = _lse_rows(body[k:][None, :])[0]
                wall = loss_at(fin_idx[k])
            top = _lse_rows(edge[None, :] + th * edge_l[None, :])
            out[idx] = np.logaddexp(top, rest + th[:, 0] * wall)
    return out + slack


def _lse_rows(x: np.ndarray) -> np.ndarray:
    """Row-wise ``log sum exp`` (no scipy call overhead; -inf rows give -inf)."""
    m = np.max(x, axis=1)
    mm = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", under="ignore"):
        return mm + np.log(np.sum(np.exp(x - mm[:, None]), axis=1))


def _chernoff(log_mgf: np.ndarray, t: float, upper: bool) -> float:
    """``min_theta M(theta) e^{-theta t}`` over ``theta > 0`` (upper tail ``L >= t``)
    or ``theta < 0`` (lower tail ``L <= t``)."""
    v = chernoff_exponent(log_mgf, THETA, t, 1 if upper else -1)
    # (the exponential within an ulp: raised by two)
    return math.exp(min(v, 700.0)) * (1.0 + 4.0 * 2.0 ** -53)
