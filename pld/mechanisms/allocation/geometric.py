"""One round of random allocation on a geometric grid: short rounds at small noise.

Setting (see :mod:`pld.mechanisms.allocation.sums`): ``Lambda = S/t``, ``S = Y_1 + ... + Y_t``,
the ``Y_i`` iid under ``Q`` with ``log Y ~ N(-a^2/2, a^2)``, ``a = 1/sigma``.  Below
``sigma ~ 0.6`` one coordinate's law spans tens of nats (its median ``e^{-a^2/2}``, the
tail that matters ``e^{a^2/2 + 7 a}``), which no linear grid holds, and a short round
has no light bulk to put on one (the light/heavy split of
:mod:`pld.mechanisms.allocation.heavy` then bounds two or more heavy coordinates
stochastically, or falls back to one Gaussian step in the add direction).  Here the
whole law of ``S`` is carried on one geometric grid ``{0} u {g_1 e^{k h}}`` (relative
spacing ``h``) by pairwise sums of partial sums (``S_2 = Y + Y'``, ``S_4 = S_2 + S_2'``,
..., ``t`` by its binary digits), each in ``O(n log(2)/h)``
(:func:`pld.kernels.geometric_sum_spread`, :func:`pld.kernels.geometric_sum_merge`).

Why the two constructions bound the pair
----------------------------------------
* Cut: ``E = {max_i Y_i > c}`` is a function of the outputs, so the pair is the
  disjoint union of its restrictions to ``E`` and to its complement.  On ``E^c``
  the coordinates are iid with the law of ``Y`` restricted to ``(0, c]`` (a
  sub-probability) and the likelihood ratio is still ``S/t``.  ``c`` is the marked
  coordinate's ``Phi(-z)`` quantile (``z = 13.5``): ``P(E) <= Phi(-z) + (t - 1)
  Q(Y > c)`` and ``Q(E) <= t Q(Y > c)``, put at ``+inf`` (upper) or dropped (lower).
* Upper: ``Y`` on ``(0, c]`` is spread onto the grid preserving each cell's mass and
  mean (:func:`pld.kernels.spread_on`), and every pairwise sum is spread again onto
  its two neighbouring points.  The result is larger in the convex order than the
  law of ``S`` on ``E^c``; for pairs whose likelihood ratio is ``S/t`` that is
  Blackwell's order (both hockey sticks, ``E_Q[(S/t - c)_+]`` and
  ``E_Q[(1 - c S/t)_+]``, are convex in ``S``, and composed epochs keep it).
  Every share is rounded up, and the masses are raised by the summation's
  relative rounding at the end: entrywise upper bounds of the spread, so
  ``(loss, P-mass)`` atoms that dominate.  ``S = 0`` (every coordinate spread to 0)
  is an add loss of ``+inf``.
* Lower: ``Y`` is revealed only by its cell (mass and partial mean per cell,
  :func:`pld.kernels.cells_on`), sums of cells are merged per cell: a conditional
  expectation of ``S``, i.e. a post-processing.  Masses and moments carry a relative
  rounding bound ``gamma``; the remove atoms take ``P = (1 - gamma) M / t`` and
  ``Q = (1 + gamma) m``, the add atoms the other way round (lower P-masses and
  lower losses than the exact merge's: dominated).

The grid's spacing ``h`` sets the width: each spread adds ``~h^2/8`` relative variance.

References: Feldman & Shenfeld, "Privacy amplification by random allocation" (2025);
Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import functools
import itertools
import math
import threading

import numpy as np

from pld._special import ndtr
from pld.engine.cache import in_parallel
from pld.mechanisms.allocation.coordinate import SideAtoms
from pld.mechanisms.allocation.heavy import _atoms
from pld.mechanisms.allocation.partial_sums import partial_sum

#: the coordinate cut: the marked coordinate's upper ``Phi(-z)`` quantile, and the
#: grid's first point the coordinate's lower ``Phi(-z)`` quantile
_CUT_Z = 13.5
#: the grid's relative spacing per unit of ``spacing`` (the rounds' spacing parameter,
#: standard deviations of a coordinate on the linear grid: 0.02 by default -> h = 0.005)
_LOG_RATIO_PER_SPACING = 0.25
#: most grid points (the sums cost ``n log(1/h)/h`` each)
MAX_POINTS = 1 << 17
#: rounds this short or shorter take the geometric grid at small noise (``"auto"``)
GEOMETRIC_STEPS = 64
#: a missed target halves a geometric grid's spacing past its first refinement while the grid
#: keeps within this many points (a round costs ``n log(1/h)/h``: ~0.4 s at 1e4 points, ~2 s at
#: 2.6e4), at most ``FINE_STEPS`` times in all
FINE_POINTS, FINE_STEPS = 1 << 15, 4
_U = 2.0 ** -53


def log_ratio(spacing: float) -> float:
    """The grid's relative spacing ``h`` for a round's ``spacing`` parameter."""
    return _LOG_RATIO_PER_SPACING * spacing


def grid_points(sigma: float, t: int, spacing: float) -> int:
    """How many points the geometric grid of a round needs."""
    a = 1.0 / sigma
    h = log_ratio(spacing)
    return int(math.ceil((2.0 * _CUT_Z * a + a * a + math.log(t)) / h)) + 3


def fits(sigma: float, t: int, spacing: float) -> bool:
    """Whether the geometric grid of a round stays within ``MAX_POINTS``."""
    return grid_points(sigma, t, spacing) <= MAX_POINTS


def finer_spacings(sigma: float, t: int, spacing: float, finest: float) -> list[float]:
    """The spacings a missed target refines a round's geometric grid to, in order: half of
    ``spacing`` where that fits (and is at least ``finest``), then halving on while the grid
    keeps within ``FINE_POINTS`` (the grid's own masses carry relative bounds, so a finer grid
    only narrows: sigma 2.528, 1-of-16, 2 epochs, delta 2e-12 is 7.1, 1.3, 0.83 times its
    target at spacing 0.02, 0.01, 0.005)."""
    out: list[float] = []
    sp = spacing / 2
    if sp >= finest * (1 - 1e-9) and fits(sigma, t, sp):
        out.append(sp)
        while len(out) < FINE_STEPS and grid_points(sigma, t, sp / 2) <= FINE_POINTS:
            sp /= 2
            out.append(sp)
    return out


def _band(h: float) -> int:
    """Cells below ``j`` summed pair by pair: beyond, ``g_i <= g_j (e^h - 1) e^{-h}``, so
    ``g_i + g_j`` stays in ``g_j``'s cell."""
    return int(math.ceil((h - math.log(math.expm1(h))) / h)) + 2


