"""pld: certified privacy-loss-distribution accounting.

Every answer is an interval ``[lower, upper]`` that provably contains the true
value: the upper end comes from a dominating discretisation, the lower end from
a dominated one, and floating-point error of the FFT composition is bounded and
added on the safe side.

>>> import pld
>>> d = pld.Gaussian(sigma=8.0).pld().self_compose(120)
>>> lo, hi = d.epsilon_bounds(1e-6)      # hi is the certified epsilon

The numba kernels are built for this machine when pld is installed (an
extension module, :mod:`pld.kernels._aot`), so that no process JIT-compiles
them; where that build is missing or foreign (a wheel from another CPU, no C
compiler at install), they compile once per machine (numba's on-disk cache) on
their first call, or ahead in parallel processes with :func:`warm` (the ``pld``
command calls it).  Importing pld compiles nothing and starts no process.
"""

import time as _time
from typing import TYPE_CHECKING

#: when ``import pld`` started (the command line counts the import in its wall time)
_IMPORT_STARTED = _time.perf_counter()

# The engine and everything that registers itself when imported (the PLD type,
# mechanism classes that pld.load rebuilds by name, sampling schemes) are
# imported here; the rest is imported on first use (module ``__getattr__``,
# PEP 562), so that a process that asks one question does not pay for all of pld.
from pld import _moved  # noqa: E402

_moved.install()
from pld.accounting.dpsgd import dpsgd, dpsgd_schedule  # noqa: E402
from pld.distribution import PLD, GridTooLargeError, NotTightWarning, TargetMissedWarning  # noqa: E402
from pld.mechanisms import (  # noqa: E402
    ApproxDP,
    DiscreteGaussian,
    DiscreteLaplace,
    FromPMFs,
    Gaussian,
    Laplace,
    Mechanism,
    PoissonSampled,
    PureDP,
    RandomizedResponse,
    SampledWithoutReplacement,
)
from pld.mechanisms.allocation import AllocationAccuracyWarning, RandomAllocation, Shuffling  # noqa: E402
from pld.mechanisms.mixtures import MixtureOfGaussians, PoissonSampledSubstitute, TruncatedPoissonGaussian  # noqa: E402

# (``pld.dpsgd`` is the function; its module's old path is registered as loaded,
# so that importing it does not rebind the package's attribute to the module)
_moved.preload("pld.dpsgd")

#: public names imported on first use: name -> module
_LAZY_NAMES = {
    "warm": "pld.engine.warm",
    "Accountant": "pld.accounting.accountant",
    "calibrate_noise": "pld.accounting.calibrate",
    "calibrate_parameter": "pld.accounting.calibrate",
    "calibrate_sampling_rate": "pld.accounting.calibrate",
    "calibrate_steps": "pld.accounting.calibrate",
    "EpsilonTable": "pld.accounting.epochs",
    "epsilon_over_steps": "pld.accounting.epochs",
    "epsilon_per_epoch": "pld.accounting.epochs",
    "tune_fft": "pld.engine.fft_plans",
    "load": "pld.io",
    "save": "pld.io",
    "search_cost": "pld.accounting.search",
    "iter_sweep": "pld.accounting.sweeps",
    "bandmf": "pld.accounting.matrix",
    "mmcc": "pld.accounting.matrix",
    "group_privacy": "pld.mechanisms.user_level",
    "sweep": "pld.accounting.sweeps",
    "shuffle_bounds": "pld.accounting.shuffle",
}

if TYPE_CHECKING:  # (what static tools see: the same names, imported)
    from pld.accounting.accountant import Accountant
    from pld.accounting.calibrate import calibrate_noise, calibrate_parameter, calibrate_sampling_rate, calibrate_steps
    from pld.accounting.epochs import EpsilonTable, epsilon_over_steps, epsilon_per_epoch
    from pld.accounting.matrix import bandmf, mmcc
    from pld.accounting.search import search_cost
    from pld.accounting.shuffle import shuffle_bounds
    from pld.accounting.sweeps import iter_sweep, sweep
    from pld.engine.fft_plans import tune_fft
    from pld.engine.warm import warm
    from pld.io import load, save
    from pld.mechanisms.user_level import group_privacy

__version__ = "0.2.0"

#: submodules reachable as ``pld.<name>`` after ``import pld``, imported on first
#: use (module ``__getattr__``, PEP 562) so that ``import pld`` stays as fast as
#: the engine alone: rdp, lab and the curves pull in more of scipy, interop
#: pulls in nothing until one of its adapters is imported.  Their 0.1.0 paths
#: (``pld.rdp``, ``pld.dpsgd``, ...) import as before (:mod:`pld._moved`).
_LAZY_SUBMODULES = {name: name for name in ("interop", "report", "cli", "io", "engine", "mechanisms",
                                             "accounting", "baselines")}
_LAZY_SUBMODULES.update({old[len("pld."):]: new[len("pld."):] for old, new in _moved.MOVED.items()})
#: ``pld.risk``: attack risk read off the trade-off curve (pld.report.risk)
_LAZY_SUBMODULES["risk"] = "report.risk"
#: ``pld.samplers``: batch samplers that run what pld accounts (pld.accounting.samplers)
_LAZY_SUBMODULES["samplers"] = "accounting.samplers"

__all__ = [
    "PLD",
    "GridTooLargeError",
    "TargetMissedWarning",
    "NotTightWarning",
    "Mechanism",
    "Gaussian",
    "Laplace",
    "RandomizedResponse",
    "DiscreteLaplace",
    "DiscreteGaussian",
    "PureDP",
    "ApproxDP",
    "FromPMFs",
    "PoissonSampled",
    "SampledWithoutReplacement",
    "PoissonSampledSubstitute",
    "TruncatedPoissonGaussian",
    "MixtureOfGaussians",
    "RandomAllocation",
    "Shuffling",
    "AllocationAccuracyWarning",
    "dpsgd",
    "dpsgd_schedule",
    "bandmf",
    "mmcc",
    "group_privacy",
    "epsilon_per_epoch",
    "epsilon_over_steps",
    "shuffle_bounds",
    "samplers",
    "EpsilonTable",
    "Accountant",
    "calibrate_noise",
    "calibrate_steps",
    "calibrate_sampling_rate",
    "calibrate_parameter",
    "save",
    "load",
    "tune_fft",
    "warm",
    "sweep",
    "iter_sweep",
    "search_cost",
    "__version__",
]


def __getattr__(name: str):
    import importlib

    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        globals()[name] = value  # (once: later lookups do not come here)
        return value
    if name in _LAZY_SUBMODULES:
        target = _LAZY_SUBMODULES[name]
        # (a moved module imports under its old path, an alias of the new one)
        old = f"{__name__}.{name}"
        return importlib.import_module(old if target == name or old in _moved.MOVED else f"{__name__}.{target}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES) | set(_LAZY_NAMES))


# (nothing here compiles or starts a process: kernels compile on first use or
# in pld.warm(), which the pld command calls)

#: how long ``import pld`` took (numpy, scipy and numba's import)
_IMPORT_SECONDS = _time.perf_counter() - _IMPORT_STARTED
