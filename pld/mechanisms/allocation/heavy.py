"""One round of random allocation at a small noise multiplier: a light part on a linear grid,
the heavy part of each coordinate on a geometric one.

Setting (see :mod:`pld.mechanisms.allocation.sums`): ``Lambda = S/t``, ``S = sum_i Y_i``, the
``Y_i`` iid under ``Q`` with ``log Y ~ N(-a^2/2, a^2)``, ``a = 1/sigma``; under the
remove direction's ``P`` one coordinate (the marked one) has ``log Y ~ N(a^2/2, a^2)``.
Below ``sigma ~ 0.7`` the tail of one coordinate that matters at ``delta = 1e-10``
reaches ``e^{a^2/2 + 6.4 a}`` (``e^{15}`` at ``sigma = 0.5``, ``e^{27}`` at ``0.3``)
while the bulk needs a spacing of a fraction of a standard deviation: no single
linear grid holds both.  The round is split by ``N``, the number of heavy
coordinates (``Y > B``), a function of the output, so the pair is the
disjoint union of its restrictions to ``{N = 0}``, ``{N = 1}``, ``{N = j}`` and a
sub-pair may be replaced by one that dominates it (upper side) or that it
dominates (lower side).  ``B`` is where ``t Q(Y > B) = kappa`` (``1e-4``), on a light
grid of at most ``2^20`` cells.

Upper side (dominating):

* ``{N <= 1}``: its Q-measure is ``R * L + t R * H`` (``L``, ``H``: one coordinate's
  measure on ``[0, B]`` and ``(B, W]``; ``R = L^{*(t-1)}``).  ``L`` is spread onto the
  linear grid and ``R`` is the tilted-run sum of :mod:`pld.mechanisms.allocation.sums` (light:
  every level cut at three caps ``B`` beyond its bulk, the cut bounded); ``H`` is
  spread onto a geometric grid ``B e^{i r}`` (mean-preserving on any grid) and
  ``R + H`` is spread onto a geometric grid of ``S`` directly, point by point
  (:func:`pld.kernels.allocation.sum_spread_geometric`).  All spreads: a pair
  larger in the convex order of ``Lambda`` under ``Q``, i.e. dominating (Blackwell);
  entrywise upper bounds on the Q-masses at fixed values keep it dominating.
* ``{N = j}``, ``2 <= j <= J``, remove direction: here a stochastic bound on the
  loss under ``P`` suffices (``E_P[(1 - c e^{-L})_+]`` is increasing in ``L``, and
  convolution keeps stochastic order, so a sub-pair whose P-measure of the loss is
  stochastically larger, with ``Q = P e^{-L}``, dominates in every composition).
  ``P(N = j) <= p_h C(t-1, j-1) q_h^{j-1} + C(t-1, j) q_h^j`` (``q_h = Q(Y > B)``,
  ``p_h = P(marked Y > B)``).  Given ``N = j``: the unmarked light coordinates are iid
  ``L / |L|`` and the marked one, if light, has the law ``y L(dy) / P(marked Y <= B)``,
  independent of them, so their sum is at most ``s_k`` except with probability ``tau_k``
  (the smallest of: the quantile read off the sum of their cell labels, with Hoeffding's
  bound for the part within the cells, :mod:`pld.mechanisms.allocation.light_quantiles`;
  Chernoff with the light sum's log-MGF bound, plus the marked one's where it is light;
  ``B`` plus the light sum's quantile), on a ladder of 27 ``tau_k``; each heavy coordinate
  is at most (stochastically) the size-biased heavy law ``P(marked Y in . | Y > B)``
  (size-biasing raises a law stochastically); two are added on the geometric grid (each
  rounded up to its cell's top, the sum up to the next grid point), a sum of ``j >= 3`` is at most ``j`` times their
  maximum, whose law is closed form.  The light part's law is bounded by that ladder
  of quantiles, so ``S <= s_k + (heavy sum)`` in law.
  ``{N > J}`` and the rest go to ``+inf``.
* add direction, ``{N >= 2}``: ``S >= B + s_k`` there but with probability
  ``tau_k`` (``s_k`` lower Chernoff quantiles of a sum of ``t - 1`` light ones; ``N``
  heavy ones exceed ``N - 1`` added light ones by ``B`` at least), and ``S >= 2B``
  always, so its Q-mass (at most ``C(t, 2) q_h^2``) is put at ``Lambda = (B +
  max(s_1, B))/t``, ``tau_{k-1}`` of it at ``(B + max(s_k, B))/t`` and the last ``tau`` of it
  at ``2B/t`` (the add loss ``-log Lambda`` rounded up).
* ``Y > W`` for some coordinate (``W``: the marked coordinate's ``1e-18`` quantile): ``+inf``.

The light sum's far upper tail: where its untilted round-off is lumped and
Chernoff's bound (with the carried log-MGF bounds) is smaller, the tail is
replaced by that bound, placed stochastically (:func:`_chernoff_tail`).

Lower side (dominated): reveal ``N`` and, on ``{N = 0}``, the sum of the cell
labels of the light coordinates (:mod:`pld.mechanisms.allocation.heavy_lower`, on tilted chains too);
on ``{N = 1}``, a geometric group of the light rest's label plus the heavy
coordinate's geometric cell (``Q(k, j) = t R_q(k) Q_j``, ``P(k, j) = R_q(k) M_j +
(t - 1) R_p(k) Q_j``, ``Q_j``, ``M_j`` the cell's mass and partial mean, all
bracketed for round-off); on ``{N = 2}``, a geometric group of the two heavy cells (the
light ones at their conditional mean); drop ``{N >= 3}``.  Any function of the outputs is a
post-processing, and each atom's likelihood ratio is its own ``P/Q``.

Checked against Monte Carlo (importance sampling of one large coordinate),
``t = 2`` quadrature and the true ``k``-of-``t`` pair in
``tests/test_allocation_tails.py``.

References: Feldman & Shenfeld, "Privacy amplification by random allocation"
(2025); Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from pld import _special
from pld._special import ndtr
from pld.engine.cache import in_background, in_parallel, side_pool
from pld.engine.mgf_bounds import _mgf_bound_from
from pld.mechanisms.allocation.coordinate import (
    SideAtoms,
    _coordinate_upper,
    _light,
    _regrid_to,
    _upper_runs,
    _with_inf,
)
from pld.mechanisms.allocation.heavy_lower import lower_side
from pld.mechanisms.allocation.levels import _TAIL, _U, _coarse, _tail
from pld.mechanisms.allocation.light_quantiles import label_quantiles

#: ``t Q(Y > B)`` at the light cut ``B`` (the share of rounds with a heavy coordinate)
KAPPA = 1e-4
#: most cells of the light grid (tilted runs need at most ``_TILT_CELLS``)
LIGHT_CELLS = 1 << 20
#: fewest cells of the light grid (its spacing is made finer than ``spacing`` to get them)
MIN_LIGHT_CELLS = 1 << 12
#: relative spacing of the geometric grids (heavy coordinate, and ``S`` above ``B``) at the default
#: ``spacing`` (``_RATIO_SPACING``); a finer round's by the square of its spacing's ratio to it (at
#: strict delta the heavy grid, more than the light one, sets both ends: sigma 0.963, 1-of-12428,
#: 4 epochs, delta 3e-12 at spacing 0.01: 2.37x its target with this ratio, 1.11x with half, 0.95x
#: with a quarter)
RATIO = 2e-3
_RATIO_SPACING = 0.02
#: ``{N = j}`` for ``2 <= j <= J`` bounded by the maximum, beyond at ``+inf``
J = 4
#: the ``fine`` light grid: at most this many medians of one coordinate, within ``FINE_CELLS`` cells
FINE_MEDIANS = 0.05
FINE_CELLS = 1 << 18
#: an add direction with more than this at ``+inf`` (few steps: whole rounds in the light
#: grid's first cell) is taken from one Gaussian step instead (no amplification)
GAUSSIAN_ADD_FLOOR = 1e-4
#: the loss grid of that Gaussian pair
_GAUSS_STEP = 1e-3
#: groups of the lumps' heavy parts
_LUMP_GROUPS = 8
#: quantiles of the light sum (normalised tail probabilities) in the ``{N = j}`` bound: a ladder
#: of values with ``P(sum > s_k) <= tau_k`` (the label quantiles, or Chernoff's where smaller)
_TAUS = tuple(round(0.95 - 0.05 * i, 2) for i in range(19)) + (0.02, 1e-2, 3e-3, 1e-3, 1e-4, 1e-5, 1e-6, 1e-8)
#: lower quantiles of the light sum (``P(sum < s_k) <= tau_k``) in the add direction's ``{N >= 2}`` bound
_LOWER_TAUS = (1e-8, 1e-16, 1e-32, 1e-64, 1e-128, 1e-256, 1e-300)
#: the heavy grid reaches the marked coordinate's quantile of this tail
_TOP_TAIL = 1e-18
#: a round built for a deeper tail (``levels._tail`` below ``_TAIL``: RandomAllocation.deeper) takes
#: these quantiles too, and its heavy grid reaches its tail times ``_DEEP_TOP``: the light sum's
#: mass past the last quantile and a coordinate past the heavy grid go to +inf (~1e-16 a round)
_DEEP_TAUS = (1e-10, 1e-12, 1e-14, 1e-16, 1e-18, 1e-20, 1e-22, 1e-24)
_DEEP_TOP = 1e-4


def light_cut(sigma: float, t: int, spacing: float, kappa: float = KAPPA, fine: bool = False) -> tuple[float, int]:
    """``(d, n_L)``: the light grid's spacing and cells (``B = n_L d``, where ``t Q(Y > B) = kappa``):
    ``spacing`` standard deviations of one coordinate, or finer where that gives fewer than
    ``MIN_LIGHT_CELLS``; with ``fine``, at most ``FINE_MEDIANS`` medians of a coordinate where
    that fits in ``FINE_CELLS`` cells (at small sigma the standard deviation is many medians, and
    a grid in standard deviations spreads whole short rounds to ``Lambda = 0``)."""
    a = 1.0 / sigma
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    d = spacing * sd1
    z = float(-_special.ndtri(kappa / t))
    want = math.exp(-0.5 * a * a + a * z)
    if want / d < MIN_LIGHT_CELLS:
        # (few steps: the cut is low, and a finer grid resolves the bulk of a coordinate,
        # which the add direction of a short round needs, for next to nothing)
        d = want / MIN_LIGHT_CELLS
    if fine:
        d_med = FINE_MEDIANS * math.exp(-0.5 * a * a)
        if d_med < d and want / d_med <= FINE_CELLS:
            d = d_med
    return d, int(min(LIGHT_CELLS, max(64, math.ceil(want / d))))


def fine_resolves(sigma: float, t: int, spacing: float, kappa: float = KAPPA) -> bool:
    """Whether the ``fine`` light grid is worth building for a round whose add direction fell back
    to one Gaussian step: every coordinate in its first cell (spread to ``Lambda = 0``) has
    probability at most ``1e-6`` there (sizing only; a short round at a very small sigma would
    need a geometric light grid instead, which is not built)."""
    a = 1.0 / sigma
    d, _ = light_cut(sigma, t, spacing, kappa, fine=True)
    return t * math.log(max(float(ndtr((math.log(d) + 0.5 * a * a) / a)), 1e-300)) <= math.log(1e-6)


def fine_coarse_factor(sigma: float) -> float:
    """The re-grid scale of the ``fine`` variant, relative to standard deviations: a coordinate's
    robust spread ``e^{-a^2/2}(e^a - 1)`` (median to its 84% quantile) over its standard deviation."""
    a = 1.0 / sigma
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    return min(1.0, math.exp(-0.5 * a * a) * math.expm1(a) / sd1)


def _fsum(x: np.ndarray) -> float:
    return math.fsum(x.tolist()) * (1.0 + 1e-12)


def _atoms(parts_q: list, t: int, extra_remove: tuple, extra_add: tuple, inf_remove: float,
           inf_add: float) -> tuple[SideAtoms, float]:
    """Upper atoms: ``(values s, Q-masses)`` parts (``Lambda = s/t``; P = Lambda Q), extra
    ``(loss, P-mass)`` atoms per direction, and the masses at ``+inf``; and the Q-mass at
    ``Lambda = 0`` (an add loss of ``+inf``)."""
    s = np.concatenate([p[0] for p in parts_q])
    q = np.concatenate([p[1] for p in parts_q])
    zero = float(np.sum(q[s <= 0]))  # (Lambda = 0: the add direction's +inf)
    sel = (s > 0) & (q > 0)
    lam = np.log(s[sel] / t)
    lq = np.log(q[sel])
    el, em = extra_remove
    ok = em > 0
    loss = np.concatenate((lam, el[ok]))
    lp = np.concatenate((lq + lam, np.log(em[ok])))
    remove = _with_inf(loss, lp, lp - loss, min(1.0, inf_remove))
    el, em = extra_add
    ok = em > 0
    loss = np.concatenate((-lam, el[ok]))
    lp = np.concatenate((lq, np.log(em[ok])))
    add = _with_inf(loss, lp, lp - loss, min(1.0, inf_add + zero))
    return SideAtoms(remove, add), zero


def _chernoff_tail(r: np.ndarray, up, df: float, m: int) -> tuple[list, list]:
    """The light sum's lumps, its upper tail replaced by Chernoff's bound where that is smaller.

    ``r`` (entrywise bounds or estimates on ``k df``) and ``up.lumps`` (round-off
    masses of blocks of entries, ``(vmin, vmax, dq, dp)``, values over ``m``; the
    add direction's own in ``up.lumps_add``)
    bound the light sum's measure; where the untilted round-off is lumped far in
    its upper tail, ``Q(R >= x) <= e^{L(theta) - theta x}`` (``L`` the log-MGF bound
    of the uncut sum, ``theta > 0``) can be far smaller.  From the first block
    edge ``x*`` where the bound is below the lumps above it, the entries above
    ``x*`` are set to zero in place and the lumps above it dropped; the tail
    measure on ``[x*, top]`` is bounded stochastically by lumps at the block
    edges ``x_i`` with masses ``T_i - T_{i+1}`` (``T_i`` the bound at ``x_i``, made
    non-increasing; the last takes what is left), each over ``[x_i, x_{i+1}]``
    as a round-off lump is: every tail function of the true measure is then
    below theirs.  What lies beyond the window is the cut part, accounted at
    ``+inf`` already.

    That stochastic bound serves the remove direction, whose loss grows with
    the sum.  The add direction's loss falls with it: a tail bound says
    nothing about where in ``[x*, top]`` the true mass sits, so there the
    whole bound ``T_0`` is one lump over ``[x*, top]``, which the add
    direction places at its lower edge.  Returns ``(lumps, add_lumps)``.
    """
    lumps = sorted(up.lumps, key=lambda x: x[0])
    lumps_add = sorted(up.lumps_add, key=lambda x: x[0])
    pos = up.base_chern > 0
    if not lumps or not np.any(pos):
        return lumps, lumps_add
    s = np.arange(r.size) * df

    def bound(x: float) -> float:
        return min(1.0, math.exp(min(float(np.min(up.base_lmgf[pos] - up.base_chern[pos] * x)), 0.0)))

    held = 0.0
    cut = None
    for i in range(len(lumps) - 1, -1, -1):
        held += lumps[i][2]
        x = lumps[i][0] * m
        k = int(math.ceil(x / df - 1e-9))
        # (only where the bound is below the round-off alone: the entries' own estimates,
        # placed where they are, are tighter than a tail bound placed at block edges)
        if k < r.size and bound(x) < held:
            cut = i
    if cut is None:
        return lumps, lumps_add
    x_star = lumps[cut][0] * m
    k = int(math.ceil(x_star / df - 1e-9))
    top = s[-1]
    if k >= r.size or x_star >= top:
        return lumps, lumps_add
    r[k:] = 0.0
    kept = [lump for lump in lumps if lump[0] * m < x_star]
    edges = [x_star] + [lump[0] * m for lump in lumps[cut + 1:] if x_star < lump[0] * m < top] + [top]
    tails = [bound(x) for x in edges[:-1]]
    tails = list(np.minimum.accumulate(np.array(tails)))
    add = [lump for lump in lumps_add if lump[0] * m < x_star]
    for i in range(len(tails)):
        mass = tails[i] - (tails[i + 1] if i + 1 < len(tails) else 0.0)
        if mass > 0:
            kept.append((edges[i] / m, edges[i + 1] / m, mass * (1 + 1e-12), 0.0))
    if tails and tails[0] > 0:
        add.append((x_star / m, top / m, tails[0] * (1 + 1e-12), 0.0))
    return kept, add


def _gaussian_add_atoms(mu: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A dominating pair of the add direction from one Gaussian step of ``mu = 1/sigma``.

    The add pair is ``(Q, P)`` with ``P = (1/t) sum_i P_i``; the hockey-stick divergence
    is jointly convex, so ``H_c(Q || P) <= (1/t) sum_i H_c(Q || P_i)``, and each
    ``(Q, P_i)`` is the Gaussian mechanism's pair (swapped; it is symmetric): its
    loss under the first law is ``N(mu^2/2, mu^2)``.  That law is rounded up to a
    grid of ``_GAUSS_STEP`` (a stochastically larger loss, ``Q = P e^{-loss}``), its
    tail beyond 12 standard deviations at ``+inf``, the part below moved up to the
    first point.
    """
    lo, hi = mu * mu / 2 - 12.0 * mu, mu * mu / 2 + 12.0 * mu
    edges = np.linspace(lo, hi, int(math.ceil((hi - lo) / _GAUSS_STEP)) + 1)
    z = (edges - mu * mu / 2) / mu
    cdf = ndtr(z)
    sf = ndtr(-z)
    # cell masses from whichever tail is small, each rounded up; the first cell takes all below
    mass = np.where(z[1:] <= 0, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:])
    mass = np.maximum(mass, 0.0) * (1 + 1e-12) + 1e-15 * np.maximum(np.minimum(cdf[1:], sf[:-1]), 0.0)
    mass[0] += float(cdf[0]) * (1 + 1e-12)
    loss = edges[1:]
    ok = mass > 0
    lp = np.log(mass[ok])
    return _with_inf(loss[ok], lp, lp - loss[ok], float(sf[-1]) * (1 + 1e-12) + 1e-300)


