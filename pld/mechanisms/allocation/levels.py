"""Sums of i.i.d. log-normal coordinates on tilted, re-gridded runs (random allocation).

The machinery behind :mod:`pld.mechanisms.allocation.sums`: a level holds the law
of a partial sum on a grid with bounds on its error (l1, l2, l-infinity); levels
are combined by FFT convolution
(:func:`pld.mechanisms.allocation.roundoff.convolve_errs`), coarsened by a
mean-preserving spread (upper) or a conditional-mean merge (lower), and cut to
a window whose mass is bounded.
See that module's docstring for why each step keeps its side of the bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from pld import _special
from pld.kernels import l1_l2_norms
from pld.mechanisms.allocation.powering import by_squaring
from pld.mechanisms.allocation.roundoff import Err, convolve_errs

#: tail probability left beyond the window (sizing only: what is left is bounded)
_TAIL = 1e-14
#: the tail of the round being built (:func:`pld.mechanisms.allocation.sums.sum_laws` sets it
#: for a round that asks for a deeper one; parts built on other threads copy it)
_tail: ContextVar[float] = ContextVar("allocation_tail", default=_TAIL)
#: whether the round being built redoes a run in long double where its round-off is a share of
#: its mass (:func:`pld.mechanisms.allocation.sums.sum_laws`'s ``precise``)
_precise: ContextVar[bool] = ContextVar("allocation_precise", default=False)
_U = 2.0 ** -53
#: re-grid a level while its spacing stays below this fraction of the first
#: grid's spacing in standard deviations (of the partial sum, of one coordinate)
_COARSE_RATIO = 0.5
#: the ratio of the round being built (:func:`pld.mechanisms.allocation.sums.sum_laws`'s
#: ``coarse_ratio``: a smaller one keeps a long round's last levels on finer grids)
_coarse: ContextVar[float] = ContextVar("allocation_coarse", default=_COARSE_RATIO)


@contextlib.contextmanager
def _windows_to(tail: float | None):
    """Within the block, the linear levels' windows leave ``tail`` beyond them (the current
    tail where None), as :func:`pld.mechanisms.allocation.sums.sum_laws` sets it for a round."""
    token = None if tail is None else _tail.set(tail)
    try:
        yield
    finally:
        if token is not None:
            _tail.reset(token)


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


#: an upper run's level is cut below where its lower tail is this share of the window's tail
#: (what is cut is lost, as above the window, whose own losses are far below its tail)
_LOW_SHARE = 1e-9
#: a lower-tail run's windows reach this share of the window's tail
_LIMIT_TAIL_SHARE = 1e-10
#: a light part's level reaches this many coordinates' caps beyond its bulk
_CAP_JUMPS = 5.0
#: the error of an array that is not there
_NO_ERR = Err(0.0, 0.0, 0.0)


def _bulk(a: float, m: int, t: int, tail: float | None = None) -> float:
    """The bulk of a sum of ``m`` of the ``t`` coordinates (:func:`window` without the tail)."""
    z_m = float(-_special.ndtri((_tail.get() if tail is None else tail) * m / t))
    return m + z_m * math.sqrt(m * math.expm1(min(a * a, 700.0)))


def window(a: float, m: int, t: int | None = None, tail: float | None = None) -> float:
    """Right end of the window of a sum of ``m`` of the ``t`` coordinates:
    its bulk and the tail of one large ``Y`` (sizing only).  The round has
    ``t / m`` such partial sums, each cut at its window, so the bulk is taken
    to the ``tail m / t`` quantile (``tail``: ``_TAIL``, or the round's own)."""
    t = m if t is None else t
    tail = _tail.get() if tail is None else tail
    z = float(-_special.ndtri(tail))
    z_m = float(-_special.ndtri(tail * m / t))
    z_t = float(-_special.ndtri(tail / t))
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
    within ``eq``, ``ep`` (bounds on the error's l1, l2 and l-infinity norms:
    :mod:`pld.mechanisms.allocation.roundoff`).  ``lost_q``, ``lost_p``: upper
    bounds on the untilted masses cut so far (upper side).
    """

    q: np.ndarray
    p: np.ndarray | None
    eq: Err
    ep: Err
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
    #: the grid index of entry 0 (``q[i]`` is the mass at ``(k0 + i) step d``): an upper run's
    #: levels are also cut below their bulk (:func:`_sum_levels`); 0 everywhere else
    k0: int = 0


def _dev(lv: _Level, d: float) -> tuple[np.ndarray, float]:
    """The level's deviation bounds as an array (from ``rho_s`` if it has none)."""
    assert lv.k0 == 0  # (merged lower levels are never cut below)
    if lv.dev is not None:
        return lv.dev, lv.edev
    v = np.arange(lv.q.size) * (lv.step * d)
    # (|m - v| Q <= rho_s v Q, and Q <= |q| + eq entrywise)
    return lv.rho_s * v * (np.abs(lv.q) + lv.eq.entry) * (1.0 + 1e-12), 0.0


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
    #: a run for the lower tail only: no level kept past this value (as the
    #: coordinates are non-negative, what is cut there lands above it)
    limit: float = math.inf
    #: every level kept up to ``limit`` exactly, none cut below it by its own window
    #: (a lower pair from sums of different coordinates: the label sums)
    exact_below_limit: bool = False
    #: every coordinate is at most this (a light part: :mod:`pld.mechanisms.allocation.heavy`); a
    #: level of ``m`` is then cut at ``min(m cap, bulk + _CAP_JUMPS cap)`` (sizing only)
    cap: float = math.inf
    #: convolve in long double (:func:`pld.mechanisms.allocation.roundoff.convolve_errs`)
    extended: bool = False

    def log_w(self, m: int, step: int, k: np.ndarray) -> np.ndarray:
        """log of the untilting factor of entries ``k`` of a level."""
        return m * self.c0 - self.theta * (k * (step * self.d))

    def tq(self, m: int) -> float:
        return math.exp(m * math.log(self.tot_q))

    def tp(self, m: int) -> float:
        return self.tot_p * math.exp((m - 1) * math.log(self.tot_q))


def _regrid(x: np.ndarray, th: float) -> np.ndarray:
    """An odd atom ``2j+1`` sent half to ``2j`` and half to ``2j+2`` (tilted by ``th`` per fine cell)."""
    n = x.size
    out = np.zeros((n + 1) // 2 + 1)
    out[: (n + 1) // 2] += x[0::2]
    odd = x[1::2]
    out[: odd.size] += (0.5 * math.exp(-th)) * odd
    out[1: odd.size + 1] += (0.5 * math.exp(th)) * odd
    return out


def _regrid_p(x: np.ndarray, th: float, j0: int = 0) -> np.ndarray:
    """The P-side of the spread: the odd atom ``2j+1`` sends ``(j+1)/(2j+1)`` of its
    P-mass up and ``j/(2j+1)`` down (its value ratio), tilted by ``th`` per fine cell
    (``x[0]`` the atom ``2 j0``)."""
    n = x.size
    out = np.zeros((n + 1) // 2 + 1)
    out[: (n + 1) // 2] += x[0::2]
    odd = x[1::2]
    j = np.arange(j0, j0 + odd.size, dtype=float)
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
    if lv.k0 % 2:
        # (atoms pair up from an even grid point, as on every other run: one zero in front)
        lv = dataclasses.replace(lv, q=np.concatenate(([0.0], lv.q)), k0=lv.k0 - 1,
                                 p=None if lv.p is None else np.concatenate(([0.0], lv.p)))
    th = run.theta * lv.step * run.d
    ch = math.cosh(th)
    # the map's rows sum to 1 + cosh(th), its columns to at most cosh(th)
    q = _regrid(lv.q, th)
    eq = lv.eq.mapped(max(1.0, ch) * (1.0 + 1e-12), (1.0 + ch) * (1.0 + 1e-12), 6.0 * _U, lv.q)
    p, ep = None, _NO_ERR
    if lv.p is not None:
        # rows sum to at most 1 + 3/2 e^|th|, columns to at most e^|th|
        eth = math.exp(abs(th))
        p = _regrid_p(lv.p, th, lv.k0 // 2)
        ep = lv.ep.mapped(eth * (1.0 + 1e-12), (1.0 + 1.5 * eth) * (1.0 + 1e-12), 8.0 * _U, lv.p)
    lmgf = None
    if lv.lmgf is not None:
        assert run.chern is not None
        # a spread multiplies the MGF at theta' by at most cosh(theta' d_f)
        x = np.abs(run.chern * (lv.step * run.d))
        lmgf = lv.lmgf + (x + np.log1p(np.exp(-2.0 * x)) - math.log(2.0)) * (1 + 1e-12)  # (log cosh x)
    return _Level(q, p, eq, ep, lv.m, 2 * lv.step, lv.lost_q, lv.lost_p, lmgf, k0=lv.k0 // 2)


#: relative residual allowed for a first-grid merged cell's conditional mean
_RHO_CAP = 1e-9
#: most fine atoms one merged bucket may take from (its error grows like the root of it)
_WIDTH_CAP = 3


def _merge(run: _Run, lv: _Level) -> _Level:
    """Merged lower side: buckets whose conditional means are the coarse points,
    up to the deviations ``dev`` carries (see ``merge_half``)."""
    from pld.kernels import merge_half

    assert lv.p is not None
    dev0, edev0 = _dev(lv, run.d)
    # the sums of a few coordinates keep the comb of the first merge (grid
    # points it skipped), so their buckets need more atoms
    cap = _WIDTH_CAP if lv.m > 4 else 4 * _WIDTH_CAP
    q, p, dev, widest = merge_half(np.ascontiguousarray(lv.q), np.ascontiguousarray(lv.p),
                                   np.ascontiguousarray(dev0), cap, lv.eq.entry, lv.step * run.d)
    # A linear map with column sums <= 1 and row sums <= r (a merge bucket's row
    # takes at most its atoms); a bucket's running sum of r split products rounds by
    # 2 (r + 1) ulps of its terms.  (dev' is a bound built from the computed dev plus
    # its own terms: its round-off is carried as edev, an l2 bound.)
    u_sum = 2.0 * (widest + 1.0) * _U
    eq = lv.eq.mapped(1.0, float(widest), u_sum, lv.q)
    ep = lv.ep.mapped(1.0, float(widest), u_sum, lv.p)
    edev = math.sqrt(widest) * edev0 + 2.0 * _U * float(l1_l2_norms(dev)[1])
    return _Level(q, p, eq, ep, lv.m, 2 * lv.step, dev=dev, edev=edev)


def _cut_mass(run: _Run, x: np.ndarray, e: Err, m: int, step: int, start: int, end: int | None = None,
              k0: int = 0) -> tuple[float, float]:
    """Upper bounds on the untilted Q- and P-mass of entries ``start..end-1`` of a level's tilted
    array (entry ``i`` at grid index ``k0 + i``)."""
    end = x.size if end is None else min(end, x.size)
    if start >= end:
        return 0.0, 0.0
    k = np.arange(k0 + start, k0 + end, dtype=float)
    lw = run.log_w(m, step, k)
    top = float(lw.max())
    if top > 700.0:
        return math.inf, math.inf
    w = np.exp(lw - top)  # (scaled by e^top, applied at the end)
    v = k * (step * run.d) / m  # the likelihood ratio of each entry (its P-mass over its Q-mass)
    ax = np.abs(x[start:end])
    cq = (float(np.sum(ax * w)) + e.weighted(w)) * math.exp(top)
    cp = (float(np.sum(ax * w * v)) + e.weighted(w * v)) * math.exp(top)
    return cq * (1.0 + 1e-9), cp * (1.0 + 1e-9)


def _combine(run: _Run, a: _Level, b: _Level, keep: int, low_tail: float = 0.0) -> _Level:
    """The sum of two independent partial sums (same spacing), cut to ``keep`` grid points;
    an upper run's with no limit also cut below where the exact level's lower tail is at
    most ``low_tail`` (Chernoff, from its log-MGF bounds: a size-only cut, the same on
    every run on the same coordinate).

    The marked coordinate is in the first part with probability ``m_a / m``:
    ``p = (m_a/m) p_a * q_b + (m_b/m) q_a * p_b`` (one convolution for a square).
    """
    m = a.m + b.m
    k0 = a.k0 + b.k0
    # (every convolution of the level in one call: each array is transformed once)
    items = [(a.q, a.eq, b.q, b.eq)]
    if a.p is not None:
        assert b.p is not None
        items += [(a.p, a.ep, b.q, b.eq)] if a is b else [(a.p, a.ep, b.q, b.eq), (a.q, a.eq, b.p, b.ep)]
    deviations = run.merge and not (a.dev is None and b.dev is None)
    if deviations:
        # |m - v| Q of a sum atom <= (dev_a * Q_b + Q_a * dev_b)
        da, ea = _dev(a, run.d)
        if a is b:
            items.append((da, Err.of_l2(ea, da.size), a.q, a.eq))
        else:
            db, eb = _dev(b, run.d)
            items += [(da, Err.of_l2(ea, da.size), b.q, b.eq), (a.q, a.eq, db, Err.of_l2(eb, db.size))]
    done = iter(convolve_errs(items, run.extended))
    q, eq = next(done)
    p, ep = None, _NO_ERR
    if a.p is not None:
        if a is b:
            p, ep = next(done)
        else:
            (p1, e1), (p2, e2) = next(done), next(done)
            p = (a.m / m) * p1 + (b.m / m) * p2
            ep = e1.mixed(a.m / m, e2, b.m / m, p1, p2)
    dev, edev, rho_s = None, 0.0, 0.0
    if run.merge and not deviations:
        # rho_a v_a Q_a * Q_b + Q_a * rho_b v_b Q_b <= max(rho) v (Q_a * Q_b): no array needed
        rho_s = max(a.rho_s, b.rho_s)
    elif deviations:
        if a is b:
            dev, ed = next(done)
            dev, edev = 2.0 * dev, 2.0 * ed.l2
        else:
            (d1, e1), (d2, e2) = next(done), next(done)
            dev = d1 + d2
            edev = e1.l2 + e2.l2 + 2.0 * _U * float(l1_l2_norms(dev)[1])
    lost_q = lost_p = 0.0
    lmgf = None
    # (entries top.. and ..cut - 1 of the arrays are cut)
    top = max(0, keep - k0)
    cut = 0
    if run.upper and run.exact_below_limit and top < q.size:
        # a lower-tail run reads its entries below the limit as exact: what its window cuts
        # below the limit (a partial sum past its window, the whole sum still under the
        # limit: one large coordinate) is carried as error, not lost
        read = min(q.size, int(run.limit / (a.step * run.d)) + 2 - k0)
        eq = eq.cut(q[top:read])
        if p is not None:
            ep = ep.cut(p[top:read])
    if run.upper and run.limit == math.inf:
        # cut parts: one factor's cut part times the other's total (Q), and the
        # marked mixture of the same (P)
        lost_q = a.lost_q * run.tq(b.m) + run.tq(a.m) * b.lost_q
        lost_p = ((a.m / m) * (a.lost_p * run.tq(b.m) + run.tp(a.m) * b.lost_q)
                  + (b.m / m) * (a.lost_q * run.tp(b.m) + run.tq(a.m) * b.lost_p))
        cq, cp = _cut_mass(run, q, eq, m, a.step, top, None, k0)
        assert a.lmgf is not None and b.lmgf is not None and run.chern is not None
        lmgf = a.lmgf + b.lmgf
        neg = run.chern < 0  # (the negative parameters bound the lower tail)
        if low_tail > 0:
            # Q(S < s) <= e^{L(-eta) + eta s} <= low_tail for s up to (log low_tail - L(-eta)) / eta
            s_lo = float(np.max((math.log(low_tail) - lmgf[neg]) / -run.chern[neg]))
            if s_lo > 0:
                cut = min(max(0, int(s_lo / (a.step * run.d)) - k0), top)
        if cut > 0:
            # below: directly, or Q(S < s) <= e^{L(theta') - theta' s} at theta' < 0, and
            # E[S/m; S < s] <= (s/m) Q(S < s)
            lq, lp = _cut_mass(run, q, eq, m, a.step, 0, cut, k0)
            sl = (k0 + cut) * a.step * run.d
            bound = math.exp(min(float(np.min(lmgf[neg] - run.chern[neg] * sl)), 700.0)) * (1 + 1e-9)
            lost_q += min(lq, bound)
            lost_p += min(lp, sl / m * bound * (1 + 1e-9))
        if top < q.size:
            # Chernoff: Q(S >= s) <= e^{L(theta') - theta' s}; and since s' <= s e^{(s' - s)/s},
            # E[S/m; S >= s] <= (s/m) e^{L(theta'') - theta'' s} for theta'' >= 1/s
            sc = (k0 + top) * a.step * run.d
            expo = np.where(run.chern > 0, lmgf - run.chern * sc, np.inf)
            cq = min(cq, math.exp(min(float(np.min(expo)), 700.0)) * (1 + 1e-9))
            ok = run.chern >= 1.0 / sc
            if np.any(ok):
                cp = min(cp, sc / m * math.exp(min(float(np.min(expo[ok])), 700.0)) * (1 + 1e-9))
        lost_q += cq
        lost_p += cp
    q = q[cut:top].copy()
    if p is not None:
        p = p[cut:top].copy()
    if dev is not None:
        assert k0 == 0 and cut == 0
        dev = np.abs(dev[:top])  # (|.|: a bound stays a bound; the error bound covers the rest)
    return _Level(q, p, eq, ep, m, a.step, lost_q, lost_p, lmgf if run.upper else None, dev, edev, rho_s,
                  k0 + cut)


def _sum_levels(run: _Run, x: _Level, coarse_sd: float) -> _Level:
    """The ``t``-fold sum by repeated squaring, each level on its own window and spacing.

    A level of ``m`` coordinates is cut to ``[0, window(a, m, t)]`` and
    re-gridded to twice its spacing while that spacing stays below
    ``coarse_sd`` standard deviations of the partial sum (evolving
    discretisation).  The schedule depends on sizes only, so every tilt runs
    through the same grids.  An upper run with no limit also cuts each level
    below its bulk, where the exact level's lower tail is at most ``_LOW_SHARE``
    of the window's tail share (:func:`_combine`): a long round's partial sums sit
    far from zero, and their arrays would otherwise grow with ``m`` rather than
    with its root.
    Entry 0 of the level returned is at 0 again.
    """
    a, d, t = run.a, run.d, run.t
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    below = run.upper and run.limit == math.inf
    # (a lower-tail run's cuts are error on entries it reads as exact: deeper windows)
    tail = _tail.get() * _LIMIT_TAIL_SHARE if run.exact_below_limit else None

    def fit(lv: _Level) -> _Level:
        # (the size test counts the cells cut below: the schedule stays the one of sizes alone)
        while 2 * lv.step * d <= coarse_sd * sd1 * math.sqrt(lv.m) and lv.k0 + lv.q.size > 64:
            lv = _coarsen(run, lv)
        return lv

    def to_step(lv: _Level, step: int) -> _Level:
        while lv.step < step:
            lv = _coarsen(run, lv)
        return lv

    def keep(m: int, step: int) -> int:
        if run.exact_below_limit and not run.upper:
            return int(run.limit / (step * d)) + 2
        w = window(a, m, t, tail)
        if run.cap < math.inf:
            w = min(w, m * run.cap, _bulk(a, m, t, tail) + _CAP_JUMPS * run.cap)
        return int(min(w, run.limit) / (step * d)) + 2

    def low(m: int) -> float:
        return _LOW_SHARE * _tail.get() * m / t if below else 0.0

    def add(r: _Level, c: _Level) -> _Level:
        r = to_step(r, c.step)
        c = to_step(c, r.step)
        m = r.m + c.m
        return fit(_combine(run, r, c, keep(m, c.step), low(m)))

    lv = by_squaring(x, t, lambda c: fit(_combine(run, c, c, keep(2 * c.m, c.step), low(2 * c.m))), add)
    if lv.k0:
        head = np.zeros(lv.k0)
        lv = dataclasses.replace(lv, q=np.concatenate((head, lv.q)), k0=0,
                                 p=None if lv.p is None else np.concatenate((head, lv.p)))
    return lv


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


def _pad(x: np.ndarray, n: int) -> np.ndarray:
    return x if x.size == n else np.concatenate((x[:n], np.zeros(max(0, n - x.size))))
