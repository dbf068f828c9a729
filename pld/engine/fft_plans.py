"""FFT plans measured once per machine (FFTW wisdom): :func:`tune_fft`.

pld builds its pyfftw plans with ``FFTW_ESTIMATE`` (milliseconds to plan).
``FFTW_MEASURE`` times candidate algorithms instead and finds faster plans,
but takes seconds per length, too long for a query; queries gain less than
the transforms, which are a part of their time (benchmarks/README.md has the
measurements).  :func:`tune_fft` measures every length pld may use up to a bound once and
keeps the result (FFTW "wisdom") in a file per machine; every later process
reads it before its first plan, and its estimated plans then are the
measured ones.  Answers stay certified either way: the round-off bound of
:mod:`pld.engine.fft` holds for any FFTW plan, and only the last bits move.

Frigo & Johnson, *The design and implementation of FFTW3*, Proc. IEEE 93(2),
2005 (planner flags and wisdom).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import numpy as np

from pld import _validate as v
from pld.engine import fft as _fft
from pld.io import write_atomic

#: lengths below this cost microseconds either way
_MIN_TUNED = 1024


def plan_sizes(max_points: int, min_points: int = _MIN_TUNED) -> list[int]:
    """Every transform length pld may plan in ``[min_points, max_points]``:
    the values of :func:`pld.engine.fft._canonical_size`, walked with it (one
    definition of which lengths exist)."""
    out = []
    n = _fft._canonical_size(min_points)
    while n <= max_points:
        out.append(n)
        n = _fft._canonical_size(n + 1)
    return out


def _pair_seconds(plan, repeats: int = 7) -> float:
    a, f, g, fwd, inv = plan
    a[:] = np.random.default_rng(0).random(a.size)
    g[:] = 1.0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fwd.execute()
        inv.execute()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def tune_fft(max_points: int = 1 << 18, *, min_points: int = _MIN_TUNED,
             progress: Callable[[dict], None] | None = None) -> dict:
    """Measure FFTW plans for every transform length pld uses up to
    ``max_points`` and save them where :func:`pld.engine.fft.wisdom_path` says.

    Takes about 1.5 minutes up to the default 262144 points (the lengths of
    DP-SGD runs up to 10^6 steps), 6 minutes up to 2^20.  Lengths already
    measured (in the file) take milliseconds.  ``PLD_FFTW_WISDOM`` chooses
    the file (``off`` turns wisdom off, and then nothing is saved).

    Parameters
    ----------
    max_points, min_points : int
        Range of transform lengths to measure, ``1024 <= min_points <=
        max_points <= 2^23`` (longer transforms use ``scipy.fft``).
    progress : callable, optional
        Called with each length's row as it is done.

    Returns
    -------
    dict
        ``path`` (the wisdom file) and ``sizes``: per length, the seconds of a
        forward and inverse pair before (``estimate_s``) and after
        (``measured_s``) tuning, and the seconds the planner took.

    Raises
    ------
    RuntimeError
        Without pyfftw.
    ValueError
        If a length is out of range, or ``PLD_FFTW_WISDOM=off``.

    Examples
    --------
    >>> import pld
    >>> pld.tune_fft(4096)["path"]          # doctest: +SKIP
    '/home/me/.cache/pld/fftw-wisdom.json'
    """
    if not _fft._HAVE_PYFFTW:
        raise RuntimeError("tune_fft needs pyfftw (pip install pyfftw); scipy.fft has no plans to tune")
    max_points = v.integer("max_points", max_points, low=_MIN_TUNED, high=_fft._MAX_PLAN_SIZE)
    min_points = v.integer("min_points", min_points, low=_MIN_TUNED, high=max_points)
    path = _fft.wisdom_path()
    if path is None:
        raise ValueError("PLD_FFTW_WISDOM turns wisdom off: set it to a file path (or unset it) to tune")
    _fft.wisdom_in_use()  # start from what is saved already
    rows = []
    for n in plan_sizes(max_points, min_points):
        before = _pair_seconds(_fft._build_plan(n))
        t = time.perf_counter()
        measured = _fft._build_plan(n, "FFTW_MEASURE")
        planning = time.perf_counter() - t
        row = {"size": n, "estimate_s": before, "measured_s": _pair_seconds(measured),
               "planning_s": planning}
        rows.append(row)
        if progress is not None:
            progress(row)
    wisdom = [w.decode("ascii") for w in _fft.pyfftw.export_wisdom()]
    doc = {"format": _fft.WISDOM_FORMAT, "key": _fft._machine_key(), "wisdom": wisdom}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, json.dumps(doc).encode("ascii"))
    with _fft._lock:
        _fft._wisdom["path"] = path
    _fft._drop_plans()  # pooled estimated plans predate the measurements
    return {"path": path, "sizes": rows}
