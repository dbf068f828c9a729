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
2. self-composes each component: the first ~T/8 steps by one FFT power with
   certified aliasing (:mod:`pld._power`), the rest by repeated squaring with
   FFT convolutions on re-gridded levels, truncating to Chernoff-sized windows
   with the truncated mass moved to the safe side,
3. convolves the components, and
4. evaluates the hockey-stick divergence with the FFT round-off bound added
   (pessimistic) or subtracted (optimistic).

``delta(eps) = max(delta_remove(eps), delta_add(eps))`` and every answer is an
interval ``[lower, upper]`` that contains the true value.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pld import _validate as v
from pld import _windows as w
from pld import gaussian_exact, total_variation
from pld._fft import _canonical_size as _fft_size
from pld._power import self_compose_powers
from pld.discretize import discretize
from pld.grid import GridPLD
from pld.kernels import cell_points
from pld.mechanisms import Mechanism

DIRECTIONS = ("remove", "add")

#: default relative accuracy of an epsilon bracket: upper - lower <= rtol*eps + atol
EPS_RTOL = 1e-4
EPS_ATOL = 1e-6
#: log of the tilted mass allowed outside a truncation window, per truncation
_LOG_ETA = math.log(1e-16)
#: largest number of grid points in any one array (memory cap: ~16 MB per array,
#: a few hundred MB at peak with the discretiser's temporaries)
MAX_GRID_POINTS = 1 << 21
#: delta curves: points whose bracket is wider than this (relative) get a grid
#: tuned at them, at most _DELTA_EXTRA_GRIDS per call
_DELTA_LOOSE = 1e-2
_DELTA_EXTRA_GRIDS = 4
#: answer compositions of Gaussian mechanisms from their closed form (exact at
#: any count).  Tests that exercise the FFT engine on Gaussians turn it off.
CLOSED_FORMS = True
#: the query whose grids bound delta beyond every grid's top (see delta_bounds)
_FAR_QUERY = ("delta", 1e-60, 0.1)
#: a composed result used once (heterogeneous composition) is coarsened above this
LEVEL_POINTS = 1 << 16


_DEBUG = False


#: bracket width per unit of (d eps / d var) * (variance the spread adds),
#: the largest measured on the peer configurations (widths are second order)
_WIDTH_PER_BIAS = 2.2
#: fraction of the width target the first grid aims at: a first grid too
#: fine wastes time, one too coarse costs a second materialisation
_WIDTH_AIM = 0.7
#: the round-off model behind the first tilt was measured up to T = 1e6
_TILT_MODEL_STEPS = 10**7
#: grids above this size stop refining once a 3x finer spacing gains < 25%
_FUTILE_POINTS = 1 << 15
#: largest tilt times grid spacing on a fixed (user-given) grid
_MAX_TILT_PER_CELL = 30.0
#: largest fixed grid spacing accepted: a privacy loss on a coarser grid says
#: nothing (every supported mechanism's loss per run is far below it)
MAX_SPACING = 1e6


class GridTooLargeError(MemoryError):
    """The requested accuracy needs more grid points than the memory cap allows."""


