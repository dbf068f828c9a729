"""The planner's refinement loop stops where a finer grid cannot meet the target.

The width of a direction's bracket is ``a + b h`` in these tests (a stub of
:meth:`pld.engine.planner.Planner.width`): ``a`` is a bias the grid spacing does
not control (an allocation law's own grid), ``b h`` the discretisation.  The
loop must refine to the target where ``a`` leaves room for it, and stop after
the grids that show ``a`` above the target otherwise, rather than build grids
up to the memory cap (a stop-hook probe: balls-in-bins, sigma 3.026, 8343 steps
per epoch, 18 epochs, spent 4.5 of 5.5 s on such grids).
"""

from __future__ import annotations

import pytest

import pld
from pld.engine import planner as P
from pld.engine.limits import MAX_GRID_POINTS
from pld.engine.targets import LogEta, Query, Settings

TARGET = 1e-4


def _run(monkeypatch, bias: float, slope: float, all_atoms: bool):
    """``(met, settings, spacings tried)`` of one refinement on the stubbed width."""
    engine = pld.dpsgd(1.0, 1e-2, 1000)._engine()
    planner = engine.planner
    tried: list[float] = []

    def width(direction, query, h, lam, log_eta, precision="double"):
        tried.append(h)
        return bias + slope * h, TARGET, 1.0, 0.0

    monkeypatch.setattr(planner, "width", width)
    # big grids from the start: the futile rule only spares grids worth sparing
    monkeypatch.setattr(planner.composer, "grid_points",
                        lambda d, h, lam, le: min(MAX_GRID_POINTS, int(1.0 / h) + P.FUTILE_POINTS))
    exploration = engine.laws.exploration("remove")
    monkeypatch.setattr(type(exploration), "all_atoms", property(lambda self: all_atoms), raising=False)
    start = Settings(1e-3, 1.0, LogEta(-40.0, -35.0))
    met, found = planner._refine("remove", Query("delta", 1e-5, 1e-4), start, 1.0, -1.0)
    return met, found, tried


@pytest.mark.parametrize("all_atoms", [False, True])
def test_refining_reaches_a_target_that_the_bias_leaves_room_for(monkeypatch, all_atoms):
    met, found, tried = _run(monkeypatch, bias=0.2 * TARGET, slope=2.0, all_atoms=all_atoms)
    assert met
    assert 0.2 * TARGET + 2.0 * found.h <= TARGET


@pytest.mark.parametrize("all_atoms, grids", [(False, 2), (True, 3)])
def test_refining_stops_once_two_grids_show_the_bias_above_the_target(monkeypatch, all_atoms, grids):
    # width 3e-4 + 0.05 h: each finer grid takes off a sliver; the line through
    # two of them leaves 3x the target at h = 0
    met, found, tried = _run(monkeypatch, bias=3.0 * TARGET, slope=0.05, all_atoms=all_atoms)
    assert not met
    assert len(tried) == grids, tried
    assert found.h == min(tried)


def test_a_curve_that_still_falls_steeply_is_refined_on(monkeypatch):
    # most of the width is discretisation: the extrapolation leaves room, so the
    # loop goes on even though the bias alone is above the target
    met, found, tried = _run(monkeypatch, bias=1.5 * TARGET, slope=5.0, all_atoms=False)
    assert not met
    assert len(tried) > 2
