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
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["TIME_BUDGET", "BudgetSpent", "query", "spent", "ran_out", "check_hard", "grace"]


def _from_env() -> float:
    raw = os.environ.get("PLD_TIME_BUDGET", "").strip()
    if not raw:
        return 10.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PLD_TIME_BUDGET must be a number of seconds, got {raw!r}") from None
    return math.inf if value <= 0 or math.isnan(value) else value


#: seconds a query may spend refining (``PLD_TIME_BUDGET``; default 10)
TIME_BUDGET = _from_env()


@dataclass
class _Budget:
    deadline: float
    seconds: float
    #: past this, a grid being built is abandoned (:func:`check_hard`)
    hard_deadline: float = math.inf
    ran_out: bool = False
    graces: int = 0


class BudgetSpent(RuntimeError):
    """A grid was abandoned mid-build: the query's hard time limit (twice its
    budget) passed.  The planner catches it: it keeps the narrowest bracket it
    has, or builds a coarser first grid (:func:`grace`)."""


_CURRENT: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("pld_time_budget", default=None)


@contextlib.contextmanager
def query(seconds: float | None = None) -> Iterator[_Budget | None]:
    """Run a query under a budget (the outermost query's, if one is running)."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    secs = TIME_BUDGET if seconds is None else seconds
    now = time.monotonic()
    budget = (_Budget(now + secs, secs, now + 2.0 * secs) if math.isfinite(secs)
              else _Budget(math.inf, secs))
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def spent() -> bool:
    """Whether the running query's budget is spent (marks it so)."""
    budget = _CURRENT.get()
    if budget is None or time.monotonic() < budget.deadline:
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
    if budget is not None and time.monotonic() > budget.hard_deadline:
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
    budget.hard_deadline = time.monotonic() + budget.seconds
    return True
