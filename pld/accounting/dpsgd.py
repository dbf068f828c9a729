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
from pld.accounting.loaders import resolve_run, run_pld
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


def dpsgd(noise_multiplier: float, sampling_rate: float | None = None, steps: int | None = None, *,
          sampling: str | sampling_registry.SamplingScheme = "poisson", participations: int | None = None,
          dataset_size: int | None = None, batch_size: int | None = None, epochs: float | None = None,
          steps_per_epoch: int | None = None, drop_last: bool = False, physical_batch_size: int | None = None,
          accumulation_steps: int | None = None, records_per_user: int | None = None) -> PLD:
    """PLD of a DP-SGD run: query it for a certified (epsilon, delta).

    The run is ``sampling_rate`` and ``steps``, or the loader that ran it:
    ``dataset_size`` and ``batch_size`` (``q = b / N``; ``ceil(N / b)`` steps
    per epoch, ``floor`` with ``drop_last``), ``steps_per_epoch`` and
    ``epochs`` (see :mod:`pld.accounting.loaders`: a rate within a few ulps of
    ``1/m`` counts ``m`` steps per epoch).

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation over the clipping norm ``C``, in ``(0, inf)``.
    sampling_rate : float, optional
        Poisson rate, or batch size over dataset size, in ``(0, 1]``.
    steps : int, optional
        Noisy steps (logical batches), in ``[1, 1e12]``; or give ``epochs``.
    sampling : str
        Sampling scheme, and with it the adjacency: ``"poisson"`` (each record
        joins a batch independently; add-or-remove one record, both directions
        composed) or ``"without_replacement"`` (fixed-size batches; substitute
        one record, which moves the clipped sum by up to ``2 C``, so epsilon is
        much larger for the same flags).  Aliases such as
        ``"without-replacement"`` or ``"wor"`` are accepted, and every scheme
        of :mod:`pld.accounting.sampling`: ``"balls_in_bins"``, ``"random_allocation"``
        and ``"shuffle"`` (see :mod:`pld.mechanisms.allocation`; their epochs
        need whole steps: ``dataset_size`` and ``batch_size``,
        ``steps_per_epoch`` or a rate ``1/m``).
    participations : int, optional
        ``sampling="random_allocation"`` only: the steps of an epoch each
        record takes part in (``k``; steps per epoch ``t = k / sampling_rate``).
    dataset_size, batch_size : int, optional
        ``N`` and the logical batch ``b`` (the one noise is added to).
    epochs : float, optional
        Instead of ``steps``: ``ceil(epochs * steps_per_epoch)`` steps.
    steps_per_epoch : int, optional
        ``len(data_loader)``, when it is not ``ceil(N / b)``.
    drop_last : bool
        The loader drops its short last batch (``floor(N / b)`` steps per epoch).
    physical_batch_size, accumulation_steps : int, optional
        Gradient accumulation: a logical batch summed from micro-batches
        (``batch_size = accumulation_steps * physical_batch_size``); the run is
        accounted per logical batch.
    records_per_user : int, optional
        User-level accounting (Poisson sampling only): a user owns up to this
        many records, each sampled and clipped on its own (example-level
        sampling), and the guarantee is for adding or removing a whole user.
        Each step is then the binomial mixture of Gaussians
        (:func:`pld.mechanisms.user_level.example_level_user_step`, tight);
        ``1`` is DP-SGD.  With user-level sampling (a user's whole contribution
        clipped to ``C``) pass the user sampling rate and leave this out.

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
        If a parameter is out of range or the run is under- or
        over-determined; the message names the parameter.

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
    >>> cifar = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=100, sampling="balls_in_bins")
    >>> epoch, epochs = cifar.components[0]     # ceil(50000 / 512) = 98 steps per epoch
    >>> epoch.steps, epochs
    (98, 100)
    """
    noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    shape = resolve_run(sampling, sampling_rate, steps, epochs=epochs, dataset_size=dataset_size,
                        batch_size=batch_size, drop_last=drop_last, steps_per_epoch=steps_per_epoch,
                        physical_batch_size=physical_batch_size, accumulation_steps=accumulation_steps,
                        participations=participations)
    if records_per_user is not None and records_per_user != 1:
        from pld.mechanisms.user_level import example_level_user_step

        if shape.scheme.name != "poisson" or shape.short_batch:
            raise ValueError(f"records_per_user needs sampling='poisson' (example-level Poisson sampling), "
                             f"got sampling={shape.scheme.name!r}")
        return PLD(((example_level_user_step(noise_multiplier, shape.sampling_rate, records_per_user),
                     shape.steps),))
    return run_pld(noise_multiplier, shape)


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
