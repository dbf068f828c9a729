"""Random allocation: each record takes part in exactly ``k`` of ``t`` steps.

:class:`RandomAllocation` describes one round (an epoch) of ``t`` steps of a
base mechanism in which every record is used in ``participations`` steps
chosen uniformly at random.  Rounds compose like any other mechanism
(``RandomAllocation(...).pld().self_compose(epochs)``), and every answer is a
certified bracket.

Gaussian base, one participation (the exact pair, add-or-remove adjacency):

* remove: ``P = (1/t) sum_i N(e_i, s^2 I_t)`` against ``Q = N(0, s^2 I_t)``;
* add: the pair swapped.

Its likelihood ratio is ``S/t`` with ``S`` a sum of ``t`` iid log-normals; the
dominating and dominated discrete pairs come from a mean-preserving spread and
a conditional-mean merge of each log-normal onto a linear grid, summed by FFT
(:mod:`pld.mechanisms.allocation.sums`, which holds the proof sketch).  The bias is second
order in the grid spacing: a spacing of 0.02 standard deviations of one
coordinate changes the variance of the likelihood ratio by ~1e-4 of itself,
and the partial sums are re-gridded as they widen (evolving discretisation),
so every FFT stays short.  That is why a linear grid works where the peers
convolve on geometric grids in O(n^2).

Three constructions of the pair, all certified (``construction``): one linear
grid for the whole coordinate ("linear", :mod:`pld.mechanisms.allocation.sums`);
the light/heavy split by the number of heavy coordinates ("split",
:mod:`pld.mechanisms.allocation.heavy`), which resolves the heavy upper tail of one
large coordinate (sigma = 1, 1-of-1000, delta = 1e-10: [0.2174, 1.4999] on the single
grid, [0.534145, 0.534197] split); and, for short rounds at small noise, the whole
sum on one geometric grid ("geometric", :mod:`pld.mechanisms.allocation.geometric`:
sigma = 0.45, 1-of-10, delta = 1e-5: [9.09, 11.39] split, [9.08866, 9.08900]).
``"auto"`` picks one by regime (:func:`pld.mechanisms.allocation.sums.choose_construction`);
when a bracket misses its target, :class:`pld.PLD` rebuilds the composition with
:meth:`RandomAllocation.refined` rounds (another construction, then finer variants)
and intersects the certified brackets.

Small noise: one coordinate's window must reach its heavy log-normal tail
(``exp(1/(2 s^2) + 7.7/s)``), more than ``2^20`` cells of a linear grid below
``sigma ~ 0.75``: long rounds are split (two or more heavy coordinates bounded
stochastically; ``t = 1e5``, ``delta = 1e-10``: ``sigma = 0.3`` to ``0.7`` to 0.5%
or better), short ones (``t <= 64``) go on the geometric grid.  A round of one step is
the Gaussian mechanism (refused at ``sigma < 0.55``: use :class:`pld.Gaussian`; the
sampling schemes and a ``k``-of-``t`` round's blocks of one step use it).
Limits (each told by a warning, never silent): the round-off of the ``t``-fold sum
grows like ``t``; tilted runs keep it relative on the upper side, but not in the
log-normal's own heavy upper tail, where it is lumped (``sigma = 1``, ``t = 1e5``,
``delta = 1e-10``: ~3x the truth on the single grid).

``k > 1`` participations: the upper end uses the block argument (the ``t``
steps cut into ``k`` blocks of ``floor(t/k)`` or ``ceil(t/k)`` steps, one
participation in each; see :class:`RandomAllocation`), the lower end a
post-processing of the true pair (the label-sum statistic for ``k <= t/4``,
the sum of the outputs above); ``explain()`` says which bounds are used.

The sampling schemes ``pld.dpsgd(..., sampling=...)`` builds runs of rounds with
(balls-in-bins, random allocation, shuffling) are :mod:`pld.mechanisms.allocation.schemes`.

References: Feldman & Shenfeld, "Privacy amplification by random allocation"
(2025); Chua et al., "Balls-and-Bins Sampling for DP-SGD" (AISTATS 2025).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field

from pld import _validate as v
from pld.mechanisms import Gaussian, Mechanism
from pld.mechanisms import adjacency as adj
from pld.mechanisms.allocation import explain as _explain
from pld.mechanisms.allocation import lower_parts as _lower_parts
from pld.mechanisms.allocation.chain import _LINEAR_REFINE_CELLS, FINEST_SPACING, next_round  # noqa: F401 (re-exported)
from pld.mechanisms.allocation.exceedances import exceedance_delta_lower, exceedance_lower
from pld.mechanisms.allocation.heavy import KAPPA
from pld.mechanisms.allocation.levels import _COARSE_RATIO, _windows_to
from pld.mechanisms.allocation.pairs import _model, _SidedModel
from pld.mechanisms.allocation.sums import (
    CONSTRUCTIONS,
    choose_construction,
    linear_fits,
    sum_laws,
)

__all__ = ["RandomAllocation", "Shuffling", "AllocationAccuracyWarning", "UnsupportedBaseError", "SUPPORTED_BASES"]

#: default first-grid spacing, in standard deviations of one log-normal coordinate: the spread
#: adds ``d^2/4`` to its variance and the merge takes ``~d^2/12`` off (``~1e-4`` relative per round)
SPACING_PER_SD = 0.02
#: largest steps per round
MAX_STEPS = 10**7
#: noise multipliers (sigma / sensitivity) for which a round of two or more steps is built: below,
#: the likelihood ratio's log-normal tail overflows the sums' quantiles; above, the rounds' grids
#: grow with the noise until they fill the memory
NOISE_RANGE = (0.1, 1000.0)
#: the tail :meth:`RandomAllocation.deeper` cuts at (a round then leaves ~1e-22 at +inf)
DEEP_TAIL = 1e-22
#: coarsest first grid (standard deviations of one coordinate) worth computing
_COARSEST_SD = 0.3


class AllocationAccuracyWarning(RuntimeWarning):
    """The certified construction is valid but its grid is coarse: the bracket will be wide."""


class UnsupportedBaseError(ValueError, TypeError):
    """The base mechanism of a round is not one random allocation (or shuffling) is implemented for:
    a ``ValueError`` (a mechanism, but an unsupported one) and, for older callers, a ``TypeError``."""


#: base mechanisms a round accepts (the pair is built from the log-normal law of one Gaussian
#: coordinate's likelihood ratio; see :mod:`pld.mechanisms.allocation.sums`)
SUPPORTED_BASES = ("Gaussian",)


def _check_round(round_, what: str) -> None:
    """The arguments every round (epoch) description shares: a Gaussian base, the
    steps of the round, the first grid's spacing (normalised in place)."""
    if not isinstance(round_.mechanism, Gaussian):
        got = type(round_.mechanism).__name__
        raise UnsupportedBaseError(
            f"mechanism must be a pld.Gaussian: {what} is implemented for the Gaussian base only (supported: "
            f"{', '.join('pld.' + b for b in SUPPORTED_BASES)}), got {got}.  Laplace, discrete Laplace, randomized "
            f"response and other bases are not supported; a certified (not amplified) bound for them is the base "
            f"mechanism composed k times per epoch: PLD((mechanism, k * epochs))")
    object.__setattr__(round_, "steps", v.integer("steps", round_.steps, low=1, high=MAX_STEPS))
    object.__setattr__(round_, "spacing", v.real("spacing", round_.spacing, low=1e-4, high=1.0))
    noise = round_.mechanism.sigma / round_.mechanism.sensitivity
    if round_.steps >= 2 and not NOISE_RANGE[0] <= noise <= NOISE_RANGE[1]:
        raise ValueError(
            f"the noise multiplier sigma / sensitivity of {what} must be in [{NOISE_RANGE[0]:g}, "
            f"{NOISE_RANGE[1]:g}], got {noise:g}.  A larger noise is a post-processing of a smaller one "
            f"(independent noise added), so the run at sigma = {NOISE_RANGE[1]:g} certifies an upper end "
            f"for any larger one; below {NOISE_RANGE[0]:g}, the base mechanism composed k times per epoch, "
            f"PLD((mechanism, k * epochs)), is a certified (not amplified) bound")


