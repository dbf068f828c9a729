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
3. safeguards: a trust region (a factor ``e^0.5`` per step in the parameter,
   doubling while predictions keep pointing further) stops a surrogate of the
   wrong shape (one step, tiny rates) from throwing the search far away; where
   the surrogate is unavailable an engine-only secant in ``(log parameter,
   log eps)`` is used; the bracket grows geometrically when evaluations keep
   falling on one side, and bisection in log scale takes over when predictions
   stop halving the bracket.  Points where the engine cannot certify
   (infinite epsilon, grid too large, ...) count as over budget.

Only the certified upper end decides; the cheap lower end of every bracket is
reported in ``info``.  Typically 2-4 engine evaluations are needed (2 is the
minimum: one point within budget and one just beyond); pass ``info={}`` to
get the number used, every evaluated point and the time.
"""

from __future__ import annotations

import math
import time

import numpy as np

from pld import _validate as v
from pld import _windows as w
from pld.planner import EPS_RTOL
from pld.dpsgd import MAX_STEPS, dpsgd, dpsgd_mechanism, sampling_scheme

__all__ = ["calibrate_noise", "calibrate_steps", "calibrate_sampling_rate", "calibrate_parameter"]

#: hard cap on engine evaluations in one search
MAX_EVALUATIONS = 60
#: largest move (in log parameter) away from the nearest evaluation per step;
#: doubles while predictions keep pointing further
TRUST_RADIUS = 0.5
#: smallest sampling rate the rate search goes down to
MIN_SAMPLING_RATE = 1e-12
#: noise multipliers the noise search explores
SIGMA_RANGE = (1e-3, 1e12)


# --------------------------------------------------------------------------
# surrogate: saddle-point approximation of the composed privacy profile
# (pld._windows.saddle_log_delta: Daniels / Lugannani-Rice, from the numba
# tilted moments of each step's exploration)
# --------------------------------------------------------------------------
_THETA_GRID = np.logspace(-5, 5, 41)


def _spa_epsilon(parts, log_delta: float) -> float:
    """Surrogate epsilon for one direction (``nan`` if the approximation fails)."""
    return _spa_epsilon_of(w.Composite(parts), log_delta)


def _spa_epsilon_of(comp, log_delta: float, hint: list | None = None) -> float:
    """Surrogate epsilon of one direction's composite (``nan`` if the approximation fails).

    ``hint``, a one-element list, carries the crossing tilt from one call to the
    next: a search asks for nearby parameters, whose crossings lie close, so a
    bracket of +-0.35 in log theta around the last one usually holds it and the
    41-point scan is skipped (3x fewer saddle-point evaluations).
    """
    def log_d(log_theta: float) -> float:
        return w.saddle_log_delta(comp, math.exp(log_theta))[1]

    if hint and hint[0]:
        lo, hi = math.log(hint[0]) - 0.35, math.log(hint[0]) + 0.35
        if log_d(lo) > log_delta and -math.inf < log_d(hi) < log_delta:
            for _ in range(16):  # as below: theta to 1e-5 relative
                mid = 0.5 * (lo + hi)
                if log_d(mid) > log_delta:
                    lo = mid
                else:
                    hi = mid
            hint[0] = math.exp(hi)
            return max(0.0, float(w.saddle_log_delta(comp, math.exp(hi))[0]))
    parts = comp.parts
    # (a failed approximation, -inf, is never taken for a crossing)
    scan = [w.saddle_log_delta(comp, float(t)) for t in _THETA_GRID]
    below = [i for i, (_, ld) in enumerate(scan) if -math.inf < ld < log_delta]
    if not below:
        # no crossing: a bounded loss (e.g. the add direction) whose delta never
        # gets that small at finite epsilon; its largest total loss stands in
        top = sum(k * ex.loss_max for ex, k in parts)
        return float(top) if math.isfinite(top) else math.nan
    j = below[0]
    if j == 0:
        return max(0.0, float(scan[0][0]))
    lo, hi = math.log(_THETA_GRID[j - 1]), math.log(_THETA_GRID[j])
    for _ in range(16):  # theta to 1e-5 relative: far below the surrogate's own error (~1%)
        mid = 0.5 * (lo + hi)
        if w.saddle_log_delta(comp, math.exp(mid))[1] > log_delta:
            lo = mid
        else:
            hi = mid
    if hint is not None:
        hint[0] = math.exp(hi)
    return max(0.0, float(w.saddle_log_delta(comp, math.exp(hi))[0]))


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
        except Exception:  # pragma: no cover - the surrogate is optional: fall back to engine secants
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
    (``u = log sigma``, ``-log q``, ``-log T``).  ``tol_at(u)`` is the width at
    which a bracket ``(bad, good]`` with ``good = u`` counts as closed; ``snap``
    rounds evaluation points for integer parameters (toward the good or the
    bad side).
    """

    def __init__(self, target: float, engine, surrogate, lo: float, hi: float, tol_at, snap=None):
        self.target = target
        self.log_target = math.log(target)
        self.engine = engine          # u -> (lower, upper)
        self.surrogate = surrogate    # u -> surrogate epsilon (nan if unavailable)
        self.lo, self.hi = lo, hi     # domain of u
        self.tol_at = tol_at
        self.snap = snap
        self.good = math.inf
        self.bad = -math.inf
        self.evals: list[tuple[float, float, float]] = []  # (u, lower, upper)
        self._sur_cache: dict = {}
        self.last_error: Exception | None = None
        self.engine_seconds = 0.0

    # --- surrogate with correction --------------------------------------
    def _sur(self, u: float) -> float:
        s = self._sur_cache.get(u)
        if s is None:
            val = self.surrogate(u)
            s = math.log(val) if val > 0 and math.isfinite(val) else math.nan
            self._sur_cache[u] = s
        return s

    def _offset(self, u: float) -> float:
        """Correction ``log eps_engine - log eps_surrogate`` at ``u``.

        Linear through the two evaluations nearest ``u``: with the surrogate's
        own slope this is a secant step on the measured residual (moves are
        limited by the trust region in :meth:`run`).
        """
        pts = []
        for ue, _, up in self.evals:
            if math.isfinite(up) and up > 0:
                s = self._sur(ue)
                if math.isfinite(s):
                    pts.append((abs(ue - u), ue, math.log(up) - s))
        if not pts:
            return 0.0
        pts.sort()
        if len(pts) == 1 or abs(pts[0][1] - pts[1][1]) < 1e-15:
            return pts[0][2]
        (_, u1, c1), (_, u2, c2) = pts[0], pts[1]
        return c1 + (c2 - c1) / (u2 - u1) * (u - u1)

    def _f(self, u: float) -> float:
        s = self._sur(u)
        return s + self._offset(u) - self.log_target if math.isfinite(s) else math.nan

    def _secant(self) -> float:
        """Engine-only prediction: secant in ``(u, log eps)`` through the two
        evaluations closest to the target (slope -1 from a single one)."""
        pts = sorted(((abs(math.log(up) - self.log_target), ue, math.log(up))
                      for ue, _, up in self.evals if 0 < up < math.inf))
        if not pts:
            return math.nan
        _, u1, l1 = pts[0]
        other = next(((ue, le) for _, ue, le in pts[1:] if ue != u1 and le != l1), None)
        slope = -1.0
        if other is not None:
            s = (other[1] - l1) / (other[0] - u1)
            if s < 0:
                slope = s
        return u1 + (self.log_target - l1) / slope

    def _predict(self, u0: float) -> float:
        """Corrected-surrogate crossing (engine secant if the surrogate fails)."""
        f0 = self._f(u0)
        if not math.isfinite(f0):
            return self._secant()
        step = max(self.tol_at(u0), 0.01)
        a, fa = u0, f0
        direction = 1.0 if f0 > 0 else -1.0  # f decreases in u
        for _ in range(100):
            b = min(max(a + direction * step, self.lo), self.hi)
            if b == a:
                return b
            fb = self._f(b)
            if not math.isfinite(fb):
                return self._secant()
            if (fb > 0) != (fa > 0):
                break
            a, fa = b, fb
            step *= 2.0
        else:
            return self._secant()
        # Illinois regula falsi on [a, b]
        x0, y0, x1, y1 = a, fa, b, fb
        side = 0
        eps_u = 0.02 * self.tol_at(a)  # well inside the 0.45 tol margin of the aims
        x = x1
        for _ in range(60):
            x = x1 - y1 * (x1 - x0) / (y1 - y0)
            y = self._f(x)
            if not math.isfinite(y):
                return self._secant()
            if y == 0:
                return x
            if (y > 0) == (y1 > 0):
                x1, y1 = x, y
                if side == -1:
                    y0 /= 2
                side = -1
            else:
                x0, y0 = x1, y1
                x1, y1 = x, y
                side = 1
            if abs(x1 - x0) < eps_u:
                break
        return x

    # --- engine ---------------------------------------------------------
    def evaluate(self, u: float) -> bool:
        t = time.perf_counter()
        try:
            lo, up = self.engine(u)
        except (MemoryError, FloatingPointError, OverflowError) as exc:
            # the engine could not certify this point: treat it as over budget
            self.last_error = exc
            lo, up = math.nan, math.inf
        finally:
            self.engine_seconds += time.perf_counter() - t
        self.evals.append((u, lo, up))
        ok = up <= self.target
        if ok:
            self.good = min(self.good, u)
        else:
            self.bad = max(self.bad, u)
        return ok

    def _place(self, u: float, toward_good: bool) -> float:
        u = min(max(u, self.lo), self.hi)
        if self.snap is not None:
            u = self.snap(u, toward_good)
        return u

    def closed(self) -> bool:
        if not (math.isfinite(self.good) and math.isfinite(self.bad)):
            return False
        return self.good - self.bad <= self.tol_at(self.good) * (1 + 1e-9)

    # --- main loop --------------------------------------------------------
    def run(self, start: float) -> float:
        """Return the smallest good ``u`` found once the bracket is closed
        (``inf`` if the whole domain is over budget)."""
        start = self._place(start, True)
        stalls = 0
        trust_growth = 0
        same_side = 0
        last_side = None
        prev_width = math.inf
        while True:
            if self.closed():
                return self.good
            if self.good <= self.lo:
                return self.good  # the domain's edge is within budget
            if self.bad >= self.hi:
                return math.inf   # nothing in the domain is within budget
            if len(self.evals) >= MAX_EVALUATIONS:
                raise RuntimeError(
                    f"calibration did not converge in {MAX_EVALUATIONS} evaluations "
                    f"(bracket {self.bad!r}..{self.good!r}; last engine error: {self.last_error!r})")
            finite = math.isfinite(self.good) and math.isfinite(self.bad)
            if finite:
                width = self.good - self.bad
                stalls = stalls + 1 if width > 0.5 * prev_width else 0
                prev_width = width
            if not self.evals:
                u0 = start
            else:
                u0 = min(self.evals, key=lambda e: abs(math.log(e[2]) - self.log_target)
                         if 0 < e[2] < math.inf else math.inf)[0]
            ur = self._predict(u0)
            if self.evals and math.isfinite(ur):
                # trust region: a surrogate of the wrong shape (few steps, tiny
                # rates) must not throw the search far from what was measured
                radius = TRUST_RADIUS * 2.0 ** trust_growth
                if abs(ur - u0) > radius:
                    ur = u0 + math.copysign(radius, ur - u0)
                    trust_growth += 1
                else:
                    trust_growth = 0
            u = None
            if finite and stalls >= 2:
                u = self._bisect()
                stalls = 0
            elif not math.isfinite(ur) or same_side >= 3:
                # no usable prediction, or predictions keep missing: bisect or expand
                if finite:
                    u = self._bisect()
                elif math.isfinite(self.good):
                    u = self._place(self.good - 2.0 ** same_side * max(self.tol_at(self.good), 0.05), False)
                elif math.isfinite(self.bad):
                    u = self._place(self.bad + 2.0 ** same_side * max(self.tol_at(self.bad), 0.05), True)
                else:
                    u = start
            else:
                ur = min(max(ur, self.bad), self.good)
                tau = self.tol_at(ur)
                m = 0.45 * tau
                near_good = math.isfinite(self.good) and self.good - ur <= 0.9 * self.tol_at(self.good)
                near_bad = math.isfinite(self.bad) and ur - self.bad <= 0.9 * tau
                if near_good and (not near_bad or self.good - ur <= ur - self.bad):
                    # one point just outside closes the bracket
                    cands = [self._place(max(ur - m, self.good - 0.95 * self.tol_at(self.good)), False)]
                elif near_bad:
                    # one point just inside closes the bracket
                    cands = [self._place(min(ur + m, self.bad + 0.95 * self.tol_at(self.bad)), True)]
                else:
                    # straddle the prediction: inside first, then outside
                    cands = [self._place(ur + m, True), self._place(ur - m, False)]
                u = next((c for c in cands if self.bad < c < self.good), None)
            if u is None or not (self.bad < u < self.good):
                u = self._bisect()
            if u is None or not (self.bad < u < self.good):
                raise RuntimeError(  # pragma: no cover - the bracket always has room
                    f"calibration bracket collapsed at {self.bad!r}..{self.good!r}")
            ok = self.evaluate(u)
            same_side = same_side + 1 if ok == last_side and not finite else 0
            last_side = ok

    def _bisect(self):
        a = max(self.bad, self.lo)
        b = min(self.good, self.hi)
        for toward_good in (True, False):
            u = self._place(0.5 * (a + b), toward_good)
            if self.bad < u < self.good:
                return u
        return None


