"""dp_accounting events as pld mechanisms: the walk over a ``DpEvent`` tree.

:func:`plan_of` turns an event tree into ``(mechanism, count)`` pairs (a
:class:`Plan`), or marks it non-private; the errors say which sub-event pld
cannot account and why.  :mod:`pld.interop.dp_accounting` builds its public
``from_dp_event`` and ``PLDAccountant`` on it; its module docstring lists the
supported events and their pairs.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from dp_accounting import dp_event as _ev
    from dp_accounting import privacy_accountant as _pa
    from dp_accounting.privacy_accountant import NeighboringRelation
except ImportError as exc:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError(
        "pld.interop.dp_accounting needs the dp_accounting package "
        "(pip install dp-accounting)") from exc

import pld as _pld
from pld import _validate as _v

_AOR = NeighboringRelation.ADD_OR_REMOVE_ONE
_REPLACE = NeighboringRelation.REPLACE_ONE
_SPECIAL = NeighboringRelation.REPLACE_SPECIAL
_SUPPORTED_RELATIONS = (_AOR, _REPLACE, _SPECIAL)

__all__ = [
    "UnsupportedEventError",
    "InvalidEventError",
    "NonPrivateEventError",
    "NeighboringRelation",
    "Plan",
    "plan_of",
    "relation_of",
    "event_count",
    "neutral_pld",
]


class UnsupportedEventError(_pa.UnsupportedEventError):
    """A ``DpEvent`` (or a sub-event of it) that pld cannot account.

    ``error.event`` is the offending (sub-)event and ``error.reason`` says why.
    A subclass of ``dp_accounting.UnsupportedEventError``, so code written for
    dp_accounting's accountants catches it unchanged.  With ``outer`` (the
    event passed to ``compose``) the message takes dp_accounting's form,
    ``Unsupported event: ... Error: [...] caused by subevent ...``.
    """

    def __init__(self, event, reason: str | None = None, outer=None):
        self.event = event
        self.reason = reason or "pld has no conversion for this event type"
        if outer is None:
            msg = f"{type(event).__name__} is not supported: {self.reason} (event: {event!r})"
        else:
            msg = f"Unsupported event: {outer!r}. Error: [{self.reason}] caused by subevent {event!r}."
        super().__init__(msg)

    def within(self, outer) -> UnsupportedEventError:
        """The same error, worded for ``compose(outer)``."""
        return type(self)(self.event, self.reason, outer)


class InvalidEventError(UnsupportedEventError, ValueError):
    """A parameter of a ``DpEvent`` is out of its valid range (bad input).

    Both an :class:`UnsupportedEventError` (so ``supports`` is False) and a
    ``ValueError``; the message names the parameter and the range.
    """


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


def relation_of(value) -> NeighboringRelation:
    if not isinstance(value, NeighboringRelation):
        raise TypeError(f"neighboring_relation must be a dp_accounting.NeighboringRelation, got {value!r}")
    if value not in _SUPPORTED_RELATIONS:  # pragma: no cover - every member is supported
        raise ValueError(f"neighboring_relation must be one of {[r.name for r in _SUPPORTED_RELATIONS]}, "
                         f"got {value!r}")
    return value


# ------------------------------------------------------------------ walking
class Plan:
    """What an event tree amounts to: ``(mechanism, count)`` pairs, or non-private."""

    __slots__ = ("components", "non_private")

    def __init__(self):
        self.components: dict = {}  # mechanism -> count (insertion ordered)
        self.non_private: object | None = None  # the first non-private event seen

    def add(self, mechanism, count: int) -> None:
        if count > 0:
            self.components[mechanism] = self.components.get(mechanism, 0) + count

    def mark_non_private(self, event, count: int) -> None:
        if count > 0 and self.non_private is None:
            self.non_private = event


def _number(event, name: str, value, *, low: float = 0.0, high: float = math.inf) -> float:
    """A finite-or-inf float in [low, high], or InvalidEventError naming the field."""
    try:
        return _v.real(name, value, low=low, high=high, allow_inf=True)
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(event, str(exc)) from None


def _int(event, name: str, value, *, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool):
        raise InvalidEventError(event, f"{name} must be an integer >= {low}, got {value!r}")
    try:
        return _v.integer(name, value, low=low, high=high)
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(event, str(exc)) from None


def event_count(event, value) -> int:
    return _int(event, "count", value, low=0)


def _need(event, relation, allowed: tuple, what: str | None = None) -> None:
    """dp_accounting's wording for an event under a relation it does not pair with."""
    if relation not in allowed:
        names = " or ".join(f"`{r.name}`" for r in allowed)
        what = what or f"`{type(event).__name__}`"
        raise UnsupportedEventError(
            event, f"neighboring_relation must be {names} for {what}. Found {relation}.")


