"""Numba-jitted hot loops of pld (installed as ``pld.kernels``).

Kernels take and return numpy arrays only.  Installing pld builds them into an
extension module for this machine (:mod:`pld.kernels._aot`; ``pld warm`` builds
one where the install could not); they are served from it and numba is not
imported unless a call needs the JIT.  Without such a module every function is
compiled on first use with ``cache=True``, so that the JIT cost is paid once
per machine.
"""

from . import _aot

__all__ = ["cell_points", "log_diff_exp", "log_diff_exp_error", "optimistic_merge_centred", "pessimistic_spread",
           "pessimistic_spread_atoms", "split_atoms_log",
           "hockey_stick_suffix", "cell_extremes", "hockey_delta", "suffix_error_bounds", "subsampled_mass_errors",
           "log_mgf_grid", "log_mgf_points", "tilted_moments", "l1_l2_norms", "complex_powers", "coarsen_dominated",
           "coarsen_dominating", "dot_compensated", "rotate_left", "untilted_mass_bound", "window_exponents",
           "chernoff_exponent", "log_two_tails",
           # random allocation's per-coordinate laws
           "spread_law", "merged_law", "merge_half", "centred_cells", "spread_on", "cells_on", "sum_spread_geometric",
           "group_pairs", "sum_round_up", "lump_blocks", "bracket_convolve",
           # sums on one geometric grid (random allocation's short rounds)
           "geometric_sum_spread", "geometric_sum_merge"]

_ahead_of_time = _aot.load(__all__)
if len(_ahead_of_time) < len(__all__):
    from .allocation import (
        bracket_convolve,
        cells_on,
        centred_cells,
        group_pairs,
        merge_half,
        merged_law,
        spread_law,
        spread_on,
        sum_round_up,
        sum_spread_geometric,
    )
    from .cells import cell_points, log_diff_exp, log_diff_exp_error, subsampled_mass_errors
    from .chernoff import chernoff_exponent, log_two_tails
    from .discretize import pessimistic_spread, pessimistic_spread_atoms, split_atoms_log
    from .geometric import geometric_sum_merge, geometric_sum_spread
    from .hockey import (
        cell_extremes,
        dot_compensated,
        hockey_delta,
        hockey_stick_suffix,
        l1_l2_norms,
        log_mgf_grid,
        log_mgf_points,
        suffix_error_bounds,
        tilted_moments,
    )
    from .lumps import lump_blocks
    from .merge import optimistic_merge_centred
    from .power import complex_powers, rotate_left
    from .regrid import coarsen_dominated, coarsen_dominating
    from .tails import untilted_mass_bound
    from .windows import window_exponents
globals().update(_ahead_of_time)

#: names of the kernels served from the ahead-of-time module (the rest: JIT)
AHEAD_OF_TIME = sorted(_ahead_of_time)
