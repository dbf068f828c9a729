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
from dataclasses import dataclass

import numpy as np

from pld import _fft, _special
from pld._special import ndtr
from pld.kernels import l1_l2_norms

#: tail probability left beyond the window (sizing only: what is left is bounded)
_TAIL = 1e-14
_U = 2.0 ** -53
#: re-grid a level while its spacing stays below this fraction of the first
#: grid's spacing in standard deviations (of the partial sum, of one coordinate)
_COARSE_RATIO = 0.5
#: most cells of the first grid
MAX_CELLS = 1 << 22
#: relative round-off an entry may carry before a further tilt is tried for it
_REL_OK = 1e-4
#: untilted mass below which a tail needs no further tilt
_NEGLIGIBLE = 1e-20
#: most tilted runs per tail
_MAX_TILTS = 4
#: each tilt's step beyond the last resolved entry, relative to that entry's decay rate
_TILT_STRIDE = 2.5


#: a light part's level reaches this many coordinates' caps beyond its bulk
_CAP_JUMPS = 5.0


def _bulk(a: float, m: int, t: int) -> float:
    """The bulk of a sum of ``m`` of the ``t`` coordinates (:func:`window` without the tail)."""
    z_m = float(-_special.ndtri(_TAIL * m / t))
    return m + z_m * math.sqrt(m * math.expm1(min(a * a, 700.0)))


def window(a: float, m: int, t: int | None = None) -> float:
    """Right end of the window of a sum of ``m`` of the ``t`` coordinates:
    its bulk and the tail of one large ``Y`` (sizing only).  The round has
    ``t / m`` such partial sums, each cut at its window, so the bulk is taken
    to the ``_TAIL m / t`` quantile."""
    t = m if t is None else t
    z = float(-_special.ndtri(_TAIL))
    z_m = float(-_special.ndtri(_TAIL * m / t))
    z_t = float(-_special.ndtri(_TAIL / t))
    var = math.expm1(min(a * a, 700.0))
    bulk = m + z_m * math.sqrt(m * var)
    # one large coordinate: the marked one (log Y ~ N(a^2/2, a^2) under P) or
    # any of the t under Q (two large ones are far rarer)
    tail = max(math.exp(min(a * a / 2 + z * a, 700.0)), math.exp(min(-a * a / 2 + z_t * a, 700.0)))
    return bulk + tail


# ------------------------------------------------------------ one run
@dataclass(eq=False)
class _Level:
    """A partial sum of ``m`` coordinates on the grid ``k (step d)``, tilted.

    ``q`` (and ``p`` on the lower side; the upper side's P-law is ``s/m``
    times its Q-law) are the exact laws times ``e^{theta s - m c0}``, to
    within l2 bounds ``eq``, ``ep``.  ``lost_q``, ``lost_p``: upper bounds on
    the untilted masses cut so far (upper side).
    """

    q: np.ndarray
    p: np.ndarray | None
    eq: float
    ep: float
    m: int
    step: int
    lost_q: float = 0.0
    lost_p: float = 0.0
    #: upper side: bounds on the log-MGF of the exact (untilted, uncut) level at ``_Run.chern``
    lmgf: np.ndarray | None = None
    #: merged lower side: ``dev[k]`` bounds ``|m_k - v_k| Q_k`` (``m_k`` the atom's
    #: conditional mean, ``v_k`` its value), within l2 ``edev``
    dev: np.ndarray | None = None
    edev: float = 0.0
    #: merged lower side before any dev array: ``|m_k - v_k| <= rho_s v_k`` for every atom
    rho_s: float = 0.0


def _dev(lv: _Level, d: float) -> tuple[np.ndarray, float]:
    """The level's deviation bounds as an array (from ``rho_s`` if it has none)."""
    if lv.dev is not None:
        return lv.dev, lv.edev
    v = np.arange(lv.q.size) * (lv.step * d)
    # (|m - v| Q <= rho_s v Q, and Q <= |q| + eq entrywise)
    return lv.rho_s * v * (np.abs(lv.q) + lv.eq) * (1.0 + 1e-12), 0.0


@dataclass(frozen=True)
class _Run:
    """What a run needs besides its levels: the tilt and the untilted totals."""

    a: float
    d: float
    t: int
    theta: float
    c0: float
    upper: bool
    #: untilted total Q- and P-mass of one coordinate's (upper) measure, cut part included
    tot_q: float = 1.0
    tot_p: float = 1.0
    #: Chernoff parameters of the cut-mass bounds (upper side)
    chern: np.ndarray | None = None
    #: lower side re-gridded by conditional-mean merges (``merge_half``) instead of the half-half map
    merge: bool = False
    #: a run for the lower tail only: every level cut at this value (as the
    #: coordinates are non-negative, what is cut lands above it, so the
    #: entries below it are exact and nothing cut needs accounting)
    limit: float = math.inf
    #: every coordinate is at most this (a light part: :mod:`pld._allocation_heavy`); a
    #: level of ``m`` is then cut at ``min(m cap, bulk + _CAP_JUMPS cap)`` (sizing only)
    cap: float = math.inf

    def log_w(self, m: int, step: int, k: np.ndarray) -> np.ndarray:
        """log of the untilting factor of entries ``k`` of a level."""
        return m * self.c0 - self.theta * (k * (step * self.d))

    def tq(self, m: int) -> float:
        return math.exp(m * math.log(self.tot_q))

    def tp(self, m: int) -> float:
        return self.tot_p * math.exp((m - 1) * math.log(self.tot_q))


def _conv(a: np.ndarray, ea: float, b: np.ndarray, eb: float) -> tuple[np.ndarray, float]:
    """Convolution with an l2 bound on the error of the result (Young's inequality)."""
    c, fft_err = _fft.convolve(a, b)
    a1 = float(l1_l2_norms(a)[0]) + math.sqrt(a.size) * ea
    b1 = float(l1_l2_norms(b)[0]) + math.sqrt(b.size) * eb
    return c, (ea * b1 + eb * a1 + fft_err) * (1.0 + 1e-9)


