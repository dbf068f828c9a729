"""Loader shapes: what a training run's data loader did, as an accountant needs it.

A run is described the way a training script knows it -- a dataset of ``N``
records, (logical) batches of ``b``, ``E`` epochs -- and :func:`resolve_run`
turns that into the numbers an accountant composes: the rate of one step, the
steps of an epoch and of the run, and for sampling without replacement the
short last batch.  Every front end (:func:`pld.dpsgd`, :class:`pld.Accountant`,
:func:`pld.epsilon_per_epoch`, calibration, spec and grid files, the command
line) resolves runs here, so a run is counted the same way everywhere.

Steps per epoch
---------------
* ``dataset_size`` and ``batch_size``: a loader's ``len()``, ``ceil(N / b)``
  with a short last batch of ``N - (ceil(N/b) - 1) b`` records, or
  ``floor(N / b)`` with ``drop_last`` (the last ``N mod b`` records of each
  epoch's order are not used).  CIFAR-10, ``N = 50000``, ``b = 512``: 98, or 97
  with ``drop_last``.
* ``steps_per_epoch``: given directly (e.g. ``len(data_loader)``).
* a sampling rate within a few ulps of ``1/m`` (Opacus sets ``1/len(loader)``):
  ``m`` steps, so that ``1/98`` read back from a float is 98 steps, not 98.0000001
  rounded up to 99.
* any other rate: an epoch is ``1/q`` expected steps and ``E`` epochs are
  ``ceil(E / q)`` steps (``q`` read exactly from its shortest decimal form).

``E`` epochs are ``ceil(E * m)`` steps.  ``steps`` may be given instead.

What each scheme accounts
-------------------------
* ``poisson``: every step at rate ``q = b / N`` (Poisson batches have no
  short last batch: the loader only decides how many steps make an epoch).
* ``without_replacement``: fixed-size batches of ``b``; with a short last
  batch of ``r < b`` records each epoch is ``m - 1`` steps at ``b / N`` and one
  step at ``r / N``, each accounted at its own rate (both ends stay certified:
  the short step's pair is the substitute pair at rate ``r / N``).
* ``balls_in_bins`` / ``random_allocation``: every record in exactly ``k`` of
  the ``m`` steps of an epoch (``k = 1``: balls-in-bins); the accounting needs
  only ``m`` (Chua et al., AISTATS 2025; Feldman & Shenfeld 2025).
* ``shuffle``: a permutation cut into the ``m`` batches; see
  :mod:`pld.accounting.shuffle` for its bounds.

Gradient accumulation
---------------------
DP-SGD adds noise once per *logical* batch, however many physical
micro-batches it is summed from; the accounting is per logical batch (its
rate and its noisy steps).  ``batch_size`` is the logical batch;
``physical_batch_size`` (with ``accumulation_steps`` micro-batches per
logical batch, ``batch_size = accumulation_steps * physical_batch_size``)
only says how it was computed.  Accounting micro-batches as steps
understates epsilon several-fold (jax_privacy issue 234: 0.72 instead of 5.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from pld import _validate as v
from pld.accounting import sampling as sampling_registry
from pld.distribution import PLD
from pld.mechanisms import Gaussian, SampledWithoutReplacement

__all__ = ["RunShape", "resolve_run", "loader_steps_per_epoch", "steps_of_rate", "run_pld", "MAX_STEPS"]

#: largest number of steps accepted in one call (as pld.dpsgd)
MAX_STEPS = 10**12
#: a rate within this many ulps of k/m is read as k/m
RATE_ULPS = 4


def loader_steps_per_epoch(dataset_size: int, batch_size: int, drop_last: bool = False) -> int:
    """Batches a loader of ``dataset_size`` records in batches of ``batch_size`` makes per epoch.

    ``ceil(N / b)`` (a short last batch), or ``floor(N / b)`` with ``drop_last``.

    Raises
    ------
    ValueError
        If ``batch_size > dataset_size`` with ``drop_last`` (no batch at all).

    Examples
    --------
    >>> loader_steps_per_epoch(50000, 512), loader_steps_per_epoch(50000, 512, drop_last=True)
    (98, 97)
    """
    n = v.integer("dataset_size", dataset_size, low=1, high=MAX_STEPS)
    b = v.integer("batch_size", batch_size, low=1, high=MAX_STEPS)
    if drop_last:
        if b > n:
            raise ValueError(f"batch_size ({b}) is larger than dataset_size ({n}): with drop_last no batch is left")
        return n // b
    return -(-n // b)


def steps_of_rate(sampling_rate: float, participations: int = 1) -> int | None:
    """``m`` when ``sampling_rate`` is ``participations / m`` up to a few ulps, else None.

    A rate computed as ``1 / len(loader)`` (Opacus) or ``b / (m b)`` is the
    float nearest to ``1/m``; read exactly from its decimal digits it is a
    little above or below, and a count ``ceil(E / q)`` is then one step off.

    Examples
    --------
    >>> steps_of_rate(1 / 98), steps_of_rate(0.01020408163265306), steps_of_rate(512 / 50000)
    (98, 98, None)
    """
    q = float(sampling_rate)
    if not (q > 0 and math.isfinite(q)):
        return None
    ratio = participations / q
    if not ratio <= 2.0 * MAX_STEPS:  # (a subnormal rate: no whole number of steps, and 1 / q is inf)
        return None
    m = round(ratio)
    if m < 1 or m > MAX_STEPS:
        return None
    return m if abs(participations / m - q) <= RATE_ULPS * math.ulp(q) else None


@dataclass(frozen=True)
class RunShape:
    """A run resolved into what the accountant composes.

    Attributes
    ----------
    sampling : str
        Canonical scheme name (:mod:`pld.accounting.sampling`).
    sampling_rate : float
        The rate of a (full) step: ``b / N``, the given rate, or for a
        run-level scheme ``k / m``.
    steps : int
        Noisy steps (logical batches) of the run.
    steps_per_epoch : int or None
        ``m``; None when an epoch is only ``1 / q`` expected steps.
    epochs : float or None
        The epochs asked for (None when ``steps`` was given).
    dataset_size, batch_size : int or None
        ``N`` and the logical batch ``b``, when given.
    physical_batch_size, accumulation_steps : int or None
        How a logical batch was computed (reports only).
    drop_last : bool
        The loader drops the last ``N mod b`` records of each epoch.
    participations : int
        ``k`` of a run-level scheme (1 otherwise).
    steps_per_epoch_source : str
        How ``m`` was found: ``"ceil"``, ``"floor"`` (drop_last), ``"given"``,
        ``"rate"`` (``q = k/m``) or ``""`` (none).
    short_batch : int or None
        Sampling without replacement: records in the short last batch of an
        epoch, accounted at its own rate (None: every batch is full).
    """

    sampling: str
    sampling_rate: float
    steps: int
    steps_per_epoch: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    batch_size: int | None = None
    physical_batch_size: int | None = None
    accumulation_steps: int | None = None
    drop_last: bool = False
    participations: int = 1
    steps_per_epoch_source: str = ""
    short_batch: int | None = None

    @property
    def scheme(self) -> sampling_registry.SamplingScheme:
        return sampling_registry.get(self.sampling)

    @property
    def dropped(self) -> int:
        """Records of each epoch's order a ``drop_last`` loader leaves out (0 if none)."""
        if not self.drop_last or self.dataset_size is None or self.batch_size is None:
            return 0
        return self.dataset_size % self.batch_size

    def step_counts(self) -> list[tuple[float, int]]:
        """``[(rate, steps), ...]``: the per-step rates of the run and their counts
        (one entry but for sampling without replacement with a short last batch)."""
        if not self.short_batch:
            return [(self.sampling_rate, self.steps)]
        assert self.steps_per_epoch is not None and self.dataset_size is not None
        m = self.steps_per_epoch
        short = self.steps // m  # (the short batch is an epoch's last step)
        rates = [(self.sampling_rate, self.steps - short)]
        if short:
            rates.append((self.short_batch / self.dataset_size, short))
        return [(q, k) for q, k in rates if k > 0]

    def epochs_run(self) -> float | None:
        """Epochs the steps make (``steps / m``), or None without a step count per epoch."""
        if self.steps_per_epoch is None:
            return self.epochs
        return self.steps / self.steps_per_epoch

    def loader_text(self) -> str:
        """One line: how the steps were counted, for reports (empty if nothing to say)."""
        parts = []
        m = self.steps_per_epoch
        n, b = self.dataset_size, self.batch_size
        if m is not None and self.steps_per_epoch_source in ("ceil", "floor") and n and b:
            if self.steps_per_epoch_source == "floor":
                text = f"{m} steps per epoch = floor({n} / {b}) (drop_last"
                text += f": {n % b} records of each epoch unused)" if n % b else ")"
            else:
                text = f"{m} steps per epoch = ceil({n} / {b})"
                r = n - (m - 1) * b
                if self.sampling in ("poisson", "balls_in_bins", "random_allocation"):
                    text += " (the loader's length; its batches' sizes are random)"
                else:
                    text += f" (short last batch of {r})" if r < b else " (no short batch)"
            parts.append(text)
        elif m is not None and self.steps_per_epoch_source == "given":
            parts.append(f"{m} steps per epoch (given)")
        elif m is not None and self.steps_per_epoch_source == "rate":
            parts.append(f"{m} steps per epoch (q = {self.participations}/{m})")
        if self.short_batch and m is not None:
            parts.append(f"each epoch {m - 1} steps at {self.batch_size}/{self.dataset_size} and the short one at "
                         f"{self.short_batch}/{self.dataset_size}, each accounted at its own rate")
        if self.physical_batch_size:
            k = self.accumulation_steps or -(-(self.batch_size or 0) // self.physical_batch_size)
            parts.append(f"logical batch {self.batch_size} = {k} accumulated micro-batches of at most "
                         f"{self.physical_batch_size}: accounted per logical batch (one noisy step each)")
        return "; ".join(p for p in parts if p)


def _exact(x) -> Fraction:
    return Fraction(repr(float(x))) if isinstance(x, float) else Fraction(x)


def resolve_run(sampling: str | sampling_registry.SamplingScheme = "poisson", sampling_rate: float | None = None,
                steps: int | None = None, *,
                epochs: float | None = None, dataset_size: int | None = None, batch_size: int | None = None,
                drop_last: bool = False, steps_per_epoch: int | None = None,
                physical_batch_size: int | None = None, accumulation_steps: int | None = None,
                participations: int | None = None) -> RunShape:
    """A run from any description a training script has of it (validated).

    Parameters
    ----------
    sampling : str
        The scheme (any spelling :func:`pld.dpsgd` accepts).
    sampling_rate : float, optional
        ``q`` in ``(0, 1]``; or give ``dataset_size`` and ``batch_size``
        (``q = b / N``), or for a run-level scheme only the steps per epoch.
    steps : int, optional
        Noisy steps in ``[1, 1e12]``; or give ``epochs``.
    epochs : float, optional
        ``> 0``: ``ceil(epochs * m)`` steps (see the module docstring for ``m``).
    dataset_size, batch_size : int, optional
        ``N`` and the logical batch ``b`` (``1 <= b <= N``).
    drop_last : bool
        ``floor(N / b)`` steps per epoch instead of ``ceil(N / b)``.
    steps_per_epoch : int, optional
        ``m`` given directly (e.g. ``len(data_loader)``).
    physical_batch_size : int, optional
        Micro-batch of gradient accumulation (at most the logical batch).
    accumulation_steps : int, optional
        Micro-batches per logical batch: ``batch_size = accumulation_steps *
        physical_batch_size`` (either may be given with the other two).
    participations : int, optional
        ``sampling="random_allocation"``: steps of an epoch each record joins.

    Returns
    -------
    RunShape

    Raises
    ------
    TypeError, ValueError
        Naming the parameter: a missing or contradictory part of the run.

    Examples
    --------
    >>> r = resolve_run("shuffle", dataset_size=50000, batch_size=512, epochs=100)
    >>> r.steps_per_epoch, r.steps
    (98, 9800)
    >>> resolve_run("poisson", 1 / 98, epochs=100).steps
    9800
    """
    scheme = sampling_registry.get(sampling)
    name = scheme.name
    run_level = not scheme.per_step
    k = 1 if participations is None else v.integer("participations", participations, low=1, high=10**7)
    if participations is not None and "participations" not in scheme.options:
        raise ValueError(f"sampling {name!r} takes no participations (sampling='random_allocation' does)")
    if not isinstance(drop_last, (bool, int)) or drop_last not in (0, 1):
        raise TypeError(f"drop_last must be True or False, got {drop_last!r}")
    drop_last = bool(drop_last)
    n = None if dataset_size is None else v.integer("dataset_size", dataset_size, low=1, high=MAX_STEPS)
    b = None if batch_size is None else v.integer("batch_size", batch_size, low=1, high=MAX_STEPS)
    phys = (None if physical_batch_size is None
            else v.integer("physical_batch_size", physical_batch_size, low=1, high=MAX_STEPS))
    acc = None if accumulation_steps is None else v.integer("accumulation_steps", accumulation_steps, low=1,
                                                            high=10**6)
    # ---- the logical batch: what one noisy step sums
    if acc is not None:
        if phys is None:
            raise ValueError("accumulation_steps needs physical_batch_size (logical batch = accumulation_steps x "
                             "physical_batch_size)")
        if b is not None and b != acc * phys:
            raise ValueError(f"batch_size ({b}) must be accumulation_steps x physical_batch_size = {acc} x {phys} "
                             f"= {acc * phys}: batch_size is the logical batch, the one noise is added to")
        b = acc * phys
    elif phys is not None and b is not None:
        if phys > b:
            raise ValueError(f"physical_batch_size ({phys}) is larger than the logical batch_size ({b})")
        acc = -(-b // phys)
    elif phys is not None and sampling_rate is None:
        raise ValueError("physical_batch_size says how a logical batch is computed: give the logical batch_size "
                         "(or accumulation_steps) too; the accounting is per logical batch")
    if b is not None and n is None:
        raise ValueError("batch_size needs dataset_size (q = batch size / dataset size)")
    if n is not None and b is not None and b > n:
        raise ValueError(f"batch_size ({b}) is larger than dataset_size ({n})")
    if drop_last and (n is None or b is None):
        raise ValueError("drop_last needs dataset_size and batch_size (steps per epoch floor(N / b))")
    if sampling_rate is not None and b is not None:
        raise ValueError("give either sampling_rate or batch_size (with dataset_size), not both")
    q = None if sampling_rate is None else v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    m_given = None if steps_per_epoch is None else v.integer("steps_per_epoch", steps_per_epoch, low=1,
                                                            high=MAX_STEPS)
    # ---- steps per epoch
    m, source = None, ""
    if n is not None and b is not None:
        m, source = loader_steps_per_epoch(n, b, drop_last), ("floor" if drop_last else "ceil")
        if m_given is not None and m_given != m and name != sampling_registry.POISSON.name:
            other = loader_steps_per_epoch(n, b, not drop_last)
            alt = "" if other == m else f" ({other} with drop_last={not drop_last})"
            raise ValueError(f"steps_per_epoch={m_given} does not match dataset_size and batch_size: a loader of {n} "
                             f"records in batches of {b} makes {m} batches per epoch{alt}")
        if m_given is not None:
            m, source = m_given, "given"
    elif m_given is not None:
        m, source = m_given, "given"
        if q is not None and run_level and steps_of_rate(q, k) != m:
            raise ValueError(f"sampling_rate={q!r} is not {k}/steps_per_epoch = {k}/{m} (sampling {name!r}: every "
                             f"record in exactly {k} of the {m} steps of an epoch)")
    elif q is not None:
        snapped = steps_of_rate(q, k)
        if snapped is not None:
            m, source = snapped, "rate"
    # ---- the rate of a step
    if run_level:
        if m is None:
            what = "shuffling" if name == "shuffle" else name.replace("_", "-")
            got = f"sampling_rate={q!r} is not 1/m for a whole number m" if q is not None else "no batch size"
            raise ValueError(
                f"sampling={name!r} ({what}) needs whole batches per epoch ({got}): give dataset_size and "
                f"batch_size (ceil(N / b) batches per epoch, or floor with drop_last), steps_per_epoch "
                f"(len(data_loader)), or a sampling_rate of {'' if k == 1 else f'{k}/m'}{'1/m' if k == 1 else ''}")
        if k > m:
            raise ValueError(f"participations ({k}) must be at most the steps per epoch ({m})")
        rate = k / m
    elif n is not None and b is not None:
        rate = b / n
    elif q is not None:
        rate = q
    elif m is not None:
        raise ValueError(f"sampling={name!r} needs a rate: give sampling_rate, or dataset_size and batch_size")
    else:
        raise ValueError("give sampling_rate, or dataset_size and batch_size")
    # ---- the steps of the run
    E = None
    if steps is not None and epochs is not None:
        raise ValueError("give either steps or epochs, not both")
    if steps is not None:
        T = v.integer("steps", steps, low=1, high=MAX_STEPS)
    elif epochs is not None:
        E = v.real("epochs", epochs, low=0.0, low_open=True)
        exact = _exact(E) * m if m is not None else _exact(E) / _exact(rate)
        if exact > MAX_STEPS:
            raise ValueError(f"epochs={E:g} needs about {float(exact):.3g} steps, above the limit of 1e12")
        T = max(1, math.ceil(exact))
    else:
        raise ValueError("give steps or epochs")
    short = None
    if (name == sampling_registry.WITHOUT_REPLACEMENT.name and n is not None and b is not None and not drop_last
            and m is not None and source in ("ceil", "given")):
        r = n - (m - 1) * b
        short = r if 0 < r < b else None
    return RunShape(sampling=name, sampling_rate=rate, steps=T, steps_per_epoch=m, epochs=E, dataset_size=n,
                    batch_size=b, physical_batch_size=phys, accumulation_steps=acc, drop_last=drop_last,
                    participations=k, steps_per_epoch_source=source, short_batch=short)


def run_pld(noise_multiplier: float, shape: RunShape) -> PLD:
    """The PLD of a resolved run (see :func:`pld.dpsgd`)."""
    sigma = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    scheme = shape.scheme
    if not scheme.per_step:
        options: dict = {"participations": shape.participations} if "participations" in scheme.options else {}
        if shape.dropped and "inclusion" in scheme.options:
            # (a drop_last loader leaves a record out of an epoch with probability dropped / N)
            assert shape.dataset_size is not None
            options["inclusion"] = 1.0 - shape.dropped / shape.dataset_size
        return scheme.pld(sigma, shape.sampling_rate, shape.steps, **options)
    if shape.short_batch:
        # (the short step at its own rate: its substitute pair at r/N, both ends)
        return PLD(tuple((SampledWithoutReplacement(Gaussian(sigma), q), count) for q, count in shape.step_counts()))
    return scheme.pld(sigma, shape.sampling_rate, shape.steps)