def _check_tail(sigma: float, steps: int) -> None:
    """Refuse a noise multiplier whose log-normal tail no grid of ``MAX_CELLS``
    cells resolves to 0.3 standard deviations (the bracket would be [0, inf]
    after minutes): below about 0.55, for a round of one step only, the base
    mechanism itself (two or more steps put the tail on a geometric grid; a
    ``k``-of-``t`` round's blocks of one step are the base mechanism; the
    sampling schemes account ``t = k`` as the base mechanism)."""
    from pld.mechanisms.allocation.levels import MAX_CELLS, window

    a = 1.0 / sigma
    if steps >= 2:
        return  # (a heavy tail goes on a geometric grid; blocks of one step are the base mechanism)
    cells = window(a, 1, steps) / (_COARSEST_SD * math.sqrt(math.expm1(min(a * a, 700.0))))
    if cells > MAX_CELLS:
        raise ValueError(
            f"the noise multiplier sigma / sensitivity must be at least about 0.55 for random allocation with "
            f"one step per round here, got {sigma:g}: the log-normal tail of its likelihood ratio reaches "
            f"{window(a, 1, steps):.3g}, which a linear grid of at most {MAX_CELLS} cells cannot resolve "
            f"(one step is the Gaussian mechanism itself: use pld.Gaussian)")


