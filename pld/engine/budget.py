"""A query's time budget: refinement stops when it is spent, answers stay certified.

Every grid pld builds is certified, so stopping a refinement early only
leaves a bracket wider than its target; it never makes one wrong.  A query
(``epsilon_bounds``, ``delta_bounds``) runs under a budget of
:data:`TIME_BUDGET` seconds (``PLD_TIME_BUDGET`` in the environment; ``0`` or
``inf``: none).  The refinement loops ask :func:`spent` before building
another grid; once it is spent they keep the narrowest bracket they have, and
the answer's :class:`pld.TargetMissedWarning` (and ``explain()``) says the
budget ran out.  On this project's coverage samples no query comes near it
(the slowest takes a few seconds); it is what keeps a corner case (a heavy
tail at a strict delta, 2e6-point grids in extended precision) from running
for minutes.

The budget is a context variable: nested queries (a term of a big-jump
decomposition, the views of a composition that is not tight) share the
outermost one.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["TIME_BUDGET", "BudgetSpent", "query", "spent", "ran_out", "check_hard", "grace"]


def _from_env() -> float:
    raw = os.environ.get("PLD_TIME_BUDGET", "").strip()
    if not raw:
        return 30.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PLD_TIME_BUDGET must be a number of seconds, got {raw!r}") from None
    return math.inf if value <= 0 or math.isnan(value) else value


#: seconds a query may spend refining (``PLD_TIME_BUDGET``; default 30): far above any query of
#: the coverage samples (a few seconds), so that a loaded machine does not cut ordinary ones short
TIME_BUDGET = _from_env()


@dataclass
class _Budget:
    start: float
    seconds: float
    #: numba's compile time when the query began (the clock leaves it out)
    compiled0: float = 0.0
    #: past this many seconds a grid being built is abandoned (:func:`check_hard`)
    hard: float = math.inf
    ran_out: bool = False
    graces: int = 0

    def elapsed(self) -> float:
        """Seconds the query has spent, less what numba spent compiling kernels
        meanwhile (a first query on a machine without built kernels compiles
        them: that is not refinement)."""
        return time.monotonic() - self.start - (_compiled_seconds() - self.compiled0)


class BudgetSpent(RuntimeError):
    """A grid was abandoned mid-build: the query's hard time limit (twice its
    budget) passed.  The planner catches it: it keeps the narrowest bracket it
    has, or builds a coarser first grid (:func:`grace`)."""


_COMPILED = [0.0]
_LISTENING: list[bool] = []


def _compiled_seconds() -> float:
    """Seconds numba has spent compiling in this process (0 where numba is not
    imported: the kernels then come from the ahead-of-time module)."""
    if not _LISTENING and "numba" in sys.modules:
        _listen()
    return _COMPILED[0]


def _listen() -> None:
    from numba.core import event

    class _Compiles(event.Listener):
        """Sums the outermost compile events (nested ones are part of them)."""

        depth = 0
        began = 0.0

        def on_start(self, ev) -> None:
            if self.depth == 0:
                self.began = time.monotonic()
            self.depth += 1

        def on_end(self, ev) -> None:
            self.depth -= 1
            if self.depth == 0:
                _COMPILED[0] += time.monotonic() - self.began

    event.register("numba:compile", _Compiles())
    _LISTENING.append(True)


_CURRENT: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("pld_time_budget", default=None)


@contextlib.contextmanager
def query(seconds: float | None = None) -> Iterator[_Budget | None]:
    """Run a query under a budget (the outermost query's, if one is running)."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    secs = TIME_BUDGET if seconds is None else seconds
    budget = _Budget(time.monotonic(), secs, _compiled_seconds(), 2.0 * secs)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def spent() -> bool:
    """Whether the running query's budget is spent (marks it so)."""
    budget = _CURRENT.get()
    if budget is None or budget.elapsed() < budget.seconds:
        return False
    budget.ran_out = True
    return True


def ran_out() -> float | None:
    """The budget in seconds if the running query's ran out, else None."""
    budget = _CURRENT.get()
    return budget.seconds if budget is not None and budget.ran_out else None


def check_hard() -> None:
    """Raise :class:`BudgetSpent` once the running query is past its hard limit
    (called between the levels of a grid being built)."""
    budget = _CURRENT.get()
    if budget is not None and budget.elapsed() > budget.hard:
        budget.ran_out = True
        raise BudgetSpent(f"the query's time budget of {budget.seconds:g} s ran out while a grid was built")


#: times a query may restart a direction's first grid on a coarser spacing
GRACES = 2


def grace() -> bool:
    """More time for a coarser first grid after :class:`BudgetSpent` (a
    direction needs one grid to answer at all): True if granted."""
    budget = _CURRENT.get()
    if budget is None or budget.graces >= GRACES:
        return False
    budget.graces += 1
    budget.hard = budget.elapsed() + budget.seconds
    return True
