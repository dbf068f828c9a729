"""scipy.special's functions, without its import cost where that is possible.

``import scipy.special`` costs about 0.2 s (scipy 1.14+): its array-API layer
(``scipy._lib._array_api``) clones the numpy namespace, which imports
``numpy.f2py``, ``numpy.testing``, ``numpy.ma`` and more.  A DP-SGD query
needs only ``log_ndtr`` and ``erfcx``, compiled ufuncs of the extension
module ``scipy.special._special_ufuncs``, which imports none of that.  That
module is loaded here by itself (the package's ``__init__`` not run), and
the functions taken from it are the very ufunc objects ``scipy.special``
exports (without ``SCIPY_ARRAY_API``; with it, scipy's wrappers call these
same ufuncs on numpy input), so every value is bit for bit what
``scipy.special`` gives.  The module is then taken out of ``sys.modules``
again, so that a later ``import scipy.special`` runs exactly as it would
without pld (CPython keeps the extension's ufuncs, so it exports the same
objects).  Where any of this fails (another scipy layout), the functions
come from ``scipy.special`` itself.

Every other name (``logsumexp``, ``ndtri``, ``gammaln``, ...) is looked up in
``scipy.special`` on first use (module ``__getattr__``): call sites use
``_special.name(...)``, so ``import pld`` never pays for scipy.special.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

#: the ufuncs loaded without scipy.special's package import
FAST = ("log_ndtr", "erfcx", "erf", "ndtr")
_EXTENSION = "scipy.special._special_ufuncs"


def _load_fast() -> dict:
    """``{name: ufunc}`` for :data:`FAST`, from the extension module alone
    (``{}`` when that is not possible here)."""
    if "scipy.special" in sys.modules:
        return {}  # (imported already: nothing to save)
    try:
        import importlib.machinery
        import importlib.util

        import scipy  # (the top package is light: it does not import scipy.special)

        spec = importlib.machinery.PathFinder.find_spec(_EXTENSION, [p + "/special" for p in scipy.__path__])
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return {}
        was = sys.modules.get(_EXTENSION)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if was is None:
            # (a single-phase extension registers itself; scipy.special's own
            # import, when it comes, must find no half-imported package part)
            sys.modules.pop(_EXTENSION, None)
        found = {name: getattr(module, name) for name in FAST}
    except Exception:  # noqa: BLE001 - any failure: scipy.special itself, below
        return {}
    if not all(isinstance(f, np.ufunc) and f.__name__ == name for name, f in found.items()):
        return {}
    return found


_fast = _load_fast()
if len(_fast) != len(FAST):
    from scipy.special import erf, erfcx, log_ndtr, ndtr  # noqa: F401
else:
    log_ndtr, erfcx, erf, ndtr = (_fast[name] for name in FAST)
del _fast


def __getattr__(name: str):
    # (scipy.special is imported on the first use of a name not in FAST)
    if name.startswith("__"):
        raise AttributeError(name)
    value = getattr(importlib.import_module("scipy.special"), name)
    globals()[name] = value
    return value
