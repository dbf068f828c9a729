"""Calibrate DP-SGD parameters to a privacy target, with a certificate.

Every function returns a value whose *certified upper* epsilon, re-accounted
with :func:`pld.dpsgd`, is at most the target (the search only ever returns a
point it has evaluated and found within budget), and proves near-optimality
with an evaluated point just beyond it that exceeds the target:

* :func:`calibrate_noise`: smallest noise multiplier, to ``rtol``;
* :func:`calibrate_steps`: most steps (``T`` fits, ``T + 1`` does not);
* :func:`calibrate_sampling_rate`: largest sampling rate, to ``rtol``.

Search
------
Each engine evaluation costs a full certified accounting (about a second for
``T = 1e5`` steps), so the search spends its effort on *predicting* where the
target is crossed:

1. a cheap surrogate, the saddle-point approximation of ``delta(epsilon)``
   built from the exact cumulant generating function of one step's privacy
   loss (``T psi(theta)``, from the loss model's exploration; milliseconds per
   point), is solved for the parameter;
2. after each engine evaluation the surrogate is corrected by the measured
   offset ``log eps_engine - log eps_surrogate`` (linear in the parameter once
   two points are known), and the next point is placed just inside or just
   outside the predicted crossing so that one more evaluation can close the
   bracket to the tolerance;
3. safeguards: a trust region (a factor ``e^0.5`` per step in the parameter,
   doubling while predictions keep pointing further) stops a surrogate of the
   wrong shape (one step, tiny rates) from throwing the search far away; where
   the surrogate is unavailable an engine-only secant in ``(log parameter,
   log eps)`` is used; the bracket grows geometrically when evaluations keep
   falling on one side, and bisection in log scale takes over when predictions
   stop halving the bracket.  Points where the engine cannot certify
   (infinite epsilon, grid too large, ...) count as over budget.

Only the certified upper end decides; the cheap lower end of every bracket is
reported in ``info``.  Typically 2-4 engine evaluations are needed (2 is the
minimum: one point within budget and one just beyond); pass ``info={}`` to
get the number used, every evaluated point and the time.
"""

from __future__ import annotations

import math
import time
import warnings

from pld import _validate as v
from pld.accounting import sampling as sampling_registry
from pld.accounting.calibrate_mechanism import calibrate_parameter
from pld.accounting.calibrate_search import (
    MAX_EVALUATIONS,
    TRUST_RADIUS,
    Search,
    Surrogate,
    bracket_rtol,
    check_target,
    record_info,
    surrogate_root,
)
from pld.accounting.dpsgd import MAX_STEPS, dpsgd, sampling_scheme
from pld.accounting.loaders import RunShape, resolve_run, run_pld

__all__ = ["calibrate_noise", "calibrate_steps", "calibrate_sampling_rate", "calibrate_parameter",
           "MAX_EVALUATIONS", "TRUST_RADIUS"]

#: the search under its former private name (tests drive it directly)
_Search = Search
#: doctest.testmod(pld.accounting.calibrate) also runs the examples of the re-exported
#: calibrate_parameter (defined in pld.accounting.calibrate_mechanism)
__test__ = {"calibrate_parameter": calibrate_parameter}

#: smallest sampling rate the rate search goes down to
MIN_SAMPLING_RATE = 1e-12
#: noise multipliers the noise search explores
SIGMA_RANGE = (1e-3, 1e12)


def _deciding(d):
    """The PLD whose bracket decides a point.  A run that is not tight (shuffling, k of t) meets
    the target when its certified upper end does, so only its dominating composition is
    queried: that composition's bracket also certifies where the upper end cannot meet the
    target (the true epsilon's lower end, further down, would not)."""
    return d if d.tight else d.bounds()[0]


