"""Linear convolution of real vectors by FFT, with a round-off bound.

pyfftw is used when it is installed (plans are built once per transform size
and reused); ``scipy.fft`` is the fallback.  Both are exposed through
:func:`convolve`, which also returns a bound on the l2 norm of the round-off.

Error bound.  For a radix-2 style FFT of length ``N`` the computed transform
satisfies ``||fl(F x) - F x||_2 <= c u log2(N) ||F x||_2`` (Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., Thm. 24.2).  Propagating this
through forward transforms of ``a`` and ``b``, the pointwise product and the
inverse transform gives
``||fl(a*b) - a*b||_2 <= c' u (log2 N + 1) (||a||_2 ||b||_1 + ||a||_1 ||b||_2)``
using ``||F b||_inf <= ||b||_1``.  We take ``c' = 8``, several times what the
test-suite measures (tests/test_fft.py compares with exact convolutions).

Extended precision.  :func:`rfft_extended` is the forward real transform in
``np.longdouble`` (``scipy.fft``'s pocketfft computes it, twiddle factors
included, in that type): the same bound holds with the long double's unit
roundoff :data:`_U_LD` (``2^-64`` for the x87 80-bit format) in place of
``u``, which tests/test_fft.py checks against exact DFTs.  The FFT power
(:mod:`pld.engine.power`) uses it, where one transform's error is multiplied by the
number of steps.  :func:`transform_extended` pools FFTW's long double plans
(``fftwl``, twiddles in long double too; pocketfft where pyfftw lacks them) for
random allocation's precise convolutions, under the same bound, checked alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import sys
import threading
import warnings

import numpy as np

from pld.kernels import l1_l2_norms


def _scipy_fft():
    """``scipy.fft``, imported on first use: it imports scipy's array-API layer
    (about 0.15 s, see :mod:`pld._special`), and with pyfftw only transforms
    longer than ``_MAX_PLAN_SIZE`` and the long double ones need it."""
    import scipy.fft

    return scipy.fft


def _import_pyfftw():
    """``pyfftw``, imported without its dask and scipy interfaces.

    ``pyfftw.interfaces`` imports ``dask.array`` whenever dask is installed
    (for ``pyfftw.interfaces.dask_fft``, which pld does not use): 0.3-0.7 s of
    every process start that has dask (pld's sweeps extra).  It also imports
    ``scipy.fftpack`` (for ``pyfftw.interfaces.scipy_fft`` and
    ``scipy_fftpack``, which pld does not use either), and with it scipy's
    array-API layer: 0.15 s.  Each is hidden from that one import unless it
    is loaded already, and restored after (``import
    pyfftw.interfaces.scipy_fft`` still works: it imports scipy itself).
    """
    hidden = [name for name in ("dask", "scipy.fftpack") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # (an import of it raises ImportError)
    try:
        import pyfftw
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return pyfftw


try:  # pragma: no cover - exercised when pyfftw is installed
    pyfftw = _import_pyfftw()
    _HAVE_PYFFTW = True
except ImportError:  # pragma: no cover
    _HAVE_PYFFTW = False

_U = 2.0 ** -53
_C_ERR = 8.0
#: unit roundoff of ``np.longdouble`` (2^-64 on x86's 80-bit format; 2^-53
#: where the platform's long double is just a double)
_U_LD = float(np.finfo(np.longdouble).eps) / 2.0
_lock = threading.Lock()
#: size -> list of plans; a plan is used by one thread at a time, and a second
#: plan of the same size is built when two threads (the two sides of a
#: materialisation run concurrently) want the same size at once
_plans: dict[int, list] = {}
#: plans (with their aligned buffers) are kept for sizes up to this, and at
#: most _PLAN_BYTES of buffers in all; larger transforms go through scipy.fft.
#: (An estimated plan costs a fraction of one transform to build and its pooled
#: buffers are not page-faulted on every call, as scipy.fft's fresh ones are:
#: the allocation's label sums take millions of points, many times each.)
_MAX_PLAN_SIZE = 1 << 23
_PLAN_BYTES = 256 << 20
_plan_budget = {"bytes": 0, "cap": _PLAN_BYTES, "per_point": 40}
#: long double plans (:func:`transform_extended`), pooled alike (48 bytes a point)
_ld_plans: dict[int, list] = {}
_ld_plan_budget = {"bytes": 0, "cap": 128 << 20, "per_point": 48}
#: buffers of the long double transform (:func:`rfft_extended_view`), pooled
#: as the plans: size -> list of (input, half spectrum, lock), at most
#: _LD_BUFFER_BYTES in all (32 bytes a point)
_ld_buffers: dict[int, list] = {}
_ld_buffer_bytes = 0
_LD_BUFFER_BYTES = 96 << 20


#: FFTW wisdom (plans measured by :func:`pld.tune_fft`) is read once, before
#: the first plan is built: ``path`` it came from, or None
_wisdom: dict = {"checked": False, "path": None}
WISDOM_FORMAT = "pld-fftw-wisdom"


def _machine_key() -> str:
    """Wisdom is only valid for the CPU and FFTW build it was measured on."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    cpu += line
                if cpu.count("\n") >= 2:
                    break
    except OSError:
        cpu = platform.processor()
    version = getattr(pyfftw, "__version__", "") if _HAVE_PYFFTW else ""
    text = "|".join((platform.machine(), cpu, version))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wisdom_path() -> str | None:
    """Where measured FFTW plans are kept: ``$PLD_FFTW_WISDOM`` if set (empty,
    ``0`` or ``off`` turns wisdom off), else a file named after this machine
    under ``$XDG_CACHE_HOME/pld`` (default ``~/.cache/pld``)."""
    env = os.environ.get("PLD_FFTW_WISDOM")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none") else os.path.expanduser(env)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.path.expanduser("~")
        if home == "~":
            return None  # no home folder: no default place
        base = os.path.join(home, ".cache")
    return os.path.join(base, "pld", f"fftw-wisdom-{_machine_key()}.json")


def _load_wisdom_once() -> None:
    """Import the wisdom file, if any (called under ``_lock``).

    Speed only: plans built from wisdom compute the same transforms (their
    rounding is within the same bound), so a missing file just means
    estimated plans, and an unreadable one is reported and skipped.
    """
    if _wisdom["checked"]:
        return
    _wisdom["checked"] = True
    path = wisdom_path()
    if path is None or not os.path.exists(path):
        return
    try:
        with open(path, encoding="ascii") as f:
            doc = json.load(f)
        if doc.get("format") != WISDOM_FORMAT or doc.get("key") != _machine_key():
            return  # another machine's or another layout's
        ok = pyfftw.import_wisdom(tuple(w.encode("ascii") for w in doc["wisdom"]))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        warnings.warn(f"ignoring unreadable FFTW wisdom file {path}: {exc}", RuntimeWarning, stacklevel=4)
        return
    if ok[0]:
        _wisdom["path"] = path


def _build_plan(n: int, flag: str = "FFTW_ESTIMATE"):
    """A length-``n`` real transform pair on fresh aligned buffers:
    ``(a, f, g, fwd, inv)`` with ``fwd: a -> f`` and ``inv: g -> a``."""
    a = pyfftw.empty_aligned(n, dtype="float64")
    f = pyfftw.empty_aligned(n // 2 + 1, dtype="complex128")
    g = pyfftw.empty_aligned(n // 2 + 1, dtype="complex128")
    fwd = pyfftw.FFTW(a, f, flags=(flag,), threads=1)
    inv = pyfftw.FFTW(g, a, direction="FFTW_BACKWARD", flags=(flag,), threads=1)
    return a, f, g, fwd, inv


def _drop_plans() -> None:
    """Forget pooled plans (new ones pick up newly measured wisdom); plans in
    use stay valid for their holders."""
    with _lock:
        _plans.clear()
        _plan_budget["bytes"] = 0


def _reset_after_fork() -> None:
    # locks held by the parent's other threads at the fork stay held forever
    # in the child: start the child with fresh ones and no plans
    global _lock, _ld_buffer_bytes
    _lock = threading.Lock()
    for pool, budget in ((_plans, _plan_budget), (_ld_plans, _ld_plan_budget)):
        pool.clear()
        budget["bytes"] = 0
    _ld_buffers.clear()
    _ld_buffer_bytes = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def fft_backend() -> str:
    """Name of the FFT library in use (and whether its plans were measured)."""
    if not _HAVE_PYFFTW:
        return "scipy.fft"
    return "pyfftw (measured plans)" if wisdom_in_use() else "pyfftw"


def wisdom_in_use() -> str | None:
    """The wisdom file the plans come from (None: estimated plans only)."""
    if _HAVE_PYFFTW:
        with _lock:
            _load_wisdom_once()
    return _wisdom["path"]


def _acquire_plan(n: int):
    """A plan of size ``n`` that the caller holds (its lock acquired)."""
    return _acquire_pooled(_plans, _plan_budget, n, _build_plan)


def _acquire_pooled(pool_of: dict, budget: dict, n: int, build):
    """A pooled entry of size ``n`` (``build(n)`` plus its lock, acquired), from ``pool_of``
    (size -> entries) within ``budget`` (``{"bytes": in use, "cap": most, "per_point": of an
    entry}``; the oldest other sizes are dropped to make room)."""
    with _lock:
        _load_wisdom_once()
        pool = pool_of.setdefault(n, [])
        for plan in pool:
            if plan[-1].acquire(blocking=False):
                return plan
        per = budget["per_point"]
        while pool_of and budget["bytes"] + per * n > budget["cap"]:
            victim = next((k for k in pool_of if k != n), None)
            if victim is None:
                break
            budget["bytes"] -= per * victim * len(pool_of.pop(victim))
        # (estimated plans: FFTW_ESTIMATE takes a measured plan from the
        # wisdom when there is one for n)
        plan = (*build(n), threading.Lock())
        plan[-1].acquire()
        pool.append(plan)
        budget["bytes"] += per * n
        return plan


@contextlib.contextmanager
def transform(n: int):
    """``(buf, spec, out, fwd, inv)`` for a length-``n`` real transform held by
    the caller: ``fwd()`` maps ``buf`` to ``spec``, ``inv()`` maps ``out`` back
    to ``buf`` normalised by ``1/n`` (and may destroy ``out``).  A pooled
    pyfftw plan when there is one for ``n``, else ``scipy.fft`` on fresh buffers."""
    if _HAVE_PYFFTW and n <= _MAX_PLAN_SIZE:
        buf, f, g, plan_fwd, plan_inv, lock = _acquire_plan(n)
        try:
            yield buf, f, g, plan_fwd, plan_inv  # pyfftw's __call__ normalises the inverse by 1/n
        finally:
            lock.release()
        return
    buf = np.zeros(n)
    spec = np.zeros(n // 2 + 1, dtype=complex)
    out = np.zeros(n // 2 + 1, dtype=complex)

    def fwd() -> None:
        spec[:] = _scipy_fft().rfft(buf)

    def inv() -> None:
        buf[:] = _scipy_fft().irfft(out, n)

    yield buf, spec, out, fwd, inv


def _build_ld_plan(n: int):
    """:func:`_build_plan` in long double (FFTW's ``fftwl``)."""
    a = pyfftw.empty_aligned(n, dtype=np.longdouble)
    f = pyfftw.empty_aligned(n // 2 + 1, dtype=np.clongdouble)
    g = pyfftw.empty_aligned(n // 2 + 1, dtype=np.clongdouble)
    fwd = pyfftw.FFTW(a, f, flags=("FFTW_ESTIMATE",), threads=1)
    inv = pyfftw.FFTW(g, a, direction="FFTW_BACKWARD", flags=("FFTW_ESTIMATE",), threads=1)
    return a, f, g, fwd, inv


def _ld_plans_available() -> bool:
    """Whether pyfftw here has FFTW's long double transforms (``ld``) in a type wider than a double."""
    return _HAVE_PYFFTW and "ld" in getattr(pyfftw, "_supported_types", ()) and _U_LD < 2.0 ** -60


@contextlib.contextmanager
def transform_extended(n: int):
    """:func:`transform` in ``np.longdouble``: ``(buf, spec, out, fwd, inv)`` of length ``n``.

    FFTW's long double transforms where pyfftw has them (pooled plans, as :func:`transform`'s),
    else ``scipy.fft`` (pocketfft in long double) on fresh buffers.  Either satisfies this
    module's bound with :data:`_U_LD` for ``u``: both compute their twiddle factors in long
    double, and tests/test_fft.py measures each against exact transforms.
    """
    if _ld_plans_available() and 48 * n <= _ld_plan_budget["cap"]:
        buf, f, g, plan_fwd, plan_inv, lock = _acquire_pooled(_ld_plans, _ld_plan_budget, n, _build_ld_plan)
        try:
            yield buf, f, g, plan_fwd, plan_inv  # (pyfftw's __call__ normalises the inverse by 1/n)
        finally:
            lock.release()
        return
    buf = np.zeros(n, dtype=np.longdouble)
    spec = np.zeros(n // 2 + 1, dtype=np.clongdouble)
    out = np.zeros(n // 2 + 1, dtype=np.clongdouble)

    def fwd() -> None:
        spec[:] = _scipy_fft().rfft(buf)

    def inv() -> None:
        buf[:] = _scipy_fft().irfft(out, n)

    yield buf, spec, out, fwd, inv


#: extended_available's answer, found once
_extended: dict = {}


def extended_available() -> bool:
    """Whether ``np.longdouble`` is more precise than a double here (x86: 64
    significant bits; not on platforms whose long double is a double), and
    ``scipy.fft`` transforms it without converting to double."""
    hit = _extended.get("ok")
    if hit is None:
        ok = _U_LD < 2.0 ** -60
        if ok:
            probe = _scipy_fft().rfft(np.arange(8, dtype=np.longdouble))
            ok = probe.dtype == np.clongdouble
        hit = _extended["ok"] = bool(ok)
    return hit


def rfft_extended(x: np.ndarray, n: int) -> np.ndarray:
    """The real DFT of ``x`` zero-padded to length ``n``, computed in long
    double (``np.clongdouble``, ``n // 2 + 1`` entries).

    ``x`` (doubles) is converted exactly; the computed transform satisfies
    the bound of this module with ``_U_LD`` for ``u``.
    """
    with rfft_extended_view(x, n) as spec:
        return spec.copy()


@contextlib.contextmanager
def rfft_extended_view(x: np.ndarray, n: int):
    """As :func:`rfft_extended`, the spectrum possibly in a pooled buffer that
    is valid (and to be read only) inside the ``with`` block.

    The same pocketfft transform as ``scipy.fft.rfft`` (bit for bit), called
    on buffers kept per length: fresh ones are page-faulted in on every
    call, about a sixth of the transform's time at the lengths of long runs.
    """
    r2c = _pocketfft_r2c()
    if r2c is None or 32 * n > _LD_BUFFER_BYTES:
        buf = np.zeros(n, dtype=np.longdouble)
        buf[: x.size] = x
        yield _scipy_fft().rfft(buf)
        return
    buf, spec, lock = _acquire_ld_buffers(n)
    try:
        buf[: x.size] = x
        buf[x.size:] = 0.0
        # (axis 0, forward, no normalisation, one thread: scipy.fft.rfft's call)
        r2c(buf, (0,), True, 0, spec, 1)
        yield spec
    finally:
        lock.release()


#: pocketfft's real transform as scipy.fft calls it (found once; None: use
#: the public scipy.fft.rfft)
_r2c: dict = {}


def _pocketfft_r2c():
    if "f" not in _r2c:
        try:
            from scipy.fft._pocketfft import pypocketfft

            f = pypocketfft.r2c
            # (a private entry point: used only if it gives scipy.fft.rfft's
            # long double transform bit for bit on a probe, as at this scipy)
            probe = np.cos(np.arange(48, dtype=np.longdouble) * 0.37) + 0.5
            out = np.zeros(25, dtype=np.clongdouble)
            f(probe, (0,), True, 0, out, 1)
            if not np.array_equal(out, _scipy_fft().rfft(probe)):
                f = None
        except Exception:  # pragma: no cover - another scipy layout or signature
            f = None
        _r2c["f"] = f
    return _r2c["f"]


def _acquire_ld_buffers(n: int):
    """``(input, half spectrum, lock)`` of length ``n`` held by the caller."""
    global _ld_buffer_bytes
    with _lock:
        pool = _ld_buffers.setdefault(n, [])
        for entry in pool:
            if entry[-1].acquire(blocking=False):
                return entry
        while _ld_buffer_bytes + 32 * n > _LD_BUFFER_BYTES:
            victim = next((k for k in _ld_buffers if k != n), None)
            if victim is None:
                break
            _ld_buffer_bytes -= 32 * victim * len(_ld_buffers.pop(victim))
        entry = (np.zeros(n, dtype=np.longdouble), np.zeros(n // 2 + 1, dtype=np.clongdouble), threading.Lock())
        entry[-1].acquire()
        pool.append(entry)
        _ld_buffer_bytes += 32 * n
        return entry


def _conv_pyfftw(a: np.ndarray, b: np.ndarray, n: int, same: bool) -> np.ndarray:
    with transform(n) as (buf, f, g, fwd, inv):
        buf[: a.size] = a
        buf[a.size:] = 0.0
        fwd()
        if same:
            np.multiply(f, f, out=g)
        else:
            # (the first spectrum waits in the inverse's input: no fresh array)
            np.copyto(g, f)
            buf[: b.size] = b
            buf[b.size:] = 0.0
            fwd()
            np.multiply(g, f, out=g)
        inv()
        return buf[: a.size + b.size - 1].copy()


def _conv_scipy(a: np.ndarray, b: np.ndarray, n: int, same: bool) -> np.ndarray:
    fft = _scipy_fft()
    fa = fft.rfft(a, n)
    fb = fa if same else fft.rfft(b, n)
    return fft.irfft(fa * fb, n)[: a.size + b.size - 1]


def _canonical_size(m: int) -> int:
    """Smallest ``2^k``, ``5 * 2^k``, ``3 * 2^k`` or ``7 * 2^k`` >= m: few distinct
    sizes, so plans are reused across levels and queries (at most 25% padding,
    ~7% on average), all of them lengths FFTW has fast codelets for."""
    k = max(0, (m - 1).bit_length())
    p2 = 1 << k
    if k < 3:
        return p2
    for mult in (5, 6, 7):  # 5/8, 6/8, 7/8 of p2
        size = mult << (k - 3)
        if size >= m:
            return size
    return p2


def is_direct(na: int, nb: int) -> bool:
    """Whether :func:`convolve` sums lengths ``na``, ``nb`` directly (no FFT).

    A direct sum of non-negative products is accurate entry by entry:
    ``|fl(a*b)_i - (a*b)_i| <= (min(na, nb) + 2) u (a*b)_i``.
    """
    return min(na, nb) <= 48 or na * nb <= 20000


def convolve(a: np.ndarray, b: np.ndarray, norms: tuple | None = None) -> tuple[np.ndarray, float]:
    """Return ``(a * b, bound)`` where ``bound`` bounds the l2 round-off error.

    Short vectors are convolved directly (``np.convolve``), whose error per entry
    is at most ``len * u * (|a| * |b|)_i``.  ``norms``: ``(l1_l2_norms(a),
    l1_l2_norms(b))`` when the caller has them already (the same values).
    """
    same = a is b
    na, nb = a.size, b.size
    if is_direct(na, nb):
        c = np.convolve(a, b)
        norm_a, norm_b = norms if norms is not None else (l1_l2_norms(a), l1_l2_norms(b))
        # (norms by the numba kernel, inflated for its own rounding: no BLAS)
        bound = ((min(na, nb) + 2) * _U * float(norm_a[1]) * float(norm_b[0])
                 * (1.0 + 4e-9))
        return c, bound
    n = _canonical_size(na + nb - 1)
    if _HAVE_PYFFTW and n <= _MAX_PLAN_SIZE:
        c = _conv_pyfftw(a, b, n, same)
    else:
        c = _conv_scipy(a, b, n, same)
    a1, a2 = l1_l2_norms(a) if norms is None else norms[0]
    b1, b2 = (a1, a2) if same else (l1_l2_norms(b) if norms is None else norms[1])
    return c, _fft_bound(n, a1, a2, b1, b2)


def _fft_bound(n: int, a1: float, a2: float, b1: float, b2: float, u: float = _U) -> float:
    """l2 bound on the round-off of an FFT convolution of length ``n`` of inputs with l1 and
    l2 norms ``(a1, a2)``, ``(b1, b2)``, computed with unit roundoff ``u`` (``_U_LD``: in
    long double)."""
    return _C_ERR * u * (math.log2(n) + 1.0) * (a2 * b1 + a1 * b2)


def convolve_shared(pairs: list[tuple[np.ndarray, np.ndarray]],
                    norms: dict[int, tuple] | None = None) -> list[tuple[np.ndarray, float]]:
    """:func:`convolve` of each pair, every distinct input (by identity) transformed once.

    Where the pairs share one transform length (none short enough for the
    direct sum), the forward transforms are computed once per array and the
    spectra multiplied in the order :func:`convolve` multiplies them, on the
    same plans: the values and bounds are those of ``convolve`` on each pair,
    bit for bit.  (A level of the allocation sums convolves its Q-, P- and
    deviation arrays with the same factors: 6 forward transforms instead of 10.)
    ``norms``: ``{id(x): l1_l2_norms(x)}``, filled in for every input (the caller's
    own error bounds read them too).
    """
    norms = {} if norms is None else norms

    def norm(x: np.ndarray) -> tuple:
        if id(x) not in norms:
            norms[id(x)] = l1_l2_norms(x)
        return norms[id(x)]

    sizes = {_canonical_size(a.size + b.size - 1) for a, b in pairs}
    if len(sizes) != 1 or any(is_direct(a.size, b.size) for a, b in pairs):
        return [convolve(a, b, (norm(a), norm(b))) for a, b in pairs]
    n = sizes.pop()
    spectra: dict[int, np.ndarray] = {}
    out = []
    with transform(n) as (buf, f, g, fwd, inv):
        def spectrum(x: np.ndarray) -> np.ndarray:
            if id(x) not in spectra:
                buf[: x.size] = x
                buf[x.size:] = 0.0
                fwd()
                spectra[id(x)] = f.copy()
            return spectra[id(x)]

        for a, b in pairs:
            np.multiply(spectrum(a), spectrum(b), out=g)
            inv()
            (a1, a2), (b1, b2) = norm(a), norm(b)
            out.append((buf[: a.size + b.size - 1].copy(), _fft_bound(n, a1, a2, b1, b2)))
    return out
