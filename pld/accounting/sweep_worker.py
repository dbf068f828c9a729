"""Preloaded by the sweep's forkserver: pld imported and its kernels loaded once.

Workers fork from the forkserver, so each starts with pld imported and every
numba kernel already loaded from the on-disk cache (about 0.5 s a worker would
otherwise spend on its first configuration).  Nothing here computes anything:
a missing or stale cache only means the first query compiles, as anywhere.
"""

from __future__ import annotations

import os

# a worker is one process per core: a query's two sides run one after the other,
# and no library it calls starts threads of its own (set before numpy and numba
# load: BLAS, OpenMP and numba's threading layer read these once)
for _name in ("PLD_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import pld.accounting.sweeps  # noqa: E402,F401


def _load_kernels() -> None:
    try:
        from pld.engine import warm as _jit_warm

        for _, dispatcher, sig in _jit_warm.find_kernels():
            dispatcher.compile(sig)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an optimisation only: workers load what they need on first use
        pass


_load_kernels()
