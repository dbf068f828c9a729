"""Calibration in a loader's units: the most epochs, or the largest batch, that meet a target.

A training script thinks in epochs and batch sizes, not in steps and rates.
:func:`calibrate_epochs` answers "how many epochs can I train?" and
:func:`calibrate_batch_size` "how large may my batches be at E epochs?", both
for the run as its loader makes it (:mod:`pld.accounting.loaders`: ``ceil(N /
b)`` steps per epoch, ``drop_last``, the short last batch of sampling without
replacement, whole epochs of the run-level schemes).

Both return a value whose run was accounted and found within the target
(certified upper end ``<=`` target) next to the value one beyond it, accounted
and not certifiable within it (its certified upper end ``>`` target); ``info``
gets both brackets.  Every point is decided by a coarse bracket (``rtol``
1e-2) when that one already lies on one side of the target, and refined to
the engine's default target only when it straddles it.

The epsilon of a run grows with its epochs (a longer run releases more: its
first epochs are a post-processing of it), so the epochs are bracketed by
doubling and bisection.  At a fixed number of epochs it grows with the batch
size for every scheme pld accounts (fewer, less amplified steps), which the
bisection on the batch size assumes; the answer's neighbour ``b + 1`` is
evaluated either way.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

from pld import _validate as v
from pld.accounting.calibrate_search import check_target
from pld.accounting.loaders import MAX_STEPS, RunShape, resolve_run, run_pld
from pld.distribution import TargetMissedWarning

__all__ = ["calibrate_epochs", "calibrate_batch_size"]

#: bracket target of the first look at a point (most points are decided by it)
COARSE_RTOL = 1e-2


class _Points:
    """Certified brackets of the points a search looks at (a point is decided by its
    coarse bracket when that lies on one side of the target)."""

    def __init__(self, target: float, delta: float, noise_multiplier: float, shape_of: Callable[[int], RunShape]):
        self.target, self.delta, self.sigma, self.shape_of = target, delta, noise_multiplier, shape_of
        self.seen: dict[int, tuple[float, float]] = {}
        self.engine_seconds = 0.0

    def bracket(self, x: int) -> tuple[float, float]:
        if x not in self.seen:
            t0 = time.perf_counter()
            d = run_pld(self.sigma, self.shape_of(x))
            if not d.tight:  # (shuffling: only its upper end decides; the lower end is not needed here)
                d = d.bounds()[0]
            with warnings.catch_warnings():
                # (a coarse bracket that decides nothing falls through to the default target, whose
                # own warnings are the caller's)
                warnings.simplefilter("ignore", TargetMissedWarning)
                lo, hi = d.epsilon_bounds(self.delta, rtol=COARSE_RTOL)
            if lo <= self.target < hi:
                lo, hi = d.epsilon_bounds(self.delta)
            self.seen[x] = (float(lo), float(hi))
            self.engine_seconds += time.perf_counter() - t0
        return self.seen[x]

    def fits(self, x: int) -> bool:
        return self.bracket(x)[1] <= self.target

    def info(self, info: dict | None, t0: float, name: str, value: int) -> None:
        if info is not None:
            info.update({"parameter": name, "value": value, "evaluations": len(self.seen),
                         "points": sorted((x, lo, hi) for x, (lo, hi) in self.seen.items()),
                         "next": (value + 1, *self.seen.get(value + 1, (math.nan, math.nan))),
                         "seconds": time.perf_counter() - t0, "engine_seconds": self.engine_seconds})


def _largest(points: _Points, low: int, high: int, start: int) -> int:
    """The largest ``x`` in ``[low, high]`` that fits, ``x + 1`` not (or ``x = high``), for a
    monotone ``fits``; ``low`` fits."""
    good, bad = low, None
    x = max(low + 1, min(start, high))
    while bad is None and x <= high:  # (doubling from the start until one does not fit)
        if points.fits(x):
            good = x
            if x == high:
                return high
            x = min(2 * x, high)
        else:
            bad = x
    if bad is None:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        if points.fits(mid):
            good = mid
        else:
            bad = mid
    points.bracket(good + 1)  # (the neighbour's bracket, for the answer's check)
    return good


def calibrate_epochs(target_epsilon: float, delta: float, noise_multiplier: float, *, sampling: str = "poisson",
                     sampling_rate: float | None = None, dataset_size: int | None = None,
                     batch_size: int | None = None, drop_last: bool = False, steps_per_epoch: int | None = None,
                     participations: int | None = None, info: dict | None = None) -> int:
    """Most whole epochs whose run has certified epsilon at most the target.

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    sampling, sampling_rate, dataset_size, batch_size, drop_last, steps_per_epoch, participations
        The loader, as :func:`pld.dpsgd` takes it; it must define an epoch
        (a dataset and batch size, ``steps_per_epoch``, or a rate ``1/m``).
    info : dict, optional
        Filled with ``evaluations``, ``points`` (``(epochs, lower, upper)``),
        ``next`` (the bracket of one epoch more), ``seconds``.

    Returns
    -------
    int
        ``E``: ``E`` epochs fit (evaluated), ``E + 1`` cannot be certified within the target.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), a loader without a
        step count per epoch, or if one epoch already exceeds the target.

    Examples
    --------
    >>> import pld
    >>> E = calibrate_epochs(3.0, 1e-5, 1.0, dataset_size=50000, batch_size=512)
    >>> pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=E).epsilon(1e-5) <= 3.0
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = check_target(target_epsilon, delta)
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    base = resolve_run(sampling, sampling_rate, 1, dataset_size=dataset_size, batch_size=batch_size,
                       drop_last=drop_last, steps_per_epoch=steps_per_epoch, participations=participations)
    m = base.steps_per_epoch
    if m is None:
        raise ValueError("calibrate_epochs needs the steps of an epoch: give dataset_size and batch_size, "
                         "steps_per_epoch, or a sampling_rate of 1/m (else calibrate_steps gives the steps)")
    points = _Points(target_epsilon, delta, sigma, lambda e: _with_epochs(base, e))
    if not points.fits(1):
        lo, hi = points.bracket(1)
        raise ValueError(f"even one epoch exceeds target_epsilon={target_epsilon!r}: its certified epsilon is "
                         f"[{lo:.6g}, {hi:.6g}] at delta={delta!r}; raise noise_multiplier or lower the batch size")
    start = 2
    if base.scheme.per_step and not base.short_batch:
        # (the steps' own calibration, surrogate-guided, puts the first look next to the answer)
        from pld.accounting.calibrate import calibrate_steps

        try:
            start = max(2, calibrate_steps(target_epsilon, delta, sigma, base.sampling_rate,
                                           sampling=base.sampling) // m)
        except ValueError:
            start = 2
    E = _largest(points, 1, MAX_STEPS // m, start)
    points.info(info, t0, "epochs", E)
    return E


def _with_epochs(base: RunShape, epochs: int) -> RunShape:
    from dataclasses import replace

    assert base.steps_per_epoch is not None
    return replace(base, steps=epochs * base.steps_per_epoch, epochs=float(epochs))


def calibrate_batch_size(target_epsilon: float, delta: float, noise_multiplier: float, *, dataset_size: int,
                         epochs: float, sampling: str = "poisson", drop_last: bool = False,
                         participations: int | None = None, info: dict | None = None) -> int:
    """Largest (logical) batch size whose run of ``epochs`` epochs has certified epsilon at most the target.

    The run is ``epochs`` epochs of ``ceil(N / b)`` steps (``floor`` with
    ``drop_last``) at rate ``b / N`` (run-level schemes: ``k`` of the steps).

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    dataset_size : int
        ``N >= 1``.
    epochs : float
        ``> 0``.
    sampling, drop_last, participations
        As :func:`pld.dpsgd` takes them.
    info : dict, optional
        Filled as in :func:`calibrate_epochs` (points are ``(batch size, lower, upper)``).

    Returns
    -------
    int
        ``b``: batch ``b`` fits (evaluated), ``b + 1`` cannot be certified
        within the target (or ``b = N``).

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if even a batch of
        one record exceeds the target.

    Examples
    --------
    >>> import pld
    >>> b = calibrate_batch_size(3.0, 1e-5, 1.0, dataset_size=50000, epochs=10)
    >>> pld.dpsgd(1.0, dataset_size=50000, batch_size=b, epochs=10).epsilon(1e-5) <= 3.0
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = check_target(target_epsilon, delta)
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    n = v.integer("dataset_size", dataset_size, low=1, high=MAX_STEPS)
    E = v.real("epochs", epochs, low=0.0, low_open=True)
    resolve_run(sampling, dataset_size=n, batch_size=1, epochs=E, participations=participations)  # (checks)

    def shape_of(b: int) -> RunShape:
        return resolve_run(sampling, dataset_size=n, batch_size=b, epochs=E, drop_last=drop_last,
                           participations=participations)

    points = _Points(target_epsilon, delta, sigma, shape_of)
    if not points.fits(1):
        lo, hi = points.bracket(1)
        raise ValueError(f"even a batch of one record exceeds target_epsilon={target_epsilon!r} over {E:g} epochs: "
                         f"certified epsilon [{lo:.6g}, {hi:.6g}] at delta={delta!r}; raise noise_multiplier or "
                         "train fewer epochs")
    b = _largest(points, 1, n, max(2, n // 64))
    points.info(info, t0, "batch_size", b)
    return b
