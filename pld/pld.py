"""The PLD type: what users compose and query.

A :class:`PLD` is an immutable description of a composition — a multiset of
``(mechanism, count)`` pairs — plus a cache of certified numerical results.
Nothing is discretised until a question is asked; the question (a target
delta or epsilon) then fixes the exponential tilt and the grid spacing, so a
user never has to guess a discretisation interval.

For each direction of add-or-remove adjacency (``remove`` and ``add``) and
each side (dominating/pessimistic and dominated/optimistic) the engine

1. discretises every component onto the same grid (connect-the-dots spread /
   merge-to-grid post-processing, :mod:`pld.discretize`),
2. self-composes each component by repeated squaring with FFT convolutions,
   truncating to Chernoff-sized windows between squarings with the truncated
   mass moved to the safe side,
3. convolves the components, and
4. evaluates the hockey-stick divergence with the FFT round-off bound added
   (pessimistic) or subtracted (optimistic).

``delta(eps) = max(delta_remove(eps), delta_add(eps))`` and every answer is an
interval ``[lower, upper]`` that contains the true value.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pld import _validate as v
from pld import _windows as w
from pld.discretize import discretize
from pld.grid import GridPLD
from pld.mechanisms import Mechanism

DIRECTIONS = ("remove", "add")

#: default relative accuracy of an epsilon bracket: upper - lower <= rtol*eps + atol
EPS_RTOL = 1e-4
EPS_ATOL = 1e-6
#: log of the tilted mass allowed outside a truncation window, per truncation
_LOG_ETA = math.log(1e-16)
#: largest number of grid points in any one array (memory cap, ~64 MB per array)
MAX_GRID_POINTS = 1 << 23


_DEBUG = False


class GridTooLargeError(MemoryError):
    """The requested accuracy needs more grid points than the memory cap allows."""


@dataclass(frozen=True)
class _Settings:
    h: float
    lam: float


class PLD:
    """Privacy loss distribution of a composition of mechanisms.

    Build one with ``mechanism.pld()``, then ``compose``/``self_compose``; query
    with :meth:`epsilon_bounds`, :meth:`delta_bounds`, :meth:`epsilon`,
    :meth:`delta`.  Instances are immutable (and safe to share between threads);
    numerical results are cached.
    """

    def __init__(self, components, *, value_discretization_interval: float | None = None):
        comps = tuple((m, int(k)) for m, k in components)
        for m, k in comps:
            if not isinstance(m, Mechanism):
                raise TypeError(f"components must be pld mechanisms, got {type(m).__name__}")
            if k < 1:
                raise ValueError(f"component counts must be >= 1, got {k}")
        if value_discretization_interval is not None:
            value_discretization_interval = v.real(
                "value_discretization_interval", value_discretization_interval, low=0.0, low_open=True)
        self._components = _merge(comps)
        self._h_fixed = value_discretization_interval
        self._lock = threading.RLock()
        self._cache: dict = {}
        self._explore_cache: dict = {}
        self._h_memo: dict = {}

    # ----------------------------------------------------------- building
    @classmethod
    def from_mechanism(cls, mechanism: Mechanism, *, count: int = 1,
                       value_discretization_interval: float | None = None) -> "PLD":
        count = v.integer("count", count, low=1)
        return cls(((mechanism, count),), value_discretization_interval=value_discretization_interval)

    @property
    def components(self) -> tuple:
        """``((mechanism, count), ...)``: what this PLD composes."""
        return self._components

    @property
    def steps(self) -> int:
        return sum(k for _, k in self._components)

    @property
    def symmetric(self) -> bool:
        return all(m.symmetric for m, _ in self._components)

    def compose(self, other: "PLD") -> "PLD":
        """PLD of running both (independent noise, same data): losses add."""
        if not isinstance(other, PLD):
            raise TypeError(f"can only compose with a PLD, got {type(other).__name__}")
        h = self._h_fixed if self._h_fixed is not None else other._h_fixed
        return PLD(self._components + other._components, value_discretization_interval=h)

    def self_compose(self, count: int) -> "PLD":
        """PLD of ``count`` independent runs (``count`` may be up to 1e9)."""
        count = v.integer("count", count, low=1, high=10**12)
        return PLD(tuple((m, k * count) for m, k in self._components),
                   value_discretization_interval=self._h_fixed)

    def __repr__(self) -> str:
        inner = ", ".join(f"{m!r} x{k}" for m, k in self._components)
        return f"PLD({inner})"

    # ---------------------------------------------------------- queries
    def epsilon_bounds(self, delta):
        """Certified ``(lower, upper)`` on the smallest epsilon with delta(epsilon) <= delta.

        ``upper`` satisfies ``delta_upper(upper) <= delta`` for the dominating
        PLDs of both directions, so the mechanism is ``(upper, delta)``-DP;
        ``lower`` is below the true epsilon.  Vectorised over ``delta``.
        """
        d, scalar = v.real_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        lo = np.empty(d.shape)
        hi = np.empty(d.shape)
        for idx, dv in np.ndenumerate(d):
            lo[idx], hi[idx] = self._epsilon_bounds_one(float(dv))
        if scalar:
            return float(lo), float(hi)
        return lo, hi

    def epsilon(self, delta):
        """Certified epsilon (the upper end of :meth:`epsilon_bounds`)."""
        _, hi = self.epsilon_bounds(delta)
        return hi

    def delta_bounds(self, epsilon):
        """Certified ``(lower, upper)`` on delta(epsilon) = max over directions.

        Vectorised: a whole curve in one call.
        """
        e, scalar = v.real_array("epsilon", epsilon)
        if np.any(np.isinf(e)):
            raise ValueError("epsilon must be finite")
        lo = np.empty(e.shape)
        hi = np.empty(e.shape)
        flat = e.ravel()
        lam_of = np.array([self._tilt_for_eps(float(x)) for x in flat])
        out_lo = np.empty(flat.shape)
        out_hi = np.empty(flat.shape)
        for lam in np.unique(lam_of):
            sel = lam_of == lam
            h = self._spacing_for(lam, ("eps", float(np.median(flat[sel]))))
            l_, h_ = self._delta_at(flat[sel], h, lam)
            out_lo[sel], out_hi[sel] = l_, h_
        lo[...] = out_lo.reshape(e.shape)
        hi[...] = out_hi.reshape(e.shape)
        if scalar:
            return float(lo), float(hi)
        return lo, hi

    def delta(self, epsilon):
        """Certified delta(epsilon) (the upper end of :meth:`delta_bounds`)."""
        _, hi = self.delta_bounds(epsilon)
        return hi

    def explain(self, delta: float) -> dict:
        """Per-direction brackets and numerical settings behind ``epsilon_bounds(delta)``."""
        delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        lo, hi = self._epsilon_bounds_one(delta)
        lam = self._tilt_for_delta(delta)
        h = self._spacing_for(lam, ("delta", delta))
        out = {"epsilon_lower": lo, "epsilon_upper": hi, "delta": delta,
               "grid_spacing": h, "tilt": lam, "directions": {}}
        for d in self._directions():
            pess, opt = self._materialize(d, h, lam)
            out["directions"][d] = {
                "epsilon_lower": opt.epsilon(delta), "epsilon_upper": pess.epsilon(delta),
                "grid_points": pess.size, "fft_error_bound": pess.err,
                "infinity_mass_upper": pess.inf_mass, "loss_window": (pess.k0 * h, (pess.k0 + pess.size - 1) * h),
            }
        return out

    # -------------------------------------------------------- internals
    def _directions(self) -> tuple[str, ...]:
        return ("remove",) if self.symmetric else DIRECTIONS

    def _exploration(self, direction: str) -> w.Composite:
        with self._lock:
            c = self._explore_cache.get(direction)
            if c is None:
                c = w.Composite([(w.explore(m.loss_model(direction)), k) for m, k in self._components])
                self._explore_cache[direction] = c
            return c

    def _tilt_for_delta(self, delta: float) -> float:
        lam = max(w.tilt_for_delta(self._exploration(d), delta)[0] for d in self._directions())
        return w.quantize_tilt(lam)

    def _tilt_for_eps(self, eps: float) -> float:
        lam = max(w.tilt_for_epsilon(self._exploration(d), eps) for d in self._directions())
        return w.quantize_tilt(lam)

    def _epsilon_bounds_one(self, delta: float) -> tuple[float, float]:
        lam = self._tilt_for_delta(delta)
        key = ("delta", delta)
        h = self._spacing_for(lam, key)
        return self._eps_at(delta, h, lam)

    def _eps_at(self, delta: float, h: float, lam: float) -> tuple[float, float]:
        lo = hi = 0.0
        for d in self._directions():
            pess, opt = self._materialize(d, h, lam)
            hi = max(hi, pess.epsilon(delta))
            lo = max(lo, opt.epsilon(delta))
        return lo, max(hi, lo)

    def _delta_at(self, eps: np.ndarray, h: float, lam: float):
        lo = np.zeros(eps.shape)
        hi = np.zeros(eps.shape)
        for d in self._directions():
            pess, opt = self._materialize(d, h, lam)
            hi = np.maximum(hi, pess.delta(eps))
            lo = np.maximum(lo, opt.delta(eps))
        return lo, np.maximum(hi, lo)

    def _spacing_for(self, lam: float, query: tuple) -> float:
        """Grid spacing for a query: initial estimate, then refine until narrow."""
        if self._h_fixed is not None:
            return self._h_fixed
        with self._lock:
            memo = self._h_memo.get(lam)
        h = memo if memo is not None else self._initial_spacing(query)
        for _ in range(4):
            width, target, value = self._width(query, h, lam)
            if _DEBUG:
                print(f"[pld] h={h:.3g} lam={lam:.3g} width={width:.3g} target={target:.3g}")
            if width <= target or not math.isfinite(value):
                break
            ratio = math.sqrt(target / width) * 0.8
            h_new = h * min(0.9, max(0.25, ratio))
            if self._grid_points(h_new, lam) > MAX_GRID_POINTS:
                break
            h = _round_spacing(h_new)
        with self._lock:
            if memo is None or h < memo:
                self._h_memo[lam] = h
        return h

    def _width(self, query: tuple, h: float, lam: float) -> tuple[float, float, float]:
        kind, val = query
        if kind == "delta":
            lo, hi = self._eps_at(val, h, lam)
            return hi - lo, EPS_RTOL * hi + EPS_ATOL, hi
        lo, hi = self._delta_at(np.array([val]), h, lam)
        lo, hi = float(lo[0]), float(hi[0])
        # a delta bracket as narrow, relatively, as the epsilon bracket target
        return hi - lo, 1e-3 * hi + 1e-300, hi

    def _initial_spacing(self, query: tuple) -> float:
        comps = [self._exploration(d) for d in self._directions()]
        c = comps[0]
        m, sd = c.mean_sd()
        steps = max(1, c.steps())
        sd = max(sd, 1e-12)
        if query[0] == "delta":
            z = math.sqrt(2 * max(1.0, -math.log(query[1])))
            eps_est = max(0.0, m + z * sd)
        else:
            eps_est = abs(query[1])
            z = max(1.0, (eps_est - m) / sd)
        tol = (EPS_RTOL * max(eps_est, 1e-3) + EPS_ATOL) / 4
        sens = 0.5 + z / (2 * sd)  # d eps / d variance for a Gaussian-like L_T
        h = sd
        # largest h (on a halving ladder) whose added variance keeps the bias small
        for _ in range(80):
            added = max(cc.added_variance(h) for cc in comps)
            if sens * added <= tol:
                break
            h /= 2
        h = min(h, sd / 4)
        # resolution floor set by the memory cap
        return _round_spacing(h)

    def _grid_points(self, h: float, lam: float) -> int:
        """Largest array the materialisation at ``(h, lam)`` allocates.

        Levels are coarsened to at most ``LEVEL_POINTS``; the single-step grids
        are the only arrays whose size follows ``h``.
        """
        n = LEVEL_POINTS
        for d in self._directions():
            comp = self._exploration(d)
            steps = comp.steps()
            for ex, _ in comp.parts:
                lo, hi = w.window(w.Composite([(ex, 1)]), lam, _LOG_ETA - math.log(steps))
                lo, hi = max(lo, ex.loss_min), min(hi, ex.loss_max)
                n = max(n, int((hi - lo) / h) + 2)
        return n

    def _materialize(self, direction: str, h: float, lam: float) -> tuple[GridPLD, GridPLD]:
        key = (direction, h, lam)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        n_final = self._grid_points(h, lam)
        if n_final > MAX_GRID_POINTS:
            raise GridTooLargeError(
                f"this query needs {n_final} grid points at spacing {h:g}, above the cap of "
                f"{MAX_GRID_POINTS}; pass a larger value_discretization_interval or accept a wider bracket")
        result = []
        for pessimistic in (True, False):
            total = None
            comp = self._exploration(direction)
            steps = comp.steps()
            final_window = w.window(comp, lam, _LOG_ETA)
            for (mech, count), (ex, _) in zip(self._components, comp.parts):
                model = mech.loss_model(direction)
                g = _self_compose(model, ex, count, h, lam, pessimistic, steps)
                if total is None:
                    total = g
                else:
                    a, b = _same_grid(total, g)
                    total = _fit(_truncate(a.convolve(b), final_window))
            result.append(total)
        pair = (result[0], result[1])
        with self._lock:
            if len(self._cache) > 32:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = pair
        return pair


def _round_spacing(h: float) -> float:
    """Round to 3 significant digits so cached grids are reused across queries."""
    e = math.floor(math.log10(h))
    return round(h / 10 ** e, 2) * 10 ** e


def _self_compose(model, ex: w.Exploration, count: int, h: float, lam: float,
                  pessimistic: bool, total_steps: int) -> GridPLD:
    """``count``-fold composition by repeated squaring with windowed truncation.

    A window for ``c`` composed steps allows tilted mass ``eta * c / total_steps``
    outside it, since its truncation error is repeated ``total_steps / c`` times.
    Grids are coarsened (spacing doubled) whenever a level holds more than
    ``LEVEL_POINTS`` points, so every FFT stays small however large ``count`` is.
    """
    def win(c: int) -> tuple[float, float]:
        return w.window(w.Composite([(ex, c)]), lam, _LOG_ETA - math.log(total_steps / c))

    lo, hi = win(1)
    lo = max(lo, ex.loss_min)
    hi = min(hi, ex.loss_max)
    k_lo = int(math.floor(lo / h))
    k_hi = max(int(math.ceil(hi / h)), k_lo + 1)
    base = discretize(model, h, k_lo, k_hi, lam, pessimistic)
    result = None
    result_count = 0
    cur, cur_count = _fit(base), 1
    remaining = count
    while True:
        if remaining & 1:
            if result is None:
                result, result_count = cur, cur_count
            else:
                result_count += cur_count
                a, b = _same_grid(result, cur)
                result = _fit(_truncate(a.convolve(b), win(result_count)))
        remaining >>= 1
        if not remaining:
            break
        cur_count *= 2
        cur = _fit(_truncate(cur.convolve(cur), win(cur_count)))
    return result


#: a level is coarsened when it holds more points than this
LEVEL_POINTS = 1 << 14


def _fit(g: GridPLD) -> GridPLD:
    while g.size > LEVEL_POINTS:
        g = g.coarsen()
    return g


def _same_grid(a: GridPLD, b: GridPLD) -> tuple[GridPLD, GridPLD]:
    while a.h < b.h * (1 - 1e-9):
        a = a.coarsen()
    while b.h < a.h * (1 - 1e-9):
        b = b.coarsen()
    if a.h != b.h:  # equal up to rounding of repeated doubling
        b = GridPLD(a.h, b.k0, b.p, b.lam, b.log_scale, b.inf_mass, b.err, b.pessimistic, b.log_mgf_bound)
    return a, b


def _truncate(g: GridPLD, window: tuple[float, float]) -> GridPLD:
    lo, hi = window
    return g.truncate(lo - g.h, hi + g.h)


def _merge(components: tuple) -> tuple:
    """Add up counts of equal mechanisms, keeping first-seen order."""
    counts: Counter = Counter()
    order = []
    for m, k in components:
        if m not in counts:
            order.append(m)
        counts[m] += k
    return tuple((m, counts[m]) for m in order)
