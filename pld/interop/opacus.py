"""pld as the privacy accountant of an Opacus training loop.

``PLDOpacusAccountant`` implements Opacus's accountant interface
(``opacus.accountants.IAccountant``): ``step``, ``get_epsilon``, ``history``,
``mechanism``, ``state_dict`` / ``load_state_dict``, ``__len__`` and
``get_optimizer_hook_fn``.  Every DP-SGD step is a Poisson-subsampled
Gaussian (Opacus's own assumption), accounted under add-or-remove adjacency,
and ``get_epsilon`` returns pld's *certified* upper bound.

Plugging it into a :class:`opacus.PrivacyEngine` (one line, before
``make_private``, which attaches the accountant's step hook to the optimizer)::

    from opacus import PrivacyEngine
    from pld.interop.opacus import PLDOpacusAccountant

    privacy_engine = PrivacyEngine()
    privacy_engine.accountant = PLDOpacusAccountant()
    model, optimizer, loader = privacy_engine.make_private(...)
    ...
    eps = privacy_engine.get_epsilon(delta=1e-5)

Accessing ``PLDOpacusAccountant`` also registers it in Opacus's accountant
registry (Opacus versions that have one, e.g. 1.6) under the name ``"pld"``, so ``PrivacyEngine(accountant="pld")``
works too (and ``make_private_with_epsilon``, which looks the accountant up by
``mechanism()`` to calibrate the noise, uses pld for the calibration).

Importing this module does not import Opacus or torch.  The class is built on
first access: it subclasses ``opacus.accountants.IAccountant`` when Opacus is
importable, and is a plain class with the same behaviour otherwise.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from copy import deepcopy

from pld import _validate as v
from pld.accounting.accountant import Accountant
from pld.distribution import PLD

MECHANISM = "pld"
#: Opacus accountants whose ``history`` means the same thing (Poisson-subsampled
#: Gaussian steps); their state dicts can be loaded to continue with pld.
COMPATIBLE_MECHANISMS = ("pld", "prv", "rdp")

__all__ = ["PLDOpacusAccountant", "register", "MECHANISM", "COMPATIBLE_MECHANISMS"]  # noqa: F822 (built on first access, module __getattr__)


def _check_entry(i, entry) -> tuple[float, float, int]:
    try:
        nm, q, steps = entry
    except (TypeError, ValueError):
        raise ValueError(f"history[{i}] must be a (noise_multiplier, sample_rate, num_steps) triple, "
                         f"got {entry!r}") from None
    try:
        nm, q = float(nm), float(q)
    except (TypeError, ValueError):
        raise ValueError(f"history[{i}]: noise_multiplier and sample_rate must be numbers, got {entry!r}") from None
    if math.isnan(nm) or nm < 0:
        raise ValueError(f"history[{i}]: noise_multiplier must be >= 0, got {nm!r}")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"history[{i}]: sample_rate must be in [0, 1], got {q!r}")
    try:
        ok = not isinstance(steps, bool) and float(steps).is_integer() and float(steps) >= 0
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"history[{i}]: num_steps must be a non-negative integer, got {steps!r}")
    return nm, q, int(steps)


class _PLDOpacusAccountantCore:
    """Opacus accountant backed by pld's certified PLD composition.

    ``history`` is Opacus's list of ``(noise_multiplier, sample_rate,
    num_steps)``; consecutive identical steps are merged, exactly as in
    Opacus's RDP and PRV accountants.  It is the accountant's whole state and
    may be assigned directly (Opacus's ``get_noise_multiplier`` does).

    ``len(accountant)`` is the total number of steps (the sum of
    ``num_steps``), as ``IAccountant.__len__`` documents; Opacus's own RDP and
    PRV accountants return the number of history entries instead.  Both are
    zero exactly when nothing has been recorded, which is all ``PrivacyEngine``
    looks at.

    The answers come from a :class:`pld.Accountant` holding the history's
    private phases (rebuilt when ``history`` changes), which composes, caches
    and answers the empty case; this class adds Opacus's history format and
    its convention for steps without noise (epsilon = inf).
    """

    def __init__(self):
        self.history: list = []
        # the pld.Accountant of the history's private phases, rebuilt whenever
        # they change (``history`` is public and may be assigned or edited)
        self._core_key: tuple | None = None
        self._core: Accountant | None = None

    # ------------------------------------------------------------ recording
    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one optimisation step (Poisson rate ``sample_rate``)."""
        nm, q, _ = _check_entry(len(self.history), (noise_multiplier, sample_rate, 1))
        if self.history:
            last_nm, last_q, n = self.history[-1]
            if last_nm == nm and last_q == q:
                self.history[-1] = (last_nm, last_q, n + 1)
                return
        self.history.append((nm, q, 1))

    def __len__(self) -> int:
        return sum(int(entry[2]) for entry in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM

    def get_optimizer_hook_fn(self, sample_rate: float):
        """Callback for ``DPOptimizer.attach_step_hook`` (same as Opacus's)."""

        def hook_fn(optim):
            self.step(noise_multiplier=optim.noise_multiplier,
                      sample_rate=sample_rate * optim.accumulated_iterations)

        return hook_fn

    # -------------------------------------------------------------- queries
    def _phases(self):
        """Validated ``[(nm, q, steps)]`` with no-op phases dropped, or ``None`` if non-private."""
        phases = []
        for i, entry in enumerate(self.history):
            nm, q, steps = _check_entry(i, entry)
            if steps == 0 or q == 0.0 or math.isinf(nm):
                continue  # nothing about the data was released
            if nm == 0.0:
                return None  # no noise: not differentially private
            phases.append((nm, q, steps))
        return phases

    def _accountant(self) -> Accountant | None:
        """The :class:`pld.Accountant` of the history (``None`` if non-private)."""
        phases = self._phases()
        if phases is None:
            return None
        key = tuple(phases)
        if key != self._core_key or self._core is None:
            core = Accountant(sampling="poisson")
            for nm, q, steps in phases:
                core.step(noise_multiplier=nm, sampling_rate=q, count=steps)
            self._core, self._core_key = core, key
        return self._core

    def pld(self) -> PLD | None:
        """The :class:`pld.PLD` of the history (``None`` if empty or non-private)."""
        core = self._accountant()
        return None if core is None or core.empty else core.pld()

    def get_epsilon_bounds(self, delta: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on epsilon at ``delta`` in (0, 1)."""
        delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
        core = self._accountant()
        return (math.inf, math.inf) if core is None else core.epsilon_bounds(delta)

    def get_epsilon(self, delta: float, **kwargs) -> float:
        """Certified epsilon spent so far at ``delta``.

        Extra keyword arguments (Opacus passes accountant-specific ones such as
        ``eps_error`` or ``alphas``) are accepted and ignored: pld chooses its
        own discretisation and the answer is a guaranteed upper bound.
        """
        return self.get_epsilon_bounds(delta)[1]

    def get_delta_bounds(self, epsilon: float) -> tuple[float, float]:
        """Certified ``(lower, upper)`` bracket on delta at ``epsilon``."""
        epsilon = v.real("epsilon", epsilon)
        core = self._accountant()
        return (1.0, 1.0) if core is None else core.delta_bounds(epsilon)

    def get_delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (upper end of :meth:`get_delta_bounds`)."""
        return self.get_delta_bounds(epsilon)[1]

    # ---------------------------------------------------------------- state
    def state_dict(self, destination=None):
        """``{"history": [...], "mechanism": "pld"}``, as Opacus's accountants save it."""
        if destination is None:
            destination = OrderedDict()
        destination["history"] = deepcopy(self.history)
        destination["mechanism"] = self.mechanism()
        return destination

    def load_state_dict(self, state_dict) -> None:
        """Restore from :meth:`state_dict` output.

        Also accepts the state of Opacus's ``"prv"`` and ``"rdp"`` accountants
        (same history, Poisson-subsampled Gaussian steps), so a run started
        with them continues with pld accounting.
        """
        if state_dict is None or len(state_dict) == 0:
            raise ValueError("state dict is either None or empty and hence cannot be loaded"
                             " into Privacy Accountant.")
        if "history" not in state_dict:
            raise ValueError("state_dict does not have the key `history`. Cannot be loaded into Privacy Accountant.")
        if "mechanism" not in state_dict:
            raise ValueError("state_dict does not have the key `mechanism`. Cannot be loaded into Privacy Accountant.")
        if state_dict["mechanism"] not in COMPATIBLE_MECHANISMS:
            raise ValueError(f"state_dict of {state_dict['mechanism']} cannot be loaded into Privacy Accountant "
                             f"with mechanism {self.mechanism()} (accepted: {', '.join(COMPATIBLE_MECHANISMS)})")
        history = state_dict["history"]
        if isinstance(history, (str, bytes)) or not hasattr(history, "__iter__"):
            raise ValueError(f"state_dict['history'] must be a list of triples, got {type(history).__name__}")
        self.history = [_check_entry(i, entry) for i, entry in enumerate(history)]

    def __getstate__(self):  # pickling / deepcopy: the core accountant holds locks; rebuild it on demand
        state = self.__dict__.copy()
        state["_core_key"] = None
        state["_core"] = None
        return state

    def __repr__(self) -> str:
        return f"PLDOpacusAccountant(steps={len(self)}, history={self.history!r})"


_CLASS = None


def _build():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    try:
        from opacus.accountants import IAccountant
    except ImportError:
        IAccountant = None
    bases = (_PLDOpacusAccountantCore,) if IAccountant is None else (_PLDOpacusAccountantCore, IAccountant)

    class PLDOpacusAccountant(*bases):  # type: ignore[misc]  # bases chosen at run time
        __doc__ = _PLDOpacusAccountantCore.__doc__

        def __init__(self):
            _PLDOpacusAccountantCore.__init__(self)

    PLDOpacusAccountant.__module__ = __name__
    PLDOpacusAccountant.__qualname__ = "PLDOpacusAccountant"
    _CLASS = PLDOpacusAccountant
    if IAccountant is not None:
        try:  # the registry exists in recent Opacus; older ones only take the assignment
            from opacus.accountants import register_accountant
        except ImportError:
            register_accountant = None
        if register_accountant is not None:
            try:
                register_accountant(MECHANISM, PLDOpacusAccountant)
            except ValueError:  # "pld" already registered (by the user): leave it alone
                pass
    return _CLASS


def register() -> type:
    """Build ``PLDOpacusAccountant`` and register it with Opacus as ``"pld"``; returns the class."""
    return _build()


def __getattr__(name: str):
    if name == "PLDOpacusAccountant":
        return _build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
