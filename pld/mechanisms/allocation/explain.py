"""What bounds a round of random allocation, in words, and how a ``k``-of-``t`` bracket's width splits.

Served by :meth:`pld.mechanisms.allocation.RandomAllocation.explain`; the functions take the
round (any object with its attributes), so this module needs nothing from the package's
``__init__``.
"""

from __future__ import annotations

import math

from pld.mechanisms import Gaussian
from pld.mechanisms.allocation.labels import label_width
from pld.mechanisms.allocation.pairs import LABEL_SPACING, _LabelSum, _PoissonStatistic

#: what Monte Carlo of the exact likelihood ratio ``e_k(Y)/C(t, k)`` found on a few rounds
#: (``python -m benchmarks.k_of_t_ends``; an estimate, not a certificate)
MEASURED = ("measured by Monte Carlo of the exact likelihood ratio on a few rounds (1 <= sigma <= 2, "
            "t 20-200, k 2-4; benchmarks/k_of_t_ends.py, an estimate, not a certificate), both ends are "
            "loose, the block argument more: its delta 0.06-3.7% above the truth, the Poisson "
            "likelihood-ratio statistic's 0.04-0.8% below")


def constructions(round_) -> dict[str, str]:
    """``upper`` and ``lower``: the constructions of a round's two ends, in words."""
    if round_.participations == 1:
        grid = round_.grid_info()
        if grid.get("geometric"):
            return {"grid": grid,
                    "upper": ("exact pair on one geometric grid: every pairwise sum of partial sums spread onto "
                              "its neighbouring points (mean-preserving: dominating)"),
                    "lower": ("exact pair on one geometric grid: pairwise sums merged per cell (a conditional "
                              "expectation: post-processing, dominated)")}
        if grid.get("heavy"):
            return {"grid": grid,
                    "upper": ("exact pair split by the number N of heavy coordinates (Y > B): N <= 1 by "
                              "mean-preserving spreads (light part on a linear grid, heavy part on a geometric "
                              "one), N = 2..4 by a stochastic bound on the loss, the rest at +inf (dominating)"),
                    "lower": ("exact pair: N and the label sum of the light coordinates, for N = 1 with the heavy "
                              "one's geometric cell (post-processing, dominated)")}
        return {"grid": grid,
                "upper": "exact pair: mean-preserving spread of each log-normal coordinate (dominating)",
                "lower": "exact pair: conditional-mean merge of each coordinate (post-processing, dominated)"}
    upper = ("block argument: " + " + ".join(f"{c} round(s) of 1-of-{s}" for s, c in round_.blocks())
             + " (joint convexity of the hockey-stick divergence)")
    statistic = round_._sum_statistic()
    if isinstance(statistic, _PoissonStatistic):
        z = round_.participations / (round_.steps - round_.participations)
        classic = ("Poisson likelihood-ratio statistic: the sum over the steps of the cell index of "
                   f"log(1 + z Y) for each step's likelihood ratio Y, z = k/(t - k) = {z:.6g} (exp of that sum, "
                   "scaled, is the likelihood ratio of Poisson sampling at rate k/t), whose law is k marked and "
                   "t - k unmarked coordinates whichever steps the record is in (a post-processing of the true "
                   "pair; close to sufficient: log e_k(Y) is that sum less k log z up to a saddle-point "
                   "correction), computed at several exponential tilts so that far tails keep their relative "
                   "accuracy")
    elif isinstance(statistic, _LabelSum):
        classic = ("label-sum statistic: the sum over the steps of the cell index (width "
                   f"{LABEL_SPACING:g} sd) of each step's likelihood ratio, whose law is k marked and "
                   "t - k unmarked coordinates whichever steps the record is in (a post-processing of "
                   "the true pair; close to sufficient when k << t)")
    else:
        classic = (f"sum statistic: Gaussian mechanism with mu = k/(sigma sqrt(t)) = "
                   f"{round_._sum_mu():.6g} (a post-processing of the true pair; not tight)")
    part = round_._lower_part()
    lower = classic
    if not isinstance(statistic, Gaussian) and round_.participations < round_.steps:
        lower += "; and the sum of the outputs (a Gaussian mechanism, mu = k/(sigma sqrt(t))): the larger lower end"
    if getattr(part, "log_labels", False):
        lower = ("the largest of the statistics' lower ends: the log-label statistic, the sum over the "
                 "steps of the label of each step's log likelihood ratio (cells "
                 f"{label_width(part.spacing):g} nats wide, from half a standard deviation below, at or "
                 "above the unmarked steps' 1 - 1/t quantile: the largest of the three), whose law is k "
                 "marked and t - k unmarked labels whichever steps the record is in (a post-processing of "
                 "the true pair; at small noise the likelihood ratio e_k(Y)/C(t, k) is close to a function "
                 "of the k largest log ratios); the " + lower)
    return {"upper": upper, "lower": lower}


