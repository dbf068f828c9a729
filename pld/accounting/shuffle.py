"""Shuffling: the epsilon to publish, and what no analysis can go below.

A shuffling loader (``DataLoader(shuffle=True)``) draws a random permutation
each epoch and cuts it into ``t`` batches.  No tight analysis of it is known.
What is certified, under the neighbouring relation where one record is
replaced by a zero record in its slot (``replace_special``, the "zero-out"
relation of Chua et al.; removing a record instead would shift every later
slot):

* **upper end, the number to publish**: no amplification.  A record is in
  exactly one batch per epoch, so an epoch releases at most one Gaussian
  step about it: ``E`` epochs are the Gaussian mechanism with ``mu =
  sqrt(E) / sigma``, answered from its exact closed form (Balle & Wang 2018).
* **lower end, what no analysis can beat**: the largest of the certified
  lower bounds of concrete pairs of neighbouring datasets, each post-processed
  and accounted by pld's engine on its dominated side:

  - *random allocation, 1 of t*: every other record's clipped gradient is 0,
    so an epoch is ``N(e_J, s^2 I)`` against ``N(0, s^2 I)`` with ``J`` the
    record's batch; with a short last batch ``J`` is not uniform, and the
    hockey-stick divergence of the uniform mixture is the smallest (it is
    jointly convex and symmetric under relabelling the batches), so the
    uniform pair (:class:`pld.RandomAllocation`) is a lower bound;
  - *max of an epoch, Chua et al.*: every other record's gradient is ``-v``,
    the record's own ``+v`` and its replacement's ``0`` (``|v| = C``).  After
    the known sums of the other records are taken off, the record's batch
    reads ``+2`` where it is present and ``+1`` where the zero record is (the
    zero record takes the slot of a ``-v``), every other batch 0: the pair
    ``(sum_j p_j N(2 e_j, s^2 I), sum_j p_j N(e_j, s^2 I))``.  Its
    post-processing ``max_j y_j`` has the law ``Phi((c - mu)/s) Phi(c/s)^(t-1)``
    whatever the ``p_j`` (Chua et al., "How Private are DP-SGD
    Implementations?", ICML 2024, their ``E_C`` cube sets; composed over
    reshuffled epochs as in "Scalable DP-SGD: Shuffling vs. Poisson
    Subsampling", NeurIPS 2024).  Cut into slices, it is a pair of
    probability vectors (:class:`pld.FromPMFs`): a post-processing of the
    mechanism.

With ``drop_last`` a record sits out an epoch with probability ``(N mod
b) / N``; the max-of-epoch pairs are then mixtures with that chance of no
spike at all (exact, as is their post-processing), and the random-allocation
pair, which needs every record in some batch, is not used.  Lower bounds use
whole epochs (a run cut short releases less: a post-processing), the upper
end counts a partial epoch as a whole one.

The slice masses are computed from ``scipy.special.log_ndtr`` with the error
the engine trusts it to (16 units of ``u (1 + |log Phi|)``), carried through
every operation as a bound ``eta`` on ``|log(computed mass / true mass)|``.  If
``p_hat``, ``q_hat`` are within ``e^eta`` of ``p``, ``q`` outcome by outcome,
then over ``E`` epochs ``H_eps(p^E || q^E) >= e^(-E eta) H_(eps + 2 E eta)(p_hat^E ||
q_hat^E)``: the lower end is taken at ``delta e^(E eta)`` and lowered by ``2 E
eta`` (``eta`` is about 1e-12: invisible, but accounted).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from pld import _validate as v
from pld.accounting.loaders import RunShape, resolve_run
from pld.distribution import PLD, TargetMissedWarning
from pld.mechanisms import FromPMFs, Gaussian, PoissonSampled

__all__ = ["Construction", "ShuffleBounds", "shuffle_bounds", "max_of_epoch_pair", "ALTERNATIVES_NOTE"]

#: unit round-off of float64
_U = 2.0 ** -53
#: units of u (1 + |log Phi|) trusted for scipy's log_ndtr (as the engine: docs/certificate.md)
_LOG_NDTR_UNITS = 16.0
#: privacy-loss step between slices of the max statistic (its post-processing loses ~ step^2 / 8)
_SLICE_LOSS = 0.002
#: most slices one pair is cut into
_MAX_SLICES = 20_000
#: log-mass the slicing leaves in each end slice (under either law): the tails are lumped, not lost
_LOG_TAIL = -45.0

#: bracket target of a first random-allocation bracket (refined only where it could bind)
ALTERNATIVE_RTOL = 1e-3
#: the line every shuffling report prints
ALTERNATIVES_NOTE = ("no tight analysis of shuffling is known: the upper end assumes no amplification; a "
                     "Poisson or balls-in-bins loader is accounted tightly (and pld.samplers provides both)")


@dataclass(frozen=True)
class Construction:
    """One certified lower bound: a concrete pair of neighbouring datasets, post-processed.

    Attributes
    ----------
    name : str
        Short name ("random allocation 1-of-98", "max of an epoch (Chua et al.)").
    epsilon_lower : float
        Its certified lower end on the mechanism's epsilon at the bounds' delta.
    pair : str
        The datasets and the post-processing, in words.
    reference : str
        Where it comes from.
    target_met : bool
        Whether its query's bracket met its target (its lower end is certified either way).
    """

    name: str
    epsilon_lower: float
    pair: str
    reference: str
    target_met: bool = True

    def as_dict(self) -> dict:
        return {"name": self.name, "epsilon_lower": self.epsilon_lower, "pair": self.pair,
                "reference": self.reference, "target_met": self.target_met}


@dataclass(frozen=True)
class ShuffleBounds:
    """What is certified about a shuffled DP-SGD run (see the module docstring).

    Attributes
    ----------
    epsilon_upper : float
        The epsilon to publish: no amplification, exact closed form (rounded up).
    epsilon_lower : float
        The best certified lower bound: no analysis of this loader can give less.
    binding : str
        The construction that gives ``epsilon_lower``.
    constructions : tuple of Construction
        Every lower bound computed.
    delta : float
    noise_multiplier : float
    steps_per_epoch : int
    steps : int
    epochs : int
        Epochs the upper end counts (a partial epoch as a whole one).
    whole_epochs : int
        Epochs the lower ends compose.
    upper : str
        How the upper end is obtained.
    alternatives : dict
        ``{"poisson": {...}, "balls_in_bins": {...}}``: the certified bracket
        the same run would have under those samplers (with their rate).
    """

    epsilon_upper: float
    epsilon_lower: float
    binding: str
    constructions: tuple
    delta: float
    noise_multiplier: float
    steps_per_epoch: int
    steps: int
    epochs: int
    whole_epochs: int
    upper: str
    alternatives: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"epsilon_upper": self.epsilon_upper, "epsilon_lower": self.epsilon_lower, "binding": self.binding,
                "constructions": [c.as_dict() for c in self.constructions], "delta": self.delta,
                "noise_multiplier": self.noise_multiplier, "steps_per_epoch": self.steps_per_epoch,
                "steps": self.steps, "epochs": self.epochs, "whole_epochs": self.whole_epochs,
                "upper": self.upper, "alternatives": self.alternatives, "note": ALTERNATIVES_NOTE}


# ------------------------------------------------------------ the max statistic
def _log_ndtr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log Phi(x)`` and a bound on its absolute error (the engine's trust in scipy)."""
    val = special.log_ndtr(x)
    return val, _LOG_NDTR_UNITS * _U * (1.0 + np.abs(val))


