"""pld as a backend for Google's ``dp_accounting`` library.

Importing this module imports ``dp_accounting`` (nothing else in pld does)::

    from pld.interop.dp_accounting import PLDAccountant, from_dp_event

    accountant = PLDAccountant()          # was: dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, 1000))
    eps = accountant.get_epsilon(1e-5)    # certified upper bound
    lo, hi = accountant.get_epsilon_bounds(1e-5)

Conversion of a ``DpEvent`` tree (:func:`from_dp_event`)
--------------------------------------------------------
``noise_multiplier`` is, as documented for ``dp_accounting.GaussianDpEvent``,
the noise scale divided by the norm bound ``C`` on one record's contribution.
Under ``REPLACE_ONE`` a replaced record moves the sum by up to ``2 C``, so the
Gaussian pair has sensitivity 2 -- which is what dp_accounting's own
``PLDAccountant`` computes for ``REPLACE_ONE`` and what
``pld.SampledWithoutReplacement`` assumes.

===================================  ==============  ================================================
event                                relation        pld mechanism
===================================  ==============  ================================================
``GaussianDpEvent(s)``               add/remove      ``Gaussian(sigma=s)``
``GaussianDpEvent(s)``               replace         ``Gaussian(sigma=s, sensitivity=2)``
``LaplaceDpEvent(s)``                add/remove      ``Laplace(scale=s)``
``DiscreteLaplaceDpEvent(a, k)``     add/remove      ``DiscreteLaplace(scale=1/a, sensitivity=k)``
``RandomizedResponseDpEvent(p, k)``  replace         pair "input a" vs "input b" (``FromPMFs``;
                                                     ``RandomizedResponse`` for ``k = 2``)
``PoissonSampledDpEvent(q, e)``      add/remove      ``PoissonSampled(base(e), q)``
``SampledWithoutReplacementDpEvent`` replace         ``SampledWithoutReplacement(Gaussian(s), m / n)``
``SelfComposedDpEvent(e, n)``        any             ``n``-fold composition
``ComposedDpEvent([...])``           any             composition
``NoOpDpEvent()``                    any             nothing (a neutral PLD if it is the whole tree)
``NonPrivateDpEvent()``              any             epsilon = inf (see below)
===================================  ==============  ================================================

* The event inside a sampled event may be a Gaussian, or a tree of
  ``ComposedDpEvent`` / ``SelfComposedDpEvent`` / ``NoOpDpEvent`` bottoming out in
  Gaussians (the sampled record takes part in all of them, so they fold into
  one Gaussian with ``s_eff = (sum_i n_i / s_i^2)^(-1/2)``, as in
  dp_accounting's RDP accountant); under Poisson sampling it may also be a
  Laplace, a discrete Laplace or another Poisson-sampled event.
* Sampling schemes keep their own adjacency: Poisson sampling is accounted
  only under ``ADD_OR_REMOVE_ONE`` and sampling without replacement only under
  ``REPLACE_ONE`` (dp_accounting's RDP accountant makes the same split; its
  PLD accountant does not support sampling without replacement at all).
  ``SampledWithoutReplacementDpEvent`` is accounted with the dominating pair of
  Dong, Roth & Su (``pld.SampledWithoutReplacement``).  Beware that
  dp_accounting's *RDP* accountant uses the base RDP ``alpha / (2 s^2)`` for
  it, i.e. replace-one sensitivity ``C`` instead of ``2 C``; pld follows the
  ``GaussianDpEvent`` definition (and dp_accounting's PLD accountant), so for
  the same event its epsilon can exceed that RDP figure.
* ``SelfComposedDpEvent(RandomizedResponseDpEvent(...), n)`` is composed ``n``
  times.  (dp_accounting 0.6.0's own ``PLDAccountant`` composes a randomized
  response event once whatever its count; spell the runs out as a
  ``ComposedDpEvent`` to compare with it.)
* A zero noise parameter (or a ``RandomizedResponseDpEvent`` with
  ``noise_parameter = 0``) makes the event non-private, like
  ``NonPrivateDpEvent``; a zero sampling probability, ``k = 1`` buckets or
  ``noise_parameter = 1`` makes it a no-op.

Non-private events
------------------
``NonPrivateDpEvent`` means epsilon = inf.  A :class:`pld.PLD` cannot express
that (its answers are finite brackets), so :func:`from_dp_event` raises
:class:`NonPrivateEventError` for a tree that contains one (with a non-zero
count), while :class:`PLDAccountant` records it and then reports
``get_epsilon(delta) = inf`` for every ``delta`` and ``get_delta(epsilon) = 1``
for every ``epsilon``, exactly as dp_accounting's accountants do.

Anything else (``SampledWithReplacementDpEvent``, ``ZCDpEvent``,
``UnsupportedDpEvent``, an event under the wrong neighbouring relation, invalid
parameters, ...) raises :class:`UnsupportedEventError`, which names the event
type and subclasses ``dp_accounting.UnsupportedEventError``.
"""

