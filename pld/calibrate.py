"""Calibrate DP-SGD parameters to a privacy target, with a certificate.

Every function returns a value whose *certified upper* epsilon, re-accounted
with :func:`pld.dpsgd`, is at most the target (the search only ever returns a
point it has evaluated and found within budget), and proves near-optimality
with an evaluated point just beyond it that exceeds the target:

* :func:`calibrate_noise`: smallest noise multiplier, to ``rtol``;
* :func:`calibrate_steps`: most steps (``T`` fits, ``T + 1`` does not);
* :func:`calibrate_sampling_rate`: largest sampling rate, to ``rtol``.

Search
------
Each engine evaluation costs a full certified accounting (about a second for
``T = 1e5`` steps), so the search spends its effort on *predicting* where the
target is crossed:

1. a cheap surrogate, the saddle-point approximation of ``delta(epsilon)``
   built from the exact cumulant generating function of one step's privacy
   loss (``T psi(theta)``, from the loss model's exploration; milliseconds per
   point), is solved for the parameter;
2. after each engine evaluation the surrogate is corrected by the measured
   offset ``log eps_engine - log eps_surrogate`` (linear in the parameter once
   two points are known), and the next point is placed just inside or just
   outside the predicted crossing so that one more evaluation can close the
   bracket to the tolerance;
3. safeguards: the bracket grows geometrically when the prediction falls on
   the same side repeatedly, and bisection (in log scale) takes over when the
   prediction stops shrinking the bracket.  Points where the engine cannot
   certify (infinite epsilon, grid too large, ...) count as over budget.

Typically 2-4 engine evaluations are needed; pass ``info={}`` to get the
number used, the final bracket and the time.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy.special import erfcx

from pld import _validate as v
from pld import _windows as w
from pld.dpsgd import MAX_STEPS, _check_sampling, dpsgd, dpsgd_mechanism

__all__ = ["calibrate_noise", "calibrate_steps", "calibrate_sampling_rate"]

#: hard cap on engine evaluations in one search
MAX_EVALUATIONS = 60
#: smallest sampling rate the rate search goes down to
MIN_SAMPLING_RATE = 1e-12
#: noise multipliers the noise search explores
SIGMA_RANGE = (1e-3, 1e6)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SQRT_PI_2 = math.sqrt(math.pi / 2)


# --------------------------------------------------------------------------
# surrogate: saddle-point approximation of the composed privacy profile
# --------------------------------------------------------------------------
def _tilted_stats(ex: w.Exploration, th: np.ndarray):
    """log E[e^{th L}], tilted mean and variance of one step's loss, per theta."""
    t = ex.log_p[None, :] + th[:, None] * ex.loss[None, :]
    mx = np.max(t, axis=1)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(t - mx[:, None])
    s0 = e.sum(axis=1)
    s1 = e @ ex.loss
    s2 = e @ (ex.loss * ex.loss)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = s1 / s0
        var = np.maximum(s2 / s0 - m * m, 0.0)
        return mx + np.log(s0), m, var


