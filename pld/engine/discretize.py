"""From an exact loss model to certified grid PLDs (both sides).

The pessimistic grid dominates the model's pair and the optimistic grid is
dominated by it (see :mod:`pld.kernels.discretize` for the constructions and
their references).  Everything outside the grid window is moved to the safe
side: up (to ``l_0``) or to ``+inf`` when pessimistic, dropped when
optimistic.
"""

from __future__ import annotations

import math

import numpy as np

from pld.engine.grid import GridPLD
from pld.kernels import optimistic_merge_centred, pessimistic_spread, pessimistic_spread_atoms
from pld.mechanisms.models import LossModelProtocol


def discretize(model: LossModelProtocol, h: float, k_lo: int, k_hi: int, lam: float,
               pessimistic: bool, cells: tuple[np.ndarray, np.ndarray] | None = None,
               points: np.ndarray | None = None, loss_shift: float = 0.0,
               var_weight: float = 1.0, free_below: float = -math.inf) -> GridPLD:
    """Discretise ``model`` onto the grid ``l = k h`` for ``k_lo <= k <= k_hi``.

    Parameters
    ----------
    model : LossModelProtocol
        Exact description of one direction of a dominating pair.
    h : float
        Grid spacing (> 0).
    k_lo, k_hi : int
        Grid window in units of ``h``.
    lam : float
        Tilt of the returned :class:`GridPLD`.
    pessimistic : bool
        Dominating (True) or dominated (False) side.
    cells : (log_p, log_q), optional
        ``model.cells(grid[points])`` when the caller has it already (the
        dominating side's cells; the dominated side cuts its own, centred on
        the points).
    points : int64 array, optional
        Increasing offsets (from ``k_lo``) of the grid points that receive
        mass, from 0 to ``k_hi - k_lo``; all of them by default.  Cells between
        points further apart are wider: where the law has negligible mass a
        wide cell saves work at no cost in validity (either construction is
        valid on any partition) and a cost in accuracy of its mass times its
        width squared (see :func:`pld.engine.windows.cell_points`).
    loss_shift : float, optional
        Dominated side only: discretise the law of ``L + loss_shift`` (the
        pair with its Q-mass scaled by ``e^-loss_shift``, which moves every
        loss by that constant and nothing else; see
        :func:`pld.engine.bulk_shift.bulk_shift` for why and how it is undone).
    var_weight : float, optional
        Dominated side only: what removing a unit of loss variance per step
        costs next to removing a unit of mean loss per step (see
        :func:`variance_weight`); it steers the merge's choices, never validity.
    free_below : float, optional
        Dominated side only: a loss below which rounding down costs nothing
        (0 for a step that is the whole composition, asked at ``eps >= 0``:
        its delta there does not see mass below ``eps``); steers choices only.
    """
    if loss_shift and pessimistic:
        raise ValueError("loss_shift is for the dominated side only")
    side = getattr(model, "side_model", None)
    if side is not None:
        # a model known only through a dominating and a dominated pair
        # (pld.mechanisms.allocation) hands each side its own atoms
        model, cells = side(pessimistic), None
    n = int(k_hi - k_lo + 1)
    if n < 2:
        raise ValueError("a grid window needs at least two points")
    pts = np.arange(n, dtype=np.int64) if points is None else np.asarray(points, dtype=np.int64)
    if pts.size < 2 or pts[0] != 0 or pts[-1] != n - 1 or np.any(np.diff(pts) <= 0):
        raise ValueError("points must increase from 0 to k_hi - k_lo")
    atom_loss, atom_lp, atom_lq = model.atoms()
    inf_sel = atom_loss == np.inf
    inf_lp = atom_lp[inf_sel]
    fin = (atom_lp > -np.inf) & ~inf_sel & (atom_loss > -np.inf)
    atoms = (atom_loss[fin], atom_lp[fin], atom_lq[fin])
    inf_exact = float(np.exp(inf_lp).sum()) if inf_lp.size else 0.0
    if pessimistic:
        return _dominating(model, h, int(k_lo), n, pts, lam, cells, atoms, inf_exact)
    if loss_shift:
        atoms = (atoms[0] + loss_shift, atoms[1], atoms[2] - loss_shift)
    return _dominated(model, h, int(k_lo), int(k_hi), n, pts, lam, atoms, inf_exact, loss_shift, var_weight, free_below)