@dataclass(frozen=True)
class RandomAllocation(Mechanism):
    """One round of ``steps`` runs of ``mechanism``; each record in ``participations`` of them.

    The steps a record takes part in are chosen uniformly at random among the
    ``C(steps, participations)`` subsets, independently of the other records
    (balls-in-bins batching: shuffle-free, every example in exactly one batch
    per epoch when ``participations = 1``).  Add-or-remove adjacency; both
    directions are accounted.

    Parameters
    ----------
    mechanism : Gaussian
        The base mechanism of one step (a Gaussian of noise ``sigma`` and
        sensitivity ``sensitivity``; the pair depends on ``sigma/sensitivity``).
    steps : int
        ``t``, the steps per round (1 .. 1e7).
    participations : int
        ``k``, the steps each record takes part in (1 .. steps).
    spacing : float, optional
        Spacing of the first grid in standard deviations of one log-normal
        coordinate (accuracy against time; default 0.02).  Where the heavy
        tail of a small ``sigma`` would need more than ``2^20`` cells, the first
        grid holds only the light part of a coordinate and the heavy part is on
        a geometric grid (:mod:`pld.mechanisms.allocation.heavy`).
    construction : {"auto", "linear", "split", "split_fine", "geometric"}, optional
        The pair's construction (see the module; ``"split_fine"``: the split on
        a light grid in medians of a coordinate; ``"geometric"``: the whole sum
        on a geometric grid, for short rounds at small sigma); ``"auto"``
        (default) picks by regime and, when a bracket misses its target,
        intersects it with the others'.  An explicit one is built alone.
    kappa : float, optional
        The split's light cut ``B``: ``t Q(Y > B) = kappa`` (default ``1e-4``).
    refine_next : tuple, optional
        Internal: the variants :meth:`refined` returns next.
    tail : float, optional
        Probability the linear grid's windows leave beyond them (default ``1e-14``;
        in ``[1e-300, 1e-10]``).  What they leave goes to ``+inf`` (about ``1e-15`` a
        round); :meth:`deeper` cuts at ``DEEP_TAIL`` where many rounds at a strict delta
        add that up to a share of delta.
    coarse_ratio : float, optional
        The partial sums' re-grid ratio (``sum_laws``'s; None: its default 0.5, in [1/64, 1]).

    Raises
    ------
    UnsupportedBaseError
        (a ``ValueError`` and a ``TypeError``) ``mechanism`` is not a :class:`pld.Gaussian`:
        the message names the supported bases (``SUPPORTED_BASES``).
    TypeError
        A count is not an integer.
    ValueError
        ``steps`` outside 1 .. 1e7, ``participations`` outside 1 .. ``steps``,
        ``spacing`` outside [1e-4, 1]; one step per round at ``sigma`` below
        about 0.55 (the Gaussian mechanism itself: use :class:`pld.Gaussian`); two or
        more steps at ``sigma / sensitivity`` outside ``NOISE_RANGE``, [0.1, 1000].

    Warns
    -----
    AllocationAccuracyWarning
        When the heavy tail of a small ``sigma`` forces a coarse grid, or
        (light/heavy split, few steps) the add direction keeps mass at ``+inf``.

    Examples
    --------
    >>> import pld
    >>> from pld.mechanisms.allocation import RandomAllocation
    >>> epoch = RandomAllocation(pld.Gaussian(1.0), steps=100)
    >>> lo, hi = epoch.pld().self_compose(100).epsilon_bounds(1e-5, rtol=1e-3)
    >>> 6.0 < lo <= hi < 6.1
    True

    Notes
    -----
    ``k = 1``: the exact pair (see :mod:`pld.mechanisms.allocation.sums`).  ``k > 1``: the
    upper end is the composition of ``k`` rounds of 1-of-``t_j`` allocation
    (``t_j`` = ``floor(t/k)`` or ``ceil(t/k)``, summing to ``t``), the lower end
    the law of a statistic of the outputs: for ``k <= t/4`` the sum over the
    steps of the cell index of each step's likelihood ratio
    (:func:`pld.mechanisms.allocation.sums.label_sum_pair`) or, at small noise, of its
    logarithm (:func:`pld.mechanisms.allocation.labels.log_label_pair`), else the sum of
    the outputs (a Gaussian mechanism); :meth:`explain` gives the argument and, for a
    ``delta``, the gap between the two.
    """

    adjacency = adj.ADD_OR_REMOVE

    mechanism: Gaussian
    steps: int
    participations: int = 1
    spacing: float = SPACING_PER_SD
    construction: str = "auto"
    kappa: float = KAPPA
    #: the variants :meth:`refined` returns next (internal: ``(construction, spacing, kappa)``)
    refine_next: tuple = field(default=(), repr=False)
    tail: float | None = None
    #: untilted runs whose round-off is a share of their mass redone in long double (False: in
    #: double only, up to twice as fast to build, wider at strict deltas; :meth:`deeper` makes it precise)
    precise: bool = True
    coarse_ratio: float | None = None
    symmetric: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        _check_round(self, "random allocation")
        object.__setattr__(self, "participations",
                           v.integer("participations", self.participations, low=1, high=self.steps))
        if self.construction not in ("auto",) + CONSTRUCTIONS:
            raise ValueError(f"construction must be 'auto', 'linear', 'split', 'split_fine' or 'geometric', got "
                             f"{self.construction!r}")
        object.__setattr__(self, "kappa", v.real("kappa", self.kappa, low=1e-12, high=0.1))
        object.__setattr__(self, "tail", None if self.tail is None else v.real("tail", self.tail, low=1e-300,
                                                                                high=1e-10))
        if self.coarse_ratio is not None:
            object.__setattr__(self, "coarse_ratio", v.real("coarse_ratio", self.coarse_ratio, low=1 / 64, high=1.0))
        _check_tail(self.noise_multiplier, self.steps)

    def _construction(self) -> str:
        """The construction of this round's pair (``"auto"`` resolved, and ``"linear"`` where one
        grid cannot hold the round's windows; see
        :func:`pld.mechanisms.allocation.sums.choose_construction`), under the round's ``tail``
        as :func:`pld.mechanisms.allocation.sums.sum_laws` resolves it."""
        with _windows_to(self.tail):
            return choose_construction(self.noise_multiplier, self.steps, self.spacing, self.construction)

    def _fits_linear(self, spacing: float) -> bool:
        """Whether one linear grid of ``spacing`` holds the round's windows (at its ``tail``)."""
        with _windows_to(self.tail):
            return linear_fits(self.noise_multiplier, self.steps, spacing)

    @property
    def refinement_family(self) -> str:
        """The construction (``"blocks"`` for ``k > 1``): :class:`pld.PLD`'s chain of :meth:`refined`
        rounds skips a family whose bracket was far wider than the others'."""
        return "blocks" if self.participations > 1 else self._construction()

    @property
    def refinement_label(self) -> str:
        """This round's construction and accuracy settings, as :meth:`pld.PLD.explain` lists the
        refinement chain's members."""
        return (f"{self.refinement_family}, spacing {self.spacing:g}"
                + (f", kappa {self.kappa:g}" if self.refinement_family.startswith("split") else "")
                + ("" if self.tail is None else f", windows to {self.tail:g}")
                + ("" if self.precise else ", double only")
                + ("" if self.coarse_ratio is None else f", levels re-gridded at {self.coarse_ratio:g}"))


    def _linear_cells(self, tail: float | None = None) -> float:
        """Cells of the single linear grid's first window (sizing only; at the windows' ``tail``
        if given, else at the current one)."""
        from pld.mechanisms.allocation.levels import window

        a = 1.0 / self.noise_multiplier
        with _windows_to(tail):
            return window(a, 1, self.steps) / (self.spacing * math.sqrt(math.expm1(min(a * a, 700.0))))

    def refined(self) -> RandomAllocation | None:
        """Another certified construction of the same round, or None: :class:`pld.PLD` asks for it
        when a bracket misses its target and intersects the two brackets (both are certified), then
        asks the new round again (the order: :func:`pld.mechanisms.allocation.chain.next_round`)."""
        return next_round(self)

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.sigma / self.mechanism.sensitivity


    def tail_mass(self) -> float:
        """The larger direction's mass at ``+inf`` of the dominating pair, and unless the round is
        precise the round-off its untilted runs lump (upper) and drop (lower) in double (0 for
        ``k > 1``): what :meth:`deeper` takes away."""
        inf, off = self._small_masses()
        return inf + off

    def _small_masses(self) -> tuple[float, float]:
        info = {} if self.participations > 1 else self.grid_info()
        off = 0.0 if self.precise else info.get("lumped_upper", 0.0) + info.get("dropped_lower", 0.0)
        return max(info.get("inf_mass_upper_remove", 0.0), info.get("inf_mass_upper_add", 0.0)), off

    def deeper(self) -> RandomAllocation | None:
        """The same round built precise where its round-off outweighs its tails at ``+inf``,
        else with its windows and quantiles cut at ``DEEP_TAIL`` and precise (None if it is both).

        :class:`pld.PLD` asks for it when an epsilon bracket misses its target and the
        rounds' tails at ``+inf`` (about ``1e-16``-``1e-15`` each: the linear windows'
        ``1e-14`` tail, the split's last Chernoff quantile ``1e-8`` of its two-heavy part)
        and the round-off they lump or drop in double (:meth:`tail_mass`) reach a share of
        delta: thousands of rounds at a strict delta add up to it; a few at delta 1e-9 too."""
        inf, off = self._small_masses()
        if off > inf:
            return dataclasses.replace(self, precise=True)  # (the round-off first; deeper tails after)
        if self.tail is not None and self.tail <= DEEP_TAIL and self.precise:
            return None
        if self._construction() == "linear" and self._linear_cells(DEEP_TAIL) > _LINEAR_REFINE_CELLS:
            # (a single grid over the deep windows lumps more round-off than the tails it saves:
            # sigma 1.114, 1-of-8188, 21 epochs, delta 7e-10: 545k cells, its upper end 0.63 against
            # 0.299, in 5.4 s; the chain goes on to the other constructions)
            return None
        return dataclasses.replace(self, tail=DEEP_TAIL, precise=True)

    def build_laws(self) -> None:
        """Build (and remember) the round's laws, which its loss models read: the
        engine builds those of several rounds side by side (:mod:`pld.engine.laws`)."""
        if self.participations == 1:
            self.grid_info()

    def grid_info(self) -> dict:
        """The grid behind the discrete pairs: window ``W`` and spacing ``d`` of
        ``S``, the merge's residual ``rho``, round-off bounds, the upper
        pair's mass at ``+inf`` in each direction and the ``construction``."""
        return dict(sum_laws(*self._laws_args())[2])

    def _laws_args(self) -> tuple:
        """:func:`sum_laws`'s arguments for this round (the one key its cache sees for it)."""
        return (self.noise_multiplier, self.steps, self.spacing, self._construction(), self.kappa, self.tail,
                self.precise, _COARSE_RATIO if self.coarse_ratio is None else self.coarse_ratio)

    def _coarse(self, info: dict) -> str | None:
        return _explain.coarse_grid(self, info)

    # ------------------------------------------------------------ k > 1
    def blocks(self) -> tuple[tuple[int, int], ...]:
        """``((steps, count), ...)``: the block rounds of the upper end (``k > 1``)."""
        t, k = self.steps, self.participations
        lo, extra = divmod(t, k)
        parts = [(lo + 1, extra), (lo, k - extra)]
        return tuple((s, c) for s, c in parts if c > 0)

    def _sum_mu(self) -> float:
        return _lower_parts.sum_mu(self)

    def _uses_label_sum(self) -> bool:
        return _lower_parts.uses_label_sum(self)

    def _lower_part(self) -> Mechanism:
        """The lower-only part for ``k > 1`` (see :meth:`explain`, :mod:`.lower_parts`)."""
        return _lower_parts.lower_part(self)

    def _sum_statistic(self) -> Mechanism:
        return _lower_parts.sum_statistic(self)

    @property
    def tight(self) -> bool:  # type: ignore[override]
        """``k = 1``: the exact pair.  ``k > 1``: bounded by the block rounds above
        and a statistic of the outputs below (see :meth:`explain`)."""
        return self.participations == 1

    def bound_parts(self) -> tuple[tuple, tuple | None]:
        if self.participations == 1:
            return super().bound_parts()
        # (a block of one step is the base mechanism itself: the record is in it)
        def block(s: int) -> Mechanism:
            if s == 1:
                return self.mechanism
            return RandomAllocation(self.mechanism, s, 1, self.spacing, self.construction, self.kappa, tail=self.tail,
                                    precise=self.precise)

        upper = tuple((block(s), c) for s, c in self.blocks())
        return upper, ((self._lower_part(), 1),)

    def lower_alternatives(self) -> tuple[tuple, ...]:
        """The other dominated statistics whose lower ends are taken too (:mod:`.lower_parts`)."""
        return () if self.participations == 1 else _lower_parts.alternatives(self)

    def epsilon_lower(self, delta: float, rounds: int = 1) -> float:
        """A lower end at ``delta`` of ``rounds`` rounds, computed directly (``k > 1``: :mod:`.exceedances`)."""
        k = self.participations
        return 0.0 if k == 1 else exceedance_lower(self.noise_multiplier, self.steps, k, rounds, delta)

    def delta_lower(self, epsilon: float, rounds: int = 1) -> float:
        """As :meth:`epsilon_lower`, on delta at ``epsilon``."""
        s, t, k = self.noise_multiplier, self.steps, self.participations
        return 0.0 if k == 1 else exceedance_delta_lower(s, t, k, rounds, epsilon)

    def bound_notes(self) -> dict[str, str]:
        if self.participations == 1:
            return super().bound_notes()
        info, d = self.explain(), "a dominated construction of the true mechanism: "
        return {"upper": "dominating composition that is not tight: " + info["upper"], "lower": d + info["lower"],
                "direct_lower": d + "whether any step's output exceeds a threshold (allocation.exceedances)"}

    def explain(self, delta: float | None = None, epochs: int = 1) -> dict:
        """Which constructions give the two ends, and (with ``delta``) the bracket and its gap.

        ``k = 1``: both ends bound the exact pair (a mean-preserving spread and
        a conditional-mean merge of each log-normal coordinate).  ``k > 1``:

        * upper: the block argument.  Cut the steps into ``k`` blocks of
          ``floor(t/k)`` or ``ceil(t/k)`` steps at random and take one step per
          block: averaged over the random cut, the chosen set is a uniform
          ``k``-subset (its law is exchangeable), so the true remove pair is
          ``(E_pi P_pi, Q)``, and by the joint convexity of the hockey-stick
          divergence ``H(E_pi P_pi || Q) <= E_pi H(P_pi || Q)``, likewise for the
          add direction; each ``P_pi`` is a product over blocks of 1-of-``t_j``
          allocations, i.e. a composition of ``k`` rounds.  Exact for ``k = 1``
          only.
        * lower: a statistic of the outputs, a post-processing of the true
          pair.  For ``k <= t/4``: the sum over the steps of the cell index
          of each step's likelihood ratio ``Y_i``; it treats every step alike,
          so its law is that of ``k`` marked and ``t - k`` unmarked
          coordinates whichever steps the record is in, and for ``k << t``
          the true likelihood ratio is close to a function of ``sum Y_i``
          (8 of 1024 steps at ``sigma = 1``: within 0.7% of the upper end).
          Above: the sum of the ``t`` outputs, ``N(k, t s^2)`` against
          ``N(0, t s^2)``, a Gaussian mechanism with ``mu = k / (s sqrt(t))``
          (exact for ``k = t``).

        Parameters
        ----------
        delta : float, optional
            With it, the epsilon bracket of ``epochs`` rounds is computed.
        epochs : int
            Rounds composed for that bracket.

        Returns
        -------
        dict
            ``upper`` and ``lower`` (the constructions in words), and with
            ``delta``: ``epsilon_lower``, ``epsilon_upper``, ``gap`` and
            ``relative_gap``; for ``k = 1`` also ``grid`` (see :meth:`grid_info`);
            for ``k > 1`` also ``width_parts`` (``upper_grid``, ``lower_grid``:
            numerical, ``structural``: between the block argument and the
            statistic), ``structural_share``, ``block_bracket``,
            ``statistic_bracket`` and ``loose`` (the same in words; see
            :func:`pld.mechanisms.allocation.explain.width_parts`).
        """
        out: dict = {"steps": self.steps, "participations": self.participations,
                     "noise_multiplier": self.noise_multiplier}
        out.update(_explain.constructions(self))
        if delta is not None:
            d = self.pld().self_compose(epochs) if epochs > 1 else self.pld()
            lo, hi = d.epsilon_bounds(delta)
            out.update({"delta": delta, "epochs": epochs, "epsilon_lower": lo, "epsilon_upper": hi,
                        "gap": hi - lo, "relative_gap": (hi - lo) / hi if hi > 0 else 0.0})
            if self.participations > 1:
                out.update(_explain.width_parts(d, delta, lo, hi))
        return out

    def loss_model(self, direction: str = "remove") -> _SidedModel:
        self._check_direction(direction)
        if self.participations > 1:
            raise ValueError("a RandomAllocation with participations > 1 is a composition of several parts: "
                             "use its .pld() (not PLD((mechanism, count)) or loss_model)")
        info = self.grid_info()
        why = self._coarse(info)
        if why is not None:
            warnings.warn(f"RandomAllocation(steps={self.steps}): {why}", AllocationAccuracyWarning, stacklevel=3)
        return _model(direction, *self._laws_args())


# (Shuffling reads RandomAllocation and the round checks above, the sampling schemes both:
# imported once they exist)
from pld.mechanisms.allocation.schemes import BALLS_IN_BINS, RANDOM_ALLOCATION, SHUFFLE, run_spacing  # noqa: E402,F401
from pld.mechanisms.allocation.shuffling import Shuffling  # noqa: E402
