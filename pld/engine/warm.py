"""Compiling the numba kernels ahead of their first use: :func:`warm`.

Every kernel is compiled once per machine and kept in numba's on-disk cache
(``cache=True``); compiling all of them costs seconds of CPU, and a process
that finds them cached only loads them.  Nothing happens at ``import pld``
(importing must not start a process or block on a compiler): a kernel the
cache lacks compiles on its first call, one after another in the calling
process, unless :func:`warm` compiled it first.

:func:`warm` finds the kernels by walking the modules of :mod:`pld.kernels`
for numba dispatchers that declare their argument types
(``kernels/_signatures.py``), and compiles those the cache lacks in
``processes`` processes at once.  The processes share the work through claim
files: each takes the next unclaimed kernel, largest source first (a proxy for
compile time, so that the longest compilation does not start last), until none
is left.  Helpers write into the same cache; this process then loads from it.
Nothing depends on a helper: if one fails or is late, this process (or the
first query) compiles whatever is still missing.

``warm(ahead_of_time=True)`` (the ``pld warm`` command) also builds the
kernels into an extension module for this machine (:mod:`pld.kernels._aot`),
from which later processes load them without importing numba, unless the
install built one already (setup.py).  With either module every kernel is
served ahead of time and :func:`warm` returns at once.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from typing import Any

#: longest wait for a helper (compiling takes seconds; a stuck one is left behind)
_WAIT_S = 120.0
#: environment of a helper process: the directory of claim files it shares,
#: and the kernels asked for (comma-separated; empty: all)
_CLAIMS_ENV = "PLD_JIT_CLAIMS"
_NAMES_ENV = "PLD_JIT_KERNELS"
_HELPER_CODE = "import sys; from pld.engine.warm import _helper_main; sys.exit(_helper_main())"

#: helper processes started by this one and still to be reaped
_helpers: list = []

#: seconds this process spent in :func:`warm` compiling (0 when the cache was warm)
compile_seconds = 0.0


def find_kernels() -> list[tuple[str, object, tuple]]:
    """``(name, dispatcher, argument types)`` of every kernel of
    :mod:`pld.kernels` that declares its argument types, by name.

    Private helpers (``_name``) are compiled inside the kernels that call
    them and declare nothing.
    """
    from pld import kernels
    from pld.kernels._signatures import ATTRIBUTE

    found = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"{kernels.__name__}.{info.name}")
        for name, obj in vars(module).items():
            sig = getattr(obj, ATTRIBUTE, None)
            if sig is not None and getattr(obj, "py_func", None) is not None:
                found[name] = (name, obj, sig)
    return [found[name] for name in sorted(found)]


def _largest_first(entries: list) -> list:
    """Longest source first: a proxy for compile time, so that the longest
    compilation starts first (read only when something is cold)."""
    def size(entry) -> int:
        try:
            return len(inspect.getsource(entry[1].py_func))
        except (AttributeError, OSError, TypeError):  # (source unavailable: order unknown)
            return 0
    return sorted(entries, key=lambda e: -size(e))


def _cached(dispatcher) -> bool:
    """Whether ``dispatcher`` has a valid entry in numba's cache (an index
    written for other source reads as empty)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # numba's internals moved: assume warm, compile nothing ahead
        return True


def cold_kernels() -> list[str]:
    """Names of the kernels numba's cache lacks."""
    return [name for name, d, _ in find_kernels() if not _cached(d)]