def _gaussian_inverse_variance(event, outer) -> float:
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
        n = event_count(event, event.count)
        inner = _gaussian_inverse_variance(event.event, outer)
        return 0.0 if n == 0 else n * inner
    if isinstance(event, _ev.ComposedDpEvent):
        return sum((_gaussian_inverse_variance(e, outer) for e in event.events), 0.0)
    raise UnsupportedEventError(
        event, f"the event inside a {type(outer).__name__} must be a GaussianDpEvent or a "
        "ComposedDpEvent/SelfComposedDpEvent tree of them" +
        (", a LaplaceDpEvent, a DiscreteLaplaceDpEvent or a PoissonSampledDpEvent"
         if isinstance(outer, _ev.PoissonSampledDpEvent) else ""))


def _folded_gaussian(event, outer):
    """One Gaussian for a tree of Gaussians run on the same sample, ``None`` or ``"nonprivate"``."""
    iv = _gaussian_inverse_variance(event, outer)
    if math.isinf(iv):
        return "nonprivate"
    return None if iv == 0 else _pld.Gaussian(sigma=1.0 / math.sqrt(iv))


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
    return _folded_gaussian(event, outer)


def _poisson_substitute(event):
    """``PoissonSampledDpEvent`` under REPLACE_ONE: Gaussian trees, nested Poisson rates multiply."""
    rate, inner = 1.0, event
    while isinstance(inner, _ev.PoissonSampledDpEvent):
        rate *= _number(inner, "sampling_probability", inner.sampling_probability, high=1.0)
        outer, inner = inner, inner.event
    if isinstance(inner, (_ev.LaplaceDpEvent, _ev.DiscreteLaplaceDpEvent)):
        _need(event, _REPLACE, (_AOR, _SPECIAL),
              f"`PoissonSampledDpEvent` of a `{type(inner).__name__}` (pld has a substitute-adjacency "
              "pair for the Gaussian only)")
    base = _folded_gaussian(inner, outer)
    if rate == 0 or base is None:
        return None
    if base == "nonprivate":
        return "nonprivate"
    return _pld.PoissonSampledSubstitute(base, rate)


def _discrete_laplace(event):
    a = _number(event, "noise_parameter", event.noise_parameter)
    k = _int(event, "sensitivity", event.sensitivity, low=0)
    if k == 0 or math.isinf(a):
        return None
    if a == 0:
        return "nonprivate"
    return _pld.DiscreteLaplace(scale=1.0 / a, sensitivity=k)


def _randomized_response(event, relation):
    """k-ary randomized response: input a vs input b (REPLACE_ONE) or vs the special input."""
    p = _number(event, "noise_parameter", event.noise_parameter, high=1.0)
    k = _int(event, "num_buckets", event.num_buckets, low=1)
    if k == 1 or p == 1.0:
        return None  # the output does not depend on the input
    if p == 0.0:
        return "nonprivate"
    keep, other = 1.0 - p + p / k, p / k
    if relation == _SPECIAL:
        # the special input's output is uniform; the k - 1 buckets other than
        # the input share one loss and merge into one outcome
        return _pld.FromPMFs(p=(keep, 1.0 - keep), q=(1.0 / k, 1.0 - 1.0 / k))
    if k == 2:
        return _pld.RandomizedResponse(epsilon=math.log(keep / other))
    rest = 1.0 - keep - other  # the k - 2 buckets with loss 0 merge into one outcome
    return _pld.FromPMFs(p=(keep, other, rest), q=(other, keep, rest))


