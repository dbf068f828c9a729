"""Front ends for matrix mechanisms: banded matrix factorisation (BandMF) and MMCC.

* :func:`bandmf`: a ``b``-banded strategy with cyclic Poisson sampling, the
  exact reduction of Choquette-Choo et al. (NeurIPS 2023) and the same
  composition jax_privacy's ``amplified_bandmf_event`` emits (with a strategy,
  its truncated last column too).
* :func:`mmcc`: any non-negative lower-triangular strategy with Poisson
  sampling at every step, MMCC's upper bound (Choquette-Choo et al., ICLR
  2024) with a concrete lower end (:mod:`pld.mechanisms.mmcc`).
"""

from __future__ import annotations

import numpy as np

from pld import _validate as v
from pld.distribution import PLD
from pld.mechanisms import adjacency as adj
from pld.mechanisms.basic import Gaussian
from pld.mechanisms.matrix import (
    Bracketed,
    banded_toeplitz,
    bandmf_components,
    bandmf_lower,
    strategy_coefficients,
    strategy_matrix,
)
from pld.mechanisms.mmcc import mmcc as _mmcc
from pld.mechanisms.subsampled import PoissonSampled


def bandmf(noise_multiplier: float, sampling_rate: float, steps: int, *, bands: int = 1, strategy=None) -> PLD:
    """PLD of a BandMF run: a ``bands``-banded strategy, cyclic Poisson sampling.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm times the strategy's
        largest column norm (jax_privacy's ``noise_multiplier``), in ``(0, inf)``.
    sampling_rate : float
        Within its group, each record joins a step's batch with this
        probability (jax_privacy: ``expected_participations * bands / steps``).
    steps : int
        Number of steps (jax_privacy's ``iterations``).
    bands : int
        ``b``: the records are split into ``b`` groups, step ``t`` samples from
        group ``t mod b`` (a record takes part at most once every ``b`` steps).
    strategy : array_like, optional
        The first column of the banded Toeplitz strategy (at most ``bands``
        coefficients; jax_privacy's ``BandMFConfig.strategy``) or the whole
        ``steps x steps`` banded lower-triangular matrix.  Without it every
        participation counts with a full column (jax_privacy's event).

    Returns
    -------
    PLD
        A composition of Poisson-subsampled Gaussians (add-or-remove, both
        directions): tight for a Toeplitz strategy or none (the record in the
        first group, its gradients aligned); for a matrix whose groups differ,
        an upper bound with a concrete group as its lower end.

    Examples
    --------
    >>> import pld
    >>> p = pld.bandmf(1.0, 0.04, 2000, bands=4)      # a record is in 500 batches at most
    >>> p.epsilon(1e-5) == pld.dpsgd(1.0, 0.04, 500).epsilon(1e-5)
    True
    """
    upper, tight = bandmf_components(noise_multiplier, sampling_rate, steps, bands, strategy)
    if tight:
        return PLD(upper)
    lower = bandmf_lower(noise_multiplier, sampling_rate, strategy, bands)
    return PLD(((Bracketed(
        name="BandMF", upper=upper, lower=lower, relation=adj.ADD_OR_REMOVE,
        upper_note=("cyclic Poisson sampling, banded strategy: participation by participation the largest "
                    "column norm of any group (no single group attains it): an upper bound"),
        lower_note="a record of the group with the largest column norms (a concrete pair of datasets)"), 1),))


def mmcc(strategy, noise_multiplier: float, sampling_rate: float, *, steps: int | None = None,
         gradients: str = "adaptive", failure_probability: float = 1e-10) -> PLD:
    """PLD of a matrix mechanism with Poisson sampling at every step (MMCC).

    Parameters
    ----------
    strategy : array_like
        A lower-triangular strategy with non-negative entries: the matrix, or
        the first column of a Toeplitz one (then ``steps`` is required).
    noise_multiplier : float
        Noise standard deviation over the clipping norm times the strategy's
        largest column norm.
    sampling_rate : float
        Every record joins every step's batch independently with this probability.
    steps : int, optional
        Number of steps of a Toeplitz strategy given by its first column (at most 4096).
    gradients : str
        ``"adaptive"`` (any adaptively chosen gradients) or ``"aligned"`` (a
        record's clipped gradient is the same vector whenever it is sampled).
    failure_probability : float
        Added to delta (the posterior bounds' failure probability).

    Returns
    -------
    PLD
        Not tight (``tight`` False): the upper end is MMCC's conditional
        composition, the lower end a concrete pair of datasets
        (:mod:`pld.mechanisms.mmcc`).  A diagonal strategy is DP-SGD with
        per-step sensitivities, tight.
    """
    try:
        arr = np.asarray(strategy, dtype=float)
    except (TypeError, ValueError):
        raise TypeError("strategy must be a sequence of real numbers (a first column) or a square matrix") from None
    if arr.ndim == 1:
        if steps is None:
            raise ValueError("steps is required when strategy is a first column (a Toeplitz strategy)")
        c = banded_toeplitz(strategy_coefficients(arr), steps)
    else:
        c = strategy_matrix(arr)
        if steps is not None and v.integer("steps", steps, low=1) != c.shape[0]:
            raise ValueError(f"strategy has {c.shape[0]} rows but steps = {steps}")
    if not np.any(np.tril(c, -1)):
        sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
        q = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
        d = np.abs(np.diag(c)) / np.abs(np.diag(c)).max()
        parts: dict = {}
        for s in d:
            m = PoissonSampled(Gaussian(sigma) if s == 1.0 else Gaussian(sigma, float(s)), q)
            parts[m] = parts.get(m, 0) + 1
        return PLD(tuple(parts.items()))
    return PLD(((_mmcc(c, noise_multiplier, sampling_rate, gradients=gradients,
                       failure_probability=failure_probability), 1),))