def _check_common(target_epsilon, delta):
    target_epsilon = v.real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    return target_epsilon, delta


def _finish(search: _Search, info, t0: float, value, name: str, to_param):
    if info is not None:
        info.update({
            "parameter": name,
            "value": value,
            "evaluations": len(search.evals),
            "points": [(to_param(u), lo, hi) for u, lo, hi in search.evals],
            "seconds": time.perf_counter() - t0,
            "engine_seconds": search.engine_seconds,
        })


def calibrate_noise(target_epsilon: float, delta: float, sampling_rate: float, steps: int, *,
                    sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None) -> float:
    """Smallest noise multiplier whose certified epsilon at ``delta`` is at most the target.

    Returns ``sigma`` with ``pld.dpsgd(sigma, sampling_rate, steps, sampling=sampling)
    .epsilon(delta) <= target_epsilon`` (evaluated), next to an evaluated
    noise multiplier at least ``sigma / (1 + rtol)`` whose certified epsilon
    exceeds the target: ``sigma`` is the smallest to ``rtol``.  Every target is
    feasible (epsilon tends to 0 as the noise grows); the search covers noise
    multipliers in ``[1e-3, 1e12]``.

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    sampling_rate : float
        In ``(0, 1]``.
    steps : int
        In ``[1, 1e12]``.
    sampling : {"poisson", "without_replacement"}
        Sampling scheme, as in :func:`pld.dpsgd`.
    rtol : float
        Relative tolerance on the noise multiplier, in ``[1e-6, 1)``.
    info : dict, optional
        Filled with ``evaluations`` (engine accountings used), ``points``
        (``(sigma, eps_lower, eps_upper)`` per evaluation, in order), ``seconds``
        and ``engine_seconds`` (time spent in the engine).

    Returns
    -------
    float
        The noise multiplier.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if no noise
        multiplier up to 1e12 certifies the target.

    See Also
    --------
    calibrate_parameter : the same for any mechanism's parameter.

    Examples
    --------
    >>> import pld
    >>> sigma = pld.calibrate_noise(target_epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=1000)
    >>> pld.dpsgd(sigma, 0.01, 1000).epsilon(1e-5) <= 2.0
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    sampling = sampling_scheme(sampling)
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = _Surrogate(delta, sampling)
    tol = math.log1p(rtol)

    def engine(u):
        # brackets a few times narrower than the epsilon step between sigma and
        # sigma / (1 + rtol) separate the two; tighter ones only cost time
        return dpsgd(math.exp(u), sampling_rate, steps, sampling=sampling).epsilon_bounds(
            delta, rtol=_bracket_rtol(rtol))

    search = _Search(target_epsilon, engine, lambda u: sur.epsilon(math.exp(u), sampling_rate, steps),
                     math.log(SIGMA_RANGE[0]), math.log(SIGMA_RANGE[1]), lambda u: tol)
    u = search.run(_surrogate_root(search, math.log(_sigma_start(target_epsilon, delta, sampling_rate, steps))))
    if not math.isfinite(u):
        raise ValueError(
            f"no noise multiplier up to {SIGMA_RANGE[1]:g} certifies target_epsilon={target_epsilon!r} at "
            f"delta={delta!r} (last engine error: {search.last_error!r})")
    sigma = math.exp(u)
    _finish(search, info, t0, sigma, "noise_multiplier", math.exp)
    return sigma


def _bracket_rtol(rtol: float) -> float:
    """Engine bracket target for a search to relative tolerance ``rtol``.

    epsilon moves by about ``rtol * epsilon`` (or more) between the two
    noise multipliers (sampling rates) the search must tell apart, so brackets
    of a quarter of that suffice; never looser than 1e-3, never tighter than
    the engine's default.
    """
    return min(1e-3, max(EPS_RTOL, rtol / 4.0))


def _surrogate_root(search: _Search, u0: float) -> float:
    """Uncorrected surrogate crossing from ``u0`` (``u0`` itself if it fails)."""
    ur = search._predict(u0)
    return ur if math.isfinite(ur) else u0


def _sigma_start(eps: float, delta: float, q: float, steps: int) -> float:
    """Rough start: a Gaussian-DP mu for (eps, delta), inverted through the CLT
    ``mu = q sqrt(T (e^{1/sigma^2} - 1))`` (Bu et al.; Dong, Roth & Su)."""
    mu = max(eps / math.sqrt(2 * math.log(1 / delta)) * 1.5, 1e-6)
    r = mu / (q * math.sqrt(steps))
    val = math.log1p(r * r)
    if not (math.isfinite(val) and val > 0):
        return 1.0
    return float(min(max(1.0 / math.sqrt(val), SIGMA_RANGE[0] * 10), SIGMA_RANGE[1] / 10))


def _snap_steps(u: float, toward_good: bool) -> float:
    """``u = -log T`` rounded to an integer ``T`` (fewer steps is the good side)."""
    t = math.exp(-u)
    r = math.floor(t * (1 + 1e-12)) if toward_good else math.ceil(t * (1 - 1e-12))
    r = min(max(r, 1), MAX_STEPS)
    return -math.log(r)


def calibrate_steps(target_epsilon: float, delta: float, noise_multiplier: float, sampling_rate: float, *,
                    sampling: str = "poisson", info: dict | None = None) -> int:
    """Largest number of steps whose certified epsilon at ``delta`` is at most the target.

    Returns ``T`` with ``pld.dpsgd(noise_multiplier, sampling_rate, T, sampling=sampling)
    .epsilon(delta) <= target_epsilon``, ``T + 1`` evaluated above the target
    (capped at 1e12 steps).

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    sampling_rate : float
        In ``(0, 1]``.
    sampling : {"poisson", "without_replacement"}
        Sampling scheme, as in :func:`pld.dpsgd`.
    info : dict, optional
        Filled as in :func:`calibrate_noise`.

    Returns
    -------
    int
        The number of steps.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if even one step
        exceeds the target.

    Examples
    --------
    >>> import pld
    >>> T = pld.calibrate_steps(target_epsilon=2.0, delta=1e-5, noise_multiplier=1.0, sampling_rate=0.01)
    >>> pld.dpsgd(1.0, 0.01, T).epsilon(1e-5) <= 2.0 < pld.dpsgd(1.0, 0.01, T + 1).epsilon(1e-5)
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    sampling = sampling_scheme(sampling)

    sur = _Surrogate(delta, sampling)

    def engine(u):
        t = int(round(math.exp(-u)))
        return dpsgd(noise_multiplier, sampling_rate, t, sampling=sampling).epsilon_bounds(delta)

    search = _Search(target_epsilon, engine, lambda u: sur.epsilon(noise_multiplier, sampling_rate, math.exp(-u)),
                     -math.log(MAX_STEPS), 0.0, lambda u: math.log1p(math.exp(u)), _snap_steps)
    # start from the surrogate's crossing, scaled from one step (eps ~ sqrt(T))
    s1 = sur.epsilon(noise_multiplier, sampling_rate, 1.0)
    u0 = -math.log(min(MAX_STEPS, max(1.0, (target_epsilon / s1) ** 2))) if s1 > 0 and math.isfinite(s1) else 0.0
    u = search.run(_surrogate_root(search, u0))
    if not math.isfinite(u):
        hi = next((up for uu, _, up in search.evals if uu == 0.0), math.nan)
        raise ValueError(
            f"even one step exceeds target_epsilon={target_epsilon!r}: with noise_multiplier="
            f"{noise_multiplier!r} and sampling_rate={sampling_rate!r} a single step has certified epsilon "
            f"{hi!r} at delta={delta!r}; raise noise_multiplier or lower sampling_rate")
    T = int(round(math.exp(-u)))
    _finish(search, info, t0, T, "steps", lambda u: int(round(math.exp(-u))))
    return T


