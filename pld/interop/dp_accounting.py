"""pld as a backend for Google's ``dp_accounting`` library.

Importing this module imports ``dp_accounting`` (nothing else in pld does)::

    from pld.interop.dp_accounting import PLDAccountant, from_dp_event

    accountant = PLDAccountant()          # was: dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, 1000))
    eps = accountant.get_epsilon(1e-5)    # certified upper bound
    lo, hi = accountant.get_epsilon_bounds(1e-5)

dp_accounting's own test suite for its PLD accountant
(``dp_accounting/pld/pld_privacy_accountant_test.py``, with the generic
``privacy_accountant_test``) runs against this class in pld's CI
(``tests/test_dp_accounting_suite.py``); the tests skipped there, and why, are
listed at the end of this docstring.

Layout: the walk over an event tree (and its errors) is in
:mod:`pld.interop.dp_accounting_events`; :class:`PLDAccountant` records what
the walk finds into a :class:`pld.Accountant`, which keeps the history, the
composed PLD, the cached answers and the answer before anything is composed.

Conversion of a ``DpEvent`` tree (:func:`from_dp_event`)
--------------------------------------------------------
``noise_multiplier`` is, as documented for ``dp_accounting.GaussianDpEvent``,
the noise scale divided by the norm bound ``C`` on one record's contribution.
Under ``REPLACE_ONE`` a replaced record moves the sum by up to ``2 C``, so the
Gaussian pair has sensitivity 2 -- which is what dp_accounting's own
``PLDAccountant`` computes for ``REPLACE_ONE``.  ``REPLACE_SPECIAL`` replaces a
record by a "special" one that contributes nothing (Kairouz et al. 2021,
arXiv:2103.00039, Def. 1.1): for additive-noise mechanisms its pairs are the
add-or-remove pairs.

=====================================  ============  ==================================================
event                                  relation      pld mechanism
=====================================  ============  ==================================================
``GaussianDpEvent(s)``                 AOR, SPECIAL  ``Gaussian(sigma=s)``
``GaussianDpEvent(s)``                 REPLACE       ``Gaussian(sigma=s, sensitivity=2)``
``LaplaceDpEvent(s)``                  AOR, SPECIAL  ``Laplace(scale=s)``
``DiscreteLaplaceDpEvent(a, k)``       AOR, SPECIAL  ``DiscreteLaplace(scale=1/a, sensitivity=k)``
``MixtureOfGaussiansDpEvent``          AOR, SPECIAL  ``MixtureOfGaussians(sigma, sensitivities, probs)``
``RandomizedResponseDpEvent(p, k)``    REPLACE       input a vs input b (``FromPMFs``;
                                                     ``RandomizedResponse`` for ``k = 2``)
``RandomizedResponseDpEvent(p, k)``    SPECIAL       input a vs the special input, whose output is
                                                     uniform (``FromPMFs``, two directions)
``PoissonSampledDpEvent(q, e)``        AOR, SPECIAL  ``PoissonSampled(base(e), q)``
``PoissonSampledDpEvent(q, e)``        REPLACE       ``PoissonSampledSubstitute(Gaussian(s), q)``
                                                     (Gaussian ``e`` only)
``SampledWithoutReplacementDpEvent``   REPLACE       ``SampledWithoutReplacement(Gaussian(s), m / n)``
``TruncatedSubsampledGaussianDpEvent`` any           ``TruncatedPoissonGaussian(..., adjacency)``
``SingleEpochTreeAggregationDpEvent``  SPECIAL       ``Gaussian(sigma=s, sensitivity=sqrt(d))``
``SelfComposedDpEvent(e, n)``          any           ``n``-fold composition
``ComposedDpEvent([...])``             any           composition
``NoOpDpEvent()``                      any           nothing (a neutral PLD if it is the whole tree)
``NonPrivateDpEvent()``                any           epsilon = inf (see below)
=====================================  ============  ==================================================

(AOR = ``ADD_OR_REMOVE_ONE``, REPLACE = ``REPLACE_ONE``, SPECIAL =
``REPLACE_SPECIAL``.)

* The event inside a sampled event may be a Gaussian, or a tree of
  ``ComposedDpEvent`` / ``SelfComposedDpEvent`` / ``NoOpDpEvent`` bottoming out in
  Gaussians (the sampled record takes part in all of them, so they fold into
  one Gaussian with ``s_eff = (sum_i n_i / s_i^2)^(-1/2)``, as in
  dp_accounting's RDP accountant); under Poisson sampling it may also be a
  Laplace, a discrete Laplace or another Poisson-sampled event (under
  ``REPLACE_ONE``: another Poisson-sampled Gaussian; rates multiply).
* Poisson sampling under ``REPLACE_ONE`` uses the pair ``((1-q) N(0) + q N(1),
  (1-q) N(0) + q N(-1))`` (Koskela, Jälkö & Honkela 2020, Sec. 5.2;
  dp_accounting's ``REPLACE`` adjacency); :class:`pld.PoissonSampledSubstitute`
  proves that it dominates.  Only for the Gaussian: for Laplace noise no
  dominating pair is implemented (dp_accounting refuses it too).
* Sampling without replacement is accounted only under ``REPLACE_ONE`` with the
  dominating pair of Dong, Roth & Su (``pld.SampledWithoutReplacement``).
  Beware that dp_accounting's *RDP* accountant uses the base RDP
  ``alpha / (2 s^2)`` for it, i.e. replace-one sensitivity ``C`` instead of
  ``2 C``; pld follows the ``GaussianDpEvent`` definition, so for the same event
  its epsilon can exceed that RDP figure.
* ``TruncatedSubsampledGaussianDpEvent(n, p, B, s)``: Poisson sampling at rate
  ``p`` from ``n`` records (the dataset holding the record, so ``n - 1``
  others share its batch, as in dp_accounting), batches cut to ``B`` records.
  Not tight (:class:`pld.TruncatedPoissonGaussian`): the upper end shows the
  adversary whether a cut happened and takes the add-or-remove pair of radius
  2 for a cut batch, tighter than dp_accounting's replace-one pair there; the
  lower end is a concrete pair of neighbouring datasets.  For dp_accounting's
  test event (``n = 4, 3``, ``p = 1/2``, ``B = 2``, 5 runs, delta = 1e-6) it
  reports 17.904; pld certifies [7.651, 16.457].
* ``SingleEpochTreeAggregationDpEvent(s, steps)`` under ``REPLACE_SPECIAL``:
  each record is in at most ``d = ceil(log2(max(steps) + 1))`` released nodes
  of the trees, each node gets independent ``N(0, s^2)`` noise, so the release
  is the Gaussian mechanism with sensitivity ``sqrt(d)`` (Kairouz et al. 2021,
  App. D; dp_accounting's RDP accountant uses the same bound).
* ``SelfComposedDpEvent(RandomizedResponseDpEvent(...), n)`` is composed ``n``
  times.  (dp_accounting 0.6.0's own ``PLDAccountant`` composes a randomized
  response event once whatever its count; spell the runs out as a
  ``ComposedDpEvent`` to compare with it.)
* A zero noise parameter (or a ``RandomizedResponseDpEvent`` with
  ``noise_parameter = 0``) makes the event non-private, like
  ``NonPrivateDpEvent``; a zero sampling probability, ``k = 1`` buckets,
  ``noise_parameter = 1``, a mixture whose sensitivities are all 0 or a
  truncated batch of size 0 makes it a no-op.

Refused, and why
----------------
* ``ZCDpEvent(rho, xi)``: a zCDP bound constrains a whole Renyi curve, which
  many pairs satisfy; pld would need the least favourable pair of that family
  (no closed form; the Gaussian ``N(sqrt(2 rho), 1)`` vs ``N(0, 1)`` is one
  rho-zCDP pair but does not dominate the others).  Use dp_accounting's RDP
  accountant.
* ``SampledWithReplacementDpEvent``: a record may enter a batch several times
  and, as for sampling without replacement, the other records can be chosen to
  make the worst case depend on the batch's make-up; pld has no proven
  dominating pair for it.
* ``RepeatAndSelectDpEvent``: no dominating pair is implemented (its known
  analyses are Renyi bounds).
* ``LaplaceDpEvent`` / ``DiscreteLaplaceDpEvent`` / ``MixtureOfGaussiansDpEvent``
  and Poisson-sampled Laplace under ``REPLACE_ONE``, randomized response under
  ``ADD_OR_REMOVE_ONE``, sampling without replacement other than under
  ``REPLACE_ONE``, tree aggregation other than under ``REPLACE_SPECIAL``: the
  same relations as dp_accounting's accountants accept, with their wording
  ("neighboring_relation must be ...").
* ``UnsupportedDpEvent`` and event types pld does not know.

Non-private events
------------------
``NonPrivateDpEvent`` means epsilon = inf.  A :class:`pld.PLD` cannot express
that (its answers are finite brackets), so :func:`from_dp_event` raises
:class:`NonPrivateEventError` for a tree that contains one (with a non-zero
count), while :class:`PLDAccountant` records it and then reports
``get_epsilon(delta) = inf`` for every ``delta`` and ``get_delta(epsilon) = 1``
for every ``epsilon``, exactly as dp_accounting's accountants do.

Errors
------
Anything pld cannot account raises :class:`UnsupportedEventError` (a
``dp_accounting.UnsupportedEventError``) naming the event type; from
:meth:`PLDAccountant.compose` the message has dp_accounting's form
``Unsupported event: ... Error: [reason] caused by subevent ...``.  Invalid
parameters (a negative count, a sampling probability above 1, ...) raise
:class:`InvalidEventError`, which is both an ``UnsupportedEventError`` and a
``ValueError``; ``compose(event, count)`` with ``count < 1`` raises
``ValueError``.

dp_accounting's suite: tests skipped in pld's CI
------------------------------------------------
* ``test_mixture_of_gaussians_basic`` pins dp_accounting's epsilon 17.193115 to
  1e-6 (and delta to 1e-12), finer than its own grid (1e-4) resolves; pld's
  certified bracket [17.19294, 17.19348] contains it.
* ``test_truncated_subsampled_gaussian_basic`` pins 17.904330 to 1e-6; pld's
  certified upper end, 16.457, is below it (see above).
"""

