"""Certified bounds on the privacy-loss tail ``P(L > eps)`` read off a PLD.

:func:`tail_delta` brackets the tail at given ``eps`` and :func:`tail_epsilon`
inverts it (the smallest ``eps`` whose tail is at most ``delta``); both use the
chord bounds of :meth:`pld.baselines.curves_grids.Side.tail_grid` on the engine's grids.
"""

from __future__ import annotations

import math

import numpy as np

from pld import _validate as _v
from pld.baselines.curves_grids import CHORD_STEPS, Direction, directions

__all__ = ["tail_delta", "tail_epsilon", "first_satisfying", "last_violating"]


def _tail_bounds(d: Direction, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Certified ``(lower, upper)`` on ``P(L > eps)`` for one direction (chord bounds)."""
    eps = np.asarray(eps, dtype=np.float64).ravel()
    s = (CHORD_STEPS * d.h)[None, :]
    e = eps[:, None]
    d_lo = d.lower.delta(eps)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        up = (d.upper.delta(e - s) - np.exp(-s) * d_lo) / (-np.expm1(-s))
        lo = (np.exp(s) * d_lo - d.upper.delta(e + s)) / np.expm1(s)
    upper = np.minimum(np.nanmin(up, axis=1), 1.0)
    lower = np.maximum(np.nanmax(lo, axis=1), d_lo[:, 0])
    upper = np.maximum(upper, d_lo[:, 0])  # P(L > eps) >= delta(eps) in any case
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def tail_delta(pld_obj, epsilon, delta: float = 1e-6):
    """Certified bracket on the privacy-loss tail ``P(L > eps)``.

    The tail of the loss is not monotone under domination (connect-the-dots
    moves part of an atom *down*, so the dominating grid's tail can be below
    the true tail, and merging can move it either way), so neither grid's own
    tail is a bound.  It is, however, a functional of the hockey-stick curve:
    with ``D(g) = delta(log g)``, convex in ``g = e^eps`` (DESIGN.md),

    .. math::

        P(L > \\varepsilon) = D(g) - g\\,D'_+(g),

    the intercept at ``g = 0`` of the tangent to ``D`` at ``g`` (the inf-mass
    counts as loss ``+inf``).  Convexity bounds the tangent by the chords to
    either side, and the certified brackets on ``D`` (module docstring) give,
    for every ``s > 0``,

    .. math::

        \\frac{e^{s}\\delta_{lo}(\\varepsilon) - \\delta_{up}(\\varepsilon+s)}{e^{s}-1}
        \\;\\le\\; P(L > \\varepsilon) \\;\\le\\;
        \\frac{\\delta_{up}(\\varepsilon-s) - e^{-s}\\delta_{lo}(\\varepsilon)}{1-e^{-s}}.

    The best ``s`` over a geometric set is taken.  Both ends are certified
    (given the engine's round-off bound); the width is set by the width of the
    delta bracket, roughly its square root.

    Parameters
    ----------
    pld_obj : pld.PLD
    epsilon : float or array_like
        Real values.
    delta : float, default 1e-6
        Query that selects the grids.

    Returns
    -------
    (lower, upper)
        Bracket on ``max`` over the directions of ``P(L > eps)``.
    """
    eps, scalar = _v.real_array("epsilon", epsilon, low=-math.inf, high=math.inf, low_open=True, high_open=True)
    lo = np.zeros(eps.size)
    hi = np.zeros(eps.size)
    for d in directions(pld_obj, delta):
        l_d, u_d = _tail_bounds(d, eps.ravel())
        lo = np.maximum(lo, l_d)
        hi = np.maximum(hi, u_d)
    if scalar:
        return float(lo[0]), float(hi[0])
    return lo.reshape(eps.shape), hi.reshape(eps.shape)


def first_satisfying(fn, grid: np.ndarray, iters: int = 48) -> float:
    """Smallest point of ``grid`` where ``fn`` holds, refined by bisection to the left.

    ``fn`` is vectorised and returns booleans.  The returned point always
    satisfies ``fn`` (verified), so a certificate attached to ``fn`` holds there.
    Returns ``inf`` if no grid point satisfies it.
    """
    ok = fn(grid)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return math.inf
    j = int(idx[0])
    if j == 0:
        return float(grid[0])
    return _bisect(fn, good=float(grid[j]), bad=float(grid[j - 1]), iters=iters)


def _bisect(fn, good: float, bad: float, iters: int) -> float:
    """Move ``good`` (where ``fn`` holds) toward ``bad`` (where it fails); ``good`` stays verified."""
    for _ in range(iters):
        mid = 0.5 * (bad + good)
        if mid == good or mid == bad:
            break
        if bool(fn(np.array([mid]))[0]):
            good = mid
        else:
            bad = mid
    return good


def last_violating(fn, grid: np.ndarray, iters: int = 48) -> float:
    """Largest point (bisection-refined) where the vectorised predicate ``fn`` holds.

    Returns ``-inf`` if none does; the returned point is verified.
    """
    ok = fn(grid)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return -math.inf
    j = int(idx[-1])
    if j == grid.size - 1:
        return float(grid[-1])
    return _bisect(fn, good=float(grid[j]), bad=float(grid[j + 1]), iters=iters)


def tail_epsilon(pld_obj, delta: float, *, details: bool = False):
    """Privacy-loss-tail epsilon: smallest ``eps >= 0`` with ``P(L > eps) <= delta``.

    The seed lab's "tail epsilon": a *sufficient* check for
    ``(eps, delta)``-DP (``delta(eps) <= P(L > eps)``), not a tight one.  Under
    add-or-remove adjacency the check must hold in both directions, so the
    larger of the two directions' values is reported.

    Certified: both ends, given the engine's round-off bound.  The tail
    functional is *not* monotone under domination, so the grids' own tails are
    not bounds (they are returned, with ``details=True``, as ``estimate``);
    instead the bracket on ``P(L > eps)`` of :func:`tail_delta` (chord bounds
    on the convex hockey-stick curve) is inverted:

    * ``upper`` is a point where the certified upper bound on the tail is
      ``<= delta`` (verified at that point), so the true tail epsilon is at
      most ``upper``;
    * ``lower`` is a point where the certified lower bound on the tail is
      ``> delta``, so the true tail epsilon is above it.

    For the Gaussian mechanism compare with
    :func:`pld.baselines.exact.privacy_loss_tail_epsilon_gaussian`
    (``mu^2/2 - mu Phi^{-1}(delta)``).  The bracket is wider than the
    ``epsilon_bounds`` bracket (about the square root of the delta bracket's
    relative width, i.e. a few 1e-3 in eps).

    Parameters
    ----------
    pld_obj : pld.PLD
    delta : float
        Target in ``(0, 1)``; it also selects the grids.
    details : bool, default False
        Also return a dict with per-direction brackets and grid estimates.

    Returns
    -------
    (lower, upper) : floats
    """
    delta = _v.real_scalar("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    res_lo = res_hi = 0.0
    per_dir = {}
    for d in directions(pld_obj, delta):
        l = d.upper.losses
        s_max = float(CHORD_STEPS[-1] * d.h)
        grid = np.concatenate(([0.0], l[l > 0.0], l[-1] + np.linspace(0.0, s_max, 8)[1:]))
        grid = np.unique(grid)

        def up_ok(x, d=d):
            return _tail_bounds(d, x)[1] <= delta

        def lo_bad(x, d=d):
            return _tail_bounds(d, x)[0] > delta

        hi_d = first_satisfying(up_ok, grid)
        if d.lower.inf_mass > delta:
            lo_d = math.inf
        else:
            lo_d = last_violating(lo_bad, grid)
            lo_d = 0.0 if lo_d == -math.inf else lo_d
        lo_d = min(lo_d, hi_d)
        # estimate from the grid's own tail (not a bound)
        est = first_satisfying(lambda x, d=d: d.lower.tail_grid(x) <= delta, grid)
        per_dir[d.name] = {"lower": lo_d, "upper": hi_d, "estimate": est}
        res_lo = max(res_lo, lo_d)
        res_hi = max(res_hi, hi_d)
    if details:
        return res_lo, res_hi, {"directions": per_dir, "delta": delta}
    return res_lo, res_hi