def _dominating(model, h: float, k_lo: int, n: int, pts: np.ndarray, lam: float, cells, atoms: tuple,
                inf_exact: float) -> GridPLD:
    """Connect-the-dots: every cell and atom split between the points around it."""
    m = pts.size
    grid = (k_lo + pts) * h
    cell_lp, cell_lq = model.cells(grid) if cells is None else cells
    # cells: index -1 below the window, j in [0, m-2] inside, m-1 above
    cell_idx = np.arange(-1, m, dtype=np.int64)
    pt_mass, log_inf = pessimistic_spread(np.ascontiguousarray(cell_lp, dtype=np.float64),
                                          np.ascontiguousarray(cell_lq, dtype=np.float64), cell_idx, pts, h, k_lo)
    if atoms[0].size:
        # (atoms find their cells in the kernel: an allocation round has 1e5-1e6 of them)
        at_mass, at_inf = pessimistic_spread_atoms(*(np.ascontiguousarray(x, dtype=np.float64) for x in atoms),
                                                   pts, h, k_lo, n)
        pt_mass = np.logaddexp(pt_mass, at_mass)
        log_inf = float(np.logaddexp(log_inf, at_inf))
    if m == n:
        log_mass = pt_mass
    else:
        log_mass = np.full(n, -np.inf)
        log_mass[pts] = pt_mass
    inf_mass = min(1.0, inf_exact * (1 + 1e-12) + math.exp(log_inf))
    return GridPLD.from_log_masses(log_mass, k_lo, h, lam, inf_mass, True)


#: how far (in standard deviations of the composed loss) a query typically
#: lies from the composed mean: removing a variance v per step moves delta at
#: eps about as much as removing a mean of v z / (2 sd) per step (the density
#: at eps over the tail above it is about z / sd)
VAR_Z = 3.0


def variance_weight(step_variance: float, total_steps: int) -> float:
    """Weight of a unit of loss variance against a unit of mean loss, per
    step, for the dominated merge's choices: ``VAR_Z / (2 sd)`` with ``sd``
    the standard deviation of ``total_steps`` composed steps of variance
    ``step_variance`` (1.0, the old fixed weight, where it is not known).
    Composing ``T`` steps changes the mean by ``T dm`` and the variance by
    ``T dv``; delta at ``eps`` moves by about ``Q(L > eps) e^eps`` times the
    first and half the density at ``eps`` minus that times the second, and
    the density over the tail is about ``z / sd``.  Only choices between valid
    merges depend on it."""
    if not (step_variance > 0.0 and total_steps >= 1 and math.isfinite(step_variance)):
        return 1.0
    sd = math.sqrt(step_variance * total_steps)
    return min(1e12, VAR_Z / (2.0 * sd))


#: loss error assumed per unit of |loss| for a cell whose model does not bound
#: its masses' errors: piece masses carry ~1e-13 relative error from the
#: log-CDF differences, so a merged loss computed a few ulps above its grid
#: point does not prove that the true one is
_MERGE_MARGIN = 1e-11
_U = 2.0 ** -53


def _cells_with_errors(model, grid: np.ndarray):
    """``(log_p, log_q, loss error, log_p error)`` of the cells between the
    points of ``grid`` (and above its last point), for the dominated side.

    Models with a Gaussian base bound their cells' errors
    (:meth:`pld.mechanisms.models.LossModel.cells_with_errors`); any other model gets
    None, and the caller assumes ``1e-11`` per unit of loss, the margin the
    dominated side always used.
    Over ``T`` steps the margin moves the lower end by about ``T`` times it:
    at a million subsampled steps the fixed one cost 1e-5 of epsilon, the
    bounded ones (~1e-15 near loss 0) cost nothing visible.
    """
    hook = getattr(model, "cells_with_errors", None)
    got = hook(grid) if hook is not None else None
    if got is None:
        lp, lq = model.cells(grid)
        return lp[1:].copy(), lq[1:].copy(), None, None
    lp, lq, loss_err, mass_err = got
    return lp[1:].copy(), lq[1:].copy(), loss_err[1:].copy(), mass_err[1:].copy()


