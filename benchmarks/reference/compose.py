"""Tilted FFT composition with a rigorous round-off bound, and delta read off on both sides.

A law on the grid (log masses ``logm`` at indices ``k0 + i``) is tilted, p_k e^{lam l_k - K}, so
that the composition's round-off is relative to the mass near the target epsilon, composed by one
FFT power per phase on a circle of N = 2^m points (the circle wraps what falls outside the window,
which the Chernoff bound of :func:`_log_chernoff` accounts for), and untilted in log space.

Round-off (per entry of the composed, tilted law; u = 2^-53).  For N a power of two, Higham
("Accuracy and Stability of Numerical Algorithms", 2nd ed., Thm 24.2, section 24.1) bounds the
computed radix-2 FFT by ||fl(F x) - F x||_2 <= gamma_N ||F x||_2, gamma_N = log2(N) eta /
(1 - log2(N) eta), eta = mu + gamma_4 (sqrt(2) + mu), mu the twiddle-factor error (taken as 4u).
pocketfft (scipy.fft) uses radix-4 passes for powers of two; we double the constant for that
(:func:`fft_gamma`) and check it against exact integer convolutions in the tests.  With
|X_i| <= s_i = sum of x_i, M_i = min(s_i, |X^_i| + ||e_i||_2) >= max(|X_i|, |X^_i|) and
prod a_i^T_i - prod b_i^T_i = sum of telescoping terms,

    |prod X^_i^T_i - prod X_i^T_i|_k <= sum_i T_i |e_i,k| M_i,k^(T_i - 1) prod_{j != i} M_j,k^T_j,

and the inverse DFT's entries are at most (1/N) sum_k |.| (Cauchy-Schwarz: <= T_i ||e_i||_2 ||B_i||_2 / N
with ||e_i||_2 <= gamma_N sqrt(N) ||x_i||_2).  Binary powering adds a relative
(1 + sqrt(2) gamma_2)^(T + 2 log2 T) - 1 (Higham Lemma 3.5 for one complex product) and the inverse
FFT gamma_N ||y||_2.  The sum of the three is ``E_abs``; the dominating side adds it to every
entry, the dominated side subtracts it before clipping at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.fft
import scipy.optimize
import scipy.special as sc

from .pairs import U


def _gamma(k: int) -> float:
    return k * U / (1.0 - k * U)


def fft_gamma(N: int) -> float:
    """Normwise relative error bound of scipy's complex FFT of length N = 2^m (module doc)."""
    m = int(round(math.log2(N)))
    if 2**m != N:
        raise ValueError("N must be a power of two")
    mu = 4.0 * U
    eta = mu + _gamma(4) * (math.sqrt(2.0) + mu)
    g = m * eta / (1.0 - m * eta)
    return 2.0 * g


@dataclass
class Phase:
    """T steps of one law on the grid: log masses at indices k0 + i, plus log mass at +inf."""

    logm: np.ndarray
    k0: int
    T: int
    log_inf: float = -math.inf
    theta: float = 0.0   # grid offset: index k is the loss (k + theta) h

    def losses(self, h: float) -> np.ndarray:
        return (self.k0 + np.arange(self.logm.size) + self.theta) * h


def log_mgf(ph: Phase, h: float, t: float) -> float:
    """log sum_k m_k e^{t l_k} over the finite part."""
    l = ph.losses(h)
    return float(sc.logsumexp(ph.logm + t * l))


def tilted_moments(phases: list[Phase], h: float, lam: float) -> tuple[float, float, float]:
    """(sum T K(lam), sum T K'(lam), sum T K''(lam)) of the finite parts."""
    K = m1 = m2 = 0.0
    for ph in phases:
        l = ph.losses(h)
        z = ph.logm + lam * l
        k = float(sc.logsumexp(z))
        with np.errstate(under="ignore"):
            w = np.exp(z - k)
        mu = float(np.sum(w * l))
        var = float(np.sum(w * (l - mu) ** 2))
        K += ph.T * k
        m1 += ph.T * mu
        m2 += ph.T * var
    return K, m1, m2


def _power(X: np.ndarray, T: int) -> np.ndarray:
    """X^T elementwise by binary powering (complex products only)."""
    result = None
    base = X.copy()
    e = T
    while e:
        if e & 1:
            if result is None:
                result = base.copy()
            else:
                np.multiply(result, base, out=result)
        e >>= 1
        if e:
            np.multiply(base, base, out=base)
    return result


