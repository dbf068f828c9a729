"""The PLD type: what users compose and query.

A :class:`PLD` is an immutable description of a composition — a multiset of
``(mechanism, count)`` pairs under one neighbouring relation — plus what its
queries have computed so far.  Nothing is discretised until a question is
asked; the question (a target delta or epsilon) then fixes the exponential
tilt and the grid spacing (:mod:`pld.engine.planner`), the composer builds certified
grids (:mod:`pld.engine.composer`) and the evaluator reads a bracket off them
(:mod:`pld.engine.grid`, :mod:`pld.engine.queries`), so a user never has to guess a
discretisation interval.

``delta(eps) = max(delta_remove(eps), delta_add(eps))`` over the two directions
of the neighbouring relation, and every answer is an interval
``[lower, upper]`` that contains the true value.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import Counter

import numpy as np

from pld import _validate as v
from pld.engine import budget as _budget
from pld.engine import delta_queries, gaussian_exact, queries, total_variation
from pld.engine.composer import GridTooLargeError
from pld.engine.laws import DIRECTIONS
from pld.engine.pipeline import Engine, GridPair
from pld.engine.targets import (
    EPS_ATOL,
    EPS_RTOL,
    MAX_SPACING,
    MIN_SPACING,
    NotTightWarning,
    TargetMissedWarning,
    warn_not_tight,
)
from pld.mechanisms import Mechanism, register_pld_type
from pld.mechanisms import adjacency as adj

__all__ = ["PLD", "GridPair", "GridTooLargeError", "TargetMissedWarning", "NotTightWarning", "CLOSED_FORMS",
           "EPS_RTOL", "EPS_ATOL"]

#: answer compositions of Gaussian mechanisms from their closed form (exact at
#: any count).  Tests that exercise the FFT engine on Gaussians turn it off.
CLOSED_FORMS = True


def _budgeted(method):
    """Run a query under its time budget (:mod:`pld.engine.budget`; nested queries share the outermost)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with _budget.query():
            return method(self, *args, **kwargs)
    return run


