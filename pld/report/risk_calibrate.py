"""Calibration of DP-SGD noise to an attack-risk target (:func:`calibrate_noise_to_tpr`).

``pld.calibrate_noise(target_tpr=..., at_fpr=..., sampling_rate=..., steps=...)``
calls it; the TPR brackets come from :mod:`pld.report.risk`.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

from scipy.special import ndtri

from pld import _validate as v
from pld.distribution import TargetMissedWarning
from pld.report.risk import TradeOff

if TYPE_CHECKING:
    from pld.accounting.loaders import RunShape

__all__ = ["calibrate_noise_to_tpr"]

#: noise multipliers the search explores (pld.accounting.calibrate.SIGMA_RANGE's)
_SIGMA_RANGE = (1e-3, 1e12)



def calibrate_noise_to_tpr(target_tpr: float, at_fpr: float, sampling_rate: float | None = None,
                           steps: int | None = None, *, sampling: str = "poisson", rtol: float = 1e-3,
                           info: dict | None = None, run: RunShape | None = None) -> float:
    """Smallest DP-SGD noise multiplier whose certified TPR at FPR ``at_fpr`` is at most ``target_tpr``.

    ``pld.calibrate_noise(target_tpr=..., at_fpr=..., sampling_rate=..., steps=...)``
    calls this.  The search (:class:`pld.accounting.calibrate_search.Search`,
    engine-only secants) compares the certified *upper* end of the larger
    direction's TPR bracket with the target, on the excess ``TPR - FPR`` (which
    falls to 0 as the noise grows: ``TPR >= FPR`` for every mechanism), and
    returns an evaluated noise multiplier within budget next to one at most
    ``sigma / (1 + rtol)`` evaluated over it.  ``run``: a resolved run
    (:class:`pld.accounting.loaders.RunShape`, e.g. from a loader's description)
    in place of ``sampling_rate``, ``steps`` and ``sampling``.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named), or ``target_tpr <= at_fpr`` (no
        noise reaches it: the trivial test already has TPR = FPR).
    """
    import time

    from pld.accounting.calibrate_search import Search, record_info, surrogate_root
    from pld.accounting.loaders import resolve_run, run_pld

    t0 = time.perf_counter()
    alpha = v.real("at_fpr", at_fpr, low=0.0, high=1.0, low_open=True, high_open=True)
    beta = v.real("target_tpr", target_tpr, low=0.0, high=1.0, low_open=True, high_open=True)
    if not beta > alpha:
        raise ValueError(f"target_tpr must be above at_fpr (every mechanism allows TPR = FPR), got "
                         f"target_tpr={beta!r} at at_fpr={alpha!r}")
    if run is None:
        run = resolve_run(sampling, sampling_rate, steps)
    q, t = run.sampling_rate, run.steps
    rtol = v.real("rtol", rtol, low=1e-6, high=1.0, high_open=True)
    tol = math.log1p(rtol)

    def engine(u: float) -> tuple[float, float]:
        with warnings.catch_warnings():
            # (a bracket wider than its TPR target only matters next to the target)
            warnings.simplefilter("ignore", TargetMissedWarning)
            r = TradeOff(run_pld(math.exp(u), run)).tpr([alpha])
        return max(r.lower[0] - alpha, 0.0), r.upper[0] - alpha

    search = Search(beta - alpha, engine, lambda u: math.nan, math.log(_SIGMA_RANGE[0]),
                    math.log(_SIGMA_RANGE[1]), lambda u: tol)
    # start: the Gaussian-DP mu with this TPR at alpha, through the CLT mu = q sqrt(T (e^{1/s^2} - 1))
    mu = max(float(ndtri(beta) - ndtri(alpha)), 1e-6)
    r2 = (mu / (q * math.sqrt(t))) ** 2
    start = 1.0 / math.sqrt(math.log1p(r2)) if r2 > 0 and math.isfinite(math.log1p(r2)) else 1.0
    start = min(max(start, _SIGMA_RANGE[0] * 10), _SIGMA_RANGE[1] / 10)
    u = search.run(surrogate_root(search, math.log(start)))
    if not math.isfinite(u):
        raise ValueError(f"no noise multiplier up to {_SIGMA_RANGE[1]:g} certifies target_tpr={beta!r} at "
                         f"at_fpr={alpha!r} (last engine error: {search.last_error!r})")
    sigma = math.exp(u)
    record_info(search, info, t0, sigma, "noise_multiplier", math.exp)
    return sigma