from __future__ import annotations

import math

import numpy as np

# dp_accounting is an optional dependency: importing this adapter without it
# fails in dp_accounting_events with a message saying what to install
from pld import _validate as _v
from pld.accounting.accountant import Accountant
from pld.distribution import PLD
from pld.interop.dp_accounting_events import (
    _AOR,
    InvalidEventError,
    NeighboringRelation,
    NonPrivateEventError,
    Plan,
    UnsupportedEventError,
    _ev,
    _pa,
    event_count,
    neutral_pld,
    plan_of,
    relation_of,
)

__all__ = [
    "from_dp_event",
    "PLDAccountant",
    "UnsupportedEventError",
    "InvalidEventError",
    "NonPrivateEventError",
    "NeighboringRelation",
]


# ------------------------------------------------------------ public API
def from_dp_event(event, *, neighboring_relation=_AOR,
                  value_discretization_interval: float | None = None) -> PLD:
    """The :class:`pld.PLD` of a ``dp_accounting.DpEvent`` tree.

    Parameters
    ----------
    event : dp_accounting.DpEvent
        The tree to convert (see the module docstring for the supported events).
    neighboring_relation : dp_accounting.NeighboringRelation
        ``ADD_OR_REMOVE_ONE`` (default), ``REPLACE_ONE`` or ``REPLACE_SPECIAL``.
    value_discretization_interval : float, optional
        Fixed grid spacing for experts; by default pld picks it per query.

    Returns
    -------
    pld.PLD
        Identical sub-events are merged; a tree of no-ops gives a neutral PLD
        (epsilon = 0 for every delta).

    Raises
    ------
    UnsupportedEventError
        A sub-event pld cannot account (the error names its type).
    InvalidEventError
        A parameter out of range (also a ``ValueError``).
    NonPrivateEventError
        The tree contains a ``NonPrivateDpEvent`` (or zero noise): epsilon = inf.
    """
    relation = relation_of(neighboring_relation)
    plan = plan_of(event, relation)
    if plan.non_private is not None:
        raise NonPrivateEventError(plan.non_private)
    if not plan.components:
        return neutral_pld(value_discretization_interval)
    return PLD(tuple(plan.components.items()), value_discretization_interval=value_discretization_interval)