from __future__ import annotations

import math
from typing import Optional

try:
    from dp_accounting import dp_event as _ev
    from dp_accounting import privacy_accountant as _pa
except ImportError as exc:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError(
        "pld.interop.dp_accounting needs the dp_accounting package "
        "(pip install dp-accounting)") from exc

import pld as _pld
from pld import _validate as _v

NeighboringRelation = _pa.NeighboringRelation
_AOR = NeighboringRelation.ADD_OR_REMOVE_ONE
_REPLACE = NeighboringRelation.REPLACE_ONE
_SUPPORTED_RELATIONS = (_AOR, _REPLACE)

__all__ = [
    "from_dp_event",
    "PLDAccountant",
    "UnsupportedEventError",
    "NonPrivateEventError",
    "NeighboringRelation",
]


class UnsupportedEventError(_pa.UnsupportedEventError):
    """A ``DpEvent`` (or a sub-event of it) that pld cannot account.

    ``error.event`` is the offending (sub-)event and ``error.reason`` says why.
    A subclass of ``dp_accounting.UnsupportedEventError``, so code written for
    dp_accounting's accountants catches it unchanged.
    """

    def __init__(self, event, reason: str | None = None):
        self.event = event
        self.reason = reason or "pld has no conversion for this event type"
        super().__init__(f"{type(event).__name__} is not supported: {self.reason} (event: {event!r})")


class NonPrivateEventError(ValueError):
    """The event tree contains a non-private event: epsilon is infinite.

    Raised by :func:`from_dp_event`, because a :class:`pld.PLD` only expresses
    finite guarantees.  :class:`PLDAccountant` instead reports ``inf``.
    """

    def __init__(self, event):
        self.event = event
        super().__init__(
            f"{type(event).__name__} is not differentially private (epsilon = inf for every delta < 1); "
            "a pld.PLD cannot represent it. PLDAccountant accepts it and reports epsilon = inf.")


def _relation(value) -> "NeighboringRelation":
    if not isinstance(value, NeighboringRelation):
        raise TypeError(f"neighboring_relation must be a dp_accounting.NeighboringRelation, got {value!r}")
    if value not in _SUPPORTED_RELATIONS:
        raise ValueError(
            f"neighboring_relation {value.name} is not supported by pld; use ADD_OR_REMOVE_ONE "
            "(Poisson sampling) or REPLACE_ONE (sampling without replacement)")
    return value


# ------------------------------------------------------------------ walking
class _Plan:
    """What an event tree amounts to: ``(mechanism, count)`` pairs, or non-private."""

    __slots__ = ("components", "non_private")

    def __init__(self):
        self.components: dict = {}  # mechanism -> count (insertion ordered)
        self.non_private: Optional[object] = None  # the first non-private event seen

    def add(self, mechanism, count: int) -> None:
        if count > 0:
            self.components[mechanism] = self.components.get(mechanism, 0) + count

    def mark_non_private(self, event, count: int) -> None:
        if count > 0 and self.non_private is None:
            self.non_private = event