def _claim(claims: str | None, name: str) -> bool:
    """Take ``name`` for this process (atomic file creation); without a claim
    directory every kernel is this process's."""
    if claims is None:
        return True
    try:
        os.close(os.open(os.path.join(claims, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
    except OSError:  # no usable claim directory: compile it here (at worst twice)
        return True


def _compile_claimed(claims: str | None, names: frozenset | None) -> list[str]:
    done = []
    wanted = [e for e in find_kernels() if names is None or e[0] in names]
    for name, dispatcher, sig in _largest_first(wanted):
        if not _cached(dispatcher) and _claim(claims, name):
            dispatcher.compile(sig)
            done.append(name)
    return done


def _start_helper(claims: str, names: frozenset | None):
    if not getattr(sys, "executable", None):
        return None
    try:
        env = dict(os.environ, **{_CLAIMS_ENV: claims, _NAMES_ENV: ",".join(sorted(names or ()))})
        return subprocess.Popen([sys.executable, "-c", _HELPER_CODE], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except Exception:  # (no interpreter to start: this process compiles everything)
        return None


def _notice(count: int, processes: int) -> None:
    """Say, on stderr, why this run is slow (a cold cache is silent otherwise)."""
    try:
        sys.stderr.write(f"pld: first run on this machine: compiling {count} numba kernels in {processes} "
                         f"process{'es' if processes > 1 else ''} (once: they are cached for later runs)\n")
        sys.stderr.flush()
    except Exception:  # no usable stderr (e.g. pythonw): the notice is a courtesy
        pass


def warm(processes: int | None = None, *, kernels=None, ahead_of_time: bool = False,
         announce: bool = False) -> dict:
    """Compile every pld kernel that numba's cache lacks, in parallel.

    Kernels compile once per machine (numba's cache, ``NUMBA_CACHE_DIR``)
    and otherwise on their first call, one after another; this does it ahead,
    in ``processes`` processes sharing the work, so that the first query does
    not pay for it serially.  A warm cache costs a few milliseconds (one
    index file read per kernel).  Called by the ``pld`` command before its
    first query; ``import pld`` never compiles.

    Parameters
    ----------
    processes : int, optional
        Processes compiling at once, this one included (default: the CPU
        count, at most 4 and at most one per missing kernel).  ``1`` compiles
        here only, starting no process.
    kernels : iterable of str, optional
        Names of the kernels to compile (default: every kernel found).
    ahead_of_time : bool
        Also build every kernel into an extension module for this machine
        (:mod:`pld.kernels._aot`, ``numba.pycc``; about 10 s of CPU once,
        needs a C compiler), from which later processes load the kernels
        without importing numba: about half a second less per fresh
        process.  A failed build is reported (``ahead_of_time`` entry,
        and a warning); the JIT kernels serve either way.
    announce : bool
        Write one line on stderr when there is something to compile.

    Returns
    -------
    dict
        ``compiled``: names of the kernels that were missing, ``processes``
        used, ``seconds`` spent, ``kernels``: how many were found; with
        ``ahead_of_time``, ``ahead_of_time``: ``{"path", "built", "error"}``.

    Raises
    ------
    TypeError, ValueError
        If ``processes`` is not an integer in ``[1, 64]``, or ``kernels``
        names a kernel that does not exist.

    Examples
    --------
    >>> import pld
    >>> pld.warm()["kernels"] > 0
    True
    """
    global compile_seconds
    from pld import _validate as v

    if processes is not None:
        processes = v.integer("processes", processes, low=1, high=64)
    t0 = time.perf_counter()
    from pld import kernels as _kernels

    if not ahead_of_time and kernels is None and len(_kernels.AHEAD_OF_TIME) == len(_kernels.__all__):
        # every kernel is served ahead of time: nothing to compile, and
        # walking the JIT modules would import numba for nothing
        return {"compiled": [], "processes": 0, "seconds": 0.0, "kernels": len(_kernels.__all__)}
    found = find_kernels()
    names = None
    if kernels is not None:
        if isinstance(kernels, str):
            raise TypeError(f"kernels must be an iterable of kernel names, got the string {kernels!r}")
        names = frozenset(kernels)
        unknown = sorted(names - {name for name, _, _ in found})
        if unknown:
            raise ValueError(f"kernels: no kernel named {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(name for name, _, _ in found))}")
    cold = [name for name, d, _ in found if (names is None or name in names) and not _cached(d)]
    out: dict[str, Any] = {"compiled": cold, "processes": 0, "seconds": 0.0, "kernels": len(found)}
    if cold:
        _compile_in_parallel(out, cold, processes, names, announce)
    if ahead_of_time:
        out["ahead_of_time"] = _build_ahead_of_time(found, names, announce)
    if cold or out.get("ahead_of_time", {}).get("built"):
        out["seconds"] = time.perf_counter() - t0
        compile_seconds += out["seconds"]
    return out


def _compile_in_parallel(out: dict, cold: list, processes: int | None, names, announce: bool) -> None:
    n = processes if processes is not None else min(os.cpu_count() or 1, 4)
    n = max(1, min(n, len(cold)))
    if announce:
        _notice(len(cold), n)
    with tempfile.TemporaryDirectory(prefix="pld-jit-") as claims:
        started = [p for p in (_start_helper(claims, names) for _ in range(n - 1)) if p is not None]
        _helpers.extend(started)
        _compile_claimed(claims if started else None, names)
        for proc in started:
            try:
                proc.wait(timeout=_WAIT_S)
            except Exception:
                pass  # late: whatever it has not cached compiles on first use
            if proc.poll() is not None:
                _helpers.remove(proc)
    out["processes"] = 1 + len(started)


def _build_ahead_of_time(found: list, names, announce: bool) -> dict:
    """Build the extension module of :mod:`pld.kernels._aot` unless this
    machine and source have one already; a failure is returned and warned."""
    import warnings

    from pld.kernels import _aot

    where = _aot.directory()
    res = {"path": where, "built": False, "error": None}
    if where is None:
        res["error"] = "turned off (PLD_KERNELS_AOT=off)"
        return res
    packaged = None if os.environ.get("PLD_KERNELS_AOT", "").strip() else _aot._packaged()
    if packaged is not None and names is None:
        res["path"] = packaged[0]  # (built when pld was installed, for this machine)
        return res
    if os.path.isdir(where):
        return res  # (built before for this source, numba and CPU)
    if announce:
        try:
            sys.stderr.write("pld: building the kernels ahead of time (about 10 s of CPU, once)\n")
        except Exception:
            pass
    try:
        _aot.build([e for e in found if names is None or e[0] in names], where)
        res["built"] = True
    except Exception as exc:  # no compiler, pycc gone from numba, ...: the JIT serves
        res["error"] = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"pld.warm: the ahead-of-time kernels could not be built ({res['error']}); "
                      "the JIT kernels serve as before", RuntimeWarning, stacklevel=3)
    return res


def _helper_main() -> int:
    """A helper process of :func:`warm`: compile claimed kernels into the cache."""
    names = os.environ.get(_NAMES_ENV, "")
    _compile_claimed(os.environ.get(_CLAIMS_ENV) or None, frozenset(names.split(",")) if names else None)
    return 0


def _stop_helpers() -> None:
    # a helper still running at exit (it was late): its work is not needed
    for proc in _helpers:
        if proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout=5)
            except Exception:
                pass


atexit.register(_stop_helpers)
if hasattr(os, "register_at_fork"):
    # (a forked child does not own its parent's helpers)
    os.register_at_fork(after_in_child=_helpers.clear)
