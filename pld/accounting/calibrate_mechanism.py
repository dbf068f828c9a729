"""Calibrate any mechanism's parameter to a privacy target, with a certificate.

:func:`calibrate_parameter` runs the search of :mod:`pld.accounting.calibrate_search` on
a user's ``make(x)`` (a mechanism or PLD per parameter value), with the
saddle-point surrogate of that family for guidance.
"""

from __future__ import annotations

import math
import time

from pld import _validate as v
from pld.accounting.calibrate_search import (
    Search,
    bracket_rtol,
    check_target,
    record_info,
    spa_epsilon_of,
    surrogate_root,
)
from pld.accounting.dpsgd import MAX_STEPS
from pld.distribution import PLD
from pld.mechanisms import Mechanism

__all__ = ["calibrate_parameter"]


def _pld_from_make(obj, param):
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
    target_epsilon, delta = check_target(target_epsilon, delta)
    if not isinstance(discrete, bool):
        raise TypeError(f"discrete must be True or False, got {discrete!r}")
    if increasing is not None and not isinstance(increasing, bool):
        raise TypeError(f"increasing must be True, False or None, got {increasing!r}")
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)
    bounds, low, high, x0 = _check_bounds(bounds, discrete, start)
    fam = _Family(make, discrete, delta, rtol)
    if increasing is None:
        increasing, x0 = _read_direction(fam, x0, low, high, bounds)
    sign = -1.0 if increasing else 1.0  # u = sign * log x: larger u is more private

    def to_param(u: float):
        x = math.exp(sign * u)
        return int(round(x)) if discrete else x

    tol = math.log1p(rtol)
    tol_at = (lambda u: math.log1p(1.0 / max(1.0, math.exp(sign * u)))) if discrete else (lambda u: tol)
    lo_u, hi_u = sorted((sign * math.log(low), sign * math.log(high)))
    search = Search(target_epsilon, lambda u: fam.evaluate(to_param(u)), lambda u: fam.surrogate(to_param(u)),
                    lo_u, hi_u, tol_at, _snap_integer(sign) if discrete else None)
    for x, (elo, eup) in list(fam.cache.items()):  # points already evaluated count
        u = sign * math.log(x)
        search.evals.append((u, elo, eup))
        if eup <= target_epsilon:
            search.good = min(search.good, u)
        else:
            search.bad = max(search.bad, u)
    u = search.run(surrogate_root(search, sign * math.log(x0)))
    if not math.isfinite(u):
        best = low if increasing else high
        raise ValueError(f"no parameter in bounds {bounds!r} certifies target_epsilon={target_epsilon!r} at "
                         f"delta={delta!r} (at {best!r}: epsilon {fam.evaluate(best)[1]!r}); widen bounds "
                         f"(last engine error: {search.last_error!r})")
    value = to_param(u)
    record_info(search, info, t0, value, "parameter", to_param)
    return value


def _check_bounds(bounds, discrete: bool, start) -> tuple[tuple, float, float, float]:
    """``(bounds, low, high, start)`` of the search, checked (integers inward when ``discrete``)."""
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
    return bounds, low, high, x0


class _Family:
    """``make(x)`` with its PLDs, certified answers and surrogate remembered per parameter.

    The search revisits points (direction probe, then the bracket), and each
    PLD keeps its own grids, so holding them saves whole accountings.
    """

    def __init__(self, make, discrete: bool, delta: float, rtol: float):
        self.make, self.discrete, self.delta, self.rtol = make, discrete, delta, rtol
        self.log_delta = math.log(delta)
        self.plds: dict = {}
        self.cache: dict = {}  # parameter -> certified (lower, upper) epsilon
        self.hints: dict = {}  # per direction: the last crossing tilt of the surrogate

    def pld_at(self, x):
        x = int(round(x)) if self.discrete else x
        d = self.plds.get(x)
        if d is None:
            if len(self.plds) > 512:  # (the search visits tens of points; keep memory bounded)
                self.plds.clear()
            d = self.plds[x] = _pld_from_make(self.make(x), x)
        return d

    def evaluate(self, x: float) -> tuple[float, float]:
        x = int(round(x)) if self.discrete else x
        hit = self.cache.get(x)
        if hit is None:
            d = self.pld_at(x)
            hit = (d.epsilon_bounds(self.delta) if self.discrete
                   else d.epsilon_bounds(self.delta, rtol=bracket_rtol(self.rtol)))
            self.cache[x] = hit = (float(hit[0]), float(hit[1]))
        return hit

    def surrogate(self, x: float) -> float:
        """Saddle-point epsilon of ``make(x)`` (as for DP-SGD; ``nan`` where it fails)."""
        try:
            d = self.pld_at(x)
            vals = [spa_epsilon_of(d.loss_law(dr), self.log_delta, self.hints.setdefault(dr, [None]))
                    for dr in d.directions]
        except Exception:  # the surrogate only steers the search: engine secants replace it
            return math.nan
        return math.nan if any(math.isnan(e) for e in vals) else max(vals)


def _read_direction(fam: _Family, x0, low, high, bounds) -> tuple[bool, float]:
    """Whether epsilon grows with the parameter, and the (possibly moved) start.

    Read off the surrogate at two points, else off two evaluations (the search
    reuses them), moving them apart while the certified answers are equal.
    """
    x1 = min(high, max(low, x0 * math.exp(0.5)))
    if x1 == x0:
        x1 = max(low, x0 * math.exp(-0.5))
    if fam.discrete:
        x0, x1 = round(x0), round(x1) if round(x1) != round(x0) else round(x0) + (1 if x0 < high else -1)
    s0, s1 = fam.surrogate(x0), fam.surrogate(x1)
    if math.isfinite(s0) and math.isfinite(s1) and abs(s1 - s0) > 1e-3 * max(s0, s1):
        return (s1 > s0) == (x1 > x0), x0
    for _ in range(60):
        e0, e1 = fam.evaluate(x0)[1], fam.evaluate(x1)[1]
        if e0 != e1:
            break
        # equal (e.g. both 0 or both certifiably tiny): look further apart
        a, b = min(x0, x1), max(x0, x1)
        if a <= low and b >= high:
            raise ValueError(f"epsilon does not change over bounds {bounds!r} (certified epsilon {e0!r} "
                             "at both ends); give other bounds or increasing=")
        a, b = max(low, a / 4.0), min(high, b * 4.0)
        x0, x1 = (int(a), int(b)) if fam.discrete else (a, b)
    return (e1 > e0) == (x1 > x0), x0