def _log_chernoff(zs: list[np.ndarray], ls: list[np.ndarray], Ts: list[int], a: float, upper: bool,
                  scale: float) -> float:
    """log of a bound on the composed (non-circular) mass of {S >= a} (upper) or {S < a}.

    Markov on e^{tS}: mass(S >= a) <= e^{-t a} prod_i (sum_k x_ik e^{t l_k})^T_i for t >= 0
    (t <= 0 for the lower tail); any t gives a valid bound, a bounded scalar search picks a good one.
    """
    def f(t: float) -> float:
        s = sum(T * float(sc.logsumexp(z + t * l)) for z, l, T in zip(zs, ls, Ts))
        return s - t * a + 1e-9 * abs(s) + 1e-9 * abs(t * a)

    tmax = 400.0 / scale
    bounds = (0.0, tmax) if upper else (-tmax, 0.0)
    best = min(f(0.0), f(bounds[0]), f(bounds[1]))
    for _ in range(2):
        res = scipy.optimize.minimize_scalar(f, bounds=bounds, method="bounded", options={"xatol": 1e-8 * tmax})
        best = min(best, float(res.fun))
        bounds = (bounds[0] / 10.0, bounds[1] / 10.0)
    return best


@dataclass
class Composed:
    """Tilted composition of one law (all phases) on the window of grid indices [J0, J0 + N)."""

    h: float
    lam: float
    J0: int
    N: int
    c: np.ndarray        # computed tilted law on the window
    E_abs: float         # entrywise round-off bound (tilted scale)
    TK: float            # sum_i T_i K_i: untilting factor e^{TK - lam x}
    log_above: float     # log bound on the tilted mass at or above the window top
    log_outside: float   # log bound on the tilted mass outside the window (wrapped into it)
    log_inf_term: float  # log bound on the probability that some step is at +inf (dominating side)
    eta_total: float     # sum_i T_i eta_i: how far the composed atoms may sit from their grid points
    info: dict
    offset: float = 0.0  # composed index J is the loss J h + offset


def compose(phases: list[Phase], h: float, lam: float, J0: int, N: int, *, upper: bool,
            eta_total: float) -> Composed:
    """Compose the phases (tilt ``lam`` >= 0) onto the circle of N points starting at grid index J0.

    ``upper``: the law is the dominating one (inputs rounded up, and the +inf mass accounted) or
    the dominated one (inputs rounded down).
    """
    if lam < 0:
        raise ValueError("tilt must be >= 0")
    g = fft_gamma(N)
    Y = None
    logMs = []
    l2s, Ts, zs, ls = [], [], [], []
    TK = 0.0
    under = 0.0
    shift_total = 0
    log_total_mass = 0.0  # sum_i T_i log(total untilted mass of phase i), for the +inf term
    for ph in phases:
        l = ph.losses(h)
        z = ph.logm + lam * l
        K = float(sc.logsumexp(z))
        z = z - K
        # exp(z) is computed from an argument carrying ~ u (|logm| + |lam l| + |K|): bound it
        with np.errstate(invalid="ignore"):
            r = 4.0 * U * (np.abs(ph.logm) + np.abs(lam * l) + abs(K) + 2.0)
        r = np.where(np.isfinite(r), r, 0.0)
        with np.errstate(under="ignore"):
            x = np.exp(z)
        tiny = (z < -700.0) & np.isfinite(z)
        x = x * (1.0 + r) if upper else x * (1.0 - r)
        x[tiny] = 0.0
        under += ph.T * float(np.count_nonzero(tiny)) * math.exp(-700.0)
        zs.append(np.where(np.isfinite(z), z + np.log1p(r), -np.inf))
        ls.append(l)
        # fold onto the circle: index k -> (k - k0) mod N; the composition's index sum_i T_i k0_i
        n = x.size
        folds = max(1, math.ceil(n / N))
        if folds == 1:
            xs = np.zeros(N)
            xs[:n] = x
        else:
            xs = np.concatenate([x, np.zeros(folds * N - n)]).reshape(folds, N).sum(axis=0)
            xs *= (1.0 + 2.0 * folds * U) if upper else (1.0 - 2.0 * folds * U)
        shift_total += ph.T * ph.k0
        s = float(np.sum(xs)) * (1.0 + 2.0 * N * U)
        l2 = float(np.sqrt(np.sum(xs * xs))) * (1.0 + 2.0 * N * U)
        X = scipy.fft.fft(xs.astype(np.complex128), workers=1)
        del xs
        e2 = g * math.sqrt(N) * l2 * (1.0 + 1e-6)
        with np.errstate(divide="ignore"):
            logMs.append(np.log(np.minimum(s, np.abs(X) + e2)))
        l2s.append(l2)
        Ts.append(ph.T)
        P = _power(X, ph.T)
        del X
        if Y is None:
            Y = P
        else:
            np.multiply(Y, P, out=Y)
        del P
        TK += ph.T * K
        if upper:
            total = float(sc.logsumexp(np.append(ph.logm, ph.log_inf)))
            log_total_mass += ph.T * max(total, 0.0)
    # forward-FFT error through the powers (Cauchy-Schwarz with B_i)
    logMprod = sum(T * lm for T, lm in zip(Ts, logMs))
    term1 = 0.0
    for T, lm, l2 in zip(Ts, logMs, l2s):
        with np.errstate(under="ignore"):
            B = np.exp(logMprod - lm) * (1.0 + 1e-9)
        term1 += T * g * l2 * float(np.sqrt(np.sum(B * B))) * (1.0 + 2.0 * N * U) / math.sqrt(N)
        del B
    del logMs, logMprod
    nmul = sum(T + 2 * max(1, math.ceil(math.log2(max(T, 2)))) for T in Ts) + len(Ts)
    gpow = math.expm1(nmul * math.log1p(math.sqrt(2.0) * _gamma(2)))
    absY = np.abs(Y)
    term2 = gpow * (1.0 + gpow) * float(np.sum(absY)) / N * (1.0 + 2.0 * N * U)
    del absY
    y = scipy.fft.ifft(Y, workers=1)
    del Y
    yr = np.ascontiguousarray(y.real)
    del y
    term3 = g * float(np.sqrt(np.sum(yr * yr))) * 1.01 + 4.0 * U * float(np.max(np.abs(yr)))
    E_abs = (term1 + term2 + term3) * 1.01 + under + 1e-300
    # entry i of the window is grid index J0 + i, which sits at (J0 + i - shift_total) mod N
    rot = (J0 - shift_total) % N
    c = np.roll(yr, -rot)
    del yr
    # tilted mass outside the window (Chernoff on the exact, unwrapped composition)
    scale = max(h, math.sqrt(max(tilted_moments(phases, h, lam)[2], 1e-300)))
    offset = composed_offset(phases, h)
    x_top = (J0 + N) * h + offset
    x_bot = J0 * h + offset
    log_above = _log_chernoff(zs, ls, Ts, x_top, True, scale)
    log_below = _log_chernoff(zs, ls, Ts, x_bot, False, scale)
    log_outside = float(np.logaddexp(log_above, log_below))
    log_inf_term = -math.inf
    if upper:
        infs = [(ph.T, ph.log_inf) for ph in phases if ph.log_inf > -math.inf]
        if infs:
            # P(some step at +inf) <= sum_i T_i m_inf,i * prod (total mass)^(T - 1)
            log_inf_term = float(sc.logsumexp([math.log(T) + li for T, li in infs])) + log_total_mass + 1e-12
    info = {"term1": term1, "term2": term2, "term3": term3, "gamma_N": g}
    return Composed(h=h, lam=lam, J0=J0, N=N, c=c, E_abs=E_abs, TK=TK, log_above=log_above,
                    log_outside=log_outside, log_inf_term=log_inf_term, eta_total=eta_total, info=info,
                    offset=offset)