def calibrate_sampling_rate(target_epsilon: float, delta: float, noise_multiplier: float, steps: int, *,
                            sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None) -> float:
    """Largest sampling rate (to ``rtol``) whose certified epsilon is at most the target.

    Returns ``q`` with ``pld.dpsgd(noise_multiplier, q, steps, sampling=sampling).epsilon(delta)
    <= target_epsilon`` (evaluated), next to an evaluated rate at most
    ``q (1 + rtol)`` above the target; ``1.0`` if the full batch is within
    budget.  The search covers rates down to 1e-12.

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    steps : int
        In ``[1, 1e12]``.
    sampling : {"poisson", "without_replacement"}
        Sampling scheme, as in :func:`pld.dpsgd`.
    rtol : float
        Relative tolerance on the rate, in ``[1e-6, 1)``.
    info : dict, optional
        Filled as in :func:`calibrate_noise`.

    Returns
    -------
    float
        The sampling rate.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if no rate down to
        1e-12 certifies the target.

    Examples
    --------
    >>> import pld
    >>> q = pld.calibrate_sampling_rate(target_epsilon=2.0, delta=1e-5, noise_multiplier=1.0, steps=1000)
    >>> pld.dpsgd(1.0, q, 1000).epsilon(1e-5) <= 2.0
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = _check_common(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    sampling = sampling_scheme(sampling)
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = _Surrogate(delta, sampling)
    tol = math.log1p(rtol)

    def engine(u):
        return dpsgd(noise_multiplier, math.exp(-u), steps, sampling=sampling).epsilon_bounds(
            delta, rtol=_bracket_rtol(rtol))

    search = _Search(target_epsilon, engine, lambda u: sur.epsilon(noise_multiplier, math.exp(-u), steps),
                     0.0, -math.log(MIN_SAMPLING_RATE), lambda u: tol)
    # start: eps ~ q sqrt(T) from the full batch's surrogate
    s1 = sur.epsilon(noise_multiplier, 1.0, steps)
    u0 = math.log(s1 / target_epsilon) if s1 > target_epsilon and math.isfinite(s1) else 0.0
    u = search.run(_surrogate_root(search, min(u0, search.hi)))
    if not math.isfinite(u):
        raise ValueError(
            f"no sampling rate down to {MIN_SAMPLING_RATE:g} certifies target_epsilon={target_epsilon!r} "
            f"(last engine error: {search.last_error!r})")
    q = math.exp(-u)
    _finish(search, info, t0, q, "sampling_rate", lambda u: math.exp(-u))
    return q


# --------------------------------------------------------------------------
# any mechanism's parameter
# --------------------------------------------------------------------------
def _as_pld(obj, param):
    from pld.mechanisms import Mechanism
    from pld.distribution import PLD

    if isinstance(obj, PLD):
        return obj
    if isinstance(obj, Mechanism):
        return obj.pld()
    raise TypeError(f"make({param!r}) must return a pld.PLD or a pld mechanism, got {type(obj).__name__}")


def _snap_integer(sign: float):
    """Snap ``u = sign * log n`` to an integer ``n`` toward the good or the bad side
    (larger ``u`` is the good side)."""
    def snap(u: float, toward_good: bool) -> float:
        n = math.exp(sign * u)
        up = (toward_good and sign > 0) or (not toward_good and sign < 0)
        r = math.ceil(n * (1 - 1e-12)) if up else math.floor(n * (1 + 1e-12))
        return sign * math.log(max(r, 1))
    return snap


def calibrate_parameter(make, target_epsilon: float, delta: float, *, bounds: tuple | None = None,
                        increasing: bool | None = None, discrete: bool = False, start: float | None = None,
                        rtol: float = 1e-3, info: dict | None = None):
    """Best value of any mechanism's parameter for a target epsilon (certified).

    The native counterpart of dp_accounting's ``calibrate_dp_mechanism``:
    ``make(x)`` builds what runs for parameter ``x`` (a mechanism, or a PLD of
    a whole composition) and the search returns the most useful ``x`` whose
    certified epsilon at ``delta`` is at most the target -- the smallest noise
    scale, or the largest number of steps, sampling rate or per-step epsilon.
    The returned value has been evaluated (its certified upper epsilon is
    within budget) next to an evaluated value beyond it, within ``rtol``
    (one step when ``discrete``), that is not.

    Parameters
    ----------
    make : callable
        ``make(x) -> pld.PLD | pld.Mechanism`` for a parameter ``x > 0``;
        epsilon must be monotone in ``x``.
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    bounds : (float, float), optional
        Range searched, ``0 < low < high < inf``; default ``(1e-6, 1e6)``, or
        ``(1, 1e12)`` when ``discrete``.
    increasing : bool, optional
        Whether epsilon grows with ``x`` (steps, rates, per-step epsilons:
        ``True``; noise scales: ``False``).  Default: read off the first two
        evaluations.
    discrete : bool, default False
        ``x`` is an integer (e.g. a number of steps or releases).
    start : float, optional
        First point evaluated (default: the geometric middle of ``bounds``).
    rtol : float, default 1e-3
        Relative tolerance on ``x`` (ignored when ``discrete``).
    info : dict, optional
        Filled with ``evaluations``, ``points`` (``(x, eps_lower, eps_upper)``
        per evaluation), ``seconds`` and ``engine_seconds``.

    Returns
    -------
    float or int
        The calibrated parameter (``int`` when ``discrete``).

    Raises
    ------
    TypeError
        If ``make`` is not callable or returns neither a PLD nor a mechanism.
    ValueError
        If an argument is out of range, no ``x`` in ``bounds`` meets the
        target, or epsilon does not change over ``bounds``.

    Examples
    --------
    Smallest Gaussian noise for 100 releases at (2, 1e-5):

    >>> import pld
    >>> sigma = pld.calibrate_parameter(lambda s: pld.Gaussian(s).pld().self_compose(100), 2.0, 1e-5)
    >>> round(sigma, 2)
    19.94
    """
    t0 = time.perf_counter()
    if not callable(make):
        raise TypeError(f"make must be callable (parameter -> PLD or mechanism), got {type(make).__name__}")
    target_epsilon, delta = _check_common(target_epsilon, delta)
    if not isinstance(discrete, bool):
        raise TypeError(f"discrete must be True or False, got {discrete!r}")
    if increasing is not None and not isinstance(increasing, bool):
        raise TypeError(f"increasing must be True, False or None, got {increasing!r}")
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)
    if bounds is None:
        bounds = (1, MAX_STEPS) if discrete else (1e-6, 1e6)
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise TypeError(f"bounds must be a pair (low, high), got {bounds!r}") from None
    low = v.real("bounds[0]", low, low=0.0, low_open=True)
    high = v.real("bounds[1]", high, low=low, low_open=True)
    if not math.isfinite(high):
        raise ValueError(f"bounds[1] must be finite, got {high!r}")
    if discrete:
        low, high = math.ceil(low), math.floor(high)
        if not low < high:
            raise ValueError(f"bounds must contain at least two integers, got {bounds!r}")
    x0 = math.sqrt(low * high) if start is None else v.real("start", start, low=low, high=high)

    plds: dict = {}
    cache: dict = {}

    def pld_at(x):
        x = int(round(x)) if discrete else x
        d = plds.get(x)
        if d is None:
            if len(plds) > 512:  # (the search visits tens of points; keep memory bounded)
                plds.clear()
            d = plds[x] = _as_pld(make(x), x)
        return d

    def evaluate(x: float) -> tuple[float, float]:
        x = int(round(x)) if discrete else x
        hit = cache.get(x)
        if hit is None:
            d = pld_at(x)
            hit = d.epsilon_bounds(delta) if discrete else d.epsilon_bounds(delta, rtol=_bracket_rtol(rtol))
            cache[x] = hit = (float(hit[0]), float(hit[1]))
        return hit

    log_delta = math.log(delta)
    hints: dict = {}  # per direction: the last crossing tilt of the surrogate

    def surrogate(x: float) -> float:
        """Saddle-point epsilon of ``make(x)`` (as for DP-SGD; ``nan`` where it fails)."""
        try:
            d = pld_at(x)
            vals = [_spa_epsilon_of(d.loss_law(dr), log_delta, hints.setdefault(dr, [None]))
                    for dr in d.directions]
        except Exception:  # the surrogate only steers the search: engine secants replace it
            return math.nan
        return math.nan if any(math.isnan(e) for e in vals) else max(vals)

    if increasing is None:
        # read the direction off the surrogate at two points, else off two evaluations
        # (the search reuses them)
        x1 = min(high, max(low, x0 * math.exp(0.5)))
        if x1 == x0:
            x1 = max(low, x0 * math.exp(-0.5))
        if discrete:
            x0, x1 = round(x0), round(x1) if round(x1) != round(x0) else round(x0) + (1 if x0 < high else -1)
        s0, s1 = surrogate(x0), surrogate(x1)
        if math.isfinite(s0) and math.isfinite(s1) and abs(s1 - s0) > 1e-3 * max(s0, s1):
            increasing = (s1 > s0) == (x1 > x0)
    if increasing is None:
        for _ in range(60):
            e0, e1 = evaluate(x0)[1], evaluate(x1)[1]
            if e0 != e1:
                break
            # equal (e.g. both 0 or both certifiably tiny): look further apart
            a, b = min(x0, x1), max(x0, x1)
            if a <= low and b >= high:
                raise ValueError(f"epsilon does not change over bounds {bounds!r} (certified epsilon {e0!r} "
                                 "at both ends); give other bounds or increasing=")
            a, b = max(low, a / 4.0), min(high, b * 4.0)
            x0, x1 = (int(a), int(b)) if discrete else (a, b)
        increasing = (e1 > e0) == (x1 > x0)
    sign = -1.0 if increasing else 1.0  # u = sign * log x: larger u is more private

    def to_param(u: float):
        x = math.exp(sign * u)
        return int(round(x)) if discrete else x

    tol = math.log1p(rtol)
    tol_at = (lambda u: math.log1p(1.0 / max(1.0, math.exp(sign * u)))) if discrete else (lambda u: tol)
    lo_u, hi_u = sorted((sign * math.log(low), sign * math.log(high)))
    search = _Search(target_epsilon, lambda u: evaluate(to_param(u)), lambda u: surrogate(to_param(u)),
                     lo_u, hi_u, tol_at, _snap_integer(sign) if discrete else None)
    for x, (elo, eup) in list(cache.items()):  # points already evaluated count
        u = sign * math.log(x)
        search.evals.append((u, elo, eup))
        if eup <= target_epsilon:
            search.good = min(search.good, u)
        else:
            search.bad = max(search.bad, u)
    u = search.run(_surrogate_root(search, sign * math.log(x0)))
    if not math.isfinite(u):
        best = low if increasing else high
        raise ValueError(f"no parameter in bounds {bounds!r} certifies target_epsilon={target_epsilon!r} at "
                         f"delta={delta!r} (at {best!r}: epsilon {evaluate(best)[1]!r}); widen bounds "
                         f"(last engine error: {search.last_error!r})")
    value = to_param(u)
    _finish(search, info, t0, value, "parameter", to_param)
    return value