class PLD:
    """Privacy loss distribution of a composition of mechanisms.

    Build one with ``mechanism.pld()``, then ``compose``/``self_compose``; query
    with :meth:`epsilon_bounds`, :meth:`delta_bounds`, :meth:`epsilon`,
    :meth:`delta`.  Instances are immutable (and safe to share between threads);
    numerical results are cached.
    """

    def __init__(self, components, *, value_discretization_interval: float | None = None,
                 _relation: str | None = None):
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
                "value_discretization_interval", value_discretization_interval, low=MIN_SPACING,
                high=MAX_SPACING)
        self._components = _merge(tuple(comps))
        for _, k in self._components:
            v.integer("count (after adding up equal mechanisms)", k, low=1, high=v.MAX_COUNT)
        # (a bound's view takes the relation of the composition it bounds: its parts may be stated under another)
        self._adjacency = adj.of_components(self._components) if _relation is None else _relation
        self._h_fixed = value_discretization_interval
        self._engine_box: list[Engine] = []
        #: the composition with refined components (see _epsilon_bracket_refined), once built
        self._refined_box: list[PLD | None] = []
        #: the composition with the components' deeper tails (see _deeper), once built
        self._deep_box: list[PLD] = []
        #: (upper view, lower view or None) of a composition that is not tight, once built
        self._bounds_box: list[tuple[PLD, PLD | None]] = []
        #: the lower views: the first is ``bounds()[1]``, the others its parts' alternatives
        self._lowers_box: list[tuple[PLD, ...]] = []

    def __getstate__(self) -> dict:
        """What the PLD is; its grids and caches (locks, large arrays) are built anew where unpickled."""
        boxes = ("_engine_box", "_refined_box", "_deep_box", "_bounds_box", "_lowers_box")
        return {k: ([] if k in boxes else x) for k, x in self.__dict__.items()}

    # ----------------------------------------------------------- building
    @classmethod
    def from_mechanism(cls, mechanism: Mechanism, *, count: int = 1,
                       value_discretization_interval: float | None = None) -> PLD:
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
    def adjacency(self) -> str:
        """The neighbouring relation the composition is accounted under
        (:mod:`pld.mechanisms.adjacency`; ``"any"`` when every part is stated through a
        sensitivity)."""
        return self._adjacency

    @property
    def symmetric(self) -> bool:
        """True when both directions of the relation have the same PLD (one is evaluated)."""
        if not self.tight:
            return self._bounds()[0].symmetric
        return all(m.symmetric for m, _ in self._components)

    @property
    def tight(self) -> bool:
        """True when every part is composed through its mechanism's tight
        dominating pair, so that both ends of a bracket come from it.

        A composition with a part that is not tight (:attr:`pld.Mechanism.tight`)
        is bounded by two compositions of tight pairs: its upper ends come from
        the parts' dominating compositions, its lower ends from dominated
        constructions of the true mechanisms (or are 0 where none is known);
        :meth:`bounds` gives both, :meth:`explain` says what each is.  The gap
        between them is the price of the missing tight analysis, not a
        numerical error: it raises no :class:`TargetMissedWarning` (each of
        the two compositions meets its own target or warns).
        """
        return all(m.tight for m, _ in self._components)

    def bounds(self) -> tuple[PLD, PLD | None]:
        """``(upper, lower)``: the compositions of tight pairs that bound this one.

        A tight PLD is its own bound both ways.  Otherwise every part is
        replaced by its dominating composition in ``upper`` and by its
        dominated construction in ``lower`` (None when some part has none:
        lower ends are then 0).  See :attr:`tight`.
        """
        if self.tight:
            return self, self
        return self._bounds()

    def _say_not_tight(self, lo: np.ndarray, hi: np.ndarray, d: np.ndarray, rtol: float,
                       kind: str = "epsilon") -> None:
        """Never silent: a bracket wider than its target because a part is not tight is said
        once per PLD (:func:`pld.engine.targets.warn_not_tight`)."""
        if self.__dict__.get("_said_not_tight"):
            return
        from pld.mechanisms.matrix import Bracketed  # (a bound of two compositions: its name says what it bounds)

        names = ", ".join(sorted({m.name if isinstance(m, Bracketed) else type(m).__name__
                                  for m, _ in self._components if not m.tight}))
        if warn_not_tight(lo, hi, d, rtol, kind, names, self._bounds()[1] is not None, stacklevel=5):
            self.__dict__["_said_not_tight"] = True

    def _bounds(self) -> tuple[PLD, PLD | None]:
        if not self._bounds_box:
            up: list = []
            low: list | None = []
            for m, k in self._components:
                u, lo = m.bound_parts()
                up.extend((mm, c * k) for mm, c in u)
                if lo is None or low is None:
                    low = None
                else:
                    low.extend((mm, c * k) for mm, c in lo)
            upper = PLD(tuple(up), value_discretization_interval=self._h_fixed, _relation=self._adjacency)
            lower = (None if low is None else
                     PLD(tuple(low), value_discretization_interval=self._h_fixed, _relation=self._adjacency))
            self._bounds_box.append((upper, lower))
        return self._bounds_box[0]

    def _direct_lower(self, d: np.ndarray, name: str = "epsilon_lower") -> np.ndarray:
        """Lower ends the one part of a composition computes itself at each delta
        (``epsilon_lower(delta, count)``: random allocation's exceedances; or at each
        epsilon, ``delta_lower``), else 0."""
        if len(self._components) != 1 or self._h_fixed is not None:
            return np.zeros(d.shape)
        m, k = self._components[0]
        f = getattr(m, name, None)
        return np.zeros(d.shape) if f is None else np.vectorize(lambda x: f(float(x), k), otypes=[float])(d)

    def _lowers(self) -> tuple[PLD, ...]:
        """Every lower view: ``bounds()[1]`` and, where parts offer other dominated
        compositions (:meth:`pld.mechanisms.base.Mechanism.lower_alternatives`), the view
        with the ``i``-th alternative of each part (its own lower part where it has fewer).
        Each is a dominated composition: the largest of their answers is a lower end."""
        if not self._lowers_box:
            lower = self._bounds()[1]
            views: list[PLD] = [] if lower is None else [lower]
            if lower is not None:
                alts = [m.lower_alternatives() for m, _ in self._components]
                for i in range(max((len(a) for a in alts), default=0)):
                    parts: list = []
                    for (m, k), a in zip(self._components, alts):
                        lo = a[i] if i < len(a) else m.bound_parts()[1]
                        parts.extend((mm, c * k) for mm, c in lo)
                    views.append(PLD(tuple(parts), value_discretization_interval=self._h_fixed,
                                     _relation=self._adjacency))
            self._lowers_box.append(tuple(views))
        return self._lowers_box[0]

    @property
    def directions(self) -> tuple[str, ...]:
        """The directions the answers take the maximum over."""
        return ("remove",) if self.symmetric else DIRECTIONS

    def compose(self, other: PLD) -> PLD:
        """PLD of running both (independent noise, same data): losses add.

        Raises ``ValueError`` when the two are accounted under different
        neighbouring relations: their privacy losses are about different
        pairs of datasets and do not add up to a guarantee for either.
        """
        if not isinstance(other, PLD):
            raise TypeError(f"can only compose with a PLD, got {type(other).__name__}")
        h = self._h_fixed if self._h_fixed is not None else other._h_fixed
        return PLD(self._components + other._components, value_discretization_interval=h)

    def self_compose(self, count: int) -> PLD:
        """PLD of ``count`` independent runs (``count`` may be up to 1e12 steps in all)."""
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
    @_budgeted
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
        v.delta_floor("delta", d)
        rtol = EPS_RTOL if rtol is None else v.real("rtol", rtol, low=1e-7, high=1.0)
        if not self.tight:
            upper, lower = self._bounds()
            _, hi = upper.epsilon_bounds(d, rtol=rtol)
            lo = np.zeros(d.shape)
            for view in self._lowers():
                lo = np.maximum(lo, view.epsilon_bounds(d, rtol=rtol)[0])
            lo = np.maximum(lo, self._direct_lower(d))
            self._say_not_tight(np.asarray(lo), np.asarray(hi), d, rtol)
            if scalar:
                return float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])
            return np.asarray(lo, float).reshape(d.shape), np.asarray(hi, float).reshape(d.shape)
        lo = np.empty(d.shape)
        hi = np.empty(d.shape)
        for idx, dv in np.ndenumerate(d):
            lo[idx], hi[idx] = self._epsilon_bounds_at(float(dv), rtol)
        if scalar:
            return float(lo), float(hi)
        return lo, hi

    def _epsilon_bounds_at(self, delta: float, rtol: float) -> tuple[float, float]:
        if delta == 0.0:
            # the largest of the directions' largest losses, each summed
            # exactly from bounds on the components' and rounded outward
            engine = self._engine()
            bounds = [engine.laws.largest_loss_bounds(d) for d in engine.directions]
            return max(0.0, *(b[0] for b in bounds)), max(0.0, *(b[1] for b in bounds))
        if delta == 1.0 or self._tv_upper() <= delta or self._epsilon_at_zero_delta() <= 0.0:
            # delta(0) <= 1 always; delta(0) = TV <= delta, or no loss above 0
            # at all: epsilon = 0
            return 0.0, 0.0
        mu = self._closed_form_mu()
        if mu is not None:
            lo, hi = gaussian_exact.epsilon_bounds(mu, delta)
            if hi - lo > rtol * hi + EPS_ATOL:
                warnings.warn(f"epsilon bracket [{lo:.6g}, {hi:.6g}] at delta = {delta:.3g} is wider than its "
                              f"target (upper - lower <= {rtol:g} * epsilon + {EPS_ATOL:g}): the closed form's "
                              "special-function error bound leaves this width. Both ends are still certified.",
                              TargetMissedWarning, stacklevel=5)
            return lo, hi
        return self._epsilon_bracket(delta, rtol)

    def epsilon(self, delta):
        """Certified epsilon (the upper end of :meth:`epsilon_bounds`)."""
        _, hi = self.epsilon_bounds(delta)
        return hi

    @_budgeted
    def delta_bounds(self, epsilon):
        """Certified ``(lower, upper)`` on delta(epsilon) = max over directions.

        Vectorised: a whole curve in one call (see :func:`pld.engine.delta_queries.delta_curve`).
        """
        e, scalar = v.real_array("epsilon", epsilon)
        if not self.tight:
            upper, lower = self._bounds()
            _, hi = upper.delta_bounds(e)
            lo = np.zeros(e.shape)
            for view in self._lowers():
                lo = np.maximum(lo, view.delta_bounds(e)[0])
            lo = np.maximum(lo, self._direct_lower(e, "delta_lower"))
            self._say_not_tight(np.asarray(lo), np.asarray(hi), e, EPS_RTOL, kind="delta")
            if scalar:
                return float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])
            return np.asarray(lo, float).reshape(e.shape), np.asarray(hi, float).reshape(e.shape)
        flat = e.ravel()
        try:
            lo, hi = self._delta_curve(flat)
        except _budget.BudgetSpent as exc:
            lo, hi = np.zeros(flat.shape), np.ones(flat.shape)
            warnings.warn(f"delta bounds are [0, 1]: {exc} (no grid finished; PLD_TIME_BUDGET sets the "
                          "budget). Both ends are still certified.", TargetMissedWarning, stacklevel=4)
        if self._closed_form_mu() is None:
            delta_queries.warn_if_loose(flat, lo, hi, self._h_fixed, delta_queries.tunable_epsilon(self._engine()),
                                  TargetMissedWarning)
        if scalar:
            return float(lo[0]), float(hi[0])
        return lo.reshape(e.shape), hi.reshape(e.shape)

    def delta(self, epsilon):
        """Certified delta(epsilon) (the upper end of :meth:`delta_bounds`)."""
        _, hi = self.delta_bounds(epsilon)
        return hi

    @_budgeted
    def explain(self, delta: float, *, tilt: float | None = None) -> dict:
        """Per-direction brackets and numerical settings behind ``epsilon_bounds(delta)``.

        ``tilt`` replaces the exponential tilt of the grids (same spacing and
        windows budget); the per-direction values then describe those grids.
        A weak tilt (0) represents the bulk of the loss law best, the query's
        own tilt the tail at ``delta``.  Where the components' own accuracy settings were
        refined (random allocation's constructions), ``"refinements"`` lists each composition
        built, its components' settings and its own bracket: the answer is their intersection.
        """
        delta = v.real("delta", delta, low=v.MIN_DELTA, high=1.0, high_open=True)
        if not self.tight:
            return self._explain_bounds(delta, tilt)
        lo, hi = self._epsilon_bracket(delta, EPS_RTOL)
        engine = self._engine()
        chain, miss = self.__dict__.get("_chain_logs", {}).get((delta, EPS_RTOL)) or (
            [], queries.target_miss(engine, delta, EPS_RTOL, lo, hi, queries.used_settings(engine, delta)))
        mu = self._closed_form_mu()
        if mu is not None:
            # the answer is the closed form's; the grids below describe what
            # the FFT engine would have used
            lo, hi = gaussian_exact.epsilon_bounds(mu, delta)
            miss = None
        jumps = None if mu is not None else engine.cache.get(engine.cache.used, ("jumps", delta, EPS_RTOL))
        method = ("closed form (a composition of Gaussian mechanisms is one Gaussian mechanism, "
                  f"mu = {mu:.6g})" if mu is not None else "FFT composition of certified grids")
        if jumps:
            method += ("; the remove direction's heavy upper tail split off by a big-jump decomposition "
                       "(pld.engine.big_jumps)")
        out = {"epsilon_lower": lo, "epsilon_upper": hi, "delta": delta, "method": method,
               "target": f"upper - lower <= {EPS_RTOL:g} * epsilon + {EPS_ATOL:g}",
               "target_met": miss is None, "target_missed_because": miss,
               "big_jump_decomposition": jumps or None}
        if mu is None and len(chain) > 1:  # (the constructions intersected, each its own bracket)
            out["refinements"] = [{"components": tuple(getattr(m, "refinement_label", None)
                                                       for m, _ in node._components),
                                   "epsilon_bracket": (a, b)} for node, a, b in chain]
        directions: dict[str, dict] = {}
        out["directions"] = directions
        for d, pair in self.grids(delta, tilt=tilt).items():
            pess, opt = pair.dominating, pair.dominated
            upper = queries.direction_upper(engine, d, pess, delta)
            directions[d] = {
                "epsilon_lower": opt.epsilon(delta), "epsilon_upper": upper,
                # a direction whose upper end is below the other's lower end
                # cannot move the answer; it is settled on a coarser grid
                "binding": bool(upper > lo),
                "delta_at_epsilon_upper": (float(opt.delta(hi)[0]), float(pess.delta(hi)[0])),
                "grid_spacing_first_step": pair.settings.h, "grid_spacing_final": pess.h,
                "tilt": pair.settings.lam,
                # per component: steps composed by one FFT power (1: squaring only)
                "fft_power_steps": list(pair.power_steps),
                # arithmetic of the FFT power: "extended" (long double) where
                # its round-off would have dominated the bracket
                "fft_precision": pair.settings.precision,
                "grid_points": pess.size, "fft_error_bound": pess.err,
                "infinity_mass_upper": pess.inf_mass,
                "loss_window": (pess.k0 * pess.h, (pess.k0 + pess.size - 1) * pess.h),
            }
        at_terms = jumps[-1].get("delta_at_epsilon_upper") if jumps else None
        if at_terms is not None and "remove" in directions:
            # both certified: the grid's bracket on delta at the upper end
            # narrowed by the big-jump terms' (the grid is a coarse one there)
            g_lo, g_hi = directions["remove"]["delta_at_epsilon_upper"]
            directions["remove"]["delta_at_epsilon_upper"] = (max(g_lo, at_terms[0]), min(g_hi, at_terms[1]))
        return out

    def _explain_bounds(self, delta: float, tilt: float | None) -> dict:
        """:meth:`explain` of a composition that is not tight: the upper view's
        grids and settings, both views' brackets, and what each end bounds."""
        upper, lower = self._bounds()
        out = upper.explain(delta, tilt=tilt)
        up_lo, up_hi = out["epsilon_lower"], out["epsilon_upper"]
        # (the lower view whose lower end is the bracket's)
        lows = [view.explain(delta) for view in self._lowers()]
        low = max(lows, key=lambda x: x["epsilon_lower"]) if lows else None
        direct = float(self._direct_lower(np.asarray(delta)))
        if direct > (low["epsilon_lower"] if low is not None else 0.0):
            low = {"epsilon_lower": direct, "epsilon_upper": direct, "target_met": True, "direct": True}
        notes = [(repr(m), m.bound_notes()) for m, _ in self._components if not m.tight]
        lower_what = "direct_lower" if low is not None and low.get("direct") else "lower"
        out.update({
            "epsilon_lower": low["epsilon_lower"] if low is not None else 0.0,
            "tight": False,
            "method": ("upper end from a dominating pair that is not tight; lower end from "
                       + ("a dominated construction of the true mechanism" if lower is not None
                          else "none known (0)") + "; " + out["method"]),
            "bounds": {
                "upper": {"epsilon_bracket": (up_lo, up_hi), "target_met": out["target_met"],
                          "what": "; ".join(f"{name}: {n['upper']}" for name, n in notes)},
                "lower": ({"epsilon_bracket": (low["epsilon_lower"], low["epsilon_upper"]),
                           "target_met": low["target_met"],
                           "what": "; ".join(f"{name}: {n.get(lower_what, n['lower'])}" for name, n in notes)}
                          if low is not None else
                          {"epsilon_bracket": None, "target_met": True,
                           "what": "; ".join(f"{name}: {n['lower']}" for name, n in notes)}),
            },
            "target_met": out["target_met"] and (low is None or low["target_met"]),
            "target_missed_because": out["target_missed_because"] or (low or {}).get("target_missed_because"),
        })
        return out

    def grids(self, delta: float, *, tilt: float | None = None) -> dict[str, GridPair]:
        """The certified grids behind ``epsilon_bounds(delta)``, per direction.

        Read-only: other evaluators (:mod:`pld.baselines.curves`, plots, reports) read
        delta off these grids instead of rebuilding them.  ``tilt`` replaces
        the grids' exponential tilt (same spacing and truncation budget).
        """
        delta = v.real("delta", delta, low=v.MIN_DELTA, high=1.0, high_open=True)
        engine = self._engine()
        used = queries.used_settings(engine, delta)
        if tilt is not None:
            tilt = v.real("tilt", tilt, low=0.0)
            used = {d: s._replace(lam=tilt) for d, s in used.items()}
        out = {}
        for d, s in used.items():
            pess, opt = engine.composer.materialize(d, *s)
            assert opt is not None
            out[d] = GridPair(d, s, pess, opt, tuple(engine.composer.power_steps(d, *s)))
        return out

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
        pairs = self.grids(delta, tilt=tilt)
        pair = pairs[direction if direction in pairs else "remove"]
        g = pair.dominating if side == "upper" else pair.dominated
        with np.errstate(under="ignore", over="ignore"):
            masses = np.exp(g.log_masses())
        return g.losses(), masses, float(g.inf_mass)

    def loss_law(self, direction: str = "remove"):
        """The explored loss law of one direction (:class:`pld.engine.windows.Composite`).

        For sizing and estimates only (saddle-point and Chernoff estimates,
        moments); no certificate is read from it.
        """
        if direction not in self.directions:
            raise ValueError(f"direction must be one of {self.directions}, got {direction!r}")
        return self._engine().laws.exploration(direction)

    # -------------------------------------------------------- internals
    def _engine(self) -> Engine:
        if not self.tight:
            # (grids, curves and reports of a composition that is not tight
            # read its upper view: the dominating pairs)
            return self._bounds()[0]._engine()
        # (built on first use: a PLD that is only composed and saved builds none;
        # list.append is atomic, and a race builds two engines of which one wins)
        if not self._engine_box:
            self._engine_box.append(Engine.build(self._components, self._h_fixed))
        return self._engine_box[0]

    def _epsilon_bracket(self, delta: float, rtol: float) -> tuple[float, float]:
        log: list = []  # (the chain's compositions and their own brackets, for explain())
        lo, hi, miss = self._epsilon_bracket_refined(delta, rtol, log=log)
        if len(log) > 1:  # (kept only where a chain was walked: most queries have none)
            if miss is not None:
                miss = (f"{len(log)} constructions of its parts intersected (explain()['refinements']) still "
                        f"leave this width; the last one's: {miss}")
            self.__dict__.setdefault("_chain_logs", {})[(delta, rtol)] = (log, miss)
        if miss is not None:
            shown = f"1 - {1.0 - delta:.3g}" if delta > 0.99 else f"{delta:.3g}"
            warnings.warn(f"epsilon bracket [{lo:.6g}, {hi:.6g}] at delta = {shown} is wider than its "
                          f"target (upper - lower <= {rtol:g} * epsilon + {EPS_ATOL:g}): {miss}. Both ends are "
                          "still certified.", TargetMissedWarning, stacklevel=6)
        return lo, hi

    def _deeper(self, delta: float) -> PLD | None:
        """The composition of the components' ``deeper()`` pairs, where their tails at
        ``+inf`` (``tail_mass()``), summed, reach :data:`DEEPER_TAIL_SHARE` of ``delta``
        (else None).  A round of random allocation leaves about 1e-16 to 1e-15 there
        (its windows' and quantiles' tails); thousands of rounds at a strict delta add
        up to a large share of delta, or past it (the upper end was infinite)."""
        mass = 0.0
        deeper = []
        for m, k in self._components:
            f = getattr(m, "deeper", lambda: None)()
            if f is not None:
                mass += k * m.tail_mass()
            deeper.append((f or m, k))
        if not mass >= DEEPER_TAIL_SHARE * delta:
            return None
        if not self._deep_box:
            self._deep_box.append(PLD(tuple(deeper)))
        return self._deep_box[0]

    def _epsilon_bracket_refined(self, delta: float, rtol: float, known: tuple[float, float] = (0.0, math.inf),
                                 widths: tuple = (), log: list | None = None) -> tuple[float, float, str | None]:
        """The bracket, and why it misses its target (None: it does not).

        A component whose own model has an accuracy setting (``refined()``:
        a finer version of itself, or None; e.g. the allocation laws' grid)
        is refined when the bracket misses its target, and the brackets are
        intersected (both are certified; ``known``: the earlier ones', the chain ends where
        it meets the target).  Where the components' tails at ``+inf`` are a share of delta,
        the chain goes on from their ``deeper()`` pairs instead (:meth:`_deeper`).  A family of
        constructions (:meth:`_family`) is skipped with its deeper and finer members once a
        bracket of it improved neither end and was :data:`FUTILE_WIDTH` times the chain's, or once
        two of its brackets left its narrowest :data:`OUTCLASSED_WIDTH` times another family's
        (``widths``: family, narrowest width, brackets), where refinement no longer closes the gap.
        ``log`` gets each composition built and its own bracket.
        """
        engine = self._engine()
        try:
            lo, hi, used = queries.epsilon_bracket(engine, delta, rtol)
        except _budget.BudgetSpent as exc:
            # (no grid of some direction could be built in time: the trivial
            # bracket, said; PLD_TIME_BUDGET gives the query more time)
            return 0.0, math.inf, f"{exc} (no grid finished; PLD_TIME_BUDGET sets the budget)"
        if log is not None:
            log.append((self, lo, hi))
        own = hi - lo
        far = lo <= known[0] and hi >= known[1] and own > FUTILE_WIDTH * (known[1] - known[0])
        lo, hi = max(lo, known[0]), min(hi, known[1])
        miss = queries.target_miss(engine, delta, rtol, lo, hi, used)
        if miss is None or self._h_fixed is not None:
            return lo, hi, miss
        fam = self._family()
        best = {f: (w, n) for f, w, n in widths}
        w0, n0 = best.get(fam, (math.inf, 0))
        best[fam] = (math.inf, math.inf) if far else (min(w0, own), n0 + 1)

        def futile(family: tuple) -> bool:
            w, n = best.get(family, (math.inf, 0))
            others = [x for f, (x, _) in best.items() if f != family]
            return n >= 2 and bool(others) and not w <= OUTCLASSED_WIDTH * min(others)

        refined = (not futile(fam) and self._deeper(delta)) or self._refined()
        while refined is not None and futile(refined._family()):
            refined = refined._refined()
        if refined is None:
            return lo, hi, miss
        lo2, hi2, miss2 = refined._epsilon_bracket_refined(delta, rtol, (lo, hi),
                                                            tuple((f, w, n) for f, (w, n) in best.items()), log)
        lo, hi = max(lo, lo2), min(hi, hi2)
        # (an infinite upper end misses any target unless epsilon is infinite exactly:
        # inf - lo <= rtol * inf would call it met)
        met = lo == hi or (math.isfinite(hi) and hi - lo <= rtol * hi + EPS_ATOL)
        return lo, hi, (None if met else (miss2 or miss))

    def _family(self) -> tuple:
        """The components' families of constructions (``refinement_family``; None without)."""
        return tuple(getattr(m, "refinement_family", None) for m, _ in self._components)

    def _refined(self) -> PLD | None:
        """The composition of the components' ``refined()`` versions (None if none has one)."""
        if not self._refined_box:
            finer = tuple((getattr(m, "refined", lambda: None)() or m, k) for m, k in self._components)
            changed = any(f is not m for (f, _), (m, _) in zip(finer, self._components))
            self._refined_box.append(PLD(finer) if changed else None)
        return self._refined_box[0]

    def _delta_curve(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`delta_bounds` of a tight composition, unwarned.  Points whose bracket is wider
        than :data:`DELTA_CHAIN_RTOL` of its upper end go down the chain of
        :meth:`_epsilon_bracket_refined` (the brackets intersected) while it has another level."""
        mu = self._closed_form_mu()
        if mu is not None:
            return gaussian_exact.delta_bounds(mu, flat)
        engine = self._engine()
        curve = delta_queries.delta_curve(engine, flat, self._epsilon_at_zero_delta())
        lo, hi = (np.array(x, dtype=float) for x in curve)
        tunable = delta_queries.tunable_epsilon(engine)
        with np.errstate(invalid="ignore"):
            miss = (np.abs(flat) < tunable) & (hi > 1e-200) & (hi - lo > DELTA_CHAIN_RTOL * hi)
        refined = None
        if self._h_fixed is None and np.any(miss):
            refined = self._deeper(float(np.min(hi[miss]))) or self._refined()
        if refined is not None:
            try:
                lo2, hi2 = refined._delta_curve(flat[miss])
                lo[miss], hi[miss] = np.maximum(lo[miss], lo2), np.minimum(hi[miss], hi2)
            except _budget.BudgetSpent:
                pass  # (this level's brackets stand; both are certified)
        return lo, hi

    def _tv_upper(self) -> float:
        """Upper bound on delta(0), the composition's total variation (1 if unknown)."""
        def compute() -> float:
            tv = total_variation.composition_tv_upper(self._components)
            return 1.0 if tv is None else tv
        return self._engine().cache.scalar("tv", compute)

    def _closed_form_mu(self) -> float | None:
        """``mu`` when every component is a Gaussian mechanism and closed forms
        are on (:data:`CLOSED_FORMS`), else None: such a composition is one
        Gaussian mechanism (:mod:`pld.engine.gaussian_exact`), and no grid is needed."""
        if not CLOSED_FORMS or self._h_fixed is not None:
            return None
        return gaussian_exact.gaussian_mu(self._components)

    def _epsilon_at_zero_delta(self) -> float:
        """epsilon(0): the smallest epsilon with delta(epsilon) = 0.

        ``delta(eps) = E_P[(1 - e^{eps - L})_+]`` vanishes exactly from the
        largest loss with positive mass on: the sum of the components' largest
        losses (``inf`` with a mass at +inf or an unbounded loss), rounded up.
        """
        engine = self._engine()
        return engine.cache.scalar("eps_at_zero", lambda: max(
            0.0, *(engine.laws.largest_loss(d) for d in engine.directions)))


#: a missed epsilon bracket goes on from its components' deeper tails (:meth:`PLD._deeper`)
#: where their mass at +inf, summed over the composition, reaches this share of delta
DEEPER_TAIL_SHARE = 1e-3
#: a construction's bracket this many times as wide as the chain's so far (improving neither end)
#: ends its family's part of the chain (:meth:`PLD._epsilon_bracket_refined`) ...
FUTILE_WIDTH = 20.0
#: ... as does a family's narrowest of two or more brackets this many times another family's (a
#: grid's spacing halved narrowed the split's by 0-50%, the geometric grid's 2-5x, on seeded settings)
OUTCLASSED_WIDTH = 2.0
#: a delta bracket wider than this share of its upper end goes down the same chain
#: (:meth:`PLD._delta_curve`; the epsilon target is worth ~1e-3 of delta where delta is steep)
DELTA_CHAIN_RTOL = 1e-2


def _merge(components: tuple) -> tuple:
    """Add up counts of equal mechanisms, keeping first-seen order."""
    counts: Counter = Counter()
    order = []
    for m, k in components:
        if m not in counts:
            order.append(m)
        counts[m] += k
    return tuple((m, counts[m]) for m in order)


register_pld_type(PLD)
