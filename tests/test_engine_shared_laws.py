"""Explored laws are shared process-wide per mechanism (pld.engine.laws): the
same object for every PLD of a mechanism, and the same answers as a PLD that
explores its own."""

from __future__ import annotations

import pld
from pld.engine import laws as _laws
from pld.engine import windows as w


def test_one_exploration_per_mechanism():
    a = pld.dpsgd(1.1, 0.004, 100)._engine().laws
    b = pld.dpsgd(1.1, 0.004, 300)._engine().laws
    c = pld.dpsgd(1.2, 0.004, 100)._engine().laws
    for d in ("remove", "add"):
        assert a.exploration(d).parts[0][0] is b.exploration(d).parts[0][0]
        assert a.exploration(d).parts[0][0] is not c.exploration(d).parts[0][0]


def test_shared_laws_give_the_same_brackets():
    def bracket() -> tuple:
        return pld.dpsgd(0.9, 0.01, 2000).epsilon_bounds(1e-6)

    pld.dpsgd(0.9, 0.01, 500).epsilon_bounds(1e-7)  # (explores the mechanism, fills its memos)
    shared = bracket()
    _laws._SHARED.clear()
    assert bracket() == shared


def test_memos_stay_bounded():
    ex = pld.dpsgd(0.7, 0.02, 10)._engine().laws.exploration("remove").parts[0][0]
    for k in range(3 * w._MEMO_ENTRIES):
        ex.psi_around(0.5 + 1e-3 * k)
        w.truncated_above(ex, -20.0 - 1e-2 * k)
    assert len(ex.__dict__["_psi_cache"]) <= w._MEMO_ENTRIES
    assert len(ex.__dict__["_truncated"]) <= w._MEMO_ENTRIES