def _dominated(model, h: float, k_lo: int, k_hi: int, n: int, pts: np.ndarray, lam: float, atoms: tuple,
               inf_exact: float, loss_shift: float = 0.0, var_weight: float = 1.0,
               free_below: float = -math.inf) -> GridPLD:
    """Cells centred on the points, each merged onto its point (a post-processing).

    Buckets are one cell wide (see optimistic_merge_centred); each atom off the
    grid joins the cell it falls in (merging it with its cell is
    post-processing; one on a grid point stays there, exact), mass below the
    first cell and above the last is dropped.  The kernel works with linear
    masses and depends on P/Q ratios only; the losses are shifted so the window
    is centred on 0, or Q = P e^{-loss} would underflow for losses of several
    hundred (epsilon ~ 1000).
    """
    m = pts.size
    l0 = k_lo * h
    a_loss, a_lp, a_lq = atoms
    k_mid = (k_lo + k_hi) // 2
    shift = k_mid * h
    # cell edges half way between points, in grid units (halves: exact)
    e_in = 0.5 * (pts[:-1] + pts[1:])
    edges = np.concatenate(([-0.5], e_in, [n - 0.5]))
    mid_lp, mid_lq, loss_err, mass_err = _cells_with_errors(model, (k_lo + edges) * h - loss_shift)
    if loss_shift:
        # the shifted pair: Q scaled by e^-loss_shift (its rounding joins the loss error)
        mid_lq = mid_lq - loss_shift
        if loss_err is not None:
            with np.errstate(invalid="ignore"):
                loss_err = loss_err + _U * (np.abs(mid_lq) + abs(loss_shift))
    if loss_err is None:
        # (per unit of the loss relative to the window's centre, where the
        # kernel works)
        with np.errstate(invalid="ignore"):
            loss_err = _MERGE_MARGIN * np.maximum(1.0, np.abs(mid_lp - mid_lq - shift))
        mass_err = np.zeros_like(mid_lp)
    keep = (a_loss >= l0 - 0.5 * h) & (a_lp > -np.inf) & (a_lq > -np.inf)
    t = (a_loss - l0) / h
    near = np.minimum(np.floor(t + 0.5), n).astype(np.int64)  # nearest grid offset
    # an atom on a grid point (up to rounding) is placed there as it is, so that a grid aligned
    # with the atoms stays exact; where its true loss may lie below the point (its computed loss
    # is known to a few ulps of its log masses, the point k h is the real product), the most it
    # may have moved up is the grid's loss slack (GridPLD.loss_slack), which the evaluator
    # reads the grid past
    point = (k_lo + near) * h
    on_grid = keep & (near < n) & (np.abs(a_loss - point) <= 8.0 * 2.0 ** -52 * np.maximum(1.0, np.abs(a_loss)))
    slack = 0.0
    if np.any(on_grid):
        al, pt = a_loss[on_grid], point[on_grid]
        known = 8.0 * _U * (np.abs(al) + np.abs(a_lp[on_grid]) + np.abs(a_lq[on_grid]) + np.abs(pt) + 1.0)
        slack = float(np.max(np.maximum(pt - (al - known), 0.0))) * (1.0 + 8.0 * _U)
    into = keep & ~on_grid
    if np.any(into):
        cell = np.where(t[into] >= n - 0.5, m, np.searchsorted(e_in, t[into], side="right"))
        np.logaddexp.at(mid_lp, cell, a_lp[into])
        np.logaddexp.at(mid_lq, cell, a_lq[into])
        # (an atom's masses carry no error bound: its cell takes the default one)
        with np.errstate(invalid="ignore"):
            fallback = _MERGE_MARGIN * np.maximum(1.0, np.abs(mid_lp[cell] - mid_lq[cell] - shift))
        loss_err[cell] = np.fmax(loss_err[cell], fallback)  # (fmax: an empty cell had NaN)
    # the shift to the window's centre and the kernel's grid points are rounded too
    with np.errstate(invalid="ignore"):
        loss_err = loss_err + 4.0 * _U * (np.abs(mid_lq) + np.abs(mid_lp - mid_lq) + 2.0 * abs(shift) + 1.0)
    pt_mass = optimistic_merge_centred(mid_lp, mid_lq + shift, k_lo - k_mid + pts, h,
                                       np.where(np.isfinite(loss_err), loss_err, np.inf), mass_err,
                                       float(var_weight), float(free_below - shift))
    if m == n:
        mass = pt_mass
    else:
        mass = np.zeros(n)
        mass[pts] = pt_mass
    if np.any(on_grid):
        np.add.at(mass, near[on_grid], np.exp(a_lp[on_grid]))
    with np.errstate(divide="ignore"):
        log_mass = np.log(mass)
    return GridPLD.from_log_masses(log_mass, k_lo, h, lam, inf_exact * (1 - 1e-12), False, slack)