def _mixture_of_gaussians(event):
    s = _number(event, "standard_deviation", event.standard_deviation)
    try:
        sens = [float(c) for c in event.sensitivities]
        probs = [float(w) for w in event.sampling_probs]
    except (TypeError, ValueError):
        raise InvalidEventError(event, "sensitivities and sampling_probs must be sequences of real numbers") \
            from None
    if len(sens) != len(probs) or not sens:
        raise InvalidEventError(event, f"sensitivities and sampling_probs must be non-empty and of the same "
                                       f"length, got {len(sens)} and {len(probs)}")
    if any(not (c >= 0.0 and math.isfinite(c)) for c in sens):
        raise InvalidEventError(event, f"sensitivities must be finite and >= 0, got {event.sensitivities!r}")
    if any(not (0.0 <= w <= 1.0) for w in probs) or abs(sum(probs) - 1.0) > 1e-9:
        raise InvalidEventError(event, f"sampling_probs must be probabilities summing to 1, "
                                       f"got {event.sampling_probs!r}")
    if not any(c > 0 and w > 0 for c, w in zip(sens, probs)):
        return None  # every sampled sensitivity is 0: the output ignores the record
    if s == 0:
        return "nonprivate"
    if math.isinf(s):
        return None
    return _pld.MixtureOfGaussians(s, tuple(sens), tuple(probs))


_TSG_ADJACENCY = {_AOR: "add_or_remove", _REPLACE: "substitute", _SPECIAL: "replace_special"}


def _truncated_subsampled_gaussian(event, relation):
    n = _int(event, "dataset_size", event.dataset_size, low=0)
    p = _number(event, "sampling_probability", event.sampling_probability, high=1.0)
    b = _int(event, "truncated_batch_size", event.truncated_batch_size, low=0)
    s = _number(event, "noise_multiplier", event.noise_multiplier)
    if n == 0 or p == 0 or b == 0 or math.isinf(s):
        return None  # nothing about the data reaches the output
    if s == 0:
        return "nonprivate"
    return _pld.TruncatedPoissonGaussian(s, n, p, b, _TSG_ADJACENCY[relation])


def _tree_aggregation(event):
    s = _number(event, "noise_multiplier", event.noise_multiplier)
    steps = event.step_counts
    steps = [steps] if not isinstance(steps, (list, tuple)) else list(steps)
    if not steps:
        raise InvalidEventError(event, "step_counts must be a non-negative integer or a non-empty list of them")
    steps = [_int(event, "step_counts", x, low=0) for x in steps]
    # a record is in at most one released node per level of its tree: the
    # dyadic intervals of [1, T] holding its step, floor(log2 T) + 1 of them
    depth = max(steps).bit_length()
    if depth == 0 or math.isinf(s):
        return None
    if s == 0:
        return "nonprivate"
    return _pld.Gaussian(sigma=s, sensitivity=math.sqrt(depth))


_REFUSED = {
    _ev.ZCDpEvent: "a zCDP bound constrains a whole Renyi curve that many pairs satisfy; pld would need the "
                   "least favourable of them, which it does not implement (use dp_accounting's RDP accountant)",
    _ev.SampledWithReplacementDpEvent: "pld has no proven dominating pair for sampling with replacement (a "
                                       "record may enter a batch several times)",
    _ev.RepeatAndSelectDpEvent: "pld has no dominating pair for repeat-and-select: Papernot & Steinke's bounds "
                                "(ICLR 2022) are Renyi-DP bounds, which no single pair pld could compose attains",
}


def _epsilon_delta(event):
    """``EpsilonDeltaDpEvent(epsilon, delta)``: any (epsilon, delta)-DP mechanism, through its
    worst-case pair (Kairouz, Oh & Viswanath 2015; :class:`pld.ApproxDP`)."""
    e = _number(event, "epsilon", event.epsilon)
    d = _number(event, "delta", event.delta, high=1.0)
    if d >= 1.0 or math.isinf(e):
        return "nonprivate"
    if e == 0.0 and d == 0.0:
        return None  # the output does not depend on the input
    try:
        return _pld.ApproxDP(epsilon=e, delta=d)
    except ValueError as exc:
        raise InvalidEventError(event, str(exc)) from None