def _top_count(count) -> int:
    """``compose``'s count: an integer >= 1, as dp_accounting's ledger demands."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an integer, got {type(count).__name__} {count!r}")
    if count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    return count


class PLDAccountant(_pa.PrivacyAccountant):
    """A ``dp_accounting.PrivacyAccountant`` whose answers come from pld.

    Drop-in for ``dp_accounting.pld.PLDAccountant``: same constructor, same
    ``supports`` / ``compose`` / ``get_epsilon`` / ``get_delta`` /
    ``ledger`` / ``neighboring_relation``.  ``get_epsilon`` and ``get_delta``
    return pld's *certified* upper bounds; :meth:`get_epsilon_bounds` and
    :meth:`get_delta_bounds` return the whole ``(lower, upper)`` bracket.

    Parameters
    ----------
    neighboring_relation : dp_accounting.NeighboringRelation
        ``ADD_OR_REMOVE_ONE`` (default), ``REPLACE_ONE`` or ``REPLACE_SPECIAL``.
    value_discretization_interval : float, optional
        ``None`` (default): pld chooses the grid per query so the bracket is
        narrow.  A number fixes pld's grid spacing (the answers stay certified,
        the bracket may be wider); accepted so that code written for
        dp_accounting's ``PLDAccountant(..., value_discretization_interval=...)``
        runs unchanged.
    """

    def __init__(self, neighboring_relation=_AOR, value_discretization_interval: float | None = None):
        relation = relation_of(neighboring_relation)
        if value_discretization_interval is not None:
            value_discretization_interval = _v.real(
                "value_discretization_interval", value_discretization_interval, low=0.0, low_open=True)
        super().__init__(relation)
        self._value_discretization_interval = value_discretization_interval
        # history, the composed PLD, cached answers and the empty case live in
        # the core; this adapter adds dp_accounting's events, ledger and
        # non-private convention
        self._core = Accountant(value_discretization_interval=value_discretization_interval)
        self._non_private: object | None = None  # the first non-private event composed

    # ------------------------------------------------------------ composing
    def _maybe_compose(self, event, count: int, do_compose: bool):
        try:
            plan = plan_of(event, self.neighboring_relation, event_count(event, count))
        except UnsupportedEventError as exc:
            return self.CompositionErrorDetails(invalid_event=exc.event, error_message=exc.reason)
        if do_compose:
            self._apply(plan)
        return None

    def _apply(self, plan: Plan) -> None:
        # every count is checked before any is recorded, so a refused plan
        # leaves the accountant (and, in compose, the ledger) unchanged
        counts = [_v.integer("count", k, low=1, high=_v.MAX_COUNT) for k in plan.components.values()]
        for mech, k in zip(plan.components, counts):
            self._core.record(mech, k)
        if plan.non_private is not None and self._non_private is None:
            self._non_private = plan.non_private

    def compose(self, event, count: int = 1) -> PLDAccountant:
        """Account for ``count`` runs of ``event``; returns ``self``.

        Raises :class:`UnsupportedEventError` (a ``dp_accounting``
        ``UnsupportedEventError``, worded like dp_accounting's: "... caused by
        subevent ...") naming the offending sub-event, and leaves the
        accountant unchanged, if any part of ``event`` is unsupported;
        ``ValueError`` if ``count < 1`` or if one mechanism of the event would
        run more than 1e12 times (also leaving the accountant unchanged).
        """
        if not isinstance(event, _ev.DpEvent):
            raise TypeError(f"`event` must be `DpEvent`. Found {type(event)}.")
        count = _top_count(count)
        try:
            plan = plan_of(event, self.neighboring_relation, count)
        except UnsupportedEventError as exc:
            raise exc.within(event) from None
        self._apply(plan)
        self._ledger.compose(event, count)
        return self

    # -------------------------------------------------------------- queries
    @property
    def contains_non_private_event(self) -> bool:
        """True once a non-private event (epsilon = inf) has been composed."""
        return self._non_private is not None

    def pld(self) -> PLD:
        """The composed :class:`pld.PLD` (neutral if nothing private was composed).

        Raises :class:`NonPrivateEventError` after a non-private event.
        """
        if self._non_private is not None:
            raise NonPrivateEventError(self._non_private)
        if self._core.empty:
            return neutral_pld(self._value_discretization_interval)
        return self._core.pld()

    def get_epsilon_bounds(self, target_delta: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on epsilon at ``target_delta`` in [0, 1].

        ``target_delta = 0`` asks for the epsilon at which delta(epsilon)
        reaches 0: finite when every composed mechanism is pure DP (the
        largest privacy loss), ``inf`` otherwise.  ``target_delta = 1`` holds
        at epsilon = 0.  After a non-private event the answer is ``inf`` for
        every ``target_delta`` (dp_accounting's convention).
        """
        target_delta = _v.real("target_delta", target_delta, low=0.0, high=1.0)
        if self._non_private is not None:
            return math.inf, math.inf
        if target_delta == 1.0:
            return 0.0, 0.0
        return self._core.epsilon_bounds(target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        """Certified epsilon at ``target_delta`` (upper end of :meth:`get_epsilon_bounds`)."""
        return self.get_epsilon_bounds(target_delta)[1]

    def get_delta_bounds(self, target_epsilon: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on delta at ``target_epsilon``.

        ``target_epsilon = inf`` gives the mass at infinite privacy loss (0 for
        a composition of mechanisms without one), ``-inf`` gives 1; after a
        non-private event the answer is 1 for every ``target_epsilon``.
        """
        target_epsilon = _v.real("target_epsilon", target_epsilon, allow_inf=True)
        if self._non_private is not None or target_epsilon == -math.inf:
            return 1.0, 1.0
        if not self._core.empty and target_epsilon >= self.get_epsilon_bounds(0.0)[1]:
            # at or beyond the largest privacy loss delta is exactly 0 (the
            # grids' dominating side may still show a spread atom above it)
            return 0.0, 0.0
        return self._core.delta_bounds(target_epsilon)

    def get_delta(self, target_epsilon: float) -> float:
        """Certified delta at ``target_epsilon`` (upper end of :meth:`get_delta_bounds`)."""
        return self.get_delta_bounds(target_epsilon)[1]

    # ------------------------------------------------- attack risk (dp_accounting head)
    def get_true_positive_rate_bounds(self, false_positive_rates):
        """Certified ``(lower, upper)`` on the best attack's TPR at each FPR (the larger
        of the two neighbouring directions; :mod:`pld.report.risk`)."""
        fpr, scalar = _v.real_array("false_positive_rates", false_positive_rates, low=0.0, high=1.0)
        if self._non_private is not None:
            ones = np.ones(fpr.shape)
            return (1.0, 1.0) if scalar else (ones, ones.copy())
        if self._core.empty:
            return (float(fpr), float(fpr)) if scalar else (fpr.copy(), fpr.copy())
        from pld.report.risk import TradeOff

        r = TradeOff(self.pld()).tpr(fpr.ravel())
        lo, hi = np.array(r.lower).reshape(fpr.shape), np.array(r.upper).reshape(fpr.shape)
        return (float(lo), float(hi)) if scalar else (lo, hi)

    def get_true_positive_rates(self, false_positive_rates, deltas=None):
        """Certified upper bound on the TPR of any attack at each FPR (dp_accounting head's signature).

        Unlike dp_accounting's, which takes the symmetric trade-off curve of the
        epsilon(delta) curve over a grid of ``deltas`` (pessimistic for
        asymmetric pairs such as add-or-remove Poisson sampling), pld reads the
        trade-off curve of each neighbouring direction off its certified grids,
        with the infimum over epsilon taken exactly at the grids' lattice points;
        ``deltas`` is accepted for compatibility and not needed.  A scalar in
        gives a float out, an array an array.  After a non-private event: 1.
        """
        if deltas is not None:
            _v.real_array("deltas", deltas, low=0.0, high=1.0)
        return self.get_true_positive_rate_bounds(false_positive_rates)[1]

    def get_gdp_parameter_estimate(self, false_positive_rates=None, deltas=None) -> float:
        """Certified upper end of dp_accounting's mu-GDP estimate (same signature).

        dp_accounting's estimate is ``max_i Phi^-1(TPR(a_i)) - Phi^-1(a_i)`` over the
        FPRs ``a_i <= 1/2`` (default ``logspace(-12, log10(1/2), 500)``) with its
        TPR upper bounds; pld returns the certified upper end of that maximum
        with both directions' TPR (:meth:`pld.report.risk.TradeOff.gdp`, whose
        ``mu_range_upper`` also covers the FPRs between the grid points).  As in
        dp_accounting, ``inf`` when the mass at infinite loss exceeds the
        smallest FPR, and after a non-private event.
        """
        if deltas is not None:
            _v.real_array("deltas", deltas, low=0.0, high=1.0)
        if self._non_private is not None:
            return math.inf
        a = (np.logspace(-12, math.log10(0.5), 500) if false_positive_rates is None else
             _v.real_array("false_positive_rates", false_positive_rates, low=0.0, high=1.0)[0].ravel())
        a = np.sort(a[(a > 0) & (a <= 0.5)])
        if a.size < 2:
            raise ValueError("false_positive_rates must hold at least two rates in (0, 1/2]")
        if self._core.empty:
            return 0.0
        from pld.report.risk import TradeOff

        curve = TradeOff(self.pld())
        # (mass at +inf: the TPR at FPR 0, certified from below)
        if curve.tpr([0.0]).lower[0] > a[0]:
            return math.inf
        return curve.gdp(a).mu_upper

    def __repr__(self) -> str:
        components = len({m for m, _ in self._core.history})
        state = "non-private" if self._non_private is not None else f"{components} components"
        return f"PLDAccountant({self.neighboring_relation.name}, {state})"
