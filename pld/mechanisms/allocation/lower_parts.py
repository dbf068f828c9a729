"""Which dominated statistics give the lower end of a ``k``-of-``t`` round (``k > 1``).

Served by :class:`pld.mechanisms.allocation.RandomAllocation` (``_lower_part``,
``lower_alternatives``); the functions take the round (any object with its attributes).
Every statistic here is a post-processing of the true pair, so the largest of their
answers is a lower end; which is largest depends on the setting and the query:

* the Poisson likelihood-ratio statistic (:mod:`.poisson_statistic`) where its tilted laws
  fit: it keeps more than the label sum nearly everywhere, at a fraction of the label
  sum's cost where the rounds are long;
* else the label sum (:func:`.sums.label_sum_pair`, ``k <= t/4``, where its window fits),
  else the sum of the outputs (a Gaussian mechanism, closed form: ahead where ``k`` is a
  large part of ``t``);
* at small noise the log labels (:mod:`.labels`: the marked steps stand out in ``log Y``,
  and the likelihood ratio ``e_k(Y)/C(t, k)`` is close to a function of the logs of the
  ``k`` largest), with their other origins beside them.
"""

from __future__ import annotations

import math

from pld import mechanisms as pld_mechanisms
from pld.mechanisms import Mechanism
from pld.mechanisms.allocation.labels import ORIGINS_TOO, prefers_log_labels
from pld.mechanisms.allocation.pairs import LABEL_SPACING, _LabelSum, _PoissonStatistic
from pld.mechanisms.allocation.poisson_statistic import fits as _poisson_statistic_fits

#: the label-sum lower pair is built for ``k <= t * LABEL_SUM_SHARE`` (above, the sum of the outputs is stronger)
LABEL_SUM_SHARE = 0.25
#: beside the Poisson statistic, the label sum is a lower alternative up to this many cells
#: (short rounds: it costs milliseconds, and where few steps hold the record it can be ahead
#: in the last digits)
CHEAP_LABEL_SUM = 1 << 16


def sum_mu(round_) -> float:
    """``mu`` of the sum of the outputs: ``N(k, t s^2)`` against ``N(0, t s^2)``."""
    return round_.participations / (round_.noise_multiplier * math.sqrt(round_.steps))


def label_sum_cells(round_) -> float:
    """About the label sum's window in cells (inf where ``k > t/4``: not built there)."""
    from pld.mechanisms.allocation.levels import window

    if round_.participations > LABEL_SUM_SHARE * round_.steps:
        return math.inf
    a = 1.0 / round_.noise_multiplier
    sd1 = math.sqrt(math.expm1(min(a * a, 700.0)))
    # (the statistic's window is about that of the whole round plus the marked coordinates' excess)
    w = window(a, round_.steps, round_.steps) + round_.participations * math.exp(min(a * a, 700.0))
    return w / (LABEL_SPACING * sd1)


def uses_label_sum(round_) -> bool:
    """Whether the label sum's window fits its cell budget."""
    from pld.mechanisms.allocation.levels import MAX_CELLS

    return label_sum_cells(round_) < MAX_CELLS / 2


def poisson_fits(round_) -> bool:
    """Whether the Poisson likelihood-ratio statistic's tilted laws fit their cell budget."""
    return _poisson_statistic_fits(round_.noise_multiplier, round_.steps, round_.participations)


def sum_statistic(round_) -> Mechanism:
    """The Poisson statistic where it fits, else the label sum where it fits, else the sum of the outputs."""
    s, t, k = round_.noise_multiplier, round_.steps, round_.participations
    if poisson_fits(round_):
        return _PoissonStatistic(s, t, k)
    if uses_label_sum(round_):
        return _LabelSum(s, t, k, LABEL_SPACING)
    return pld_mechanisms.Gaussian(sigma=1.0 / sum_mu(round_))


def lower_part(round_) -> Mechanism:
    """The lower-only part of the round's composition (its first lower view)."""
    s, t, k = round_.noise_multiplier, round_.steps, round_.participations
    if k <= LABEL_SUM_SHARE * t and prefers_log_labels(s, t, k, round_.spacing):
        return _LabelSum(s, t, k, round_.spacing, True)
    return sum_statistic(round_)


def alternatives(round_) -> tuple[tuple, ...]:
    """The other lower views, each ``((mechanism, count),)``: with the log labels, their other
    origins and the sum statistic; the sum of the outputs beside a statistic of the labels;
    the label sum beside the Poisson statistic where it is cheap."""
    s, t, k = round_.noise_multiplier, round_.steps, round_.participations
    statistic = sum_statistic(round_)
    also: tuple = ()
    if isinstance(statistic, (_LabelSum, _PoissonStatistic)):
        also += (((pld_mechanisms.Gaussian(sigma=1.0 / sum_mu(round_)), 1),),)
    if isinstance(statistic, _PoissonStatistic) and label_sum_cells(round_) <= CHEAP_LABEL_SUM:
        also += (((_LabelSum(s, t, k, LABEL_SPACING), 1),),)
    if not getattr(lower_part(round_), "log_labels", False):
        return also
    return (tuple(((_LabelSum(s, t, k, round_.spacing, True, o), 1),) for o in ORIGINS_TOO)
            + (((statistic, 1),),) + also)
