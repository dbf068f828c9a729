"""What a query asks: its target, the warnings of a bracket that misses it, and the settings of
the grids that answer it.

A query fixes, per direction, a :class:`Settings` (spacing, tilt, truncation
budget, FFT precision); the planner (:mod:`pld.engine.planner`) chooses them,
the composer (:mod:`pld.engine.composer`) builds them, and every grid built is
certified whatever they are.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

#: default relative accuracy of an epsilon bracket: upper - lower <= rtol*eps + atol
EPS_RTOL = 1e-4
#: default absolute accuracy of an epsilon bracket (epsilons near 0)
EPS_ATOL = 1e-6


class TargetMissedWarning(RuntimeWarning):
    """A certified bracket ended wider than its target (``rtol * epsilon + atol``).

    Both ends are still proofs; the message says why the grid could not be
    refined further (memory cap, a fixed spacing, refinement that stalled).
    Turn it into an error with ``warnings.simplefilter("error", pld.TargetMissedWarning)``.
    """


class NotTightWarning(UserWarning):
    """A bracket is wide because a part is not tight (:attr:`pld.PLD.tight`), not
    because of the numerics.

    The upper end comes from a dominating pair that is not tight and the lower
    end from a dominated construction of the true mechanism (or is 0); both
    are certified, and each met its own width target unless a
    :class:`TargetMissedWarning` says otherwise.  ``explain()`` states both
    constructions.  Silence it with
    ``warnings.simplefilter("ignore", pld.NotTightWarning)``.
    """


#: a delta bracket of a composition that is not tight is said wide past this share of its upper end
NOT_TIGHT_DELTA_SHARE = 1e-2


def warn_not_tight(lo: np.ndarray, hi: np.ndarray, at: np.ndarray, rtol: float, kind: str, names: str,
                   has_lower: bool, stacklevel: int = 2) -> bool:
    """Warn (:class:`NotTightWarning`) where a bracket of a composition that is not tight is
    wider than its target; whether it did.  ``kind``: what was bracketed, ``"epsilon"`` (at
    deltas ``at``, target ``rtol * hi + EPS_ATOL``) or ``"delta"`` (at epsilons ``at``, wider
    than ``NOT_TIGHT_DELTA_SHARE`` of its upper end); ``names``: the parts that are not tight."""
    lo, hi, at = np.asarray(lo, float).ravel(), np.asarray(hi, float).ravel(), np.asarray(at, float).ravel()
    with np.errstate(invalid="ignore"):
        if kind == "delta":
            wide = np.flatnonzero((hi - lo) > NOT_TIGHT_DELTA_SHARE * hi)
        else:  # (an infinite upper end is wide unless the lower end is infinite too: inf > inf is False)
            wide = np.flatnonzero(((hi - lo) > rtol * hi + EPS_ATOL) | (np.isinf(hi) & np.isfinite(lo)))
    if wide.size == 0:
        return False
    j = int(wide[0])
    warnings.warn(f"{kind} bracket [{lo[j]:.6g}, {hi[j]:.6g}] at {'delta' if kind == 'epsilon' else 'epsilon'} "
                  f"= {at[j]:.6g}: {names} is not tight; the upper end is from a dominating pair that is not "
                  "tight, the lower " + ("end from a dominated construction of the true mechanism" if has_lower
                                         else "end is 0 (no dominated construction is known)")
                  + ". The gap is not numerical; both ends are certified (explain() states both).",
                  NotTightWarning, stacklevel=stacklevel)
    return True


#: largest fixed grid spacing accepted: a privacy loss on a coarser grid says
#: nothing (every supported mechanism's loss per run is far below it)
MAX_SPACING = 1e6
#: smallest fixed grid spacing accepted: the memory cap's 2^21 points then
#: span a window of 2e-6 in loss, less than any composition worth a grid
MIN_SPACING = 1e-12



class LogEta(NamedTuple):
    """Truncation budget: log of the mass allowed outside one window.

    ``below``: tilted mass below the window (relative to the tilted law);
    ``above``: untilted P-mass above it (which moves delta by at most itself).
    """

    below: float
    above: float


class Settings(NamedTuple):
    """One direction's grid: spacing ``h``, tilt ``lam``, truncation budget,
    and the arithmetic of the FFT power (``"double"`` or ``"extended"``,
    :mod:`pld.engine.power`).

    The fields are :meth:`pld.engine.composer.Composer.materialize`'s positional
    arguments after the direction: ``materialize(d, *settings)``.
    """

    h: float
    lam: float
    log_eta: LogEta
    precision: str = "double"


@dataclass(frozen=True)
class Query:
    """A question the grids are tuned for.

    ``kind`` is ``"delta"`` (the epsilon at a target ``value`` of delta) or
    ``"epsilon"`` (delta at ``value``); ``rtol`` is the bracket's relative
    target, ``upper - lower <= rtol * epsilon + EPS_ATOL``.  ``atol``
    (``"epsilon"`` only): a width in delta that suffices whatever delta is, for
    a term of a sum whose own delta may be far below what the sum needs
    resolved (:mod:`pld.engine.big_jumps`); it also sets the truncation budget.
    ``delta_floor`` (``"epsilon"`` only): the truncation budget is also held
    below this delta, for a term read where the sum's delta is that small
    (tuned at an epsilon where its own delta is far larger, its mass sent to
    +inf would otherwise stay above the delta asked at every epsilon).
    """

    kind: str
    value: float
    rtol: float = EPS_RTOL
    atol: float = 0.0
    delta_floor: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("delta", "epsilon"):
            raise ValueError(f"Query kind must be 'delta' or 'epsilon', got {self.kind!r}")


#: the query whose grids bound delta beyond every grid's top (see pld.delta_curve)
FAR_QUERY = Query("delta", 1e-60, 0.1)


def round_spacing(h: float) -> float:
    """Round to 3 significant digits so cached grids are reused across queries."""
    e = math.floor(math.log10(h))
    return round(h / 10 ** e, 2) * 10 ** e