def _discrete_gaussian(event):
    """``DiscreteGaussianDpEvent(sigma, sensitivity, dimension)``: the univariate discrete
    Gaussian's exact pair (Canonne, Kamath & Steinke 2020; ``pld.mechanisms.discrete_gaussian``)."""
    s = _number(event, "sigma", event.sigma)
    k = _number(event, "sensitivity", getattr(event, "sensitivity", 1.0))
    dim = getattr(event, "dimension", None)
    if dim != 1:
        raise UnsupportedEventError(
            event, f"dimension must be 1 (got {dim!r}): a multivariate (or unknown-dimension) discrete Gaussian's "
                   "worst case depends on the direction of the difference vector, not only on its L2 norm, and "
                   "pld has no dominating pair for it")
    if k == 0 or math.isinf(s):
        return None
    if k != math.floor(k) or math.isinf(k):
        raise UnsupportedEventError(event, f"sensitivity must be an integer for a univariate discrete Gaussian "
                                           f"(an integer query moves by an integer), got {k!r}")
    if s == 0:
        return "nonprivate"
    try:
        from pld.mechanisms.discrete_gaussian import DiscreteGaussian
    except ImportError:  # pragma: no cover - the mechanism ships with pld
        raise UnsupportedEventError(event, "this pld has no discrete Gaussian mechanism") from None
    try:
        return DiscreteGaussian(sigma=s, sensitivity=int(k))
    except ValueError as exc:
        raise InvalidEventError(event, str(exc)) from None


def _selection(event):
    """``ExponentialMechanismDpEvent`` / ``PermuteAndFlipDpEvent``: epsilon-DP above, a
    two-candidate instance below (:mod:`pld.interop.selection`)."""
    from pld.interop.selection import ExponentialMechanism, PermuteAndFlip

    e = _number(event, "epsilon", event.epsilon)
    if e == 0.0:
        return None  # infinite noise: the output ignores the data
    if math.isinf(e):
        return "nonprivate"
    cls = ExponentialMechanism if type(event).__name__ == "ExponentialMechanismDpEvent" else PermuteAndFlip
    try:
        return cls(e)
    except ValueError as exc:
        raise InvalidEventError(event, str(exc)) from None


#: events newer than the installed dp_accounting, matched by class name (their fields as at its head)
_BY_NAME = {
    "EpsilonDeltaDpEvent": lambda event, relation: _epsilon_delta(event),
    "DiscreteGaussianDpEvent": lambda event, relation: _discrete_gaussian(event),
    "ExponentialMechanismDpEvent": lambda event, relation: _selection(event),
    "PermuteAndFlipDpEvent": lambda event, relation: _selection(event),
}


#: field names a random-allocation event may use (dp_accounting's RandomAllocationDpEvent is
#: recent: matched by name, so that the spellings of its releases all map)
_ALLOCATION_STEPS = ("num_steps", "steps", "num_compositions")
_ALLOCATION_SELECTED = ("num_selected", "participations", "num_selections", "num_epochs_selected")


def _field(event, names: tuple, default=None):
    for name in names:
        if hasattr(event, name):
            return name, getattr(event, name)
    if default is not None:
        return names[0], default
    fields = sorted(k for k in dir(event) if not k.startswith("_"))
    raise UnsupportedEventError(event, f"a random-allocation event needs one of {', '.join(names)}; "
                                       f"its fields are {', '.join(fields)}")


def _random_allocation(event, relation) -> list:
    """``RandomAllocationDpEvent``: each record in ``k`` of ``t`` steps of a Gaussian
    (add-or-remove; :class:`pld.RandomAllocation`).  Returns ``[(mechanism, count), ...]``."""
    _need(event, relation, (_AOR, _SPECIAL))
    t_name, t = _field(event, _ALLOCATION_STEPS)
    k_name, k = _field(event, _ALLOCATION_SELECTED, default=1)
    t = _int(event, t_name, t, low=1)
    k = _int(event, k_name, k, low=0, high=t)
    if k == 0:
        return [(None, 1)]  # in no step: nothing about the record is released (dp_accounting: no-op)
    inner = getattr(event, "event", None)
    if inner is not None:
        gauss = _folded_gaussian(inner, event)
    else:
        _, s = _field(event, ("noise_multiplier", "sigma"))
        s = _number(event, "noise_multiplier", s)
        gauss = "nonprivate" if s == 0 else (None if math.isinf(s) else _pld.Gaussian(sigma=s))
    if gauss is None or gauss == "nonprivate":
        return [(gauss, 1)]
    return list(_pld.RandomAllocation(gauss, t, k).pld().components)


