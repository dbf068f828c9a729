"""One step's dominating and dominated laws on the loss grid l_k = k h.

Cells.  Grid point k has the edge y_k = Y(l_k) (double; :meth:`Pair.inverse_loss`), cell j is the
x-interval [y_j, y_{j+1}]; on it the true loss lies in [lam_j, lam_{j+1}] with lam_j = L(y_j) and
|lam_j - l_j| <= eta (measured, :meth:`Pair.edge_offsets`).  Each cell is cut into three parts,
Lo = [y_j, y_j + 3W/8], Bd = [.., y_j + 5W/8], Hi = [.., y_{j+1}] (W the width), and on each part
three positive integrals are computed by Gauss-Legendre quadrature (:func:`_integrate_parts`):

    P(S) = int_S p,   E(S) = int_S (p - e^{lam_j} q),   D(S) = int_S (e^{lam_{j+1}} q - p),

E and D from the cancellation-free form of :mod:`pairs`.

Upper (dominating) law: connect-the-dots (Doroshenko et al., PETS 2022), i.e. each cell's P-mass
is split between its end points so that both P- and Q-mass are kept:
beta_j = E_j / (1 - e^{-h_j}) goes to lam_{j+1}, alpha_j = P_j - beta_j to lam_j (h_j = lam_{j+1} -
lam_j).  Given the loss L, the split is a mean-preserving spread of u = e^{-L} under P; the
hockey-stick functional of the composition, E[(1 - e^eps prod_i u_i)_+], is convex in each u_i, so
by Jensen (step by step, the steps being independent) the spread law's delta is >= the true one.
beta is rounded up (more mass one cell higher, i.e. a loss rounded up) and P_j is rounded up, which
keeps the law dominating in the increasing-function order; mass above the top edge goes to +inf,
mass below the bottom edge up to the lowest point.

Lower (dominated) law: a randomised post-processing K of the output.  Part Lo_j goes to bucket j,
Hi_j to bucket j+1, Bd_j to bucket j+1 with probability tau_j (else to bucket j).  Bucket k's pair
(P(B_k), Q(B_k)) has loss >= lam_k iff X_k = P(B_k) - e^{lam_k} Q(B_k) >= 0, i.e.

    X_k = E(Lo_k) + (1 - tau_k) E(Bd_k) - D(Hi_{k-1}) - tau_{k-1} D(Bd_{k-1}) >= 0,

(E of cell k and D of cell k-1 are both taken at the edge y_k).  The taus are chosen by a walk
(:func:`_walk`) so that X_k is zero (a tiny positive margin) wherever it can be, which puts the
bucket's merged loss exactly on lam_k; a bucket that cannot be balanced is placed one point lower
(all its losses exceed lam_{k-1}).  Post-processing can only lower delta, composition of
post-processed steps is a post-processing of the composition, and rounding each bucket's loss down
to its grid point only lowers delta again, so the law is dominated.  Mass outside the range is
dropped.  DESIGN.md ("Discretisation") describes the deterministic variant of this merge; the
randomised band makes the walk an affine recursion (one float operation per bucket).

Every integral carries a relative error bound r (argument rounding of exp/log, Gauss-Legendre
remainder); upper-side quantities are multiplied by (1 + r), lower-side ones by (1 - r).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.special as sc

from .pairs import Pair, U

#: Gauss-Legendre nodes per panel
GL_N = 10
_XI, _WGL = np.polynomial.legendre.leggauss(GL_N)
#: panels are at most this many (sigma / (1 + |x|max/sigma + 1/sigma)) wide (see docs: the
#: Bernstein-ellipse remainder is then below 1e-22 relative)
PANEL_FRACTION = 1.0 / 32.0
#: relative bound on the Gauss-Legendre remainder per panel (docs/reference-oracle.md)
QUAD_RTOL = 1e-20
#: split points of a cell (fractions of its width): Lo | Bd | Hi
SPLIT = (0.375, 0.625)


@dataclass
class StepLaws:
    """Both laws of one step of one direction on the grid l_k = k h.

    ``up_logm[i]`` is the log mass at grid index ``up_k0 + i`` (dominating), ``up_log_inf`` the log
    mass at +inf; ``lo_logm`` / ``lo_k0`` likewise for the dominated law (no mass at +inf).  ``eta``
    bounds |lam_j - l_j| over all edges: the dominating law's true atoms sit at most eta above their
    grid points and the dominated law's at most eta below.
    """

    h: float
    up_k0: int
    up_logm: np.ndarray
    up_log_inf: float
    lo_k0: int
    lo_logm: np.ndarray
    eta: float
    info: dict = field(default_factory=dict)
    theta: float = 0.0


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """log(1 - e^{-a}) for a > 0."""
    a = np.asarray(a, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(a < 0.693, np.log(-np.expm1(-a)), np.log1p(-np.exp(-a)))


def _integrate_parts(pair: Pair, base: np.ndarray, ws: np.ndarray, s0: np.ndarray, s1: np.ndarray,
                     wt0: np.ndarray, wt1: np.ndarray, top: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """log of int over x in [base + s0, base + s1] of one integrand, for many parts at once.

    ``what``: "P" (p), "E" (p - e^{L(base)} q, reference at the cell's lower edge ``base``) or "D"
    (e^{L(top)} q - p, reference at the upper edge ``top``; ``wt0``/``wt1`` are the part's end
    offsets measured down from the top, so that x - top is formed without cancellation).
    Returns (log integral, relative error bound).  Parts wider than the panel limit are split into
    equal panels.
    """
    sig, s2 = pair.sigma, pair.s2
    width = s1 - s0
    xmax = np.maximum(np.abs(base + s0), np.abs(base + s1))
    wmax = sig * PANEL_FRACTION / (1.0 + (xmax + 1.0) / sig)
    npan = np.maximum(1, np.ceil(width / wmax)).astype(np.int64)
    nparts = base.size
    out = np.full(nparts, -np.inf)
    if nparts == 0:
        return out, np.zeros(0)
    starts = np.concatenate([[0], np.cumsum(npan)[:-1]])
    total = int(npan.sum())
    part = np.repeat(np.arange(nparts), npan)
    j = np.arange(total) - starts[part]          # panel index within its part
    pw = (width / npan)[part]                      # panel width
    ps0 = s0[part] + j * pw                        # panel start offset (from base)
    # node offsets: from the bottom (for P, E) and from the top (for D)
    half = 0.5 * pw[:, None]
    off = ps0[:, None] + half * (1.0 + _XI[None, :])
    x = base[part][:, None] + off
    lphi = pair.log_phi(x)
    if what == "P":
        lf = lphi + pair.log_rho_p(x)
    elif what == "E":
        b0 = base[part][:, None]
        lf = lphi - pair.log_rho_q(b0) + pair.log_abs_num(b0, off / s2)
    else:
        # offset below the top: (wt0 - j pw) - half (1 + xi), wt0 = top - (base + s0)
        tt = top[part][:, None]
        down = (wt0[part] - j * pw)[:, None] - half * (1.0 + _XI[None, :])
        lf = lphi - pair.log_rho_q(tt) + pair.log_abs_num(tt, -down / s2)
    m = np.max(lf, axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(under="ignore"):
        sval = np.exp(lf - m[:, None]) @ _WGL
    with np.errstate(divide="ignore"):
        lpan = m + np.log(sval) + np.log(half[:, 0])
    if total == nparts:
        out = lpan
    else:
        pm = np.maximum.reduceat(lpan, starts)
        pm = np.where(np.isfinite(pm), pm, 0.0)
        with np.errstate(under="ignore", divide="ignore"):
            out = pm + np.log(np.add.reduceat(np.exp(lpan - pm[part]), starts))
    # relative error: arguments of exp/log of size |x|^2/(2 s2) + (|x| + 1)/s2 + |log c| + |log d|,
    # each rounded to a few ulps (x itself carries u |x|), plus the quadrature remainder
    lc = abs(pair.log_c) if pair.q < 1 else 0.0
    mag = (1.0 + 0.5 * xmax * xmax / s2 + 3.0 * (xmax + 1.0) / s2 + lc + abs(pair.log_d)
           + np.where(np.isfinite(out), np.abs(out), 0.0))
    rel = 16.0 * U * mag + QUAD_RTOL
    return out, rel


def _walk(eL: np.ndarray, eB: np.ndarray, dH: np.ndarray, dB: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """Band fractions tau_k for the dominated merge (module doc), in a per-bucket scale.

    Arrays are indexed by bucket k = 0..n-1: eL[k], eB[k] (cell k at edge k), dH[k], dB[k] (cell
    k-1 at edge k; zero for k = 0).  The top bucket n-1 takes its whole cell (eB[n-1] = 0,
    tau_{n-1} = 0).  Balancing bucket k from its lower neighbour (up-walk) amplifies errors by
    g_k = dB[k]/eB[k]; from its upper neighbour (down-walk) by 1/g_k.  Buckets with g_k < 1 are
    solved upwards, the others downwards; where an up-run meets a down-run above it, the down-run's
    value wins and the last bucket of the up-run is left as it falls (checked afterwards); where a
    down-run meets an up-run above it, the shared tau is free (1/2).
    """
    n = eL.size
    tau = np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        up = dB < eB
    up[0] = True
    up[n - 1] = False
    eLl, eBl, dHl, dBl, mgl = eL.tolist(), eB.tolist(), dH.tolist(), dB.tolist(), margin.tolist()
    upl = up.tolist()
    t = [0.0] * n
    # free taus at down->up boundaries
    for k in range(n - 1):
        if not upl[k] and upl[k + 1]:
            t[k] = 0.5
    # up-runs
    for k in range(n):
        if not upl[k]:
            continue
        prev = t[k - 1] if k > 0 else 0.0
        if eBl[k] <= 0.0:
            t[k] = 0.0
            continue
        v = (eLl[k] + eBl[k] - dHl[k] - prev * dBl[k] - mgl[k]) / eBl[k]
        t[k] = 1.0 if v > 1.0 else (0.0 if v < 0.0 else v)
    # down-runs, from the top of each run
    k = n - 1
    while k >= 1:
        if upl[k]:
            k -= 1
            continue
        # k is the top of a down-run: t[k] is set (0 at the top, 1/2 at a down->up boundary)
        while k >= 1 and not upl[k]:
            if dBl[k] <= 0.0:
                t[k - 1] = 0.0
            else:
                v = (eLl[k] + (1.0 - t[k]) * eBl[k] - dHl[k] - mgl[k]) / dBl[k]
                t[k - 1] = 1.0 if v > 1.0 else (0.0 if v < 0.0 else v)
            k -= 1
    # junctions (an up-run's last bucket m below a down-run): if bucket m is short (X_m < 0), take
    # one more down-step, lowering tau_{m-1} so that m balances; bucket m-1 then only gains
    # (X_{m-1} rises by the drop times eB[m-1] > 0), so it stays valid
    for m in range(1, n - 1):
        if upl[m] and not upl[m + 1] and dBl[m] > 0.0:
            xm = eLl[m] + (1.0 - t[m]) * eBl[m] - dHl[m] - t[m - 1] * dBl[m]
            if xm < mgl[m]:
                v = (eLl[m] + (1.0 - t[m]) * eBl[m] - dHl[m] - mgl[m]) / dBl[m]
                t[m - 1] = min(t[m - 1], max(0.0, v))
    tau[:] = t
    tau[n - 1] = 0.0
    return tau


def build_step(pair: Pair, h: float, *, tail_mass: float, low_mass: float, theta: float = 0.0,
               chunk: int = 400_000) -> StepLaws:
    """Dominating and dominated laws of one step of ``pair`` on the grid l_k = (k + theta) h.

    ``theta`` in [0, 1) offsets the grid (so that a grid point can sit just inside the end of a
    bounded loss range, where subsampled steps pile up their mass: :func:`grid_offset`).

    ``tail_mass``: P-mass allowed above the top edge (moved to +inf / dropped);
    ``low_mass``: P-mass allowed below the bottom edge (moved up / dropped).
    """
    sig = pair.sigma
    # ---- grid range
    zt = -float(sc.ndtri(min(tail_mass, 0.1)))
    zl = -float(sc.ndtri(min(low_mass, 0.1)))
    special_bottom = math.isfinite(pair.loss_inf)
    special_top = math.isfinite(pair.loss_sup)
    x_far = 38.0 * sig + 1.0
    if special_bottom:
        k_lo = math.floor(pair.loss_inf / h - theta)
        if (k_lo + theta) * h >= pair.loss_inf:
            k_lo -= 1
    else:
        x_low = -1.0 - zl * sig
        k_lo = math.floor(float(pair.loss(x_low)) / h - theta)
    if special_top:
        k_hi = math.ceil(pair.loss_sup / h - theta)
        if (k_hi + theta) * h <= pair.loss_sup:
            k_hi += 1
    else:
        x_cut = 1.0 + zt * sig
        k_hi = math.ceil(float(pair.loss(x_cut)) / h - theta)
    n = k_hi - k_lo  # cells 0..n-1, grid points 0..n
    if n < 2:
        raise ValueError("grid too coarse for this step")
    kk = np.arange(k_lo, k_hi + 1)
    lg = (kk + theta) * h
    y = pair.inverse_loss(lg)
    if special_bottom:
        y[0] = -math.inf
    if special_top:
        y[-1] = math.inf
    if not np.all(np.diff(y[np.isfinite(y)]) > 0):
        raise ValueError("grid edges not increasing (h below the resolution of double x)")
    off, off_err = pair.edge_offsets(y, lg)
    if special_bottom:
        off[0] = 0.0  # the spread point is the grid point itself
    if special_top:
        off[-1] = 0.0
    # (+ the rounding of the grid values (k + theta) h themselves, which stand for exact points)
    eta = float(np.max(np.abs(off))) + off_err + 4.0 * U * float(np.max(np.abs(lg)))
    # integration edges (finite)
    ya = y[:-1].copy()
    yb = y[1:].copy()
    # (the infinite end cell is integrated to 38 sigma beyond the means, or one sigma beyond its
    # finite edge when that lies further out; the P-mass beyond is bounded by log_ndtr below)
    if special_bottom:
        ya[0] = min(-x_far, yb[0] - sig)
    if special_top:
        yb[-1] = max(x_far, ya[-1] + sig)
    W = yb - ya
    # ---- integrals per part, in chunks
    names = ("P", "E", "D")
    res = {f"{w}{p}": np.empty(n) for w in names for p in range(3)}
    rel = {f"{w}{p}": np.empty(n) for w in names for p in range(3)}
    # split points at fixed fractions of the cell's *loss* range, l_j + 3h/8 and l_j + 5h/8 (where
    # the loss is far from linear in x, e.g. next to the infimum of the remove loss, fractions of
    # the x-width would put almost all of a cell's mass in one part); any split is a valid kernel
    f1, f2 = SPLIT
    c1 = pair.inverse_loss((kk[:-1] + theta + f1) * h)
    c2 = pair.inverse_loss((kk[:-1] + theta + f2) * h)
    c1 = np.minimum(np.maximum(c1, ya), yb)
    c2 = np.minimum(np.maximum(c2, c1), yb)
    for c0 in range(0, n, chunk):
        c1_ = min(n, c0 + chunk)
        a, wd, b = ya[c0:c1_], W[c0:c1_], yb[c0:c1_]
        o1 = np.minimum(np.maximum(c1[c0:c1_] - a, 0.0), wd)
        o2 = np.minimum(np.maximum(c2[c0:c1_] - a, o1), wd)
        t1 = np.minimum(np.maximum(b - c1[c0:c1_], 0.0), wd)   # distances below the top
        t2 = np.minimum(np.maximum(b - c2[c0:c1_], 0.0), t1)
        bounds = [(np.zeros_like(wd), o1), (o1, o2), (o2, wd)]
        tops = [(wd, t1), (t1, t2), (t2, np.zeros_like(wd))]
        for p in range(3):
            s0, s1 = bounds[p]
            wt0, wt1 = tops[p]
            for w in names:
                v, r = _integrate_parts(pair, a, wd, s0, s1, wt0, wt1, b, w)
                res[f"{w}{p}"][c0:c1_] = v
                rel[f"{w}{p}"][c0:c1_] = r
    # ---- remainders beyond the integrated range
    log_above = pair.log_p_above(float(yb[-1]))   # -> +inf (or to the top point if special_top)
    log_below = pair.log_p_below(float(ya[0]))    # -> lowest point (or to point 1 if special_bottom)
    r_tail = 1e-12

    # ---- dominating law (connect the dots)
    def up_(k: str) -> np.ndarray:
        return res[k] + np.log1p(rel[k])

    def dn_(k: str) -> np.ndarray:
        return res[k] + np.log1p(-np.minimum(rel[k], 0.5))

    lP = np.logaddexp.reduce(np.vstack([up_("P0"), up_("P1"), up_("P2")]), axis=0) + 4.0 * U
    lE = np.logaddexp.reduce(np.vstack([up_("E0"), up_("E1"), up_("E2")]), axis=0) + 4.0 * U
    lD_lo = np.logaddexp.reduce(np.vstack([dn_("D0"), dn_("D1"), dn_("D2")]), axis=0) - 4.0 * U
    hj = h + np.diff(off)
    h_lo = hj - 2.0 * off_err
    h_hi = hj + 2.0 * off_err
    if np.any(h_lo <= 0):
        raise ValueError("grid spacing below edge resolution")
    lbeta = lE - _log1mexp(h_lo)                   # beta = E / (1 - e^{-h_j}), rounded up
    if special_bottom:
        # beta_0 = P_0 - alpha_0 with alpha_0 = D_0 / (e^{h_0} - 1) rounded down
        la0 = lD_lo[0] - np.log(np.expm1(h_hi[0]))
        ratio0 = min(1.0, math.exp(la0 - lP[0]))
        lbeta[0] = lP[0] + (math.log1p(-ratio0) if ratio0 < 1.0 else -math.inf) + 4.0 * U
    ratio = np.minimum(1.0, np.exp(lbeta - lP))
    lbeta = np.minimum(lbeta, lP)
    with np.errstate(divide="ignore"):
        lalpha = lP + np.log1p(-ratio)             # alpha = P - beta (>= 0)
    up = np.full(n + 1, -np.inf)
    up[:n] = lalpha
    up[1:] = np.logaddexp(up[1:], lbeta)
    # below the range: losses below lam_0 (up to lam_1 for the special bottom)
    if log_below > -math.inf:
        i = 1 if special_bottom else 0
        up[i] = np.logaddexp(up[i], log_below + r_tail)
    up_log_inf = -math.inf
    if log_above > -math.inf:
        if special_top:
            up[n] = np.logaddexp(up[n], log_above + r_tail)
        else:
            up_log_inf = log_above + r_tail

    # ---- dominated law (randomised bucket merge)
    # per bucket k = 0..n-1: E parts of cell k (at edge k), D parts of cell k-1 (at edge k)
    eL_l = dn_("E0")
    eB_l = dn_("E1")
    dH_l = np.full(n, -np.inf)
    dB_l = np.full(n, -np.inf)
    dH_l[1:] = up_("D2")[:-1]
    dB_l[1:] = up_("D1")[:-1]
    # top bucket n-1 keeps its whole cell
    eL_l[n - 1] = np.logaddexp.reduce([dn_("E0")[n - 1], dn_("E1")[n - 1], dn_("E2")[n - 1]])
    eB_l[n - 1] = -math.inf
    if special_bottom:
        # bucket 0 sits below every loss: always balanced; give it a large positive E
        eL_l[0] = max(eL_l[0], dH_l[0]) + 50.0
    scale = np.max(np.vstack([eL_l, eB_l, dH_l, dB_l]), axis=0)
    scale = np.where(np.isfinite(scale), scale, 0.0)
    with np.errstate(under="ignore"):
        eL, eB, dH, dB = (np.exp(v - scale) for v in (eL_l, eB_l, dH_l, dB_l))
    margin = 1e-12 * (eL + eB + dH + dB)
    tau = _walk(eL, eB, dH, dB, margin)
    tau_prev = np.concatenate([[0.0], tau[:-1]])
    X = eL + (1.0 - tau) * eB - dH - tau_prev * dB
    ok = X >= 8.0 * U * (eL + eB + dH + dB)
    ok[0] = True  # bucket 0 holds only losses above lam_0
    # bucket P-masses (rounded down)
    pLo, pBd, pHi = dn_("P0"), dn_("P1"), dn_("P2")
    with np.errstate(divide="ignore"):
        lt = np.log(tau)
        l1t = np.log1p(-tau)
    own = np.logaddexp(pLo, pBd + l1t)
    own[n - 1] = np.logaddexp.reduce([pLo[n - 1], pBd[n - 1], pHi[n - 1]])
    inc = np.full(n, -np.inf)
    inc[1:] = np.logaddexp(pHi[:-1], pBd[:-1] + lt[:-1])
    mass = np.logaddexp(own, inc) - 4.0 * U
    # placement: bucket k at point k (index k+1 of the array starting at point -1) or k-1
    lo = np.full(n + 1, -np.inf)
    idx = np.arange(n) + np.where(ok, 1, 0)
    good = np.isfinite(mass)
    np.logaddexp.at(lo, idx[good], mass[good])
    info = {"cells": n, "k_lo": k_lo, "k_hi": k_hi, "eta": eta, "unbalanced": int(np.count_nonzero(~ok)),
            "unbalanced_mass": float(sc.logsumexp(mass[~ok])) if np.any(~ok) else -math.inf,
            "log_above": log_above, "log_below": log_below,
            "max_rel": float(np.max([np.max(r) for r in rel.values()]))}
    return StepLaws(h=h, up_k0=k_lo, up_logm=up, up_log_inf=up_log_inf, lo_k0=k_lo - 1, lo_logm=lo,
                    eta=eta, info=info, theta=theta)


def grid_offset(pair: Pair, h: float) -> float:
    """Offset theta putting a grid point h/1000 inside the bounded end of the loss range (the
    infimum log(1-q) of remove, the supremum -log(1-q) of add), 0 for unbounded ranges.

    Near that end the loss is nearly constant over a wide range of outputs, so a subsampled step
    piles much of its mass within a cell of it; with a grid point just inside, the dominated law
    rounds that mass down by at most h/1000 and the dominating law spreads it over one cell.
    """
    if math.isfinite(pair.loss_inf):
        return (pair.loss_inf / h - 1e-3) % 1.0
    if math.isfinite(pair.loss_sup):
        return (pair.loss_sup / h - 1e-3) % 1.0
    return 0.0