def calibrate_noise(target_epsilon: float | None = None, delta: float | None = None,
                    sampling_rate: float | None = None, steps: int | None = None, *,
                    sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None,
                    target_tpr: float | None = None, at_fpr: float | None = None,
                    epochs: float | None = None, dataset_size: int | None = None, batch_size: int | None = None,
                    drop_last: bool = False, steps_per_epoch: int | None = None,
                    participations: int | None = None) -> float:
    """Smallest noise multiplier whose certified epsilon at ``delta`` is at most the target.

    Or, with ``target_tpr`` and ``at_fpr`` in place of ``target_epsilon`` and
    ``delta``: whose certified TPR of the best membership-inference attack at
    FPR ``at_fpr`` is at most ``target_tpr`` (:func:`pld.report.risk_calibrate.calibrate_noise_to_tpr`).

    Returns ``sigma`` with ``pld.dpsgd(sigma, sampling_rate, steps, sampling=sampling)
    .epsilon(delta) <= target_epsilon`` (evaluated; the run described as
    :func:`pld.dpsgd` takes it, e.g. by its loader), next to an evaluated
    noise multiplier at least ``sigma / (1 + rtol)`` whose certified epsilon
    exceeds the target: ``sigma`` is the smallest to ``rtol``.  Every target is
    feasible (epsilon tends to 0 as the noise grows); the search covers noise
    multipliers in ``[1e-3, 1e12]``.

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    sampling_rate : float, optional
        In ``(0, 1]``; or give ``dataset_size`` and ``batch_size``.
    steps : int, optional
        In ``[1, 1e12]``; or give ``epochs``.
    sampling : str
        Sampling scheme, as in :func:`pld.dpsgd` (any scheme of :mod:`pld.accounting.sampling`).
    epochs, dataset_size, batch_size, drop_last, steps_per_epoch, participations
        The run as its loader makes it, as in :func:`pld.dpsgd`
        (:func:`pld.accounting.loaders.resolve_run`): ``ceil(N / b)`` steps per
        epoch (``floor`` with ``drop_last``), whole epochs of a run-level scheme,
        the short last batch of sampling without replacement at its own rate.
    rtol : float
        Relative tolerance on the noise multiplier, in ``[1e-6, 1)``.
    info : dict, optional
        Filled with ``evaluations`` (engine accountings used), ``points``
        (``(sigma, eps_lower, eps_upper)`` per evaluation, in order), ``seconds``
        and ``engine_seconds`` (time spent in the engine).
    target_tpr, at_fpr : float, optional
        In ``(0, 1)``, ``target_tpr > at_fpr``: calibrate to attack risk instead
        of epsilon (give both, and neither ``target_epsilon`` nor ``delta``).

    Returns
    -------
    float
        The noise multiplier.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if no noise
        multiplier up to 1e12 certifies the target.

    See Also
    --------
    calibrate_parameter : the same for any mechanism's parameter.

    Examples
    --------
    >>> import pld
    >>> sigma = pld.calibrate_noise(target_epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=1000)
    >>> pld.dpsgd(sigma, 0.01, 1000).epsilon(1e-5) <= 2.0
    True

    A balls-in-bins loader whose batch does not divide the dataset (``ceil(1000 / 64) = 16``
    batches per epoch, each record in one of them):

    >>> sigma = pld.calibrate_noise(3.0, 1e-5, dataset_size=1000, batch_size=64, epochs=5,
    ...                             sampling="balls_in_bins")
    >>> pld.dpsgd(sigma, dataset_size=1000, batch_size=64, epochs=5, sampling="balls_in_bins").epsilon(1e-5) <= 3.0
    True
    """
    loader = dict(epochs=epochs, dataset_size=dataset_size, batch_size=batch_size, drop_last=drop_last,
                  steps_per_epoch=steps_per_epoch, participations=participations)
    if target_tpr is not None or at_fpr is not None:
        if target_epsilon is not None or delta is not None:
            raise TypeError("give either target_epsilon and delta or target_tpr and at_fpr, not both")
        from pld.report.risk_calibrate import calibrate_noise_to_tpr  # (attack risk: read off the trade-off curve)

        return calibrate_noise_to_tpr(target_tpr, at_fpr,  # type: ignore[arg-type]
                                      sampling=sampling, rtol=rtol, info=info,
                                      run=_run(sampling, sampling_rate, steps, loader))
    t0 = time.perf_counter()
    target_epsilon, delta = check_target(target_epsilon, delta)
    run = _run(sampling, sampling_rate, steps, loader)
    sampling_rate, steps, sampling = run.sampling_rate, run.steps, run.sampling
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = Surrogate(delta, sampling)
    tol = math.log1p(rtol)

    fine = bracket_rtol(rtol)
    # a run-level scheme (random allocation, shuffling) builds its laws per
    # noise multiplier: a point whose coarse bracket already lies on one side
    # of the target is decided by it (both ends are certified), and only
    # points near the target get the finer brackets
    coarse = [r for r in (1e-2, 1e-3) if r > fine] if sampling_registry.get(sampling).run_pld is not None else []
    last = [math.inf]  # (the previous point's relative distance from the target)

    def engine(u):
        lo, hi = _engine(u)
        if math.isfinite(hi) and hi > 0:
            last[0] = abs(0.5 * (lo + hi) / target_epsilon - 1.0)
        return lo, hi

    def _engine(u):
        # brackets a few times narrower than the epsilon step between sigma and
        # sigma / (1 + rtol) separate the two; tighter ones only cost time
        from pld.mechanisms.allocation import run_spacing

        # (random allocation's rounds in double only: still certified, up to twice as fast to
        # build; the round-off long double takes off widens a bracket by well under the search's
        # tolerance at moderate deltas, and by a few tenths of a percent at worst (sigma 1.3,
        # 1-of-662, delta 1e-9), where the noise found is that much more conservative)
        with run_spacing(None, precise=False):
            d = _deciding(run_pld(math.exp(u), run))
        for r in coarse:
            if r >= 1e-2 and last[0] < _ENDGAME:
                # the coarse grid's laws cost about what the default's do (at
                # large sigma): once the search is this close, its next points
                # lie within a coarse bracket's width of the target
                continue
            if r >= 1e-2:
                # (the coarsest bracket from rounds on a coarse grid: 4x fewer cells; its
                # warnings are internal: a bracket that decides nothing falls through)
                with run_spacing(0.08, precise=False, cheap=True), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    lo, hi = _deciding(run_pld(math.exp(u), run)).epsilon_bounds(delta, rtol=r)
            else:
                lo, hi = d.epsilon_bounds(delta, rtol=r)
            if hi <= target_epsilon or lo > target_epsilon:
                return lo, hi
        return d.epsilon_bounds(delta, rtol=fine)

    search = Search(target_epsilon, engine, lambda u: sur.epsilon(math.exp(u), sampling_rate, steps),
                     math.log(SIGMA_RANGE[0]), math.log(SIGMA_RANGE[1]), lambda u: tol)
    u = search.run(surrogate_root(search, math.log(_sigma_start(target_epsilon, delta, sampling_rate, steps))))
    if not math.isfinite(u):
        raise ValueError(
            f"no noise multiplier up to {SIGMA_RANGE[1]:g} certifies target_epsilon={target_epsilon!r} at "
            f"delta={delta!r} (last engine error: {search.last_error!r})")
    sigma = math.exp(u)
    record_info(search, info, t0, sigma, "noise_multiplier", math.exp)
    return sigma


