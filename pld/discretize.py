"""From an exact loss model to certified grid PLDs (both sides).

The pessimistic grid dominates the model's pair and the optimistic grid is
dominated by it (see :mod:`pld.kernels.discretize` for the constructions and
their references).  Everything outside the grid window is moved to the safe
side: up (to ``l_0``) or to ``+inf`` when pessimistic, dropped or rounded down
when optimistic.
"""

from __future__ import annotations

import math

import numpy as np

from pld._models import LossModel
from pld.grid import GridPLD
from pld.kernels import optimistic_merge_centred, pessimistic_spread


def discretize(model: LossModel, h: float, k_lo: int, k_hi: int, lam: float,
               pessimistic: bool, cells: tuple[np.ndarray, np.ndarray] | None = None) -> GridPLD:
    """Discretise ``model`` onto the grid ``l = k h`` for ``k_lo <= k <= k_hi``.

    Parameters
    ----------
    model : LossModel
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
        ``model.cells(grid)`` when the caller has it already (the dominating
        side's cells; the dominated side cuts its own, centred on the grid).
    """
    n = int(k_hi - k_lo + 1)
    if n < 2:
        raise ValueError("a grid window needs at least two points")
    grid = (k_lo + np.arange(n)) * h
    l0 = k_lo * h
    cell_lp, cell_lq = model.cells(grid) if cells is None else cells
    atom_loss, atom_lp, atom_lq = model.atoms()
    inf_sel = atom_loss == np.inf
    inf_lp = atom_lp[inf_sel]
    fin = (atom_lp > -np.inf) & ~inf_sel & (atom_loss > -np.inf)
    a_loss, a_lp, a_lq = atom_loss[fin], atom_lp[fin], atom_lq[fin]
    inf_exact = float(np.exp(inf_lp).sum()) if inf_lp.size else 0.0

    if pessimistic:
        # cells: index -1 below the window, i in [0, n-2] inside, n-1 above
        cell_idx = np.arange(-1, n, dtype=np.int64)
        k = np.floor((a_loss - l0) / h).astype(np.int64)
        on_top = np.isclose(a_loss, grid[-1], rtol=0, atol=1e-12 * max(1.0, abs(grid[-1])))
        k = np.where((k >= n - 1) & on_top, n - 2, k)
        k = np.where(a_loss < l0, -1, k)
        k = np.where(a_loss > grid[-1] + 1e-12 * max(1.0, abs(grid[-1])), n - 1, k)
        lp = np.concatenate((cell_lp, a_lp))
        lq = np.concatenate((cell_lq, a_lq))
        idx = np.concatenate((cell_idx, k))
        log_mass, log_inf = pessimistic_spread(lp, lq, idx, h, l0, n)
        inf_mass = min(1.0, inf_exact * (1 + 1e-12) + math.exp(log_inf))
        return GridPLD.from_log_masses(log_mass, k_lo, h, lam, inf_mass, True)

    # The dominated side merges cells centred on the grid points,
    # [l_k - h/2, l_k + h/2] (buckets one cell wide, see
    # optimistic_merge_centred); each atom off the grid joins the cell it
    # falls in (merging it with its cell is post-processing; one on a grid
    # point stays there, exact), mass below the first cell is
    # dropped, mass above the last rounded down.  The kernel works with
    # linear masses and depends on P/Q ratios only; the losses are shifted so
    # the window is centred on 0, or Q = P e^{-loss} would underflow for
    # losses of several hundred (epsilon ~ 1000).
    k_mid = (k_lo + k_hi) // 2
    shift = k_mid * h
    mid_lp, mid_lq = model.cells((k_lo - 0.5 + np.arange(n + 1)) * h)
    mid_lp, mid_lq = mid_lp[1:].copy(), mid_lq[1:].copy()
    keep = (a_loss >= l0 - 0.5 * h) & (a_lp > -np.inf) & (a_lq > -np.inf)
    idx = np.minimum(np.floor((a_loss - l0) / h + 0.5), n).astype(np.int64)
    # an atom on a grid point (up to rounding) is placed there as it is
    on_grid = keep & (idx < n) & (np.abs(a_loss - (k_lo + idx) * h)
                                  <= 8.0 * 2.0 ** -52 * np.maximum(1.0, np.abs(a_loss)))
    into = keep & ~on_grid
    if np.any(into):
        np.logaddexp.at(mid_lp, idx[into], a_lp[into])
        np.logaddexp.at(mid_lq, idx[into], a_lq[into])
    mass = optimistic_merge_centred(mid_lp, mid_lq + shift, h, (k_lo - k_mid) * h, n)
    if np.any(on_grid):
        np.add.at(mass, idx[on_grid], np.exp(a_lp[on_grid]))
    with np.errstate(divide="ignore"):
        log_mass = np.log(mass)
    return GridPLD.from_log_masses(log_mass, k_lo, h, lam, inf_exact * (1 - 1e-12), False)
