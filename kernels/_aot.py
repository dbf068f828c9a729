"""The kernels compiled ahead of time, for processes that should not start numba.

A process that finds its kernels in numba's on-disk cache still imports numba
and initialises its JIT before loading them: about half a second of CPU, most
of a fresh ``pld dpsgd``.  ``pld.warm(ahead_of_time=True)`` (``pld warm``)
therefore also builds every kernel into one extension module with
``numba.pycc``; ``pld.kernels`` then serves each kernel from it, and numba is
imported only if a call needs the JIT.

- The module is keyed on what its code depends on: the kernels' source, the
  numba and Python versions and this CPU (it is built for the host CPU, as
  the JIT compiles).  Another key finds nothing and the JIT serves.
- Each kernel keeps its own compile options (``fastmath``, ``error_model``):
  the exported function is a one-line wrapper calling the kernel's numba
  dispatcher; the exports release the GIL like the JIT kernels (``nogil``).
- pycc's wrappers do not check argument types, so every call goes through a
  guard that passes on exactly the declared types (``kernels/_signatures.py``:
  contiguous, writeable 1-d arrays of the declared dtype; Python or numpy
  floats and integers) and hands anything else to the JIT kernel, which
  specialises as it always did.

Two places hold a built module:

- **the package** (``pld/kernels/pld_kernels_aot.*.so`` with its sidecar
  ``pld_kernels_aot.json``): built when pld is installed from source (``pip
  install -e .``, ``pip install .``, a wheel built on this machine: setup.py's
  ``build_ext`` runs :func:`build_packaged` in a subprocess).  The sidecar
  records the key; a wheel carried to another CPU, a numba upgrade or an edited
  kernel reads as a foreign key and is ignored.  A failed build (no C compiler,
  no ``numba.pycc``) leaves the package without it and the install succeeds.
- **the user cache** ``$XDG_CACHE_HOME/pld`` (default ``~/.cache/pld``),
  ``kernels-aot-<key>``: built by ``pld warm``.

``PLD_KERNELS_AOT=off`` ignores built modules; ``PLD_KERNELS_AOT=DIR`` uses only
``DIR`` (not the package's module) and keeps ``pld warm``'s there.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import platform
import sys

MODULE = "pld_kernels_aot"
_ENV = "PLD_KERNELS_AOT"
#: argument kinds of the sidecar file: dtype of an array, or a scalar type
_ARRAY_KINDS = {"f8[::1]": "float64", "i8[::1]": "int64", "c16[::1]": "complex128"}


def _cpu() -> str:
    try:
        lines = []
        with open("/proc/cpuinfo") as f:
            for line in f:  # (the first CPU's entry: the file grows with the core count)
                if line.startswith(("model name", "flags")):
                    lines.append(line)
                    if len(lines) == 2:
                        break
        return "".join(lines)
    except OSError:
        return platform.processor()


_key: list = []


def key() -> str:
    """What the built module's code depends on, hashed (once a process)."""
    if not _key:
        _key.append(_compute_key())
    return _key[0]