def _number(event, name: str, value, *, low: float = 0.0, high: float = math.inf) -> float:
    """A finite-or-inf float in [low, high], or UnsupportedEventError naming the field."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UnsupportedEventError(event, f"{name} must be a real number, got {value!r}") from None
    if math.isnan(x) or x < low or x > high:
        raise UnsupportedEventError(event, f"{name} must be in [{low}, {high}], got {value!r}")
    return x


def _count(event, value) -> int:
    if isinstance(value, bool):
        raise UnsupportedEventError(event, f"count must be a non-negative integer, got {value!r}")
    try:
        n = _v.integer("count", value, low=0)
    except (TypeError, ValueError):
        raise UnsupportedEventError(event, f"count must be a non-negative integer, got {value!r}") from None
    return n


def _need(event, relation, allowed: tuple, what: str) -> None:
    if relation not in allowed:
        names = " or ".join(r.name for r in allowed)
        raise UnsupportedEventError(
            event, f"{what} is accounted under {names} only; this accountant uses {relation.name}")


def _gaussian_inverse_variance(event, outer) -> Optional[float]:
    """``sum_i n_i / s_i^2`` over a Composed/SelfComposed/NoOp tree of Gaussians.

    Returns ``inf`` for zero noise, ``0`` for no Gaussian at all, and raises for
    anything that is not such a tree (``outer`` names the sampled event).
    """
    if isinstance(event, _ev.GaussianDpEvent):
        s = _number(event, "noise_multiplier", event.noise_multiplier)
        return math.inf if s == 0 else (0.0 if math.isinf(s) else 1.0 / (s * s))
    if isinstance(event, _ev.NoOpDpEvent):
        return 0.0
    if isinstance(event, _ev.SelfComposedDpEvent):
        n = _count(event, event.count)
        inner = _gaussian_inverse_variance(event.event, outer)
        return 0.0 if n == 0 else n * inner
    if isinstance(event, _ev.ComposedDpEvent):
        return sum((_gaussian_inverse_variance(e, outer) for e in event.events), 0.0)
    raise UnsupportedEventError(
        event, f"the event inside a {type(outer).__name__} must be a GaussianDpEvent or a "
        "ComposedDpEvent/SelfComposedDpEvent tree of them" +
        (", a LaplaceDpEvent, a DiscreteLaplaceDpEvent or a PoissonSampledDpEvent"
         if isinstance(outer, _ev.PoissonSampledDpEvent) else ""))


def _poisson_base(event, outer):
    """The pld mechanism run on the Poisson sample, ``None`` (no-op) or ``"nonprivate"``."""
    if isinstance(event, _ev.LaplaceDpEvent):
        s = _number(event, "noise_multiplier", event.noise_multiplier)
        if s == 0:
            return "nonprivate"
        return None if math.isinf(s) else _pld.Laplace(scale=s)
    if isinstance(event, _ev.DiscreteLaplaceDpEvent):
        return _discrete_laplace(event)
    if isinstance(event, _ev.PoissonSampledDpEvent):
        q = _number(event, "sampling_probability", event.sampling_probability, high=1.0)
        inner = _poisson_base(event.event, event)
        if q == 0 or inner is None:
            return None
        if inner == "nonprivate":
            return "nonprivate"
        return _pld.PoissonSampled(inner, q)
    iv = _gaussian_inverse_variance(event, outer)
    if math.isinf(iv):
        return "nonprivate"
    return None if iv == 0 else _pld.Gaussian(sigma=1.0 / math.sqrt(iv))


def _discrete_laplace(event):
    a = _number(event, "noise_parameter", event.noise_parameter)
    try:
        k = _v.integer("sensitivity", event.sensitivity, low=0)
    except (TypeError, ValueError):
        raise UnsupportedEventError(
            event, f"sensitivity must be a non-negative integer, got {event.sensitivity!r}") from None
    if k == 0 or math.isinf(a):
        return None
    if a == 0:
        return "nonprivate"
    return _pld.DiscreteLaplace(scale=1.0 / a, sensitivity=k)


def _randomized_response(event):
    """Replace-one pair of k-ary randomized response: input ``a`` vs input ``b``."""
    p = _number(event, "noise_parameter", event.noise_parameter, high=1.0)
    try:
        k = _v.integer("num_buckets", event.num_buckets, low=1)
    except (TypeError, ValueError):
        raise UnsupportedEventError(
            event, f"num_buckets must be a positive integer, got {event.num_buckets!r}") from None
    if k == 1 or p == 1.0:
        return None  # the output does not depend on the input
    if p == 0.0:
        return "nonprivate"
    keep, other = 1.0 - p + p / k, p / k
    if k == 2:
        return _pld.RandomizedResponse(epsilon=math.log(keep / other))
    rest = 1.0 - keep - other  # the k - 2 buckets with loss 0 merge into one outcome
    return _pld.FromPMFs(p=(keep, other, rest), q=(other, keep, rest))


def _walk(event, count: int, relation, plan: _Plan) -> None:
    """Add ``count`` runs of ``event`` to ``plan`` or raise UnsupportedEventError."""
    if not isinstance(event, _ev.DpEvent):
        raise UnsupportedEventError(event, "not a dp_accounting DpEvent")
    if isinstance(event, _ev.NoOpDpEvent):
        return
    if isinstance(event, _ev.NonPrivateDpEvent):
        plan.mark_non_private(event, count)
        return
    if isinstance(event, _ev.SelfComposedDpEvent):
        _walk(event.event, count * _count(event, event.count), relation, plan)
        return
    if isinstance(event, _ev.ComposedDpEvent):
        for e in event.events:
            _walk(e, count, relation, plan)
        return

    if isinstance(event, _ev.GaussianDpEvent):
        s = _number(event, "noise_multiplier", event.noise_multiplier)
        sensitivity = 2.0 if relation == _REPLACE else 1.0  # a replaced record moves the sum by 2 C
        mech = "nonprivate" if s == 0 else (
            None if math.isinf(s) else _pld.Gaussian(sigma=s, sensitivity=sensitivity))
    elif isinstance(event, _ev.LaplaceDpEvent):
        _need(event, relation, (_AOR,), "the Laplace mechanism")
        mech = _poisson_base(event, event)
    elif isinstance(event, _ev.DiscreteLaplaceDpEvent):
        _need(event, relation, (_AOR,), "the discrete Laplace mechanism")
        mech = _discrete_laplace(event)
    elif isinstance(event, _ev.RandomizedResponseDpEvent):
        _need(event, relation, (_REPLACE,), "randomized response (its pair is input a vs input b)")
        mech = _randomized_response(event)
    elif isinstance(event, _ev.PoissonSampledDpEvent):
        _need(event, relation, (_AOR,), "Poisson sampling")
        mech = _poisson_base(event, event)
    elif isinstance(event, _ev.SampledWithoutReplacementDpEvent):
        _need(event, relation, (_REPLACE,), "sampling without replacement")
        try:
            n = _v.integer("source_dataset_size", event.source_dataset_size, low=1)
            m = _v.integer("sample_size", event.sample_size, low=0, high=n)
        except (TypeError, ValueError) as exc:
            raise UnsupportedEventError(event, str(exc)) from None
        iv = _gaussian_inverse_variance(event.event, event)
        if m == 0 or iv == 0:
            mech = None
        elif math.isinf(iv):
            mech = "nonprivate"
        else:
            # pld's substitute pair takes the per-record bound: mu = 2 * sensitivity / sigma = 2 / s
            mech = _pld.SampledWithoutReplacement(_pld.Gaussian(sigma=1.0 / math.sqrt(iv)), m / n)
    else:
        raise UnsupportedEventError(event)

    if mech == "nonprivate":
        plan.mark_non_private(event, count)
    elif mech is not None:
        plan.add(mech, count)


def _plan(event, relation, count: int = 1) -> _Plan:
    plan = _Plan()
    _walk(event, count, relation, plan)
    return plan


def _neutral_pld(value_discretization_interval=None) -> "_pld.PLD":
    return _pld.FromPMFs(p=(1.0,), q=(1.0,)).pld(value_discretization_interval=value_discretization_interval)


# ------------------------------------------------------------ public API
def from_dp_event(event, *, neighboring_relation=_AOR,
                  value_discretization_interval: float | None = None) -> "_pld.PLD":
    """The :class:`pld.PLD` of a ``dp_accounting.DpEvent`` tree.

    Parameters
    ----------
    event : dp_accounting.DpEvent
        The tree to convert (see the module docstring for the supported events).
    neighboring_relation : dp_accounting.NeighboringRelation
        ``ADD_OR_REMOVE_ONE`` (default; Poisson sampling) or ``REPLACE_ONE``
        (sampling without replacement, randomized response).
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
    NonPrivateEventError
        The tree contains a ``NonPrivateDpEvent`` (or zero noise): epsilon = inf.
    """
    relation = _relation(neighboring_relation)
    plan = _plan(event, relation)
    if plan.non_private is not None:
        raise NonPrivateEventError(plan.non_private)
    if not plan.components:
        return _neutral_pld(value_discretization_interval)
    return _pld.PLD(tuple(plan.components.items()), value_discretization_interval=value_discretization_interval)


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
        ``ADD_OR_REMOVE_ONE`` (default) or ``REPLACE_ONE``.
    value_discretization_interval : float, optional
        ``None`` (default): pld chooses the grid per query so the bracket is
        narrow.  A number fixes pld's grid spacing (the answers stay certified,
        the bracket may be wider); accepted so that code written for
        dp_accounting's ``PLDAccountant(..., value_discretization_interval=...)``
        runs unchanged.
    """

    def __init__(self, neighboring_relation=_AOR, value_discretization_interval: float | None = None):
        relation = _relation(neighboring_relation)
        if value_discretization_interval is not None:
            value_discretization_interval = _v.real(
                "value_discretization_interval", value_discretization_interval, low=0.0, low_open=True)
        super().__init__(relation)
        self._value_discretization_interval = value_discretization_interval
        self._components: dict = {}
        self._non_private = None
        self._pld_cache = None
        self._answers: dict = {}  # (kind, value) -> bracket, until the next compose

    # ------------------------------------------------------------ composing
    def _maybe_compose(self, event, count: int, do_compose: bool):
        try:
            plan = _plan(event, self.neighboring_relation, _count(event, count))
        except UnsupportedEventError as exc:
            return self.CompositionErrorDetails(invalid_event=exc.event, error_message=exc.reason)
        if do_compose:
            self._apply(plan)
        return None

    def _apply(self, plan: "_Plan") -> None:
        for mech, k in plan.components.items():
            self._components[mech] = self._components.get(mech, 0) + k
        if plan.non_private is not None and self._non_private is None:
            self._non_private = plan.non_private
        if plan.components:
            self._pld_cache = None
            self._answers = {}

    def compose(self, event, count: int = 1) -> "PLDAccountant":
        """Account for ``count`` runs of ``event``; returns ``self``.

        Raises :class:`UnsupportedEventError` (a ``dp_accounting``
        ``UnsupportedEventError``) naming the offending sub-event's type, and
        leaves the accountant unchanged, if any part of ``event`` is unsupported.
        """
        if not isinstance(event, _ev.DpEvent):
            raise TypeError(f"`event` must be `DpEvent`. Found {type(event)}.")
        count = _count(event, count)
        try:
            plan = _plan(event, self.neighboring_relation, count)
        except UnsupportedEventError as exc:
            if exc.event is event:
                raise
            raise UnsupportedEventError(exc.event, f"{exc.reason} (inside the {type(event).__name__} passed to "
                                                   "compose)") from None
        self._ledger.compose(event, count)
        self._apply(plan)
        return self

    # -------------------------------------------------------------- queries
    @property
    def contains_non_private_event(self) -> bool:
        """True once a non-private event (epsilon = inf) has been composed."""
        return self._non_private is not None

    def pld(self) -> "_pld.PLD":
        """The composed :class:`pld.PLD` (neutral if nothing private was composed).

        Raises :class:`NonPrivateEventError` after a non-private event.
        """
        if self._non_private is not None:
            raise NonPrivateEventError(self._non_private)
        if self._pld_cache is None:
            if self._components:
                self._pld_cache = _pld.PLD(tuple(self._components.items()),
                                           value_discretization_interval=self._value_discretization_interval)
            else:
                self._pld_cache = _neutral_pld(self._value_discretization_interval)
        return self._pld_cache

    def get_epsilon_bounds(self, target_delta: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on epsilon at ``target_delta`` in (0, 1)."""
        target_delta = _v.real("target_delta", target_delta, low=0.0, high=1.0, low_open=True, high_open=True)
        if self._non_private is not None:
            return math.inf, math.inf
        if not self._components:
            return 0.0, 0.0
        key = ("eps", target_delta)
        if key not in self._answers:  # repeated queries give the same answer
            self._answers[key] = self.pld().epsilon_bounds(target_delta)
        return self._answers[key]

    def get_epsilon(self, target_delta: float) -> float:
        """Certified epsilon at ``target_delta`` (upper end of :meth:`get_epsilon_bounds`)."""
        return self.get_epsilon_bounds(target_delta)[1]

    def get_delta_bounds(self, target_epsilon: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on delta at ``target_epsilon``."""
        target_epsilon = _v.real("target_epsilon", target_epsilon)
        if self._non_private is not None:
            return 1.0, 1.0
        if not self._components:
            d = max(0.0, -math.expm1(target_epsilon))  # identity pair: (1 - e^eps)_+
            return d, d
        key = ("delta", target_epsilon)
        if key not in self._answers:
            self._answers[key] = self.pld().delta_bounds(target_epsilon)
        return self._answers[key]

    def get_delta(self, target_epsilon: float) -> float:
        """Certified delta at ``target_epsilon`` (upper end of :meth:`get_delta_bounds`)."""
        return self.get_delta_bounds(target_epsilon)[1]

    def __getstate__(self):  # pickling / deepcopy: a composed PLD holds locks; rebuild it on demand
        state = self.__dict__.copy()
        state["_pld_cache"] = None
        return state

    def __repr__(self) -> str:
        state = "non-private" if self._non_private is not None else f"{len(self._components)} components"
        return f"PLDAccountant({self.neighboring_relation.name}, {state})"