def heavy_laws(sigma: float, t: int, spacing: float, kappa: float = KAPPA,
               fine: bool = False) -> tuple[SideAtoms, SideAtoms, dict]:
    """Upper (dominating) and lower (dominated) pairs of one round (``t >= 2``); see the module.

    ``kappa``: ``t Q(Y > B)`` at the light cut ``B`` (a smaller one puts fewer rounds in the
    stochastic bounds of ``{N >= 2}`` and more of each coordinate on the light grid).
    ``fine``: the light grid in medians of a coordinate and its sums re-gridded on the scale of
    a coordinate's robust spread (:func:`light_cut`, :func:`fine_coarse_factor`): slower, and
    what resolves the add direction of a short round at small sigma (whose mass at
    ``Lambda = 0`` otherwise sends it to one Gaussian step).  Any grid gives a certified
    pair; only the width changes."""
    from pld.kernels import spread_on

    if t < 2:
        raise ValueError("heavy_laws needs t >= 2")
    a = 1.0 / sigma
    mu = -0.5 * a * a
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    d, n_l = light_cut(sigma, t, spacing, kappa, fine)
    big_b = n_l * d
    coarse = _coarse.get() * spacing * (fine_coarse_factor(sigma) if fine else 1.0)
    z_b = (math.log(big_b) - mu) / a
    q_h = float(ndtr(-z_b)) * (1 + 1e-12)
    p_h = float(ndtr(a - z_b)) * (1 + 1e-12)
    ratio = RATIO * min(1.0, spacing / _RATIO_SPACING) ** 2
    lr = math.log1p(ratio)
    deep = _tail.get() < _TAIL
    top_tail = min(_TOP_TAIL, _tail.get() * _DEEP_TOP) if deep else _TOP_TAIL
    taus = _TAUS + _DEEP_TAUS if deep else _TAUS
    top = math.exp(-mu + a * float(-_special.ndtri(top_tail)))  # (the marked law's quantile: log-mean +a^2/2)
    n_h = max(2, int(math.ceil(math.log(top / big_b) / lr)) + 1)
    hv = big_b * np.exp(np.arange(n_h + 1) * lr)
    w_top = float(hv[-1])
    z_w = (math.log(w_top) - mu) / a
    tail_q = float(ndtr(-z_w)) * (1 + 1e-12) + 1e-300
    tail_p = float(ndtr(a - z_w)) * (1 + 1e-12) + 1e-300

    # tails of one heavy coordinate given Y > B: unmarked (the Q-law) and marked (size-biased)
    z_hv = (np.log(hv) - mu) / a
    tail_q_h = np.minimum(ndtr(-z_hv) / float(ndtr(-z_b)), 1.0)
    tail_sb = np.minimum(ndtr(a - z_hv) / float(ndtr(a - z_b)), 1.0)
    tail_q_h[0] = tail_sb[0] = 1.0
    # (the dominated side, and the sums of two heavy coordinates for {N = 2}, share nothing
    # with the dominating side's light sums but these inputs)
    two_heavy = [in_background(functools.partial(_two_heavy, x, tail_q_h, hv, big_b, lr))
                 for x in (tail_q_h, tail_sb)]
    lower_part = in_background(functools.partial(lower_side, mu, a, d, n_l, t, coarse, big_b, w_top, lr))
    # (the labels' halvings round up: at a quarter of the sums' coarsening they shift the
    # quantiles by a few hundredths of a standard deviation)
    label_ladders = in_background(functools.partial(_label_ladders, mu, a, d, n_l, t - 1, np.array(taus),
                                                    0.25 * coarse))

    # ---------------------------------------------------------------- upper: R = L^{*(t-1)}
    coord = _coordinate_upper(mu, a, d, n_l, t)
    xs_l, (tot_q, tot_p, _, _), chern, lmgf = coord
    coord = (xs_l, (tot_q, tot_p, 0.0, 0.0), chern, lmgf)  # (the part above B is H, counted below)
    g_l = np.arange(n_l + 1) * d
    with np.errstate(divide="ignore"):
        lx_l = np.log(xs_l)
    bulk = int(min(n_l, (10.0 * (1.0 + sd1)) / d))

    def fits(theta: float, nb: int) -> bool:
        # the tilted light law cut at nb stays a bulk: its mass past the valley (where it
        # climbs back towards B) at most e^-5 of the mass before it
        e = lx_l[: nb + 1] + theta * g_l[: nb + 1]
        k0 = int(np.argmax(e[: bulk + 1]))
        valley = k0 + int(np.argmin(e[k0:]))
        if valley >= e.size - 1:
            return True
        with np.errstate(divide="ignore"):
            return float(np.logaddexp.reduce(e[valley:])) <= float(np.logaddexp.reduce(e[:valley])) - 5.0

    up = _upper_runs(a, d, n_l, t, coarse, lambda th: n_l, lambda k: coord if k == n_l else _light(coord, k),
                     fixed_cut=n_l, m=t - 1, fits=fits, cap=big_b)
    df = up.step * d
    r = np.maximum(up.q_hi, 0.0)
    lumps, add_lumps = _chernoff_tail(r, up, df, t - 1)

    # ---------------------------------------------------------------- upper: {N <= 1}
    kern = _regrid_to(xs_l, d, df)
    q_lin = np.convolve(r, kern) * (1.0 + 2.0 * (min(r.size, kern.size) + 4) * _U)
    s_lin = np.arange(q_lin.size) * df
    hq = spread_on(mu, a, hv)
    # R coarsened (a spread) to a quarter of the output grid's spacing at the bulk of S
    mult = max(1, int(ratio * (big_b + 0.5 * (t - 1)) / (4.0 * df)))
    r2 = _regrid_to(r, df, mult * df) if mult > 1 else r
    dr = mult * df
    n_out = int(math.ceil(math.log((r2.size * dr + w_top) / big_b) / lr)) + 3
    g_out, q_geo, over = _spread_geometric(np.ascontiguousarray(r2), dr, hv, hq, big_b, lr, n_out)
    q_geo = q_geo * (t * (1.0 + 2.0 * (r2.size * hv.size + 8) * _U))

    l_tot, l_mean = _fsum(xs_l), _fsum(g_l * xs_l)
    h_tot, h_mean = _fsum(hq), _fsum(hv * hq)
    k_tot = l_tot + t * h_tot
    k_mean = l_mean + t * h_mean
    # R's cut parts times the last coordinate (P: the mean of S/t over them), and sums beyond the grid
    inf_q = up.lost_q * k_tot + t * over * (1 + 1e-12)
    inf_p = ((t - 1) * up.lost_p * k_tot + up.lost_q * k_mean) / t + over * t * (r2.size * dr + w_top) / t
    # R's lumped round-off: a Q-mass dq at R-values in [vmin, vmax] (t - 1), with each part of
    # the kernel; placed at the largest loss it can take (remove) and the smallest (add), but
    # with the kernel's own law: the light part split at its 1 - 1e-6 quantile y1, the heavy
    # part on the heavy grid (grouped lumps)
    y1 = int(np.searchsorted(np.cumsum(xs_l), (1.0 - 1e-6) * l_tot))
    y1 = min(n_l, y1 + 1)
    l_lo, lm_lo = _fsum(xs_l[:y1 + 1]), _fsum(g_l[:y1 + 1] * xs_l[:y1 + 1])
    l_hi, lm_hi = _fsum(xs_l[y1 + 1:]), _fsum(g_l[y1 + 1:] * xs_l[y1 + 1:])
    ex_r: list[tuple[float, float]] = []
    ex_a: list[tuple[float, float]] = []
    heavy_groups: list[list[float]] = []  # ([Q-mass, largest R-value]) of consecutive lumps
    for _, vmax, dq, _ in lumps:
        rmax = vmax * (t - 1)
        ex_r.append((math.log(max(rmax + y1 * d, 1e-300) / t), dq * (rmax * l_lo + lm_lo) / t))
        ex_r.append((math.log((rmax + big_b) / t), dq * (rmax * l_hi + lm_hi) / t))
        heavy_groups.append([dq, rmax])
    for vmin, _, dq, _ in add_lumps:  # (the add direction's own: see _chernoff_tail)
        rmin = vmin * (t - 1)
        if rmin > 0:
            ex_a.append((-math.log(rmin / t), dq * l_tot))
        else:
            inf_q += dq * l_tot
        ex_a.append((-math.log((rmin + big_b) / t), dq * t * h_tot))
    # the heavy part of the lumps, in at most _LUMP_GROUPS groups of consecutive lumps, each
    # on the heavy grid at its largest R-value
    heavy_groups.sort(key=lambda x: x[1])
    hl_loss, hl_mass = [np.zeros(0)], [np.zeros(0)]
    for grp in np.array_split(np.array(heavy_groups).reshape(-1, 2), _LUMP_GROUPS):
        if grp.size and float(np.sum(grp[:, 0])) > 0:
            gq, gmax = math.fsum(grp[:, 0].tolist()) * (1 + 1e-12), float(np.max(grp[:, 1]))
            hl_loss.append(np.log((gmax + hv) / t))
            hl_mass.append(gq * hq * (gmax + hv) * (1 + 1e-12))
    heavy_lumps = (np.concatenate(hl_loss), np.concatenate(hl_mass))
    # a coordinate beyond the heavy grid
    inf_p += tail_p + (t - 1) * tail_q
    inf_q += t * tail_q

    # ---------------------------------------------------------------- upper: {N = j}, 2 <= j <= J
    # the light sum's law, normalised by the all-light probability (1 - q_h)^(t-1), is
    # bounded stochastically by Chernoff quantiles: P(sum > s_k) <= tau_k
    pos = up.base_chern > 0
    log_norm = (t - 1) * math.log1p(-min(q_h, 1.0 - 1e-16)) * (1 + 1e-12)  # (log Q(all t - 1 light), rounded down)
    s_up = np.array([max(0.0, float(np.min((up.base_lmgf[pos] - math.log(tau) - log_norm) / up.base_chern[pos])))
                     for tau in taus])
    w_up = -np.diff(np.concatenate(([1.0], np.array(taus))))  # (mass between consecutive quantiles)
    # with the marked coordinate light as well: its law y L(dy) / P(marked light) on [0, B],
    # independent of the rest, so the ladder of the light sum plus it (not plus B): its
    # log-MGF from the spread coordinate (y e^{theta y} is convex, a mean-preserving spread
    # raises its mean) over P(marked light) >= 1 - p_h
    with np.errstate(divide="ignore"):
        lm_marked = (_mgf_bound_from(np.log(xs_l * g_l), g_l, d, up.base_chern[pos])
                     - math.log1p(-min(p_h, 1.0 - 1e-16)) * (1 + 1e-12))
    s_up_marked = np.array([max(0.0, float(np.min((up.base_lmgf[pos] + lm_marked - math.log(tau) - log_norm)
                                                     / up.base_chern[pos]))) for tau in taus])
    # the label quantiles: about 0.1 standard deviation above the light sum's, where Chernoff's
    # are 0.5-1.2 above in the bulk (both valid: the smaller of two quantiles is one)
    by_labels, by_labels_marked = label_ladders.result()
    s_up, s_up_marked = np.minimum(s_up, by_labels), np.minimum(s_up_marked, by_labels_marked)
    rem_loss, rem_mass = [], []
    for j in range(2, J + 1):
        # marked heavy (with j - 1 unmarked heavy ones), or marked light (with j unmarked heavy
        # ones; the marked one then joins the light part's ladder)
        cases = ((p_h * math.comb(t - 1, j - 1) * q_h ** (j - 1), s_up, 1, j - 1),
                 (math.comb(t - 1, j) * q_h ** j, np.minimum(s_up_marked, big_b + s_up), 0, j))
        for m_j, ladder, n_sb, n_q in cases:
            m_j *= 1 + 1e-12
            if m_j <= 0.0:
                continue
            with np.errstate(divide="ignore"):
                # P(max > x) for n_sb size-biased and n_q unmarked heavy coordinates
                log_below = n_q * np.log1p(-tail_q_h)
                if n_sb:
                    log_below = log_below + n_sb * np.log1p(-tail_sb)
                u_j = -np.expm1(log_below)
            u_j[0] = 1.0
            if j == 2:
                # two heavy ones: their sum itself (each rounded up to its cell's top, the sum
                # up to the next point of a geometric grid), not twice the larger
                heavy_v, heavy_m, beyond = two_heavy[n_sb].result()
            else:
                heavy_v = j * hv[1:]
                heavy_m = np.maximum(u_j[:-1] - u_j[1:], 0.0) + 1e-13 * u_j[:-1]
                beyond = float(u_j[-1])
            for s_k, w_k in zip(ladder, w_up):
                rem_loss.append(np.log((s_k + heavy_v) / t))
                rem_mass.append(m_j * w_k * heavy_m * (1 + 1e-12))
            inf_p += m_j * (beyond + taus[-1]) * (1 + 1e-12)
    inf_p += (p_h * math.comb(t - 1, J) * q_h ** J + math.comb(t - 1, J + 1) * q_h ** (J + 1)) * (1 + 1e-12)
    # add direction, {N >= 2}: S >= N B + (the other t - N light ones), at least B more than a
    # sum of t - 1 light ones (add N - 1 light draws, each <= B) and at least 2B; that sum is
    # at least s_k but with probability tau_k (Chernoff, negative parameters), on a ladder of
    # tau_k: each atom takes the previous tau's share, the last tau's share goes to 2B (one atom
    # there with 1e-8 of the share, far out, set the add direction's tilt: sigma 5.9, 1-of-4370,
    # a grid of 165k points where the single grid's took 28k)
    neg = up.base_chern < 0
    n2_q = math.comb(t, 2) * q_h * q_h * (1 + 1e-12)
    share = 1.0
    for tau in _LOWER_TAUS:
        s_k = float(np.max((up.base_lmgf[neg] - math.log(tau) - log_norm) / up.base_chern[neg]))
        ex_a.append((-math.log((max(s_k, big_b) + big_b) / t), n2_q * share))
        share = tau
    ex_a.append((-math.log(2.0 * big_b / t), n2_q * share))

    er = np.array([x for x, _ in ex_r]), np.array([m for _, m in ex_r])
    extra_remove = (np.concatenate([er[0], heavy_lumps[0]] + rem_loss),
                    np.concatenate([er[1], heavy_lumps[1]] + rem_mass))
    ea = np.array([x for x, _ in ex_a]), np.array([m for _, m in ex_a])
    upper, zero = _atoms([(s_lin, q_lin), (g_out, q_geo)], t, extra_remove, ea, inf_p, inf_q)
    add_floor = min(1.0, inf_q + zero)
    gaussian_add = add_floor > GAUSSIAN_ADD_FLOOR
    if gaussian_add:
        # few steps: the light grid sends whole rounds to Lambda = 0 (an add loss of +inf);
        # the add direction is then taken from one Gaussian step instead, which dominates it
        upper = SideAtoms(upper.remove, _gaussian_add_atoms(a))

    lower, rows, dropped = lower_part.result()

    info = {"construction": "split", "spacing": d, "spacing_sd": d / sd1, "first_cells": n_l, "first_window": w_top,
            "light_cut": big_b, "kappa": kappa, "fine": fine, "heavy_points": int(hv.size), "ratio": ratio,
            "final_spacing": df, "final_cells": int(up.size), "tilts": tuple(float(x) for x in up.thetas),
            "one_jump": True, "heavy": True, "light_sum_quantiles": tuple(float(x) for x in s_up),
            "lower_cells": rows,
            "lower_mass": float(np.sum(np.exp(lower.remove[1]))), "roundoff_upper": up.roundoff,
            "lumped_upper": up.lumped, "dropped_lower": dropped,
            "inf_mass_upper_remove": min(1.0, inf_p), "inf_mass_upper_add": add_floor,
            "gaussian_add": gaussian_add}
    return upper, lower, info


