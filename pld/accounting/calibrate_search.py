"""The calibration search: a surrogate-guided bracket on one parameter.

:class:`Search` finds the point where a parameter's certified epsilon crosses
a target, spending engine evaluations (each a full certified accounting) only
where a cheap surrogate, corrected by the measured offsets, predicts the
crossing; see :mod:`pld.accounting.calibrate` for the method.  :class:`Surrogate` is the
saddle-point approximation of DP-SGD's composed privacy profile that guides
the DP-SGD searches.  Both the DP-SGD calibrations (:mod:`pld.accounting.calibrate`) and
:func:`pld.calibrate_parameter` (:mod:`pld.accounting.calibrate_mechanism`) run on it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from pld import _validate as v
from pld.accounting import sampling as sampling_registry
from pld.accounting.dpsgd import dpsgd_mechanism
from pld.engine import windows as w
from pld.engine.targets import EPS_RTOL

__all__ = ["Search", "Surrogate", "check_target", "record_info", "bracket_rtol", "surrogate_root",
           "spa_epsilon", "spa_epsilon_of"]

#: two evaluations this many nats of epsilon either side of the target: their secant
#: aims the search (:meth:`Search._straddle`)
STRADDLE = 0.5
#: hard cap on engine evaluations in one search
MAX_EVALUATIONS = 60
#: largest move (in log parameter) away from the nearest evaluation per step;
#: doubles while predictions keep pointing further
TRUST_RADIUS = 0.5

# --------------------------------------------------------------------------
# surrogate: saddle-point approximation of the composed privacy profile
# (pld.engine.windows.saddle_log_delta: Daniels / Lugannani-Rice, from the numba
# tilted moments of each step's exploration)
# --------------------------------------------------------------------------
_THETA_GRID = np.logspace(-5, 5, 41)


def spa_epsilon(parts, log_delta: float) -> float:
    """Surrogate epsilon for one direction (``nan`` if the approximation fails)."""
    return spa_epsilon_of(w.Composite(parts), log_delta)


def spa_epsilon_of(comp, log_delta: float, hint: list | None = None) -> float:
    """Surrogate epsilon of one direction's composite (``nan`` if the approximation fails).

    ``hint``, a one-element list, carries the crossing tilt from one call to the
    next: a search asks for nearby parameters, whose crossings lie close, so a
    bracket of +-0.35 in log theta around the last one usually holds it and the
    41-point scan is skipped.
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


def _log_estimate(lower: float, upper: float) -> float:
    """Log of a point estimate of epsilon from a certified bracket, for aiming.

    The middle of the bracket: brackets of different widths (a coarse one that
    already decided a point, a fine one near the target) then predict alike,
    where their upper ends would differ by their widths.  Decisions still read
    the certified upper end.
    """
    if math.isfinite(lower) and 0 < lower <= upper:
        return math.log(0.5 * (lower + upper))
    return math.log(upper)


class Surrogate:
    """Saddle-point epsilon of ``steps`` DP-SGD steps, max over directions."""

    def __init__(self, delta: float, sampling: str):
        self.log_delta = math.log(delta)
        # a run-level scheme (random allocation, shuffling) has no per-step law
        # to explore; Poisson sampling at the same rate has the same shape in
        # sigma, and the search's measured offset absorbs the difference
        run_level = sampling_registry.get(sampling).run_pld is not None
        self.sampling = "poisson" if run_level else sampling
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
            vals = [spa_epsilon([(ex, steps)], self.log_delta) for ex in self._parts(sigma, q)]
        except Exception:  # pragma: no cover - the surrogate is optional: fall back to engine secants
            return math.nan
        if any(math.isnan(x) for x in vals):
            return math.nan
        return max(vals)


