"""The planner: which grid answers a query, and how fine it must be.

A query (a target delta, or an epsilon) fixes, per direction, a
:class:`Settings`: the grid spacing ``h``, the exponential tilt ``lam`` and the
truncation budget ``log_eta``.  The planner estimates them from the explored
loss laws (:mod:`pld.engine.laws`), then refines: the discretisation bias of both
sides is second order in ``h``, so a bracket ``r`` times too wide from
discretisation is fixed by a spacing ``sqrt(r)`` times finer, and a bracket
kept wide by FFT round-off by a stronger tilt, or by the FFT power in
extended precision (``Settings.precision``; long runs, where one transform's
error is multiplied by the number of steps).  Settings never decide whether
an answer is certified, only how narrow it is: every grid the planner asks
for is certified by the composer and the evaluator.

The tilt follows the Chernoff bound: the optimal ``lam*`` lifts the tail at
the query to the top of the tilted law, where FFT round-off is then smallest
relative to what it must resolve (Gopi, Lee & Wutschitz 2021, section 5;
Koskela et al. 2021).
"""

from __future__ import annotations

import functools
import math

from pld.engine import budget as _budget
from pld.engine import fft as _fft
from pld.engine import windows as w
from pld.engine.cache import EngineCache
from pld.engine.composer import Composer
from pld.engine.laws import Laws
from pld.engine.targets import EPS_ATOL, EPS_RTOL, LogEta, Query, Settings, round_spacing

# -------------------------------------------------------- tuning constants
#: log of the tilted mass allowed outside a truncation window, per truncation:
#: at 1e-16 of the tilted law it is below what its round-off resolves anyway
LOG_ETA_FLOOR = math.log(1e-16)
#: truncated mass is kept this far (in log) below the delta at stake, which
#: makes its widening of the bracket invisible (e^-18 ~ 1.5e-8)
LOG_ETA_BELOW_DELTA = 18.0
#: bracket width per unit of (d eps / d var) * (variance the spread adds):
#: the largest ratio measured on the peer configurations (widths are second order)
WIDTH_PER_BIAS = 2.2
#: fraction of the width target the first grid aims at: a first grid too
#: fine wastes time, one too coarse costs a second materialisation
WIDTH_AIM = 0.7
#: first tilt as a fraction of the Chernoff tilt: a tilted law centred a little
#: below epsilon keeps the lower window short; raised when round-off binds
TILT_FRACTION = 0.7
#: the round-off model behind the first tilt was measured up to T = 1e6; it is
#: trusted to 1e7 and not used beyond (a Gaussian composed 1e9 times has more
#: round-off at the stronger tilt it would pick)
TILT_MODEL_STEPS = 10**7
#: a run longer than this may start in extended precision (``_extend``,
#: :meth:`Planner._extended_first`): shorter runs usually meet their target in
#: double, where the long double transform costs more than it saves
EXTENDED_FIRST_STEPS = 5 * 10**7
#: ... when the round-off model of :meth:`Planner.initial_tilt` (without its
#: factor 5) predicts at least this share of the target: beyond the steps it
#: was fitted on it falls short of the round-off, so a small predicted share
#: already means a large one, and where the round-off is a large part of the
#: first double grid's width that grid would only be built to be redone
EXTENDED_FIRST_SHARE = 0.08
#: a direction that should not bind is first tried on a grid this much coarser
#: (the bias grows like h^2: 16x the bias, a fraction of the cost)
PROBE_COARSENING = 4.0
#: grids above this size stop refining once a 3x finer spacing gains < 25% (the rest is not discretisation)
FUTILE_POINTS = 1 << 15
#: ... and (double precision) once two pairs of grids in a row leave this many targets at h = 0
#: (at 1-2.5, cut refinements had lifted lower ends the refined model's bracket kept), or each
#: take off under FLAT_GAIN of a width above FLAT_FLOOR targets (a flat curve: the model's bias)
FUTILE_FLOOR, FLAT_GAIN, FLAT_FLOOR = 3.0, 0.05, 2.4
#: largest tilt times grid spacing on a fixed (user-given) grid: beyond a few
#: dozen per cell a tilt only pushes the grid's low end out of the float range
MAX_TILT_PER_CELL = 30.0
#: where the big-jump terms can take over (``stop_above``), a grid above this
#: many points whose width is mostly round-off is not refined further
TERMS_ROUND_OFF_POINTS = 1 << 17
_DEBUG = False