class TargetMissedWarning(RuntimeWarning):
    """A certified bracket ended wider than its target (``rtol * epsilon + atol``).

    Both ends are still proofs; the message says why the grid could not be
    refined further (memory cap, a fixed spacing, refinement that stalled).
    Turn it into an error with ``warnings.simplefilter("error", pld.TargetMissedWarning)``.
    """


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
        comps = []
        for item in components:
            if not isinstance(item, tuple) or len(item) != 2:
                raise TypeError(f"components must be (mechanism, count) pairs, got {item!r}")
            m, k = item
            if not isinstance(m, Mechanism):
                raise TypeError(f"components must be pld mechanisms, got {type(m).__name__}")
            comps.append((m, v.integer("count", k, low=1, high=v.MAX_COUNT)))
        if value_discretization_interval is not None:
            value_discretization_interval = v.real(
                "value_discretization_interval", value_discretization_interval, low=0.0, low_open=True,
                high=MAX_SPACING)
        self._components = _merge(tuple(comps))
        for _, k in self._components:
            v.integer("count (after adding up equal mechanisms)", k, low=1, high=v.MAX_COUNT)
        self._h_fixed = value_discretization_interval
        self._lock = threading.RLock()
        self._cache: dict = {}
        self._explore_cache: dict = {}
        self._chernoff_cache: dict = {}
        #: materialisations being built in the background, by cache key
        self._inflight: dict = {}
        self._h_memo: dict = {}
        self._used: dict = {}

    # ----------------------------------------------------------- building
    @classmethod
    def from_mechanism(cls, mechanism: Mechanism, *, count: int = 1,
                       value_discretization_interval: float | None = None) -> "PLD":
        count = v.integer("count", count, low=1, high=v.MAX_COUNT)
        return cls(((mechanism, count),), value_discretization_interval=value_discretization_interval)

    @property
    def components(self) -> tuple:
        """``((mechanism, count), ...)``: what this PLD composes."""
        return self._components

    @property
    def value_discretization_interval(self) -> float | None:
        """The fixed grid spacing an expert passed, or None (chosen per query)."""
        return self._h_fixed

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
        count = v.integer("count", count, low=1, high=v.MAX_COUNT)
        for _, k in self._components:
            if k * count > v.MAX_COUNT:
                raise ValueError(f"count x {k} must be at most {v.MAX_COUNT:.0e} steps of one mechanism, "
                                 f"got {count} x {k}")
        return PLD(tuple((m, k * count) for m, k in self._components),
                   value_discretization_interval=self._h_fixed)

    def __repr__(self) -> str:
        inner = ", ".join(f"{m!r} x{k}" for m, k in self._components)
        return f"PLD({inner})"

    # ---------------------------------------------------------- queries
    def epsilon_bounds(self, delta, *, rtol: float | None = None):
        """Certified ``(lower, upper)`` on the smallest epsilon with delta(epsilon) <= delta.

        ``upper`` satisfies ``delta_upper(upper) <= delta`` for the dominating
        PLDs of both directions, so the mechanism is ``(upper, delta)``-DP;
        ``lower`` is below the true epsilon.  Vectorised over ``delta``.

        ``rtol`` sets the bracket the grid is refined for,
        ``upper - lower <= rtol * epsilon + 1e-6`` (default ``EPS_RTOL`` = 1e-4);
        a looser one is faster.  Either way both ends are certified.
        """
        d, scalar = v.real_array("delta", delta, low=0.0, high=1.0)
        rtol = EPS_RTOL if rtol is None else v.real("rtol", rtol, low=1e-7, high=1.0)
        lo = np.empty(d.shape)
        hi = np.empty(d.shape)
        for idx, dv in np.ndenumerate(d):
            if dv == 0.0:
                top = self._epsilon_at_zero_delta()
                # (the sum of the components' largest losses, rounded either way)
                inner = 0.0 < top < math.inf
                lo[idx] = max(0.0, float(np.nextafter(top, -math.inf))) if inner else top
                hi[idx] = float(np.nextafter(top, math.inf)) if inner else top
            elif dv == 1.0 or self._tv_upper() <= dv or self._epsilon_at_zero_delta() <= 0.0:
                # delta(0) <= 1 always; delta(0) = TV <= delta, or no loss
                # above 0 at all: epsilon = 0
                lo[idx] = hi[idx] = 0.0
            elif self._closed_form_mu() is not None:
                lo[idx], hi[idx] = gaussian_exact.epsilon_bounds(self._closed_form_mu(), float(dv))
            else:
                lo[idx], hi[idx] = self._epsilon_bounds_one(float(dv), rtol)
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
        flat = e.ravel()
        mu = self._closed_form_mu()
        if mu is not None:
            lo, hi = gaussian_exact.delta_bounds(mu, flat)
            if scalar:
                return float(lo[0]), float(hi[0])
            return lo.reshape(e.shape), hi.reshape(e.shape)
        # Grids are tuned at up to three representative epsilons (smallest,
        # median, largest) among those the grids can resolve; every point is
        # evaluated on each of them and the brackets intersected (each one is
        # certified, so their intersection is).  An epsilon at or beyond the
        # largest finite loss has delta = the mass at +inf, which every grid
        # holds: it tunes nothing, so it cannot change another entry's answer.
        limit = self._tunable_epsilon()
        tunable = flat[np.isfinite(flat) & (flat < limit)]
        if tunable.size:
            reps = np.unique(np.quantile(tunable, [0.0, 0.5, 1.0], method="nearest"))
        else:
            reps = np.array([0.0]) if flat.size else flat
        queries = [self._delta_query(float(r)) for r in reps]
        if np.any(flat >= limit):
            # beyond every grid the upper end is the mass a grid sent to +inf,
            # truncated mass included; one grid tuned at a tiny delta (loosely:
            # only its windows matter) holds that below ~1e-40
            queries.append(_FAR_QUERY)
        lo, hi = self._delta_pass(flat, queries)
        # delta = 0 exactly from the largest loss with mass on (no mass at +inf)
        top = self._epsilon_at_zero_delta()
        beyond = (flat >= top) & math.isfinite(top)
        lo, hi = np.where(beyond, 0.0, lo), np.where(beyond, 0.0, hi)
        # A point between two tuning epsilons whose tails differ by orders of
        # magnitude is resolved by neither grid: the loosest few get their own.
        tried = {float(r) for r in reps}
        limit = self._tunable_epsilon()
        for _ in range(_DELTA_EXTRA_GRIDS):
            with np.errstate(divide="ignore", invalid="ignore"):
                loose = np.where(hi > 0, (hi - lo) / hi, 0.0)
            cand = [j for j in np.argsort(-loose, kind="stable")
                    if loose[j] > _DELTA_LOOSE and float(flat[j]) not in tried and abs(flat[j]) < limit]
            if not cand:
                break
            r = float(flat[cand[0]])
            tried.add(r)
            lo_r, hi_r = self._delta_pass(flat, [self._delta_query(r)])
            lo, hi = np.maximum(lo, lo_r), np.minimum(hi, hi_r)
        # delta(eps) is non-increasing: a lower bound at a larger epsilon holds
        # at every smaller one, an upper bound at a smaller epsilon at every
        # larger one.
        if flat.size > 1:
            order = np.argsort(flat, kind="stable")
            lo[order] = np.maximum.accumulate(lo[order][::-1])[::-1]
            hi[order] = np.minimum.accumulate(hi[order])
        # delta(-inf) = E_P[1] = 1 exactly
        lo = np.where(flat == -math.inf, 1.0, lo)
        hi = np.maximum(np.where(flat == -math.inf, 1.0, hi), lo).reshape(e.shape)
        lo = lo.reshape(e.shape)
        if scalar:
            return float(lo), float(hi)
        return lo, hi

    def _tv_upper(self) -> float:
        """Upper bound on delta(0), the composition's total variation (1 if unknown)."""
        hit = self.__dict__.get("_tv")
        if hit is None:
            tv = total_variation.composition_tv_upper(self._components)
            hit = self.__dict__["_tv"] = 1.0 if tv is None else tv
        return hit

    def _closed_form_mu(self) -> float | None:
        """``mu`` when every component is a Gaussian mechanism and closed forms
        are on (:data:`CLOSED_FORMS`), else None: such a composition is one
        Gaussian mechanism (:mod:`pld.gaussian_exact`), and no grid is needed."""
        if not CLOSED_FORMS or self._h_fixed is not None:
            return None
        return gaussian_exact.gaussian_mu(self._components)

    def _epsilon_at_zero_delta(self) -> float:
        """epsilon(0): the smallest epsilon with delta(epsilon) = 0.

        ``delta(eps) = E_P[(1 - e^{eps - L})_+]`` vanishes exactly from the
        largest loss with positive mass on: the sum of the components' largest
        losses (``inf`` with a mass at +inf or an unbounded loss).
        """
        hit = self.__dict__.get("_eps_at_zero")
        if hit is not None:
            return hit
        top = max(0.0, *(self._largest_loss(d) for d in self._directions()))
        self.__dict__["_eps_at_zero"] = top
        return top

    def _tunable_epsilon(self) -> float:
        """An epsilon above which no grid is tuned: beyond the composed loss's
        support delta is the mass at +inf on every grid, and beyond the
        Chernoff epsilon of ``_FAR_QUERY``'s delta the finite part is below
        it (a grid tuned there would reach out to where the tilted law has
        e^-1e5 of its mass: 20 s for nothing)."""
        with self._lock:
            hit = self.__dict__.get("_tunable")
        if hit is not None:
            return hit
        top = 0.0
        for d in self._directions():
            _, hi = self._exploration(d).support()
            far = self._chernoff(d, _FAR_QUERY[1])[1]
            top = max(top, min(hi, far) if math.isfinite(far) else hi)
        top = min(top, 1e12) if math.isfinite(top) else 1e12
        with self._lock:
            self.__dict__["_tunable"] = top
        return top

    def _delta_query(self, epsilon: float) -> tuple:
        """The query whose grids a delta at ``epsilon`` is read from.

        The epsilon query at the saddle-point estimate of ``delta(epsilon)``
        (:func:`pld._windows.saddle_log_delta`, within a few percent): its
        grids are refined until the epsilon bracket there meets its target,
        which is the delta bracket at ``epsilon`` that target implies, and
        they are the very grids (and remembered spacings) of that epsilon
        query.  A delta query then costs what the matching epsilon query
        costs (sigma 5.49, q 4.9e-5, T 2.69e6: 82 s against 1.5 s when delta
        queries were refined on their own terms).  Below the mean loss, and
        where delta is not small, the delta target is used directly.
        """
        est = -math.inf
        for d in self._directions():
            comp = self._exploration(d)
            lam = w.tilt_for_epsilon(comp, epsilon)
            if not lam > 0:
                return ("eps", epsilon)
            m, log_d = w.saddle_log_delta(comp, lam)
            if math.isfinite(log_d):
                est = max(est, log_d - lam * (epsilon - m))
        if not -575.0 < est < math.log(0.25):
            return ("eps", epsilon)
        return ("delta", math.exp(est), EPS_RTOL)

    def _delta_pass(self, flat: np.ndarray, queries) -> tuple[np.ndarray, np.ndarray]:
        """Brackets of delta at every point of ``flat`` from grids tuned for ``queries``."""
        lo = np.zeros(flat.shape)
        hi = np.zeros(flat.shape)
        for i, d in enumerate(self._directions()):
            d_lo = np.zeros(flat.shape)
            d_hi = np.ones(flat.shape)
            # beyond this direction's largest loss (bounded: the add direction
            # of Poisson sampling, -T log(1 - q)) its delta is exactly 0; a
            # grid tuned there only holds its truncation bound (2.5e-9 where
            # the answer was 1e-11, after 15 s of refining)
            top = self._largest_loss(d)
            inside = ~((flat >= top) & math.isfinite(top))
            if not np.any(inside):
                continue
            for query in queries:
                if query[0] == "eps" and not query[1] < top:
                    continue
                floor = float(np.min(lo)) if i > 0 and flat.size and query[0] == "eps" else -math.inf
                pess, opt = self._materialize(d, *self._settings(d, query, floor=floor))
                d_hi = np.minimum(d_hi, pess.delta(flat))
                d_lo = np.maximum(d_lo, opt.delta(flat))
            d_hi = np.where(inside, d_hi, 0.0)
            d_lo = np.where(inside, d_lo, 0.0)
            hi = np.maximum(hi, d_hi)
            lo = np.maximum(lo, d_lo)
        return lo, hi

    def _largest_loss(self, direction: str) -> float:
        """Sum of the components' largest losses in one direction (``inf``:
        unbounded, or a mass at +inf)."""
        cache = self.__dict__.setdefault("_largest", {})
        if direction not in cache:
            cache[direction] = sum(k * m.loss_model(direction).sup_loss() for m, k in self._components)
        return cache[direction]

    def delta(self, epsilon):
        """Certified delta(epsilon) (the upper end of :meth:`delta_bounds`)."""
        _, hi = self.delta_bounds(epsilon)
        return hi

    def explain(self, delta: float, *, tilt: float | None = None) -> dict:
        """Per-direction brackets and numerical settings behind ``epsilon_bounds(delta)``.

        ``tilt`` replaces the exponential tilt of the grids (same spacing and
        windows budget); the per-direction values then describe those grids.
        A weak tilt (0) represents the bulk of the loss law best, the query's
        own tilt the tail at ``delta``.
        """
        delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        lo, hi = self._epsilon_bounds_one(delta)
        miss = self._target_miss(delta, EPS_RTOL, lo, hi, self._used_settings(delta))
        mu = self._closed_form_mu()
        if mu is not None:
            # the answer is the closed form's; the grids below describe what
            # the FFT engine would have used
            lo, hi = gaussian_exact.epsilon_bounds(mu, delta)
            miss = None
        out = {"epsilon_lower": lo, "epsilon_upper": hi, "delta": delta,
               "method": "closed form (a composition of Gaussian mechanisms is one Gaussian mechanism, "
                         f"mu = {mu:.6g})" if mu is not None else "FFT composition of certified grids",
               "target": f"upper - lower <= {EPS_RTOL:g} * epsilon + {EPS_ATOL:g}",
               "target_met": miss is None, "target_missed_because": miss, "directions": {}}
        used = self._grid_settings(delta, tilt)
        for d in self._directions():
            h, lam, log_eta = used[d]
            pess, opt = self._materialize(d, h, lam, log_eta)
            upper = pess.epsilon(delta)
            out["directions"][d] = {
                "epsilon_lower": opt.epsilon(delta), "epsilon_upper": upper,
                # a direction whose upper end is below the other's lower end
                # cannot move the answer; it is settled on a coarser grid
                "binding": bool(upper > lo),
                "delta_at_epsilon_upper": (float(opt.delta(hi)[0]), float(pess.delta(hi)[0])),
                "grid_spacing_first_step": h, "grid_spacing_final": pess.h, "tilt": lam,
                # per component: steps composed by one FFT power (1: squaring only)
                "fft_power_steps": self._power_steps(d, h, lam, log_eta),
                "grid_points": pess.size, "fft_error_bound": pess.err,
                "infinity_mass_upper": pess.inf_mass,
                "loss_window": (pess.k0 * pess.h, (pess.k0 + pess.size - 1) * pess.h),
            }
        return out

    def _power_steps(self, direction: str, h: float, lam: float, log_eta) -> list[int]:
        with self._lock:
            entry = self._cache.get((direction, h, lam, log_eta))
        if entry is None:
            return []
        return [step.power_steps.get(True, 1) for step in entry.prepared]

    def distribution(self, direction: str = "remove", side: str = "upper", *,
                     delta: float = 1e-6, tilt: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """The discretised PLD behind the answers at ``delta``.

        Returns ``(losses, masses, infinity_mass)`` of the dominating
        (``side="upper"``) or dominated (``side="lower"``) grid PLD of one
        direction, untilted: ``masses[i]`` is the P-probability of loss
        ``losses[i]``.  Masses below the floating-point range are 0.
        ``tilt`` replaces the grids' exponential tilt, as in :meth:`explain`.
        """
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")
        if side not in ("upper", "lower"):
            raise ValueError(f"side must be 'upper' or 'lower', got {side!r}")
        delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        d = direction if direction in self._directions() else "remove"
        pess, opt = self._materialize(d, *self._grid_settings(delta, tilt)[d])
        g = pess if side == "upper" else opt
        with np.errstate(under="ignore", over="ignore"):
            masses = np.exp(g.log_masses())
        return g.losses(), masses, float(g.inf_mass)

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

    def _sizing(self, direction: str, log_eta) -> w.Composite:
        """The law the grids hold, for sizing them (tilts, windows, point counts).

        Each step's mass above where its untilted upper tail is within
        ``e^log_eta_up / T`` goes to +inf at the first step (see
        :func:`pld._windows.step_window`), so the composed grids never hold
        it; :func:`pld._windows.truncated_above` leaves it out.  The exact
        law (:meth:`_exploration`) still discretises every step.
        """
        comp = self._exploration(direction)
        up = log_eta[1] if isinstance(log_eta, tuple) else log_eta
        budget = up - math.log(max(comp.steps(), 1))
        key = (direction, budget)
        with self._lock:
            hit = self._explore_cache.get(key)
            if hit is None:
                hit = w.Composite([(w.truncated_above(ex, budget), k) for ex, k in comp.parts])
                self._explore_cache[key] = hit
            return hit

    # The Chernoff-optimal tilt lam* lifts the tail at the query to the top of
    # the tilted law, which makes FFT round-off smallest where delta is decided.
    # We start somewhat below it (a tilted law centred a little below epsilon
    # keeps the lower window short) and raise it when the round-off term is
    # what keeps the bracket wide.  (With windows sized by the tilted law's
    # upper tail, heavy-tailed subsampled losses made strong tilts widen the
    # grid, and the start was 0.3 lam*; upper windows now follow the untilted
    # mass sent to +inf, and 0.7 lam* saves a second pass on long runs:
    # 22 DP-SGD configurations took 14.3 s at 0.3, 10.9 s at 0.7.)
    _TILT_FRACTION = 0.7
    _PROBE_COARSENING = 4.0

    def _tilt_star(self, direction: str, query: tuple) -> float:
        if query[0] == "delta":
            lam, cap = self._chernoff(direction, query[1])[0], self._near_one_tilt_cap(direction, query)
            return lam if lam <= cap else cap
        return w.tilt_for_epsilon(self._exploration(direction), query[1])

    def _near_one_tilt_cap(self, direction: str, query: tuple) -> float:
        """Largest tilt whose rounding still resolves an epsilon at ``delta`` near 1.

        The evaluator's log weights ``log_scale - lam l`` are rounded by about
        ``8 u lam W`` (``W`` the loss window), a relative error of delta.  Since
        ``|d delta / d eps| = e^eps Q(L > eps) = P(L > eps) - delta <= 1 - delta``,
        an epsilon bracket of width ``t`` needs delta to a relative
        ``t (1 - delta) / delta``: for delta = 1e-5 any tilt does, for
        delta = 1 - 1e-9 (a randomized response at eps0 = 300, whose Chernoff
        tilt runs off to 5e4) only a tilt below ~5.  Aimed at 5% of the
        smallest target, ``atol``.
        """
        delta = query[1]
        m, sd = self._exploration(direction).mean_sd()
        lo, hi = self._exploration(direction).support()
        span = min(max(hi - lo, 1e-300), 2.0 * abs(m) + 80.0 * sd + 1.0)
        need = 0.05 * (_rtol(query) * abs(m) + EPS_ATOL) * (1.0 - delta) / delta
        cap = max(need / (8.0 * 2.0 ** -53 * span), 0.0)
        # where the cap binds, the tilt no longer serves the tail at delta
        # (bounded losses, delta near 1): keep it weak enough that no mass in
        # the window leaves the floating-point range either, which the
        # dominating side would have to send to +inf
        return cap if self._chernoff(direction, delta)[0] <= cap else min(cap, 600.0 / span)

    def _chernoff(self, direction: str, delta: float) -> tuple[float, float]:
        """``(lam*, Chernoff epsilon estimate)`` of one direction at ``delta`` (cached)."""
        key = (direction, delta)
        with self._lock:
            hit = self._chernoff_cache.get(key)
        if hit is None:
            hit = w.tilt_for_delta(self._sizing(direction, self._log_eta(direction, ("delta", delta))), delta)
            with self._lock:
                if len(self._chernoff_cache) > 256:
                    self._chernoff_cache.pop(next(iter(self._chernoff_cache)))
                self._chernoff_cache[key] = hit
        return hit

    def _ordered_directions(self, delta: float) -> list[tuple[str, float]]:
        """``(direction, Chernoff epsilon estimate)``, the largest estimate first."""
        est = [(d, self._chernoff(d, delta)[1]) for d in self._directions()]
        return sorted(est, key=lambda de: -de[1])

    def _epsilon_bounds_one(self, delta: float, rtol: float = EPS_RTOL) -> tuple[float, float]:
        lo = hi = 0.0
        used = {}
        dirs = self._ordered_directions(delta)
        lead = dirs[0][1]
        query = ("delta", delta, rtol)
        # floor=lo: a direction whose upper end stays below the bracket found
        # so far cannot move either end of max(...), so it needs no refining;
        # one that the Chernoff estimate puts clearly below the leader is first
        # tried on a coarse grid, which usually shows exactly that.  That grid
        # does not depend on the leader's answer: on two cores it is built
        # while the leader is.
        probes = {d: self._probe_settings(d, query) for d, est in dirs[1:] if est < 0.95 * lead}
        for d, probe in probes.items():
            if probe is not None:
                self._speculate(d, *probe)
        # a direction close to the leader starts on its first grid, whose
        # dominating side alone often shows it below the leader's lower end
        # (see _settings): that side too is built while the leader is
        for d, _ in dirs[1:]:
            if d not in probes:
                first = self._first_settings(d, query)
                if first is not None:
                    self._speculate(d, *first)
        for d, _ in dirs:
            settings = self._settings(d, query, floor=lo, probe=probes.get(d))
            used[d] = settings
            pess, _ = self._materialize(d, *settings, lower=False)
            upper = pess.epsilon(delta)
            hi = max(hi, upper)
            if upper > lo:  # else this direction cannot move either end
                _, opt = self._materialize(d, *settings)
                lo = max(lo, opt.epsilon(delta))
        with self._lock:
            if len(self._used) > 256:
                self._used.pop(next(iter(self._used)))
            self._used[(delta, rtol)] = used
        hi = max(hi, lo)
        miss = self._target_miss(delta, rtol, lo, hi, used)
        if miss is not None:
            shown = f"1 - {1.0 - delta:.3g}" if delta > 0.99 else f"{delta:.3g}"
            warnings.warn(f"epsilon bracket [{lo:.6g}, {hi:.6g}] at delta = {shown} is wider than its "
                          f"target (upper - lower <= {rtol:g} * epsilon + {EPS_ATOL:g}): {miss}. Both ends are "
                          "still certified.", TargetMissedWarning, stacklevel=4)
        return lo, hi

    def _target_miss(self, delta: float, rtol: float, lo: float, hi: float, used: dict) -> str | None:
        """Why a bracket is wider than its target, or None when it is not."""
        if math.isinf(hi):
            if math.isinf(lo):
                return None  # (epsilon = inf exactly: a mass at +inf above delta)
            return "the dominating grids could not bound epsilon (their mass at +inf exceeds delta)"
        if hi - lo <= rtol * hi + EPS_ATOL:
            return None
        if self._h_fixed is not None:
            return f"the grid spacing is fixed at value_discretization_interval = {self._h_fixed:g}"
        for d, (h, lam, log_eta) in used.items():
            if self._grid_points(d, h, lam, log_eta) * 2 > MAX_GRID_POINTS:
                return f"the grid reached its memory cap of {MAX_GRID_POINTS} points"
        return "refining the grid stopped narrowing it (a bias the spacing does not control)"

    def _grid_settings(self, delta: float, tilt: float | None) -> dict:
        """``_used_settings`` with the tilt replaced when one is given."""
        used = self._used_settings(delta)
        if tilt is None:
            return used
        tilt = v.real("tilt", tilt, low=0.0)
        return {d: (h, tilt, log_eta) for d, (h, _, log_eta) in used.items()}

    def _used_settings(self, delta: float) -> dict:
        """The settings behind ``epsilon_bounds(delta)``, per direction."""
        with self._lock:
            used = self._used.get((delta, EPS_RTOL))
        if used is None:
            self._epsilon_bounds_one(delta)
            with self._lock:
                used = self._used[(delta, EPS_RTOL)]
        return used

    def _settings(self, direction: str, query: tuple, floor: float = -math.inf,
                  probe: tuple | None = None) -> tuple[float, float, float]:
        """Grid spacing and tilt for a query: estimate, then refine until narrow.

        The bias of both discretisations is second order in the spacing, so a
        bracket ``r`` times too wide from discretisation is fixed by a spacing
        ``sqrt(r)`` times finer; a bracket kept wide by the round-off term is
        fixed by a stronger tilt.  Settings are remembered per direction and
        tilt bucket, so later queries nearby cost one cached evaluation.
        """
        lam_star = self._tilt_star(direction, query)
        log_eta = self._log_eta(direction, query)
        if self._h_fixed is not None:
            # a tilt is a representation: beyond a few dozen per grid cell it
            # only pushes the grid's low end under the floating-point range
            # (at h = 1e18 every tilted mass overflowed)
            lam = self._initial_tilt(direction, query, lam_star)
            return self._h_fixed, min(lam, w.quantize_tilt(_MAX_TILT_PER_CELL / self._h_fixed)), log_eta
        key = (direction, w.quantize_tilt(lam_star), log_eta, _rtol(query))
        with self._lock:
            memo = self._h_memo.get(key)
        if memo is not None:
            h, lam = memo[:2]
            if len(memo) > 2:
                # refining already ended short of the target here: asking
                # again would only repeat that work (a delta query after its
                # epsilon query took 96 s doing so)
                return h, lam, log_eta
        else:
            if probe is not None and floor > 0 and query[0] == "delta":
                # a direction that does not bind needs only a bracket below the
                # floor: a grid _PROBE_COARSENING times coarser (the bias grows
                # like h^2, settings from _probe_settings) settles that at a
                # fraction of the cost (tested before the first tilt and
                # spacing are worked out: this is the query's last step)
                pess, _ = self._materialize(direction, *probe, lower=False)
                if pess.epsilon(query[1]) <= floor:
                    return probe
            lam = self._initial_tilt(direction, query, lam_star)
            h = self._first_spacing(direction, query, lam, log_eta)
            if floor > 0 and query[0] == "delta":
                # the same test on the first grid itself: a direction close to
                # the leader (no probe) whose upper end still stays below the
                # floor needs no dominated side at all (huge-1e6's add
                # direction: 0.3% below, its dominated side was half its cost)
                pess, _ = self._materialize(direction, h, lam, log_eta, lower=False)
                if pess.epsilon(query[1]) <= floor:
                    return h, lam, log_eta
        best = (math.inf, h, lam)
        stalled = 0
        weakened = False
        prev = None
        last_target = math.inf
        # atoms between grid points make the dominated side's error first order
        # and erratic in h: give such compositions more tries
        tries, patience = (12, 5) if self._exploration(direction).all_atoms else (8, 3)
        for _ in range(tries):
            while self._grid_points(direction, h, lam, log_eta) > MAX_GRID_POINTS:
                h = self._align(direction, _round_spacing(2.0 * h))  # a new tilt can widen the grid
            width, target, value, err_part = self._width(direction, query, h, lam, log_eta)
            last_target = target
            if width < best[0]:
                stalled = 0 if width < 0.9 * best[0] else stalled + 1
                best = (width, h, lam)
            else:
                stalled += 1
            if stalled >= patience:
                break  # refining no longer helps (a bias that h does not control)
            if (prev is not None and prev[1] == lam and h <= prev[0] / 3.0 and width > 0.75 * prev[2]
                    and self._grid_points(direction, h, lam, log_eta) > _FUTILE_POINTS):
                # a spacing 3x finer on a large grid took off less than a
                # quarter: the rest is not discretisation (sigma 15.3,
                # q 4.4e-5, T 6e5 refined down to 836k points for 40 s)
                break
            prev = (h, lam, width)
            if _DEBUG:
                print(f"[pld] {direction} h={h:.3g} lam={lam:.3g} width={width:.3g} "
                      f"round-off part={err_part:.3g} target={target:.3g}")
            if width <= target or not math.isfinite(value) or value <= floor:
                break
            if err_part > 0.3 * width and lam < lam_star:
                # a stronger tilt, unless it widens the tilted law too much
                # (heavy tails: the grid would explode for little gain)
                lam_new = w.quantize_tilt(min(lam_star, 2.5 * lam))
                comp = self._sizing(direction, log_eta)
                lo0, hi0 = w.window(comp, lam, log_eta)
                lo1, hi1 = w.window(comp, lam_new, log_eta)
                if hi1 - lo1 <= 4.0 * (hi0 - lo0):
                    lam = lam_new
                    continue
                if width - err_part <= target:
                    break  # nothing left that a finer grid would fix
            elif err_part > 0.5 * width and lam >= lam_star and lam > 1.0 and not weakened:
                # round-off dominates at the strongest tilt: a bounded loss
                # (randomized response with a small epsilon0) has its Chernoff
                # tilt at the cap, where everything below the top atoms is
                # under round-off; try a much weaker tilt once (the best
                # width found is kept either way)
                weakened = True
                lam = w.quantize_tilt(lam / 16.0)
                continue
            # the round-off part does not shrink with h: the discretisation
            # part must fit in what it leaves of the target
            avail = max(target - err_part, 0.2 * target)
            ratio = math.sqrt(avail / max(width - err_part, 1e-300)) * 0.85
            h_new = self._align(direction, _round_spacing(h * min(0.9, max(0.25, ratio))))
            if self._grid_points(direction, h_new, lam, log_eta) > MAX_GRID_POINTS:
                # the finest spacing under the memory cap (points ~ 1/h), if
                # that is still a real refinement
                n = self._grid_points(direction, h, lam, log_eta)
                h_new = self._align(direction, _round_spacing(h * n / MAX_GRID_POINTS * 1.02))
                while h_new < 0.95 * h and self._grid_points(direction, h_new, lam, log_eta) > MAX_GRID_POINTS:
                    # (x1.3: snapping to a quantum may take back up to 25%)
                    h_new = self._align(direction, _round_spacing(h_new * 1.3))
                if h_new >= 0.95 * h:
                    break
            h = h_new
        width, h, lam = best
        with self._lock:
            if memo is None or h < memo[0]:
                # (a third entry marks settings that could not meet the target)
                self._h_memo[key] = (h, lam) if width <= last_target else (h, lam, "short")
        return h, lam, log_eta

    def _first_settings(self, direction: str, query: tuple) -> tuple[float, float, tuple] | None:
        """``(h, lam, log_eta)`` that :meth:`_settings` starts from, or None when
        it would start from a remembered or fixed spacing."""
        if self._h_fixed is not None:
            return None
        lam_star = self._tilt_star(direction, query)
        log_eta = self._log_eta(direction, query)
        with self._lock:
            if (direction, w.quantize_tilt(lam_star), log_eta, _rtol(query)) in self._h_memo:
                return None
        lam = self._initial_tilt(direction, query, lam_star)
        return self._first_spacing(direction, query, lam, log_eta), lam, log_eta

    def _initial_tilt(self, direction: str, query: tuple, lam_star: float) -> float:
        """First tilt: ``_TILT_FRACTION`` of the Chernoff tilt, raised towards it
        when FFT round-off is predicted to take a real share of the target.

        A weaker tilt keeps the tilted law narrow (fewer points), but the
        round-off, relative to the tilted law, then reaches delta magnified by
        ``e^X``, ``X = Psi_T(lam) - lam eps - log delta`` (the Chernoff ratio at
        ``lam``).  Measured over 14 settings (T = 1e4 .. 1e6, delta = 1e-3 ..
        1e-12), the round-off part of the bracket is ``e^X T 10^-12.5 / lam*``
        within a factor 5; it is predicted with that factor at the
        saddle-point estimate of epsilon (:func:`pld._windows.saddle_epsilon`,
        within ~1% for DP-SGD; the Chernoff estimate overstates epsilon by
        15-50%, which would understate ``X`` by ``lam`` times that).  Tiny
        sampling rates at tiny deltas (sigma = 4, q = 3.3e-4, delta = 1e-12)
        otherwise spent a whole first grid on a bracket 20x its target, all
        round-off.  Sizing only: the refinement still measures the bracket.
        """
        lam = w.quantize_tilt(self._TILT_FRACTION * lam_star)
        comp = self._sizing(direction, self._log_eta(direction, query))
        if query[0] != "delta" or not lam_star > 0 or comp.steps() > _TILT_MODEL_STEPS:
            # (beyond the measured range the model fails: a Gaussian
            # composed 1e9 times has more round-off at the stronger tilt)
            return lam
        delta = query[1]
        top = w.quantize_tilt(lam_star)
        scale = math.log(5.0 * comp.steps() * 10.0 ** -12.5 / lam_star)

        def too_rough(lam: float, eps: float) -> bool:
            x = float(comp.psi(lam)[0]) - lam * eps - math.log(delta)
            return x + scale > math.log(0.25 * (_rtol(query) * eps + EPS_ATOL))

        # cheap first: at half the Chernoff estimate the prediction errs far
        # high; only a query it flags pays for the saddle point
        eps_guess = 0.5 * self._chernoff(direction, delta)[1]
        if lam >= top or not (eps_guess > 0 and math.isfinite(eps_guess)) or not too_rough(lam, eps_guess):
            return lam
        eps_sp = w.saddle_epsilon(comp, delta)
        eps_guess = eps_sp if eps_sp is not None and eps_sp > 0 else 1.5 * eps_guess
        while lam < top and too_rough(lam, eps_guess):
            lam = w.quantize_tilt(1.25 * lam)
        return lam

    def _first_spacing(self, direction: str, query: tuple, lam: float, log_eta) -> float:
        h = self._initial_spacing(direction, query)
        while self._grid_points(direction, h, lam, log_eta) > MAX_GRID_POINTS:
            h = _round_spacing(h * 2.0)
        return h

    def _probe_settings(self, direction: str, query: tuple) -> tuple[float, float, tuple] | None:
        """``(h, lam, log_eta)`` of the coarse grid that first tries a direction
        which should not bind, or None (a remembered spacing, a fixed one, or
        a probe grid above the memory cap)."""
        if self._h_fixed is not None:
            return None
        lam_star = self._tilt_star(direction, query)
        lam = self._initial_tilt(direction, query, lam_star)
        log_eta = self._log_eta(direction, query)
        with self._lock:
            if (direction, w.quantize_tilt(lam_star), log_eta, _rtol(query)) in self._h_memo:
                return None
        h = self._first_spacing(direction, query, lam, log_eta)
        h_probe = self._align(direction, _round_spacing(h * self._PROBE_COARSENING))
        if self._grid_points(direction, h_probe, lam, log_eta) > MAX_GRID_POINTS:
            return None
        return h_probe, lam, log_eta

    def _speculate(self, direction: str, h: float, lam: float, log_eta) -> None:
        """Start a materialisation in the background (two cores), if not known."""
        pool = _side_pool()
        if pool is None:
            return
        key = (direction, h, lam, log_eta)
        with self._lock:
            if key in self._cache or key in self._inflight:
                return
            # (the pid: a forked child must not wait on its parent's threads)
            self._inflight[key] = (os.getpid(), pool.submit(self._materialize, direction, h, lam, log_eta,
                                                            serial=True, lower=False))

    def _log_eta(self, direction: str, query: tuple) -> tuple[float, float]:
        """Mass allowed outside each truncation window, relative to the query.

        Truncated mass lands on the safe side but widens the bracket; keeping
        it 1e-8 below the delta at stake makes that invisible.  Returns the
        pair ``(log_eta, log_eta_up)``: tilted mass below the window (floored
        at 1e-16 of the tilted law, whose round-off it must not approach) and
        untilted P-mass above it (which moves delta by at most itself, so only
        the delta at stake matters).  Quantised so nearby queries share
        materialisations.
        """
        if query[0] == "delta":
            log_delta = math.log(query[1])
        else:
            comp = self._exploration(direction)
            lam = w.tilt_for_epsilon(comp, query[1])
            log_delta = float(comp.psi(lam)[0]) - lam * query[1]
        if not math.isfinite(log_delta):
            return (_LOG_ETA, _LOG_ETA)
        v_ = min(_LOG_ETA, log_delta - 18.0)
        up = min(-18.0, log_delta - 18.0)
        return (5.0 * math.floor(v_ / 5.0), 5.0 * math.floor(up / 5.0))

    def _width(self, direction: str, query: tuple, h: float, lam: float, log_eta):
        """``(width, target, value, round-off part of width)`` of one direction's bracket.

        The round-off part (two more evaluations, on the grids without their
        error terms) only steers a refinement: it is left at 0 when the
        bracket already meets its target.
        """
        kind, val = query[:2]
        rtol = _rtol(query)
        pess, opt = self._materialize(direction, h, lam, log_eta)
        if kind == "delta":
            lo, hi = opt.epsilon(val), pess.epsilon(val)
            target = rtol * hi + EPS_ATOL
            part = 0.0
            if hi - lo > target or _DEBUG:
                pz, oz = pess.without_error(), opt.without_error()
                part = max(0.0, hi - pz.epsilon(val)) + max(0.0, oz.epsilon(val) - lo)
            return hi - lo, target, hi, part
        lo, hi = float(opt.delta(val)[0]), float(pess.delta(val)[0])
        # a delta bracket as narrow as the epsilon target implies: what delta
        # itself falls by over one epsilon target, read off the dominating
        # grid (delta is convex in eps, so the step forward is the smaller).
        # (The Chernoff tilt lam* stood for the slope of log delta before; it
        # is 0 below the mean loss, where the slope can be 1e4: delta at
        # eps = 0 of a narrow loss law was refined to 1e-6 relative, 8000x
        # what the matching epsilon query needs, and took 30x its time.)
        # Never finer than a relative step (slope 1, as where delta is flat
        # near 1 nothing finer is asked of an epsilon either).
        step = rtol * max(val, 0.0) + EPS_ATOL
        fall = hi - float(pess.delta(val + step)[0]) if math.isfinite(val) else 0.0
        target = min(0.5 * hi, max(fall, step * hi)) + 1e-300
        part = 0.0
        if hi - lo > target or _DEBUG:
            pz, oz = pess.without_error(), opt.without_error()
            part = max(0.0, hi - float(pz.delta(val)[0])) + max(0.0, float(oz.delta(val)[0]) - lo)
        return hi - lo, target, hi, part

    def _align(self, direction: str, h: float) -> float:
        """Snap ``h`` to ``u / k`` when every loss is a multiple of a quantum ``u``.

        ``k`` is rounded up to ``m 2^j`` with ``m`` in 1, 3, 5, 7 (a spacing at
        most 25% finer): levels re-gridded to doubled spacings then keep the
        atoms on grid points for ``j`` doublings, where an odd ``k`` loses them
        at the first (and the dominated side's rounding of atoms between grid
        points is first order in the spacing).
        """
        u = self._exploration(direction).quantum()
        if u is None:
            return h
        k = max(1, math.ceil(u / h - 1e-9))
        j = max(0, k.bit_length() - 3)
        k = -(-k // (1 << j)) << j  # (k / 2^j rounded up: at most 7 << j)
        return u / k

    def _initial_spacing(self, direction: str, query: tuple) -> float:
        comp = self._exploration(direction)
        if comp.all_atoms and comp.quantum() is not None:
            # atoms on grid points: both discretisations are exact at h = u
            return comp.quantum()
        m, sd = comp.mean_sd()
        sd = max(sd, 1e-12)
        if query[0] == "delta":
            z = math.sqrt(2 * max(1.0, -math.log(query[1])))
            eps_est = max(0.0, m + z * sd)
        else:
            eps_est = abs(query[1])
            z = max(1.0, (eps_est - m) / sd)
        target = _rtol(query) * max(eps_est, 1e-3) + EPS_ATOL
        sens = 0.5 + z / (2 * sd)  # d eps / d variance for a Gaussian-like L_T
        # Both discretisations bias the bracket by about the variance the
        # dominating spread adds (the dominated side's centred merge removes
        # a little less): width ~ _WIDTH_PER_BIAS * sens * added_variance(h),
        # measured between 1.0 and 2.2 on the peer configurations.  Aim the
        # worst of them at _WIDTH_AIM of the target; added_variance grows like
        # h^2 (exactly so for continuous laws), so a few fixed-point steps settle h.
        # (delta queries aim lower: their target is converted from epsilon
        # through the Chernoff slope, a rougher guide)
        aim = _WIDTH_AIM if query[0] == "delta" else 0.5 * _WIDTH_AIM
        goal = aim * target / (_WIDTH_PER_BIAS * sens)
        h = sd / 4
        for _ in range(4):
            av = comp.added_variance(h)
            if av <= 0.0:
                break
            h = min(sd / 4, h * math.sqrt(goal / av))
        return self._align(direction, _round_spacing(h))

    def _grid_points(self, direction: str, h: float, lam: float, log_eta=_LOG_ETA) -> int:
        """Largest array the materialisation at ``(h, lam)`` allocates.

        Levels are coarsened to at most ``LEVEL_POINTS``; the single-step grids
        are the only arrays whose size follows ``h``.
        """
        n = LEVEL_POINTS
        for d in (direction,):
            comp = self._sizing(d, log_eta)
            steps = comp.steps()
            for ex, _ in comp.parts:
                lo, hi = w.window(w.Composite([(ex, 1)]), lam, w.shifted(log_eta, math.log(steps)))
                lo, hi = max(lo, ex.loss_min), min(hi, ex.loss_max)
                n = max(n, int((hi - lo) / h) + 2)
        return n

    def _materialize(self, direction: str, h: float, lam: float, log_eta=_LOG_ETA,
                     serial: bool = False, lower: bool = True) -> tuple[GridPLD, GridPLD | None]:
        """``(dominating, dominated)`` grids of one direction (cached).

        ``lower=False`` may leave the dominated side out (None): a direction
        whose upper end stays below the other's lower end needs no lower end.
        ``serial`` builds both sides in the calling thread (background builds).
        """
        key = (direction, h, lam, log_eta)
        with self._lock:
            hit = self._cache.get(key)
            pending = None if hit is not None or serial else self._inflight.get(key)
        if hit is None and pending is not None and pending[0] == os.getpid():
            pending[1].result()  # built in the background already
            with self._lock:
                hit = self._cache.get(key)
        if hit is not None and (hit.dominated is not None or not lower):
            return hit.dominating, hit.dominated
        if hit is None:
            n_final = self._grid_points(direction, h, lam, log_eta)
            if n_final > MAX_GRID_POINTS:
                raise GridTooLargeError(
                    f"this query needs {n_final} grid points at spacing {h:g}, above the cap of "
                    f"{MAX_GRID_POINTS}; pass a larger value_discretization_interval or accept a wider bracket")
            comp = self._exploration(direction)
            # what both sides share: each step's window, cells and sizing law
            sizing = self._sizing(direction, log_eta)
            entry = _Materialized([_prepare_step(mech.loss_model(direction), ex, count, h, lam, comp.steps(),
                                                 log_eta, ex_sizing)
                                   for (mech, count), (ex, _), (ex_sizing, _)
                                   in zip(self._components, comp.parts, sizing.parts)],
                                  w.window(sizing, lam, log_eta, h))
            entry.partial_windows = _partial_windows(sizing, lam, log_eta, h, entry.final_window)
        else:
            entry = hit
        steps = self._exploration(direction).steps()

        def side(pessimistic: bool) -> GridPLD:
            total = None
            for k, step in enumerate(entry.prepared):
                g = _self_compose(step, h, lam, pessimistic, steps, log_eta)
                if total is None:
                    total = g
                else:
                    a, b = _same_grid(total, g)
                    total = _fit(_truncate(a.convolve(b), entry.partial_windows[k]))
            return total

        # The two sides share only read-only inputs from here on; the FFTs and
        # numba kernels release the GIL, so on two cores they run side by side.
        pool = None if serial else _side_pool()
        try:
            if entry.dominating is None and lower and pool is not None:
                future = pool.submit(side, True)
                entry.dominated = side(False)
                entry.dominating = future.result()
            else:
                if entry.dominating is None:
                    entry.dominating = side(True)
                if lower and entry.dominated is None:
                    entry.dominated = side(False)
            with self._lock:
                if key not in self._cache and len(self._cache) > 32:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = entry
        finally:
            if serial:
                with self._lock:
                    self._inflight.pop(key, None)
        return entry.dominating, entry.dominated


@dataclass(eq=False)
class _Materialized:
    """One direction's grids at one setting, and what building them shared."""

    prepared: list
    final_window: tuple
    dominating: GridPLD | None = None
    dominated: GridPLD | None = None
    #: window of the composition of the first k + 1 components
    partial_windows: list = field(default_factory=list)


def _partial_windows(sizing: w.Composite, lam: float, log_eta, h: float,
                     final: tuple[float, float]) -> list[tuple[float, float]]:
    """Where the composition of the first ``k + 1`` components must be kept.

    Tilting factorises over independent parts, so the tilted law of the whole
    is centred at the sum of the parts' centres: the first ``k + 1`` matter
    on ``[A - hi_rest, B - lo_rest]`` for the final window ``[A, B]`` and the
    window ``[lo_rest, hi_rest]`` of the components still to come (within
    the partial composition's own window).  Cutting a partial composition to
    the *final* window instead moved all of a small first part's mass up to
    the bottom of a window drawn around a large later part: Gaussian(1),
    Gaussian(3), Gaussian(0.05) gave (0, 295) and, in the other order,
    (285.0607, 285.0760).  Sizing only: truncation moves what lies outside
    to the safe side either way.
    """
    parts = sizing.parts
    out = []
    for k in range(len(parts)):
        if k == len(parts) - 1:
            out.append(final)
            continue
        lo_r, hi_r = w.window(w.Composite(parts[k + 1:]), lam, log_eta, h)
        lo_o, hi_o = w.window(w.Composite(parts[:k + 1]), lam, log_eta, h)
        lo, hi = max(final[0] - hi_r, lo_o), min(final[1] - lo_r, hi_o)
        out.append((lo, hi) if lo < hi else (lo_o, hi_o))
    return out


_POOL_LOCK = threading.Lock()
_POOL: list = []


def _forget_pool_after_fork() -> None:
    # a forked child has none of the parent's threads: a pool inherited from
    # the parent would accept work and never run it
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _side_pool() -> ThreadPoolExecutor | None:
    """Worker threads for the dominating sides (two, so that queries from two
    user threads do not wait on each other), or None on a single core.

    ``PLD_THREADS=1`` in the environment turns the concurrency off.
    """
    threads = os.environ.get("PLD_THREADS")
    n = int(threads) if threads and threads.isdigit() else (os.cpu_count() or 1)
    if n < 2:
        return None
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="pld-side"))
        return _POOL[0]