def _run(sampling, sampling_rate, steps, loader: dict) -> RunShape:
    """The run a calibration accounts, resolved as :func:`pld.dpsgd` resolves it (which validates
    it); without a loader, a missing ``sampling_rate`` or ``steps`` is named here."""
    no_loader = all(loader[k] is None for k in ("epochs", "dataset_size", "batch_size", "steps_per_epoch"))
    if no_loader and (sampling_rate is None or steps is None):
        missing = " and ".join(n for n, x in (("sampling_rate", sampling_rate), ("steps", steps)) if x is None)
        raise TypeError(f"the run needs {missing}: give sampling_rate and steps, or the loader "
                        "(dataset_size, batch_size and epochs, as pld.dpsgd takes them)")
    return resolve_run(sampling, sampling_rate, steps, **loader)


#: relative distance of the last point from the target past which a run-level
#: scheme's search skips its coarsest brackets (they would not decide)
_ENDGAME = 0.05


def _sigma_start(eps: float, delta: float, q: float, steps: int) -> float:
    """Rough start: a Gaussian-DP mu for (eps, delta), inverted through the CLT
    ``mu = q sqrt(T (e^{1/sigma^2} - 1))`` (Bu et al.; Dong, Roth & Su)."""
    mu = max(eps / math.sqrt(2 * math.log(1 / delta)) * 1.5, 1e-6)
    r = mu / (q * math.sqrt(steps))
    val = math.log1p(r * r)
    if not (math.isfinite(val) and val > 0):
        return 1.0
    return float(min(max(1.0 / math.sqrt(val), SIGMA_RANGE[0] * 10), SIGMA_RANGE[1] / 10))


def _snap_steps(u: float, toward_good: bool) -> float:
    """``u = -log T`` rounded to an integer ``T`` (fewer steps is the good side)."""
    t = math.exp(-u)
    r = math.floor(t * (1 + 1e-12)) if toward_good else math.ceil(t * (1 - 1e-12))
    r = min(max(r, 1), MAX_STEPS)
    return -math.log(r)


