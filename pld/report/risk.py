"""What an epsilon means, certified: attack risk read off the f-DP trade-off curve.

Every number here is a certified bracket derived from pld's certified delta
bounds, with each approximation (the supremum over epsilon, root finding,
rounding) taken on the safe side.

The trade-off curve
-------------------
One direction ``d`` of a neighbouring relation is a pair ``(P, Q)`` with
``delta_d(eps) = sup_S P(S) - e^eps Q(S)`` (pld's ``remove`` direction: ``P``
the output with the record, ``Q`` without; ``add``: the pair swapped).  A
membership test with rejection region ``S`` under the null ``Q`` has
``FPR = Q(S)`` and ``TPR = P(S) <= e^eps FPR + delta_d(eps)`` for *every*
real ``eps``, and by Neyman-Pearson the infimum over ``eps`` is attained by a
test, so

    ``TPR_d(alpha) = inf_{eps in R} [delta_d(eps) + e^eps alpha] = 1 - T(Q, P)(alpha)``

(Dong, Roth & Su, JRSS-B 2022, Prop. 2.12; Kulynych et al., "Attack-Aware Noise
Calibration for Differential Privacy", NeurIPS 2024).  Negative ``eps`` are
read off the swapped direction, ``delta_d(-e) = 1 - e^-e + e^-e delta_dbar(e)``
(``e >= 0``), so only the curves pld certifies as (epsilon, delta) guarantees
(``eps >= 0`` of both directions) enter:

    ``TPR_d(alpha) = min( inf_{e>=0} delta_d(e) + e^e alpha,
                         inf_{e>=0} 1 - e^-e (1 - alpha - delta_dbar(e)) )``.

``remove`` is the membership test (null: the record is absent); ``add`` the
reverse test; the mechanism's risk at ``alpha`` is the larger of the two.
(dp_accounting's ``get_true_positive_rates`` uses the symmetric curve of the
larger of the two delta curves, an upper bound on both.)

Why the brackets are certified
------------------------------
*Upper end.*  Each ``eps`` gives a valid line ``TPR <= c + s alpha`` from an
upper bound on delta there; any finite set of them bounds the infimum from
above.  pld takes every point of the dominating grid's lattice at or above 0
(and 0), where that grid's own curve has its kinks, so the bound is the
dominating grid's exact trade-off curve.

*Lower end.*  The dominated grid stands for a pair whose delta ``delta*`` is at
most the true one at every ``eps`` (a post-processing of the true pair), and
``delta*(eps) = A - e^eps B`` between two lattice points (``A``, ``B`` its P-
and Q-mass above).  So ``delta*(eps) + e^eps alpha = A - e^eps (B - alpha)``
and its converted form are monotone between lattice points: their infimum over
each cell is at one of its ends, where the evaluator's certified lower bound
(minus a rounding margin for the lattice point's floating-point value) is
taken.  The minimum over all lattice points of ``[0, inf)``, 0 itself and the
limits at infinity is then a lower bound on the true curve, valid at every
``alpha``.  This needs the true pair to be the composed one (``PLD.tight``);
otherwise the lower end is the trade-off curve of ``PLD.bounds()[1]``, a
construction the true mechanism realises, and ``alpha`` (``TPR >= FPR`` for
every pair) where none is known.

*Gaussian compositions* (no grid: one Gaussian pair with ``mu``) use
:func:`pld.engine.gaussian_exact.delta_bounds` at points around the optimal
``eps``: upper as above; lower from convexity of ``H(gamma) = delta(log gamma)``
in ``gamma`` (a supremum of affine functions): between two points a convex
function lies above the extensions of its neighbouring secants, built from the
brackets' safe ends.

Every value is rounded outward by a relative ``_SLACK`` that covers the
floating-point products and sums (and ``scipy``'s ``ndtri`` where used).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from pld import _validate as v
from pld.distribution import PLD, GridPair, TargetMissedWarning
from pld.engine import budget as _budget
from pld.engine.targets import EPS_RTOL, Query
from pld.report.risk_lines import _SLACK, _Envelope, _GaussianSource, _GridSource, _lattice_lines

__all__ = ["TPR_RTOL", "DEFAULT_FPRS", "TradeOff", "AttackRisk", "GDPFit", "tradeoff", "attack_risk",
           "tpr_bounds", "fpr_bounds", "advantage_bounds", "gdp_fit", "reconstruction_bounds"]

#: relative target of a TPR bracket: ``upper - lower <= TPR_RTOL * upper + TPR_ATOL``
TPR_RTOL = 1e-4
TPR_ATOL = 1e-12
#: false-positive rates reported by default
DEFAULT_FPRS = (1e-4, 1e-3, 1e-2, 0.1)
#: delta of the epsilon query whose grids are read first (the report's default)
DEFAULT_DELTA = 1e-5
#: at most this many further epsilon queries, tuned at the delta of the optimal epsilon
MAX_RETUNES = 2


# ------------------------------------------------------------- results
@dataclass(frozen=True)
class AttackRisk:
    """Certified brackets on the best membership-inference attack's TPR at given FPRs.

    ``lower``/``upper``: the larger of the two directions (the mechanism's risk);
    ``by_direction[d] = (lower, upper)``; ``binding[i]`` the direction with the
    larger upper end, ``certain[i]`` whether its lower end is above every other
    direction's upper end (so the binding direction is proven).
    """

    fpr: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    by_direction: dict
    binding: tuple[str, ...]
    certain: tuple[bool, ...]
    target_met: tuple[bool, ...]
    tight: bool

    def as_dict(self) -> dict:
        return {"fpr": list(self.fpr), "tpr_lower": list(self.lower), "tpr_upper": list(self.upper),
                "binding_direction": list(self.binding), "binding_certain": list(self.certain),
                "target_met": list(self.target_met), "tight": self.tight,
                "by_direction": {d: {"tpr_lower": list(lo), "tpr_upper": list(hi)}
                                 for d, (lo, hi) in self.by_direction.items()}}

    def __str__(self) -> str:
        rows = ["      FPR   TPR upper   certified bracket           binding"]
        for i, a in enumerate(self.fpr):
            rows.append(f"{a:9.3g}   {_up(self.upper[i]):<9}   [{_down(self.lower[i])}, {_up(self.upper[i])}]"
                        f"   {self.binding[i]}{'' if self.certain[i] else ' (not proven)'}")
        return "\n".join(rows)


@dataclass(frozen=True)
class GDPFit:
    """The Gaussian-DP parameter that best fits the trade-off curve on ``[fpr_min, fpr_max]``.

    ``mu_lower``/``mu_upper`` bracket ``max_i Phi^-1(TPR(alpha_i)) - Phi^-1(alpha_i)``
    over the FPR grid (dp_accounting's estimate, with TPR the larger direction);
    ``mu_range_upper`` certifies that the mechanism is ``mu``-GDP on the whole
    range (``TPR(alpha) <= Phi(Phi^-1(alpha) + mu)`` for every alpha in it);
    ``gap_upper`` bounds how far below that Gaussian curve the true one can fall
    anywhere on the range (:meth:`within`).
    """

    mu_lower: float
    mu_upper: float
    mu_range_upper: float
    fpr_min: float
    fpr_max: float
    gap_upper: float

    def within(self, distance: float) -> bool:
        """True if the curve is proven within ``distance`` (in TPR) of ``G_mu_range_upper``."""
        return self.gap_upper <= distance


def _up(x: float) -> str:
    return f"{math.nextafter(float(f'{x:.5g}'), math.inf) if float(f'{x:.5g}') < x else float(f'{x:.5g}'):.5g}"


def _down(x: float) -> str:
    r = float(f"{x:.5g}")
    return f"{math.nextafter(r, -math.inf) if r > x else r:.5g}"


# ------------------------------------------------------------- the curve
class TradeOff:
    """The certified trade-off curves of a :class:`pld.PLD`, per direction.

    Built on the grids of the epsilon query at ``delta`` (default 1e-5; pass the
    delta you already queried and nothing is recomputed, and its grid pairs as
    ``grids``, :meth:`pld.PLD.grids` at ``delta``, if you hold them); where a TPR
    bracket misses :data:`TPR_RTOL`, grids tuned at the delta of its optimal
    epsilon are added (at most :data:`MAX_RETUNES`) and the brackets intersected.
    """

    def __init__(self, pld_obj: PLD, *, delta: float | None = None, grids: dict[str, GridPair] | None = None):
        if not isinstance(pld_obj, PLD):
            raise TypeError(f"pld_obj must be a pld.PLD, got {type(pld_obj).__name__}")
        self.pld = pld_obj
        self.delta = DEFAULT_DELTA if delta is None else v.real("delta", delta, low=v.MIN_DELTA, high=1.0,
                                                                   high_open=True)
        self.tight = pld_obj.tight
        self._views = pld_obj.bounds()
        self.directions = pld_obj.directions if self.tight else self._views[0].directions
        self._tunings: list[dict] = []
        self._tuned: set[tuple] = set()
        self._envelopes: dict = {}
        self._add_tuning(self.delta, grids=grids)

    def _add_tuning(self, delta: float, rtol: float | None = None, tilt: float | None = None,
                    grids: dict[str, GridPair] | None = None) -> None:
        """Add the trade-off sources of the grids at ``delta`` (``grids``: the upper view's,
        given; a PLD's own grids are its upper view's, and its lower view's too when tight)."""
        upper_view, lower_view = self._views
        ups = _sources(upper_view, delta, upper=True, rtol=rtol, tilt=tilt, grids=grids)
        los = (_sources(lower_view, delta, upper=False, rtol=rtol, tilt=tilt, grids=grids if self.tight else None)
               if lower_view is not None else None)
        tuning = {}
        for d in self.directions:
            up = ups.get(d, ups.get("remove"))
            lo = None if los is None else los.get(d, los.get("remove"))
            tuning[d] = (up, lo)
        self._tunings.append(tuning)

    def _direction_tpr(self, d: str, alpha: np.ndarray, envelope: bool = True) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = alpha.copy(), np.ones(alpha.shape)
        for tuning in self._tunings:
            up, low = tuning[d]
            hi = np.minimum(hi, up.tpr(alpha)[1])
            if low is not None:
                lo = np.maximum(lo, low.tpr(alpha)[0])
        env = self._envelope(d) if envelope else None
        if env is not None:
            lo = np.maximum(lo, env.at(alpha))
        return np.minimum(lo, hi), hi

    def _envelope(self, d: str) -> _Envelope | None:
        """The joint lower end of every tuning's dominated grids (two or more), cached."""
        pairs = [t[d][1].grids for t in self._tunings if t[d][1] is not None and getattr(t[d][1], "grids", None)]
        if len(pairs) < 2:
            return None
        key = (d, len(pairs))
        if key not in self._envelopes:
            self._envelopes[key] = _Envelope(pairs)
        return self._envelopes[key]

    def tpr(self, fpr) -> AttackRisk:
        """Certified TPR brackets at ``fpr`` (scalar or sequence, each in [0, 1])."""
        alpha, _ = v.real_array("fpr", fpr, low=0.0, high=1.0)
        alpha = np.atleast_1d(alpha).ravel()
        for _ in range(MAX_RETUNES + 1):
            per = {d: self._direction_tpr(d, alpha) for d in self.directions}
            lo = np.max([p[0] for p in per.values()], axis=0)
            hi = np.max([p[1] for p in per.values()], axis=0)
            met = hi - lo <= TPR_RTOL * hi + TPR_ATOL
            if np.all(met) or not self._retune(int(np.flatnonzero(~met)[0]), alpha, per):
                break
        if not np.all(met):
            j = int(np.flatnonzero(~met)[0])
            why = ("a part is not tight: the lower end is a dominated construction's curve" if not self.tight
                   else "the grids' delta brackets leave this width")
            warnings.warn(f"TPR bracket [{lo[j]:.6g}, {hi[j]:.6g}] at FPR {alpha[j]:.3g} is wider than its target "
                          f"(upper - lower <= {TPR_RTOL:g} * upper): {why}. Both ends are certified.",
                          TargetMissedWarning, stacklevel=3)
        names = list(per)
        binding, certain = [], []
        for i in range(alpha.size):
            k = int(np.argmax([per[d][1][i] for d in names]))
            binding.append(names[k])
            certain.append(all(per[names[k]][0][i] > per[d][1][i] for d in names if d != names[k]))
        return AttackRisk(tuple(alpha.tolist()), tuple(lo.tolist()), tuple(hi.tolist()),
                          {d: (tuple(p[0].tolist()), tuple(p[1].tolist())) for d, p in per.items()},
                          tuple(binding), tuple(certain), tuple(bool(x) for x in met), self.tight)

    def _retune(self, j: int, alpha: np.ndarray, per: dict) -> bool:
        """Add grids tuned at the delta of the optimal epsilon at ``alpha[j]`` (a missed one)."""
        if len(self._tunings) > MAX_RETUNES + 1:
            return False
        best = max(self.directions, key=lambda d: float(per[d][1][j]))
        found = self._tunings[-1][best][0].optimal_delta(float(alpha[j]))
        if found is None:
            return False
        target, eps = found
        if not math.isfinite(target) or target <= 0.0:
            return False
        target = min(max(target, 10.0 * v.MIN_DELTA), 0.5)
        # an epsilon bracket of rtol * eps leaves a delta bracket of about e^eps alpha rtol eps
        # at the optimum (delta'(eps) = -e^eps alpha there): relative to TPR >= e^eps alpha, rtol eps
        rtol = min(EPS_RTOL, max(1e-7, 0.5 * TPR_RTOL / max(1.0, abs(eps) if math.isfinite(eps) else 1.0)))
        key = (round(math.log(target), 1), rtol)
        if key in self._tuned:
            return False
        self._tuned.add(key)
        if len(self._tunings) == 1 and isinstance(self._tunings[0][best][0], _GridSource):
            # the first grids untilted too: a tilt tuned for the tail leaves the bulk to the
            # round-off bound, and the lower end needs every cell (_Envelope)
            self._add_tuning(self.delta, tilt=0.0)
        self._add_tuning(target, rtol)
        return True

    def advantage(self) -> tuple[float, float]:
        """Certified ``(lower, upper)`` on the largest ``TPR - FPR`` of any attack: the
        total variation ``delta(0)``, the same in both directions (so the smallest
        upper end and the largest lower end over directions and grids hold)."""
        lo, hi = 0.0, 1.0
        for tuning in self._tunings:
            for up, low in tuning.values():
                hi = min(hi, up.tv()[1])
                if low is not None:
                    lo = max(lo, low.tv()[0])
        return min(lo, hi), hi

    def tpr_bounds(self, fpr) -> tuple:
        """``(lower, upper)`` on the larger direction's TPR (scalar in, scalars out)."""
        _, scalar = v.real_array("fpr", fpr, low=0.0, high=1.0)
        r = self.tpr(fpr)
        if scalar:
            return r.lower[0], r.upper[0]
        return np.array(r.lower), np.array(r.upper)

    def fpr_bounds(self, tpr, *, direction: str | None = None) -> tuple:
        """Certified ``(lower, upper)`` on the smallest FPR at which an attack reaches TPR ``tpr``.

        ``direction=None``: the smaller over both directions (the mechanism's
        most effective test).  Via ``FPR(beta) = inf{alpha: TPR(alpha) >= beta}``:
        the upper lines give ``alpha`` below which even the upper bound stays
        under ``beta``, the lower lines an ``alpha`` from which the lower bound
        reaches it.
        """
        beta, scalar = v.real_array("tpr", tpr, low=0.0, high=1.0)
        b = np.atleast_1d(beta).ravel()
        dirs = self.directions if direction is None else (v.choice("direction", direction, self.directions),)
        lo, hi = np.ones(b.shape), np.ones(b.shape)
        for d in dirs:
            d_lo, d_hi = np.zeros(b.shape), b.copy()
            for tuning in self._tunings:
                up, low = tuning[d]
                d_lo = np.maximum(d_lo, up.fpr(b)[0])
                if low is not None:
                    d_hi = np.minimum(d_hi, low.fpr(b)[1])
            lo, hi = np.minimum(lo, d_lo), np.minimum(hi, np.maximum(d_hi, d_lo))
        if scalar:
            return float(lo[0]), float(hi[0])
        return lo.reshape(beta.shape), hi.reshape(beta.shape)

    def gdp(self, fprs=None) -> GDPFit:
        """The GDP ``mu`` that fits the curve, certified (see :class:`GDPFit`).

        ``fprs``: sorted grid in ``(0, 1/2]``, default dp_accounting's
        ``logspace(-12, log10(1/2), 500)``.  Both directions are read on it:
        the swapped direction's curve is this one's reflection, and with both
        the half ``alpha <= 1/2`` covers every point of either curve whose
        reflection has ``alpha >= fprs[0]``.
        """
        a = np.logspace(-12, math.log10(0.5), 500) if fprs is None else np.sort(np.atleast_1d(
            v.real_array("fprs", fprs, low=0.0, high=0.5, low_open=True)[0]).ravel())
        if a.size < 2:
            raise ValueError(f"fprs must hold at least two false-positive rates, got {a.size}")
        # (each tuning's own lower lines: the joint envelope costs its whole lattice per FPR)
        per = {d: self._direction_tpr(d, a, envelope=False) for d in self.directions}
        za = ndtri(a)
        pad = 1e-12
        mu_lo, mu_hi = -math.inf, -math.inf
        for lo, hi in per.values():
            with np.errstate(divide="ignore"):
                mu_lo = max(mu_lo, float(np.max(ndtri(lo) - za)) - pad)
                mu_hi = max(mu_hi, float(np.max(ndtri(hi) - za)) + pad)
        mu_lo, mu_hi = max(mu_lo, 0.0), max(mu_hi, 0.0)

        # on a cell [a_i, a_{i+1}]: TPR(alpha) <= hi(a_{i+1}) and Phi^-1(alpha) >= Phi^-1(a_i)
        # (a denser grid narrows the cells' slack, about log(a_{i+1}/a_i) / |Phi^-1(a_i)|)
        top = np.max([p[1] for p in per.values()], axis=0)
        low = np.max([p[0] for p in per.values()], axis=0)
        with np.errstate(divide="ignore"):
            mu_range = max(float(np.max(ndtri(top[1:]) - za[:-1])) + pad, mu_hi)
        # G_mu(alpha) - TPR(alpha) <= G_mu(a_{i+1}) - lo(a_i) on a cell (both increasing)
        gap = (float(np.max(ndtr(za[1:] + mu_range) * (1.0 + _SLACK) - low[:-1])) + pad
               if math.isfinite(mu_range) else 1.0)
        return GDPFit(mu_lo, mu_hi, max(mu_range, 0.0), float(a[0]), float(a[-1]), min(max(gap, 0.0), 1.0))


def _grids(view: PLD, delta: float, rtol: float | None, tilt: float | None = None) -> dict:
    """``{direction: (dominating, dominated)}`` for an epsilon query at ``delta``.

    ``rtol`` None: the query's own grids (:meth:`pld.PLD.grids`, cached: what a
    report has already computed), in which a direction that cannot move the
    epsilon bracket is settled on a coarse grid.  Otherwise every direction is
    refined to ``rtol`` on its own (the engine's planner and composer, read, not
    changed): each direction's trade-off curve is an answer here.
    """
    if rtol is None:
        return {d: (g.dominating, g.dominated) for d, g in view.grids(delta, tilt=tilt).items()}
    engine = view._engine()
    out = {}
    with _budget.query():
        for d in engine.directions:
            s = engine.planner.settings(d, Query("delta", delta, rtol))
            out[d] = engine.composer.materialize(d, *s)
    return out


def _sources(view: PLD, delta: float, *, upper: bool, rtol: float | None = None,
             tilt: float | None = None, grids: dict[str, GridPair] | None = None) -> dict:
    """``{direction: source}`` of one view (a tight composition) from the grids at ``delta``
    (``grids``: that view's :meth:`pld.PLD.grids` at ``delta``, when already at hand)."""
    mu = view._closed_form_mu()
    if mu is not None:
        return {"remove": _GaussianSource(mu)}
    if grids is None:
        pairs = _grids(view, delta, rtol, tilt)
    else:
        pairs = {d: (g.dominating, g.dominated) for d, g in grids.items()}
    out = {}
    for d, (pess, opt) in pairs.items():
        o_pess, o_opt = pairs.get("add" if d == "remove" else "remove", (pess, opt))
        if upper:
            out[d] = _GridSource(_lattice_lines(pess, o_pess, True), None)
        else:
            out[d] = _GridSource(None, _lattice_lines(opt, o_opt, False), (opt, o_opt))
    return out


# ------------------------------------------------------------- functions
def tradeoff(pld_obj: PLD, *, delta: float | None = None) -> TradeOff:
    """The certified trade-off curves of ``pld_obj`` (see :class:`TradeOff`)."""
    return TradeOff(pld_obj, delta=delta)


def attack_risk(pld_obj: PLD, fprs=DEFAULT_FPRS, *, delta: float | None = None) -> AttackRisk:
    """Certified TPR of the best membership-inference attack at each FPR in ``fprs``.

    Examples
    --------
    >>> import pld
    >>> r = pld.risk.attack_risk(pld.Gaussian(sigma=2.0).pld(), [0.01])
    >>> r.lower[0] <= 0.0339 <= r.upper[0]      # Phi(Phi^-1(0.01) + 1/2)
    True
    """
    return TradeOff(pld_obj, delta=delta).tpr(fprs)


def tpr_bounds(pld_obj: PLD, fpr, *, delta: float | None = None):
    """Certified ``(lower, upper)`` on the TPR at ``fpr`` (the larger direction)."""
    return TradeOff(pld_obj, delta=delta).tpr_bounds(fpr)


def fpr_bounds(pld_obj: PLD, tpr, *, delta: float | None = None, direction: str | None = None):
    """Certified ``(lower, upper)`` on the smallest FPR at which some attack reaches ``tpr``."""
    return TradeOff(pld_obj, delta=delta).fpr_bounds(tpr, direction=direction)


def advantage_bounds(pld_obj: PLD, *, delta: float | None = None) -> tuple[float, float]:
    """Certified ``(lower, upper)`` on the largest advantage ``TPR - FPR`` of any attack.

    ``sup_S P(S) - Q(S)`` is the total variation of the pair, ``delta(0)``,
    the same in both directions (Kulynych et al. 2024; Yeom et al. 2018 define
    the advantage), read off the grids of the epsilon query at ``delta``
    (``pld_obj.delta_bounds(0.0)`` tunes grids of its own: narrower, slower).
    """
    return TradeOff(pld_obj, delta=delta).advantage()


def gdp_fit(pld_obj: PLD, fprs=None, *, delta: float | None = None) -> GDPFit:
    """The Gaussian-DP ``mu`` that best fits ``pld_obj``'s trade-off curve (:class:`GDPFit`)."""
    return TradeOff(pld_obj, delta=delta).gdp(fprs)


def reconstruction_bounds(pld_obj: PLD, candidates: int | None = None, *, baseline: float | None = None,
                          delta: float | None = None) -> tuple[float, float]:
    """Certified ``(lower, upper)`` on the bound of Hayes, Mahloujifar & Balle on
    the success of any reconstruction attack.

    Hayes, Mahloujifar & Balle, "Bounding Training Data Reconstruction in
    DP-SGD", NeurIPS 2023 (Thm. 2; with Kaissis et al. 2023's hypothesis-testing
    form): for an informed adversary who knows every other record, a target
    drawn from a prior whose most likely success region has probability
    ``kappa`` (the baseline: ``1/m`` for a uniform prior over ``m`` candidates
    and exact reconstruction), the probability that the reconstruction is
    correct is at most the blow-up ``B_kappa(P, Q) = sup{P(E): Q(E) <= kappa}``
    of a dominating pair with ``P`` the output with the target and ``Q``
    without it: ``TPR_remove(kappa)``, the remove direction's TPR at FPR
    ``kappa``.  The lower end is that bound's certified lower end: the bound
    is attained by the pair (not necessarily by a concrete attack).

    Parameters
    ----------
    candidates : int, optional
        ``m >= 2``, for the uniform prior over ``m`` candidates (``kappa = 1/m``).
    baseline : float, optional
        ``kappa`` in ``(0, 1]`` instead of ``candidates``.
    """
    if (candidates is None) == (baseline is None):
        raise TypeError("give exactly one of candidates (m >= 2) and baseline (kappa in (0, 1])")
    if candidates is not None:
        m = v.integer("candidates", candidates, low=2, high=v.MAX_COUNT)
        kappa = 1.0 / m
    else:
        kappa = v.real("baseline", baseline, low=0.0, high=1.0, low_open=True)
    t = TradeOff(pld_obj, delta=delta)
    r = t.tpr([kappa])
    lo, hi = r.by_direction["remove"]
    return lo[0], hi[0]



#: the false-positive rate of the ``pld dpsgd`` report's attack line
REPORT_FPR = 0.01


def report_summary(pld_obj: PLD, delta: float, *, grids: dict[str, GridPair] | None = None) -> dict:
    """The ``pld dpsgd`` report's attack line: the certified TPR at 1% FPR, read off
    the grids of the report's own epsilon query at ``delta`` (milliseconds; ``grids``:
    that query's grid pairs, :attr:`pld.report.EpsilonQuery.grids`).

    A bracket wider than its target is said in ``target_met`` (the report
    prints it as a bracket either way), not warned.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TargetMissedWarning)
        r = TradeOff(pld_obj, delta=delta, grids=grids).tpr([REPORT_FPR])
    return {"fpr": REPORT_FPR, "tpr_lower": r.lower[0], "tpr_upper": r.upper[0], "binding_direction": r.binding[0],
            "target_met": r.target_met[0]}