def composed_offset(phases: list[Phase], h: float) -> float:
    """Loss of composed index 0: sum_i T_i theta_i h (composed index J is the loss J h + offset)."""
    return float(sum(ph.T * ph.theta for ph in phases)) * h


#: relative slack on every delta sum (rounding of the log-sum-exp over <= 2^26 terms whose
#: arguments are below 1e4 in size: < 1e-11; taken 1e-9)
SUM_RTOL = 1e-9


class DeltaReader:
    """delta(eps) bounds read off a composed law.

    Dominating side: delta_U(eps) = e^{TK} [sum_{x_i > eps} (c_i + E) e^{-lam x_i} (1 - e^{eps - x_i})
    + e^{-lam x_top} above] + P(some step at +inf), evaluated at eps - eta_total (the law's atoms
    may sit eta above their grid points).  Dominated side: e^{TK} [sum (c_i - E)_+ ... -
    e^{-lam eps} outside], at eps + eta_total.
    """

    def __init__(self, comp: Composed, upper: bool):
        self.comp = comp
        self.upper = upper
        h = comp.h
        self.x = (comp.J0 + np.arange(comp.N)) * h + comp.offset
        with np.errstate(divide="ignore"):
            if upper:
                self.base = np.log(comp.c + comp.E_abs) - comp.lam * self.x
            else:
                self.base = np.log(np.maximum(comp.c - comp.E_abs, 0.0)) - comp.lam * self.x

    def log_delta(self, eps: float) -> float:
        c = self.comp
        e = eps - c.eta_total if self.upper else eps + c.eta_total
        i0 = int(np.searchsorted(self.x, e, side="right"))
        if i0 == 0 and self.upper:
            raise ValueError("eps below the window")
        xs = self.x[i0:]
        with np.errstate(divide="ignore"):
            terms = self.base[i0:] + np.log(-np.expm1(e - xs))
        s = float(sc.logsumexp(terms)) if terms.size else -math.inf
        if self.upper:
            above = c.log_above - c.lam * ((c.J0 + c.N) * c.h + c.offset)
            s = float(np.logaddexp(s, above)) + math.log1p(SUM_RTOL)
            s += c.TK
            return float(np.logaddexp(s, c.log_inf_term))
        if s == -math.inf:
            return -math.inf
        s += math.log1p(-SUM_RTOL)
        sub = c.log_outside - c.lam * e
        if sub >= s:
            return -math.inf
        return s + math.log1p(-math.exp(sub - s)) + c.TK
