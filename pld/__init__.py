"""pld: certified privacy-loss-distribution accounting.

Every answer is an interval ``[lower, upper]`` that provably contains the true
value: the upper end comes from a dominating discretisation, the lower end from
a dominated one, and floating-point error of the FFT composition is bounded and
added on the safe side.

>>> import pld
>>> d = pld.Gaussian(sigma=8.0).pld().self_compose(120)
>>> lo, hi = d.epsilon_bounds(1e-6)      # hi is the certified epsilon
"""

from pld.mechanisms import (
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
from pld.pld import PLD, GridTooLargeError
from pld.dpsgd import dpsgd, dpsgd_schedule
from pld.accountant import Accountant
from pld.calibrate import calibrate_noise, calibrate_sampling_rate, calibrate_steps
from pld.io import load, save
from pld.tuning import tune_fft

__version__ = "0.1.0"

#: submodules reachable as ``pld.<name>`` after ``import pld``, imported on first
#: use (module ``__getattr__``, PEP 562) so that ``import pld`` stays as fast as
#: the engine alone: rdp, lab and the curves pull in more of scipy, interop
#: pulls in nothing until one of its adapters is imported
_LAZY_SUBMODULES = ("rdp", "exact", "curves", "lab", "interop", "report", "spec", "plots", "cli")

__all__ = [
    "PLD",
    "GridTooLargeError",
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
    "dpsgd",
    "dpsgd_schedule",
    "Accountant",
    "calibrate_noise",
    "calibrate_steps",
    "calibrate_sampling_rate",
    "save",
    "load",
    "tune_fft",
    "__version__",
]


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))


# first run after install: the kernels compile in two processes at once
# (pld._jit_warm; PLD_JIT_HELPER=0 turns the helper off)
from pld import _jit_warm as _jit_warm  # noqa: E402

_jit_warm.warm_up_if_cold()