def _rtol(query: tuple) -> float:
    """The bracket's relative target carried by a query (default ``EPS_RTOL``)."""
    return query[2] if len(query) > 2 else EPS_RTOL


def _round_spacing(h: float) -> float:
    """Round to 3 significant digits so cached grids are reused across queries."""
    e = math.floor(math.log10(h))
    return round(h / 10 ** e, 2) * 10 ** e


@dataclass(frozen=True, eq=False)
class _Step:
    """One component's inputs, shared by both sides of a materialisation."""

    model: object
    ex: w.Exploration
    count: int
    k_lo: int
    k_hi: int
    cells: tuple
    #: sizing law of the levels, from the discretised step
    ex_grid: w.Exploration | None
    #: offsets of the first step's points from k_lo (None: every grid point)
    points: np.ndarray | None = None
    #: level windows by step count (both sides truncate at the same ones)
    windows: dict = field(default_factory=dict)
    #: steps composed by one FFT power, per side (True: dominating); 1 if none
    power_steps: dict = field(default_factory=dict)
    #: the step's law as the grids hold it (its tail beyond the first window
    #: left out), for the levels' windows
    ex_sizing: w.Exploration | None = None


def _level_window(ex: w.Exploration, ex_grid: w.Exploration | None, c: int, h: float, lam: float,
                  total_steps: int, log_eta) -> tuple[float, float]:
    """Truncation window of the level holding ``c`` steps.

    A window for ``c`` composed steps allows tilted mass ``eta * c / total_steps``
    outside it, since its truncation error is repeated ``total_steps / c`` times.
    The top comes from the discretised step's own law (``ex_grid``): the first
    step sent the exact law's tail beyond its window to +inf, so no level holds
    it, and at small sampling rates that heavy tail put the exact law's
    Chernoff top far out (loss 1.59 instead of 0.31 at sigma = 1.547,
    q = 3.12e-4, T = 4847: 4x the points).  The bottom unites both laws' (the
    exact law lacks the mass a spread pushes below its support).  Sizing only:
    whatever falls outside is still bounded and moved to the safe side.
    """
    budget = w.shifted(log_eta, math.log(total_steps / c))
    lo, hi = w.window(w.Composite([(ex, c)]), lam, budget, h)
    if ex_grid is not None:
        lo_g, hi_g = w.window(w.Composite([(ex_grid, c)]), lam, budget, h)
        lo, hi = min(lo, lo_g), hi_g
    return lo, hi


