"""Keep the C heap from handing a query's arrays back to the system between queries.

glibc's ``malloc`` serves requests above a threshold (128 KiB at start) with
fresh ``mmap`` pages and gives the top of its heap back to the system once
more than twice that threshold lies free there.  Both thresholds rise by
themselves, up to 32 MiB, the first time an mmapped block is freed (glibc's
dynamic mmap threshold, ``mallopt(3)``), so in a process that has already
freed one large array nothing here changes anything.  Before that, a query's
grids (100 KiB to a few MiB each) are allocated and freed in fresh pages that
the kernel must map and zero on every touch: for MNIST-like DP-SGD about 900
page faults and 2 ms of system time per query, a tenth of its cost.

:func:`settle` frees one block of ``2^21`` doubles (16 MiB, pld's largest
array, :data:`pld.engine.limits.MAX_GRID_POINTS`) once per process, which raises
both thresholds as the first such array of any numpy program would: blocks
up to 16 MiB then come from the heap, which keeps up to 32 MiB of free space
for the next query instead of returning it.  Speed only: no value depends on
where an array lives.  Elsewhere (other C libraries) this only allocates and
frees one block.
"""

from __future__ import annotations

import numpy as np

#: doubles in the block freed once (16 MiB: below glibc's 32 MiB cap on the
#: dynamic threshold, above every array of a typical query)
BLOCK = 1 << 21
_done: list = []


def settle() -> None:
    """Free one large block, once per process (see the module notes)."""
    if not _done:
        _done.append(True)
        # (never touched: mapped and unmapped, no page is faulted in)
        block = np.empty(BLOCK)
        del block