def _installed_version(name: str) -> str:
    """``importlib.metadata.version(name)``, read without importing
    ``importlib.metadata`` where the first ``sys.path`` entry that holds the
    distribution holds exactly one ``NAME-VERSION.dist-info`` of it (that
    import, with the email parser it needs, is 15-20 ms of every process
    start); anything else goes to ``importlib.metadata``, whose answer this is."""
    for entry in sys.path:
        try:
            found = [e.name for e in os.scandir(entry or ".")
                     if e.name.lower().startswith(name + "-") or e.name.lower().startswith(name + ".")]
        except OSError:
            continue
        metas = [f for f in found if f.lower().endswith((".dist-info", ".egg-info", ".egg", ".egg-link"))]
        if not metas:
            continue
        if len(metas) == 1 and metas[0].endswith(".dist-info"):
            try:
                with open(os.path.join(entry or ".", metas[0], "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line[len("Version:"):].strip()
                        if not line.strip():
                            break  # (end of the headers)
            except OSError:
                pass
        break
    from importlib.metadata import version

    return version(name)


def _compute_key() -> str:
    version = _installed_version

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    try:
        numba_version = version("numba")
    except Exception:
        numba_version = "?"
    h.update("|".join((numba_version, sys.version, platform.machine(), _cpu())).encode())
    return h.hexdigest()[:20]


def _setting() -> str:
    return os.environ.get(_ENV, "").strip()


def _off(setting: str) -> bool:
    return setting.lower() in ("0", "off", "no")


def directory(key_: str | None = None) -> str | None:
    """Where this key's module is kept, or None when turned off."""
    setting = _setting()
    if _off(setting):
        return None
    if setting:
        base = setting
    else:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pld")
    return os.path.join(base, f"kernels-aot-{key_ or key()}")


#: the sidecar of the module built into the package (its key and kernels)
PACKAGED_SIDECAR = MODULE + ".json"


def _kind(t) -> str:
    """Sidecar name of a numba argument type."""
    from numba import types as nt

    if isinstance(t, nt.Array):
        return f"{t.dtype}[::1]".replace("float64", "f8").replace("int64", "i8").replace("complex128", "c16")
    return {"float64": "f8", "int64": "i8"}[str(t)]


def build(kernels: list, out_dir: str | None = None) -> str:
    """Compile ``(name, dispatcher, argument types)`` into the extension module
    under :func:`directory` (or ``out_dir``); returns its directory.

    Needs ``numba.pycc`` and a C compiler; raises whatever they raise.
    """
    import tempfile
    import warnings

    from numba.core.compiler import Flags

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (pycc's pending-deprecation notice)
        import numba.pycc.compiler as pycc_compiler
        from numba.pycc import CC

    target = out_dir or directory()
    if target is None:
        raise ValueError(f"{_ENV}=off: ahead-of-time kernels are turned off")

    class _GilFreeFlags(Flags):
        # pycc compiles its exports with default flags: release the GIL as the
        # JIT kernels (nogil=True) do, so that both sides of a query overlap
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.release_gil = True  # type: ignore[assignment]

    os.makedirs(os.path.dirname(os.path.abspath(target)) or ".", exist_ok=True)
    work = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(os.path.abspath(target)))
    sidecar = {}
    saved = pycc_compiler.Flags
    pycc_compiler.Flags = _GilFreeFlags  # type: ignore[misc]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (pycc's deprecation notice)
            cc = CC(MODULE)
            cc.output_dir = work
            cc.target_cpu = "host"
            for name, dispatcher, sig in kernels:
                dispatcher.compile(sig)  # (its return type)
                signature = dispatcher.overloads[tuple(sig)].signature
                args = ", ".join(f"a{i}" for i in range(len(sig)))
                namespace = {"_kernel": dispatcher}
                exec(f"def {name}({args}):\n    return _kernel({args})\n", namespace)
                cc.export(name, signature)(namespace[name])
                sidecar[name] = {"module": dispatcher.py_func.__module__.rsplit(".", 1)[-1],
                                 "args": [_kind(t) for t in sig]}
            cc.compile()
        with open(os.path.join(work, "kernels.json"), "w") as f:
            json.dump(sidecar, f)
        try:
            os.rename(work, target)  # (atomic: a reader sees all of it or nothing)
        except OSError:  # built by another process meanwhile: keep that one
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    finally:
        pycc_compiler.Flags = saved  # type: ignore[misc]
        if os.path.isdir(work):
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    return target


def _check_namespace(kinds: list) -> dict:
    import numpy as np

    namespace: dict = {"_ndarray": np.ndarray, "_f8": np.float64, "_i8": np.int64}
    for i, k in enumerate(kinds):
        if k in _ARRAY_KINDS:
            namespace[f"_d{i}"] = np.dtype(_ARRAY_KINDS[k])
    return namespace


def _check_source(kinds: list, names: list) -> str:
    """One boolean expression that accepts exactly the declared kinds: a 1-d,
    C-contiguous, writeable array of the dtype, or a scalar of the exact type
    (``float``/``numpy.float64``, ``int``/``numpy.int64``).  (The dtype is
    compared by identity first: numpy's built-in dtypes are singletons, and
    anything else takes the ``==`` comparison.)"""
    terms = []
    for i, (k, a) in enumerate(zip(kinds, names)):
        if k in _ARRAY_KINDS:
            terms.append(f"(type({a}) is _ndarray and ({a}.dtype is _d{i} or {a}.dtype == _d{i}) and {a}.ndim == 1"
                         f" and (_f := {a}.flags).c_contiguous and _f.writeable)")
        else:
            t = {"f8": "(float, _f8)", "i8": "(int, _i8)"}[k]
            terms.append(f"type({a}) in {t}")
    return " and ".join(terms) if terms else "True"


def _guarded(name: str, fast, kinds: list, module: str):
    """``fast`` behind a check of its arguments, compiled to one expression
    (the kernels are called a few hundred times a query: a loop over the
    arguments cost a microsecond a call); other types go to the JIT kernel."""
    jit: list = []

    def slow(*args):
        if not jit:  # other types: the JIT kernel, as without this module
            jit.append(getattr(importlib.import_module(f"{__package__}.{module}"), name))
        return jit[0](*args)

    params = [f"a{i}" for i in range(len(kinds))]
    namespace = _check_namespace(kinds)
    namespace.update(_fast=fast, _slow=slow, __name__=__name__)
    sig = ", ".join(params)
    exec(f"def {name}(*args):\n"
         f"    if len(args) == {len(kinds)}:\n"
         f"        {sig}{',' if len(params) == 1 else ''} = args\n"
         f"        if {_check_source(kinds, params)}:\n"
         f"            return _fast(*args)\n"
         f"    return _slow(*args)\n", namespace)
    kernel = namespace[name]
    kernel.__doc__ = f"``{name}`` compiled ahead of time (pld.kernels._aot); other argument types go to the JIT."
    return kernel


def declared_kernels() -> list:
    """``(name, dispatcher, argument types)`` of every kernel of this package
    that declares its argument types (``@called_with``), by name; imports
    numba.  (Needs only this package, not the rest of pld: the install-time
    build runs where scipy may be missing.)"""
    import pkgutil

    from ._signatures import ATTRIBUTE

    package = sys.modules[__package__]
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{__package__}.{info.name}")
        for name, obj in vars(module).items():
            sig = getattr(obj, ATTRIBUTE, None)
            if sig is not None and getattr(obj, "py_func", None) is not None:
                found[name] = (name, obj, sig)
    return [found[name] for name in sorted(found)]


def build_packaged(target: str) -> str:
    """Build every declared kernel into the extension module file ``target``
    (a path ending in this Python's extension suffix) and write its sidecar
    (``PACKAGED_SIDECAR``, with the key) beside it: the install-time build
    (setup.py).  Raises whatever the build raises."""
    import shutil
    import tempfile

    out = os.path.dirname(os.path.abspath(target))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".aot-", dir=out)
    try:
        built = build(declared_kernels(), os.path.join(work, "module"))
        with open(os.path.join(built, "kernels.json")) as f:
            kernels = json.load(f)
        module = next(f for f in os.listdir(built) if f.startswith(MODULE + "."))
        shutil.move(os.path.join(built, module), target)
        with open(os.path.join(out, PACKAGED_SIDECAR), "w") as f:
            json.dump({"key": key(), "kernels": kernels}, f)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _packaged(here: str | None = None) -> tuple[str, dict] | None:
    """The module built into the package (or into ``here``) and its sidecar's
    kernels, if its key is this process's."""
    here = here or os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, PACKAGED_SIDECAR)) as f:
            sidecar = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(sidecar, dict) or sidecar.get("key") != key():
        return None  # (built for another CPU, numba, Python or kernel source)
    path = next((os.path.join(here, f) for f in sorted(os.listdir(here))
                 if f.startswith(MODULE + ".") and f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))),
                None)
    return (path, sidecar["kernels"]) if path else None


