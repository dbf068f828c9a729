"""DP-SGD accounting entry points.

``noise_multiplier`` is the Gaussian noise standard deviation divided by the
clipping norm (the L2 bound on one example's clipped gradient).

The sampling scheme (and with it the neighbouring relation) comes from the
registry in :mod:`pld.accounting.sampling`, for example:

* ``"poisson"``: every example joins a batch independently with probability
  ``sampling_rate``; add-or-remove adjacency, both directions composed
  (:class:`pld.PoissonSampled`).
* ``"without_replacement"``: fixed batches of ``sampling_rate * n`` distinct
  examples; substitute adjacency (:class:`pld.SampledWithoutReplacement`).
"""

from __future__ import annotations

from pld import _validate as v
from pld.accounting import sampling as sampling_registry
from pld.distribution import PLD
from pld.mechanisms import Mechanism


def __getattr__(name: str):
    # SAMPLING_SCHEMES (the canonical names) and SAMPLING_ALIASES (every accepted
    # spelling, lower case with "_" for "-" and spaces, and the scheme it names)
    # are read from the registry when asked for, so they include schemes
    # registered after this module was imported (pld.mechanisms.allocation's)
    if name == "SAMPLING_SCHEMES":
        return sampling_registry.names()
    if name == "SAMPLING_ALIASES":
        return sampling_registry.aliases()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: largest number of steps accepted in one call (the engine composes by repeated squaring)
MAX_STEPS = 10**12


def sampling_scheme(sampling, name: str = "sampling") -> str:
    """The canonical name of a sampling scheme given in any accepted spelling.

    Parameters
    ----------
    sampling : str
        ``"poisson"`` or ``"without_replacement"``, or an alias such as
        ``"without-replacement"``, ``"wor"`` or ``"fixed-batch"`` (case, ``-``,
        ``_`` and spaces do not matter).
    name : str
        Parameter name used in error messages.

    Returns
    -------
    str
        ``"poisson"`` or ``"without_replacement"``.

    Raises
    ------
    TypeError
        If ``sampling`` is not a string.
    ValueError
        If it names no known scheme.

    Examples
    --------
    >>> sampling_scheme("Without-Replacement")
    'without_replacement'
    """
    return sampling_registry.get(sampling, name).name


def dpsgd_mechanism(noise_multiplier: float, sampling_rate: float, *, sampling: str = "poisson") -> Mechanism:
    """The mechanism of one DP-SGD step (validated).

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm, in ``(0, inf)``.
    sampling_rate : float
        Poisson rate, or batch size over dataset size, in ``(0, 1]``.
    sampling : str
        A scheme with independent steps (aliases as in :func:`sampling_scheme`).

    Returns
    -------
    Mechanism
        ``PoissonSampled(Gaussian(noise_multiplier), sampling_rate)`` or
        ``SampledWithoutReplacement(Gaussian(noise_multiplier), sampling_rate)``.
    """
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    scheme = sampling_registry.get(sampling)
    if scheme.step_mechanism is None:
        raise ValueError(f"sampling {scheme.name!r} has no mechanism per step (its steps are not independent "
                         "given the data); account a run with pld.dpsgd(..., sampling=...)")
    return scheme.step_mechanism(noise_multiplier, sampling_rate)


def dpsgd(noise_multiplier: float, sampling_rate: float, steps: int, *,
          sampling: str | sampling_registry.SamplingScheme = "poisson", participations: int | None = None) -> PLD:
    """PLD of ``steps`` DP-SGD steps: query it for a certified (epsilon, delta).

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm ``C``, in ``(0, inf)``.
    sampling_rate : float
        Poisson rate, or batch size over dataset size, in ``(0, 1]``.
    steps : int
        Number of steps, in ``[1, 1e12]``.
    sampling : str
        Sampling scheme, and with it the adjacency: ``"poisson"`` (each record
        joins a batch independently; add-or-remove one record, both directions
        composed) or ``"without_replacement"`` (fixed-size batches; substitute
        one record, which moves the clipped sum by up to ``2 C``, so epsilon is
        much larger for the same flags).  Aliases such as
        ``"without-replacement"`` or ``"wor"`` are accepted, and every scheme
        of :mod:`pld.accounting.sampling`: ``"balls_in_bins"``, ``"random_allocation"``
        and ``"shuffle"`` (see :mod:`pld.mechanisms.allocation`).
    participations : int, optional
        ``sampling="random_allocation"`` only: the steps of an epoch each
        record takes part in (``k``; steps per epoch ``t = k / sampling_rate``).

    Returns
    -------
    PLD
        Query it with ``epsilon_bounds(delta)`` (certified ``(lower, upper)``),
        ``epsilon(delta)`` (the upper end), ``delta_bounds(epsilon)``,
        ``explain(delta)``.

    Raises
    ------
    TypeError
        If a parameter has the wrong type (e.g. ``sampling`` not a string).
    ValueError
        If a parameter is out of range; the message names it and the range.

    See Also
    --------
    epsilon_per_epoch : epsilon at the end of every epoch.
    calibrate_noise : the noise multiplier for a target epsilon.

    Examples
    --------
    >>> import pld
    >>> p = pld.dpsgd(noise_multiplier=1.0, sampling_rate=0.01, steps=1000)
    >>> lo, hi = p.epsilon_bounds(1e-5)
    >>> round(hi, 3)    # published: 1.8282
    1.828
    """
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    scheme = sampling_registry.get(sampling)
    steps = v.integer("steps", steps, low=1, high=MAX_STEPS)
    options = {} if participations is None else {"participations": participations}
    return scheme.pld(noise_multiplier, sampling_rate, steps, **options)


def dpsgd_schedule(phases, *, sampling: str = "poisson") -> PLD:
    """PLD of a DP-SGD run whose noise and sampling rate change over phases.

    Parameters
    ----------
    phases : sequence of ``(noise_multiplier, sampling_rate, steps)``
        Consecutive phases; phases with the same ``(noise_multiplier,
        sampling_rate)`` are merged (composition is commutative), the rest are
        composed heterogeneously.
    sampling : str
        Sampling scheme of every phase (see :func:`dpsgd`).

    Returns
    -------
    PLD
        The composition of all phases.

    Raises
    ------
    TypeError
        If ``phases`` is not a sequence of 3-tuples.
    ValueError
        If it is empty or a phase is out of range (the message names the phase).

    Examples
    --------
    >>> import pld
    >>> p = pld.dpsgd_schedule([(1.0, 0.01, 500), (1.0, 0.01, 500)])
    >>> p.epsilon(1e-5) == pld.dpsgd(1.0, 0.01, 1000).epsilon(1e-5)
    True
    """
    scheme = sampling_registry.get(sampling)
    if isinstance(phases, (str, bytes)) or not hasattr(phases, "__iter__"):
        raise TypeError("phases must be a sequence of (noise_multiplier, sampling_rate, steps) tuples")
    # every phase is a pld.dpsgd run; equal mechanisms add up (PLD merges them)
    components: list[tuple[Mechanism, int]] = []
    for i, phase in enumerate(phases):
        try:
            sigma, q, steps = phase
        except (TypeError, ValueError):
            raise TypeError(
                f"phases[{i}] must be a (noise_multiplier, sampling_rate, steps) tuple, got {phase!r}") from None
        try:
            components.extend(dpsgd(sigma, q, steps, sampling=scheme).components)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"phases[{i}]: {exc}") from None
    if not components:
        raise ValueError("phases must contain at least one (noise_multiplier, sampling_rate, steps) phase")
    return PLD(components)