def _walk(event, count: int, relation, plan: Plan) -> None:
    """Add ``count`` runs of ``event`` to ``plan`` or raise UnsupportedEventError."""
    mech: Any  # a pld mechanism, None (nothing released) or "nonprivate"
    if not isinstance(event, _ev.DpEvent):
        raise UnsupportedEventError(event, "not a dp_accounting DpEvent")
    if isinstance(event, _ev.NoOpDpEvent):
        return
    if isinstance(event, _ev.NonPrivateDpEvent):
        plan.mark_non_private(event, count)
        return
    if isinstance(event, _ev.SelfComposedDpEvent):
        _walk(event.event, count * event_count(event, event.count), relation, plan)
        return
    if isinstance(event, _ev.ComposedDpEvent):
        for e in event.events:
            _walk(e, count, relation, plan)
        return

    aor_like = (_AOR, _SPECIAL)
    if isinstance(event, _ev.GaussianDpEvent):
        s = _number(event, "noise_multiplier", event.noise_multiplier)
        sensitivity = 2.0 if relation == _REPLACE else 1.0  # a replaced record moves the sum by 2 C
        mech = "nonprivate" if s == 0 else (
            None if math.isinf(s) else _pld.Gaussian(sigma=s, sensitivity=sensitivity))
    elif isinstance(event, _ev.LaplaceDpEvent):
        _need(event, relation, aor_like)
        mech = _poisson_base(event, event)
    elif isinstance(event, _ev.DiscreteLaplaceDpEvent):
        _need(event, relation, aor_like)
        mech = _discrete_laplace(event)
    elif isinstance(event, _ev.MixtureOfGaussiansDpEvent):
        _need(event, relation, aor_like)
        mech = _mixture_of_gaussians(event)
    elif isinstance(event, _ev.RandomizedResponseDpEvent):
        _need(event, relation, (_REPLACE, _SPECIAL))
        mech = _randomized_response(event, relation)
    elif isinstance(event, _ev.PoissonSampledDpEvent):
        mech = _poisson_substitute(event) if relation == _REPLACE else _poisson_base(event, event)
    elif isinstance(event, _ev.SampledWithoutReplacementDpEvent):
        _need(event, relation, (_REPLACE,))
        n = _int(event, "source_dataset_size", event.source_dataset_size, low=1)
        m = _int(event, "sample_size", event.sample_size, low=0, high=n)
        iv = _gaussian_inverse_variance(event.event, event)
        if m == 0 or iv == 0:
            mech = None
        elif math.isinf(iv):
            mech = "nonprivate"
        else:
            # pld's substitute pair takes the per-record bound: mu = 2 * sensitivity / sigma = 2 / s
            mech = _pld.SampledWithoutReplacement(_pld.Gaussian(sigma=1.0 / math.sqrt(iv)), m / n)
    elif isinstance(event, _ev.TruncatedSubsampledGaussianDpEvent):
        mech = _truncated_subsampled_gaussian(event, relation)
    elif isinstance(event, _ev.SingleEpochTreeAggregationDpEvent):
        _need(event, relation, (_SPECIAL,))
        mech = _tree_aggregation(event)
    elif type(event).__name__ == "RandomAllocationDpEvent":
        for part, k in _random_allocation(event, relation):
            if part == "nonprivate":
                plan.mark_non_private(event, count)
            elif part is not None:
                plan.add(part, k * count)
        return
    elif type(event).__name__ in _BY_NAME:
        mech = _BY_NAME[type(event).__name__](event, relation)
    else:
        raise UnsupportedEventError(event, _REFUSED.get(type(event)))

    if mech == "nonprivate":
        plan.mark_non_private(event, count)
    elif mech is not None:
        plan.add(mech, count)


def plan_of(event, relation, count: int = 1) -> Plan:
    plan = Plan()
    _walk(event, count, relation, plan)
    return plan


def neutral_pld(value_discretization_interval=None) -> _pld.PLD:
    return _pld.FromPMFs(p=(1.0,), q=(1.0,)).pld(value_discretization_interval=value_discretization_interval)