def width_parts(d, delta: float, lo: float, hi: float) -> dict:
    """How the width of a ``k``-of-``t`` bracket splits.

    ``d`` is the composition (a :class:`pld.PLD` that is not tight).  Each end is its own
    construction's bracket: the block rounds' ``[u_lo, u_hi]`` (``u_hi`` is the reported upper
    end) and the statistic's ``[l_lo, l_hi]`` (``l_lo`` the reported lower end).
    ``u_hi - u_lo`` and ``l_hi - l_lo`` are numerical (grids); what lies between,
    ``u_lo - l_hi``, is structural: the block argument's epsilon (at least ``u_lo``) is above the
    truth by some amount and the statistic's (at most ``l_hi``) below it by the rest.  Nothing
    certified splits that part further, so it is stated, with what Monte Carlo measured
    (:data:`MEASURED`), not attributed."""
    upper, _ = d.bounds()
    u_lo, u_hi = upper.epsilon_bounds(delta)
    # (the lower view whose lower end is the bracket's: the largest)
    l_lo, l_hi = max((view.epsilon_bounds(delta) for view in d._lowers()), default=(0.0, 0.0))
    width = hi - lo
    structural = max(0.0, u_lo - l_hi)
    parts = {"upper_grid": u_hi - u_lo, "lower_grid": l_hi - l_lo, "structural": structural}
    share = structural / width if width > 0 and math.isfinite(width) else 0.0
    loose = (f"the true epsilon lies in [{lo:.6g}, {hi:.6g}]: {parts['upper_grid']:.3g} of the width is the "
             f"block rounds' own grid, {parts['lower_grid']:.3g} the lower statistic's grid and "
             f"{structural:.4g} ({100 * share:.1f}%) the structural gap between the block argument (the upper "
             f"end, a dominating pair that is not tight: its epsilon is at least {u_lo:.6g}) and the lower "
             f"statistic (a post-processing that is not sufficient: its epsilon is at most {l_hi:.6g}); "
             "that gap is the price of the block argument and of the statistic together, and no certified "
             f"bound known here says how it splits between the two ends ({MEASURED})")
    return {"width_parts": parts, "structural_share": share, "loose": loose,
            "block_bracket": (u_lo, u_hi), "statistic_bracket": (l_lo, l_hi)}


def coarse_grid(r, info: dict) -> str | None:
    """Why round ``r``'s grid is coarse for its bulk (a warning's text), or None."""
    # the grid must resolve the bulk of one coordinate, not only its
    # variance: below sigma ~ 0.75 the median exp(-1/(2 s^2)) is far
    # below the standard deviation the heavy tail makes
    median = math.exp(-0.5 / r.noise_multiplier ** 2)
    if info.get("geometric"):
        return None  # (the whole law on one geometric grid: nothing coarse to report)
    if info.get("heavy"):
        # the light/heavy split (pld.mechanisms.allocation.heavy): the bulk of the sum is resolved
        # whatever the median; a short round's add direction is not, and says so by
        # its mass at Lambda = 0 (every coordinate spread to 0)
        if info.get("gaussian_add"):
            return (f"at sigma = {r.noise_multiplier:g} and {r.steps} steps the light grid of one "
                    f"coordinate (spacing {info['spacing']:.3g}, {info['spacing'] / median:.2g} medians) puts "
                    f"{info['inf_mass_upper_add']:.2g} of the add direction at Lambda = 0, so that direction's "
                    f"upper end is one Gaussian step's (no amplification, a valid but loose bound); the bracket "
                    f"stays certified but will be wide")
        if info["inf_mass_upper_add"] > 1e-6 or info["lower_mass"] < 0.999:
            return (f"at sigma = {r.noise_multiplier:g} the light grid of one coordinate (spacing "
                    f"{info['spacing']:.3g}, {info['spacing'] / median:.2g} medians) leaves the add direction "
                    f"a mass of {info['inf_mass_upper_add']:.2g} at +inf (every coordinate in its first cell); "
                    f"the dominated pair keeps {info['lower_mass']:.3g} of the mass; the bracket stays certified "
                    f"but may be wide")
        return None
    if info["spacing_sd"] > 0.3 or info["spacing"] > 0.1 * median or info["lower_mass"] < 0.999:
        return (f"the heavy log-normal tail at sigma = {r.noise_multiplier:g} needs a window reaching "
                f"{info['first_window']:.3g}, so the grid spacing is {info['spacing_sd']:.2g} standard "
                f"deviations and {info['spacing'] / median:.2g} medians of one coordinate "
                f"({info['first_cells']} cells, spacing parameter {r.spacing:g}; the dominated pair keeps "
                f"{info['lower_mass']:.3g} of the mass); the bracket stays certified but will be wide")
    return None
