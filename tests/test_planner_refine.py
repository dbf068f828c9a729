"""The planner's refinement loop stops where a finer grid cannot meet the target.

The width of a direction's bracket is ``a + b h`` in these tests (a stub of
:meth:`pld.engine.planner.Planner.width`): ``a`` is a bias the grid spacing does
not control (an allocation law's own grid), ``b h`` the discretisation.  The
loop must refine to the target where ``a`` leaves room for it, and, where the
composition has a finer model to try, stop once two pairs of grids in a row show ``a``
above three targets, rather than build grids
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


def _run(monkeypatch, bias: float, slope: float, all_atoms: bool, round_off: float = 0.0,
         model_refines: bool = True, kind: str = "delta", lam: float = 1.0, lam_star: float = 1.0,
         grids: list | None = None):
    """``(met, settings, spacings tried)`` of one refinement on the stubbed width
    (``round_off``: the part of it the stub calls round-off; ``model_refines``: whether
    the composition has a finer model for :class:`pld.PLD` to try next; ``lam``, ``lam_star``:
    the start's tilt and the Chernoff one; ``grids``: filled with each grid's
    ``(h, lam, precision)``)."""
    engine = pld.dpsgd(1.0, 1e-2, 1000)._engine()
    planner = engine.planner
    planner.model_refines = model_refines  # (an instance attribute over the cached property)
    tried: list[float] = []

    def width(direction, query, h, tilt, log_eta, precision="double"):
        tried.append(h)
        if grids is not None:
            grids.append((h, tilt, precision))
        return bias + slope * h + round_off, TARGET, 1.0, round_off

    monkeypatch.setattr(planner, "width", width)
    # big grids from the start: the futile rule only spares grids worth sparing
    monkeypatch.setattr(planner.composer, "grid_points",
                        lambda d, h, lam, le: min(MAX_GRID_POINTS, int(1.0 / h) + P.FUTILE_POINTS))
    exploration = engine.laws.exploration("remove")
    monkeypatch.setattr(type(exploration), "all_atoms", property(lambda self: all_atoms), raising=False)
    start = Settings(1e-3, lam, LogEta(-40.0, -35.0))
    monkeypatch.setattr(planner, "_tighter_budget", lambda *a: None)
    met, found = planner._refine("remove", Query(kind, 1e-5, 1e-4), start, lam_star, -1.0)
    return met, found, tried


@pytest.mark.parametrize("all_atoms", [False, True])
def test_refining_reaches_a_target_that_the_bias_leaves_room_for(monkeypatch, all_atoms):
    met, found, tried = _run(monkeypatch, bias=0.2 * TARGET, slope=2.0, all_atoms=all_atoms)
    assert met
    assert 0.2 * TARGET + 2.0 * found.h <= TARGET


@pytest.mark.parametrize("all_atoms", [False, True])
def test_refining_stops_once_the_grids_show_the_bias_above_the_target_twice(monkeypatch, all_atoms):
    # width 5e-4 + 0.05 h: each finer grid takes off a sliver; the line through
    # two of them leaves 5x the target at h = 0, and so does the next pair
    met, found, tried = _run(monkeypatch, bias=5.0 * TARGET, slope=0.05, all_atoms=all_atoms)
    assert not met
    assert len(tried) == 3, tried
    assert found.h == min(tried)


def test_a_width_near_its_round_off_is_not_extrapolated(monkeypatch):
    # width 3.45e-4 + 0.05 h: three grids show it 3.45x the target at h = 0; the same
    # with 0.45e-4 of it round-off (over a tenth of the width): the split of the width
    # into round-off and discretisation is too rough to extrapolate, and refining goes on
    _, _, tried = _run(monkeypatch, bias=3.45 * TARGET, slope=0.05, all_atoms=False)
    assert len(tried) == 3, tried
    _, _, tried = _run(monkeypatch, bias=3.0 * TARGET, slope=0.05, all_atoms=False, round_off=0.45 * TARGET)
    assert len(tried) > 3, tried


def test_without_a_finer_model_refining_goes_on(monkeypatch):
    # (the narrowest grid is then the answer: cutting refinement short would widen it)
    _, _, tried = _run(monkeypatch, bias=5.0 * TARGET, slope=0.05, all_atoms=False, model_refines=False)
    assert len(tried) > 3, tried
    assert not pld.dpsgd(1.0, 1e-2, 1000)._engine().planner.model_refines
    assert pld.dpsgd(1.0, 1e-2, 1000, sampling="balls_in_bins")._bounds()[0]._engine().planner.model_refines


def test_refining_stops_once_two_finer_grids_in_a_row_are_wider(monkeypatch):
    # width 3e-4 - 0.05 h: each finer grid wider than the last (its round-off grown); the
    # narrowest, the first, is kept
    met, found, tried = _run(monkeypatch, bias=3.0 * TARGET, slope=-0.05, all_atoms=False)
    assert len(tried) == 3, tried
    assert found.h == tried[0]
    _, _, tried = _run(monkeypatch, bias=3.0 * TARGET, slope=-0.05, all_atoms=False, model_refines=False)
    assert len(tried) > 3, tried


def test_a_delta_query_is_refined_on(monkeypatch):
    # (only epsilon brackets refine the model after a miss: a delta query's grid is its answer)
    _, _, tried = _run(monkeypatch, bias=5.0 * TARGET, slope=0.05, all_atoms=False, kind="epsilon")
    assert len(tried) > 3, tried


def test_a_bias_within_three_targets_is_refined_on(monkeypatch):
    # (refinements there still lifted lower ends that a refined model's bracket kept)
    _, _, tried = _run(monkeypatch, bias=2.5 * TARGET, slope=0.05, all_atoms=False)
    assert len(tried) > 3, tried


def test_a_curve_that_still_falls_steeply_is_refined_on(monkeypatch):
    # most of the width is discretisation: the extrapolation leaves room, so the
    # loop goes on even though the bias alone is above the target
    met, found, tried = _run(monkeypatch, bias=1.5 * TARGET, slope=5.0, all_atoms=False)
    assert not met
    assert len(tried) > 2


def test_refining_stops_on_a_flat_curve_well_above_the_target(monkeypatch):
    # width 2.5e-4 + 0.05 h: the line through two grids leaves 2.5 targets at h = 0 (under
    # the three the extrapolation rule asks), but each finer grid takes off under 5% of a
    # width still above 2.4 targets: the model's own bias, which the caller refines instead
    _, found, tried = _run(monkeypatch, bias=2.5 * TARGET, slope=0.05, all_atoms=True)
    assert len(tried) <= 5, tried
    assert found.h == min(tried)
    _, _, tried_without = _run(monkeypatch, bias=2.5 * TARGET, slope=0.05, all_atoms=True, model_refines=False)
    assert len(tried_without) > len(tried), (tried, tried_without)
    # a flat curve nearer the target (2.2 targets: a finer grid's ends can still count
    # in the intersection with the refined model's bracket) is refined on
    _, _, tried_near = _run(monkeypatch, bias=2.2 * TARGET, slope=0.05, all_atoms=True)
    assert len(tried_near) > len(tried), (tried, tried_near)


def test_no_grid_is_built_twice_when_the_tilt_cannot_grow(monkeypatch):
    # round-off most of the width, at a tilt (1.25^10) on the tilt ladder below the Chernoff
    # tilt (9.8) that rounds back to it: a "stronger" tilt was the same grid again, built until
    # the loop stalled, and the weaker tilt that round-off at the strongest tilt calls for was
    # never tried
    grids: list = []
    lam = 1.25 ** 10
    _run(monkeypatch, bias=0.0, slope=0.0, all_atoms=False, round_off=50.0 * TARGET, lam=lam, lam_star=9.8,
         grids=grids)
    assert len(grids) == len(set(grids)), grids
    assert any(tilt < lam for _, tilt, _ in grids), grids


@pytest.mark.slow
def test_round_off_of_a_grid_too_fine_for_the_power_goes_to_extended_precision():
    # Sampling without replacement's dominating pair (the symmetrised C_q(G_mu)): its first
    # grid, 1.8M points at h = 4.8e-6, holds no FFT power, its levels squared from one step
    # in double, and the round-off of those squarings was the whole bracket, [0.939, 1.061]
    # (a calibration at rtol 2.5e-4, whose first grid was coarser, had certified 1.0152 for
    # the same run).  A grid twice as coarse holds a power, redone in extended precision.
    sigma, q, steps, delta = 1.2849380968895683, 3.805808615399253e-05, 475596, 2.34e-9
    upper, lower = pld.dpsgd(sigma, q, steps, sampling="without_replacement").bounds()
    with pytest.warns(pld.TargetMissedWarning):  # (the extended round-off is still ~6x the target)
        lo, hi = upper.epsilon_bounds(delta)
    assert hi - lo < 1e-3 * hi
    # the dominating pair bounds the concrete pair (Poisson, sensitivity 2C) from above
    assert lower is not None
    assert hi >= lower.epsilon_bounds(delta)[0]
    facts = upper.explain(delta)["directions"]["remove"]
    assert facts["fft_precision"] == "extended" and max(facts["fft_power_steps"]) > 1