def _from_cache_directory() -> tuple[str, dict] | None:
    where = directory()
    if where is None or not os.path.isdir(where):
        return None
    with open(os.path.join(where, "kernels.json")) as f:
        sidecar = json.load(f)
    path = next(os.path.join(where, f) for f in os.listdir(where) if f.startswith(MODULE + "."))
    return path, sidecar


#: where the served module was loaded from ("" when none)
loaded_from = ""


def load(names: list) -> dict:
    """``{name: guarded kernel}`` for those of ``names`` that this key's module
    holds (the package's, else the user cache's; only ``DIR`` with
    ``PLD_KERNELS_AOT=DIR``); empty when there is none (not built, turned off,
    damaged: the JIT kernels serve)."""
    global loaded_from
    try:
        setting = _setting()
        if _off(setting):
            return {}
        found = None if setting else _packaged()
        if found is None:
            found = _from_cache_directory()
        if found is None:
            return {}
        path, sidecar = found
        spec = importlib.util.spec_from_file_location(MODULE, path)
        if spec is None or spec.loader is None:
            return {}
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        served = {name: _guarded(name, getattr(module, name), sidecar[name]["args"], sidecar[name]["module"])
                  for name in names if name in sidecar}
        loaded_from = path
        return served
    except Exception:  # a damaged or foreign build: the JIT serves
        return {}