#: the grid of each (sigma, spacing) family, its longest so far: every round and partial
#: sum of a family reads its points as a prefix of one array
_grids: dict = {}
_grids_lock = threading.Lock()
#: generations of the families' grids: a grid computed afresh (a new family, one forgotten,
#: or a longer grid whose prefix differs) takes a new one, so no memoised partial sum is
#: read on points other than its own
_generations = itertools.count()


def _family(sigma: float, spacing: float, n: int) -> tuple[tuple, tuple, np.ndarray]:
    """``(upper key, lower key, grid)``: the partial-sum families of ``(sigma, spacing)`` and
    their grid ``{0} u {g_1 e^{k h}}`` of at least ``n`` points.

    A longer grid is computed afresh; where its prefix differs from the shorter one's in a
    bit (``exp`` evaluated at another position), or the family is new (or was forgotten),
    it takes a new generation (``_generations``)."""
    a = 1.0 / sigma
    h = log_ratio(spacing)
    log_g1 = -0.5 * a * a - _CUT_Z * a
    with _grids_lock:
        gen, grid = _grids.get((sigma, spacing), (-1, None))
        if grid is None or grid.size < n:
            longer = np.concatenate(([0.0], np.exp(log_g1 + h * np.arange(n - 1))))
            if grid is None or not np.array_equal(longer[: grid.size], grid):
                gen = next(_generations)
            grid = longer
            if len(_grids) >= 64:
                _grids.pop(next(iter(_grids)))
            _grids[(sigma, spacing)] = (gen, grid)
    return ("geometric-spread", sigma, spacing, gen), ("geometric-merge", sigma, spacing, gen), grid


