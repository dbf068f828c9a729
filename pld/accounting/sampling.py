"""Sampling schemes of DP-SGD: one registry that every front end reads.

A :class:`SamplingScheme` says everything pld needs about how batches are
drawn: its canonical name and accepted spellings, the neighbouring relation
its analysis is for (:mod:`pld.mechanisms.adjacency`), the lines a report prints, and how
a run of ``steps`` steps at noise multiplier ``sigma`` and sampling rate ``q``
becomes a :class:`pld.PLD`.  :func:`pld.dpsgd`, :func:`pld.dpsgd_schedule`,
:class:`pld.Accountant`, calibration, spec files, the command line and reports
look schemes up here (:func:`get`) instead of testing names.

Adding a scheme is one new module plus tests::

    # pld/my_scheme.py
    from pld.mechanisms import adjacency
    from pld.accounting import sampling
    from pld.mechanisms import Gaussian

    def _step(noise_multiplier, sampling_rate):
        return MySampledGaussian(Gaussian(noise_multiplier), sampling_rate)

    MY_SCHEME = sampling.register(sampling.SamplingScheme(
        name="my_scheme", aliases=("my-scheme", "mine"),
        adjacency=adjacency.ADD_OR_REMOVE,
        description="my sampling (what a record's inclusion looks like)",
        batch_name="expected batch",
        step_mechanism=_step))

and an import of that module in ``pld/__init__.py`` (registration happens
when the module is imported; :mod:`pld.mechanisms.allocation` registers its schemes so).
A scheme whose steps are not independent (random allocation: each record in
exactly k of t steps) gives ``run_pld`` instead of ``step_mechanism``: the PLD
of a whole run, and ``epoch_steps`` for the accountant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pld.distribution import PLD
from pld.mechanisms import Gaussian, Mechanism, PoissonSampled, SampledWithoutReplacement
from pld.mechanisms import adjacency as adj


@dataclass(frozen=True)
class SamplingScheme:
    """How batches are drawn, and how pld accounts a run under it.

    Attributes
    ----------
    name : str
        Canonical spelling, used in every message, report and JSON field.
    aliases : tuple of str
        Other accepted spellings (case, ``-``, ``_`` and spaces do not matter).
    adjacency : str
        The neighbouring relation of the analysis (:mod:`pld.mechanisms.adjacency`).
    description : str
        One line for reports ("sampling: ...").
    batch_name : str
        What ``sampling_rate * n`` is called ("expected batch", "batch").
    step_mechanism : callable, optional
        ``(noise_multiplier, sampling_rate) -> Mechanism`` of one step, for
        schemes whose steps are independent given the data.
    run_pld : callable, optional
        ``(noise_multiplier, sampling_rate, steps, **options) -> PLD`` of a
        whole run, for schemes whose steps are not (given instead of
        ``step_mechanism``).
    epoch_steps : callable, optional
        ``sampling_rate -> steps per epoch`` of a run-level scheme (the
        :class:`pld.Accountant` records its runs epoch by epoch).
    options : tuple of str
        Keyword arguments ``run_pld`` takes besides the three (e.g.
        ``participations``); :func:`pld.dpsgd` passes them through.
    sensitivity_note : str
        Appended to the report's sensitivity convention ("" if nothing to add).
    caveat : str
        One line reports print about what the accounting does not cover.
    neighbouring_text : str
        The report's neighbouring line ("": the relation's own description).
    summary : str
        The short report's sampling row ("": ``description``).
    batch_size_warning : str
        Said when a batch size is given for this scheme ("" if nothing to say).
    """

    name: str
    aliases: tuple[str, ...]
    adjacency: str
    description: str
    batch_name: str
    step_mechanism: Callable[[float, float], Mechanism] | None = None
    run_pld: Callable[..., PLD] | None = None
    epoch_steps: Callable[[float], int] | None = None
    options: tuple[str, ...] = ()
    sensitivity_note: str = ""
    caveat: str = ""
    neighbouring_text: str = ""
    summary: str = ""
    batch_size_warning: str = ""

    def __post_init__(self) -> None:
        if self.adjacency not in adj.RELATIONS:
            raise ValueError(f"adjacency must be one of {adj.RELATIONS}, got {self.adjacency!r}")
        if (self.step_mechanism is None) == (self.run_pld is None):
            raise ValueError(f"sampling scheme {self.name!r} must give exactly one of step_mechanism and run_pld")

    @property
    def per_step(self) -> bool:
        """True when a run is ``steps`` independent steps (``step_mechanism``)."""
        return self.step_mechanism is not None

    @property
    def neighbouring(self) -> str:
        """The report's neighbouring-relation line."""
        return self.neighbouring_text or adj.DESCRIPTIONS[self.adjacency]

    def pld(self, noise_multiplier: float, sampling_rate: float, steps: int, **options) -> PLD:
        """The PLD of ``steps`` steps (arguments already validated)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"sampling {self.name!r} takes no {', '.join(unknown)} (its options: "
                             f"{', '.join(self.options) or 'none'})")
        if self.run_pld is not None:
            return self.run_pld(noise_multiplier, sampling_rate, steps, **options)
        assert self.step_mechanism is not None
        return PLD.from_mechanism(self.step_mechanism(noise_multiplier, sampling_rate), count=steps)


_SCHEMES: dict[str, SamplingScheme] = {}
_SPELLINGS: dict[str, str] = {}


def _key(text: str) -> str:
    return "_".join(text.strip().lower().replace("-", " ").replace("_", " ").split())


def register(scheme: SamplingScheme, *, replace: bool = False) -> SamplingScheme:
    """Add ``scheme`` to the registry (``replace=True`` to redefine a name); returns it."""
    spellings = {_key(s) for s in (scheme.name, *scheme.aliases)}
    taken = {s for s in spellings if _SPELLINGS.get(s, scheme.name) != scheme.name}
    if taken and not replace:
        raise ValueError(f"sampling scheme {scheme.name!r}: spellings {sorted(taken)} already name "
                         f"{sorted({_SPELLINGS[s] for s in taken})}")
    _SCHEMES[scheme.name] = scheme
    for s in spellings:
        _SPELLINGS[s] = scheme.name
    return scheme


def unregister(name: str) -> None:
    """Remove a scheme and its spellings (for tests and plug-ins)."""
    _SCHEMES.pop(name, None)
    for s in [s for s, n in _SPELLINGS.items() if n == name]:
        del _SPELLINGS[s]


def names() -> tuple[str, ...]:
    """Canonical names of the registered schemes, in registration order."""
    return tuple(_SCHEMES)


def aliases() -> dict[str, str]:
    """Every accepted spelling (normalised) and the scheme it names."""
    return dict(_SPELLINGS)


def _choices() -> str:
    quoted = [repr(n) for n in _SCHEMES]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def get(sampling, name: str = "sampling") -> SamplingScheme:
    """The scheme named by ``sampling`` in any accepted spelling.

    Raises
    ------
    TypeError
        If ``sampling`` is not a string (a :class:`SamplingScheme` is returned as is).
    ValueError
        If it names no registered scheme; the message lists them.
    """
    if isinstance(sampling, SamplingScheme):
        return sampling
    if not isinstance(sampling, str):
        raise TypeError(f"{name} must be a string, {_choices()}, got {type(sampling).__name__}")
    scheme = _SPELLINGS.get(_key(sampling))
    if scheme is None:
        extra = sorted({a for s in _SCHEMES.values() for a in s.aliases[:2]})
        raise ValueError(f"{name} must be {_choices()} (also accepted: {', '.join(map(repr, extra))}), "
                         f"got {sampling!r}")
    return _SCHEMES[scheme]


# ------------------------------------------------------------- the schemes
def _poisson_step(noise_multiplier: float, sampling_rate: float) -> Mechanism:
    return PoissonSampled(Gaussian(noise_multiplier), sampling_rate)


def _without_replacement_step(noise_multiplier: float, sampling_rate: float) -> Mechanism:
    return SampledWithoutReplacement(Gaussian(noise_multiplier), sampling_rate)


POISSON = register(SamplingScheme(
    name="poisson",
    aliases=("poisson_sampling", "poisson_sampled"),
    adjacency=adj.ADD_OR_REMOVE,
    description="Poisson sampling (each record joins a batch independently w.p. q)",
    batch_name="expected batch",
    step_mechanism=_poisson_step,
    caveat="assumes Poisson sampling (each record joins each batch independently); a shuffling loader "
           "(DataLoader(shuffle=True): a permutation cut into fixed batches) is not covered: account it with "
           "--sampling shuffle (sampling='shuffle')",
    neighbouring_text="add-or-remove one record (both directions composed: remove and add)",
    summary="Poisson, add-or-remove one record (both directions composed); sigma = noise std / clipping norm C",
    batch_size_warning="--batch-size with Poisson sampling: q = batch size / dataset size, the batch size only "
                       "its expected value; fixed-size batches are --sampling shuffle (a permutation cut into "
                       "batches) or --sampling without_replacement (a fresh draw at every step)"))

WITHOUT_REPLACEMENT = register(SamplingScheme(
    name="without_replacement",
    aliases=("wor", "fixed_batch", "sampling_without_replacement", "sampled_without_replacement", "fixed",
             "fixed_size", "fixed_size_batch"),
    adjacency=adj.SUBSTITUTE,
    description="sampling without replacement (fixed-size batches of q * n records)",
    batch_name="batch",
    step_mechanism=_without_replacement_step,
    sensitivity_note="under substitution a replaced record moves the clipped sum by up to 2C, and the "
                     "accountant uses that sensitivity (mu = 2 / sigma per step)",
    neighbouring_text="substitute one record (replace-one; pairs with fixed-size batches)",
    summary="sampling without replacement (fixed-size batches), substitute one record: a replaced record moves "
            "the clipped gradient sum by up to 2C, twice add-or-remove's C, so epsilon is much larger than "
            "Poisson sampling's for the same flags; sigma = noise std / clipping norm C"))