def _regrid(x: np.ndarray, th: float) -> np.ndarray:
    """An odd atom ``2j+1`` sent half to ``2j`` and half to ``2j+2`` (tilted by ``th`` per fine cell)."""
    n = x.size
    out = np.zeros((n + 1) // 2 + 1)
    out[: (n + 1) // 2] += x[0::2]
    odd = x[1::2]
    out[: odd.size] += (0.5 * math.exp(-th)) * odd
    out[1: odd.size + 1] += (0.5 * math.exp(th)) * odd
    return out


def _regrid_p(x: np.ndarray, th: float) -> np.ndarray:
    """The P-side of the spread: the odd atom ``2j+1`` sends ``(j+1)/(2j+1)`` of its
    P-mass up and ``j/(2j+1)`` down (its value ratio), tilted by ``th`` per fine cell."""
    n = x.size
    out = np.zeros((n + 1) // 2 + 1)
    out[: (n + 1) // 2] += x[0::2]
    odd = x[1::2]
    j = np.arange(odd.size, dtype=float)
    up = odd * ((j + 1.0) / (2.0 * j + 1.0))
    out[: odd.size] += math.exp(-th) * (odd - up)
    out[1: odd.size + 1] += math.exp(th) * up
    return out


def _coarsen(run: _Run, lv: _Level) -> _Level:
    """The level on twice its spacing: a mean-preserving spread of the value
    (upper side: half the Q-mass of an odd atom to each neighbour, its P-mass
    in the ratio of their values), or a merge with exact conditional means
    (lower side)."""
    if run.merge:
        return _merge(run, lv)
    th = run.theta * lv.step * run.d
    ch = math.cosh(th)
    # l2 norm of the map: rows sum to 1 + cosh(th), columns to at most cosh(th)
    norm = math.sqrt((1.0 + ch) * max(1.0, ch)) * (1.0 + 1e-12)
    q = _regrid(lv.q, th)
    eq = norm * lv.eq + 6.0 * _U * norm * float(l1_l2_norms(lv.q)[1])
    p, ep = None, 0.0
    if lv.p is not None:
        # rows sum to at most 1 + 3/2 e^|th|, columns to at most e^|th|
        eth = math.exp(abs(th))
        norm_p = math.sqrt((1.0 + 1.5 * eth) * eth) * (1.0 + 1e-12)
        p = _regrid_p(lv.p, th)
        ep = norm_p * lv.ep + 8.0 * _U * norm_p * float(l1_l2_norms(lv.p)[1])
    lmgf = None
    if lv.lmgf is not None:
        assert run.chern is not None
        # a spread multiplies the MGF at theta' by at most cosh(theta' d_f)
        x = np.abs(run.chern * (lv.step * run.d))
        lmgf = lv.lmgf + (x + np.log1p(np.exp(-2.0 * x)) - math.log(2.0)) * (1 + 1e-12)  # (log cosh x)
    return _Level(q, p, eq, ep, lv.m, 2 * lv.step, lv.lost_q, lv.lost_p, lmgf)


#: relative residual allowed for a first-grid merged cell's conditional mean
_RHO_CAP = 1e-9
#: most fine atoms one merged bucket may take from (its error grows like the root of it)
_WIDTH_CAP = 3


def _merge(run: _Run, lv: _Level) -> _Level:
    """Merged lower side: buckets whose conditional means are the coarse points,
    up to the deviations ``dev`` carries (see ``merge_half``)."""
    from pld.kernels.allocation import merge_half

    assert lv.p is not None
    dev0, edev0 = _dev(lv, run.d)
    # the sums of a few coordinates keep the comb of the first merge (grid
    # points it skipped), so their buckets need more atoms
    cap = _WIDTH_CAP if lv.m > 4 else 4 * _WIDTH_CAP
    q, p, dev, widest = merge_half(np.ascontiguousarray(lv.q), np.ascontiguousarray(lv.p),
                                   np.ascontiguousarray(dev0), cap, float(lv.eq), lv.step * run.d)
    # A linear map with column sums <= 1 and row sums <= r has l2 norm at most
    # sqrt(r): a merge bucket's row takes at most its atoms; the additions
    # round each entry by an ulp.  (dev' is a bound built from the computed
    # dev plus its own terms: its round-off is carried as edev.)
    k = math.sqrt(widest)
    eq = k * lv.eq + 2.0 * _U * float(l1_l2_norms(q)[1])
    ep = k * lv.ep + 2.0 * _U * float(l1_l2_norms(p)[1])
    edev = k * edev0 + 2.0 * _U * float(l1_l2_norms(dev)[1])
    return _Level(q, p, eq, ep, lv.m, 2 * lv.step, dev=dev, edev=edev)


def _cut_mass(run: _Run, x: np.ndarray, e: float, m: int, step: int, start: int) -> tuple[float, float]:
    """Upper bounds on the untilted Q- and P-mass of entries ``start..`` of a level's tilted array."""
    if start >= x.size:
        return 0.0, 0.0
    k = np.arange(start, x.size, dtype=float)
    lw = run.log_w(m, step, k)
    top = float(lw.max())
    if top > 700.0:
        return math.inf, math.inf
    w = np.exp(lw - top)  # (scaled by e^top, applied at the end)
    v = k * (step * run.d) / m  # the likelihood ratio of each entry (its P-mass over its Q-mass)
    ax = np.abs(x[start:])
    cq = (float(np.sum(ax * w)) + e * float(np.sqrt(np.sum(w * w)))) * math.exp(top)
    cp = (float(np.sum(ax * w * v)) + e * float(np.sqrt(np.sum((w * v) ** 2)))) * math.exp(top)
    return cq * (1.0 + 1e-9), cp * (1.0 + 1e-9)


def _combine(run: _Run, a: _Level, b: _Level, keep: int) -> _Level:
    """The sum of two independent partial sums (same spacing), cut to ``keep`` entries.

    The marked coordinate is in the first part with probability ``m_a / m``:
    ``p = (m_a/m) p_a * q_b + (m_b/m) q_a * p_b`` (one convolution for a square).
    """
    m = a.m + b.m
    q, eq = _conv(a.q, a.eq, b.q, b.eq)
    p, ep = None, 0.0
    if a.p is not None:
        assert b.p is not None
        if a is b:
            p, ep = _conv(a.p, a.ep, b.q, b.eq)
        else:
            p1, e1 = _conv(a.p, a.ep, b.q, b.eq)
            p2, e2 = _conv(a.q, a.eq, b.p, b.ep)
            p = (a.m / m) * p1 + (b.m / m) * p2
            ep = (a.m / m) * e1 + (b.m / m) * e2 + 4.0 * _U * float(l1_l2_norms(p)[1])
    dev, edev, rho_s = None, 0.0, 0.0
    if run.merge and a.dev is None and b.dev is None:
        # rho_a v_a Q_a * Q_b + Q_a * rho_b v_b Q_b <= max(rho) v (Q_a * Q_b): no array needed
        rho_s = max(a.rho_s, b.rho_s)
    elif run.merge:
        # |m - v| Q of a sum atom <= (dev_a * Q_b + Q_a * dev_b)
        da, ea = _dev(a, run.d)
        if a is b:
            dev, edev = _conv(da, ea, a.q, a.eq)
            dev, edev = 2.0 * dev, 2.0 * edev
        else:
            db, eb = _dev(b, run.d)
            d1, e1 = _conv(da, ea, b.q, b.eq)
            d2, e2 = _conv(a.q, a.eq, db, eb)
            dev = d1 + d2
            edev = e1 + e2 + 2.0 * _U * float(l1_l2_norms(dev)[1])
    lost_q = lost_p = 0.0
    lmgf = None
    if run.upper and run.limit == math.inf:
        # cut parts: one factor's cut part times the other's total (Q), and the
        # marked mixture of the same (P)
        lost_q = a.lost_q * run.tq(b.m) + run.tq(a.m) * b.lost_q
        lost_p = ((a.m / m) * (a.lost_p * run.tq(b.m) + run.tp(a.m) * b.lost_q)
                  + (b.m / m) * (a.lost_q * run.tp(b.m) + run.tq(a.m) * b.lost_p))
        cq, cp = _cut_mass(run, q, eq, m, a.step, keep)
        assert a.lmgf is not None and b.lmgf is not None and run.chern is not None
        lmgf = a.lmgf + b.lmgf
        if keep < q.size:
            # Chernoff: Q(S >= s) <= e^{L(theta') - theta' s}; and since s' <= s e^{(s' - s)/s},
            # E[S/m; S >= s] <= (s/m) e^{L(theta'') - theta'' s} for theta'' >= 1/s
            sc = keep * a.step * run.d
            pos = run.chern > 0  # (the negative parameters bound the lower tail)
            expo = np.where(pos, lmgf - run.chern * sc, np.inf)
            cq = min(cq, math.exp(min(float(np.min(expo)), 700.0)) * (1 + 1e-9))
            ok = run.chern >= 1.0 / sc
            if np.any(ok):
                cp = min(cp, sc / m * math.exp(min(float(np.min(expo[ok])), 700.0)) * (1 + 1e-9))
        lost_q += cq
        lost_p += cp
    q = q[:keep].copy()
    if p is not None:
        p = p[:keep].copy()
    if dev is not None:
        dev = np.abs(dev[:keep])  # (|.|: a bound stays a bound; the error bound covers the rest)
    return _Level(q, p, eq, ep, m, a.step, lost_q, lost_p, lmgf if run.upper else None, dev, edev, rho_s)


def _sum_levels(run: _Run, x: _Level, coarse_sd: float) -> _Level:
    """The ``t``-fold sum by repeated squaring, each level on its own window and spacing.

    A level of ``m`` coordinates is cut to ``[0, window(a, m, t)]`` and
    re-gridded to twice its spacing while that spacing stays below
    ``coarse_sd`` standard deviations of the partial sum (evolving
    discretisation).  The schedule depends on sizes only, so every tilt runs
    through the same grids.
    """
    a, d, t = run.a, run.d, run.t
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))

    def fit(lv: _Level) -> _Level:
        while 2 * lv.step * d <= coarse_sd * sd1 * math.sqrt(lv.m) and lv.q.size > 64:
            lv = _coarsen(run, lv)
        return lv

    def to_step(lv: _Level, step: int) -> _Level:
        while lv.step < step:
            lv = _coarsen(run, lv)
        return lv

    def keep(m: int, step: int) -> int:
        w = window(a, m, t)
        if run.cap < math.inf:
            w = min(w, m * run.cap, _bulk(a, m, t) + _CAP_JUMPS * run.cap)
        return int(min(w, run.limit) / (step * d)) + 2

    result = None
    cur = x
    k = t
    while True:
        if k & 1:
            if result is None:
                result = cur
            else:
                r = to_step(result, cur.step)
                c = to_step(cur, r.step)
                result = fit(_combine(run, r, c, keep(r.m + c.m, c.step)))
        k >>= 1
        if not k:
            assert result is not None  # (t >= 1: the lowest set bit set it)
            return result
        cur = fit(_combine(run, cur, cur, keep(2 * cur.m, cur.step)))


def _tilted(x: np.ndarray, g: np.ndarray, theta: float,
            c0: float | None = None) -> tuple[np.ndarray, float, np.ndarray]:
    """``x e^{theta g - c0}`` (``c0`` its log total unless given), ``c0`` and each entry's relative rounding bound."""
    with np.errstate(divide="ignore"):
        lx = np.log(np.maximum(x, 0.0)) + theta * g
    if c0 is None:
        top = float(np.max(lx))
        c0 = top + math.log(float(np.sum(np.exp(lx - top))))
    e = theta * g - c0
    # (where e^e would overflow, x is below the float range's bottom: the
    # entry is formed in log space, its rounding then relative to |log x| too)
    far = e >= 700.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        y = np.where(x > 0, np.where(far, np.exp(np.where(far, lx - c0, 0.0)), x * np.exp(np.minimum(e, 700.0))), 0.0)
    rel = 4.0 * _U * (2.0 + np.abs(theta * g) + abs(c0) + np.where(far & (x > 0), np.abs(lx), 0.0))
    return y, c0, rel


def coordinate_spread(mu: float, a: float, d: float, n: int) -> np.ndarray:
    from pld.kernels.allocation import spread_law

    return spread_law(mu, a, d, n)


def _coordinate_upper(mu: float, a: float, d: float, n: int, t: int, xs: np.ndarray | None = None) -> tuple:
    """One coordinate's spread on ``[0, n d]``, ``(total Q, total P, cut Q, cut P)`` of its measure,
    and bounds on its log-MGF at a range of Chernoff parameters.

    The tail beyond the window, ``Y > n d``, which the spread leaves out, is
    cut: its Q-mass ``1 - F`` and P-mass ``1 - G`` bounded above; the totals
    include the spread's rounding slack.
    """
    xs = coordinate_spread(mu, a, d, n) if xs is None else xs
    g = np.arange(n + 1) * d
    z_top = (math.log(n * d) - mu) / a
    tail_q = float(ndtr(-z_top)) * (1 + 1e-12) + 1e-300
    tail_p = float(ndtr(a - z_top)) * (1 + 1e-12) + 1e-300
    tot_q = math.fsum(xs.tolist()) * (1 + 4 * _U) + tail_q
    tot_p = math.fsum((g * xs).tolist()) * (1 + 8 * _U) + tail_p
    # log-MGF bounds of the measure at Chernoff parameters from the scale of
    # the whole sum to that of one coordinate's window
    # (negative ones, up to e^{-600} per cell, for the lower tail)
    chern = np.concatenate((-np.geomspace(0.1 / window(a, t, t), 600.0 / d, 48),
                            np.geomspace(0.1 / window(a, t, t), 600.0 / (n * d), 48)))
    with np.errstate(divide="ignore"):
        lx = np.log(xs)
    lmgf = np.empty(chern.size)
    for i, c in enumerate(chern):
        e = lx + c * g
        mx = float(e.max())
        lmgf[i] = mx + math.log(float(np.sum(np.exp(e - mx)))) + 1e-10 * (1.0 + abs(mx))
    return xs, (tot_q, tot_p, tail_q, tail_p), chern, lmgf


def _run_upper(a: float, d: float, t: int, coord: tuple, theta: float, coarse_sd: float,
               limit: float = math.inf, cap: float = math.inf) -> tuple[_Run, _Level]:
    xs, (tot_q, tot_p, tail_q, tail_p), chern, lmgf = coord
    g = np.arange(xs.size) * d
    y, c0, rel = _tilted(xs, g, theta)
    run = _Run(a, d, t, theta, c0, True, tot_q, tot_p, chern, limit=limit, cap=cap)
    e0 = float(np.sqrt(np.sum((rel * y) ** 2)))
    py = g * y  # the marked coordinate's law (P-mass = value x Q-mass)
    ep0 = float(np.sqrt(np.sum(((rel + 2.0 * _U) * py) ** 2)))
    lv = _Level(y, py, e0, ep0, 1, 1, tail_q, tail_p, lmgf)
    return run, _sum_levels(run, lv, coarse_sd)


def _bracket(run: _Run, lv: _Level, x: np.ndarray, e: float) -> tuple[np.ndarray, np.ndarray]:
    """Untilted ``(lower, upper)`` brackets on every entry of one of the run's final arrays."""
    lw = run.log_w(lv.m, lv.step, np.arange(x.size, dtype=float))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        w = np.exp(lw)
        lo = np.where(x > e, (x - e) * w, 0.0) * (1.0 - 1e-12)
        hi = (np.maximum(x, 0.0) + e) * w * (1.0 + 1e-12)
    # an untilting factor that overflows (a tilt whose tilted law is dominated by a
    # tail, its entries far below its total) tells nothing: [0, inf], never nan
    # (a nan would win the runs' entrywise minimum)
    lo = np.where(np.isfinite(lo), lo, 0.0)
    hi = np.where(np.isnan(hi), np.inf, hi)
    return lo, hi


def _next_tilt(values: np.ndarray, rel_bound: np.ndarray, s: np.ndarray, covering: np.ndarray,
               thetas: list[float], upward: bool) -> tuple[float | None, int]:
    """The next tilt for one tail (None when that tail is resolved) and the frontier.

    ``values``: the best untilted estimates, ``rel_bound``: their relative
    round-off bound; the frontier is the last entry (towards the tail) still
    resolved to ``_REL_OK`` (or to 30 times the best entry's bound).  A
    Gaussian-like law ``e^{-(s - mu)^2 / (2 v)}`` tilted by ``theta`` is
    resolved on a range of the same width centred ``theta v`` further out,
    so a tilt ``theta_f + 2.5 (slope - theta_f)`` (``slope``: the law's decay
    rate at the frontier, ``theta_f`` the tilt that resolves it) continues
    the resolved range (an overlap of 1/4 of the range).
    """
    finite = np.isfinite(rel_bound)
    if not np.any(finite):
        return None, -1
    ok = rel_bound <= max(_REL_OK, 30.0 * float(np.min(rel_bound[finite])))
    idx = np.nonzero(ok)[0]
    f = int(idx[-1]) if upward else int(idx[0])
    if f == (values.size - 1 if upward else 0):
        return None, f
    beyond = slice(f + 1, None) if upward else slice(0, f)
    # (what lies beyond: bounded by the best bracket's upper end)
    rest = float(np.sum(values[beyond] * (1.0 + np.minimum(rel_bound[beyond], 1e300))))
    if rest <= _NEGLIGIBLE:
        return None, f
    j = max(1, min(8, f if upward else values.size - 1 - f))
    f2 = f - j if upward else f + j
    if values[f] <= 0 or values[f2] <= 0:
        return None, f
    slope = -(math.log(values[f]) - math.log(values[f2])) / (s[f] - s[f2])
    th_f = thetas[int(covering[f])]
    nxt = th_f + _TILT_STRIDE * (slope - th_f)
    if (upward and nxt <= th_f * 1.05) or (not upward and nxt >= th_f * 1.05):
        return None, f
    return nxt, f


# ------------------------------------------------------------ public
@dataclass(frozen=True, eq=False)
class SideAtoms:
    """One side's discrete pairs, per direction: ``(loss, log P, log Q)`` with the ``+inf`` atom."""

    remove: tuple[np.ndarray, np.ndarray, np.ndarray]
    add: tuple[np.ndarray, np.ndarray, np.ndarray]


def atoms(side: SideAtoms, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(loss, log P, log Q)`` of one direction's discrete pair, ``+inf`` atom included."""
    return side.remove if direction == "remove" else side.add


def _with_inf(loss, lp, lq, inf: float):
    if inf > 0.0:
        loss = np.append(loss, np.inf)
        lp = np.append(lp, math.log(inf))
        lq = np.append(lq, -np.inf)
    return loss, lp, lq


def _upper_atoms(q_hi: np.ndarray, p_hi: np.ndarray, s: np.ndarray, t: int, lost_q: float, lost_p: float,
                 extra_remove: list, extra_add: list) -> SideAtoms:
    """Atoms at the grid values' losses: remove with P-masses ``p_hi``, add with
    ``q_hi``; plus the lumped round-off, as ``(loss, P-mass)`` atoms (Q-mass
    ``P e^{-loss}``), and the masses at ``+inf``."""
    def extra(lst):
        if not lst:
            return np.zeros(0), np.zeros(0)
        lo, m = np.array(lst, dtype=float).T
        return lo, np.log(m)

    with np.errstate(divide="ignore"):
        sel = (p_hi > 0) & (s > 0)
        el, elp = extra(extra_remove)
        lam = np.concatenate((np.log(s[sel] / t), el))
        lp = np.concatenate((np.log(p_hi[sel]), elp))
        remove = _with_inf(lam, lp, lp - lam, min(1.0, lost_p))
        sel = (q_hi > 0) & (s > 0)
        el, elp = extra(extra_add)
        lam = np.concatenate((-np.log(s[sel] / t), el))
        lq = np.concatenate((np.log(q_hi[sel]), elp))
        # Lambda = 0 (every Y at the grid's first point) is a loss of +inf when added
        add = _with_inf(lam, lq, lq - lam, min(1.0, lost_q + float(q_hi[0])))  # (s[0] = 0)
    return SideAtoms(remove, add)


def _lower_merged(mu: float, a: float, d: float, n: int, t: int,
                  coarse_sd: float) -> tuple[SideAtoms, float, float]:
    """The dominated pair: conditional-mean merges (every atom's likelihood ratio is
    its grid value times ``1 +- rho``), untilted.

    The first merge cuts ``Y`` into cells whose conditional means are the
    grid points (:func:`pld.kernels.allocation.merged_law`); each re-grid
    merges with exact conditional means (:func:`_merge`).  The losses are
    then known to ``rho`` whatever the round-off: the remove direction takes
    ``log(v (1 - rho) / t)`` with P-mass ``p - E_p``, the add direction
    ``-log(v (1 + rho) / t)`` with P-mass ``q - E_q`` (lower, both; a pair
    with smaller masses and smaller losses is dominated).
    """
    from pld.kernels.allocation import merged_law

    g = np.arange(n + 1) * d
    xm, rho0, _, e_xm, e_gxm = merged_law(mu, a, d, n, _RHO_CAP)
    e0 = e_xm + 2.0 * _U * float(l1_l2_norms(xm)[1])
    gx = (1.0 - rho0) * g * xm
    # (the products round by an ulp or two each)
    e0p = e_gxm + 4.0 * _U * float(l1_l2_norms(gx)[1])
    # the merged cells' means are g (1 +- rho0): the marked law at the grid
    # values times (1 - rho0) is below the true one
    first = _Level(xm, gx, e0, e0p, 1, 1, rho_s=rho0 * (1.0 + 1e-12))
    lv = _sum_levels(_Run(a, d, t, 0.0, 0.0, False, merge=True), first, coarse_sd)
    assert lv.p is not None
    dev, edev = _dev(lv, d)
    p = lv.p - lv.ep
    q = lv.q - lv.eq
    v = np.arange(q.size) * (lv.step * d)
    # each atom's relative deviation |m - v| / v <= rho_k
    ok = (q > 0) & (v > 0)
    rho = np.full(q.size, np.inf)
    rho[ok] = (dev[ok] + edev) / (q[ok] * v[ok]) * (1.0 + 1e-12)
    lam = np.zeros(q.size)
    lam[ok] = np.log(v[ok] / t)
    with np.errstate(divide="ignore", invalid="ignore"):
        sel = ok & (p > 0) & (rho < 0.5)
        lr = lam[sel] + np.log1p(-rho[sel])
        lp = np.log(p[sel])
        remove = (lr, lp, lp - lr)
        sel = ok & (rho < 0.5)
        la = lam[sel] + np.log1p(rho[sel])
        lq = np.log(q[sel])
        add = (-la, lq, lq + la)
    worst = float(np.max(rho[ok & (rho < 0.5)])) if np.any(ok & (rho < 0.5)) else 0.0
    return SideAtoms(remove, add), float(np.median(rho[ok])) if np.any(ok) else 0.0, worst


@dataclass(eq=False)
class _UpperRuns:
    """The upper side's tilted runs on one object, their entrywise brackets combined."""

    thetas: list
    step: int
    size: int
    s: np.ndarray
    q_hi: np.ndarray
    p_hi: np.ndarray
    lost_q: float
    lost_p: float
    #: lumped round-off: (smallest value / m, largest value / m, Q-mass, P-mass) per block
    lumps: list
    #: set when an upward tilt was refused for the cost of its coordinate cut (a
    #: heavy upper tail): the cut (first-grid index) it wanted
    heavy_cut: int | None
    roundoff: float
    base_lmgf: np.ndarray
    base_chern: np.ndarray


def _upper_runs(a: float, d: float, n: int, t: int, coarse: float, cut, coord_of, fixed_cut: int | None = None,
                m: int | None = None, valley=None, fits=None, cap: float = math.inf) -> _UpperRuns:
    """The ``m``-fold (default ``t``) sum of the upper side: an untilted run, then tilts.

    ``cut(theta)``: the coordinate cut of a tilt; ``coord_of(nb)``: the
    coordinate measure cut at ``nb`` (see :func:`_coordinate_upper`).  With
    ``fixed_cut`` every run uses that cut (one object: their entries mix
    without extra cut mass) and an upward tilt is kept only while its own cut
    reaches it.
    """
    m = t if m is None else m
    coords: dict[int, tuple] = {}
    # a lower-tail run (theta < 0) serves the entries below the mean of S only
    low_limit = float(m)
    base_cut = n if fixed_cut is None else fixed_cut

    def coordinate(nb: int) -> tuple:
        if nb not in coords:
            coords[nb] = coord_of(nb)
        return coords[nb]

    def run_up(theta: float):
        if theta < 0:
            nb = min(base_cut, int(math.ceil(low_limit / d)) + 1)
        else:
            nb = base_cut if (fixed_cut is not None or theta == 0) else cut(theta)
        return nb, _run_upper(a, d, m, coordinate(nb), theta, coarse, low_limit if theta < 0 else math.inf, cap)

    thetas = [0.0]
    runs_up = [run_up(0.0)]
    size = runs_up[0][1][1].q.size
    step = runs_up[0][1][1].step
    s = np.arange(size) * (step * d)

    def brackets() -> tuple[np.ndarray, np.ndarray]:
        los, his = [], []
        for _, (r, lv) in runs_up:
            assert lv.step == step
            lo, hi = _bracket(r, lv, lv.q, lv.eq)
            lo, hi = _pad(lo, size), _pad(hi, size)
            if r.limit < math.inf:
                out = s >= r.limit
                lo[out], hi[out] = 0.0, math.inf
            los.append(lo)
            his.append(hi)
        return np.vstack(los), np.vstack(his)

    def lost(runs) -> tuple[float, float]:
        # runs on the same coordinate cut bound the same object (the smallest
        # bound of its cut masses holds); different cuts add
        by_cut: dict[int, tuple[float, float]] = {}
        for nb, (r, lv) in runs:
            if r.limit < math.inf:
                continue  # (its entries are exact below its limit: nothing cut)
            q0, p0 = by_cut.get(nb, (math.inf, math.inf))
            by_cut[nb] = (min(q0, lv.lost_q), min(p0, lv.lost_p))
        return sum(v[0] for v in by_cut.values()), sum(v[1] for v in by_cut.values())

    heavy_cut = None
    for upward in (True, False):
        frontier = -1
        # (a first grid of more cells than _TILT_CELLS gets no tilted runs: each
        # would cost as much as the untilted one; its tails are lumped instead)
        for _ in range(_MAX_TILTS if base_cut <= _TILT_CELLS else 0):
            los, his = brackets()
            i = np.argmin(his, axis=0)
            hi = his[i, np.arange(size)]
            lo = np.max(los, axis=0)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                rel = np.where(lo > 0, (hi - lo) / np.maximum(lo, 1e-300), np.inf)
            th, f = _next_tilt(0.5 * (lo + hi), rel, s, i, thetas, upward)
            if th is None or f == frontier:
                break  # resolved, or the last tilt did not move the frontier
            frontier = f
            if upward and fixed_cut is not None and fits is not None and not fits(th, fixed_cut):
                break  # on a fixed cut, the tilted tail would outweigh the bulk
            if upward and fixed_cut is None and cut(th) < 8:
                if valley is not None and valley(th) >= 8:
                    heavy_cut = valley(th)  # a heavy tail from the bulk on: tilt a light part only
                break  # no bulk left to tilt
            new = run_up(th)
            if new[1][1].step != step:
                # (the re-grid schedule stops at 64 entries: a lower-tail run on a short
                # window can end on another spacing, and its entries would not line up)
                break
            before = lost(runs_up)
            after = lost(runs_up + [new])
            if max(after[0] - before[0], after[1] - before[1]) > max(before[0], before[1], _CUT_COST):
                heavy_cut = new[0]
                break  # its coordinate cut would cost more at +inf than it resolves (a heavy tail)
            thetas.append(th)
            runs_up.append(new)

    # the tightest upper bracket of each entry; every run's cut mass; entries
    # resolved to worse than _LUMP keep their estimate and their round-off is
    # lumped, per run by Cauchy-Schwarz over the entries it covers (sum |e_k|
    # w_k <= E ||w||_2: sqrt(n) E, not n E), in blocks of consecutive entries
    _, his = brackets()
    best = np.argmin(his, axis=0)
    q_hi = his[best, np.arange(size)]
    lost_q, lost_p = lost(runs_up)
    v = s / m
    p_hi = v * q_hi
    lumps: list[tuple[float, float, float, float]] = []
    for j, (_, (r, lv)) in enumerate(runs_up):
        assert lv.p is not None
        x = _pad(lv.q, size)
        noisy = (best == j) & (lv.eq > _LUMP * np.maximum(x, 0.0))
        noisy[0] = False  # (entry 0 keeps its bracket; a Chernoff bound may tighten it)
        if not np.any(noisy):
            continue
        idx = np.nonzero(noisy)[0]
        lw_all = r.log_w(lv.m, lv.step, idx.astype(float))
        y_all = _pad(lv.p, size)[idx]
        cuts = np.linspace(0, idx.size, _LUMP_BLOCKS + 1).astype(int)[1:-1]
        for k, lw, y in zip(np.split(idx, cuts), np.split(lw_all, cuts), np.split(y_all, cuts)):
            if k.size == 0:
                continue
            top = float(lw.max())
            w = np.exp(lw - top)
            with np.errstate(over="ignore"):
                scale = math.exp(top) * (1.0 + 1e-12)
                q_hi[k] = np.maximum(x[k], 0.0) * w * scale
                # (the remove direction's P-masses from the run's own P-law: its
                # round-off E_p is not multiplied by the likelihood ratio)
                p_hi[k] = np.maximum(y, 0.0) * w * scale
                norm_w = float(np.sqrt(np.sum(w * w))) * scale * (1.0 + 1e-9)
            lumps.append((float(v[k].min()), float(v[k].max()), lv.eq * norm_w, lv.ep * norm_w))
    # entry 0 (every coordinate spread to 0: Lambda = 0, an add-direction loss of
    # +inf): Chernoff for the lower tail, Q(S = 0) <= E[e^{theta S}], theta < 0
    r0, base = runs_up[0][1]
    assert base.lmgf is not None and r0.chern is not None
    neg = r0.chern < 0
    q_hi[0] = min(float(q_hi[0]), math.exp(min(float(np.min(base.lmgf[neg])), 0.0)) * (1 + 1e-9))
    return _UpperRuns(thetas, step, size, s, q_hi, p_hi, lost_q, lost_p, lumps, heavy_cut,
                      max(lv.eq for _, (_, lv) in runs_up), base.lmgf, r0.chern)


#: the one-jump decomposition is tried when the steps are at least this many
#: times one coordinate's window (its lumps are placed a window further up)
_JUMP_STEPS = 10.0
#: keep it whatever its slack (tests)
_JUMP_ALWAYS = False


def _regrid_to(x: np.ndarray, d: float, df: float) -> np.ndarray:
    """A measure on ``i d`` spread onto ``j df`` (mean-preserving, shares rounded up)."""
    g = np.arange(x.size) * d
    j = np.floor(g / df).astype(np.int64)
    frac = np.clip(g / df - j, 0.0, 1.0)
    out = np.zeros(int(j[-1]) + 2)
    np.add.at(out, j, x * (1.0 - frac))
    np.add.at(out, j + 1, x * frac)
    return out * (1.0 + 1e-12)


def _upper_jump(mu: float, a: float, d: float, n: int, t: int, coarse: float, nb: int, spread_full: np.ndarray,
                cut, fits):
    """The upper side by the number of heavy coordinates (``Y > nb d``).

    With ``L`` the spread measure of one coordinate on ``[0, nb d]`` and ``H``
    on ``(nb d, n d]`` (the entry at ``nb`` taken whole: more mass is safe),
    the ``t``-fold sum's Q-measure is ``sum_j C(t, j) L^{*(t-j)} * H^{*j}``.
    ``j = 0, 1`` are ``R * (L + t H)`` with ``R = L^{*(t-1)}`` (tilted runs on
    one object: ``L`` is light-tailed, so upward tilts resolve ``R``'s tail),
    convolved directly (positive terms: relative rounding) after re-gridding
    the last coordinate to ``R``'s spacing (a spread); ``j >= 2`` and the tail
    beyond the first window go to ``+inf`` (their masses bounded).  Returns the
    pieces of the upper atoms, or None when ``t < 2``.
    """
    if t < 2:
        return None
    xs_l, _, _, _ = coord_l = _coordinate_upper(mu, a, d, nb, t)
    # nothing of L is cut at the first level: the heavy part is counted below
    (tot_q, tot_p, _, _) = coord_l[1]
    coord_l = (xs_l, (tot_q, tot_p, 0.0, 0.0), coord_l[2], coord_l[3])
    up = _upper_runs(a, d, n, t, coarse, cut, lambda k: coord_l if k == nb else _light(coord_l, k), fixed_cut=nb,
                     m=t - 1, fits=fits)
    df = up.step * d
    g = np.arange(n + 1) * d
    heavy = np.zeros(n + 1)
    heavy[nb:] = spread_full[nb:]
    light = np.zeros(n + 1)
    light[: nb + 1] = xs_l
    kern = _regrid_to(light + t * heavy, d, df)
    r = np.maximum(up.q_hi, 0.0)
    q = np.convolve(r, kern) * (1.0 + 2.0 * (min(r.size, kern.size) + 4) * _U)
    s = np.arange(q.size) * df
    v = s / t
    q_h = math.fsum(spread_full[nb:].tolist()) * (1 + 1e-12)
    p_h = math.fsum((g[nb:] * spread_full[nb:]).tolist()) * (1 + 1e-12)
    t_k = math.fsum(kern.tolist()) * (1 + 1e-12)
    t_gk = math.fsum((np.arange(kern.size) * df * kern).tolist()) * (1 + 1e-12)
    big = max(1.0, tot_q + q_h) ** t  # (a bound on every total raised to at most t)
    # R's cut parts times the last coordinate (P: the mean of S/t over them)
    lost_q = up.lost_q * t_k
    lost_p = ((t - 1) * up.lost_p * t_k + up.lost_q * t_gk) / t
    # the tail beyond the first window (as in _coordinate_upper), and j >= 2
    z_top = (math.log(n * d) - mu) / a
    tail_q = float(ndtr(-z_top)) * (1 + 1e-12) + 1e-300
    tail_p = float(ndtr(a - z_top)) * (1 + 1e-12) + 1e-300
    lost_q += (t * tail_q + 0.5 * t * (t - 1) * q_h * q_h) * big
    lost_p += (tail_p + (t - 1) * tail_q + p_h * (t - 1) * q_h + tot_p * 0.5 * (t - 1) * (t - 2) * q_h * q_h) * big
    # R's lumped round-off lands within one window above its block
    w_top = (kern.size - 1) * df
    extra_remove, extra_add = [], []
    for vmin, vmax, dq, _ in up.lumps:
        top = vmax * (t - 1) + w_top
        extra_remove.append((math.log(top / t), dq * t_k * top / t))
        if vmin > 0:
            extra_add.append((-math.log(vmin * (t - 1) / t), dq * t_k))
        else:
            lost_q += dq * t_k
    p_hi = v * q
    return q, p_hi, s, min(1.0, lost_q), min(1.0, lost_p), extra_remove, extra_add


def _light(coord_l: tuple, k: int) -> tuple:
    """``coord_l`` cut further at ``k`` (the lower-tail runs: entries below their limit only)."""
    xs, (tot_q, tot_p, _, _), chern, lmgf = coord_l
    return xs[: k + 1].copy(), (tot_q, tot_p, 0.0, 0.0), chern, lmgf


#: largest first grid that gets tilted runs
_TILT_CELLS = 1 << 20
#: relative round-off above which an entry's round-off is lumped (at the largest
#: loss of its block of consecutive entries)
_LUMP = 1e-3
#: blocks per run of lumped entries
_LUMP_BLOCKS = 64
#: cut mass (at +inf) a tilted run may add without doubling the cut mass
_CUT_COST = 1e-11
#: a tilt ``theta > 0`` cuts each coordinate where its tilted law climbs back to
#: ``e^{-_TILT_DEPTH}`` of its mode (beyond, the log-normal tail outweighs the bulk)
_TILT_DEPTH = 30.0


def _pad(x: np.ndarray, n: int) -> np.ndarray:
    return x if x.size == n else np.concatenate((x[:n], np.zeros(max(0, n - x.size))))


@functools.lru_cache(maxsize=16)
def sum_laws(sigma: float, t: int, spacing: float) -> tuple[SideAtoms, SideAtoms, dict]:
    """Upper (spread) and lower (post-processed) pairs of one round for noise multiplier ``sigma``.

    ``spacing``: the first grid's spacing in standard deviations of one
    coordinate (raised if the first window would need more than ``MAX_CELLS``
    cells; ``info["spacing_sd"]`` says what was used).  Returns ``(upper,
    lower, info)``.

    Where the first window would need more than ``_TILT_CELLS`` cells (below
    ``sigma ~ 0.75``; ``t >= 2``) the round is handed to
    :func:`pld._allocation_heavy.heavy_laws` (a light part on a linear grid,
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
    if t >= 2 and w1 / (spacing * sd1) > _TILT_CELLS:
        # one grid cannot hold both the bulk and the heavy tail of a coordinate:
        # a light part on a linear grid, the heavy part on a geometric one
        from pld._allocation_heavy import heavy_laws

        return heavy_laws(sigma, t, spacing)
    d = max(spacing * sd1, w1 / MAX_CELLS)
    n = int(math.ceil(w1 / d))
    coarse = _COARSE_RATIO * spacing

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

    up = _upper_runs(a, d, n, t, coarse, cut, lambda nb: _coordinate_upper(mu, a, d, nb, t, spread_full
                                                                              if nb == n else None), valley=valley)
    thetas, step, size, s = up.thetas, up.step, up.size, up.s
    q_hi, p_hi, lost_q, lost_p = up.q_hi, up.p_hi, up.lost_q, up.lost_p
    extra_remove = [(math.log(vmax), dp) for vmin, vmax, dq, dp in up.lumps if vmax > 0]
    extra_add = [(-math.log(vmin), dq) for vmin, vmax, dq, dp in up.lumps if vmin > 0]
    lost_q += sum(dq for vmin, vmax, dq, dp in up.lumps if vmin <= 0)
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
    lower, rho, rho_worst = _lower_merged(mu, a, d, n, t, coarse)
    info = {"spacing": d, "spacing_sd": d / sd1, "first_cells": n, "first_window": w1,
            "final_spacing": step * d, "final_cells": size, "tilts": tuple(float(x) for x in thetas),
            "coordinate_cuts": tuple(cut(x) * d for x in thetas), "one_jump": jump is not None,
            "rho_median": rho, "rho_worst_kept": rho_worst, "lower_mass": float(np.sum(np.exp(lower.remove[1]))),
            "roundoff_upper": up.roundoff,
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
    from pld.kernels.allocation import centred_cells

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
    q1, p1, eq1, ep1 = centred_cells(mu, a, d, n)

    def power(x: np.ndarray, e: float, m: int) -> _Level:
        run = _Run(a, d, m, 0.0, 0.0, False, limit=w)
        return _sum_levels(run, _Level(x, None, e, 0.0, 1, 1), 0.0)

    e_q1 = float(np.sqrt(np.sum(eq1 ** 2)))
    e_p1 = float(np.sqrt(np.sum(ep1 ** 2)))
    qt = power(q1, e_q1, t)
    rest = power(q1, e_q1, t - k) if t > k else None
    marked = power(p1, e_p1, k)
    if rest is None:
        pk, ep = marked.q, marked.eq
    else:
        pk, ep = _conv(marked.q, marked.eq, rest.q, rest.eq)
    size = n + 1
    q, eq = _pad(qt.q, size), qt.eq
    p = _pad(pk, size)
    p_lo, p_hi = np.maximum(p - ep, 0.0), np.maximum(p, 0.0) + ep
    q_lo, q_hi = np.maximum(q - eq, 0.0), np.maximum(q, 0.0) + eq
    with np.errstate(divide="ignore"):
        sel = p_lo > 0
        lp, lq = np.log(p_lo[sel]), np.log(q_hi[sel])
        remove = (lp - lq, lp, lq)
        sel = q_lo > 0
        lp, lq = np.log(q_lo[sel]), np.log(p_hi[sel])
        add = (lp - lq, lp, lq)
    info = {"label_spacing": d, "cells": size, "window": w, "roundoff_p": ep, "roundoff_q": eq,
            "mass_p": float(np.sum(p_lo)), "mass_q": float(np.sum(q_lo))}
    return SideAtoms(remove, add), info