def calibrate_steps(target_epsilon: float, delta: float, noise_multiplier: float, sampling_rate: float, *,
                    sampling: str = "poisson", info: dict | None = None) -> int:
    """Largest number of steps whose certified epsilon at ``delta`` is at most the target.

    Returns ``T`` with ``pld.dpsgd(noise_multiplier, sampling_rate, T, sampling=sampling)
    .epsilon(delta) <= target_epsilon``, ``T + 1`` evaluated above the target
    (capped at 1e12 steps).

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    sampling_rate : float
        In ``(0, 1]``.
    sampling : str
        Sampling scheme, as in :func:`pld.dpsgd` (any scheme of :mod:`pld.accounting.sampling`).
    info : dict, optional
        Filled as in :func:`calibrate_noise`.

    Returns
    -------
    int
        The number of steps.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if even one step
        exceeds the target.

    Examples
    --------
    >>> import pld
    >>> T = pld.calibrate_steps(target_epsilon=2.0, delta=1e-5, noise_multiplier=1.0, sampling_rate=0.01)
    >>> pld.dpsgd(1.0, 0.01, T).epsilon(1e-5) <= 2.0 < pld.dpsgd(1.0, 0.01, T + 1).epsilon(1e-5)
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = check_target(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    sampling = sampling_scheme(sampling)

    sur = Surrogate(delta, sampling)

    def engine(u):
        t = int(round(math.exp(-u)))
        return _deciding(dpsgd(noise_multiplier, sampling_rate, t, sampling=sampling)).epsilon_bounds(delta)

    search = Search(target_epsilon, engine, lambda u: sur.epsilon(noise_multiplier, sampling_rate, math.exp(-u)),
                     -math.log(MAX_STEPS), 0.0, lambda u: math.log1p(math.exp(u)), _snap_steps)
    # start from the surrogate's crossing, scaled from one step (eps ~ sqrt(T))
    s1 = sur.epsilon(noise_multiplier, sampling_rate, 1.0)
    # (the ratio capped before squaring: a target near the float limit overflowed the square)
    u0 = (-math.log(min(MAX_STEPS, max(1.0, min(target_epsilon / s1, 1e100) ** 2)))
          if s1 > 0 and math.isfinite(s1) else 0.0)
    u = search.run(surrogate_root(search, u0))
    if not math.isfinite(u):
        hi = next((up for uu, _, up in search.evals if uu == 0.0), math.nan)
        raise ValueError(
            f"even one step exceeds target_epsilon={target_epsilon!r}: with noise_multiplier="
            f"{noise_multiplier!r} and sampling_rate={sampling_rate!r} a single step has certified epsilon "
            f"{hi!r} at delta={delta!r}; raise noise_multiplier or lower sampling_rate")
    T = int(round(math.exp(-u)))
    record_info(search, info, t0, T, "steps", lambda u: int(round(math.exp(-u))))
    return T


def calibrate_sampling_rate(target_epsilon: float, delta: float, noise_multiplier: float, steps: int, *,
                            sampling: str = "poisson", rtol: float = 1e-3, info: dict | None = None) -> float:
    """Largest sampling rate (to ``rtol``) whose certified epsilon is at most the target.

    Returns ``q`` with ``pld.dpsgd(noise_multiplier, q, steps, sampling=sampling).epsilon(delta)
    <= target_epsilon`` (evaluated), next to an evaluated rate at most
    ``q (1 + rtol)`` above the target; ``1.0`` if the full batch is within
    budget.  The search covers rates down to 1e-12.

    Parameters
    ----------
    target_epsilon : float
        In ``(0, inf)``.
    delta : float
        In ``(0, 1)``.
    noise_multiplier : float
        In ``(0, inf)``.
    steps : int
        In ``[1, 1e12]``.
    sampling : str
        Sampling scheme, as in :func:`pld.dpsgd` (any scheme of :mod:`pld.accounting.sampling`).
    rtol : float
        Relative tolerance on the rate, in ``[1e-6, 1)``.
    info : dict, optional
        Filled as in :func:`calibrate_noise`.

    Returns
    -------
    float
        The sampling rate.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message), or if no rate down to
        1e-12 certifies the target.

    Examples
    --------
    >>> import pld
    >>> q = pld.calibrate_sampling_rate(target_epsilon=2.0, delta=1e-5, noise_multiplier=1.0, steps=1000)
    >>> pld.dpsgd(1.0, q, 1000).epsilon(1e-5) <= 2.0
    True
    """
    t0 = time.perf_counter()
    target_epsilon, delta = check_target(target_epsilon, delta)
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    sampling = sampling_scheme(sampling)
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)

    sur = Surrogate(delta, sampling)
    tol = math.log1p(rtol)

    def engine(u):
        return _deciding(dpsgd(noise_multiplier, math.exp(-u), steps, sampling=sampling)).epsilon_bounds(
            delta, rtol=bracket_rtol(rtol))

    search = Search(target_epsilon, engine, lambda u: sur.epsilon(noise_multiplier, math.exp(-u), steps),
                     0.0, -math.log(MIN_SAMPLING_RATE), lambda u: tol)
    # start: eps ~ q sqrt(T) from the full batch's surrogate
    s1 = sur.epsilon(noise_multiplier, 1.0, steps)
    u0 = math.log(s1 / target_epsilon) if s1 > target_epsilon and math.isfinite(s1) else 0.0
    u = search.run(surrogate_root(search, min(u0, search.hi)))
    if not math.isfinite(u):
        raise ValueError(
            f"no sampling rate down to {MIN_SAMPLING_RATE:g} certifies target_epsilon={target_epsilon!r} "
            f"(last engine error: {search.last_error!r})")
    q = math.exp(-u)
    record_info(search, info, t0, q, "sampling_rate", lambda u: math.exp(-u))
    return q


