"""Big-jump decomposition: a heavy-tailed composition split by its large steps.

(Poisson-subsampled steps, and the symmetrized pair of sampling without
replacement, whose upper tail is the Poisson pair's: :class:`_CutSymmetrized`.)

Why.  At small sampling rates the remove direction of a subsampled Gaussian
has a narrow core near 0 and an upper tail that is subexponential on the scale
that matters (the loss is ``log(1 + q (e^z - 1))`` with ``z`` normal: about
``q e^z`` below ``log(1/q)``, log-normal).  The engine's exponential tilt
``e^{lam l}`` cannot lift such a tail without the far end of the window taking
all of the tilted mass, so the tilt stays weak, the core keeps the tilted law,
and FFT round-off relative to it swamps a delta of 1e-12 (issue 19: brackets
such as [0.031, 0.095] where the truth is 0.0503).

Decomposition.  Cut every step's P-law at a loss ``a``: the core ``C`` is the
pair restricted to ``L <= a`` (P-mass ``1 - b``), the jump ``J`` the pair
restricted to ``L > a`` (P-mass ``b``).  Which steps fall above ``a`` splits
the law of the ``T``-step sum exactly:

``law(L_1 + ... + L_T) = sum_k C(T, k) C^{*(T-k)} * J^{*k}``,

and ``delta(eps) = E_P[(1 - e^{eps - L})_+]`` is linear in that law, so
``delta = sum_k C(T, k) delta_k`` with ``delta_k`` the same functional of the
term (a sub-probability law).  Terms beyond ``K`` together weigh at most
``P(more than K steps above a) <= C(T, K + 1) b^{K + 1}`` (union bound over
sets of ``K + 1`` steps), and their functional is at most their mass.  This
is the "single big jump" structure of subexponential sums (Foss, Korshunov &
Zachary, *An Introduction to Heavy-Tailed and Subexponential Distributions*,
2013), used here as an exact identity, not an asymptotic.

Each term is a two-component composition (the core ``T - k`` times, the jump
``k`` times, normalised to mass one) which the ordinary engine certifies: the
connect-the-dots spread and the centred merge act cell by cell, so they
dominate (are dominated by) a restricted pair as they do the whole one, and a
pair normalised by one constant on both sides only shifts its loss, so
Blackwell dominance, and with it composition, carries over.  The core is
bounded by ``a``: the engine tilts it as hard as the query needs.  The jump
terms hold their large steps at mass one: they need little tilt.  Upper end:
the sum of the terms' upper bounds plus the tail bound; lower end: the sum of
their lower bounds (leaving terms out only lowers it).  Only the weights
``C(T, k) b^k`` are new arithmetic, bounded with their rounding below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pld.engine import budget as _budget
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.pipeline import Engine
from pld.engine.targets import Query, round_spacing
from pld.mechanisms.models import LossModel
from pld.mechanisms.substitute_models import SymmetrizedSubsampledGaussianModel, SymmetrizedSubsampledNormalBase

#: the cut is placed at this fraction of the epsilon the terms are tuned at:
#: low enough that the core's own tail at epsilon is reached by several
#: steps (it is then light), high enough that few steps jump
CUT_FRACTION = 0.5
#: the terms left out may weigh this fraction of delta (they add to the upper end only)
TAIL_SHARE = 1e-7
#: at most this many jump terms; a cut needing more is raised
MAX_TERMS = 24
#: accuracy of the first pass over the terms (it measures their shares)
COARSE_RTOL = 1e-2
#: a component riding along in the terms is cut (:func:`_cut_others`) at a loss raised until
#: its jumps are negligible when it has at most this many steps; a longer one only at the
#: terms' cut itself, where they already are: a long one's many steps need no strong tilt
#: each, and its law cut far out, held whole on its cut side, made the terms' grids larger
#: (sigma 0.67, q 1.2e-4, 476636 steps beside sigma 0.44, q 8e-6, 1.07e6 steps: 0.60x ->
#: 0.80x the target, 2x slower)
CUT_OTHERS_STEPS = 100
#: the grid cap of a term's engine: a jump law spans from the cut to its far tail (a loss of ~4
#: at sigma 0.5, q 3e-6), and at the spacing the bulk needs the one-jump term's grid passes the
#: general cap; near the sampling rate a term's width is erratic in the spacing (see
#: :func:`_neighbour_spacings`), so the neighbours tried past a stalled refinement need room
#: beyond the spacing it stopped at; only the terms that reach the general cap use it (a
#: few hundred MB at the peak)
TERM_GRID_POINTS = 4 * MAX_GRID_POINTS
#: a post-hoc split (:attr:`Heavy.post_hoc`) is tried where the whole law's bracket is this
#: many times wider than its target
POST_HOC_LOOSE = 10.0
#: relative slack on every weight (rounding of log C(T, k), of k log b and exp)
_WEIGHT_SLACK = 1e-11
_U = 2.0 ** -53


@dataclass(frozen=True)
class _ClippedBase:
    """A continuous base restricted to ``x_lo < x <= x_hi``, both masses scaled by ``e^log_scale``."""

    inner: object
    x_lo: float
    x_hi: float
    log_scale: float = 0.0

    def interval_logmasses(self, xa: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xa = np.clip(np.asarray(xa, float), self.x_lo, self.x_hi)
        xb = np.clip(np.asarray(xb, float), self.x_lo, self.x_hi)
        lp, lq = self.inner.interval_logmasses(xa, xb)  # type: ignore[attr-defined]
        return lp + self.log_scale, lq + self.log_scale

    @property
    def interval_logmasses_with_errors(self):
        """The inner base's error-bounded masses on the clipped cells, plus the
        rounding of adding the scale (an AttributeError, as for a missing
        method, when the inner base does not bound its errors)."""
        inner = getattr(self.inner, "interval_logmasses_with_errors", None)
        if inner is None:
            raise AttributeError("interval_logmasses_with_errors")

        def masses(xa: np.ndarray, xb: np.ndarray):
            xa = np.clip(np.asarray(xa, float), self.x_lo, self.x_hi)
            xb = np.clip(np.asarray(xb, float), self.x_lo, self.x_hi)
            lp, lq, ep, eq = inner(xa, xb)
            lp, lq = lp + self.log_scale, lq + self.log_scale
            with np.errstate(invalid="ignore"):
                return lp, lq, ep + _U * np.abs(lp), eq + _U * np.abs(lq)
        return masses

    def x_range(self) -> tuple[float, float]:
        lo, hi = self.inner.x_range()  # type: ignore[attr-defined]
        return max(lo, self.x_lo), min(hi, self.x_hi)


class _Cut:
    """What the laws cut at a loss share: their support on the cut side is held whole, and
    their range and largest loss end at the cut, a little outside (rounding of the loss <->
    x map must not leave a sliver of mass beyond the window's edge; below: no claim is
    needed, a cut law's largest loss answers no query)."""

    loss_lo: float
    loss_hi: float

    @property
    def bounded_above(self) -> bool:
        """The composer holds all of a cut law's support on its cut side (see
        :func:`pld.engine.first_step._prepare_step`)."""
        return math.isfinite(self.loss_hi)

    @property
    def bounded_below(self) -> bool:
        return math.isfinite(self.loss_lo)

    def _at_cut(self, lo: float, hi: float) -> tuple[float, float]:
        if math.isfinite(self.loss_hi):
            hi = self.loss_hi + 1e-9 * max(1.0, abs(self.loss_hi))
        if math.isfinite(self.loss_lo):
            lo = max(lo, self.loss_lo - 1e-9 * max(1.0, abs(self.loss_lo)))
        return lo, hi

    def _whole_sup_bounds(self) -> tuple[float, float]:
        raise NotImplementedError

    def sup_loss(self) -> float:
        return self.sup_loss_bounds()[1]

    def sup_loss_bounds(self) -> tuple[float, float]:
        if math.isfinite(self.loss_hi):
            return -math.inf, self.loss_hi + 1e-9 * max(1.0, abs(self.loss_hi))
        return self._whole_sup_bounds()


@dataclass(frozen=True)
class _CutModel(_Cut, LossModel):
    """A loss model restricted to losses in ``(loss_lo, loss_hi]``."""

    loss_lo: float = -math.inf
    loss_hi: float = math.inf
    #: log P-mass of the other side of the cut (its scale near the cut)
    cut_log_mass: float = 0.0

    def loss_range(self) -> tuple[float, float]:
        return self._at_cut(*LossModel.loss_range(self))

    def _whole_sup_bounds(self) -> tuple[float, float]:
        return LossModel.sup_loss_bounds(self)


@dataclass(frozen=True)
class _CutSymmetrized(_Cut, SymmetrizedSubsampledGaussianModel):
    """The symmetrized pair of sampling without replacement restricted to base
    coordinates ``x_lo < z <= x_hi`` (losses in ``(loss_lo, loss_hi]``), both
    masses scaled by ``e^log_scale``; the atom at loss 0 kept where it lies inside.

    Above a cut ``a >= 0`` the pair is the Poisson-subsampled pair ``(A, Q)`` on
    ``z > x(a)``, the tail that makes small sampling rates hard; the identity of
    the module docstring holds for any pair, so the symmetrized one splits as
    the Poisson one does (its mirror image and its atom stay in the core).
    """

    x_lo: float = -math.inf
    x_hi: float = math.inf
    log_scale: float = 0.0
    loss_lo: float = -math.inf
    loss_hi: float = math.inf
    cut_log_mass: float = 0.0

    @property
    def base(self) -> _ClippedBase:  # type: ignore[override]
        return _ClippedBase(SymmetrizedSubsampledNormalBase(self.mu, self.sampling_rate), self.x_lo, self.x_hi,
                            self.log_scale)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        loss, lp, lq = SymmetrizedSubsampledGaussianModel.atoms(self)
        keep = (loss > self.loss_lo) & (loss <= self.loss_hi)
        return loss[keep], lp[keep] + self.log_scale, lq[keep] + self.log_scale

    def loss_range(self) -> tuple[float, float]:
        # (the loss is increasing in z: the clipped coordinate's ends; the atom at 0 where kept)
        lo, hi = self._at_cut(*(float(v) for v in self.loss_of_x(np.array(self.base.x_range()))))
        if self.loss_lo < 0.0 <= self.loss_hi and math.isfinite(self.zero_log_mass()):
            lo, hi = min(lo, 0.0), max(hi, 0.0)
        return lo, hi

    def _whole_sup_bounds(self) -> tuple[float, float]:
        return math.inf, math.inf


#: a law cut at a loss
CutLaw = _CutModel | _CutSymmetrized


class _Part:
    """What the engine asks of a component, for one cut law (remove direction only)."""

    symmetric = True

    def __init__(self, model: LossModel | CutLaw) -> None:
        self.model = model

    def loss_model(self, direction: str) -> LossModel | CutLaw:
        return self.model


@dataclass(frozen=True, eq=False)
class Heavy:
    """The component a decomposition splits, and the rest of the composition.

    ``model``: its remove direction's loss model (Poisson-subsampled, a
    continuous base, no atoms), composed ``steps`` times; ``others``: every
    other component's remove model with its count, composed into every term
    (the identity of the module docstring holds with an independent
    remainder added to each term: a schedule's short phases ride along; see
    :func:`_cut_others` for how they are bounded).
    """

    model: LossModel
    steps: int
    others: tuple = ()

    @property
    def sampling_rate(self) -> float:
        return self.model.sampling_rate

    @property
    def post_hoc(self) -> bool:
        """Whether the terms only narrow a bracket the whole law's grids, refined to
        their end (the terms do not cap them), left ``POST_HOC_LOOSE`` times wider
        than its target: the symmetrized pair of sampling without replacement.

        Its core keeps the mirror image of the tail cut off above (a lower tail as
        heavy), so a term's grids are larger than a Poisson core's: where the whole
        law was near its target they cost 10-30 s and bought a few tenths of a
        percent (sigma 0.77, q 4.4e-6, T 6.1e7); where it was far off they are what
        resolves the upper end (sigma 1.458, q 5.75e-5, T 176924, delta 2.8e-10:
        [0.425, 0.792] -> [0.63904, 0.63906])."""
        return isinstance(self.model, SymmetrizedSubsampledGaussianModel)


def _splittable(mech) -> LossModel | None:
    try:
        model = mech.loss_model("remove")
    except Exception:  # (a mechanism without that direction)
        return None
    return model if _cuttable(model) else None


def _cuttable(model) -> bool:
    """A Poisson-subsampled remove model with a continuous base and no atoms, or the
    symmetrized pair of sampling without replacement (:class:`_CutSymmetrized`)."""
    if type(model) is SymmetrizedSubsampledGaussianModel:
        return model.sampling_rate < 1.0
    return (type(model) is LossModel and model.base is not None and model.sampling_rate < 1.0
            and np.size(model.atom_x) == 0)


def applicable(components: tuple) -> Heavy | None:
    """What the decomposition splits, when it applies: a Poisson-subsampled
    component with a continuous base and no atoms (of several, the one with
    the most steps, then the smallest sampling rate: the heaviest tail
    composed the most often), the others kept whole in every term."""
    found = [(k, model, i) for i, (mech, k) in enumerate(components)
             if (model := _splittable(mech)) is not None]
    if not found:
        return None
    k, model, i = max(found, key=lambda f: (f[0], -f[1].sampling_rate))
    try:
        others = tuple((mech.loss_model("remove"), c) for j, (mech, c) in enumerate(components) if j != i)
    except Exception:  # (a part without a remove direction of its own)
        return None
    return Heavy(model, k, others)


def split(model: LossModel | SymmetrizedSubsampledGaussianModel,
          cut: float) -> tuple[CutLaw, CutLaw, float]:
    """``(core, jump, log b)``: the pair below and above loss ``cut``; the jump
    scaled to P-mass one, ``b`` its P-mass (as scaled: the weights use this
    very number, so its rounding cancels)."""
    xa = float(model.x_of_loss(np.array([cut]))[0])
    lp, lq = model.base.interval_logmasses(np.array([xa]), np.array([math.inf]))  # type: ignore[union-attr]
    lp, _ = model.pair_masses(lp, lq)
    log_b = float(lp[0])
    def cut_model(x_lo: float, x_hi: float, log_scale: float, **bounds: float):
        if isinstance(model, SymmetrizedSubsampledGaussianModel):
            if cut < 0.0:
                raise ValueError(f"the symmetrized pair is cut at a loss >= 0, got {cut!r}")
            return _CutSymmetrized(model.mu, model.sampling_rate, x_lo=x_lo, x_hi=x_hi, log_scale=log_scale,
                                   **bounds)  # type: ignore[arg-type]
        return _CutModel(model.atom_x, model.atom_log_p, model.atom_log_q,
                         _ClippedBase(model.base, x_lo, x_hi, log_scale),  # type: ignore[arg-type]
                         model.sampling_rate, model.direction, **bounds)

    core = cut_model(-math.inf, xa, 0.0, loss_hi=cut, cut_log_mass=log_b)
    jump = cut_model(xa, math.inf, -log_b, loss_lo=cut)
    return core, jump, log_b


def _heaviest_at(heavy: Heavy, cut: float, delta: float) -> Heavy:
    """``heavy``, or where its split part has no jump worth a term at ``cut``
    (``c b`` below ``TAIL_SHARE * delta``) and a cuttable part riding along
    has, that part split instead (of several, the one with the most, ``c b``;
    the old one then rides along, cut at ``cut``: its jumps there are negligible).

    :func:`applicable` picks by step count, which the query's cut does not
    enter: of a schedule's sigma 0.695, q 8.1e-5, 70709 steps and sigma
    1.801, q 7.9e-4, 127076 steps at delta 6e-11, it split the second (no
    step of it above the cut at 0.68: one term) while the first, 1.9e-8
    jumps expected there, rode along whole and held the terms' tilt down
    (7.5x the target); a warm-up step can be the part that jumps (sigma 2.506,
    q 0.0098, 1 step beside 110 steps at q 7.5e-4: 1.22x -> 0.49x).  The
    identity holds whichever part is split.  A split part with jumps of its
    own is kept: moving the split to a heavier long part left the first whole,
    as wide.
    """
    def log_jumps(m, c) -> float:
        return math.log(c) + split(m, cut)[2]

    floor = math.log(TAIL_SHARE * delta)
    if log_jumps(heavy.model, heavy.steps) >= floor:
        return heavy
    cands = [(log_jumps(m, c), i) for i, (m, c) in enumerate(heavy.others) if _cuttable(m)]
    if not cands:
        return heavy
    best, i = max(cands)
    if not best >= floor:
        return heavy
    m, c = heavy.others[i]
    return Heavy(m, c, heavy.others[:i] + ((heavy.model, heavy.steps),) + heavy.others[i + 1:])


def _cut_others(others: tuple, cut: float, log_share: float) -> tuple[tuple, float]:
    """``(others, tail)``: each cuttable component of ``others`` replaced by its
    core at a loss ``>= cut`` where its ``c`` steps' jumps weigh at most
    ``e^log_share`` together (``c b``, the union bound), and an upper bound
    ``tail`` on the weight so left out.

    Whole, a component riding along keeps its tail in every term, and that
    tail caps the tilt a term can take: a schedule's short phase (sigma 2.07,
    q 1.1e-4, 3 steps beside sigma 0.84, q 3.4e-6, 74000 steps, at delta
    2e-9) held the terms' tilt at 69 where the core alone takes 1580, and
    the FFT round-off relative to the weakly tilted law was 50x the target.
    Cut, every part of a term is bounded above.  The event that some step of
    a cut component lands above its cut is left out of every term: the lower
    end, a sum over the other events, only falls; the upper end adds the
    event's P-mass, at least its share of ``delta = E_P[(1 - e^{eps - L})_+]``.
    """
    kept, tail = [], 0.0
    for m, c in others:
        if not _cuttable(m):
            kept.append((m, c))
            continue
        a, chosen = cut, None
        # (a long part only at the cut itself, where its jumps are negligible)
        for _ in range(64 if c <= CUT_OTHERS_STEPS else 1):
            core, _, log_b = split(m, a)
            if not math.isfinite(log_b):
                break  # (nothing above: the law is bounded there already)
            if math.log(c) + log_b + 1e-9 <= log_share:
                chosen = (core, log_b)
                break
            a *= 1.5
        if chosen is None:
            kept.append((m, c))
            continue
        kept.append((chosen[0], c))
        tail += c * math.exp(chosen[1]) * (1.0 + 1e-9)
    return tuple(kept), tail


def _log_binomial(n: int, k: int) -> float:
    """``log C(n, k)`` as a sum of ``k`` logs (exact to ``~3 k`` ulps of its terms)."""
    return float(sum(math.log((n - i) / (i + 1)) for i in range(k)))


@dataclass(frozen=True, eq=False)
class Terms:
    """The grids of every term at one cut, tuned at one epsilon."""

    cut: float
    log_b: float
    #: (log weight, dominating grid, dominated grid) per term k = 0..K
    grids: tuple
    #: upper bound on the weight of the terms left out
    tail: float
    #: per term, the engine and the settings of its final grids (a later
    #: build at the same cut refines from them instead of starting over)
    engines: tuple = ()
    settings: tuple = ()

    def delta_bounds(self, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eps = np.atleast_1d(np.asarray(eps, float))
        lo = np.zeros(eps.shape)
        hi = np.zeros(eps.shape)
        for log_w, pess, opt in self.grids:
            slack = _WEIGHT_SLACK + 8.0 * 2.0 ** -53 * abs(log_w)
            hi += math.exp(log_w + slack) * pess.delta(eps)
            lo += math.exp(log_w - slack) * opt.delta(eps)
        hi = np.minimum((hi + self.tail) * (1.0 + 1e-12), 1.0)
        lo = np.maximum(lo * (1.0 - 1e-12), 0.0)
        return lo, hi


#: spacings tried around a term's refined one when it stays short of its
#: target (relative to that spacing)
NEIGHBOUR_SPACINGS = (1.6, 1.3, 0.8)


def _neighbour_spacings(planner, query, settings):
    """The narrowest of ``settings`` and a few spacings around it.

    A term's dominated side is not smooth in ``h`` at spacings near the
    sampling rate (how far its levels are re-gridded, how many steps one FFT
    power takes: sigma 0.65, q 2e-5, T 6.2e5, the one-jump term's width was
    3.3e-5, 5.7e-6, 4.9e-6, 6.7e-6, 2.0e-5, 1.6e-5 at h = 4.65, 3, 2.5,
    2.12, 1.8, 1.53 e-6), so a refinement that stops at the memory cap may
    stop on a bad spacing; a term's grids cost ~0.1 s, so a few neighbours
    are cheap.  Only which grid is used changes: each is certified.
    """

    best, best_w = settings, planner.width("remove", query, *settings)[0]
    for f in NEIGHBOUR_SPACINGS:
        if _budget.spent():
            break
        h = planner.align("remove", round_spacing(settings.h * f))
        if planner.composer.grid_points("remove", h, settings.lam, settings.log_eta) > planner.composer.max_points:
            continue
        cand = settings._replace(h=h)
        w, target = planner.width("remove", query, *cand)[:2]
        if w < best_w:
            best, best_w = cand, w
        if w <= target:
            break
    return best


def build_terms(heavy: Heavy, delta: float, eps0: float,
                cut: float | None = None, rtol: float = 1e-4, previous: Terms | None = None) -> Terms | None:
    """Every term's grids at the cut ``CUT_FRACTION * eps0`` (or ``cut``), tuned
    at ``eps0`` (None when no cut leaves few enough terms).  The cut is raised
    by half until the terms left out weigh below ``TAIL_SHARE * delta``.

    ``previous``: terms built before for the same model, steps and delta; at
    their cut (the default then) their engines, with every grid they hold,
    are reused and each term is refined from its previous grid.
    """

    if cut is None:
        cut = previous.cut if previous is not None else CUT_FRACTION * eps0
    if previous is not None and previous.cut != cut:
        previous = None
    heavy = _heaviest_at(heavy, cut, delta)
    model, steps = heavy.model, heavy.steps
    for _ in range(8):
        core, jump, log_b = split(model, cut)
        if not math.isfinite(log_b):
            return None  # nothing above the cut: no heavy tail to split off
        # b as scaled is exact for the weights; for the tail bound a true upper bound
        log_b_up = log_b + 1e-9
        k_max = None
        for k in range(MAX_TERMS + 1):
            log_tail = _log_binomial(steps, k + 1) + (k + 1) * log_b_up if k + 1 <= steps else -math.inf
            if log_tail < math.log(TAIL_SHARE * delta) or k + 1 > steps:
                k_max = k
                break
        if k_max is not None:
            break
        cut *= 1.5
    else:
        return None
    if k_max == 0 and heavy.post_hoc:
        # no step jumps: the lone term is the core, whose mirror image keeps as heavy a
        # lower tail as the tail cut off above; its grids took 10-30 s and narrowed
        # nothing the whole law's had not (sigma 2.46, q 3e-6, T 3.1e7)
        return None
    # (the components riding along share the main part's tail budget)
    others, others_tail = _cut_others(heavy.others, cut,
                                      math.log(TAIL_SHARE * delta / max(len(heavy.others), 1)))
    engines, weights = [], []
    for k in range(k_max + 1):
        comps = tuple(c for c in ((_Part(core), steps - k), (_Part(jump), k)) if c[1] > 0) + tuple(
            (_Part(m), c) for m, c in others)
        # (no spacing cap at the sampling rate any more: the dominated side's
        # bulk shift, pld.engine.bulk_shift.bulk_shift, resolves a subsampled step's
        # bulk on coarser grids; sigma 0.33, q 7.7e-6, T 2.6e6 went from 4.8x
        # its target to 1.5x)
        kept = previous.engines if previous is not None else ()
        # (a post-hoc split's terms at the general cap: past it their grids cost 10 s each)
        engines.append(kept[k] if k < len(kept) else Engine.build(
            comps, None, MAX_GRID_POINTS if heavy.post_hoc else TERM_GRID_POINTS))
        weights.append(_log_binomial(steps, k) + k * log_b)

    def grid_pair(k: int, r: float, start=None, atol: float = 0.0) -> tuple:
        # tuned at epsilon itself: each term then resolves its own fall in
        # delta over one epsilon target, and the weighted falls add up to the whole's
        # (truncation held below delta itself, weighted: the terms are read
        # where the sum's delta is delta, wherever eps0 is)
        planner, query = engines[k].planner, Query("epsilon", eps0, r, atol, delta * math.exp(-weights[k]))
        settings = planner.settings("remove", query, start=start)
        if (start is not None and planner.met_target("remove", query) is False
                and planner.first_estimate("remove", query).h < 0.5 * settings.h):
            # refined from a grid coarser than the sampling rate, a term's
            # width can be erratic in h (sigma 0.8, q 2.1e-5, k = 1: 8.7e-6
            # at h = 1.4e-4, 2.1e-4 at 3.6e-5, 1e-8 at 1.5e-5), which stops
            # the refinement early: once more from the planner's own first
            # spacing where that is much finer (the narrower of the two
            # brackets is kept)
            again = planner.settings("remove", query, fresh=True)
            settings = min((settings, again), key=lambda s: planner.width("remove", query, *s)[0])
        if planner.met_target("remove", query) is False:
            settings = _neighbour_spacings(planner, query, settings)
        pess, opt = engines[k].composer.materialize("remove", *settings)
        assert opt is not None
        return (weights[k], pess, opt), settings

    # a coarse pass shows each term's share s_k of delta at eps0; a term
    # given a part w_k of the width needs only a relative accuracy
    # rtol w_k / s_k.  The parts must add up to one (each term's bracket
    # widens the sum by its own width: with w_k = 1 three terms each took the
    # whole target and the sum missed it 1.9x, sigma 0.61, q 2.8e-5, T 1.8e6);
    # w_k ~ sqrt(s_k) leaves a minor term a loose target and costs the
    # leading one only a factor sum_j sqrt(s_j) (<= sqrt(K + 1))
    # (a share needs resolving only against delta itself: a term whose own
    # delta is far below it, the core's at a strict delta, is measured to an
    # absolute COARSE_RTOL delta / weight.  Resolving the core's 1e-55 to 1%
    # took strong tilts, extended precision and 8 s: sigma 1, q 1e-5, T 1e5
    # at delta 1e-30)
    coarse = [grid_pair(k, COARSE_RTOL, atol=COARSE_RTOL * delta * math.exp(-weights[k]))
              for k in range(k_max + 1)]
    share = np.array([math.exp(lw) * float(pe.delta(eps0)[0]) for (lw, pe, _), _ in coarse])
    share = share / max(float(share.sum()), 1e-300)
    part = np.sqrt(share) / max(float(np.sqrt(share).sum()), 1e-300)
    grids, used = [], []
    for k in range(k_max + 1):
        r = rtol * float(part[k]) / max(float(share[k]), 1e-300)
        if r >= COARSE_RTOL or _budget.spent():
            grids.append(coarse[k][0])
            used.append(coarse[k][1])
            continue
        # (refined from the coarse grid's measured width, or from the previous
        # build's grid: the first spacing the planner would guess for a cut
        # law was up to 20x too fine)
        start = coarse[k][1]
        if previous is not None and k < len(previous.settings) and previous.settings[k].h < start.h:
            start = previous.settings[k]
        pair, settings = grid_pair(k, max(r, rtol), start=start)
        grids.append(pair)
        used.append(settings)
    tail = (math.exp(log_tail) * (1.0 + 1e-9) if math.isfinite(log_tail) else 0.0) + others_tail
    return Terms(cut, log_b, tuple(grids), tail, tuple(engines), tuple(used))


def finite_upper(terms: Terms, delta: float, start: float) -> float:
    """An epsilon at which the terms certify ``delta_upper <= delta``, found by
    doubling from ``start`` (``inf`` if none below ~1e12): an upper end for
    :func:`epsilon_bracket` where the whole law's grid gave none."""
    x = max(start, 1e-6)
    for _ in range(60):
        if terms.delta_bounds(np.array([x]))[1][0] <= delta:
            return x
        x *= 2.0
    return math.inf


def epsilon_bracket(terms: Terms, delta: float, lo: float, hi: float) -> tuple[float, float]:
    """A certified bracket on epsilon at ``delta`` inside ``[lo, hi]`` (itself
    certified) from the terms' delta bounds.

    Multisection on a sample of 65 epsilons, eight rounds; the returned ends
    are each *evaluated*: ``delta_upper(upper) <= delta`` and
    ``delta_lower(lower) > delta`` (the true delta is non-increasing in
    epsilon, so these certify the ends without any monotonicity of the bounds).
    """
    new_hi, new_lo = hi, lo
    a, b = lo, hi
    for _ in range(8):
        xs = np.linspace(a, b, 65)
        _, d_hi = terms.delta_bounds(xs)
        ok = np.flatnonzero(d_hi <= delta)
        if not ok.size:
            break
        j = int(ok[0])
        new_hi = min(new_hi, float(xs[j]))
        if j == 0:
            break
        a, b = float(xs[j - 1]), float(xs[j])
    a, b = lo, new_hi
    for _ in range(8):
        xs = np.linspace(a, b, 65)
        d_lo, _ = terms.delta_bounds(xs)
        ok = np.flatnonzero(d_lo > delta)
        if not ok.size:
            break
        j = int(ok[-1])
        new_lo = max(new_lo, float(xs[j]))
        if j == xs.size - 1:
            break
        a, b = float(xs[j]), float(xs[j + 1])
    # the ends as returned, evaluated once more (the multisection's points are
    # the same floats, but a bracket is only ever widened by a failed check)
    if new_hi < hi and not terms.delta_bounds(np.array([new_hi]))[1][0] <= delta:
        new_hi = hi
    if new_lo > lo and not terms.delta_bounds(np.array([new_lo]))[0][0] > delta:
        new_lo = lo
    return new_lo, max(new_hi, new_lo)
