"""Grid sizes: the memory cap and where composed levels are re-gridded.

Sizing only: a grid of any size is certified; these numbers trade time and
memory against the width of a bracket.
"""

from __future__ import annotations

#: largest number of grid points in any one array (memory cap: ~16 MB per array,
#: a few hundred MB at peak with the discretiser's temporaries)
MAX_GRID_POINTS = 1 << 21


#: a composed result used once (heterogeneous composition) is coarsened above this
LEVEL_POINTS = 1 << 16


#: largest transform for the FFT power of the early levels (a longer one
#: halves the power: squaring re-grids levels that outgrow this)
POWER_POINTS = 1 << 18


#: levels at most this large are never re-gridded (no time to gain)
MIN_LEVEL_POINTS = 1 << 12


#: early levels are re-gridded only above this size: their law can still be
#: spiky (a mixture over how many steps drew the record), and a re-grid's
#: error is repeated count / c times; this size keeps the widening below ~10%
#: of the bracket's target on the peer configurations
EARLY_LEVEL_POINTS = 1 << 14


_U = 2.0 ** -53