def _spa_log_delta(parts, th: np.ndarray):
    """Saddle-point ``log delta`` at the epsilon ``K'(theta)`` (returned too).

    With ``K = sum_i k_i psi_i`` the cumulant generating function of the
    composed loss under P, tilting at ``theta`` and treating the tilted loss as
    normal with mean ``eps = K'(theta)`` and variance ``s^2 = K''(theta)``:
    ``delta(eps) = e^{K - theta eps} E[e^{-theta u} (1 - e^{-u})_+]``
    ``= e^{K - theta eps} phi(0) (R(theta s) - R((theta + 1) s))`` with ``R`` the
    Mills ratio.
    """
    K = np.zeros(th.shape)
    M = np.zeros(th.shape)
    V = np.zeros(th.shape)
    for ex, k in parts:
        a, b, c = _tilted_stats(ex, th)
        K += k * a
        M += k * b
        V += k * c
    s = np.sqrt(V)
    r = _SQRT_PI_2 * (erfcx(th * s / math.sqrt(2)) - erfcx((th + 1) * s / math.sqrt(2)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ld = K - th * M + np.log(r) - _LOG_SQRT_2PI
    return np.where(np.isfinite(ld), ld, np.nan), M


_THETA_GRID = np.logspace(-5, 5, 41)


def _spa_epsilon(parts, log_delta: float) -> float:
    """Surrogate epsilon for one direction (``nan`` if the approximation fails)."""
    ld, M = _spa_log_delta(parts, _THETA_GRID)
    below = np.flatnonzero(ld < log_delta)
    if below.size == 0:
        return math.nan
    j = int(below[0])
    if j == 0:
        return max(0.0, float(M[0]))
    lo, hi = math.log(_THETA_GRID[j - 1]), math.log(_THETA_GRID[j])
    for _ in range(36):
        mid = 0.5 * (lo + hi)
        l_mid, _ = _spa_log_delta(parts, np.array([math.exp(mid)]))
        if l_mid[0] > log_delta:
            lo = mid
        else:
            hi = mid
    _, m = _spa_log_delta(parts, np.array([math.exp(hi)]))
    return max(0.0, float(m[0]))


class _Surrogate:
    """Saddle-point epsilon of ``steps`` DP-SGD steps, max over directions."""

    def __init__(self, delta: float, sampling: str):
        self.log_delta = math.log(delta)
        self.sampling = sampling
        self._explore: dict = {}

    def _parts(self, sigma: float, q: float):
        key = (sigma, q)
        hit = self._explore.get(key)
        if hit is None:
            mech = dpsgd_mechanism(sigma, q, sampling=self.sampling)
            dirs = ("remove",) if mech.symmetric else ("remove", "add")
            hit = [w.explore(mech.loss_model(d)) for d in dirs]
            if len(self._explore) > 256:
                self._explore.clear()
            self._explore[key] = hit
        return hit

    def epsilon(self, sigma: float, q: float, steps: float) -> float:
        try:
            vals = [_spa_epsilon([(ex, steps)], self.log_delta) for ex in self._parts(sigma, q)]
        except (FloatingPointError, ValueError, OverflowError):  # pragma: no cover - defensive
            return math.nan
        if any(math.isnan(x) for x in vals):
            return math.nan
        return max(vals)


# --------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------
class _Search:
    """Find the boundary of ``{u : hi(u) <= target}``, a half-line ``[u*, inf)``.

    The caller maps its parameter so that larger ``u`` is "more private"
    (``u = log sigma``, ``-log q``, ``-T``).  ``tol`` is the closing width of
    the bracket ``(bad, good]``; ``integer`` rounds evaluation points.
    """

    def __init__(self, target: float, engine, surrogate, lo: float, hi: float, tol: float,
                 integer: bool = False):
        self.target = target
        self.log_target = math.log(target)
        self.engine = engine          # u -> (lower, upper)
        self.surrogate = surrogate    # u -> surrogate epsilon (nan if unavailable)
        self.lo, self.hi = lo, hi     # domain of u
        self.tol = tol
        self.integer = integer
        self.good = math.inf
        self.bad = -math.inf
        self.evals: list[tuple[float, float, float]] = []  # (u, lower, upper)
        self._sur_cache: dict = {}
        self.last_error: Exception | None = None

    # --- surrogate with correction --------------------------------------
    def _sur(self, u: float) -> float:
        s = self._sur_cache.get(u)
        if s is None:
            val = self.surrogate(u)
            s = math.log(val) if val > 0 and math.isfinite(val) else math.nan
            self._sur_cache[u] = s
        return s

    def _offset(self, u: float) -> float:
        """Correction ``log eps_engine - log eps_surrogate`` at ``u`` (linear fit)."""
        pts = []
        for ue, _, up in self.evals:
            s = self._sur(ue)
            if math.isfinite(up) and up > 0 and math.isfinite(s):
                pts.append((abs(ue - u), ue, math.log(up) - s))
        if not pts:
            return 0.0
        pts.sort()
        if len(pts) == 1 or abs(pts[0][1] - pts[1][1]) < 1e-12:
            return pts[0][2]
        (_, u1, c1), (_, u2, c2) = pts[0], pts[1]
        slope = (c2 - c1) / (u2 - u1)
        # the offset varies slowly; do not extrapolate a noisy slope far
        off = c1 + slope * (u - u1)
        span = max(abs(c1 - c2), 1e-3)
        return min(max(off, min(c1, c2) - span), max(c1, c2) + span)

    def _predict(self) -> float:
        """Corrected-surrogate crossing ``u_r`` (nan if the surrogate fails)."""
        def f(u):
            s = self._sur(u)
            return s + self._offset(u) - self.log_target if math.isfinite(s) else math.nan

        # start next to the evaluations (or the domain's middle)
        if self.evals:
            u0 = min(self.evals, key=lambda e: abs(math.log(e[2]) - self.log_target)
                     if e[2] > 0 and math.isfinite(e[2]) else math.inf)[0]
        else:
            u0 = self._start
        f0 = f(u0)
        if not math.isfinite(f0):
            return math.nan
        # f decreases in u (more private); walk downhill/uphill to bracket the root
        step = max(self.tol, 0.02 if not self.integer else 1.0)
        if self.integer:
            step = max(1.0, abs(u0) * 1e-3)
        a, fa = u0, f0
        direction = 1.0 if f0 > 0 else -1.0
        for _ in range(80):
            b = min(max(a + direction * step, self.lo), self.hi)
            if b == a:
                return b
            fb = f(b)
            if not math.isfinite(fb):
                return math.nan
            if (fb > 0) != (fa > 0):
                break
            a, fa = b, fb
            step *= 2.0
        else:
            return math.nan
        # regula falsi (Illinois) on the bracket [a, b]
        x0, f0_, x1, f1 = a, fa, b, fb
        side = 0
        for _ in range(60):
            x = x1 - f1 * (x1 - x0) / (f1 - f0_)
            fx = f(x)
            if not math.isfinite(fx):
                return math.nan
            if abs(x1 - x0) < 1e-3 * self.tol or fx == 0:
                return x
            if (fx > 0) == (f1 > 0):
                x1, f1 = x, fx
                if side == -1:
                    f0_ /= 2
                side = -1
            else:
                x0, f0_ = x1, f1
                x1, f1 = x, fx
                side = 1
            if abs(x1 - x0) < 1e-3 * self.tol:
                return x1
        return x1

    # --- engine ---------------------------------------------------------
    def _evaluate(self, u: float) -> bool:
        try:
            lo, up = self.engine(u)
        except (MemoryError, FloatingPointError, OverflowError) as exc:
            # the engine could not certify this point: treat it as over budget
            self.last_error = exc
            lo, up = math.nan, math.inf
        self.evals.append((u, lo, up))
        ok = up <= self.target
        if ok:
            self.good = min(self.good, u)
        else:
            self.bad = max(self.bad, u)
        return ok

    def _round(self, u: float, toward_good: bool) -> float:
        if not self.integer:
            return min(max(u, self.lo), self.hi)
        r = math.ceil(u - 1e-9) if toward_good else math.floor(u + 1e-9)
        return float(min(max(r, self.lo), self.hi))

    # --- main loop --------------------------------------------------------
    def run(self, start: float) -> float:
        self._start = min(max(start, self.lo), self.hi)
        tol = self.tol
        m = 0.45 * tol
        reach_good = reach_bad = 0  # consecutive misses on an open side
        prev_width = math.inf
        stalls = 0
        while True:
            if self.good - self.bad <= tol * (1 + 1e-12):
                return self.good
            if self.good == self.lo and self.bad == -math.inf and self.lo > -math.inf:
                return self.good  # the domain's edge is within budget
            if len(self.evals) >= MAX_EVALUATIONS:
                raise RuntimeError(
                    f"calibration did not converge in {MAX_EVALUATIONS} evaluations "
                    f"(bracket {self.bad!r}..{self.good!r}; last engine error: {self.last_error!r})")
            ur = self._predict()
            finite = math.isfinite(self.good) and math.isfinite(self.bad)
            if finite:
                width = self.good - self.bad
                stalls = stalls + 1 if width > 0.5 * prev_width else 0
                prev_width = width
            if not math.isfinite(ur) or (finite and stalls >= 2):
                # bisection (or blind expansion) fallback
                if finite:
                    u = self._round(0.5 * (self.good + self.bad), True)
                    if not (self.bad < u < self.good):
                        u = self._round(0.5 * (self.good + self.bad), False)
                elif math.isfinite(self.good):
                    u = self.good - max(1.0, 2.0 ** reach_bad * tol * 8)
                elif math.isfinite(self.bad):
                    u = self.bad + max(1.0, 2.0 ** reach_good * tol * 8)
                else:
                    u = self._start
                stalls = 0
            else:
                ur = min(max(ur, self.bad), self.good)
                if not math.isfinite(self.good) and not math.isfinite(self.bad):
                    u = self._round(ur + m, True)
                elif not math.isfinite(self.bad):
                    if ur >= self.good - 0.9 * tol:
                        u = self._round(max(ur - m, self.good - 0.95 * tol), False)
                    else:
                        # the prediction says the good point is far: move there, and
                        # expand geometrically if predictions keep falling short
                        u = self._round(min(ur + m, self.good - 2.0 ** reach_bad * tol * 0.5), True)
                elif not math.isfinite(self.good):
                    if ur <= self.bad + 0.9 * tol:
                        u = self._round(min(ur + m, self.bad + 0.95 * tol), True)
                    else:
                        u = self._round(max(ur - m, self.bad + 2.0 ** reach_good * tol * 0.5), False)
                else:
                    if ur - self.bad <= self.good - ur:
                        u = self._round(min(ur + m, self.bad + 0.95 * tol), True)
                    else:
                        u = self._round(max(ur - m, self.good - 0.95 * tol), False)
            u = min(max(u, self.lo), self.hi)
            if not (self.bad < u < self.good):
                u = self._round(0.5 * (max(self.bad, self.lo) + min(self.good, self.hi)), True)
                if not (self.bad < u < self.good):
                    u = self._round(0.5 * (max(self.bad, self.lo) + min(self.good, self.hi)), False)
                if not (self.bad < u < self.good):
                    if self.good == self.lo or self.bad == self.hi:
                        break
                    raise RuntimeError("calibration bracket collapsed")  # pragma: no cover
            ok = self._evaluate(u)
            if ok:
                reach_good = 0
                reach_bad = reach_bad + 1 if not math.isfinite(self.bad) else 0
            else:
                reach_bad = 0
                reach_good = reach_good + 1 if not math.isfinite(self.good) else 0
            if self.bad >= self.hi:
                break
        return self.good


def _check_common(target_epsilon, delta):
    target_epsilon = v.real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    return target_epsilon, delta


def _finish(search: _Search, info, t0: float, value, name: str):
    if info is not None:
        info.update({
            "evaluations": len(search.evals),
            "points": [(u, lo, hi) for u, lo, hi in search.evals],
            "parameter": name,
            "value": value,
            "seconds": time.perf_counter() - t0,
        })


def calibrate_noise(target_epsilon: float, delta: float, sampling_rate: float, steps: int, *,
                    sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None) -> float:
    """Smallest noise multiplier whose certified epsilon at ``delta`` is at most the target.

    Returns ``sigma`` with ``pld.dpsgd(sigma, sampling_rate, steps, sampling=sampling)
    .epsilon(delta) <= target_epsilon`` (verified), and an evaluated
    ``sigma / (1 + rtol)`` or larger point whose certified epsilon exceeds the
    target, so ``sigma`` is the smallest to ``rtol``.

    Parameters
    ----------
    target_epsilon : float in (0, inf)
    delta : float in (0, 1)
    sampling_rate : float in (0, 1]
    steps : int in [1, 1e12]
    sampling : {"poisson", "without_replacement"}
    rtol : float in [1e-6, 1)
        Relative tolerance on the noise multiplier.
    info : dict, optional
        Filled with ``evaluations`` (engine accountings used), ``points`` and ``seconds``.
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    sampling = _check_sampling(sampling)
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = _Surrogate(delta, sampling)

    def engine(u):
        return dpsgd(math.exp(u), sampling_rate, steps, sampling=sampling).epsilon_bounds(delta)

    search = _Search(target_epsilon, engine,
                     lambda u: sur.epsilon(math.exp(u), sampling_rate, steps),
                     math.log(SIGMA_RANGE[0]), math.log(SIGMA_RANGE[1]), math.log1p(rtol))
    start = _sigma_start(target_epsilon, delta, sampling_rate, steps)
    u = search.run(math.log(start))
    if not math.isfinite(u):
        raise ValueError(
            f"no noise multiplier up to {SIGMA_RANGE[1]:g} reaches target_epsilon={target_epsilon!r} at "
            f"delta={delta!r} (last engine error: {search.last_error!r})")
    sigma = math.exp(u)
    _finish(search, info, t0, sigma, "noise_multiplier")
    return sigma


def _sigma_start(eps: float, delta: float, q: float, steps: int) -> float:
    """Rough start: invert the CLT mu = q sqrt(T (e^{1/sigma^2} - 1)) of Gaussian DP."""
    from pld.exact import gaussian_mu  # noqa: F401  (documents the convention)

    # mu-GDP with mu ~ eps / sqrt(2 log(1/delta)) (Gaussian tail), then invert the CLT
    mu = max(eps / math.sqrt(2 * math.log(1 / delta)) * 1.5, 1e-6)
    r = mu / (q * math.sqrt(steps))
    if not math.isfinite(r) or r <= 0:
        return 1.0
    val = math.log1p(r * r)
    return float(min(max(1.0 / math.sqrt(val), SIGMA_RANGE[0] * 10), SIGMA_RANGE[1] / 10))


def calibrate_steps(target_epsilon: float, delta: float, noise_multiplier: float, sampling_rate: float, *,
                    sampling: str = "poisson", info: dict | None = None) -> int:
    """Largest number of steps whose certified epsilon at ``delta`` is at most the target.

    Returns ``T`` with ``pld.dpsgd(noise_multiplier, sampling_rate, T).epsilon(delta) <=
    target_epsilon`` and ``... T + 1 ...`` above the target (both evaluated).
    Capped at 1e12 steps.  Raises ValueError if even one step exceeds the target.
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    sampling = _check_sampling(sampling)

    sur = _Surrogate(delta, sampling)

    def engine(u):
        return dpsgd(noise_multiplier, sampling_rate, int(-u), sampling=sampling).epsilon_bounds(delta)

    search = _Search(target_epsilon, engine,
                     lambda u: sur.epsilon(noise_multiplier, sampling_rate, -u),
                     -float(MAX_STEPS), -1.0, 1.0, integer=True)
    # one step first: it decides feasibility and anchors the correction
    if not search._evaluate(-1.0):
        lo, hi = search.evals[-1][1:]
        raise ValueError(
            f"even one step exceeds target_epsilon={target_epsilon!r}: with noise_multiplier="
            f"{noise_multiplier!r}, sampling_rate={sampling_rate!r} a single step has certified epsilon "
            f"{hi!r} at delta={delta!r}; raise noise_multiplier or lower sampling_rate")
    # start from the surrogate's crossing (uncorrected)
    start = -1.0
    s1 = sur.epsilon(noise_multiplier, sampling_rate, 1.0)
    if math.isfinite(s1) and s1 > 0:
        # eps grows about like sqrt(T) once many steps are composed
        start = -max(1.0, min(float(MAX_STEPS), (target_epsilon / s1) ** 2))
    u = search.run(start)
    T = int(round(-u))
    _finish(search, info, t0, T, "steps")
    return T


def calibrate_sampling_rate(target_epsilon: float, delta: float, noise_multiplier: float, steps: int, *,
                            sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None) -> float:
    """Largest sampling rate (to ``rtol``) whose certified epsilon is at most the target.

    Returns ``q`` with ``pld.dpsgd(noise_multiplier, q, steps).epsilon(delta) <= target_epsilon``
    (verified), and an evaluated rate at most ``q (1 + rtol)`` above the target;
    ``1.0`` if the full batch is within budget.
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    sampling = _check_sampling(sampling)
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = _Surrogate(delta, sampling)

    def engine(u):
        return dpsgd(noise_multiplier, math.exp(-u), steps, sampling=sampling).epsilon_bounds(delta)

    search = _Search(target_epsilon, engine,
                     lambda u: sur.epsilon(noise_multiplier, math.exp(-u), steps),
                     0.0, -math.log(MIN_SAMPLING_RATE), math.log1p(rtol))
    # the full batch first: if it fits, it is the answer
    if search._evaluate(0.0):
        _finish(search, info, t0, 1.0, "sampling_rate")
        return 1.0
    # start: eps ~ q sqrt(T) scaling from the full batch's surrogate
    start = 0.0
    s1 = sur.epsilon(noise_multiplier, 1.0, steps)
    if math.isfinite(s1) and s1 > target_epsilon:
        start = min(-math.log(MIN_SAMPLING_RATE), math.log(s1 / target_epsilon))
    u = search.run(start)
    if not math.isfinite(u):
        raise ValueError(
            f"no sampling rate down to {MIN_SAMPLING_RATE:g} reaches target_epsilon={target_epsilon!r} "
            f"(last engine error: {search.last_error!r})")
    q = math.exp(-u)
    _finish(search, info, t0, q, "sampling_rate")
    return q
