"""The law of the likelihood ratio of one round of random allocation (Gaussian, one of ``t`` steps).

Remove direction: ``P = (1/t) sum_i N(e_i, s^2 I_t)`` against ``Q = N(0, s^2 I_t)``.
With ``Y_i = exp(x_i/s^2 - 1/(2 s^2))`` the per-coordinate likelihood ratio,
``dP/dQ = Lambda = S/t`` with ``S = sum_i Y_i`` and the ``Y_i`` iid under ``Q``
(``log Y ~ N(-a^2/2, a^2)``, ``a = 1/s``, ``E[Y] = 1``).  ``S`` is sufficient, and
a pair of this form is determined by the Q-law of ``Lambda``:

* remove: ``H_c(P || Q) = E_Q[(Lambda - c)_+]``, loss ``log Lambda`` with P-mass
  ``Lambda`` times Q-mass;
* add (the pair swapped): ``H_c(Q || P) = E_Q[(1 - c Lambda)_+]``, loss
  ``-log Lambda`` with P-mass the Q-mass.

Why the two constructions bound the pair (proof sketch)
-------------------------------------------------------
* Upper: replace each ``Y_i`` by an independent mean-preserving spread
  ``Y_i^s`` onto the grid ``k d`` (:func:`pld.kernels.allocation.spread_law`).
  Then ``S^s = sum Y_i^s`` is a mean-preserving spread of ``S`` and
  ``(P^s, Q^s)`` with ``dP^s/dQ^s = S^s/t`` dominates the true pair (for pairs
  whose likelihood ratio has mean one, Blackwell's order is the convex order
  of ``Lambda`` under ``Q``; products preserve it, so composed epochs do too).
  Partial sums are re-gridded by a further spread (:func:`_coarsen`: an odd
  atom's Q-mass split half-half between its neighbours, its P-mass in the
  ratio of their values, so every atom keeps the likelihood ratio of its
  value).  Such a pair is determined by its Q-measure and both hockey sticks
  are increasing in it entrywise, so entrywise upper bounds on the masses
  (with the losses at the grid values) give a dominating pair.
* Lower: reveal only which cell each ``Y_i`` falls in, cells whose
  conditional means are the grid points (:func:`pld.kernels.allocation.merged_law`),
  then only the sum of the cells' points, and at each re-grid only a bucket
  of atoms whose conditional mean is a coarse point
  (:func:`pld.kernels.allocation.merge_half`, a randomised merge).  All of it
  is post-processing, so the pair is dominated by the true one; its
  likelihood ratio at an atom of value ``v`` is ``m/t``, ``m`` the atom's
  conditional mean.  ``m`` is ``v`` up to a per-atom deviation carried
  through the sums (``dev``: ``|m - v| Q <= dev``, convolved along, plus,
  at each merge, what the round-off of the masses the merge was computed
  from can move a bucket's mean), so the remove direction takes the loss
  ``log(v (1 - rho_k)/t)`` and the add direction ``-log(v (1 + rho_k)/t)``,
  ``rho_k = dev_k / (v_k Q_k)``, with P-masses rounded down: smaller losses
  and masses, a dominated pair.  The losses are known to ``rho_k`` whatever
  the round-off; only the masses carry it, and an entry's round-off then
  costs it ``E (1 - c/Lambda)_+``, not ``E (1 + c)``.

Both are ``t``-fold convolutions on linear grids (FFT, repeated squaring); a
partial sum of ``m`` coordinates is re-gridded to twice its spacing while
that spacing stays below a fixed fraction of its standard deviation
(evolving discretisation).

Round-off of the upper side, relative: its convolution chain is run on
exponentially tilted laws (``x_k e^{theta s_k}``, normalised), for a few
tilts ``theta``.  Tilting commutes with convolution and turns each re-grid
into another fixed linear map, so every run computes the same exact object;
a run's l2 round-off bound ``E`` (Young's inequality per convolution, the l2
norm of each re-grid map) bounds every tilted entry's error, i.e. the
untilted entry ``k`` to within ``E e^{m c_0 - theta s_k}``.  Each entry takes
the tightest bracket over the runs.  Tilts are chosen one after another
(:func:`_next_tilt`), each moving the accurately resolved range further into
a tail.  Upward (``theta > 0``) a tilted log-normal coordinate is heavier
than any exponential, so a tilted run cuts the coordinates where the tilted
law climbs back (its cut mass goes to ``+inf``; a tilt is kept only if that
costs less than it resolves); downward, a run serves only the entries below
the mean of ``S``, where nothing any level cuts can land (the coordinates are
non-negative).  Entries no run resolves to ``_LUMP`` keep their estimate, and
their round-off is lumped by Cauchy-Schwarz (``sqrt(n) E``, not ``n E``) in
blocks, each at its largest loss (a loss rounded up).  A single epoch of
``t = 1e5`` steps at ``sigma = 2`` then certifies ``delta = 1e-10`` (an
untilted run alone carries ~1e-6 of round-off); at ``sigma = 1`` the upward
tail is the log-normal's (one large coordinate), which no tilt resolves, and
the upper end stays finite but loose there.

Truncation: each level is cut to its own window and each coordinate to the
first window.  On the upper side what is cut is made fully distinguishing
(a loss of ``+inf`` in both directions; a union of a sub-pair with a fully
revealing one dominates): its Q- and P-masses are bounded level by level
(the masses cut at a level, bounded by Chernoff with the carried log-MGF
bounds or by the tilted entries, times the totals of the other factors).
The lower side drops what is cut.

References: Feldman & Shenfeld, "Privacy amplification by random allocation"
(2025); Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from pld import _special
from pld.engine.cache import in_background, in_parallel
from pld.mechanisms.allocation.coordinate import (
    _TILT_CELLS,
    SideAtoms,
    _coordinate_upper,
    _lower_merged,
    _upper_atoms,
    _upper_jump,
    _upper_runs,
    bracket_atoms,
    by_loss,
    coordinate_spread,
)
from pld.mechanisms.allocation.geometric import GEOMETRIC_STEPS, geometric_laws
from pld.mechanisms.allocation.geometric import fits as geometric_fits
from pld.mechanisms.allocation.heavy import KAPPA, heavy_laws
from pld.mechanisms.allocation.levels import (
    _COARSE_RATIO,
    _NO_ERR,
    _TAIL,
    MAX_CELLS,
    _Level,
    _pad,
    _Run,
    _sum_levels,
    window,
)
from pld.mechanisms.allocation.levels import _coarse as _coarse_var
from pld.mechanisms.allocation.levels import _precise as _precise_var
from pld.mechanisms.allocation.levels import _tail as _tail_var
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

#: the one-jump decomposition is tried when the steps are at least this many
#: times one coordinate's window (its lumps are placed a window further up)
_JUMP_STEPS = 10.0
#: keep it whatever its slack (tests)
_JUMP_ALWAYS = False


#: a tilt ``theta > 0`` cuts each coordinate where its tilted law climbs back to
#: ``e^{-_TILT_DEPTH}`` of its mode (beyond, the log-normal tail outweighs the bulk)
_TILT_DEPTH = 30.0

#: constructions of one round: one linear grid for the whole coordinate ("linear", below), or
#: the light/heavy split by the number of heavy coordinates ("split",
#: :func:`pld.mechanisms.allocation.heavy.heavy_laws`), or the whole sum on one geometric grid
#: ("geometric", short rounds at small noise: :func:`pld.mechanisms.allocation.geometric.geometric_laws`)
CONSTRUCTIONS = ("linear", "split", "split_fine", "geometric")
#: "auto" takes the split at or below this noise multiplier, or from this many steps on
_SPLIT_SIGMA = 1.35
#: "auto" takes the geometric grid below this noise multiplier for rounds of at most GEOMETRIC_STEPS
_GEOMETRIC_SIGMA = 0.75
#: and for longer rounds whose sum is wide on its relative scale, up to this many steps
_GEOMETRIC_MAX_STEPS = 4096
#: below this noise multiplier the geometric grid is taken however long the round (where it
#: fits), and the split is not built: its light sum's windows outgrow memory (sigma 0.1, 5000
#: steps; 0.12, 1e5: MemoryError after 30 s) or leave it loose (0.2, 4097 steps, delta 1e-5:
#: [24.79, 33.10] in 17 s, the geometric grid [24.7853, 24.7865] in 1.2 s)
GEOMETRIC_ONLY_SIGMA = 0.25
_SPLIT_STEPS = 1000


def linear_fits(sigma: float, t: int, spacing: float) -> bool:
    """Whether one linear grid of ``spacing`` standard deviations holds a coordinate's window
    within ``_TILT_CELLS`` cells (else only the split is built; one step needs the linear grid)."""
    a = 1.0 / sigma
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    return t < 2 or window(a, 1, t) / (spacing * sd1) <= _TILT_CELLS


def choose_construction(sigma: float, t: int, spacing: float, construction: str = "auto") -> str:
    """The construction ``"auto"`` stands for (a given one is returned as it is, where it can be built).

    Both are certified; which is narrower depends on the regime (measured over sigma 0.5 .. 6,
    t 3 .. 1e5, delta 1e-5 .. 1e-12, benchmarks/coverage_allocation.py): the split resolves the
    heavy upper tail of one large coordinate, which the single grid lumps at strict delta, and
    wins at ``sigma <= 1.35`` and for long rounds; the single grid wins for short rounds at
    larger ``sigma`` (the split's stochastic bounds on two or more heavy coordinates cost more
    there).  A bracket that misses its target is intersected with the other construction's
    (:meth:`pld.mechanisms.allocation.RandomAllocation.refined`)."""
    if t < 2:
        return "linear"
    if construction in CONSTRUCTIONS and construction != "linear":
        return construction
    if construction == "auto" and geometric_preferred(sigma, t, spacing):
        return "geometric"
    if not linear_fits(sigma, t, spacing):
        return "split"
    if construction == "linear":
        return construction
    return "split" if (sigma <= _SPLIT_SIGMA or t >= _SPLIT_STEPS) else "linear"


def geometric_preferred(sigma: float, t: int, spacing: float) -> bool:
    """Whether ``"auto"`` takes the geometric grid: below ``sigma = _GEOMETRIC_SIGMA``, for short
    rounds (``t <= GEOMETRIC_STEPS``; the split has no light bulk to lean on there and bounds two
    or more heavy coordinates stochastically) and for rounds whose sum stays wide on the grid's
    relative scale (``t <= 8 (e^{a^2} - 1)``, ``Var(S/t) = (e^{a^2} - 1)/t``, up to
    ``_GEOMETRIC_MAX_STEPS``; measured over sigma 0.3 .. 0.7, t 4 .. 1e5: narrower than the split
    there, e.g. sigma 0.35, t = 4000, 10 epochs, delta 1e-8: 0.72x the target against 4.3x); and
    below ``GEOMETRIC_ONLY_SIGMA`` for every round."""
    if not 2 <= t or sigma >= _GEOMETRIC_SIGMA or not geometric_fits(sigma, t, spacing):
        return False
    if sigma < GEOMETRIC_ONLY_SIGMA:
        return True
    a2 = min(1.0 / (sigma * sigma), 700.0)
    return t <= max(GEOMETRIC_STEPS, min(_GEOMETRIC_MAX_STEPS, 8.0 * math.expm1(a2)))


@functools.lru_cache(maxsize=16)
def sum_laws(sigma: float, t: int, spacing: float, construction: str = "linear",
             kappa: float | None = None, tail: float | None = None,
             precise: bool = True, coarse_ratio: float = _COARSE_RATIO) -> tuple[SideAtoms, SideAtoms, dict]:
    """Upper (spread) and lower (post-processed) pairs of one round for noise multiplier ``sigma``.

    ``tail``: the probability the linear levels' windows leave beyond them (``_TAIL``
    if None; smaller puts less mass at ``+inf`` on wider windows, for runs of many
    rounds at a strict delta).  ``precise``: the untilted runs whose round-off is a share
    of their mass (``info["lumped_upper"]``, ``info["dropped_lower"]``) are redone with
    long double transforms (:mod:`pld.mechanisms.allocation.roundoff`; up to twice the
    build's time, and what a strict delta needs: built lazily, as a refinement, a sample of
    DP-SGD settings took 2.4x as long).  ``coarse_ratio``: the partial sums are re-gridded
    while their spacing stays below ``coarse_ratio * spacing`` of their standard deviation
    (a smaller ratio keeps the last levels of a long round finer: more cells, a narrower
    pair).  The rest as :func:`_sum_laws`.
    """
    t_token = _tail_var.set(_TAIL if tail is None else tail)
    p_token = _precise_var.set(bool(precise))
    c_token = _coarse_var.set(float(coarse_ratio))
    try:
        upper, lower, info = _sum_laws(sigma, t, spacing, construction, kappa)
        return by_loss(upper), by_loss(lower), info
    finally:
        _coarse_var.reset(c_token)
        _precise_var.reset(p_token)
        _tail_var.reset(t_token)


def _sum_laws(sigma: float, t: int, spacing: float, construction: str = "linear",
              kappa: float | None = None) -> tuple[SideAtoms, SideAtoms, dict]:
    """Upper (spread) and lower (post-processed) pairs of one round for noise multiplier ``sigma``.

    ``construction``: ``"linear"`` (this function's single grid), ``"split"`` (the light/heavy
    split, with ``kappa``), ``"split_fine"`` (the same on a light grid in medians of a
    coordinate) or ``"auto"`` (:func:`choose_construction`).

    ``spacing``: the first grid's spacing in standard deviations of one
    coordinate (raised if the first window would need more than ``MAX_CELLS``
    cells; ``info["spacing_sd"]`` says what was used).  Returns ``(upper,
    lower, info)``.

    Where the first window would need more than ``_TILT_CELLS`` cells (below
    ``sigma ~ 0.75``; ``t >= 2``) the round is handed to
    :func:`pld.mechanisms.allocation.heavy.heavy_laws` (a light part on a linear grid,
    the heavy part of a coordinate on a geometric one).

    Upper side: runs with different tilts may cut the coordinates at
    different points, i.e. bound different truncated objects; an entry's
    shortfall against the untruncated one is part of its run's cut mass, so
    the pair built from the tightest entry of each is dominating once the
    cut masses of all runs are put at ``+inf``.  Lower side: every run cuts
    the coordinates at the same point (the smallest), so all bound the same
    post-processed pair.
    """

    a = 1.0 / sigma
    mu = -0.5 * a * a
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    w1 = window(a, 1, t)
    chosen = choose_construction(sigma, t, spacing, construction)
    if chosen == "geometric":
        return geometric_laws(sigma, t, spacing)
    if chosen != "linear":
        # a light part on a linear grid, the heavy part on a geometric one (needed where
        # one grid cannot hold both the bulk and the heavy tail of a coordinate); "split_fine":
        # its light grid in medians of a coordinate (heavy_laws' fine)
        return heavy_laws(sigma, t, spacing, KAPPA if kappa is None else kappa, chosen == "split_fine")
    d = max(spacing * sd1, w1 / MAX_CELLS)
    n = int(math.ceil(w1 / d))
    coarse = _coarse_var.get() * spacing

    g_full = np.arange(n + 1) * d
    with np.errstate(divide="ignore"):
        spread_full = coordinate_spread(mu, a, d, n)
        lx_full = np.log(spread_full)
    bulk = int(min(n, (10.0 * (1.0 + sd1)) / d))

    @functools.cache
    def cut(theta: float) -> int:
        """Where the tilted coordinate law ``x e^{theta y}``, past its bulk, climbs back
        to ``e^{-_TILT_DEPTH}`` of its mode (the log-normal tail is heavier than
        any exponential): cut there, so the tilted law stays a bulk."""
        if theta <= 0:
            return n
        e = lx_full + theta * g_full
        k0 = int(np.argmax(e[: bulk + 1]))
        low = e < e[k0] - _TILT_DEPTH
        low[:k0] = False
        if not np.any(low):
            return 0  # no bulk to tilt
        k1 = int(np.argmax(low))
        high = ~low
        high[:k1] = False
        return n if not np.any(high) else max(8, int(np.argmax(high)) - 1)

    def tilted(theta: float) -> tuple[np.ndarray, int]:
        e = lx_full + theta * g_full
        return e, int(np.argmax(e[: bulk + 1]))

    def valley(theta: float) -> int:
        """Where the tilted coordinate law is least past its bulk (a light part's cut)."""
        e, k0 = tilted(theta)
        return k0 + int(np.argmin(e[k0:]))

    def fits(theta: float, nb: int) -> bool:
        """The tilted law cut at ``nb`` stays a bulk (its top e^-5 of its mode or less)."""
        e, k0 = tilted(theta)
        # (past the valley the tilted law climbs: its largest value on [0, nb] there is at nb)
        return nb <= valley(theta) or float(e[nb]) <= float(e[k0]) - 5.0

    # (the dominated side shares nothing with the dominating one but these inputs)
    lower_part = in_background(functools.partial(_lower_merged, mu, a, d, n, t, coarse))
    up = _upper_runs(a, d, n, t, coarse, cut, lambda nb: _coordinate_upper(mu, a, d, nb, t, spread_full
                                                                              if nb == n else None), valley=valley)
    thetas, step, size, s = up.thetas, up.step, up.size, up.s
    q_hi, p_hi, lost_q, lost_p = up.q_hi, up.p_hi, up.lost_q, up.lost_p
    extra_remove = [(math.log(vmax), dp) for vmin, vmax, dq, dp in up.lumps if vmax > 0]
    extra_add = [(-math.log(vmin), dq) for vmin, vmax, dq, dp in up.lumps_add if vmin > 0]
    lost_q += sum(dq for vmin, vmax, dq, dp in up.lumps_add if vmin <= 0)
    lost_q, lost_p = min(1.0, lost_q), min(1.0, lost_p)
    jump = None
    if up.heavy_cut is not None and t >= _JUMP_STEPS * w1:
        jump = _upper_jump(mu, a, d, n, t, coarse, up.heavy_cut, spread_full, cut, fits)

        def slack(lq, lp, er, ea) -> float:
            # mass the construction puts at +inf or lumps at a rounded-up loss
            return lq + lp + sum(m for _, m in er) + sum(m for _, m in ea)

        # (either pair dominates: the one with less mass at +inf and in lumps is kept)
        if jump is not None and (_JUMP_ALWAYS or slack(*jump[3:]) < slack(lost_q, lost_p, extra_remove, extra_add)):
            q_hi, p_hi, s, lost_q, lost_p, extra_remove, extra_add = jump
        else:
            jump = None
    upper = _upper_atoms(q_hi, p_hi, s, t, lost_q, lost_p, extra_remove, extra_add)
    lower, rho, rho_worst = lower_part.result()
    info = {"construction": "linear", "spacing": d, "spacing_sd": d / sd1, "first_cells": n, "first_window": w1,
            "final_spacing": step * d, "final_cells": size, "tilts": tuple(float(x) for x in thetas),
            "coordinate_cuts": tuple(cut(x) * d for x in thetas), "one_jump": jump is not None,
            "rho_median": rho, "rho_worst_kept": rho_worst, "lower_mass": float(np.sum(np.exp(lower.remove[1]))),
            "roundoff_upper": up.roundoff, "lumped_upper": up.lumped,
            "inf_mass_upper_remove": lost_p, "inf_mass_upper_add": min(1.0, lost_q + float(q_hi[0]))}
    return upper, lower, info


# ------------------------------------------------------------ k of t: a lower pair
@functools.lru_cache(maxsize=16)
def label_sum_pair(sigma: float, t: int, k: int, spacing: float) -> tuple[SideAtoms, dict]:
    """A pair dominated by the true ``k``-of-``t`` pair: the law of ``sum_i c(Y_i)``.

    ``c(Y)`` is the index of the cell ``((j - 1/2) D, (j + 1/2) D]`` holding
    ``Y = exp(x/s^2 - 1/(2 s^2))`` (``D`` = ``spacing`` standard deviations of
    one coordinate).  The statistic is a function of the outputs, the same
    for every coordinate, so under each ``P_S`` (the record in the steps
    ``S``) its law is that of ``k`` marked and ``t - k`` unmarked
    coordinates, ``nu^{*k} * mu^{*(t-k)}`` (``nu`` the marked coordinate's
    cell law ``E[Y; cell]``), whatever ``S``: that is its law under the true
    ``P`` too; under ``Q`` it is ``mu^{*t}``.  For ``k << t`` the likelihood
    ratio of the true pair is close to a function of ``sum_i Y_i``, so this
    post-processing loses little; the sum of the outputs (the Gaussian lower
    bound) is better only when ``k`` is a large part of ``t``.

    All sums are on one grid (no re-gridding, so the statistic stays the
    same for every coordinate) and are cut at the window ``W``: as the labels
    are non-negative, whatever a partial sum loses lies above ``W`` in the
    total, so the entries below ``W`` are exact and those above are dropped
    (a sub-pair).  Round-off: entrywise brackets ``p - E_p <= P'``, ``q +
    E_q >= Q'`` (and the other way round for the add direction).
    """
    from pld._special import ndtr
    from pld.kernels import centred_cells

    a = 1.0 / sigma
    mu = -0.5 * a * a
    var = math.expm1(min(a * a, 700.0))
    sd1 = math.sqrt(var)
    d = spacing * sd1
    # the statistic's window under P: k marked (mean e^{a^2}, variance
    # e^{3a^2} - e^{2a^2}) and t - k unmarked coordinates, and one large one
    z = float(-_special.ndtri(_TAIL))
    var_nu = math.exp(min(3 * a * a, 700.0)) - math.exp(min(2 * a * a, 700.0))
    big = max(math.exp(min(a * a / 2 + z * a, 700.0)),
              math.exp(min(-a * a / 2 + float(-_special.ndtri(_TAIL / t)) * a, 700.0)))
    w = (t - k) + k * math.exp(min(a * a, 700.0)) + z * math.sqrt((t - k) * var + k * var_nu) + big
    n = int(math.ceil(w / d))
    if n > MAX_CELLS:
        raise ValueError(f"the label-sum window needs {n} cells (more than {MAX_CELLS})")
    # each label capped at n_c (the top cell holds every Y above it: still a function of
    # each output, and one coordinate reaches it with P-mass below _TAIL): a partial sum
    # of m labels then spans m n_c cells, not the whole window
    n_c = min(n, int(math.ceil(big / d)) + 1)
    q1, p1, eq1, ep1 = centred_cells(mu, a, d, n_c)
    if n_c < n:
        z_c = (math.log((n_c - 0.5) * d) - mu) / a
        q_top, p_top = float(ndtr(-z_c)), float(ndtr(a - z_c))
        # (the open cell in place of the last closed one: its mass from the tails, to
        # ndtr's relative accuracy)
        q1[-1], p1[-1] = q_top, p_top
        eq1[-1], ep1[-1] = 1e-13 * q_top + 1e-300, 1e-13 * p_top + 1e-300

    def power(x: np.ndarray, e: Err, m: int) -> _Level:
        # (every level kept up to W, the final window: as the labels are non-negative,
        # what a level loses past W lies past W in the total, so the entries below W are
        # exact; a level's own window could cut below W, and what it dropped would be
        # missing there, in p and q alike but from different sums)
        run = _Run(a, d, m, 0.0, 0.0, False, limit=w, exact_below_limit=True)
        return _sum_levels(run, _Level(x, None, e, _NO_ERR, 1, 1), 0.0)

    e_q1 = Err.of_entries(eq1)
    e_p1 = Err.of_entries(ep1)
    # the t - k unmarked labels beside the k marked (P) or k unmarked (Q) ones: Q's sum of t
    # is the same sum of t - k times that of k (entries below W exact in both)
    rest, (marked, unmarked) = in_parallel(lambda: power(q1, e_q1, t - k) if t > k else None,
                                           lambda: (power(p1, e_p1, k), power(q1, e_q1, k)))
    if rest is None:
        pk, ep = marked.q, marked.eq
        qk, eq = unmarked.q, unmarked.eq
    else:
        (pk, ep), (qk, eq) = convolve_errs([(marked.q, marked.eq, rest.q, rest.eq),
                                            (unmarked.q, unmarked.eq, rest.q, rest.eq)])
    size = n + 1
    q, p = _pad(qk[:size], size), _pad(pk[:size], size)
    p_lo, p_hi = np.maximum(p - ep.entry, 0.0), np.maximum(p, 0.0) + ep.entry
    q_lo, q_hi = np.maximum(q - eq.entry, 0.0), np.maximum(q, 0.0) + eq.entry
    info = {"label_spacing": d, "cells": size, "window": w, "roundoff_p": ep.entry, "roundoff_q": eq.entry,
            "mass_p": float(np.sum(p_lo)), "mass_q": float(np.sum(q_lo))}
    return bracket_atoms(p_lo, p_hi, q_lo, q_hi), info