def _prepare_step(model, ex: w.Exploration, count: int, h: float, lam: float,
                  total_steps: int, log_eta, ex_sizing: w.Exploration | None = None) -> _Step:
    """First-step window, cell masses and sizing law of one component.

    Both sides discretise the same cells and size their levels from the same
    law (windows only decide what is moved, never whether moved mass is
    accounted for, so sizing costs nothing in certification).
    """
    lo, hi = w.step_window(ex, lam, w.shifted(log_eta, math.log(total_steps)), h)
    lo = max(lo, ex.loss_min)
    hi = min(hi, ex.loss_max)
    k_lo = int(math.floor(lo / h))
    k_hi = max(int(math.ceil(hi / h)), k_lo + 1)
    n = k_hi - k_lo + 1
    points = None
    if model.base is not None and n > _WIDE_CELLS_FROM:
        # wide cells where the law has negligible mass (the tails of a
        # subsampled step are most of its window: 90% of MNIST's 44k cells)
        points = cell_points(*w.tail_offsets(ex, lam, k_lo, h, n), n)
        if points.size > 0.8 * n:
            points = None
    offsets = np.arange(n) if points is None else points
    grid = (k_lo + offsets) * h
    cells = model.cells(grid)
    # Size the composed levels from the discretised step: a spread onto a grid
    # coarse next to the step's own range (tiny sampling rates) pushes mass up
    # to a cell beyond the exact law's support, and windows drawn from the
    # exact law would send that mass to +inf at every level.  Every cell's mass
    # at its upper end bounds where either side's discretisation puts it.
    ex_grid = w.from_grid(grid, _upper_end_masses(model, cells[0], grid))
    if ex_grid is not None:
        # fill its psi cache here, not racing in the two side threads
        ex_grid.psi_around(lam)
        ex_grid.psi_around(0.0)
    return _Step(model, ex, count, k_lo, k_hi, cells, ex_grid, points,
                 ex_sizing=ex if ex_sizing is None else ex_sizing)


