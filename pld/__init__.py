"""pld: certified privacy-loss-distribution accounting.

Every answer is an interval ``[lower, upper]`` that provably contains the true
value: the upper end comes from a dominating discretisation, the lower end from
a dominated one, and floating-point error of the FFT composition is bounded and
added on the safe side.

>>> import pld
>>> d = pld.Gaussian(sigma=8.0).pld().self_compose(120)
>>> lo, hi = d.epsilon_bounds(1e-6)      # hi is the certified epsilon

The numba kernels compile once per machine (numba's on-disk cache), on their
first call; :func:`warm` compiles them ahead, in parallel processes (the
``pld`` command calls it).  Importing pld compiles nothing and starts no process.
"""

import time as _time

#: when ``import pld`` started (the command line counts the import in its wall time)
_IMPORT_STARTED = _time.perf_counter()

from pld._jit_warm import warm  # noqa: E402
from pld.accountant import Accountant  # noqa: E402
from pld.allocation import AllocationAccuracyWarning, RandomAllocation, Shuffling  # noqa: E402
from pld.calibrate import calibrate_noise, calibrate_parameter, calibrate_sampling_rate, calibrate_steps  # noqa: E402
from pld.distribution import PLD, GridTooLargeError, TargetMissedWarning  # noqa: E402
from pld.dpsgd import dpsgd, dpsgd_schedule  # noqa: E402
from pld.epochs import EpsilonTable, epsilon_over_steps, epsilon_per_epoch  # noqa: E402
from pld.fft_plans import tune_fft  # noqa: E402
from pld.io import load, save  # noqa: E402
from pld.mechanisms import (  # noqa: E402
    ApproxDP,
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
from pld.mixture_mechanisms import MixtureOfGaussians, PoissonSampledSubstitute, TruncatedPoissonGaussian  # noqa: E402
from pld.search import search_cost  # noqa: E402
from pld.sweeps import iter_sweep, sweep  # noqa: E402

__version__ = "0.1.0"

#: submodules reachable as ``pld.<name>`` after ``import pld``, imported on first
#: use (module ``__getattr__``, PEP 562) so that ``import pld`` stays as fast as
#: the engine alone: rdp, lab and the curves pull in more of scipy, interop
#: pulls in nothing until one of its adapters is imported
_LAZY_SUBMODULES = ("rdp", "exact", "curves", "lab", "interop", "report", "spec", "plots", "cli")

__all__ = [
    "PLD",
    "GridTooLargeError",
    "TargetMissedWarning",
    "Mechanism",
    "Gaussian",
    "Laplace",
    "RandomizedResponse",
    "DiscreteLaplace",
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
    "epsilon_per_epoch",
    "epsilon_over_steps",
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
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


# (nothing here compiles or starts a process: kernels compile on first use or
# in pld.warm(), which the pld command calls)

#: how long ``import pld`` took (numpy, scipy and numba's import)
_IMPORT_SECONDS = _time.perf_counter() - _IMPORT_STARTED