def _padded(x: np.ndarray, size: int) -> np.ndarray:
    """``x`` with zeros appended up to ``size`` entries (a partial sum read on a longer grid)."""
    if x.size >= size:
        return x
    out = np.zeros(size)
    out[: x.size] = x
    return out


@functools.lru_cache(maxsize=16)
def geometric_laws(sigma: float, t: int, spacing: float) -> tuple[SideAtoms, SideAtoms, dict]:
    """Upper (spread) and lower (merged) pairs of one round of ``t`` steps on a geometric grid.

    Returns ``(upper, lower, info)`` as :func:`pld.mechanisms.allocation.sums.sum_laws`.
    """
    from pld.kernels import cells_on, geometric_sum_merge, geometric_sum_spread, spread_on

    if t < 2:
        raise ValueError(f"the geometric construction needs at least 2 steps per round, got {t}")
    a = 1.0 / sigma
    mu = -0.5 * a * a
    h = log_ratio(spacing)
    n = grid_points(sigma, t, spacing)
    if n > MAX_POINTS:
        raise ValueError(f"the geometric grid needs {n} points (more than {MAX_POINTS}); "
                         "raise spacing or use another construction")
    upper_family, lower_family, grid = _family(sigma, spacing, n)
    g = grid[:n]
    # the coordinate's last point: the marked coordinate's upper Phi(-z) quantile (or above;
    # log Y ~ N(a^2/2, a^2) under P)
    nc = int(math.ceil((2.0 * _CUT_Z * a + a * a) / h)) + 2
    c = float(g[nc])
    band = _band(h)

    # the cut E = {some Y > c}: Q(Y > c) and the marked coordinate's P(Y > c)
    zc = (math.log(c) - mu) / a
    # (rounded up: they go to +inf)
    q_tail, p_tail = float(ndtr(-zc)) * (1 + 1e-12), float(ndtr(-(zc - a))) * (1 + 1e-12)

    def terms_on(size: int) -> float:
        # additions into one entry (recursive summation: relative error below their count
        # times u): a sum g_i + g_j lands at most log(2)/h + 1 cells above g_j, so an entry
        # takes the pairs of that many j's, each with i in a band below j, in each of the two
        # passes; plus the prefix sums' `size` additions behind the far groups, and a
        # segment's window sums (each term's own relative rounding, up to 2 log2(band) + 4 ulps)
        return (4.0 * (math.ceil(math.log(2.0) / h) + 3) * (band + 2) + size + 16
                + 2.0 * math.ceil(math.log2(band + 1)) + 8)

    def size_of(m: int) -> int:
        return grid_points(sigma, m, spacing) if m > 1 else nc + 1

    def upper_first() -> tuple:
        """The spread coordinate: ``(Q-masses, relative rounding, mass past the grid)``."""
        return spread_on(mu, a, np.ascontiguousarray(grid[: nc + 1])), 0.0, 0.0

    def add_up(x: tuple, y: tuple, m: int) -> tuple:
        size = size_of(m)
        out, over = geometric_sum_spread(_padded(x[0], size), _padded(y[0], size), grid[:size], h, band)
        return out, (x[1] + y[1] + terms_on(size) * _U) * (1.0 + 1e-9), x[2] + y[2] + over

    def lower_first() -> tuple:
        """The cells (mass, partial mean) and their relative rounding."""
        cq, ceq, cp, cep = cells_on(mu, a, np.ascontiguousarray(grid[: nc + 1]))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.maximum(np.where(cq > 0, ceq / cq, 0.0), np.where(cp > 0, cep / cp, 0.0))
        keep = (cq > 0) & (cp > 0) & (rel < 1e-6)
        m1 = np.zeros(nc + 1)
        v1 = np.zeros(nc + 1)
        m1[:nc][keep] = cq[keep]
        v1[:nc][keep] = cp[keep]
        return m1, v1, float(np.max(rel[keep])) if np.any(keep) else 0.0

    def add_lo(x: tuple, y: tuple, m: int) -> tuple:
        # (the merged mass past the last point is dropped: the dominated pair may drop mass)
        size = size_of(m)
        om, ov, _ = geometric_sum_merge(_padded(x[0], size), _padded(x[1], size), _padded(y[0], size),
                                        _padded(y[1], size), grid[:size], band)
        return om, ov, (x[2] + y[2] + terms_on(size) * _U + 4 * _U) * (1.0 + 1e-9)

    def nbytes(value: tuple) -> int:
        return sum(v.nbytes for v in value if isinstance(v, np.ndarray))

    # (the two sides share nothing but their inputs: built concurrently; their partial sums
    # are shared with the rounds of other lengths, partial_sums)
    (s_up, gam, over_up), (m_lo_, v_lo_, gam_lo) = in_parallel(
        lambda: partial_sum(upper_family, t, upper_first, add_up, nbytes),
        lambda: partial_sum(lower_family, t, lower_first, add_lo, nbytes))
    s_up, m_lo_, v_lo_ = _padded(s_up, n), _padded(m_lo_, n), _padded(v_lo_, n)
    q_up = s_up * (1.0 + 2.0 * gam + 4.0 * _U)
    # sums past the grid go to +inf: their Q-mass, and at most c times as much P-mass in
    # the remove direction (P = (S/t) Q, and S <= t c on the cut's complement)
    over_q = over_up
    over_p = over_up * c

    # atoms
    # (remove: loss log(g/t) with P-mass (g/t) q; add: loss -log(g/t) with P-mass q; S = 0 an
    # add loss of +inf)
    empty = (np.zeros(0), np.zeros(0))
    upper, _ = _atoms([(g, q_up)], t, empty, empty, p_tail + (t - 1) * q_tail + over_p, t * q_tail + over_q)
    lower = _lower_atoms(m_lo_, v_lo_, t, gam_lo)
    info = {"construction": "geometric", "log_ratio": h, "points": n, "band": band, "coordinate_cut": c,
            "grid_first": float(g[1]), "inf_mass_upper_remove": p_tail + (t - 1) * q_tail + over_p,
            "inf_mass_upper_add": min(1.0, t * q_tail + over_q + float(q_up[0])),
            "lower_mass": float(np.sum(m_lo_)), "roundoff_upper": gam, "roundoff_lower": gam_lo,
            "heavy": False, "geometric": True}
    return upper, lower, info


def _lower_atoms(m: np.ndarray, v: np.ndarray, t: int, gamma: float) -> SideAtoms:
    """Merged atoms (Q-mass ``m``, moment ``v``, value ``v/m``) with relative rounding ``gamma``:
    each side's P-mass and loss rounded down."""
    sel = (m > 0) & (v > 0)
    lm, lv = np.log(m[sel]), np.log(v[sel]) - math.log(t)
    dn, up = math.log1p(-gamma), math.log1p(gamma)
    # remove: P = v/t (down), Q = m (up)
    lp, lq = lv + dn, lm + up
    remove = (lp - lq, lp, lq)
    # add: P = m (down), Q = v/t (up)
    lp, lq = lm + dn, lv + up
    add = (lp - lq, lp, lq)
    return SideAtoms(remove, add)
