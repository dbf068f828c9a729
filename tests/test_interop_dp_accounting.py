"""pld as a dp_accounting backend: ``from_dp_event`` and ``PLDAccountant``.

Every event tree is run through dp_accounting's own ``PLDAccountant`` (default
``value_discretization_interval = 1e-4``) and through pld, and the two answers
are compared with tolerances that follow from what each answer is:

* pld returns a certified bracket ``lo <= eps_true <= hi``.
* dp_accounting's connect-the-dots PLD is *pessimistic*: its mass is a
  dominating discretisation and the mass it truncates goes to +inf, so its
  epsilon is an upper bound too, ``eps_true <= eps_dp``, up to floating point.
  Hence **``eps_dp >= lo``** must hold to rounding (``SOUND_SLACK``); a failure
  means one of the two certificates is broken.
* dp_accounting's *error* above the truth is not certified.  It has two parts:
  its answer is a point of its grid (rounded up by at most ``h = 1e-4``) and the
  connect-the-dots bias, which grows with the number and the spread of the
  composed steps (measured here: up to 2e-3 at eps = 34.7 for 20-fold
  randomized response, i.e. 6e-5 relative; 1.3e-4 at eps = 6.6).  pld's own
  bracket is at most ``1e-4 * eps + 1e-6`` wide.  So
  **``|eps_dp - hi| <= max(1e-3 * eps, 2e-4)``**: the relative term covers the
  accumulated bias with a 15x margin over what was measured, the absolute one
  the grid rounding (1e-4) plus bias at small epsilon.

Sampling without replacement has no dp_accounting PLD implementation; it is
compared against dp_accounting's RDP accountant (an upper bound, so pld's
certified epsilon must not exceed it) after aligning the sensitivity
conventions (see ``test_sampled_without_replacement_against_rdp``).
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest

dpa = pytest.importorskip("dp_accounting")

from dp_accounting import dp_event as ev  # noqa: E402
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant as DpPLDAccountant  # noqa: E402
from dp_accounting.rdp import RdpAccountant  # noqa: E402

import pld  # noqa: E402
from pld.interop.dp_accounting import (  # noqa: E402
    NonPrivateEventError,
    PLDAccountant,
    UnsupportedEventError,
    from_dp_event,
)

AOR = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = dpa.NeighboringRelation.REPLACE_ONE
SPECIAL = dpa.NeighboringRelation.REPLACE_SPECIAL

G = ev.GaussianDpEvent
L = ev.LaplaceDpEvent
DL = ev.DiscreteLaplaceDpEvent
RR = ev.RandomizedResponseDpEvent
P = ev.PoissonSampledDpEvent
SWOR = ev.SampledWithoutReplacementDpEvent
MOG = ev.MixtureOfGaussiansDpEvent
TSG = ev.TruncatedSubsampledGaussianDpEvent
TREE = ev.SingleEpochTreeAggregationDpEvent
S = ev.SelfComposedDpEvent
C = ev.ComposedDpEvent
NOOP = ev.NoOpDpEvent()

SOUND_SLACK = 1e-8  # relative: dp_accounting's upper bound vs pld's lower bound, rounding only


def _close_tol(eps: float, h: float = 1e-4) -> float:
    # (h: dp_accounting's grid; its answer is rounded up by up to one cell)
    return max(1e-3 * eps, 2 * h)


#: TREES entries whose dp_accounting side runs on a coarser grid: its mixture
#: of Gaussians takes ~1 minute at 1e-4 (pld: ~1 s)
DP_GRID = {"mixture_of_gaussians_x5": 1e-3, "mixture_of_gaussians_special": 1e-3}


# name -> (event for pld, relation, event for dp_accounting or None for the same)
TREES = {
    "gaussian": (G(2.0), AOR, None),
    "gaussian_x50": (S(G(5.0), 50), AOR, None),
    "laplace_x10": (S(L(2.0), 10), AOR, None),
    "poisson_gaussian_x1000": (S(P(0.01, G(1.0)), 1000), AOR, None),
    "poisson_laplace_x100": (S(P(0.05, L(2.0)), 100), AOR, None),
    "composed_mixed": (C([S(P(0.02, G(1.1)), 200), S(G(10.0), 3), L(5.0)]), AOR, None),
    "selfcomposed_of_composed": (S(C([G(3.0), L(4.0)]), 5), AOR, None),
    "noop_padding": (C([NOOP, S(G(2.0), 4), NOOP]), AOR, None),
    "nested": (C([C([G(4.0), S(G(4.0), 3)]), S(C([S(P(0.1, G(1.5)), 20), NOOP]), 5)]), AOR, None),
    "discrete_laplace_x5": (S(DL(0.5, 2), 5), AOR, None),
    "gaussian_replace_one": (S(G(3.0), 4), REPLACE, None),
    # dp_accounting 0.6.0's PLDAccountant drops the count of a randomized
    # response event (it composes rr_pld once, not count times), so it gets
    # the same 10 runs spelled out as a ComposedDpEvent.
    "randomized_response_4_x10": (S(RR(0.5, 4), 10), REPLACE, C([RR(0.5, 4)] * 10)),
    "randomized_response_2_x20": (S(RR(0.3, 2), 20), REPLACE, C([RR(0.3, 2)] * 20)),
    # q = 1 without replacement is the Gaussian under REPLACE_ONE (sensitivity 2C)
    "without_replacement_q1_x4": (S(SWOR(100, 100, G(6.0)), 4), REPLACE, S(G(6.0), 4)),
    # replacement by a special (zero) record: the add-or-remove pairs; randomized
    # response against a uniform output
    "gaussian_replace_special_x3": (S(G(2.0), 3), SPECIAL, None),
    "poisson_laplace_replace_special_x50": (S(P(0.05, L(2.0)), 50), SPECIAL, None),
    "discrete_laplace_replace_special_x3": (S(DL(0.5, 2), 3), SPECIAL, None),
    "randomized_response_special_x10": (S(RR(0.3, 4), 10), SPECIAL, C([RR(0.3, 4)] * 10)),
    # Poisson sampling under REPLACE_ONE: the same pair as dp_accounting's REPLACE adjacency
    "poisson_gaussian_replace_one_x300": (S(P(0.02, G(1.0)), 300), REPLACE, None),
    "mixture_of_gaussians_x5": (S(MOG(1.5, [0.0, 1.0, 2.0], [0.5, 0.3, 0.2]), 5), AOR, None),
    "mixture_of_gaussians_special": (C([MOG(1.0, [0.0, 1.0], [0.9, 0.1]), G(3.0)]), SPECIAL, None),
    # (truncated batches are not tight: see test_truncated_against_dp_accounting)
}


def _dp_epsilon(event, relation, delta, h=1e-4):
    acc = DpPLDAccountant(relation, value_discretization_interval=h)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("name", list(TREES))
def test_tree_matches_dp_accounting(name):
    event, relation, dp_event = TREES[name]
    delta = 1e-5
    h = DP_GRID.get(name, 1e-4)
    eps_dp = _dp_epsilon(dp_event or event, relation, delta, h)

    acc = PLDAccountant(relation)
    assert acc.supports(event)
    acc.compose(event)
    lo, hi = acc.get_epsilon_bounds(delta)
    assert acc.get_epsilon(delta) == hi

    assert 0.0 <= lo <= hi < math.inf
    assert hi - lo <= 1e-3 * hi + 1e-4, f"pld bracket [{lo}, {hi}] is not narrow"
    assert eps_dp >= lo - SOUND_SLACK * (1 + lo), \
        f"dp_accounting's pessimistic {eps_dp} is below pld's certified lower bound {lo}"
    assert abs(eps_dp - hi) <= _close_tol(hi, h), f"dp_accounting {eps_dp} vs pld [{lo}, {hi}]"

    # from_dp_event gives the same composition (a fresh PLD: the engine may pick
    # other grids for it, so its certified bracket need only overlap)
    d = from_dp_event(event, neighboring_relation=relation)
    assert isinstance(d, pld.PLD)
    assert d.components == acc.pld().components
    d_lo, d_hi = d.epsilon_bounds(delta)
    assert d_lo <= hi and lo <= d_hi


@pytest.mark.parametrize("name", ["poisson_gaussian_x1000", "composed_mixed", "randomized_response_4_x10"])
def test_delta_matches_dp_accounting(name):
    event, relation, dp_event = TREES[name]
    dp = DpPLDAccountant(relation)
    dp.compose(dp_event or event)
    acc = PLDAccountant(relation).compose(event)
    eps = 0.8 * acc.get_epsilon(1e-5)
    d_dp = dp.get_delta(eps)
    lo, hi = acc.get_delta_bounds(eps)
    assert acc.get_delta(eps) == hi
    assert 0.0 < lo <= hi < 1.0
    assert d_dp >= lo * (1 - 1e-8)  # both sound: dp_accounting's pessimistic delta is an upper bound
    # dp_accounting's epsilon error (module docstring) becomes a relative delta
    # error of (d log delta / d eps) * error: measured 1.3e-3 at most here.
    assert abs(d_dp - hi) <= 1e-2 * hi, f"dp_accounting {d_dp} vs pld [{lo}, {hi}]"


def test_sampled_without_replacement_against_rdp():
    """Fixed-size batches, replace-one adjacency: pld's certified epsilon is below RDP's.

    dp_accounting's RDP accountant uses the base RDP ``alpha / (2 s^2)`` for a
    ``SampledWithoutReplacementDpEvent`` of ``GaussianDpEvent(s)``, i.e.
    replace-one sensitivity ``1 * C``; pld (like dp_accounting's PLD accountant
    under REPLACE_ONE) uses ``2 * C``.  The RDP accountant therefore gets the
    same pair from ``GaussianDpEvent(s / 2)``.
    """
    for n, m, s, steps in [(1000, 10, 1.0, 1000), (60000, 256, 1.1, 2000)]:
        acc = PLDAccountant(REPLACE).compose(S(SWOR(n, m, G(s)), steps))
        lo, hi = acc.get_epsilon_bounds(1e-5)
        rdp = RdpAccountant(neighboring_relation=REPLACE)
        rdp.compose(S(SWOR(n, m, G(s / 2)), steps))
        eps_rdp = rdp.get_epsilon(1e-5)
        assert 0 < lo <= hi < eps_rdp
        # (not tight when composed: each end from its own pair, each narrow; see pld.SampledWithoutReplacement)
        upper, lower = acc.pld().bounds()
        for side in (upper, lower):
            s_lo, s_hi = side.epsilon_bounds(1e-5)
            assert s_hi - s_lo <= 1e-3 * s_hi
        # and it is more expensive than the same run with Poisson sampling
        assert lo > PLDAccountant().compose(S(P(m / n, G(s)), steps)).get_epsilon(1e-5)


@pytest.mark.parametrize("events, relation", [
    ([S(TSG(4, 0.5, 2, 1.0), 3), S(TSG(3, 0.5, 2, 1.0), 2)], AOR),  # dp_accounting's own test events
    ([S(TSG(200, 0.05, 20, 1.2), 20)], REPLACE),
    ([S(TSG(200, 0.05, 20, 1.2), 20)], SPECIAL),
])
def test_truncated_against_dp_accounting(events, relation):
    """``TruncatedSubsampledGaussianDpEvent`` is not tight in either library.

    dp_accounting mixes the uncut pair with its replace-one pair of
    sensitivity 2 for a cut batch; pld's cut part is the add-or-remove pair of
    radius 2, which that dominates (pld.TruncatedPoissonGaussian), so pld's
    certified upper end is at most dp_accounting's (up to its grid's
    rounding), and pld's lower end, from a concrete pair of neighbouring
    datasets, is below both.  Both read ``dataset_size`` as the size of the
    dataset that holds the record.
    """
    h = 1e-3  # (dp_accounting takes 20 s per event at its default 1e-4)
    eps_dp = _dp_epsilon(C(events), relation, 1e-6, h)
    if relation == AOR:
        assert eps_dp == pytest.approx(17.904330, abs=1e-3)  # the value dp_accounting's test pins
    acc = PLDAccountant(relation).compose(C(events))
    lo, hi = acc.get_epsilon_bounds(1e-6)
    assert 0.0 < lo < hi <= eps_dp + 2 * h
    assert not acc.pld().tight
    upper, lower = acc.pld().bounds()
    u_lo, u_hi = upper.epsilon_bounds(1e-6)
    assert u_hi == hi and u_hi - u_lo <= 1e-4 * u_hi + 1e-6  # the dominating pair's own bracket is narrow


def test_tree_aggregation_is_a_gaussian_with_the_tree_depth():
    # a record sits in the released dyadic intervals of [1, T] that hold its
    # step; count them for every step and take the worst
    def depth(T):
        best = 0
        for t in range(1, T + 1):
            j, c = 0, 0
            while 2 ** j <= T:
                k = (t - 1) // 2 ** j
                c += (k + 1) * 2 ** j <= T  # [k 2^j + 1, (k+1) 2^j] is complete, hence released
                j += 1
            best = max(best, c)
        return best

    for steps in [1, 2, 3, 4, 7, 8, 9, 100, [5, 17, 3]]:
        d = depth(max(steps) if isinstance(steps, list) else steps)
        (mech, k), = from_dp_event(TREE(2.0, steps), neighboring_relation=SPECIAL).components
        assert k == 1 and mech == pld.Gaussian(2.0, sensitivity=math.sqrt(d))
    # dp_accounting's RDP accountant bounds the same release: pld's certified epsilon is below it
    event = S(TREE(3.0, 100), 4)
    rdp = RdpAccountant(neighboring_relation=SPECIAL)
    rdp.compose(event)
    lo, hi = PLDAccountant(SPECIAL).compose(event).get_epsilon_bounds(1e-6)
    assert 0 < lo <= hi < rdp.get_epsilon(1e-6)
    # and agrees with dp_accounting's PLD of the equivalent Gaussian (noise / sqrt(depth))
    eps_dp = _dp_epsilon(S(G(3.0 / math.sqrt(7)), 4), SPECIAL, 1e-6)
    assert lo - SOUND_SLACK * (1 + lo) <= eps_dp and abs(eps_dp - hi) <= _close_tol(hi)
    for degenerate in [TREE(3.0, 0), TREE(math.inf, 10)]:
        assert from_dp_event(degenerate, neighboring_relation=SPECIAL).epsilon_bounds(1e-6) == (0.0, 0.0)
    with pytest.raises(NonPrivateEventError):
        from_dp_event(TREE(0.0, 10), neighboring_relation=SPECIAL)


def test_randomized_response_replace_special_against_enumeration():
    """k-ary randomized response against the special input (uniform output), T runs, exactly.

    Remove direction: the input's bucket w.p. ``a = 1 - p + p/k`` (loss
    ``log(a k)``), another w.p. ``1 - a`` (loss ``log((1-a) k/(k-1))``); add
    direction: the same outcomes with probabilities ``1/k`` and ``(k-1)/k`` and
    negated losses.  Sum over the binomial count of input-bucket outcomes.
    """
    p, k, T = 0.4, 5, 12
    a = 1 - p + p / k
    l1, l2 = math.log(a * k), math.log((1 - a) * k / (k - 1))
    acc = PLDAccountant(SPECIAL).compose(S(RR(p, k), T))

    def delta(eps, w, s1, s2):
        return sum(math.comb(T, i) * w ** i * (1 - w) ** (T - i) * max(0.0, -math.expm1(eps - (s1 * i + s2 * (T - i))))
                   for i in range(T + 1))

    for eps in (0.5, 1.0, 2.0, 5.0):
        exact = max(delta(eps, a, l1, l2), delta(eps, 1 / k, -l1, -l2))
        lo, hi = acc.get_delta_bounds(eps)
        assert lo - 1e-12 <= exact <= hi + 1e-12
        assert hi - lo <= 1e-2 * exact  # (delta brackets are refined to 1% at least)


def test_trivial_queries_have_exact_answers():
    """delta = 0 / 1 and epsilon = +-inf, with and without anything composed (dp_accounting's conventions)."""
    for relation in (AOR, REPLACE, SPECIAL):
        for events in ([], [NOOP], [P(0.0, G(1.0))]):
            acc = PLDAccountant(relation)
            for e in events:
                acc.compose(e)
            assert acc.get_epsilon(0.0) == acc.get_epsilon(1.0) == 0.0
            assert acc.get_delta(0.0) == acc.get_delta(math.inf) == 0.0
            assert acc.get_delta(-math.inf) == 1.0
        acc = PLDAccountant(relation).compose(ev.NonPrivateDpEvent())
        assert acc.get_epsilon(0.0) == acc.get_epsilon(1.0) == math.inf
        assert acc.get_delta(math.inf) == acc.get_delta(0.0) == 1.0
    # pure DP: delta reaches 0 exactly at the largest composed loss (3 x 1 + 2 x 0.5 = 4 for
    # discrete Laplace with sensitivity 1); the Gaussian never gets there
    acc = PLDAccountant().compose(DL(1.0, 1), 3).compose(DL(0.5, 1), 2)
    eps0 = acc.get_epsilon(0.0)
    assert eps0 == pytest.approx(4.0, rel=1e-15) and eps0 >= 4.0
    assert acc.get_delta(eps0) == 0.0 and acc.get_delta(math.inf) == 0.0
    assert acc.get_delta(3.9) > 0.0
    acc = PLDAccountant().compose(G(2.0))
    assert acc.get_epsilon(0.0) == math.inf
    assert acc.get_delta(math.inf) == 0.0  # no mass at infinite loss
    # randomized response against the special input: largest loss log(2 - p) vs log(1/p)
    p = 0.3
    acc = PLDAccountant(SPECIAL).compose(RR(p, 2), 2)
    assert acc.get_epsilon(0.0) == pytest.approx(2 * math.log(1 / p), rel=1e-14)
    assert acc.get_delta(2 * math.log(1 / p) * (1 + 1e-12)) == 0.0


def test_poisson_of_composed_gaussians_folds_into_one_gaussian():
    # the sampled record takes part in both releases: one Gaussian with s = (2 / 2^2)^(-1/2) = sqrt 2
    d = from_dp_event(S(P(0.1, C([G(2.0), S(G(2.0), 1), NOOP])), 30))
    ((mech, count),) = d.components
    assert count == 30
    assert isinstance(mech, pld.PoissonSampled) and mech.sampling_rate == 0.1
    assert mech.mechanism.sigma == pytest.approx(math.sqrt(2.0), rel=1e-15)
    # dp_accounting's PLD accountant rejects this tree; its RDP accountant folds it too
    assert not DpPLDAccountant().supports(P(0.1, C([G(2.0), G(2.0)])))
    rdp = RdpAccountant()
    rdp.compose(S(P(0.1, C([G(2.0), G(2.0)])), 30))
    assert d.epsilon(1e-5) <= rdp.get_epsilon(1e-5)


def test_conversion_of_each_leaf():
    assert from_dp_event(G(2.0)).components == ((pld.Gaussian(2.0), 1),)
    assert from_dp_event(G(2.0), neighboring_relation=REPLACE).components == \
        ((pld.Gaussian(2.0, sensitivity=2.0), 1),)
    assert from_dp_event(L(3.0)).components == ((pld.Laplace(3.0), 1),)
    assert from_dp_event(DL(0.25, 3)).components == ((pld.DiscreteLaplace(4.0, 3), 1),)
    assert from_dp_event(P(0.2, L(1.0))).components == ((pld.PoissonSampled(pld.Laplace(1.0), 0.2), 1),)
    assert from_dp_event(SWOR(50, 5, G(1.5)), neighboring_relation=REPLACE).components == \
        ((pld.SampledWithoutReplacement(pld.Gaussian(1.5), 0.1), 1),)
    (rr2, _), = from_dp_event(RR(0.5, 2), neighboring_relation=REPLACE).components
    assert isinstance(rr2, pld.RandomizedResponse) and rr2.epsilon == pytest.approx(math.log(3.0))
    # identical sub-events merge; counts multiply through SelfComposed
    d = from_dp_event(C([S(G(2.0), 3), S(C([G(2.0), L(1.0)]), 4)]))
    assert dict(d.components) == {pld.Gaussian(2.0): 7, pld.Laplace(1.0): 4}


def test_noop_and_degenerate_events_are_neutral():
    for event in [NOOP, S(G(1.0), 0), C([]), P(0.0, G(1.0)), C([NOOP, S(NOOP, 5)])]:
        d = from_dp_event(event)
        assert d.epsilon_bounds(1e-6) == (0.0, 0.0)
    for event in [RR(0.3, 1), RR(1.0, 5)]:
        assert from_dp_event(event, neighboring_relation=REPLACE).epsilon_bounds(1e-6) == (0.0, 0.0)
    acc = PLDAccountant().compose(NOOP, 3)
    assert acc.get_epsilon(1e-5) == 0.0
    assert acc.get_delta(0.0) == 0.0
    assert acc.get_delta(-1.0) == pytest.approx(1 - math.exp(-1.0))  # identity pair: (1 - e^eps)_+
    # a no-op composed into a real tree changes nothing
    a = PLDAccountant().compose(S(G(3.0), 7))
    b = PLDAccountant().compose(C([NOOP, S(G(3.0), 7), NOOP]))
    assert a.pld().components == b.pld().components == ((pld.Gaussian(3.0), 7),)


@pytest.mark.parametrize("event", [ev.NonPrivateDpEvent(), G(0.0), P(0.1, G(0.0)), L(0.0),
                                   C([G(1.0), S(ev.NonPrivateDpEvent(), 2)])])
def test_non_private_is_infinite(event):
    with pytest.raises(NonPrivateEventError, match="not differentially private"):
        from_dp_event(event)
    acc = PLDAccountant()
    assert acc.supports(event)
    acc.compose(event)
    assert acc.contains_non_private_event
    assert acc.get_epsilon(1e-5) == math.inf
    assert acc.get_epsilon_bounds(0.5) == (math.inf, math.inf)
    assert acc.get_delta(100.0) == 1.0
    # stays non-private after more composition, like dp_accounting's accountants
    acc.compose(S(G(5.0), 3))
    assert acc.get_epsilon(1e-5) == math.inf
    dp = DpPLDAccountant()
    dp.compose(event)
    assert dp.get_epsilon(1e-5) == math.inf
    with pytest.raises(NonPrivateEventError):
        acc.pld()


def test_non_private_with_count_zero_is_a_noop():
    assert from_dp_event(S(ev.NonPrivateDpEvent(), 0)).epsilon_bounds(1e-5) == (0.0, 0.0)
    # (dp_accounting's ledger refuses a top-level count of 0, so nest it)
    acc = PLDAccountant().compose(C([S(ev.NonPrivateDpEvent(), 0), G(2.0)]))
    assert not acc.contains_non_private_event
    assert acc.pld().components == ((pld.Gaussian(2.0), 1),)


UNSUPPORTED = [
    (ev.UnsupportedDpEvent(), AOR, ev.UnsupportedDpEvent, "UnsupportedDpEvent"),
    (ev.ZCDpEvent(0.5), AOR, ev.ZCDpEvent, "ZCDpEvent"),
    (ev.SampledWithReplacementDpEvent(100, 10, G(1.0)), AOR, ev.SampledWithReplacementDpEvent,
     "SampledWithReplacementDpEvent"),
    (ev.RepeatAndSelectDpEvent(G(1.0), 3.0, 1.0), AOR, ev.RepeatAndSelectDpEvent, "RepeatAndSelectDpEvent"),
    # nested deep inside a supported tree: the error names the inner event
    (C([G(1.0), S(C([L(1.0), ev.ZCDpEvent(0.1)]), 3)]), AOR, ev.ZCDpEvent, "ZCDpEvent"),
    # sampled events whose inner event pld cannot sample
    (P(0.1, RR(0.5, 2)), AOR, RR, "RandomizedResponseDpEvent"),
    (SWOR(100, 10, L(1.0)), REPLACE, L, "LaplaceDpEvent"),
    # each pair only under the relations it is proven for (dp_accounting's wording)
    (P(0.1, L(1.0)), REPLACE, P, "neighboring_relation must be `ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
    (P(0.1, P(0.5, DL(0.5, 1))), REPLACE, P, "`ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
    (SWOR(100, 10, G(1.0)), AOR, SWOR, "REPLACE_ONE"),
    (SWOR(100, 10, G(1.0)), SPECIAL, SWOR, "REPLACE_ONE"),
    (RR(0.5, 3), AOR, RR, "neighboring_relation must be `REPLACE_ONE` or `REPLACE_SPECIAL`"),
    (L(1.0), REPLACE, L, "ADD_OR_REMOVE_ONE"),
    (ev.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]), REPLACE, ev.MixtureOfGaussiansDpEvent,
     "`ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
    (ev.SingleEpochTreeAggregationDpEvent(1.0, 8), AOR, ev.SingleEpochTreeAggregationDpEvent,
     "must be `REPLACE_SPECIAL`"),
    # invalid parameters
    (G(-1.0), AOR, G, "noise_multiplier"),
    (P(1.5, G(1.0)), AOR, P, "sampling_probability"),
    (SWOR(10, 20, G(1.0)), REPLACE, SWOR, "sample_size"),
    (S(G(1.0), -2), AOR, S, "count"),
    (ev.MixtureOfGaussiansDpEvent(1.0, [1.0, -1.0], [0.5, 0.5]), AOR, ev.MixtureOfGaussiansDpEvent, "sensitivities"),
    (ev.MixtureOfGaussiansDpEvent(1.0, [1.0, 2.0], [0.5, 0.6]), AOR, ev.MixtureOfGaussiansDpEvent, "sampling_probs"),
    (ev.TruncatedSubsampledGaussianDpEvent(10, 1.5, 2, 1.0), AOR, ev.TruncatedSubsampledGaussianDpEvent,
     "sampling_probability"),
    (ev.TruncatedSubsampledGaussianDpEvent(10, 0.5, -1, 1.0), AOR, ev.TruncatedSubsampledGaussianDpEvent,
     "truncated_batch_size"),
]


@pytest.mark.parametrize("event, relation, bad_type, text", UNSUPPORTED,
                         ids=[f"{type(e).__name__}-{r.name}-{i}" for i, (e, r, _, _) in enumerate(UNSUPPORTED)])
def test_unsupported_events(event, relation, bad_type, text):
    with pytest.raises(UnsupportedEventError, match=text) as info:
        from_dp_event(event, neighboring_relation=relation)
    assert isinstance(info.value.event, bad_type)
    assert bad_type.__name__ in str(info.value)
    assert isinstance(info.value, dpa.UnsupportedEventError)

    acc = PLDAccountant(relation)
    assert not acc.supports(event)
    details = acc._maybe_compose(event, 1, False)
    assert isinstance(details.invalid_event, bad_type) and details.error_message
    acc.compose(G(2.0))
    before = (acc.get_epsilon(1e-5), acc.ledger)
    with pytest.raises(dpa.UnsupportedEventError, match=bad_type.__name__):
        acc.compose(event)
    assert (acc.get_epsilon(1e-5), acc.ledger) == before  # a failed compose changes nothing
    # dp_accounting's wording names the sub-event inside the event passed to compose
    with pytest.raises(dpa.UnsupportedEventError, match="caused by subevent"):
        acc.compose(C([G(3.0), event]))


@pytest.mark.parametrize("event", [S(G(1.0), -2), P(1.5, G(1.0)), G(-1.0), SWOR(10, 20, G(1.0))])
def test_invalid_parameters_are_value_errors(event):
    """Bad parameters are bad input (ValueError) and unsupported (supports() is False)."""
    relation = REPLACE if isinstance(event, SWOR) else AOR
    with pytest.raises(ValueError):
        from_dp_event(event, neighboring_relation=relation)
    acc = PLDAccountant(relation)
    assert not acc.supports(event)
    with pytest.raises(ValueError):
        acc.compose(event)
    with pytest.raises(ValueError, match="count"):
        acc.compose(G(1.0), -1)
    with pytest.raises(ValueError, match="count"):
        acc.compose(G(1.0), 0)
    with pytest.raises(TypeError, match="count"):
        acc.compose(G(1.0), 1.5)


def test_accountant_interface():
    acc = PLDAccountant()
    assert isinstance(acc, dpa.PrivacyAccountant)
    assert acc.neighboring_relation is AOR
    assert PLDAccountant(REPLACE).neighboring_relation is REPLACE
    assert PLDAccountant(neighboring_relation=REPLACE).supports(SWOR(100, 10, G(1.0)))
    assert PLDAccountant(SPECIAL).neighboring_relation is SPECIAL
    with pytest.raises(TypeError):
        PLDAccountant("add_or_remove")
    with pytest.raises(TypeError, match="DpEvent"):
        acc.compose("not an event")

    assert acc.get_epsilon(1e-5) == 0.0  # nothing composed yet
    assert acc.compose(G(4.0)) is acc  # chaining, as in dp_accounting
    acc.compose(P(0.05, G(1.2)), count=40).compose(L(10.0), 2)
    assert acc.ledger == C([G(4.0), S(P(0.05, G(1.2)), 40), S(L(10.0), 2)])
    assert dict(acc.pld().components) == {
        pld.Gaussian(4.0): 1, pld.PoissonSampled(pld.Gaussian(1.2), 0.05): 40, pld.Laplace(10.0): 2}
    # the one-line swap: same calls, same numbers within dp_accounting's error
    dp = DpPLDAccountant().compose(G(4.0)).compose(P(0.05, G(1.2)), count=40).compose(L(10.0), 2)
    eps_dp, (lo, hi) = dp.get_epsilon(1e-6), acc.get_epsilon_bounds(1e-6)
    assert lo - SOUND_SLACK * (1 + lo) <= eps_dp and abs(eps_dp - hi) <= _close_tol(hi)
    # epsilon and delta queries are consistent: delta(hi) <= 1e-6, so the certified
    # lower bound on delta(hi) must be; the upper one comes from other grids
    d_lo, d_hi = acc.get_delta_bounds(hi)
    assert d_lo <= 1e-6 and d_hi <= 1.01e-6
    clone = copy.deepcopy(acc)  # picklable / copyable, answers kept
    assert clone.get_epsilon_bounds(1e-6) == (lo, hi) and clone.ledger == acc.ledger
    assert acc.get_epsilon_bounds(1.0) == (0.0, 0.0)  # delta = 1 holds at epsilon = 0
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="target_delta"):
            acc.get_epsilon(bad)
    with pytest.raises(ValueError, match="target_epsilon"):
        acc.get_delta(math.nan)
    assert "PLDAccountant" in repr(acc)


def test_value_discretization_interval_is_accepted():
    event = S(P(0.02, G(1.0)), 300)
    fixed = PLDAccountant(value_discretization_interval=1e-3).compose(event)
    auto = PLDAccountant().compose(event)
    lo_f, hi_f = fixed.get_epsilon_bounds(1e-5)
    lo_a, hi_a = auto.get_epsilon_bounds(1e-5)
    assert lo_f <= hi_a and lo_a <= hi_f  # both certified brackets of the same value
    with pytest.raises(ValueError):
        PLDAccountant(value_discretization_interval=0.0)


def test_nothing_imports_peer_libraries():
    code = ("import sys, pld, pld.interop, pld.interop.opacus\n"
            "bad = [m for m in ('dp_accounting', 'opacus', 'torch') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
