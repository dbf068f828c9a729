"""Mechanisms: immutable descriptions of what ran on the data.

Each mechanism declares its neighbouring relation (:attr:`Mechanism.adjacency`,
see :mod:`pld.mechanisms.adjacency`) and whether its two directions share one pair
(:attr:`Mechanism.symmetric`), knows its *dominating pair* for both directions
(``remove``: P = output on D, Q = output on the neighbour D'; ``add``: the roles
reversed) and hands an exact loss model (:class:`pld.mechanisms.models.LossModel` or
another :class:`pld.mechanisms.models.LossModelProtocol`) to the discretiser.
``mechanism.pld()`` returns a :class:`pld.PLD`.

Conventions: ``sigma`` / ``noise_multiplier`` is the noise standard deviation
divided by the L2 sensitivity when ``sensitivity=1``; in general the Gaussian
pair is ``N(sensitivity, sigma^2)`` vs ``N(0, sigma^2)``.
"""

from pld.mechanisms.base import Mechanism, register_pld_type
from pld.mechanisms.basic import ApproxDP, DiscreteLaplace, FromPMFs, Gaussian, Laplace, PureDP, RandomizedResponse
from pld.mechanisms.discrete_gaussian import DiscreteGaussian
from pld.mechanisms.subsampled import PoissonSampled, SampledWithoutReplacement, SymmetrizedSubsampledGaussian

__all__ = ["Mechanism", "register_pld_type", "Gaussian", "Laplace", "RandomizedResponse", "PureDP", "ApproxDP",
           "DiscreteLaplace", "FromPMFs", "PoissonSampled", "SampledWithoutReplacement",
           "SymmetrizedSubsampledGaussian", "DiscreteGaussian"]
