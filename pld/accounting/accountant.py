"""A running privacy accountant for training loops.

>>> import pld
>>> acc = pld.Accountant()
>>> for _ in range(1000):
...     acc.step(noise_multiplier=1.0, sampling_rate=0.01)
>>> lo, hi = acc.epsilon_bounds(1e-5)        # doctest: +SKIP

The accountant keeps the history of what ran as ``(mechanism, count)`` pairs
(consecutive identical records are merged), composes it into a :class:`pld.PLD`
on demand and caches query results until the next record.  Its state is a
plain JSON-serialisable dict, so a run that is checkpointed and resumed keeps
one privacy budget across restarts.  All methods are thread-safe.

It is the one accountant core: the Opacus adapter (:mod:`pld.interop.opacus`)
and the dp_accounting adapter (:mod:`pld.interop.dp_accounting`) translate
their callers' records into :meth:`Accountant.record` calls and answer from
one of these, so history, caching and the answer before anything is recorded
are decided here once.
"""

from __future__ import annotations

import math
import threading

from pld import _validate as v
from pld.accounting import sampling as sampling_registry
from pld.accounting.dpsgd import dpsgd_mechanism, sampling_scheme
from pld.distribution import PLD

# one encoding for saved PLDs and accountant state: {"type": class, "fields": {...}}
from pld.io import mechanism_from_dict, mechanism_to_dict
from pld.mechanisms import Mechanism

STATE_FORMAT = "pld.Accountant"
STATE_VERSION = 1