def _spread_geometric(r: np.ndarray, dr: float, hv: np.ndarray, hm: np.ndarray, g0: float, lr: float,
                      n_out: int) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`pld.kernels.sum_spread_geometric` over its whole output, as two ranges of
    about as many pairs each computed on two threads (the same entries bit for bit: the
    ranges are disjoint, and each entry takes the same terms in the same order)."""
    from pld.kernels import sum_spread_geometric

    nz = np.flatnonzero(r)
    r = r[: nz[-1] + 1] if nz.size else r[:0]  # (trailing zeros add nothing: not scanned)
    if side_pool() is None or n_out < 4:
        return sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, 0, n_out)
    # pairs (j, k) whose sum is at most g_m, for m on a bisection: about half of them below
    hj = hv[hm > 0]
    half = 0.5 * hj.size * r.size
    lo, hi = 1, n_out - 1
    while hi - lo > 1:
        m = (lo + hi) // 2
        below = np.clip(np.floor((g0 * math.exp(m * lr) - hj) / dr) + 1.0, 0.0, r.size).sum()
        lo, hi = (m, hi) if below < half else (lo, m)
    first, second = in_parallel(lambda: sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, 0, hi),
                                lambda: sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, hi, n_out))
    return first[0], first[1] + second[1], second[2]


def _label_ladders(mu: float, a: float, d: float, n_l: int, m: int, taus: np.ndarray,
                   coarse: float) -> tuple[np.ndarray, np.ndarray]:
    """The light sum's upper quantiles from its labels (:mod:`pld.mechanisms.allocation.light_quantiles`):
    ``m`` light coordinates, and ``m`` plus the marked one (light)."""
    from pld.kernels import cells_on

    cq, ceq, cp, cep = cells_on(mu, a, np.arange(n_l + 1) * d)
    return label_quantiles(cq, ceq, cp, cep, d, m, taus, coarse)


def _two_heavy(tail_a: np.ndarray, tail_q: np.ndarray, hv: np.ndarray, big_b: float,
               lr: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Two heavy coordinates' sum (tails ``tail_a``, ``tail_q`` on the heavy grid ``hv``), each
    rounded up to its cell's top and the sum up to the next point of a geometric grid from
    ``2 B`` with log-ratio ``lr``: ``(grid, masses, mass beyond it)``, a stochastically larger law."""
    from pld.kernels import sum_round_up

    cells = [np.maximum(x[:-1] - x[1:], 0.0) + 1e-13 * x[:-1] for x in (tail_a, tail_q)]
    g2 = 2.0 * big_b * np.exp(np.arange(int(math.ceil(math.log(hv[-1] / big_b) / lr)) + 3) * lr)
    two, over2 = sum_round_up(cells[0], cells[1], hv, g2)
    return g2, two, float(tail_a[-1] + tail_q[-1]) + over2