#: first-step windows longer than this may use wide cells in their tails
_WIDE_CELLS_FROM = 4096


def _upper_end_masses(model, cell_lp: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """log P-mass on the increasing points ``grid`` with each cell's mass (and
    each atom's) at the point at or above it (sizing only)."""
    out = np.full(grid.size, -np.inf)
    out[1:] = cell_lp[1:-1]
    loss, lp, _ = model.atoms()
    sel = np.isfinite(loss) & (lp > -np.inf) & (loss >= grid[0]) & (loss <= grid[-1])
    if np.any(sel):
        # (the tolerance: an atom on a point up to rounding belongs to it)
        tol = 1e-9 * (grid[-1] - grid[0]) / max(1, grid.size - 1)
        idx = np.clip(np.searchsorted(grid, loss[sel] - tol, side="left"), 0, grid.size - 1)
        np.logaddexp.at(out, idx, lp[sel])
    return out


def _self_compose(step: _Step, h: float, lam: float, pessimistic: bool, total_steps: int,
                  log_eta=_LOG_ETA) -> GridPLD:
    """``count``-fold composition: one FFT power, then squaring with windowed truncation.

    The levels up to the first late one (``8 c >= count``) all sit on the
    first spacing, so the first of them, ``c = count >> s``, is computed at
    once as ``X^c`` in the frequency domain
    (:func:`pld._power.self_compose_powers`) and squared ``s`` times; the
    remainder ``r = count - c 2^s < 2^s`` comes from the same transform, as
    ``X^(c + r)`` when ``s = 2``.  A transform that would have to be too long
    to keep aliasing negligible halves ``c`` until it fits, down to plain
    squaring.

    Evolving discretisation: the level holding ``c`` steps is re-gridded to a
    doubled spacing when that is cheap in accuracy.  A re-grid at spacing
    ``h'`` biases the loss by about ``h'^2/4`` and is repeated ``count / c``
    times, so it is allowed while ``(count/c) h'^2 / 4`` stays below
    ``1/log2(count)`` of the first discretisation's bias ``count * b(h)``
    (``b`` = variance the spread adds per step).  Far from the first levels the
    spacing then grows like ``sqrt(c)``, as the composed law widens, and every
    FFT stays about the same size however large ``count`` is.
    """
    ex, count = step.ex, step.count

    def win(c: int) -> tuple[float, float]:
        hit = step.windows.get(c)
        if hit is None:
            hit = step.windows[c] = _level_window(step.ex_sizing or ex, step.ex_grid, c, h, lam, total_steps,
                                                  log_eta)
        return hit

    levels = max(1.0, math.log2(count))
    per_step_bias = max(ex.added_variance(h), h * h / 6)

    sd1 = math.sqrt(max(ex.mean_var()[1], 0.0))

    def fit(g: GridPLD, c: int) -> GridPLD:
        # re-grid only a law that is wide on the grid: in the tails of a narrow
        # one (few steps, steep log-density) a re-grid costs far more than h^2
        h_allowed = min(math.sqrt(4.0 * c * per_step_bias / levels), math.sqrt(c) * sd1 / 50.0)
        # the memory cap wins over accuracy: a coarser grid stays certified,
        # the bracket just widens
        # Early levels (multiplicity count/c large) are re-gridded only when big:
        # there the law can still be spiky (a mixture over how many steps drew
        # the record) and a re-grid's error, repeated count/c times, is not small.
        late = 8 * c >= count
        while g.size > MAX_GRID_POINTS or (
                2 * g.h <= h_allowed and g.size > (MIN_LEVEL_POINTS if late else EARLY_LEVEL_POINTS)):
            g = g.coarsen()
        return g

    base = discretize(step.model, h, step.k_lo, step.k_hi, lam, pessimistic, cells=step.cells,
                      points=step.points)
    result = None
    result_count = 0
    cur, cur_count = base, 1
    remaining = count
    # The early levels (all on spacing h) in one FFT power; the late ones,
    # which are re-gridded as the law widens, by squaring.
    step.power_steps[pessimistic] = 1
    # A transform no longer than squaring the first step would use is always
    # a gain.  When no power fits that, one up to twice the level it
    # computes is tried (squaring from one step would have to hold that level
    # too, on the first spacing): q = 1e-4, T = 1e6, whose narrow first step
    # let no power fit, squared from one step, 10x slower.  Allowing the
    # second bound from the start made T = 1e7 take one 4M-point power: 4x
    # slower and 5x the memory of a smaller jump and re-gridded squarings.
    for generous in (False, True):
        shift = _power_shift(count)
        while (count >> shift) >= 4:
            jump = count >> shift
            rem = count - (jump << shift)
            # With two squarings the remainder (< 4 steps) rides on a copy of
            # the level, jump + rem, and the sum is jump + rem + jump + 2 jump:
            # as many convolutions, but a law of a few steps re-gridded in one
            # go to the final spacing widened the bracket (T = 14063: by 30%).
            # Further squarings (a transform that did not fit) keep it apart:
            # 2^s - 1 additions would cost more than s.
            folded = 0 < rem and shift <= 2
            first = jump + rem if folded else rem
            counts = (jump, first) if rem else (jump,)
            windows = tuple(_padded(win(c), h) for c in counts)
            power_points = max(POWER_POINTS, _fft_size(2 * base.size))
            if generous:
                level = int((windows[0][1] - windows[0][0]) / h) + 1
                power_points = max(power_points, 2 * _fft_size(level))
            powered = self_compose_powers(base, counts, windows, min(power_points, 2 * MAX_GRID_POINTS),
                                          total=count)
            if powered is not None:
                cur, cur_count = fit(powered[0], jump), jump
                if rem:
                    result, result_count = fit(powered[1], first), first
                remaining = (1 << shift) - (1 if folded else 0)
                step.power_steps[pessimistic] = jump
                break
            shift += 1
        if step.power_steps[pessimistic] > 1:
            break
    while True:
        if remaining & 1:
            if result is None:
                result, result_count = cur, cur_count
            else:
                result_count += cur_count
                a, b = _same_grid(result, cur)
                result = fit(_truncate(a.convolve(b), win(result_count)), result_count)
        remaining >>= 1
        if not remaining:
            break
        cur_count *= 2
        cur = fit(_truncate(cur.convolve(cur), win(cur_count)), cur_count)
    return result


def _power_shift(count: int) -> int:
    """Squarings after the FFT power: ``count = (count >> s) 2^s + r`` with
    the power computing ``count >> s`` steps (and ``r < 2^s``) from one
    transform, at the first late level (``8 c >= count``), where re-gridding
    may start.  An exact quotient rather than a power of two: MNIST's 14040
    steps are 3510 x 4 (a power and two squarings), where the largest power
    of two, 2048, left 1752 steps and six levels to add up (four
    convolutions and a second inverse transform)."""
    return 2 if count >= 16 else 0


def _padded(window: tuple[float, float], h: float) -> tuple[float, float]:
    return window[0] - h, window[1] + h


#: largest transform for the FFT power of the early levels (a longer one
#: halves the power: squaring re-grids levels that outgrow this)
POWER_POINTS = 1 << 18
#: levels at most this large are never re-gridded (no time to gain)
MIN_LEVEL_POINTS = 1 << 12
#: early levels are re-gridded only above this size.  Measured on the 25
#: peer configurations: 1 << 17 kept huge-1e6's 65536-step power level
#: (multiplicity 15) at 258k points and squared it there (53 ms); 1 << 14
#: re-grids it first (39 ms), and widens the bracket by at most 10% of its
#: target (q = 1e-4, where the early levels are a spiky mixture over how
#: many steps drew the record); 1 << 12 gains little more for as much again
EARLY_LEVEL_POINTS = 1 << 14


def _fit(g: GridPLD) -> GridPLD:
    """Cap a final (multiplicity one) result at ``LEVEL_POINTS`` points."""
    while g.size > LEVEL_POINTS:
        g = g.coarsen()
    return g


def _same_grid(a: GridPLD, b: GridPLD) -> tuple[GridPLD, GridPLD]:
    while a.h < b.h * (1 - 1e-9):
        a = a.coarsen()
    while b.h < a.h * (1 - 1e-9):
        b = b.coarsen()
    if a.h != b.h:  # equal up to rounding of repeated doubling
        b = GridPLD(a.h, b.k0, b.p, b.lam, b.log_scale, b.inf_mass, b.err, b.pessimistic, b.log_mgf_bound,
                    b.rel_err)
    return a, b


def _truncate(g: GridPLD, window: tuple[float, float]) -> GridPLD:
    return g.truncate(*_padded(window, g.h))


def _merge(components: tuple) -> tuple:
    """Add up counts of equal mechanisms, keeping first-seen order."""
    counts: Counter = Counter()
    order = []
    for m, k in components:
        if m not in counts:
            order.append(m)
        counts[m] += k
    return tuple((m, counts[m]) for m in order)
