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
    MixtureOfGaussians,
    PoissonSampled,
    PoissonSampledSubstitute,
    PureDP,
    RandomizedResponse,
    SampledWithoutReplacement,
    TruncatedPoissonGaussian,
)
from pld.pld import PLD, GridTooLargeError, TargetMissedWarning
from pld.dpsgd import dpsgd, dpsgd_schedule
from pld.accountant import Accountant
from pld.calibrate import calibrate_noise, calibrate_sampling_rate, calibrate_steps
from pld.io import load, save
from pld.tuning import tune_fft

__version__ = "0.1.0"

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

# first run after install: the kernels compile in two processes at once
# (pld._jit_warm; PLD_JIT_HELPER=0 turns the helper off)
from pld import _jit_warm as _jit_warm  # noqa: E402

_jit_warm.warm_up_if_cold()
