"""The sampling schemes built from rounds of random allocation: balls-in-bins (1 of ``t = 1/q``
steps per epoch), random allocation (``k`` of ``t = k/q``) and shuffling, registered with
:mod:`pld.accounting.sampling` so that ``pld.dpsgd(..., sampling=...)`` composes their epochs."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math

import numpy as np

from pld import _validate as v
from pld.accounting import sampling
from pld.distribution import PLD
from pld.mechanisms import Gaussian
from pld.mechanisms import adjacency as adj
from pld.mechanisms.allocation import MAX_STEPS, SPACING_PER_SD, RandomAllocation
from pld.mechanisms.allocation.shuffling import Shuffling
from pld.mechanisms.allocation.subsampled import SubsampledRound
from pld.mechanisms.base import Mechanism
from pld.mechanisms.matrix import Bracketed
from pld.mechanisms.mixtures import MixtureOfGaussians
from pld.mechanisms.subsampled import PoissonSampled


def _steps_per_epoch(sampling_rate: float, participations: int = 1) -> int:
    """``t = k / q``: the steps of an epoch in which every record takes part ``k`` times."""
    t = participations / sampling_rate
    steps = round(t)
    if steps < 1 or abs(t - steps) > 1e-9 * t:
        raise ValueError(f"sampling_rate must be participations / (steps per epoch) for random allocation "
                         f"(every record in exactly {participations} of the steps of an epoch), got "
                         f"{sampling_rate!r}: {participations} / {sampling_rate!r} = {t:.6g} is not an integer")
    return steps


def _epochs_run(epoch: Mechanism, noise_multiplier: float, steps: int, t: int, k: int = 1,
                inclusion: float = 1.0, spacing: float = SPACING_PER_SD, precise: bool = True) -> PLD:
    """``steps`` steps of epochs of ``t`` steps, each epoch one run of ``epoch`` (``k``
    participations per epoch, Gaussian noise ``noise_multiplier``; ``inclusion``: the
    probability that the record is in the epoch's batches at all, below 1 where a
    ``drop_last`` loader leaves records out; ``spacing``, ``precise``: the rounds' settings).

    A last partial epoch of ``m < t`` steps holds the record in one of them with
    probability ``m / t``, uniformly: for one participation, the 1-of-``m`` round held with
    that probability (:class:`SubsampledRound`, tight; ``m = 1``: the Poisson-subsampled
    Gaussian), so balls-in-bins stays tight.  Otherwise the run is bounded two ways
    (:class:`pld.mechanisms.matrix.Bracketed`).  Above: every epoch whole and with the record
    (the ``t - m`` steps not run are a post-processing of the whole epoch; an epoch the record
    may miss is the mixture ``(1 - u) Q + u P`` with one it cannot, and the hockey-stick
    divergence is convex).  Below, post-processings of the run: shuffling's lower pair (the
    allocation pair of a dataset whose other records contribute zero) held with probability
    ``u`` (``u m / t`` in a partial epoch); ``k`` of ``t``: the whole epochs' lower
    construction and the sum of the partial epoch's outputs, ``N(H, m sigma^2)`` against
    ``N(0, m sigma^2)``, ``H`` hypergeometric.  The whole epoch is no lower end for a partial
    one: the run of ``m`` steps can be far more private.
    """
    whole, m = divmod(steps, t)
    if not m and inclusion == 1.0:
        return epoch.pld().self_compose(whole)

    def held(run: int, rate: float) -> Mechanism:
        """The record in one of ``run`` steps, uniformly, with probability ``rate``."""
        if run == 1:
            return PoissonSampled(Gaussian(noise_multiplier), rate) if rate < 1.0 else Gaussian(noise_multiplier)
        own = RandomAllocation(Gaussian(noise_multiplier), run, 1, spacing, precise=precise)
        return SubsampledRound(own, rate) if rate < 1.0 else own

    if epoch.tight and inclusion == 1.0:
        return PLD((((epoch, whole),) if whole else ()) + ((held(m, m / t), 1),))
    up, low = epoch.bound_parts()
    upper = tuple((mech, c * (whole + (m > 0))) for mech, c in up)
    if k == 1:
        try:
            lower: list | None = ([(held(t, inclusion), whole)] if whole else []) + (
                [(held(m, inclusion * m / t), 1)] if m else [])
        except ValueError:  # (no allocation pair at this noise: Shuffling warns of it too)
            lower = None
    else:
        lower = None if low is None else [(mech, c * whole) for mech, c in low if whole]
        stat = _partial_sum(noise_multiplier, t, k, m)
        if stat is not None and lower is not None:
            lower.append((stat, 1))
    epochs = f"{whole} epoch{'s' if whole != 1 else ''}" + (f" and {m} of {t} steps" if m else "")
    used = "" if inclusion == 1.0 else f", each record in an epoch with probability {inclusion:.6g} (drop_last)"
    notes = epoch.bound_notes()
    return Bracketed(
        name=f"{type(epoch).__name__} run of {epochs}{used}", upper=upper,
        lower=tuple(lower) if lower else None, relation=epoch.adjacency,
        upper_note=f"{epochs}{used}: every epoch whole and with the record (post-processing, convexity); "
                   + notes["upper"],
        lower_note=f"{epochs}{used}: " + (
            "the allocation pair of a dataset whose other records contribute zero, held with the probability "
            "the record is in the steps run" if k == 1 else
            f"the whole epochs' lower construction ({notes['lower']}) and the sum of the partial epoch's "
            f"{m} outputs") + " (post-processings of the run)").pld()


#: most participations in a partial epoch whose sum statistic is composed as a mixture
_PARTIAL_COMPONENTS = 64


def _partial_sum(noise_multiplier: float, t: int, k: int, m: int) -> Mechanism | None:
    """The sum of the first ``m`` outputs of an epoch of ``t`` steps in which the record
    takes ``k`` uniformly chosen ones: ``N(H, m sigma^2)`` against ``N(0, m sigma^2)``,
    ``H ~ Hypergeometric(t, k, m)`` (None where ``H`` has too many values to compose)."""
    s = noise_multiplier * math.sqrt(m)
    top = min(k, m)
    if top > _PARTIAL_COMPONENTS:
        return None
    def log_comb(n: int, r: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)

    h = range(max(0, m - (t - k)), top + 1)
    log_pmf = np.array([log_comb(k, j) + log_comb(t - k, m - j) - log_comb(t, m) for j in h])
    pmf = np.exp(log_pmf - log_pmf.max())
    return MixtureOfGaussians(s, tuple(float(j) for j in h), tuple(float(x) for x in pmf / pmf.sum()))


#: first-grid spacing of the rounds the sampling schemes build (None: SPACING_PER_SD)
_RUN_SPACING: contextvars.ContextVar[float | None] = contextvars.ContextVar("allocation_spacing", default=None)
_RUN_PRECISE: contextvars.ContextVar[bool] = contextvars.ContextVar("allocation_precise_runs", default=True)
_RUN_CHEAP: contextvars.ContextVar[bool] = contextvars.ContextVar("allocation_cheap_runs", default=False)
#: a cheap run's 1-of-t rounds take the single linear grid where its first window has at most this
#: many cells (below, it builds in about half the split's time: sigma 1, 1 of 100 at spacing 0.08,
#: 29522 cells, 0.07 against 0.13-0.19 s; at sigma 0.9, 1 of 300, their times were equal)
_CHEAP_LINEAR_CELLS = 1 << 15


@contextlib.contextmanager
def run_spacing(spacing: float | None, precise: bool = True, cheap: bool = False):
    """Rounds built by the sampling schemes in this context use first grids of
    ``spacing`` standard deviations (None: the default; a coarse one is cheaper and still
    certified: the calibration's first, coarse brackets use it), built ``precise`` or not
    (:class:`RandomAllocation`; the calibration's search, whose tolerance is above what
    round-off moves, builds them in double only); ``cheap``: a 1-of-``t`` round takes the
    construction that builds fastest where it is known to (the single linear grid over at
    most ``_CHEAP_LINEAR_CELLS`` cells), not the narrowest (the calibration's coarse brackets,
    which only have to tell points far from the target)."""
    token = _RUN_SPACING.set(None if spacing is None else v.real("spacing", spacing, low=1e-4, high=1.0))
    p_token = _RUN_PRECISE.set(bool(precise))
    c_token = _RUN_CHEAP.set(bool(cheap))
    try:
        yield
    finally:
        _RUN_CHEAP.reset(c_token)
        _RUN_PRECISE.reset(p_token)
        _RUN_SPACING.reset(token)


def _allocation_run(noise_multiplier: float, sampling_rate: float, steps: int, participations: int = 1) -> PLD:
    participations = v.integer("participations", participations, low=1, high=MAX_STEPS)
    t = _steps_per_epoch(sampling_rate, participations)
    spacing = _RUN_SPACING.get() or SPACING_PER_SD
    if t == participations:  # (every record in every step: the Gaussian mechanism, step by step)
        return Gaussian(noise_multiplier).pld().self_compose(steps)
    precise = _RUN_PRECISE.get()
    epoch = RandomAllocation(Gaussian(noise_multiplier), t, participations, spacing, precise=precise)
    if (_RUN_CHEAP.get() and participations == 1 and epoch._fits_linear(spacing)
            and epoch._linear_cells() <= _CHEAP_LINEAR_CELLS):
        epoch = dataclasses.replace(epoch, construction="linear")
    return _epochs_run(epoch, noise_multiplier, steps, t, participations, spacing=spacing, precise=precise)


def _shuffle_run(noise_multiplier: float, sampling_rate: float, steps: int, inclusion: float = 1.0) -> PLD:
    inclusion = v.real("inclusion", inclusion, low=0.0, high=1.0, low_open=True)
    t = _steps_per_epoch(sampling_rate)
    if t == 1 and inclusion == 1.0:  # (one batch: every record in every step)
        return Gaussian(noise_multiplier).pld().self_compose(steps)
    spacing = _RUN_SPACING.get() or SPACING_PER_SD
    return _epochs_run(Shuffling(Gaussian(noise_multiplier), t, spacing), noise_multiplier, steps, t,
                       inclusion=inclusion, spacing=spacing)


_WHOLE_EPOCHS = ("epochs composed; a last partial epoch of m of t steps holds the record with probability m/t, "
                 "in one of its steps")

BALLS_IN_BINS = sampling.register(sampling.SamplingScheme(
    name="balls_in_bins",
    aliases=("balls_and_bins", "bnb", "random_allocation_1"),
    adjacency=adj.ADD_OR_REMOVE,
    description="balls-in-bins (every record in exactly one uniformly chosen step of each epoch of 1/q steps)",
    batch_name="expected batch",
    run_pld=_allocation_run,
    epoch_steps=_steps_per_epoch,
    summary="balls-in-bins (random allocation, 1 of t = 1/q steps per epoch), add-or-remove one record (both "
            "directions); " + _WHOLE_EPOCHS + "; sigma = noise std / clipping norm C",
    caveat="covers loaders that put every record in exactly one uniformly chosen batch per epoch, "
           "independently of the other records; a shuffled permutation cut into batches is sampling='shuffle'"))

RANDOM_ALLOCATION = sampling.register(sampling.SamplingScheme(
    name="random_allocation",
    aliases=("allocation", "k_of_t"),
    adjacency=adj.ADD_OR_REMOVE,
    description="random allocation (every record in exactly k uniformly chosen steps of each epoch of k/q steps)",
    batch_name="expected batch",
    run_pld=_allocation_run,
    epoch_steps=_steps_per_epoch,
    options=("participations",),
    summary="random allocation (k of t = k/q steps per epoch; for k > 1 the upper end by the block argument, "
            "the lower end by a statistic of the outputs: see RandomAllocation.explain), add-or-remove one record; "
            + _WHOLE_EPOCHS + "; sigma = noise std / clipping norm C"))

SHUFFLE = sampling.register(sampling.SamplingScheme(
    name="shuffle",
    aliases=("shuffling", "shuffled"),
    adjacency=adj.REPLACE_SPECIAL,
    description="shuffling (a random permutation cut into 1/q fixed batches each epoch)",
    batch_name="batch",
    run_pld=_shuffle_run,
    epoch_steps=_steps_per_epoch,
    options=("inclusion",),
    summary="shuffling, the record's slot replaced by a zero record: certified but NOT tight: the upper end "
            "assumes no amplification (one Gaussian step per epoch), the lower end is 1-of-t allocation on a "
            "dataset whose other records contribute zero (with drop_last, which may leave the record out of an "
            "epoch, that pair held with the probability the record is kept); " + _WHOLE_EPOCHS,
    caveat="no tight analysis of shuffling is known: the bracket is wide by construction"))