# --------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------
class Search:
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
        for ue, lo, up in self.evals:
            if math.isfinite(up) and up > 0:
                s = self._sur(ue)
                if math.isfinite(s):
                    pts.append((abs(ue - u), ue, _log_estimate(lo, up) - s))
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

    def _straddle(self) -> float | None:
        """The engine's own secant crossing, in ``(u, log eps)``, between the nearest
        evaluations on either side of the target, where both lie within ``STRADDLE``
        nats of it (None otherwise).  There the curve is near linear, while a surrogate of
        the wrong shape (a heavy tail's saddle point at small q), corrected by a linear
        offset, kept landing on one side (sigma 0.5326, 0.5656 at 55% and 9% above the
        target, then 0.5746, ...)."""
        above = [(_log_estimate(lo, up) - self.log_target, ue) for ue, lo, up in self.evals
                 if 0 < up < math.inf and up > self.target]
        below = [(_log_estimate(lo, up) - self.log_target, ue) for ue, lo, up in self.evals
                 if 0 < up <= self.target]
        if not above or not below:
            return None
        (la, ua), (lb, ub) = min(above), max(below)
        if not (la <= STRADDLE and lb >= -STRADDLE) or la <= lb or ua == ub:
            return None
        return ua + (ub - ua) * la / (la - lb)

    def _secant(self) -> float:
        """Engine-only prediction: secant in ``(u, log eps)`` through the two
        evaluations closest to the target (slope -1 from a single one)."""
        pts = sorted(((abs(_log_estimate(lo, up) - self.log_target), ue, _log_estimate(lo, up))
                      for ue, lo, up in self.evals if 0 < up < math.inf))
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
        """Corrected-surrogate crossing (engine secant if the surrogate fails, or once two
        engine points straddle the target closely: :meth:`_straddle`)."""
        close = self._straddle()
        if close is not None:
            return close
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
                # (a bracket approached from one side shrinks slowly while the points close
                # in on the target: not a stall.  Bisecting there spent an evaluation far from
                # the answer: sigma 0.5326, 0.5656 bad at 55% and 9% above the target, then
                # 0.6409, then 0.5746 ... from the secant the bisection had skipped)
                stalls = stalls + 1 if width > 0.5 * prev_width and not self._closing_in() else 0
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
                elif math.isfinite(self.good) and not math.isfinite(self.bad):
                    # only good points so far: the side still missing first
                    cands = [self._place(ur - m, False), self._place(ur + m, True)]
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

    def _closing_in(self) -> bool:
        """Whether the last evaluation's distance to the target (in log epsilon, from its
        bracket's middle) is under half the previous one's: the search converges."""
        dist = [abs(_log_estimate(lo, up) - self.log_target) for _, lo, up in self.evals[-2:]
                if 0 < up < math.inf]
        return len(dist) == 2 and len(self.evals) >= 2 and dist[1] < 0.5 * dist[0]

    def _bisect(self):
        a = max(self.bad, self.lo)
        b = min(self.good, self.hi)
        for toward_good in (True, False):
            u = self._place(0.5 * (a + b), toward_good)
            if self.bad < u < self.good:
                return u
        return None


def check_target(target_epsilon, delta):
    target_epsilon = v.real("target_epsilon", target_epsilon, low=0.0, low_open=True)
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    return target_epsilon, delta


def record_info(search: Search, info, t0: float, value, name: str, to_param):
    if info is not None:
        info.update({
            "parameter": name,
            "value": value,
            "evaluations": len(search.evals),
            "points": [(to_param(u), lo, hi) for u, lo, hi in search.evals],
            "seconds": time.perf_counter() - t0,
            "engine_seconds": search.engine_seconds,
        })


def bracket_rtol(rtol: float) -> float:
    """Engine bracket target for a search to relative tolerance ``rtol``.

    epsilon moves by about ``rtol * epsilon`` (or more) between the two
    noise multipliers (sampling rates) the search must tell apart, so brackets
    of a quarter of that suffice; never looser than 1e-3, never tighter than
    the engine's default.
    """
    return min(1e-3, max(EPS_RTOL, rtol / 4.0))


def surrogate_root(search: Search, u0: float) -> float:
    """Uncorrected surrogate crossing from ``u0`` (``u0`` itself if it fails)."""
    ur = search._predict(u0)
    return ur if math.isfinite(ur) else u0