def _width_floor(h1: float, w1: float, h2: float, w2: float) -> float:
    """The width left at ``h = 0`` by a line through ``(h1, w1)`` and ``(h2,
    w2)`` (``h2 < h1``), ``-inf`` when the finer grid was no narrower.

    A width ``a + b h^k`` with ``k >= 1`` has ``a`` at least this (the line
    is the most hopeful extrapolation of such a curve)."""
    if not w2 < w1:
        return -math.inf
    return w2 - (w1 - w2) * h2 / (h1 - h2)


class Planner:
    """Settings for the queries of one composition (one per PLD)."""

    def __init__(self, laws: Laws, composer: Composer, cache: EngineCache, h_fixed: float | None) -> None:
        self.laws = laws
        self.composer = composer
        self.cache = cache
        self.h_fixed = h_fixed

    @functools.cached_property
    def model_refines(self) -> bool:
        """Whether a component has a finer model (``refined()``): a missed epsilon bracket builds it."""
        return any(getattr(m, "refined", lambda: None)() is not None for m, _ in self.laws.components)

    # ------------------------------------------------------------ tilts
    def chernoff(self, direction: str, delta: float) -> tuple[float, float]:
        """``(lam*, Chernoff epsilon estimate)`` of one direction at ``delta`` (cached)."""
        key = (direction, delta)
        hit = self.cache.get(self.cache.chernoff, key)
        if hit is None:
            sizing = self.laws.sizing(direction, self.log_eta(direction, Query("delta", delta)))
            hit = w.tilt_for_delta(sizing, delta)
            self.cache.put(self.cache.chernoff, key, hit)
        return hit

    def tilt_star(self, direction: str, query: Query) -> float:
        if query.kind == "delta":
            lam, cap = self.chernoff(direction, query.value)[0], self.near_one_tilt_cap(direction, query)
            return lam if lam <= cap else cap
        return w.tilt_for_epsilon(self.laws.exploration(direction), query.value)

    def near_one_tilt_cap(self, direction: str, query: Query) -> float:
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
        delta = query.value
        comp = self.laws.exploration(direction)
        m, sd = comp.mean_sd()
        lo, hi = comp.support()
        span = min(max(hi - lo, 1e-300), 2.0 * abs(m) + 80.0 * sd + 1.0)
        need = 0.05 * (query.rtol * abs(m) + EPS_ATOL) * (1.0 - delta) / delta
        cap = max(need / (8.0 * 2.0 ** -53 * span), 0.0)
        # where the cap binds, the tilt no longer serves the tail at delta
        # (bounded losses, delta near 1): keep it weak enough that no mass in
        # the window leaves the floating-point range either, which the
        # dominating side would have to send to +inf
        return cap if self.chernoff(direction, delta)[0] <= cap else min(cap, 600.0 / span)

    def initial_tilt(self, direction: str, query: Query, lam_star: float) -> float:
        """First tilt: ``TILT_FRACTION`` of the Chernoff tilt, raised towards it
        when FFT round-off is predicted to take a real share of the target.

        A weaker tilt keeps the tilted law narrow (fewer points), but the
        round-off, relative to the tilted law, then reaches delta magnified by
        ``e^X``, ``X = Psi_T(lam) - lam eps - log delta`` (the Chernoff ratio at
        ``lam``).  Measured over 14 settings (T = 1e4 .. 1e6, delta = 1e-3 ..
        1e-12), the round-off part of the bracket is ``e^X T 10^-12.5 / lam*``
        within a factor 5; it is predicted with that factor at the
        saddle-point estimate of epsilon (:func:`pld.engine.windows.saddle_epsilon`,
        within ~1% for DP-SGD; the Chernoff estimate overstates epsilon by
        15-50%, which would understate ``X`` by ``lam`` times that).
        Sizing only: the refinement still measures the bracket.
        """
        lam = w.quantize_tilt(TILT_FRACTION * lam_star)
        comp = self.laws.sizing(direction, self.log_eta(direction, query))
        if query.kind != "delta" or not lam_star > 0 or comp.steps() > TILT_MODEL_STEPS:
            return lam
        delta = query.value
        top = w.quantize_tilt(lam_star)
        scale = math.log(5.0 * comp.steps() * 10.0 ** -12.5 / lam_star)

        def too_rough(lam: float, eps: float) -> bool:
            x = float(comp.psi(lam)[0]) - lam * eps - math.log(delta)
            return x + scale > math.log(0.25 * (query.rtol * eps + EPS_ATOL))

        # cheap first: at half the Chernoff estimate the prediction errs far
        # high; only a query it flags pays for the saddle point
        eps_guess = 0.5 * self.chernoff(direction, delta)[1]
        if lam >= top or not (eps_guess > 0 and math.isfinite(eps_guess)) or not too_rough(lam, eps_guess):
            return lam
        eps_sp = w.saddle_epsilon(comp, delta)
        eps_guess = eps_sp if eps_sp is not None and eps_sp > 0 else 1.5 * eps_guess
        while lam < top and too_rough(lam, eps_guess):
            lam = w.quantize_tilt(1.25 * lam)
        return lam

    def _extended_first(self, direction: str, query: Query, lam: float, lam_star: float) -> bool:
        """Whether a long run's first grid should use the FFT power in
        extended precision (sizing only, as the tilt: see :meth:`initial_tilt`
        for the round-off model and ``EXTENDED_FIRST_SHARE``)."""
        comp = self.laws.sizing(direction, self.log_eta(direction, query))
        if (query.kind != "delta" or comp.steps() <= EXTENDED_FIRST_STEPS or not lam_star > 0
                or not _fft.extended_available()):
            return False
        eps = w.saddle_epsilon(comp, query.value)
        if eps is None or not (eps > 0 and math.isfinite(eps)):
            return False
        x = float(comp.psi(lam)[0]) - lam * eps - math.log(query.value)
        log_share = (x + math.log(comp.steps() * 10.0 ** -12.5 / lam_star)
                     - math.log(query.rtol * eps + EPS_ATOL))
        return log_share > math.log(EXTENDED_FIRST_SHARE)

    # ---------------------------------------------------------- budgets
    def log_eta(self, direction: str, query: Query) -> LogEta:
        """Mass allowed outside each truncation window, relative to the query.

        Truncated mass lands on the safe side but widens the bracket; keeping
        it ``e^-LOG_ETA_BELOW_DELTA`` below the delta at stake makes that
        invisible.  The tilted mass below is floored at ``LOG_ETA_FLOOR`` (the
        tilted law's round-off); the untilted mass above only moves delta by
        itself, so only the delta at stake matters.  Quantised (steps of 5)
        so that nearby queries share materialisations.
        """
        if query.kind == "delta":
            log_delta = math.log(query.value)
        else:
            comp = self.laws.exploration(direction)
            lam = w.tilt_for_epsilon(comp, query.value)
            log_delta = float(comp.psi(lam)[0]) - lam * query.value
            if query.atol > 0.0:
                # (what is truncated need only stay below the width asked)
                log_delta = max(log_delta, math.log(query.atol))
            if query.delta_floor > 0.0:
                # (with e^5 of room: where the Chernoff estimate is only a
                # little above it, the old budget is kept, windows as wide)
                log_delta = min(log_delta, math.log(query.delta_floor) + 5.0)
        if not math.isfinite(log_delta):
            return LogEta(LOG_ETA_FLOOR, LOG_ETA_FLOOR)
        below = min(LOG_ETA_FLOOR, log_delta - LOG_ETA_BELOW_DELTA)
        above = min(-LOG_ETA_BELOW_DELTA, log_delta - LOG_ETA_BELOW_DELTA)
        return LogEta(5.0 * math.floor(below / 5.0), 5.0 * math.floor(above / 5.0))

    # --------------------------------------------------------- spacings
    def align(self, direction: str, h: float) -> float:
        """Snap ``h`` to ``u / k`` when every loss is a multiple of a quantum ``u``.

        ``k`` is rounded up to ``m 2^j`` with ``m`` in 1, 3, 5, 7 (a spacing at
        most 25% finer): levels re-gridded to doubled spacings then keep the
        atoms on grid points for ``j`` doublings, where an odd ``k`` loses them
        at the first (and the dominated side's rounding of atoms between grid
        points is first order in the spacing).
        """
        u = self.laws.exploration(direction).quantum()
        if u is None:
            return h
        k = max(1, math.ceil(u / h - 1e-9))
        j = max(0, k.bit_length() - 3)
        k = -(-k // (1 << j)) << j  # (k / 2^j rounded up: at most 7 << j)
        return u / k

    def initial_spacing(self, direction: str, query: Query) -> float:
        """Spacing whose predicted bias takes ``WIDTH_AIM`` of the target.

        Both discretisations bias the bracket by about the variance the
        dominating spread adds (the dominated side's centred merge removes a
        little less): width ~ ``WIDTH_PER_BIAS * sens * added_variance(h)``,
        ``sens`` = d eps / d variance for a Gaussian-like composed loss.
        ``added_variance`` grows like ``h^2`` (exactly so for continuous laws),
        so a few fixed-point steps settle ``h``.  Delta queries aim lower:
        their target is converted from epsilon through the Chernoff slope.
        """
        comp = self.laws.exploration(direction)
        quantum = comp.quantum()
        if comp.all_atoms and quantum is not None:
            # atoms on grid points: both discretisations are exact at h = u
            return quantum
        m, sd = comp.mean_sd()
        sd = max(sd, 1e-12)
        if query.kind == "delta":
            z = math.sqrt(2 * max(1.0, -math.log(query.value)))
            eps_est = max(0.0, m + z * sd)
        else:
            eps_est = abs(query.value)
            z = max(1.0, (eps_est - m) / sd)
        target = query.rtol * max(eps_est, 1e-3) + EPS_ATOL
        sens = 0.5 + z / (2 * sd)
        aim = WIDTH_AIM if query.kind == "delta" else 0.5 * WIDTH_AIM
        goal = aim * target / (WIDTH_PER_BIAS * sens)
        h = sd / 4
        for _ in range(4):
            av = comp.added_variance(h)
            if av <= 0.0:
                break
            h = min(sd / 4, h * math.sqrt(goal / av))
        # Never finer than a spacing whose worst case, a whole spacing of bias per step
        # on either side, costs a quarter of the target over all the steps: a near-atom
        # (a law whose spread is e^-5000) would ask for a spacing far below what resolves it.
        floor = 0.25 * (min(query.rtol, EPS_RTOL) * max(eps_est, 1e-3) + EPS_ATOL) / max(comp.steps(), 1)
        h = max(h, floor)
        return self.align(direction, round_spacing(h))

    def first_spacing(self, direction: str, query: Query, lam: float, log_eta: LogEta) -> float:
        """The variance model's spacing, coarsened to the memory cap (cached:
        a query asks for it up to three times, probes and threads included)."""
        key = ("first_spacing", direction, query, lam, log_eta)
        hit = self.cache.get(self.cache.spacings, key)
        if hit is None:
            h = self.initial_spacing(direction, query)
            while self.composer.grid_points(direction, h, lam, log_eta) > self.composer.max_points:
                h = round_spacing(h * 2.0)
            hit = (h,)
            self.cache.put(self.cache.spacings, key, hit)
        return hit[0]

    def _spacing_key(self, direction: str, query: Query, lam_star: float, log_eta: LogEta) -> tuple:
        return (direction, w.quantize_tilt(lam_star), log_eta, query.rtol, query.atol, query.delta_floor)

    def first_settings(self, direction: str, query: Query) -> Settings | None:
        """Settings :meth:`settings` starts from, or None when it would start
        from a remembered or fixed spacing."""
        if self.h_fixed is not None:
            return None
        lam_star = self.tilt_star(direction, query)
        log_eta = self.log_eta(direction, query)
        if self.cache.get(self.cache.spacings, self._spacing_key(direction, query, lam_star, log_eta)):
            return None
        return self.first_estimate(direction, query)

    def first_estimate(self, direction: str, query: Query) -> Settings:
        """The settings :meth:`settings` would start from with nothing
        remembered (the variance model's spacing, the first tilt)."""
        lam_star = self.tilt_star(direction, query)
        log_eta = self.log_eta(direction, query)
        lam = self.initial_tilt(direction, query, lam_star)
        return Settings(self.first_spacing(direction, query, lam, log_eta), lam, log_eta)

    def met_target(self, direction: str, query: Query) -> bool | None:
        """Whether refining for ``query`` met its target (None: not refined yet)."""
        lam_star = self.tilt_star(direction, query)
        memo = self.cache.get(self.cache.spacings,
                              self._spacing_key(direction, query, lam_star, self.log_eta(direction, query)))
        return None if memo is None else len(memo) == 4

    def predicted_points(self, direction: str, query: Query) -> int:
        """Size of the first grid :meth:`settings` would materialise for
        ``query`` (a remembered spacing, or the first estimate), without
        materialising anything."""
        lam_star = self.tilt_star(direction, query)
        log_eta = self.log_eta(direction, query)
        memo = self.cache.get(self.cache.spacings, self._spacing_key(direction, query, lam_star, log_eta))
        if memo is not None:
            h, lam, log_eta = memo[0], memo[1], memo[3]
        else:
            h, lam = self.first_estimate(direction, query)[:2]
        return self.composer.grid_points(direction, h, lam, log_eta)

    def probe_settings(self, direction: str, query: Query) -> Settings | None:
        """Settings of the coarse grid that first tries a direction which
        should not bind, or None (a remembered spacing, a fixed one, or a
        probe grid above the memory cap)."""
        if self.h_fixed is not None:
            return None
        lam_star = self.tilt_star(direction, query)
        lam = self.initial_tilt(direction, query, lam_star)
        log_eta = self.log_eta(direction, query)
        if self.cache.get(self.cache.spacings, self._spacing_key(direction, query, lam_star, log_eta)):
            return None
        h = self.first_spacing(direction, query, lam, log_eta)
        h_probe = self.align(direction, round_spacing(h * PROBE_COARSENING))
        if self.composer.grid_points(direction, h_probe, lam, log_eta) > self.composer.max_points:
            return None
        return Settings(h_probe, lam, log_eta)

    # -------------------------------------------------------- refinement
    def settings(self, direction: str, query: Query, floor: float = -math.inf,
                 probe: Settings | None = None, start: Settings | None = None,
                 fresh: bool = False, stop_above: int | None = None, first_cap: int | None = None) -> Settings:
        """Grid spacing and tilt for a query: estimate, then refine until narrow.

        ``floor``: the bracket's lower end found so far in other directions; a
        direction whose upper end stays below it cannot move the answer and
        needs no refining.  ``start``: settings already materialised for the
        same query at a looser target (refining then starts from their
        measured width instead of the variance model's first spacing, which
        for a cut law can be 10x too fine).  Settings are remembered per
        direction and tilt bucket, so later queries nearby cost one cached
        evaluation; ``fresh`` refines anew even so (from ``start``, or from
        the first estimate).  ``stop_above``: refining stops short of its
        target rather than build a grid above this many points (the caller
        has another way on: the big-jump terms).  ``first_cap``: the first
        grid, too, is coarsened to at most this many points (a pass that only
        tunes something else, such as the big-jump terms, and whose first grid
        would take seconds).
        """
        lam_star = self.tilt_star(direction, query)
        log_eta = self.log_eta(direction, query)
        if self.h_fixed is not None:
            lam = self.initial_tilt(direction, query, lam_star)
            return Settings(self.h_fixed, min(lam, w.quantize_tilt(MAX_TILT_PER_CELL / self.h_fixed)), log_eta)
        key = self._spacing_key(direction, query, lam_star, log_eta)
        memo = None if fresh else self.cache.get(self.cache.spacings, key)
        precision = "double"
        if memo is not None:
            h, lam, precision, log_eta = memo[:4]
            if len(memo) > 4:
                # refining already ended short of the target here: asking
                # again would only repeat that work
                return Settings(h, lam, log_eta, precision)
        elif start is not None:
            # (the tighter of the two budgets: a start's may have been tightened)
            h, lam, precision = start.h, start.lam, start.precision
            log_eta = LogEta(min(start.log_eta.below, log_eta.below), min(start.log_eta.above, log_eta.above))
        else:
            early = self._below_floor(direction, query, floor, probe, lam_star, log_eta)
            if isinstance(early, Settings):
                return early
            h, lam = early
            if self._extended_first(direction, query, lam, lam_star):
                precision = "extended"
            if first_cap is not None:
                while self.composer.grid_points(direction, h, lam, log_eta) > first_cap:
                    h = self.align(direction, round_spacing(2.0 * h))
        met, found = self._refine(direction, query, Settings(h, lam, log_eta, precision), lam_star, floor,
                                  stop_above)
        if _budget.ran_out() is None and (memo is None or found.h < memo[0] or found.precision != memo[2]
                                          or found.log_eta != memo[3]):
            # (a refinement the time budget stopped is not remembered: the next
            # query refines again under its own budget)
            # (a fifth entry marks settings that could not meet the target)
            entry = (found.h, found.lam, found.precision, found.log_eta)
            self.cache.put(self.cache.spacings, key, entry if met else (*entry, "short"))
        return found

    def _below_floor(self, direction: str, query: Query, floor: float, probe: Settings | None,
                     lam_star: float, log_eta: LogEta) -> Settings | tuple[float, float]:
        """Settings that already show the direction below ``floor``, or the
        first ``(h, lam)`` to refine from."""
        if probe is not None and floor > 0 and query.kind == "delta":
            # a direction that does not bind needs only a bracket below the
            # floor: the probe grid (PROBE_COARSENING times coarser) settles
            # that at a fraction of the cost
            try:
                pess, _ = self.composer.materialize(direction, *probe, lower=False)
            except (FloatingPointError, _budget.BudgetSpent):  # (the first grid decides instead)
                pess = None
            if pess is not None and pess.epsilon(query.value) <= floor:
                return probe
        lam = self.initial_tilt(direction, query, lam_star)
        h = self.first_spacing(direction, query, lam, log_eta)
        if floor > 0 and query.kind == "delta":
            # the same test on the first grid itself: a direction close to
            # the leader whose upper end still stays below the floor needs no
            # dominated side at all
            try:
                pess, _ = self.composer.materialize(direction, h, lam, log_eta, lower=False)
            except (FloatingPointError, _budget.BudgetSpent):
                return h, lam  # (the refinement weakens the tilt, or coarsens the grid)
            if pess.epsilon(query.value) <= floor:
                return Settings(h, lam, log_eta)
        return h, lam

    def _refine(self, direction: str, query: Query, start: Settings, lam_star: float,
                floor: float, stop_above: int | None = None) -> tuple[bool, Settings]:
        """Refine ``start`` until the bracket meets its target or stops
        narrowing; ``(target met, settings)`` of the narrowest bracket seen.
        No grid above ``stop_above`` points is built after the first."""
        points = self.composer.grid_points
        h, lam, log_eta, precision = start
        best = (math.inf, start)
        stalled = 0
        weakened = False
        prev = None
        last_target = math.inf
        # atoms between grid points make the dominated side's error first order
        # and erratic in h: give such compositions more tries
        tries, patience = (12, 5) if self.laws.exploration(direction).all_atoms else (8, 3)
        futile_seen = 0
        weakened_for_mass = 0
        seen = False
        for _ in range(tries):
            if seen and _budget.spent():
                break  # (the narrowest bracket so far stands: certified, said as a miss)
            while points(direction, h, lam, log_eta) > self.composer.max_points:
                h = self.align(direction, round_spacing(2.0 * h))  # a new tilt can widen the grid
            if stop_above is not None and prev is not None and points(direction, h, lam, log_eta) > stop_above:
                break  # (the caller has a cheaper way on from here)
            try:
                width, target, value, err_part = self.width(direction, query, h, lam, log_eta, precision)
            except _budget.BudgetSpent:
                # the hard time limit passed while this grid was built: keep the narrowest
                # bracket so far, or (none yet) try a grid 8x coarser (every direction must answer)
                if seen or not _budget.grace():
                    if seen:
                        break
                    raise
                h = self.align(direction, round_spacing(8.0 * h))
                continue
            except FloatingPointError:
                # every mass of a level fell outside its window: a tilt so strong (a heavy
                # tail's Chernoff tilt at a tiny delta) that the tilted law underflows where
                # the windows are drawn; a weaker one, a few times
                if weakened_for_mass < 3 and lam > 1e-3:
                    lam, weakened_for_mass = w.quantize_tilt(lam / 8.0), weakened_for_mass + 1
                    continue
                raise
            last_target = target
            if width < best[0] or not seen:
                # (the first grid built is kept even with an infinite width: the start may not build)
                stalled = 0 if width < 0.9 * best[0] else stalled + 1
                best = (width, Settings(h, lam, log_eta, precision))
                seen = True
            else:
                stalled += 1
            if stalled >= patience:
                break  # refining no longer helps (a bias that h does not control)
            if (prev is not None and prev[1] == lam and h <= prev[0] / 3.0 and width > 0.75 * prev[2]
                    and points(direction, h, lam, log_eta) > FUTILE_POINTS):
                break  # a 3x finer spacing took off < 1/4: the rest is not discretisation
            if (prev is not None and prev[1] != lam and prev[0] == h and width > 2.0 * prev[2]
                    and points(direction, h, lam, log_eta) > FUTILE_POINTS):
                # a new tilt on the same big grid doubled the width: the round-off is not the tilt's
                # to fix (heavy tails at small q)
                break
            # What h does not control shows in two grids of one tilt and precision: the
            # discretisation part extrapolated to h = 0 (linearly, the most hopeful of the
            # orders h^1 .. h^2).  Where that misses the target and no grid could take off a
            # quarter of the width, finer grids cost time for nothing: in extended precision,
            # and on big double grids of a model with a finer one (an allocation law's grid:
            # the caller refines it) where the round-off is under a tenth of both widths,
            # twice in a row (a schedule's term at delta 5e-15: one line said 9e-15, the next
            # grid gave 5.3e-15), with FUTILE_FLOOR targets left, on a flat curve above
            # FLAT_FLOOR targets, or wider than the last.  (h < prev: new truncation budget.)
            futile = False
            if prev is not None and prev[1] == lam and prev[3] == precision and h < prev[0]:
                rest = _width_floor(prev[0], prev[2] - prev[4], h, width - err_part) + err_part
                if precision == "extended":
                    futile = rest > target and rest > 0.75 * width
                elif (query.kind == "delta" and self.model_refines  # (an epsilon query)
                        and points(direction, h, lam, log_eta) > FUTILE_POINTS):
                    futile = width > prev[2] or (err_part <= 0.1 * width and prev[4] <= 0.1 * prev[2]
                                                 and ((rest > FUTILE_FLOOR * target and rest > 0.75 * width)
                                                      or (width > FLAT_FLOOR * target
                                                          and width > (1.0 - FLAT_GAIN) * prev[2])))
            futile_seen = futile_seen + 1 if futile else 0
            if futile and precision == "extended":
                break
            prev = (h, lam, width, precision, err_part)
            if _DEBUG:
                print(f"[pld] {direction} h={h:.3g} lam={lam:.3g} {precision} width={width:.3g} "
                      f"round-off part={err_part:.3g} target={target:.3g}")
            # (an infinite value where the losses are bounded is the grid's own mass at +inf: refined)
            if width <= target or value <= floor or not (
                    math.isfinite(value) or math.isfinite(self.laws.largest_loss(direction))):
                break
            tighter = self._tighter_budget(direction, query, h, lam, log_eta, precision, width, value)
            if tighter is not None:
                log_eta = tighter
                continue
            if futile_seen >= 2:
                break  # (a double grid: only once the truncation budget is not what is left)
            if (stop_above is not None and err_part > 0.5 * width
                    and points(direction, h, lam, log_eta) > TERMS_ROUND_OFF_POINTS):
                # round-off of a heavy tail on a big grid: extended precision and stronger
                # tilts cost 2-3 such grids each, and the caller's terms take a bounded core
                break
            extend = self._extend(direction, Settings(h, lam, log_eta), width, target, err_part) \
                if precision == "double" else None
            if extend is not None:
                # (the same grid, or twice as coarse where it holds no power; h refined from
                # there on: the discretisation part is then most of what is left)
                h, precision = extend, "extended"
                continue
            step = self._next_step(direction, h, lam, lam_star, log_eta, width, target, err_part, weakened)
            if step is None:
                break
            h, lam, weakened = step
        width, found = best
        return width <= last_target, found

    def _tighter_budget(self, direction: str, query: Query, h: float, lam: float, log_eta: LogEta,
                        precision: str, width: float, value: float) -> LogEta | None:
        """A truncation budget set from the delta just measured, where the one
        from the Chernoff estimate was too loose to leave the width alone; or None.

        For delta at an epsilon the budget is set from a Chernoff bound on
        delta, ``P(L > eps)``-like, which can be far above delta itself (a
        big-jump term's delta 8e-9 where the bound said 0.1: the mass let go to
        +inf was the whole width at every spacing).  Only a dominating grid whose
        mass at +inf is a real part of the width; the budget only ever tightens
        (the windows widen: truncated mass lands on the safe side either way).
        """
        if query.kind != "epsilon" or not value > 0.0:
            return None
        pess, _ = self.composer.materialize(direction, h, lam, log_eta, precision, lower=False)
        if not pess.inf_mass > 0.1 * width:
            return None
        want = 5.0 * math.floor((math.log(value) - LOG_ETA_BELOW_DELTA) / 5.0)
        if not want < log_eta.above - 2.5:
            return None
        return LogEta(min(log_eta.below, want), want)

    def _extend(self, direction: str, settings: Settings, width: float, target: float,
                err_part: float) -> float | None:
        """The spacing at which to redo ``settings`` (double precision) with the FFT power
        in extended precision (:mod:`pld.engine.power`), before a stronger tilt or a finer
        spacing; None: not at all.

        Where the round-off takes a real part of the width (30%, as for a stronger
        tilt) and alone half the target, a finer grid cannot meet the target, and in
        long runs a tilt seldom can: the power's forward transform, whose error is
        multiplied by the steps it composes, is nearly all of it, and long double cuts
        that by ``2^11``, for 1.5-3x a materialisation.  Where no power was used (a
        first grid too fine for any transform of the allowed length to hold one: the
        levels squared from one step, each adding its double round-off), twice the
        spacing, where it fits.  A fixed spacing is the caller's.
        """
        if not (err_part > 0.3 * width and err_part >= 0.5 * target) or not _fft.extended_available():
            return None
        steps = self.composer.power_steps(direction, *settings)
        if any(k > 1 for k in steps):
            return settings.h
        if steps and self.h_fixed is None and self.laws.exploration(direction).steps() > 4:
            return self.align(direction, round_spacing(2.0 * settings.h))
        return None

    def _next_step(self, direction: str, h: float, lam: float, lam_star: float, log_eta: LogEta,
                   width: float, target: float, err_part: float,
                   weakened: bool) -> tuple[float, float, bool] | None:
        """The next ``(h, lam, weakened)`` to try, or None to stop refining."""
        # (a tilt just below the Chernoff one quantises back to itself: no stronger one)
        lam_new = w.quantize_tilt(min(lam_star, 2.5 * lam)) if lam < lam_star else lam
        if err_part > 0.3 * width and lam_new > lam:
            # a stronger tilt, unless it widens the tilted law too much
            # (heavy tails: the grid would explode for little gain)
            comp = self.laws.sizing(direction, log_eta)
            lo0, hi0 = w.window(comp, lam, log_eta)
            lo1, hi1 = w.window(comp, lam_new, log_eta)
            if hi1 - lo1 <= 4.0 * (hi0 - lo0):
                return h, lam_new, weakened
            if width - err_part <= target:
                return None  # nothing left that a finer grid would fix
        elif err_part > 0.5 * width and lam_new <= lam and lam > 1.0 and not weakened:
            # round-off dominates at the strongest tilt: a bounded loss
            # (randomized response with a small epsilon0) has its Chernoff
            # tilt at the cap, where everything below the top atoms is under
            # round-off; try a much weaker tilt once (the best width found is
            # kept either way)
            return h, w.quantize_tilt(lam / 16.0), True
        if err_part >= target and err_part > 0.5 * width:
            # round-off is most of the width and alone exceeds the target; it
            # does not shrink with h (a finer grid has more points, each with
            # its share of it), so no spacing meets the target.  (A round-off
            # part that is a sliver of the width can vanish with a finer grid:
            # a bracket collapsing onto epsilon = 0 near delta = 1.)
            return None
        # the round-off part does not shrink with h: the discretisation part
        # must fit in what it leaves of the target
        points = self.composer.grid_points
        avail = max(target - err_part, 0.2 * target)
        ratio = math.sqrt(avail / max(width - err_part, 1e-300)) * 0.85
        h_new = self.align(direction, round_spacing(h * min(0.9, max(0.25, ratio))))
        if points(direction, h_new, lam, log_eta) > self.composer.max_points:
            # the finest spacing under the memory cap (points ~ 1/h), if that
            # is still a real refinement
            n = points(direction, h, lam, log_eta)
            h_new = self.align(direction, round_spacing(h * n / self.composer.max_points * 1.02))
            while h_new < 0.95 * h and points(direction, h_new, lam, log_eta) > self.composer.max_points:
                # (x1.3: snapping to a quantum may take back up to 25%)
                h_new = self.align(direction, round_spacing(h_new * 1.3))
            if h_new >= 0.95 * h:
                return None
        return h_new, lam, weakened

    def width(self, direction: str, query: Query, h: float, lam: float, log_eta: LogEta,
              precision: str = "double"):
        """``(width, target, value, round-off part of width)`` of one direction's bracket.

        The round-off part (two more evaluations, on the grids without their
        error terms) only steers a refinement: it is left at 0 when the
        bracket already meets its target.
        """
        val, rtol = query.value, query.rtol
        pess, opt = self.composer.materialize(direction, h, lam, log_eta, precision)
        assert opt is not None
        if query.kind == "delta":
            lo, hi = opt.epsilon(val), pess.epsilon(val)
            # (an infinite upper end is a miss, measured against the lower end: rtol * inf called it met)
            target = rtol * (hi if math.isfinite(hi) or not math.isfinite(lo) else lo) + EPS_ATOL
            part = 0.0
            if hi - lo > target or _DEBUG:
                pz, oz = pess.without_error(), opt.without_error()
                part = max(0.0, hi - pz.epsilon(val)) + max(0.0, oz.epsilon(val) - lo)
            return hi - lo, target, hi, part
        lo, hi = float(opt.delta(val)[0]), float(pess.delta(val)[0])
        # A delta bracket as narrow as the epsilon target implies: what delta
        # itself falls by over one epsilon target, read off the dominating
        # grid (delta is convex in eps, so the step forward is the smaller).
        # Not the Chernoff tilt as a slope: it is 0 below the mean loss, where
        # the true slope can be 1e4.  Never finer than a relative step (slope
        # 1, as where delta is flat near 1 nothing finer is asked of an
        # epsilon either).
        step = rtol * max(val, 0.0) + EPS_ATOL
        fall = hi - float(pess.delta(val + step)[0]) if math.isfinite(val) else 0.0
        target = max(min(0.5 * hi, max(fall, step * hi)), query.atol) + 1e-300
        part = 0.0
        if hi - lo > target or _DEBUG:
            pz, oz = pess.without_error(), opt.without_error()
            part = max(0.0, hi - float(pz.delta(val)[0])) + max(0.0, float(oz.delta(val)[0]) - lo)
        return hi - lo, target, hi, part
