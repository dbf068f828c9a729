"""Preloaded by the sweep's forkserver: pld imported and its kernels loaded once.

Workers fork from the forkserver, so each starts with pld imported and every
numba kernel already loaded from the on-disk cache (about 0.5 s a worker would
otherwise spend on its first configuration).  Nothing here computes anything:
a missing or stale cache only means the first query compiles, as anywhere.
"""

from __future__ import annotations

import os

# a worker is one process per core: a query's two sides run one after the other
os.environ.setdefault("PLD_THREADS", "1")

import pld.sweeps  # noqa: E402,F401


def _load_kernels() -> None:
    try:
        from pld import _jit_warm

        for _, dispatcher, sig in _jit_warm.find_kernels():
            dispatcher.compile(sig)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an optimisation only: workers load what they need on first use
        pass


_load_kernels()