class Accountant:
    """Accumulates mechanisms and answers certified (epsilon, delta) queries.

    Parameters
    ----------
    sampling : str
        Sampling scheme used by :meth:`step` (and with it the adjacency): any
        scheme and spelling :func:`pld.dpsgd` accepts.  Run-level schemes
        (``"balls_in_bins"``, ``"random_allocation"`` with one participation,
        ``"shuffle"``) are recorded epoch by epoch; an epoch still running is
        accounted as the steps it ran (as :func:`pld.dpsgd` accounts a partial epoch).
    value_discretization_interval : float, optional
        Fixed grid spacing of the composed PLD, for experts (see
        :class:`pld.PLD`); by default the engine picks it per query.
    sampling_rate : float, optional
        The rate :meth:`step` records when it is given none (e.g. the
        sampler's, :meth:`pld.samplers.PoissonSampler.accountant`).
    steps_per_epoch : int, optional
        The steps of an epoch (``len(data_loader)``): a run-level scheme's
        epochs are this long, whatever rate a step is recorded with (its rate
        is then ``participations / steps_per_epoch``); without it, ``1 / q``
        (a rate within a few ulps of ``1/m``).

    Raises
    ------
    TypeError, ValueError
        For an unknown sampling scheme.

    Examples
    --------
    >>> import pld
    >>> acc = pld.Accountant()
    >>> acc.step(noise_multiplier=1.0, sampling_rate=0.01, count=1000)
    >>> acc.epsilon(1e-5) == pld.dpsgd(1.0, 0.01, 1000).epsilon(1e-5)
    True
    """

    def __init__(self, *, sampling: str = "poisson", value_discretization_interval: float | None = None,
                 sampling_rate: float | None = None, steps_per_epoch: int | None = None):
        self._sampling = sampling_scheme(sampling)
        self._rate = (None if sampling_rate is None else
                      v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True))
        self._epoch_steps = (None if steps_per_epoch is None else
                             v.integer("steps_per_epoch", steps_per_epoch, low=1, high=10**7))
        if value_discretization_interval is not None:
            value_discretization_interval = v.real(
                "value_discretization_interval", value_discretization_interval, low=0.0, low_open=True)
        self._interval = value_discretization_interval
        self._lock = threading.RLock()
        self._history: list[tuple[Mechanism, int]] = []
        #: run-level sampling schemes (random allocation, shuffling): steps of an
        #: epoch not yet complete, by (noise_multiplier, sampling_rate)
        self._pending: dict[tuple[float, float], int] = {}
        self._steps = 0
        self._version = 0
        self._pld: PLD | None = None
        self._cache: dict = {}

    # ------------------------------------------------------------- record
    @property
    def sampling(self) -> str:
        return self._sampling

    def step(self, *, noise_multiplier: float, sampling_rate: float | None = None, count: int = 1) -> None:
        """Record ``count`` DP-SGD steps (Gaussian noise, subsampled as ``sampling``).

        Parameters
        ----------
        noise_multiplier : float
            Noise standard deviation over the clipping norm, in ``(0, inf)``.
        sampling_rate : float, optional
            In ``(0, 1]``; default: the accountant's ``sampling_rate`` (or, for
            a run-level scheme with ``steps_per_epoch``, ``1 / steps_per_epoch``).
        count : int, default 1
            Number of identical steps, in ``[1, 1e12]``.

        Raises
        ------
        TypeError, ValueError
            For an invalid parameter (named in the message), or no rate at all.
        """
        scheme = sampling_registry.get(self._sampling)
        if sampling_rate is None:
            sampling_rate = self._rate
        if sampling_rate is None and not scheme.per_step and self._epoch_steps is not None:
            sampling_rate = 1.0 / self._epoch_steps
        if sampling_rate is None:
            raise ValueError("step() needs a sampling_rate (or an Accountant made with sampling_rate=, or "
                             "steps_per_epoch= for a run-level scheme)")
        if scheme.per_step:
            self.record(dpsgd_mechanism(noise_multiplier, sampling_rate, sampling=self._sampling), count)
            return
        self._step_epochs(scheme, noise_multiplier, sampling_rate, count)

    def _step_epochs(self, scheme, noise_multiplier: float, sampling_rate: float, count: int) -> None:
        """Steps of a run-level scheme: every completed epoch is recorded as the
        components of one epoch's PLD; the steps of an epoch still running are
        kept and accounted at query time as the partial epoch they are (as
        :func:`pld.dpsgd` accounts one: balls-in-bins, the round of those steps held
        with their share of the epoch)."""
        noise_multiplier = v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
        sampling_rate = v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
        count = v.integer("count", count, low=1, high=10**12)
        per_epoch = self._per_epoch(scheme, sampling_rate)
        # (the epoch's rate: k of its steps, whatever rate the step was recorded with)
        k = max(1, round(sampling_rate * per_epoch))
        rate = k / per_epoch
        epoch = scheme.pld(noise_multiplier, rate, per_epoch, **self._options(scheme, k))
        key = (noise_multiplier, rate)
        with self._lock:
            done, rest = divmod(self._pending.get(key, 0) + count, per_epoch)
            for mechanism, k in epoch.components if done else ():
                self._append(mechanism, k * done)
            if rest:
                self._pending[key] = rest
            else:
                self._pending.pop(key, None)
            self._steps += count
            self._changed()

    def _per_epoch(self, scheme, sampling_rate: float) -> int:
        if self._epoch_steps is not None:
            return self._epoch_steps
        assert scheme.epoch_steps is not None
        return scheme.epoch_steps(sampling_rate)

    @staticmethod
    def _options(scheme, k: int) -> dict:
        return {"participations": k} if "participations" in scheme.options else {}

    def record(self, mechanism: Mechanism, count: int = 1) -> None:
        """Record ``count`` runs of ``mechanism`` on the same data.

        Parameters
        ----------
        mechanism : pld.Mechanism
            What ran, e.g. ``pld.Laplace(scale=2.0)``.
        count : int, default 1
            In ``[1, 1e12]``.

        Raises
        ------
        TypeError
            If ``mechanism`` is not a pld mechanism.
        ValueError
            If ``count`` is out of range.
        """
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"mechanism must be a pld mechanism, got {type(mechanism).__name__}")
        count = v.integer("count", count, low=1, high=10**12)
        with self._lock:
            self._append(mechanism, count)
            self._steps += count
            self._changed()

    def _append(self, mechanism: Mechanism, count: int) -> None:
        if self._history and self._history[-1][0] == mechanism:
            self._history[-1] = (mechanism, self._history[-1][1] + count)
        else:
            self._history.append((mechanism, count))

    def _changed(self) -> None:
        self._version += 1
        self._pld = None
        self._cache = {}

    @property
    def steps(self) -> int:
        """Total number of recorded runs (sum of the counts)."""
        with self._lock:
            return self._steps

    @property
    def history(self) -> list[tuple[Mechanism, int]]:
        """``[(mechanism, count), ...]`` in recording order (a copy)."""
        with self._lock:
            return list(self._history)

    def pld(self) -> PLD:
        """The composed :class:`pld.PLD` of everything recorded so far.

        Returns
        -------
        PLD

        Raises
        ------
        ValueError
            If nothing has been recorded yet.
        """
        with self._lock:
            if not self._history and not self._pending:
                raise ValueError("nothing has been recorded yet: call step() or record() first")
            if self._pld is None:
                parts = list(self._history)
                scheme = sampling_registry.get(self._sampling)
                for (sigma, q), done in self._pending.items():
                    # (an epoch still running: the steps it ran, not a whole epoch)
                    m = self._per_epoch(scheme, q)
                    parts += scheme.pld(sigma, q, done, **self._options(scheme, max(1, round(q * m)))).components
                self._pld = PLD(tuple(parts), value_discretization_interval=self._interval)
            return self._pld

    # ------------------------------------------------------------ queries
    @property
    def empty(self) -> bool:
        """True until something is recorded (queries then answer for identical laws)."""
        with self._lock:
            return not self._history and not self._pending

    def _query(self, key: tuple, compute):
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            version = self._version
            d = self.pld() if self._history or self._pending else None
        value = compute(d)  # outside the lock: PLD is thread-safe, recording may go on
        with self._lock:
            if self._version == version:
                self._cache[key] = value
        return value

    def epsilon_bounds(self, delta: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` on epsilon at ``delta`` for everything recorded.

        Parameters
        ----------
        delta : float
            In ``[0, 1]``: ``delta = 0`` asks for the epsilon from which
            delta(epsilon) is 0 (the largest loss; ``inf`` for a Gaussian),
            ``delta = 1`` is answered by 0.

        Returns
        -------
        (float, float)
            The bracket; ``upper`` is the epsilon to report (``(0, 0)`` before
            anything is recorded).

        Raises
        ------
        ValueError
            If ``delta`` is out of range.
        """
        delta = v.real("delta", delta, low=0.0, high=1.0)
        return self._query(("eps", delta), lambda d: (0.0, 0.0) if d is None else d.epsilon_bounds(delta))

    def epsilon(self, delta: float) -> float:
        """Certified epsilon at ``delta`` (the upper end of :meth:`epsilon_bounds`).

        Parameters
        ----------
        delta : float
            In ``(0, 1)``.

        Returns
        -------
        float
        """
        return self.epsilon_bounds(delta)[1]

    def delta_bounds(self, epsilon: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` on delta at ``epsilon``.

        Parameters
        ----------
        epsilon : float
            A real number, or ``+-inf`` (delta(inf) is the mass at +inf).

        Returns
        -------
        (float, float)

        Raises
        ------
        ValueError
            If ``epsilon`` is NaN.
        """
        epsilon = v.real("epsilon", epsilon, allow_inf=True)
        # nothing recorded: identical laws, delta(eps) = (1 - e^eps)_+
        empty = max(0.0, -math.expm1(epsilon)) if epsilon < 0 else 0.0
        return self._query(("delta", epsilon), lambda d: (empty, empty) if d is None else d.delta_bounds(epsilon))

    def delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (the upper end of :meth:`delta_bounds`).

        Parameters
        ----------
        epsilon : float

        Returns
        -------
        float
        """
        return self.delta_bounds(epsilon)[1]

    def __repr__(self) -> str:
        with self._lock:
            grid = "" if self._interval is None else f", value_discretization_interval={self._interval!r}"
            return f"Accountant(sampling={self._sampling!r}{grid}, steps={self._steps}, records={len(self._history)})"

    def __getstate__(self) -> dict:
        # pickling / deepcopy: a lock cannot be copied and the composed PLD
        # holds locks; both are rebuilt (the PLD on the next query)
        with self._lock:
            state = self.__dict__.copy()
        del state["_lock"]
        state["_pld"] = None
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # -------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """JSON-serialisable state: format, version, sampling and history.

        Returns
        -------
        dict
            Feed it to :meth:`from_state_dict` to resume (e.g. from a checkpoint).
        """
        with self._lock:
            return {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "sampling": self._sampling,
                "steps": self._steps,
                "history": [{"mechanism": mechanism_to_dict(m), "count": int(k)} for m, k in self._history],
                # steps of an epoch still running (run-level sampling schemes only)
                **({"pending": [{"noise_multiplier": s, "sampling_rate": q, "steps": k}
                                for (s, q), k in self._pending.items()]} if self._pending else {}),
                # written only when set, so that default states read as before
                **({} if self._interval is None else {"value_discretization_interval": self._interval}),
                **({} if self._rate is None else {"sampling_rate": self._rate}),
                **({} if self._epoch_steps is None else {"steps_per_epoch": self._epoch_steps}),
            }

    @classmethod
    def from_state_dict(cls, state: dict) -> Accountant:
        """Rebuild an accountant from :meth:`state_dict` output.

        Parameters
        ----------
        state : dict
            Output of :meth:`state_dict` (possibly through JSON).

        Returns
        -------
        Accountant

        Raises
        ------
        TypeError, ValueError
            If ``state`` is not such a dict (the message names the bad entry).
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from Accountant.state_dict(), got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"state['format'] must be {STATE_FORMAT!r}, got {state.get('format')!r}")
        version = state.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"state['version'] {version!r} is not supported (this pld reads version {STATE_VERSION})")
        acc = cls(sampling=state.get("sampling", "poisson"),
                  value_discretization_interval=state.get("value_discretization_interval"),
                  sampling_rate=state.get("sampling_rate"), steps_per_epoch=state.get("steps_per_epoch"))
        history = state.get("history")
        if not isinstance(history, list):
            raise TypeError("state['history'] must be a list of {'mechanism': ..., 'count': ...} entries")
        for i, entry in enumerate(history):
            if not isinstance(entry, dict) or "mechanism" not in entry or "count" not in entry:
                raise ValueError(f"state['history'][{i}] must be a dict with 'mechanism' and 'count'")
            acc.record(mechanism_from_dict(entry["mechanism"]), entry["count"])
        pending = state.get("pending", [])
        if not isinstance(pending, list):
            raise TypeError("state['pending'] must be a list of {'noise_multiplier', 'sampling_rate', 'steps'}")
        for i, entry in enumerate(pending):
            try:
                key = (v.real("noise_multiplier", entry["noise_multiplier"], low=0.0, low_open=True),
                       v.real("sampling_rate", entry["sampling_rate"], low=0.0, high=1.0, low_open=True))
                acc._pending[key] = v.integer("steps", entry["steps"], low=1, high=10**12)
            except (KeyError, TypeError) as exc:
                raise ValueError(f"state['pending'][{i}] must hold noise_multiplier, sampling_rate and steps "
                                 f"({exc})") from None
        if pending or not sampling_registry.get(acc._sampling).per_step:
            # (run-level schemes record epochs, not steps: the step count is the state's)
            acc._steps = v.integer("state['steps']", state.get("steps", acc._steps), low=0, high=10**13)
        if "steps" in state and state["steps"] != acc._steps:
            raise ValueError(f"state['steps'] = {state['steps']!r} does not match the history ({acc._steps} steps)")
        return acc