def _log_cdf_max(c: np.ndarray, sigma: float, bins: int, mu: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``log P(max_j y_j <= c)`` and its error bound, when with probability ``lam`` one
    of ``bins`` coordinates is ``N(mu, s^2)`` and the rest ``N(0, s^2)`` (else all are).

    ``P(max <= c) = lam Phi((c - mu)/s) Phi(c/s)^(bins-1) + (1 - lam) Phi(c/s)^bins``: sums
    of logs of the same sign, no cancellation."""
    la, ea = _log_ndtr((c - mu) / sigma)
    lb, eb = _log_ndtr(c / sigma)
    spike = la + (bins - 1) * lb
    err = ea + (bins - 1) * eb + 4 * _U * (np.abs(la) + bins * np.abs(lb))
    if lam >= 1.0:
        return spike, err
    rest = bins * lb
    err0 = bins * eb + 4 * _U * bins * np.abs(lb)
    out = np.logaddexp(math.log(lam) + spike, math.log1p(-lam) + rest)
    return out, np.maximum(err, err0) + 8 * _U * (1.0 + np.abs(out))


def _log_sf_max(c: np.ndarray, sigma: float, bins: int, mu: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``log P(max_j y_j > c)`` and its error bound (accurate where it is small):
    ``1 - (1 - A)(1 - B)^(bins-1)`` through ``log1p`` and ``expm1``, with
    ``A = Phi(-(c - mu)/s)``, ``B = Phi(-c/s)``."""
    la, ea = _log_ndtr(-(c - mu) / sigma)
    lb, eb = _log_ndtr(-c / sigma)
    A, B = np.exp(la), np.exp(lb)
    # |d log1p(-x)| <= x / (1 - x) |dx / x|; the relative error of A is ea + 2u
    with np.errstate(divide="ignore"):
        l1a, l1b = np.log1p(-A), np.log1p(-B)
        ga = A / (1.0 - A) * (ea + 2 * _U) + 2 * _U * np.abs(l1a)
        gb = B / (1.0 - B) * (eb + 2 * _U) + 2 * _U * np.abs(l1b)

    def sf(x: np.ndarray, gx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # log(-expm1(x)), x <= 0: d/dx = 1 / (e^(-x) - 1)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            out = np.log(-np.expm1(x))
            err = gx / np.expm1(-x) + 4 * _U * (1.0 + np.abs(out))
        # at x = 0 the slope is unbounded: the error is unknown (0/0 would be NaN)
        return out, np.where(np.isnan(err), np.inf, err)

    spike, gs = sf(l1a + (bins - 1) * l1b, ga + (bins - 1) * gb + 4 * _U * (np.abs(l1a) + bins * np.abs(l1b)))
    if lam >= 1.0:
        return spike, gs
    rest, gr = sf(bins * l1b, bins * gb + 4 * _U * bins * np.abs(l1b))
    out = np.logaddexp(math.log(lam) + spike, math.log1p(-lam) + rest)
    return out, np.maximum(gs, gr) + 8 * _U * (1.0 + np.abs(out))


def _log_slices(c: np.ndarray, sigma: float, bins: int, mu: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Log masses of ``(-inf, c_0], (c_0, c_1], ..., (c_n, inf)`` under the law of the
    maximum, and a bound on the absolute error of each (from the CDF or the survival
    function, whichever bounds it tighter)."""
    lf, ef = _log_cdf_max(c, sigma, bins, mu, lam)
    ls, es = _log_sf_max(c, sigma, bins, mu, lam)

    def diff(hi, ehi, lo, elo):
        # log(e^hi - e^lo), hi > lo: hi + log(-expm1(lo - hi)); the error of d = lo - hi is
        # amplified by 1 / (e^(-d) - 1)
        d = lo - hi
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = hi + np.log(-np.expm1(d))
            err = ehi + (ehi + elo) / np.expm1(-d) + 6 * _U * (1.0 + np.abs(out))
        bad = ~(np.isfinite(out) & np.isfinite(err) & (d < 0))
        return np.where(bad, -np.inf, out), np.where(bad, np.inf, err)

    from_cdf, e_cdf = diff(lf[1:], ef[1:], lf[:-1], ef[:-1])
    from_sf, e_sf = diff(ls[:-1], es[:-1], ls[1:], es[1:])
    use_sf = e_sf < e_cdf
    mid = np.where(use_sf, from_sf, from_cdf)
    emid = np.where(use_sf, e_sf, e_cdf)
    return (np.concatenate([[lf[0]], mid, [ls[-1]]]), np.concatenate([[ef[0]], emid, [es[-1]]]))


def _cuts(sigma: float, bins: int, mu_hi: float, mu_lo: float, lam: float) -> np.ndarray:
    """Slice boundaries, the privacy loss stepping by about ``_SLICE_LOSS``: from ``c_0``
    where the record's law (the larger maximum) has ``log P(max <= c_0) = _LOG_TAIL`` (the
    other law has at least that much below it) to ``mu_hi + 11 s``."""
    hi = mu_hi + 11.0 * sigma
    a, b = -40.0 * sigma, hi
    for _ in range(60):  # bisection on the (increasing) log-CDF: c_0 to ~1e-15 of the range
        mid = 0.5 * (a + b)
        if float(_log_cdf_max(np.array([mid]), sigma, bins, mu_hi, lam)[0][0]) < _LOG_TAIL:
            a = mid
        else:
            b = mid
    lo = a
    step = _SLICE_LOSS * sigma * sigma / max(mu_hi - mu_lo, 1e-9)
    n = int(min(max(math.ceil((hi - lo) / step), 64), _MAX_SLICES))
    return np.linspace(lo, hi, n + 1)


def max_of_epoch_pair(noise_multiplier: float, bins: int, *, spike: float = 2.0, baseline: float = 1.0,
                      inclusion: float = 1.0) -> tuple[FromPMFs, float]:
    """One epoch's max-of-epoch pair (Chua et al.), sliced, and its error bound ``eta``.

    Parameters
    ----------
    noise_multiplier : float
        ``s``: noise standard deviation over the clipping norm.
    bins : int
        Batches released in the epoch.
    spike, baseline : float
        The record's batch reads ``spike`` (its dataset) against ``baseline``
        (the neighbour's), in clipping norms; ``(2, 1)`` is Chua et al.'s pair
        under zero-out neighbouring, ``(1, 0)`` random allocation's.
    inclusion : float
        Probability that the record is in one of the batches (1; ``drop_last``:
        ``m b / N``).

    Returns
    -------
    (FromPMFs, float)
        The pair ``(p, q)`` of the sliced maximum (``p``: the record's dataset)
        and ``eta``: every ``|log(p_hat_i / p_i)|``, ``|log(q_hat_i / q_i)|``
        is at most it, normalisation included.
    """
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    bins = v.integer("bins", bins, low=1, high=10**9)
    lam = v.real("inclusion", inclusion, low=0.0, high=1.0, low_open=True)
    if not spike > baseline >= 0:
        raise ValueError(f"spike must exceed baseline >= 0, got spike={spike!r}, baseline={baseline!r}")
    c = _cuts(sigma, bins, spike, baseline, lam)
    lp, ep = _log_slices(c, sigma, bins, spike, lam)
    lq, eq = _log_slices(c, sigma, bins, baseline, lam)
    ok = np.isfinite(lp) & np.isfinite(lq) & np.isfinite(ep) & np.isfinite(eq) & (lp > -700) & (lq > -700)
    if not np.all(ok):
        raise ValueError(f"max_of_epoch_pair: the slices of the maximum are not resolved at noise_multiplier="
                         f"{sigma:g}, bins={bins}")
    eta_slice = float(max(ep.max(), eq.max()))
    p, q = np.exp(lp), np.exp(lq)
    # normalisation (FromPMFs divides by the sum, whose true value is 1 within the slices' errors)
    eta = 2.0 * eta_slice + (len(p) + 8) * _U
    return FromPMFs(tuple(p / p.sum()), tuple(q / q.sum())), eta


def _max_pair_epochs(sigma: float, shape: RunShape, whole: int, spike: float, baseline: float) -> tuple[PLD, float]:
    """The max-of-epoch pair over ``whole`` epochs (drop_last: mixed with an epoch left out)."""
    t = shape.steps_per_epoch
    assert t is not None
    lam = 1.0
    if shape.dropped:
        assert shape.dataset_size is not None and shape.batch_size is not None
        lam = t * shape.batch_size / shape.dataset_size
    pair, eta = max_of_epoch_pair(sigma, t, spike=spike, baseline=baseline, inclusion=lam)
    return pair.pld().self_compose(whole), eta * whole


def _certified_lower(d: PLD, delta: float, eta_total: float, rtol: float | None) -> tuple[float, bool]:
    """The lower end of a computed pair's composition, corrected for the pair's own
    error bound (see the module docstring), and whether its bracket met its target."""
    d_shift = delta * math.exp(eta_total)
    if not d_shift < 1.0:
        return 0.0, True
    lo, _, met = _query(d, d_shift, rtol)
    return max(0.0, lo - 2.0 * eta_total), met


def shuffle_bounds(noise_multiplier: float, sampling_rate: float | None = None, steps: int | None = None, *,
                   delta: float, epochs: float | None = None, dataset_size: int | None = None,
                   batch_size: int | None = None, drop_last: bool = False, steps_per_epoch: int | None = None,
                   physical_batch_size: int | None = None, accumulation_steps: int | None = None,
                   runs: int = 1, alternatives: bool = True, random_allocation: bool = True,
                   rtol: float | None = None) -> ShuffleBounds:
    """Certified bounds on epsilon of a shuffled DP-SGD run, the constructions and the alternatives.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm, in ``(0, inf)``.
    sampling_rate, steps, epochs, dataset_size, batch_size, drop_last, steps_per_epoch
        The run, as :func:`pld.dpsgd` takes it (``sampling="shuffle"``).
    physical_batch_size, accumulation_steps
        Gradient accumulation (the run is accounted per logical batch).
    delta : float
        Target delta in ``(0, 1)``.
    runs : int
        Training runs on the same data (composed; default 1).
    alternatives : bool
        Also account the same run under Poisson sampling (rate ``b / N``, or
        ``1 / t``) and balls-in-bins (``t`` steps per epoch).
    random_allocation : bool
        Also the random-allocation construction (its pair's laws take a second
        or more to build; the max-of-epoch construction alone is milliseconds).
    rtol : float, optional
        Bracket target of every query (default: the engine's).

    Returns
    -------
    ShuffleBounds
        ``epsilon_upper`` (publish it), ``epsilon_lower`` (the best lower
        bound), ``binding``, ``constructions``, ``alternatives``.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message).

    Examples
    --------
    >>> b = shuffle_bounds(1.0, dataset_size=50000, batch_size=512, epochs=10, delta=1e-5,
    ...                    alternatives=False)
    >>> b.binding, round(b.epsilon_lower, 2), round(b.epsilon_upper, 2)
    ('max of an epoch (Chua et al.)', 9.42, 17.86)
    """
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    shape = resolve_run("shuffle", sampling_rate, steps, epochs=epochs, dataset_size=dataset_size,
                        batch_size=batch_size, drop_last=drop_last, steps_per_epoch=steps_per_epoch,
                        physical_batch_size=physical_batch_size, accumulation_steps=accumulation_steps)
    runs = v.integer("runs", runs, low=1, high=10**6)
    t = shape.steps_per_epoch
    assert t is not None
    rounds = -(-shape.steps // t) * runs  # (the upper end: a partial epoch as a whole one)
    whole = shape.steps // t * runs       # (the lower ends: whole epochs only, a post-processing)
    _, hi, _ = _query(Gaussian(sigma).pld().self_compose(rounds), delta, rtol)
    upper = (f"no amplification: {rounds} epoch{'s' if rounds > 1 else ''} of one Gaussian step about the record, "
             f"mu = sqrt({rounds}) / {sigma:g} = {math.sqrt(rounds) / sigma:.6g}, exact closed form "
             "(Balle & Wang 2018)")
    found: list[Construction] = []
    alt: dict = {}
    subject = "an epoch" if whole == 1 else f"{whole} reshuffled epochs"
    used = (f" (each record used with probability {t * (shape.batch_size or 0)}/{shape.dataset_size}: drop_last)"
            if shape.dropped else "")
    pairs = [(2.0, 1.0, "max of an epoch (Chua et al.)",
              "every other record's clipped gradient -v, the record's +v, its zero-record replacement's 0 (|v| = C): "
              "the record's batch reads 2 against 1, the others 0; post-processed by the maximum over the batches of "
              f"{subject}{used}",
              "Chua et al., How Private are DP-SGD Implementations?, ICML 2024; Scalable DP-SGD: Shuffling vs. "
              "Poisson Subsampling, NeurIPS 2024")]
    if shape.dropped:  # (random allocation's pair needs every record in a batch: its maximum instead)
        pairs.append((1.0, 0.0, "max of an epoch, zero others",
                      "every other record's clipped gradient 0: the record's batch reads 1 against 0; post-processed "
                      f"by the maximum over the batches of {subject}{used}", "Chua et al., ICML 2024"))
    for spike, baseline, name, pair, ref in pairs if whole >= 1 else ():
        try:
            d_max, eta = _max_pair_epochs(sigma, shape, whole, spike, baseline)
        except ValueError:  # (slices not resolved: the other constructions stand)
            continue
        lo, met = _certified_lower(d_max, delta, eta, rtol)
        found.append(Construction(name, lo, pair, ref, met))
    if whole >= 1 and not shape.dropped and random_allocation:
        try:
            ra = PLD.from_mechanism(_allocation(sigma, t), count=whole)
            if alternatives and whole == rounds:  # (its upper end is the balls-in-bins alternative: full target)
                lo_ra, hi_ra, met = _query(ra, delta, rtol)
            else:  # (a first bracket at 1e-3, refined only where it could bind)
                lo_ra, hi_ra, met = _query(ra, delta, max(ALTERNATIVE_RTOL, rtol or 0.0))
                if (rtol is None or rtol < ALTERNATIVE_RTOL) and hi_ra > max((c.epsilon_lower for c in found),
                                                                             default=0.0):
                    lo_fine, hi_fine, met = _query(ra, delta, rtol)
                    lo_ra, hi_ra = max(lo_ra, lo_fine), min(hi_ra, hi_fine)
        except ValueError:  # (a noise multiplier random allocation refuses: the other bounds stand)
            pass
        else:
            found.append(Construction(
                f"random allocation 1-of-{t}", lo_ra,
                f"every other record's clipped gradient 0: {subject} of N(e_J, s^2 I) against N(0, s^2 I), J the "
                "record's batch (a uniform J is the least distinguishable)",
                "Feldman & Shenfeld 2025; Chua et al., AISTATS 2025", met))
            if alternatives and whole == rounds:
                alt["balls_in_bins"] = {"epsilon_lower": lo_ra, "epsilon_upper": hi_ra, "steps_per_epoch": t,
                                        "epochs": rounds}
    if alternatives:
        if "balls_in_bins" not in alt:
            lo_b, hi_b, _ = _query(PLD.from_mechanism(_allocation(sigma, t), count=rounds), delta, rtol)
            alt["balls_in_bins"] = {"epsilon_lower": lo_b, "epsilon_upper": hi_b, "steps_per_epoch": t,
                                    "epochs": rounds}
        q = shape.batch_size / shape.dataset_size if shape.batch_size and shape.dataset_size else 1.0 / t
        lo_p, hi_p, _ = _query(PoissonSampled(Gaussian(sigma), q).pld().self_compose(shape.steps * runs), delta,
                               rtol)
        alt["poisson"] = {"epsilon_lower": lo_p, "epsilon_upper": hi_p, "sampling_rate": q,
                          "steps": shape.steps * runs}
    best = max(found, key=lambda c: c.epsilon_lower, default=None)
    return ShuffleBounds(epsilon_upper=hi, epsilon_lower=0.0 if best is None else best.epsilon_lower,
                         binding="none (no whole epoch)" if best is None else best.name,
                         constructions=tuple(found), delta=delta, noise_multiplier=sigma, steps_per_epoch=t,
                         steps=shape.steps * runs, epochs=rounds, whole_epochs=whole, upper=upper, alternatives=alt)


def _query(d: PLD, delta: float, rtol: float | None) -> tuple[float, float, bool]:
    """``(lower, upper, whether the bracket met its target)``: a target missed is said by
    the caller (the report), once, for the bound that matters."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TargetMissedWarning)
        lo, hi = d.epsilon_bounds(delta, rtol=rtol)
    missed = False
    for w in caught:
        if issubclass(w.category, TargetMissedWarning):
            missed = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return float(lo), float(hi), not missed


def _allocation(sigma: float, t: int):
    from pld.mechanisms.allocation import RandomAllocation

    # (1-of-1 is the Gaussian mechanism itself: the record is in the one batch)
    return Gaussian(sigma) if t == 1 else RandomAllocation(Gaussian(sigma), t)
