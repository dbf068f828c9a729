"""Independent oracles for privacy accounting: numpy/scipy only, never ``import pld``.

Three kinds of reference, used by the tests and by ``benchmarks/coverage.py`` to judge pld's
certified brackets:

1. **Exact closed forms** (:func:`gaussian_delta`, :func:`gaussian_epsilon`,
   :func:`rr_delta`, :func:`rr_epsilon`, :func:`laplace_delta`, :func:`laplace_epsilon`,
   :func:`subsampled_gaussian_delta_single`).
2. **The tilted rounding oracle** (:func:`subsampled_gaussian_delta_bounds`,
   :func:`subsampled_gaussian_epsilon`) for T-fold compositions of the Poisson-subsampled
   Gaussian under add-or-remove adjacency.  Certified up to trusted special functions
   (scipy's ``log_ndtr``, ``exp``/``log``) and a standard FFT error constant; slow but simple.
3. **Monte Carlo with importance sampling** (:func:`mc_delta`) for a composition given by a
   sampler of one step's loss: an estimate with a stated (approximate, CLT) confidence
   interval.  A sanity check, never a certificate.

Notation
--------
A pair (P, Q) has privacy loss L(y) = log P(y)/Q(y); its hockey-stick divergence is

    delta(eps) = E_P[(1 - e^(eps - L))_+] + P(L = +inf),

and eps(delta) is the smallest eps >= 0 with delta(eps) <= delta.  Composition adds independent
losses.  For the Poisson-subsampled Gaussian with noise multiplier sigma and rate q (DESIGN.md),
with s(y) = (2y - 1)/(2 sigma^2),

    remove: y ~ P = (1-q) N(0, sigma^2) + q N(1, sigma^2),  L(y) = log(1 - q + q e^s(y)),
    add:    y ~ P = N(0, sigma^2),                          L(y) = -log(1 - q + q e^s(y)),

and under add-or-remove adjacency delta = max(delta_remove, delta_add), so
eps = max(eps_remove, eps_add).

References
----------
Balle & Wang, "Improving the Gaussian mechanism for differential privacy", ICML 2018 (the
Gaussian profile).  Meiser & Mohammadi, "Tight on budget?", CCS 2018, and Koskela, Jälkö &
Honkela, AISTATS 2020 (rounding privacy losses to a grid bounds delta from both sides).  Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., section 24.1 (FFT round-off).
Siegmund, "Importance sampling in the Monte Carlo study of sequential tests", Ann. Stat. 1976
(exponential tilting for rare events).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import scipy.fft
import scipy.optimize
import scipy.special as sc
import scipy.stats

#: unit round-off of float64
U = 2.0 ** -53
#: relative accuracy trusted for one cell's normal mass (log_gauss_interval): measured against
#: mpmath within ~1e-12 out to 21 standard deviations (tests/test_oracles.py), 10x margin
TRUSTED_MASS_RTOL = 1e-11
LOG_2PI = math.log(2.0 * math.pi)

__all__ = [
    "gaussian_log_delta", "gaussian_delta", "gaussian_epsilon",
    "rr_log_delta", "rr_delta", "rr_epsilon",
    "laplace_delta", "laplace_epsilon",
    "subsampled_gaussian_delta_single",
    "StepLaw", "subsampled_gaussian_step", "log_gauss_interval",
    "EpsilonBracket", "subsampled_gaussian_delta_bounds", "subsampled_gaussian_epsilon",
    "fft_error_constant",
    "SubsampledGaussianSampler", "DiscreteSampler", "MCResult", "mc_delta",
]


# ============================================================================================
# 1. Exact closed forms
# ============================================================================================


#: exp(x) for x below this is subnormal (and ~100x slower on x86); terms that small are
#: rounded up to it (upper bounds) or dropped (lower bounds): a relative change < n e^-708
_EXP_FLOOR = -708.0


def _lse(a: np.ndarray, upper: bool = True) -> float:
    """log(sum(exp(a))) of a 1-d array (a plain, fast log-sum-exp; -inf entries allowed).

    Terms below e^-708 of the largest are rounded up to it (``upper``) or dropped, which keeps
    the result on the stated side and the arithmetic out of subnormal numbers."""
    if a.size == 0:
        return -math.inf
    m = float(np.max(a))
    if not math.isfinite(m):
        return m
    d = a - m
    if upper:
        d = np.maximum(d, _EXP_FLOOR)
    else:
        d = np.where(d < _EXP_FLOOR, -np.inf, d)
    return m + math.log(float(np.sum(np.exp(d))))


def _log1mexp(x: np.ndarray | float) -> np.ndarray | float:
    """log(1 - e^x) for x <= 0, accurate on both sides of x = -log 2 (Maechler 2012)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    return out[()] if out.ndim == 0 else out


def gaussian_log_delta(eps: float, mu: float) -> float:
    """log delta(eps) of the Gaussian pair N(0,1) vs N(mu,1) (T releases: mu = sqrt(T) s/sigma).

    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)  (Balle & Wang 2018, Thm 8),
    valid for every real eps.  Both terms are taken in log space with ``log_ndtr`` so that
    delta down to 1e-300 keeps its relative accuracy: with a = mu/2 - eps/mu and
    b = -mu/2 - eps/mu, log delta = log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a))).
    """
    if mu <= 0:
        raise ValueError("mu must be positive")
    a = mu / 2.0 - eps / mu
    b = -mu / 2.0 - eps / mu
    la, lb = float(sc.log_ndtr(a)), float(sc.log_ndtr(b))
    r = eps + lb - la
    if r >= 0.0:  # only through rounding when delta is below ~1e-16 of Phi(a)
        return -math.inf
    return la + float(_log1mexp(r))


def gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian pair with parameter ``mu`` (see :func:`gaussian_log_delta`)."""
    return math.exp(gaussian_log_delta(eps, mu))


def _eps_by_log_bisection(log_delta_of: Callable[[float], float], delta: float, hi0: float = 1.0,
                          xtol: float = 1e-13) -> float:
    """Smallest eps >= 0 with log_delta_of(eps) <= log(delta), for non-increasing log_delta_of."""
    target = math.log(delta)
    if log_delta_of(0.0) <= target:
        return 0.0
    hi = hi0
    while log_delta_of(hi) > target:
        hi *= 2.0
        if hi > 1e7:
            raise ValueError("epsilon beyond 1e7")
    return scipy.optimize.brentq(lambda e: log_delta_of(e) - target, 0.0, hi, xtol=xtol, rtol=8 * U, maxiter=500)


def gaussian_epsilon(delta: float, mu: float) -> float:
    """eps(delta) of the Gaussian pair with parameter ``mu`` (root of the closed form)."""
    return _eps_by_log_bisection(lambda e: gaussian_log_delta(e, mu), delta, hi0=max(1.0, mu * mu))


def rr_log_delta(eps: float, eps0: float, T: int) -> float:
    """log delta(eps) of T-fold binary randomized response with parameter ``eps0``.

    L_T = (2i - T) eps0 with i ~ Binomial(T, p), p = e^eps0/(1 + e^eps0) (DESIGN.md), so
    delta(eps) = sum_{i: (2i-T) eps0 > eps} P(i) (1 - e^(eps - (2i-T) eps0)), summed in log space.
    """
    i = np.arange(T + 1)
    p = math.exp(eps0) / (1.0 + math.exp(eps0))
    loss = (2 * i - T) * eps0
    keep = loss > eps
    if not np.any(keep):
        return -math.inf
    terms = scipy.stats.binom.logpmf(i[keep], T, p) + _log1mexp(eps - loss[keep])
    return float(sc.logsumexp(terms))


def rr_delta(eps: float, eps0: float, T: int) -> float:
    """delta(eps) of T-fold binary randomized response (see :func:`rr_log_delta`)."""
    return math.exp(rr_log_delta(eps, eps0, T))


def rr_epsilon(delta: float, eps0: float, T: int) -> float:
    """eps(delta) of T-fold binary randomized response (exact; delta(eps) is continuous)."""
    return _eps_by_log_bisection(lambda e: rr_log_delta(e, eps0, T), delta, hi0=max(1.0, T * eps0))


def laplace_delta(eps: float, scale: float, sensitivity: float = 1.0) -> float:
    """delta(eps) of one Laplace release with ``scale`` b and ``sensitivity`` s (a = s/b).

    The loss is a w.p. 1/2, -a w.p. e^(-a)/2 and continuous between, which gives
    delta(eps) = 1 - e^((eps - a)/2) for |eps| <= a, 0 for eps >= a, 1 - e^eps for eps <= -a.
    (Derivation: the loss exceeds eps in (-a, a) exactly for y < y* = (s - b eps)/2; then
    P(y < y*) - e^eps Q(y < y*) = 1 - e^(-y*/b)/2 - e^(eps + (y*-s)/b)/2 and both exponentials
    equal e^((eps - a)/2).)
    """
    a = sensitivity / scale
    if eps >= a:
        return 0.0
    if eps <= -a:
        return -math.expm1(eps)
    return -math.expm1((eps - a) / 2.0)


def laplace_epsilon(delta: float, scale: float, sensitivity: float = 1.0) -> float:
    """eps(delta) of one Laplace release: a + 2 log(1 - delta), clipped at 0."""
    a = sensitivity / scale
    return max(0.0, a + 2.0 * math.log1p(-delta))


def subsampled_gaussian_delta_single(eps: float, sigma: float, q: float, direction: str = "remove") -> float:
    """delta(eps) of ONE Poisson-subsampled Gaussian step in one direction (exact).

    L is monotone in y, so {L > eps} is a half-line {y > y*} (remove) or {y < y*} (add) with
    y* = 1/2 + sigma^2 (log(e^(+-eps) - 1 + q) - log q), and delta(eps) = P(...) - e^eps Q(...)
    is a combination of normal tails.
    """
    c = 1.0 - q
    if direction == "remove":
        if eps <= math.log(c) if c > 0 else False:
            return -math.expm1(eps)  # L > eps everywhere
        ystar = 0.5 + sigma**2 * (math.log(math.expm1(eps) + q) - math.log(q))
        # P(y > y*) with P = (1-q) N(0) + q N(1); Q = N(0)
        pt = c * sc.ndtr(-ystar / sigma) + q * sc.ndtr(-(ystar - 1.0) / sigma)
        return float(pt - math.exp(eps) * sc.ndtr(-ystar / sigma))
    if direction == "add":
        if c > 0 and eps >= -math.log(c):
            return 0.0
        if math.expm1(-eps) + q <= 0:
            return -math.expm1(eps)
        ystar = 0.5 + sigma**2 * (math.log(math.expm1(-eps) + q) - math.log(q))
        # {L > eps} = {y < y*}; P = N(0), Q = (1-q) N(0) + q N(1)
        pt = sc.ndtr(ystar / sigma)
        qt = c * sc.ndtr(ystar / sigma) + q * sc.ndtr((ystar - 1.0) / sigma)
        return float(pt - math.exp(eps) * qt)
    raise ValueError("direction must be 'remove' or 'add'")


# ============================================================================================
# 2. The tilted rounding oracle
# ============================================================================================


def log_gauss_interval(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """log(Phi(a + w) - Phi(a)) for standardised left ends ``a`` (may be -inf) and widths w >= 0.

    Thin cells (w * max(1, |m|) < 5e-2, m the midpoint) use the midpoint expansion
    Phi(m + w/2) - Phi(m - w/2) = phi(m) w sum_k He_2k(m) (w/2)^2k / (2k + 1)!
    = phi(m) w (1 + (m^2 - 1) w^2/24 + He4(m) w^4/1920 + He6(m) w^6/322560 + ...),
    whose next term is below 1e-18 relative there; the width enters only through w, which
    callers compute without cancellation.  Wider cells take the difference of two
    ``log_ndtr`` values on the side of the midpoint where the tail is small
    (log Phi(b) + log(1 - e^(log Phi(a) - log Phi(b))), or the mirror image), whose relative
    error is about (error of log_ndtr ~ a few u |log Phi|) / (m w): ~1e-12 at 20 standard
    deviations, less nearer the centre (checked against mpmath in the tests).
    """
    a = np.asarray(a, dtype=float)
    w = np.asarray(w, dtype=float)
    out = np.empty(np.broadcast(a, w).shape)
    a, w = np.broadcast_arrays(a, w)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m = a + 0.5 * w
        thin = np.isfinite(a) & (w * np.maximum(1.0, np.abs(m)) < 5e-2)
        mt, wt = m[thin], w[thin]
        m2, w2 = mt * mt, wt * wt
        m4 = m2 * m2
        series = ((m2 - 1.0) * w2 / 24.0 + (m4 - 6.0 * m2 + 3.0) * w2 * w2 / 1920.0
                  + (m4 * m2 - 15.0 * m4 + 45.0 * m2 - 15.0) * w2 * w2 * w2 / 322560.0)
        out[thin] = -0.5 * m2 - 0.5 * LOG_2PI + np.log(wt) + np.log1p(series)
        wide = ~thin
        aw, ww, mw = a[wide], w[wide], m[wide]
        bw = aw + ww
        low = mw <= 0.0
        res = np.empty(aw.shape)
        # lower side: both ends in the left tail (or straddling the centre with m <= 0)
        lb = sc.log_ndtr(bw[low])
        la = sc.log_ndtr(aw[low])
        res[low] = lb + _log1mexp(np.minimum(la - lb, 0.0))
        # upper side: mirror, Phi(b) - Phi(a) = Phi(-a) - Phi(-b)
        hi = ~low
        ua = sc.log_ndtr(-aw[hi])
        ub = sc.log_ndtr(-bw[hi])
        res[hi] = ua + _log1mexp(np.minimum(ub - ua, 0.0))
        out[wide] = res
    return out


@dataclass
class StepLaw:
    """One step's privacy loss rounded UP to the grid l_k = k h, as log masses.

    ``logm[i]`` is log P(L in ((k-1) h, k h]) for k = k0 + i (the rounded-up law U); the law
    rounded DOWN is the same masses at (k - 1) h.  Mass the grid does not hold:

    * ``log_top``: log P(L > (k0 + n - 1) h), cut off above (U: moved to +inf, D: dropped);
    * ``log_clamp``: log P-mass of losses below the lowest cell that U holds *in* its lowest
      cell (rounding them up is valid for U; D's shift by one cell is not enough for them,
      which :func:`_direction_bounds` pays for explicitly).
    """

    h: float
    k0: int
    logm: np.ndarray
    log_top: float
    log_clamp: float
    edge_err: float  # bound on the loss error of one cell edge (rounding of y(l)), per step
    direction: str
    band_loss: float = math.inf  # losses above this lie within 2 sigma (in y) of the top cut

    @property
    def losses(self) -> np.ndarray:
        return (self.k0 + np.arange(self.logm.size)) * self.h

    def log_mgf(self, lam: float) -> float:
        """K(lam) = log sum_k m_k e^(lam l_k) of the up-rounded (truncated) step law."""
        return _lse(self.logm + lam * self.losses)

    def coarse(self, max_cells: int = 50_000) -> tuple:
        """Blocks of b = ceil(n / max_cells) consecutive cells: (low, high, logm, mean, var), each
        block's mass with the loss of its first (low) and last (high) cell and its conditional
        mean and variance.  Block laws at their ends bound the MGF: K_low(t) <= K(t) <= K_high(t)
        for t >= 0 (reversed for t < 0)."""
        cached = getattr(self, "_coarse", None)
        if cached is not None and cached[0] == max_cells:
            return cached[1]
        n = self.logm.size
        b = max(1, math.ceil(n / max_cells))
        nb = math.ceil(n / b)
        flat = np.full(nb * b, -np.inf)
        flat[:n] = self.logm
        lm = flat.reshape(nb, b)
        start = self.k0 + np.arange(nb) * b
        if b > 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                blk = sc.logsumexp(lm, axis=1)
                w = np.exp(lm - blk[:, None])
                w[~np.isfinite(blk)] = 1.0 / b
            off = np.arange(b) * self.h
            mean_off = w @ off
            var = w @ (off * off) - mean_off**2
            var = np.where(var < 1e-200, 0.0, var)  # rounding noise, and no subnormals
        else:
            blk, mean_off, var = lm[:, 0], np.zeros(nb), np.zeros(nb)
        out = (start * self.h, (start + b - 1) * self.h, blk, start * self.h + mean_off, var)
        self._coarse = (max_cells, out)
        return out

    def approx_moments(self, lam: float) -> tuple[float, float, float]:
        """(K, K', K'') at ``lam`` from the blocks (``coarse``), each block a law with its own
        mean and variance (second-order accurate in the block width): log MGF, tilted mean and
        variance, for choosing tilts and windows only (nothing certified depends on them)."""
        _, _, lm, mu, var = self.coarse()
        with np.errstate(invalid="ignore"):
            z = lm + lam * mu + 0.5 * lam * lam * var
        K = _lse(z)
        d = z - K
        # weights below e^-500 are dropped: their products would be subnormal (slow), and
        # these moments only steer tilts and windows
        p = np.exp(np.where(d < -500.0, -np.inf, d))
        mb = mu + lam * var  # tilted block means
        # np.sum of products, not np.dot: BLAS threads on a busy machine cost 20x here
        m1 = float(np.sum(p * mb))
        m2 = float(np.sum(p * ((mb - m1) ** 2 + var)))
        return K, m1, m2

    def log_mgf_bound(self, t: float) -> float:
        """An upper bound on K(t) from the block law (block losses at their high end for
        t >= 0, low end for t < 0): e^(t l) is then never underestimated."""
        lo, hi, lm, _, _ = self.coarse()
        return _lse(lm + t * (hi if t >= 0 else lo))


def _y_of_v(v: np.ndarray, sigma: float, q: float) -> np.ndarray:
    """Inverse of v(y) = log(1 - q + q e^s(y)): y = 1/2 + sigma^2 (log(e^v - 1 + q) - log q).

    e^v - (1 - q) is formed as expm1(v) + q (no cancellation when v > log(1 - q) is near 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 + sigma * sigma * (np.log(np.expm1(v) + q) - math.log(q))


def _mixture(q: float, direction: str) -> tuple[tuple, tuple]:
    """(means, weights) of P in y for one direction (sigma = 1 units of the mean shift)."""
    return ((0.0, 1.0), (1.0 - q, q)) if direction == "remove" else ((0.0,), (1.0,))


def _v_range(sigma: float, q: float, direction: str, z: float = 20.0) -> tuple[float, float]:
    """v = log(1 - q + q e^s(y)) at y = (lowest mean) - z sigma and (highest mean) + z sigma."""
    means, _ = _mixture(q, direction)
    lc = math.log1p(-q) if q < 1 else -math.inf
    out = []
    for y in (min(means) - z * sigma, max(means) + z * sigma):
        s = (2.0 * y - 1.0) / (2.0 * sigma * sigma)
        out.append(float(np.logaddexp(lc, math.log(q) + s)))
    return out[0], out[1]


def subsampled_gaussian_step(sigma: float, q: float, h: float, direction: str, *, z: float = 20.0,
                             max_cells: int = 60_000_000, chunk: int = 2_000_000) -> StepLaw:
    """The loss of one Poisson-subsampled Gaussian step, rounded up to a grid of spacing ``h``.

    Both directions are handled in v = log(1 - q + q e^s(y)), increasing in y, with L = v
    (remove) or L = -v (add).  A v-cell [j h, (j + 1) h] is the y-interval
    [Y(j h), Y((j + 1) h)], whose width is computed without cancellation as
    sigma^2 log1p(e^(jh) expm1(h) / (expm1(jh) + q)); its P-mass is a two-component normal
    mixture of :func:`log_gauss_interval` terms.  Loss-wise the cell rounds up to (j + 1) h
    (remove) or to -j h (add).

    y is kept within z = 20 standard deviations of P's component means (P-mass outside
    < 1e-88): above for both directions, and below when q = 1 (for q < 1, v has the natural
    lower end log(1 - q), reached as y -> -inf, and the lowest cell extends to -inf).
    """
    if not (sigma > 0 and 0 < q <= 1 and h > 0):
        raise ValueError("need sigma > 0, 0 < q <= 1, h > 0")
    if direction not in ("remove", "add"):
        raise ValueError("direction must be 'remove' or 'add'")
    means, weights = _mixture(q, direction)
    logw = [math.log(wt) if wt > 0 else -math.inf for wt in weights]
    c = 1.0 - q
    y_hi = max(means) + z * sigma
    _, v_hi = _v_range(sigma, q, direction, z)
    j_hi = math.ceil(v_hi / h) - 1  # last v-cell [j h, (j+1) h] touching y <= y_hi
    if c > 0:
        j_lo = math.floor(math.log(c) / h)  # lowest cell contains v -> log(1 - q)
        natural_low = True
    else:
        y_lo = min(means) - z * sigma
        v_lo = (2.0 * y_lo - 1.0) / (2.0 * sigma * sigma)
        j_lo = math.floor(v_lo / h)
        natural_low = False
    n = j_hi - j_lo + 1
    if n > max_cells:
        raise ValueError(f"step law needs {n} cells at h = {h:g} (max_cells = {max_cells})")
    logm = np.empty(n)
    for start in range(0, n, chunk):
        j = j_lo + np.arange(start, min(n, start + chunk))
        v0 = j * h
        y0 = _y_of_v(v0, sigma, q)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            wy = sigma * sigma * np.log1p(np.exp(v0) * math.expm1(h) / (np.expm1(v0) + q))
        if natural_low and start == 0:
            y0[0] = -math.inf  # the lowest cell takes everything down to y = -inf
            wy[0] = math.inf
        parts = []
        for lw, mu in zip(logw, means):
            a = (y0 - mu) / sigma
            if natural_low and start == 0:
                # lowest cell: Phi(b) with b the cell's upper edge
                b0 = (float(_y_of_v(np.array([(j_lo + 1) * h]), sigma, q)[0]) - mu) / sigma
                lg = log_gauss_interval(a, wy / sigma)
                lg[0] = float(sc.log_ndtr(b0))
            else:
                lg = log_gauss_interval(a, wy / sigma)
            parts.append(lw + lg)
        logm[start:start + (j.size)] = np.logaddexp.reduce(np.vstack(parts), axis=0) if len(parts) > 1 else parts[0]
    # mass above the top cell's upper edge Y((j_hi+1) h) >= y_hi, and (q = 1) below Y(j_lo h)
    y_top = float(_y_of_v(np.array([(j_hi + 1) * h]), sigma, q)[0])
    log_above = float(sc.logsumexp([lw + sc.log_ndtr(-(y_top - mu) / sigma) for lw, mu in zip(logw, means)]))
    if natural_low:
        log_below = -math.inf
    else:
        y_bot = float(_y_of_v(np.array([j_lo * h]), sigma, q)[0])
        log_below = float(sc.logsumexp([lw + sc.log_ndtr((y_bot - mu) / sigma) for lw, mu in zip(logw, means)]))
    # Rounding of y(l): |dY| <= 8u (|Y| + 8 sigma^2) and |dv/dy| <= 1/sigma^2, so a cell edge
    # sits within edge_err of its grid value in loss (mass can only be misfiled by that much).
    y_abs = max(abs(y_hi), abs(min(means) - z * sigma), 1.0)
    edge_err = 8.0 * U * (y_abs / (sigma * sigma) + 8.0) + 4.0 * U * max(abs(v_hi), abs(j_lo * h))
    if direction == "remove":
        # v-cell j rounds up to loss (j + 1) h: k0 = j_lo + 1; above -> top cut, below -> clamp
        s_band = (2.0 * (y_hi - 2.0 * sigma) - 1.0) / (2.0 * sigma * sigma)
        band = float(np.logaddexp(math.log(c) if c > 0 else -math.inf, math.log(q) + s_band))
        return StepLaw(h=h, k0=j_lo + 1, logm=logm, log_top=log_above, log_clamp=_clamp_into(logm, 0, log_below),
                       edge_err=edge_err, direction=direction, band_loss=band)
    # add: L = -v; v-cell j rounds up to -j h; reverse so losses increase
    logm = logm[::-1].copy()
    log_clamp = _clamp_into(logm, 0, log_above)  # v above the grid = losses below it
    return StepLaw(h=h, k0=-j_hi, logm=logm, log_top=log_below, log_clamp=log_clamp,
                   edge_err=edge_err, direction=direction)


def _clamp_into(logm: np.ndarray, i: int, log_mass: float) -> float:
    """Add ``log_mass`` into cell ``i`` (rounded up into it); return it for the record."""
    if log_mass > -math.inf:
        logm[i] = np.logaddexp(logm[i], log_mass)
    return log_mass


def fft_error_constant(n: int) -> float:
    """gamma_F(n): ||fl(FFT x) - FFT x||_2 <= gamma_F ||FFT x||_2, likewise for the inverse.

    Higham (2002, Thm 24.2) gives log2(n) eta / (1 - log2(n) eta) for radix-2 Cooley-Tukey
    with eta = mu + gamma_4 (sqrt(2) + mu), mu the twiddle error (~u): about 5 u log2 n.
    pocketfft's mixed radices (3, 5, Bluestein) are not covered by that proof; we take
    16 u (log2 n + 1), which ``tests/test_oracles.py`` checks against exact integer
    convolutions.
    """
    return 16.0 * U * (math.log2(max(n, 2)) + 1.0)


def _full_spectrum_l2(half: np.ndarray, n: int) -> float:
    """l2 norm over all n DFT bins from the rfft half (bins 1 .. ceil(n/2)-1 appear twice)."""
    s = float(np.sum(half * half))
    s = 2.0 * s - float(half[0] ** 2)
    if n % 2 == 0:
        s -= float(half[-1] ** 2)
    return math.sqrt(max(s, 0.0))


@dataclass
class _Composed:
    """The tilted composition of one direction on a window of N grid points."""

    lam: float
    K: float          # log MGF of the step at lam (the normalisation of the tilted step)
    J0: int           # grid index of window entry 0 (loss J0 h)
    C: np.ndarray     # computed tilted, normalised T-fold law on the window (circular)
    E_abs: float      # entrywise bound on the floating-point error of C
    log_alias: float  # log of the tilted mass outside the window (bound; wrapped into C)
    log_above: float  # log of the tilted mass above the window top (bound)
    log_rel: float    # log(1 + r): relative error of one step's tilted masses (rounding, trust)


def _chernoff_log_tail(step: StepLaw, lam: float, K: float, T: int, a: float, upper: bool) -> float:
    """log of a bound on the tilted T-fold law's tail: P~(S >= a) (upper) or P~(S <= a).

    Chernoff: P~(S >= a) <= exp(T (K(lam + t) - K(lam)) - t a) for t > 0 (t < 0 for the lower
    tail), minimised over t.  K(lam) is the exact log MGF of the composed array (the tilt's
    normaliser); K(lam + t) is bounded above by the block law (:meth:`StepLaw.log_mgf_bound`),
    so the bound holds for the array actually composed.

    A subsampled step's tilted law can have a heavy upper tail (mass piled below the cut, see
    :func:`_lam_cap`), where Chernoff is loose.  The upper tail therefore also tries the split
    P~(S >= a) <= T P~(L in B) + E~[e^(t (S - a)); every step outside B] for B = the blocks above
    a threshold b (some step in B, or none), over a few b, and keeps the smallest bound.
    """
    lo_, hi_, lm, _, _ = step.coarse()
    _, m1, var = step.approx_moments(lam)
    sd = math.sqrt(max(var, 1e-300))
    tmax = 200.0 / (sd * math.sqrt(T)) + 1.0
    if (upper and a <= T * m1) or (not upper and a >= T * m1):
        return 0.0

    def chernoff(mask: np.ndarray | None) -> float:
        if upper:
            xs = hi_ if mask is None else hi_[mask]
            ls = lm if mask is None else lm[mask]
            f = lambda t: T * (_lse(ls + (lam + t) * xs) - K) - t * a  # noqa: E731
            bounds = (0.0, tmax)
        else:
            f = lambda t: T * (step.log_mgf_bound(lam + t) - K) - t * a  # noqa: E731
            bounds = (-tmax, 0.0)
        res = scipy.optimize.minimize_scalar(f, bounds=bounds, method="bounded", options={"xatol": 1e-6 * tmax})
        return min(0.0, float(res.fun), f(bounds[0]), f(bounds[1]))

    best = chernoff(None)
    if upper:
        # tilted block masses (upper ends), cumulated from the top
        lt = lm + lam * hi_ - K
        order = np.arange(lt.size)[::-1]
        cum = np.logaddexp.accumulate(lt[order])
        for k in (10.0, 15.0, 20.0, 30.0, 45.0):
            # smallest top set B with T P~(B) <= e^-k
            idx = np.searchsorted(cum, -k - math.log(T), side="right")
            if idx == 0 or idx >= lt.size:
                continue
            mask = np.ones(lt.size, dtype=bool)
            mask[order[:idx]] = False
            log_b = math.log(T) + float(cum[idx - 1])
            best = min(best, float(np.logaddexp(log_b, chernoff(mask))))
    return best


def _power_inplace(X: np.ndarray, T: int) -> np.ndarray:
    """X^T by binary powering (complex multiplications only)."""
    result: np.ndarray | None = None
    base = X.copy()
    e = T
    while e:
        if e & 1:
            result = base.copy() if result is None else np.multiply(result, base, out=result)
        e >>= 1
        if e:
            np.multiply(base, base, out=base)
    assert result is not None  # (T >= 1)
    return result


def _compose(step: StepLaw, T: int, lam: float, J0: int, N: int) -> _Composed:
    """Tilted T-fold composition of the up-rounded step law on the window [J0, J0 + N) (grid
    indices), by one FFT power of length N (circular; what wraps around is bounded by Chernoff).

    Error bound (entrywise, tilted normalised measure): with x the folded step (||x||_1 = 1),
    e = fl(FFT x) - FFT x, ||e||_2 <= g ||FFT x||_2 = g sqrt(N) ||x||_2 (g = gamma_F(N));
    |X^T - X'^T| <= T max(|X|, |X'|)^(T-1) |X - X'| (mean value theorem, |X| <= 1); binary
    powering adds a relative (1 + sqrt(5) u)^(2T) - 1 (every product within sqrt(5) u, each
    one raised to at most T/2^level, summing to < 2T); the inverse FFT adds g ||y||_2.
    Through (1/N) sum_k |.| and Cauchy-Schwarz:
    E_abs = g ||x||_2 ||B||_2 / sqrt(N) + gpow mean|Y| + 1.01 g ||y||_2,
    B_k = T max(|X'_k|, min(1, |X'_k| + ||e||_2))^(T-1).
    """
    x = step.losses
    z = step.logm + lam * x
    K = float(sc.logsumexp(z))
    lz = z - K
    # entries below e^-708 are dropped (subnormal arithmetic is slow); that removes at most
    # n e^-708 of a step's tilted mass, i.e. at most T n e^-708 from any composed entry,
    # which goes into E_abs below
    tiny = lz < _EXP_FLOOR
    p = np.exp(np.where(tiny, -np.inf, lz))
    dropped = T * float(np.count_nonzero(tiny)) * math.exp(_EXP_FLOOR)
    # relative rounding of one entry: exp of an argument of size |logm| + |lam x| + |K| (each
    # rounded), plus the trusted accuracy of the normal-mass formulas (TRUSTED_MASS_RTOL)
    live = lz > -745.0  # entries that do not underflow (the others are 0 either way)
    arg = float(np.max(np.abs(step.logm[live]) + np.abs(lam * x[live]))) + abs(K)
    folds = max(1, math.ceil(p.size / N))
    rel = 4.0 * U * (arg + 2.0) + TRUSTED_MASS_RTOL + 2.0 * U * folds
    # fold the step law onto the circle of N points: grid index k sits at (k - k0) mod N;
    # after T steps index J sits at (J - T k0) mod N
    if p.size <= N:
        xs = np.zeros(N)
        xs[:p.size] = p
    else:
        pad = folds * N - p.size
        xs = np.concatenate([p, np.zeros(pad)]).reshape(folds, N).sum(axis=0)
    x_l2 = float(np.linalg.norm(xs))
    g = fft_error_constant(N)
    X = scipy.fft.rfft(xs)
    del xs
    absX = np.abs(X)
    e_l2 = g * math.sqrt(N) * x_l2 * 1.01
    with np.errstate(under="ignore"):
        Bk = T * np.power(np.maximum(absX, np.minimum(1.0, absX + e_l2)), T - 1)
    B_l2 = _full_spectrum_l2(Bk, N)
    del Bk
    Y = _power_inplace(X, T)
    del X
    gpow = math.expm1(2.0 * T * math.log1p(math.sqrt(5.0) * U))
    absY = np.abs(Y)
    meanY = (2.0 * float(np.sum(absY)) - float(absY[0]) - (float(absY[-1]) if N % 2 == 0 else 0.0)) / N
    del absY
    y = scipy.fft.irfft(Y, n=N)
    del Y
    y_l2 = float(np.linalg.norm(y))
    E_abs = g * x_l2 * B_l2 / math.sqrt(N) + gpow * meanY * 1.01 + 1.01 * g * y_l2 + dropped
    # rotate so that entry i is grid index J0 + i: index J sits at (J - T k0) mod N
    shift = (J0 - T * step.k0) % N
    C = np.roll(y, -shift)
    lo_edge, hi_edge = J0 * step.h, (J0 + N) * step.h
    log_above = _chernoff_log_tail(step, lam, K, T, hi_edge, upper=True)
    log_below = _chernoff_log_tail(step, lam, K, T, lo_edge, upper=False)
    log_alias = float(np.logaddexp(log_above, log_below))
    return _Composed(lam=lam, K=K, J0=J0, C=C, E_abs=E_abs, log_alias=log_alias, log_above=log_above,
                     log_rel=math.log1p(rel))


def _saddle_guess(step: StepLaw, T: int, delta: float) -> tuple[float, float]:
    """(eps, lam): a saddle-point estimate of eps(delta) and the tilt with T K'(lam) = eps.

    log delta ~ T K(lam) - lam T K'(lam) - log(1 + lam (lam + 1) sqrt(2 pi T K''(lam)))
    (Daniels' approximation of E[(1 - e^(eps - S))_+]); only a starting point: the window and
    the error terms of the composition decide the bracket.
    """
    target = math.log(delta)

    def logd(lam):
        K, m1, var = step.approx_moments(lam)
        return T * K - lam * T * m1 - math.log1p(lam * (lam + 1.0) * math.sqrt(2 * math.pi * T * max(var, 1e-300)))

    lo, hi = 1e-9, 1.0
    while logd(hi) > target:
        hi *= 2.0
        if hi > 1e9:
            break
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if logd(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-4:
            break
    lam = hi
    _, m1, _ = step.approx_moments(lam)
    return T * m1, lam


def _lam_cap(step: StepLaw, T: int) -> float:
    """Largest tilt at which the tilted step keeps at most e^-15/T of its mass within 2 sigma
    (in y) of the top cut, so that a T-step path meets that band with tilted probability
    below e^-15.

    A subsampled step's MGF is dominated, for large lam, by a far bump of the q N(1, sigma^2)
    component (its RDP tends to alpha/(2 sigma^2)); the cut removes that bump, and solving
    T K'(lam) = eps on the cut law then drives lam up until the tilted mass piles against the
    cut, which makes the tilted composition multimodal and its aliasing large.  Beyond the cap
    the tilt's centre simply stays below eps (precision there is relative to the tilted density
    at eps, which the window and error terms account for).
    """
    if not math.isfinite(step.band_loss):
        return math.inf
    lo_, hi_, lm, mu, var = step.coarse()
    band = hi_ >= step.band_loss
    if not np.any(band):
        return math.inf

    def frac(lam):
        return _lse(lm[band] + lam * hi_[band]) - _lse(lm + lam * lo_)

    limit = -15.0 - math.log(T)
    if frac(0.0) > limit:
        return 0.0
    if frac(1e6) <= limit:
        return math.inf
    a, b = 0.0, 1.0
    while frac(b) <= limit:
        a, b = b, 2.0 * b
    for _ in range(60):
        m = 0.5 * (a + b)
        if frac(m) <= limit:
            a = m
        else:
            b = m
    return a


def _lam_for_mean(step: StepLaw, T: int, eps: float) -> float:
    """The tilt lam >= 0 with T K'(lam) = eps (0 if eps is below the untilted mean), at most
    :func:`_lam_cap`."""
    _, m0, _ = step.approx_moments(0.0)
    if eps <= T * m0:
        return 0.0
    top = step.losses[-1]
    if eps >= T * top:
        raise ValueError("eps above the largest composed loss")
    cap = _lam_cap(step, T)
    if math.isfinite(cap) and T * step.approx_moments(cap)[1] <= eps:
        return cap
    lo, hi = 0.0, 1.0
    while T * step.approx_moments(hi)[1] < eps:
        lo, hi = hi, hi * 2.0
    return scipy.optimize.brentq(lambda lm: T * step.approx_moments(lm)[1] - eps, lo, hi, xtol=1e-8, rtol=1e-8)


class _Sums:
    """log of sum_{j > i} c_j e^(T K - lam x_j) (1 - e^(x_i - x_j)) over the window entries
    above x_i, with c_j = C_j + E (upper) or (C_j - E)_+ (lower).

    Precomputed so that one evaluation is one log-sum-exp: x_i - x_j = -(j - i) h, so
    log(1 - e^(x_i - x_j)) = g[j - i - 1] with g[k] = log(1 - e^(-(k + 1) h)) for every i."""

    def __init__(self, comp: _Composed, x: np.ndarray, T: int, h: float):
        with np.errstate(divide="ignore"):
            self.base_up = np.log(comp.C + comp.E_abs) - comp.lam * x
            self.base_lo = np.log(np.maximum(comp.C - comp.E_abs, 0.0)) - comp.lam * x
        self.g = np.asarray(_log1mexp(-(np.arange(x.size) + 1.0) * h))
        self.TK = T * comp.K

    def log_sum(self, i: int, upper: bool) -> float:
        base = self.base_up if upper else self.base_lo
        n = base.size - i - 1
        if n <= 0:
            return -math.inf
        return _lse(base[i + 1:] + self.g[:n], upper=upper) + self.TK


def _direction_bounds(step: StepLaw, T: int, delta: float, eps_guess: float, lam: float, sd: float,
                      width_sd: float, max_points: int) -> tuple[float, float, dict]:
    """(eps_lo, eps_hi, info) of one direction from one tilted composition.

    delta_U(e) (loss rounded up) >= delta(e) >= delta_D(e) = delta_U(e + T h) (rounded down,
    the same law shifted by one cell per step), up to the clamp and truncation terms:

    * upper: (1 + r)^T [sum over window entries above e of (C_j + E) w_j(e)
      + e^(T K - lam x_top) P~(S >= x_top)] + 1 - (1 - t)^T, where w_j(e) = e^(TK - lam x_j)
      (1 - e^(e - x_j)) untilts entry j, t = P(L > top cell), and everything above the window
      is bounded by its tilted mass times the largest weight;
    * lower: (1 - r)^T [sum of (C_j - E)_+ w_j(e + T h) - e^(T K - lam (e + T h)) P~(S outside
      window)] - clamp(e), where the alias term removes whatever wrapped around, and
      clamp(e) = T m_clamp e^(lam (l_min - h)) e^((T-1)(K - lam h)) e^(-lam e) bounds what the
      clamped mass adds in D (paths with a clamped step, weighted by (1-e^(e-S))_+ <= e^(lam(S-e))).

    eps_hi is the smallest window grid point with upper <= delta; eps_lo is the largest grid
    point x_i with lower(x_i) > delta, minus T h (eps_lo, eps_hi lose at most h to the grid).
    Both then move outwards by T * edge_err (cell edges misfiled by rounding).
    """
    h = step.h
    Th = T * h
    lo_x = min(eps_guess, T * step.approx_moments(lam)[1]) - width_sd * sd
    hi_x = max(eps_guess, T * step.approx_moments(lam)[1]) + Th + width_sd * sd
    J0 = math.floor(lo_x / h)
    N = scipy.fft.next_fast_len(max(64, math.ceil((hi_x - lo_x) / h) + 2), real=True)
    if N > max_points:
        raise ValueError(f"window needs {N} points (max_points = {max_points})")
    comp = _compose(step, T, lam, J0, N)
    x = (J0 + np.arange(N)) * h
    sums = _Sums(comp, x, T, h)
    log_r_up = T * comp.log_rel
    log_r_dn = T * math.log(max(1e-300, 1.0 - math.expm1(comp.log_rel)))
    log_t_top = (math.log(-math.expm1(T * math.log1p(-math.exp(step.log_top))))
                 if step.log_top > -math.inf else -math.inf)
    log_above_term = T * comp.K - comp.lam * x[-1] + comp.log_above if comp.log_above > -math.inf else -math.inf

    def log_up(i: int) -> float:
        s = float(np.logaddexp(sums.log_sum(i, True), log_above_term)) + log_r_up
        # underflowed terms: at most N * 1e-300 of the largest weight
        return float(np.logaddexp(s, log_t_top))

    log_clamp0 = (math.log(T) + step.log_clamp + lam * (step.k0 * h - h) + (T - 1) * (comp.K - lam * h)
                  if step.log_clamp > -math.inf else -math.inf)

    def log_lo_at_shift(i: int) -> float:
        """log of the lower bound on delta at e = x_i - T h (or -inf if it is not positive)."""
        main = sums.log_sum(i, False)
        alias = T * comp.K - lam * x[i] + comp.log_alias
        e = x[i] - Th
        clamp = log_clamp0 - lam * e
        sub = float(np.logaddexp(alias, clamp - log_r_dn))
        if main <= sub:
            return -math.inf
        return main + float(_log1mexp(sub - main)) + log_r_dn

    ld = math.log(delta)
    # eps_hi: smallest i with log_up(i) <= ld (non-increasing in i)
    if log_up(N - 2) > ld:
        raise _WindowMiss("upper crossing above the window", x[-1])
    if log_up(0) <= ld:
        if x[0] <= 0.0:
            i_hi = 0
        else:
            raise _WindowMiss("upper crossing below the window", x[0])
    else:
        a, b = 0, N - 2
        while b - a > 1:
            m = (a + b) // 2
            if log_up(m) <= ld:
                b = m
            else:
                a = m
        i_hi = b
    eps_hi = max(0.0, x[i_hi]) + T * step.edge_err
    # eps_lo: a large i with lower(x_i - T h) > delta.  Any such i certifies eps > x_i - T h,
    # so the bisection below needs no monotonicity for validity (its invariant keeps
    # lower(a) > delta).  Far below the tilted centre the alias term (bounded with the
    # largest weight) swamps the sum and the bound is -inf there, so the search starts near
    # the upper crossing, where the lower crossing sits T cells higher, and backs off from it.
    a = max(0, i_hi - 1)
    back = 1
    while log_lo_at_shift(a) <= ld:
        if a == 0:
            a = -1
            break
        a = max(0, a - back)
        back *= 2
    if a < 0:
        eps_lo, i_lo = 0.0, -1  # no certificate on this window: 0 is a valid lower bound
    else:
        b = N - 2
        if log_lo_at_shift(b) > ld:
            raise _WindowMiss("lower crossing above the window", x[-1])
        while b - a > 1:
            m = (a + b) // 2
            if log_lo_at_shift(m) > ld:
                a = m
            else:
                b = m
        i_lo = a
        eps_lo = max(0.0, x[i_lo] - Th - T * step.edge_err)
    info = {"lam": lam, "N": N, "J0": J0, "E_abs": comp.E_abs, "log_alias": comp.log_alias,
            "i_hi": i_hi, "i_lo": i_lo, "h": h, "T_h": Th, "eps_guess": eps_guess,
            "window": (float(x[0]), float(x[-1])), "log_clamp": step.log_clamp, "log_top": step.log_top}
    return eps_lo, min(max(eps_hi, eps_lo), math.inf), info


class _WindowMiss(Exception):
    def __init__(self, what: str, where: float):
        super().__init__(what)
        self.where = where


@dataclass
class EpsilonBracket:
    """Result of :func:`subsampled_gaussian_epsilon`: eps(delta) in [lower, upper]."""

    lower: float
    upper: float
    h: float
    points: int
    directions: dict = field(default_factory=dict)

    @property
    def width(self) -> float:
        return self.upper - self.lower


def _z_cut(delta: float, T: int) -> float:
    """Standard deviations kept on each side of P's component means: the P-mass cut off, t,
    moves delta by at most 1 - (1 - t)^T <= T t, which this keeps below 1e-7 delta."""
    return max(8.0, -float(sc.ndtri(1e-7 * delta / T)))


def _locate(step: StepLaw, T: int, delta: float, eps_g: float, max_points: int,
            width_sd: float = 12.0, attempts: int = 8) -> tuple[float, float, dict]:
    """One direction's bracket from compositions tilted at ``eps_g``; the tilt is moved to the
    crossing found until the crossing lies within 2 tilted standard deviations of the tilt's
    centre.  When the crossing falls outside the window, the window's reach beyond the tilt's
    centre doubles (the tilt may be capped, :func:`_lam_cap`, and then the centre cannot
    follow: in the one-big-step regime of tiny q and small sigma, epsilon lies far above it)."""
    last: object = None
    for attempt in range(attempts):
        try:
            lam = _lam_for_mean(step, T, eps_g)
        except ValueError:
            lam = 0.0
        _, _, var = step.approx_moments(lam)
        sd = math.sqrt(T * var)
        try:
            lo, hi, info = _direction_bounds(step, T, delta, eps_g, lam, sd, width_sd, max_points)
        except _WindowMiss as miss:
            last = miss
            centre = T * step.approx_moments(lam)[1]
            if "above" in str(miss):
                eps_g = miss.where + max(miss.where - centre, 2.0 * sd)
            else:
                eps_g = max(0.0, miss.where - max(centre - miss.where, 2.0 * sd))
            continue
        info["attempts"] = attempt + 1
        info["sd"] = sd
        centre = hi - 0.5 * T * step.h
        if abs(centre - eps_g) <= 2.0 * sd or lam == 0.0 or attempt == attempts - 1:
            return lo, hi, info
        eps_g = centre
        last = info
    raise RuntimeError(f"rounding oracle: window never held the crossing ({last})")


def _one_direction_epsilon(sigma: float, q: float, T: int, delta: float, h: float, direction: str,
                           max_points: int, max_cells: int, coarse_factor: int = 8) -> tuple[float, float, dict]:
    zc = _z_cut(delta, T)
    step = subsampled_gaussian_step(sigma, q, h, direction, z=zc, max_cells=max_cells)
    if direction == "add":
        top = step.losses[-1]
        if T * top <= 0.0:
            return 0.0, 0.0, {"note": "add direction has no positive loss"}
    # starting point: saddle estimate on the block law (cheap)
    eps_g, _ = _saddle_guess(step, T, delta)
    if direction == "add" and eps_g >= T * step.losses[-1] * (1.0 - 1e-9):
        # delta_add(e) = 0 for e >= T * (largest loss): that is an upper bound, 0 a lower one
        return 0.0, T * step.losses[-1] + T * step.edge_err, {"note": "add direction bounded by its largest loss"}
    # a first pass on a grid coarse_factor times coarser locates the crossing cheaply (the
    # saddle estimate can be far off for a subsampled step's skewed tilted law); the fine pass
    # is then tilted at it, so that its round-off is relative to the mass that decides delta
    if coarse_factor > 1:
        step1 = subsampled_gaussian_step(sigma, q, h * coarse_factor, direction, z=zc, max_cells=max_cells)
        lo1, hi1, info1 = _locate(step1, T, delta, eps_g, max_points)
        eps_g = hi1 - 0.5 * T * step1.h
    lo, hi, info = _locate(step, T, delta, eps_g, max_points)
    if coarse_factor > 1:
        info["coarse_pass"] = {"lower": lo1, "upper": hi1, "h": step1.h, "N": info1["N"]}
    return lo, hi, info


def subsampled_gaussian_epsilon(sigma: float, q: float, T: int, delta: float, *, h: float | None = None,
                                width: float | None = None, max_points: int = 2**22,
                                max_cells: int = 60_000_000,
                                directions: Sequence[str] = ("remove", "add")) -> EpsilonBracket:
    """Bracket eps(delta) of T Poisson-subsampled Gaussian steps (add-or-remove adjacency).

    The tilted rounding oracle of DESIGN.md ("Independent checks where closed forms run out").
    delta(eps) = E_P[(1 - e^(eps - L))_+] is non-decreasing in the loss, so rounding every
    step's loss up to the grid l_k = k h gives delta_U >= delta and rounding it down gives
    delta_D <= delta; the down-rounded law is the up-rounded one shifted by one cell per step,
    so one composition gives both: delta_D(eps) = delta_U(eps + T h).  The composition is one
    FFT power of the exponentially tilted step law p_k e^(lam l_k - K(lam)) with
    T K'(lam) = eps (so that round-off is relative to the mass near eps, and delta down to
    1e-30 is resolvable), untilted in log space.  The bracket's width is about (T + 2) h plus
    the bounded numerical terms (:func:`_compose`, :func:`_direction_bounds`).

    What the bracket accounts for: the P-mass cut off beyond z standard deviations of y
    (:func:`_z_cut`: at most 1e-7 delta), FFT round-off (Higham's bound with
    :func:`fft_error_constant`), aliasing of the circular FFT (Chernoff and a one-big-step
    split, :func:`_chernoff_log_tail`), the rounding of every exponent, and cell edges misfiled
    by the rounding of y(l).  What it trusts: ``log_ndtr``/``exp``/``log`` and
    :data:`TRUSTED_MASS_RTOL`.  What is heuristic and only affects the width: the tilt
    (saddle-point start, a coarse pass 8x coarser to locate the crossing, a cap where a
    subsampled step's tilted mass would pile against the cut: :func:`_lam_cap`) and the window.

    Parameters
    ----------
    sigma, q, T, delta
        Noise multiplier, Poisson rate in (0, 1], steps, target delta.
    h : float, optional
        Grid spacing.  Default: ``width / T / 1.2`` (so the bracket is about ``width``), made
        coarser if the FFT window would exceed ``max_points``.
    width : float, optional
        Wanted bracket width when ``h`` is not given (default 1e-3 of a first estimate of eps).
    max_points : int
        Largest FFT length (memory ~ 40 bytes a point).
    directions : sequence of {"remove", "add"}
        Directions to compose; add-or-remove adjacency needs both (eps = the max).  For q = 1
        both are the same Gaussian and one is computed.

    Returns
    -------
    EpsilonBracket
        ``lower <= eps(delta) <= upper`` (certified up to the trusted special functions and
        the FFT constant of :func:`fft_error_constant`).
    """
    if not (0 < delta < 1):
        raise ValueError("delta must be in (0, 1)")
    T = int(T)
    if q == 1.0:
        directions = ("remove",)
    results = {}
    for d in directions:
        hh = h
        if hh is None:
            # pick h from a first estimate of eps and of the tilted spread: the window is about
            # (2 * 12 sd + T h) / h points, the bracket about T h
            # a probe law of ~2e5 cells over the whole loss range resolves a step's bulk well
            # enough for a first estimate of eps and of the tilted spread
            zc = _z_cut(delta, T)
            v_lo, v_hi = _v_range(sigma, q, d, zc)
            probe = subsampled_gaussian_step(sigma, q, (v_hi - v_lo) / 2e5, d, z=zc, max_cells=210_000)
            eps_g, lam = _saddle_guess(probe, T, delta)
            _, _, var = probe.approx_moments(lam)
            sd = math.sqrt(T * var)
            want = width if width is not None else 1e-3 * max(eps_g, 1e-4)
            hh = want / T / 1.2
            # the window holds 2 * 12 sd around the tilted mean plus T h: N ~ 24 sd / h + T
            room = 0.9 * max_points - T
            if room <= 0:
                raise ValueError(f"T = {T} needs more than max_points = {max_points} FFT points")
            hh = max(hh, 24.0 * sd / room)
        lo, hi, info = _one_direction_epsilon(sigma, q, T, delta, hh, d, max_points, max_cells)
        info["h"] = hh
        results[d] = (lo, hi, info)
    lower = max(r[0] for r in results.values())
    upper = max(r[1] for r in results.values())
    points = max(r[2].get("N", 0) for r in results.values())
    hmin = min(r[2]["h"] for r in results.values())
    return EpsilonBracket(lower=lower, upper=upper, h=hmin, points=points,
                          directions={d: {"lower": r[0], "upper": r[1], **r[2]} for d, r in results.items()})


def subsampled_gaussian_delta_bounds(sigma: float, q: float, T: int, eps: float, *, h: float,
                                     max_points: int = 2**22, width_sd: float = 12.0, z: float = 20.0,
                                     directions: Sequence[str] = ("remove", "add")) -> tuple[float, float]:
    """Bracket delta(eps) = max over directions at one eps (the same construction as
    :func:`subsampled_gaussian_epsilon`, read at eps for the upper and at eps + T h for the
    lower bound; tilt chosen for eps).  ``z``: standard deviations of y kept (the P-mass cut
    off, t, adds 1 - (1 - t)^T to the upper bound).  Returns (lower, upper)."""
    T = int(T)
    if q == 1.0:
        directions = ("remove",)
    los, his = [], []
    for d in directions:
        step = subsampled_gaussian_step(sigma, q, h, d, z=z)
        if T * step.losses[-1] <= eps:
            los.append(0.0)
            his.append(0.0 if step.log_top == -math.inf else -math.expm1(T * math.log1p(-math.exp(step.log_top))))
            continue
        lam = _lam_for_mean(step, T, eps)
        _, _, var = step.approx_moments(lam)
        sd = math.sqrt(T * var)
        Th = T * h
        lo_x, hi_x = eps - width_sd * sd, eps + Th + width_sd * sd
        J0 = math.floor(lo_x / h)
        N = scipy.fft.next_fast_len(max(64, math.ceil((hi_x - lo_x) / h) + 2), real=True)
        if N > max_points:
            raise ValueError(f"window needs {N} points (max_points = {max_points})")
        comp = _compose(step, T, lam, J0, N)
        x = (J0 + np.arange(N)) * h
        # the grid point at or below eps (upper: delta_U is non-increasing, so delta_U(x_i)
        # >= delta_U(eps) for x_i <= eps) and the one at or above eps + T h (lower)
        i_up = int(math.floor((eps - T * step.edge_err) / h)) - J0
        i_lo = int(math.ceil((eps + Th + T * step.edge_err) / h)) - J0
        log_r_up = T * comp.log_rel
        log_r_dn = T * math.log(max(1e-300, 1.0 - math.expm1(comp.log_rel)))
        sums = _Sums(comp, x, T, h)
        up = sums.log_sum(i_up, True)
        if comp.log_above > -math.inf:
            up = float(np.logaddexp(up, T * comp.K - lam * x[-1] + comp.log_above))
        up += log_r_up
        if step.log_top > -math.inf:
            up = float(np.logaddexp(up, math.log(-math.expm1(T * math.log1p(-math.exp(step.log_top))))))
        main = sums.log_sum(i_lo, False)
        alias = T * comp.K - lam * x[i_lo] + comp.log_alias
        clamp = (math.log(T) + step.log_clamp + lam * (step.k0 * h - h) + (T - 1) * (comp.K - lam * h)
                 - lam * (x[i_lo] - Th) - log_r_dn) if step.log_clamp > -math.inf else -math.inf
        sub = float(np.logaddexp(alias, clamp))
        lo = -math.inf if main <= sub else main + float(_log1mexp(sub - main)) + log_r_dn
        los.append(math.exp(lo))
        his.append(math.exp(up))
    return max(los), max(his)


# ============================================================================================
# 3. Monte Carlo with importance sampling
# ============================================================================================


class TiltableStep(Protocol):
    """One step's privacy loss, sampled under a tilted proposal with its likelihood ratio."""

    def sample(self, n: int, theta: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n draws (loss, log dP/dG) under the proposal G_theta (theta = 0: G = P, log ratio 0)."""

    def proposal_mean_loss(self, theta: float) -> float:
        """E_{G_theta}[L] (to place the proposal's mean composed loss at eps)."""


@dataclass(frozen=True)
class SubsampledGaussianSampler:
    """Poisson-subsampled Gaussian step (one direction), proposals tilted in y.

    P is a normal mixture sum_i w_i N(mu_i, sigma^2); G_theta(y) = P(y) e^(theta y - Lambda(theta))
    is again one, with means mu_i + theta sigma^2 and weights w_i e^(theta mu_i) (normalised),
    where Lambda(theta) = theta^2 sigma^2/2 + log sum_i w_i e^(theta mu_i).  The log likelihood
    ratio of a draw is Lambda(theta) - theta y.  The loss is monotone in y (increasing for
    remove, decreasing for add), so tilting y tilts the loss towards eps when theta has the
    loss's sign.  q = 1 is the plain Gaussian.
    """

    sigma: float
    q: float
    direction: str = "remove"

    def _mix(self) -> tuple[np.ndarray, np.ndarray]:
        if self.direction == "remove" and self.q < 1.0:
            return np.array([1.0 - self.q, self.q]), np.array([0.0, 1.0])
        if self.direction == "remove":
            return np.array([1.0]), np.array([1.0])
        return np.array([1.0]), np.array([0.0])

    def loss(self, y: np.ndarray) -> np.ndarray:
        s = (2.0 * y - 1.0) / (2.0 * self.sigma**2)
        v = np.logaddexp(math.log1p(-self.q) if self.q < 1 else -np.inf, math.log(self.q) + s)
        return v if self.direction == "remove" else -v

    def log_mgf_y(self, theta: float) -> float:
        w, mu = self._mix()
        return 0.5 * theta * theta * self.sigma**2 + float(sc.logsumexp(np.log(w) + theta * mu))

    def sample(self, n: int, theta: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        w, mu = self._mix()
        lw = np.log(w) + theta * mu
        pw = np.exp(lw - sc.logsumexp(lw))
        comp = rng.choice(len(pw), size=n, p=pw) if len(pw) > 1 else np.zeros(n, dtype=int)
        y = mu[comp] + theta * self.sigma**2 + self.sigma * rng.standard_normal(n)
        return self.loss(y), self.log_mgf_y(theta) - theta * y

    def proposal_mean_loss(self, theta: float) -> float:
        w, mu = self._mix()
        lw = np.log(w) + theta * mu
        pw = np.exp(lw - sc.logsumexp(lw))
        t, wt = np.polynomial.hermite_e.hermegauss(96)  # E f(Z), Z ~ N(0,1)
        wt = wt / wt.sum()
        return float(sum(pi * np.dot(wt, self.loss(m + theta * self.sigma**2 + self.sigma * t))
                         for pi, m in zip(pw, mu)))


@dataclass(frozen=True)
class DiscreteSampler:
    """A step with finitely many losses ``losses`` of P-probabilities ``probs``, tilted exactly:
    G_theta(l) = P(l) e^(theta l - K(theta)), log dP/dG = K(theta) - theta l."""

    losses: tuple
    probs: tuple

    def sample(self, n: int, theta: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        l = np.asarray(self.losses, float)
        lp = np.log(np.asarray(self.probs, float)) + theta * l
        K = sc.logsumexp(lp)
        idx = rng.choice(l.size, size=n, p=np.exp(lp - K))
        return l[idx], K - theta * l[idx]

    def proposal_mean_loss(self, theta: float) -> float:
        l = np.asarray(self.losses, float)
        lp = np.log(np.asarray(self.probs, float)) + theta * l
        return float(np.dot(np.exp(lp - sc.logsumexp(lp)), l))


@dataclass
class MCResult:
    """Importance-sampling estimate of delta(eps) with a normal-approximation interval."""

    estimate: float
    lower: float
    upper: float
    stderr: float
    confidence: float
    n: int
    theta: float
    ess: float  # effective sample size (sum w)^2 / sum w^2 of the nonzero terms


def mc_delta(step: TiltableStep, T: int, eps: float, *, n: int = 100_000, theta: float | None = None,
             confidence: float = 0.99, seed: int = 0, chunk: int = 50_000) -> MCResult:
    """delta(eps) of the T-fold composition of ``step`` by importance sampling.

    delta(eps) = E_P[(1 - e^(eps - S))_+] = E_G[W (1 - e^(eps - S))_+], S = sum of T losses,
    W = prod dP/dG; the proposal tilt ``theta`` (default: T E_G[L] = eps, solved by
    bisection) puts the composed loss near eps, where the rare event lives.  The interval is
    estimate +- z_{(1+confidence)/2} * stderr (CLT; trustworthy only when the effective sample
    size is large).  A sanity check, never a certificate.
    """
    if theta is None:
        f = lambda th: T * step.proposal_mean_loss(th) - eps  # noqa: E731
        if f(0.0) >= 0:
            theta = 0.0
        else:
            # the loss is increasing (remove) or decreasing (add) in y: try both signs
            sgn = 1.0 if T * step.proposal_mean_loss(1e-3) > T * step.proposal_mean_loss(0.0) else -1.0
            hi = 1.0
            while f(sgn * hi) < 0:
                hi *= 2.0
                if hi > 1e6:
                    raise ValueError("cannot tilt the proposal to eps")
            theta = sgn * scipy.optimize.brentq(lambda t: f(sgn * t), 0.0, hi, xtol=1e-10)
    rng = np.random.default_rng(seed)
    logx = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        S = np.zeros(m)
        LW = np.zeros(m)
        for _ in range(T):
            l, lw = step.sample(m, theta, rng)
            S += l
            LW += lw
        with np.errstate(divide="ignore"):
            logx.append(LW + _log1mexp(np.minimum(eps - S, 0.0)) + np.where(S > eps, 0.0, -np.inf))
    lx = np.concatenate(logx)
    top = float(np.max(lx))
    if top == -math.inf:
        return MCResult(0.0, 0.0, 0.0, 0.0, confidence, n, theta, 0.0)
    xs = np.exp(lx - top)
    mean = float(np.mean(xs))
    sd = float(np.std(xs, ddof=1)) / math.sqrt(n)
    z = float(scipy.stats.norm.ppf(0.5 + confidence / 2.0))
    nz = xs[xs > 0]
    ess = float(nz.sum() ** 2 / np.sum(nz * nz)) if nz.size else 0.0
    scale = math.exp(top)
    return MCResult(estimate=mean * scale, lower=max(0.0, (mean - z * sd) * scale), upper=(mean + z * sd) * scale,
                    stderr=sd * scale, confidence=confidence, n=n, theta=theta, ess=ess)


def weighted_delta_estimates(batches: Sequence[tuple[np.ndarray, np.ndarray]],
                             epsilons: Sequence[float]) -> list[tuple[float, float]]:
    """``(estimate, standard error)`` of ``delta(eps) = E_P[(1 - e^{eps - L})_+]`` for each
    epsilon, from importance-sampled batches ``(total loss L, log weight dP/dproposal)``."""
    out = []
    for e in epsilons:
        v = np.concatenate([np.where(loss > e, -np.expm1(e - loss), 0.0) * np.exp(log_w)
                            for loss, log_w in batches])
        out.append((float(v.mean()), float(v.std() / math.sqrt(v.size))))
    return out

