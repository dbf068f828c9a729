"""First run after install: the kernels compile in two processes at once.

Every kernel is compiled once per machine and cached on disk (``cache=True``);
compiling all of them takes about 10 s here, one function at a time in a
process.  When ``import pld`` finds kernels missing from the cache,
:func:`warm_up_if_cold` starts a helper process (:func:`main`), which compiles
:data:`HELPER_SHARE` into the same cache while this process compiles
:data:`OWN_SHARE`, then waits for the helper: on two cores the first run pays
about half (measured: the first ``pld dpsgd`` 10-11 s -> 6 s).  Nothing depends
on the helper: if it fails or is late, the first query compiles what is missing
itself.  ``PLD_JIT_HELPER=0`` turns the helper off (everything then compiles
on first use, as before).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

from numba import types as nt

_A = nt.float64[::1]
_I = nt.int64[::1]
_C = nt.complex128[::1]
_f = nt.float64
_i = nt.int64

#: every kernel with the one signature a query calls it with, split in two
#: shares of about 5 s of compilation each (tests/test_jit_warm.py checks the
#: signatures against those a query compiles, and that every kernel is here)
OWN_SHARE = (
    ("log_mgf_grid", (_A, _f, _f, _A)),
    ("log_diff_exp", (_A, _A)),
    ("log_mgf_points", (_A, _A, _A)),
    ("tilted_moments", (_A, _A, _f)),
    ("window_exponents", (_A, _f, _f, _A, _A, _A, _A, _f, _f, _f)),
    ("cell_points", (_I, _I, _i)),
    ("l1_l2_norms", (_A,)),
)
HELPER_SHARE = (
    ("optimistic_merge_centred", (_A, _A, _I, _f)),
    ("pessimistic_spread", (_A, _A, _I, _I, _f, _i)),
    ("complex_powers", (_C, _i, _i, _C, _C)),
    ("coarsen_dominated", (_A, _i, _f, _f, _f)),
    ("coarsen_dominating", (_A, _i, _f, _f)),
    ("hockey_stick_suffix", (_A, _f, _f)),
    ("rotate_left", (_A, _i)),
    ("dot_compensated", (_A, _A)),
)
#: longest wait for the helper (it takes seconds; a stuck one is left behind)
_WAIT_S = 120.0

_ENV = "PLD_JIT_HELPER"
_HELPER_CODE = "import sys; from pld._jit_warm import main; sys.exit(main())"
#: the helper process started by this one, if any
_helper: list = []
_tried = False


def _cached(dispatcher) -> bool:
    """Whether ``dispatcher`` has a valid entry in numba's cache (stale
    indexes, from other source, read as empty)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # numba internals moved: assume warm, start nothing
        return True


def _compile(share) -> None:
    from pld import kernels

    for name, sig in share:
        dispatcher = getattr(kernels, name)
        if not _cached(dispatcher):
            dispatcher.compile(sig)


def cold_kernels() -> list[str]:
    """Names of the kernels the cache lacks."""
    from pld import kernels

    return [name for name, _ in OWN_SHARE + HELPER_SHARE if not _cached(getattr(kernels, name))]


#: seconds this process spent compiling kernels at import (0 when the cache was warm)
compile_seconds = 0.0


def _notice(helper: bool) -> None:
    """Say once, on stderr, why the first run is slow (it is silent otherwise)."""
    how = ("about 7 s on 2 cores, half of it in a helper process" if helper
           else "about 10 s, each kernel on its first use")
    try:
        sys.stderr.write(f"pld: first run on this machine: compiling the numba kernels ({how}; "
                         "they are cached, later runs start in about a second)\n")
        sys.stderr.flush()
    except Exception:  # no usable stderr (e.g. pythonw): the notice is a courtesy
        pass


def warm_up_if_cold() -> bool:
    """Compile missing kernels, half in a helper process (once per process,
    never from the helper itself).  Returns whether anything was compiled.

    A cold cache is announced on stderr (once: the cache is warm afterwards),
    also when the helper is off and the kernels compile on first use."""
    global _tried, compile_seconds
    setting = os.environ.get(_ENV, "").strip().lower()
    if setting == "helper" or _tried:
        return False
    _tried = True
    try:
        cold = cold_kernels()
    except Exception:
        return False
    if not cold:
        return False
    off = setting in ("0", "off", "no")
    _notice(helper=not off)
    if off:
        return False
    import time

    t0 = time.perf_counter()
    proc = None
    if any(name in cold for name, _ in HELPER_SHARE) and getattr(sys, "executable", None):
        try:
            env = dict(os.environ, **{_ENV: "helper"})
            # (-c, not -m: pld's import has loaded this module already)
            proc = subprocess.Popen([sys.executable, "-c", _HELPER_CODE], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            _helper.append(proc)
        except Exception:
            proc = None
    _compile(OWN_SHARE)
    if proc is not None:
        try:
            proc.wait(timeout=_WAIT_S)
        except Exception:
            pass  # the first query compiles whatever is still missing
    compile_seconds = time.perf_counter() - t0
    return True


def _stop_helper() -> None:
    # a helper still running at exit (it was late): its work is not needed
    for proc in _helper:
        if proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout=5)
            except Exception:
                pass


atexit.register(_stop_helper)
if hasattr(os, "register_at_fork"):
    # (a forked child neither owns the parent's helper nor starts its own)
    os.register_at_fork(after_in_child=_helper.clear)


def main() -> int:
    """The helper process: compile :data:`HELPER_SHARE` into the cache."""
    _compile(HELPER_SHARE)
    return 0
