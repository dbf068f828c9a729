"""The report's one epsilon query: its grids, handed to the delta(epsilon) curve and the
attack line, give what those parts computed when they asked the PLD themselves."""

from __future__ import annotations

import numpy as np
import pytest

import pld
from pld.baselines.curves import delta_curve
from pld.report import EpsilonQuery, delta_profile, risk


@pytest.fixture(scope="module", params=["tight", "not tight"])
def query(request):
    d = (pld.dpsgd(0.8, 0.05, 400) if request.param == "tight"
         else pld.dpsgd(1.1, 512 / 50000, 100, sampling="without_replacement"))
    return EpsilonQuery.run(d, 1e-5)


def test_query_holds_explain_and_the_grids_behind_it(query):
    assert query.explained == query.pld.explain(1e-5)
    assert set(query.grids) == set(query.pld.grids(1e-5))
    for pair in query.grids.values():
        lo, hi = pair.delta_bounds(np.array([query.explained["epsilon_upper"]]))
        assert 0.0 <= lo[0] <= hi[0] <= 1.0


def test_curve_off_the_query_grids_is_the_curve(query):
    eps = np.linspace(0.0, 3.0, 7)
    for a, b in zip(delta_curve(query.pld, eps, 1e-5, grids=query.grids), delta_curve(query.pld, eps, 1e-5)):
        assert np.array_equal(a, b)
    for a, b in zip(delta_profile(query.pld, eps, 1e-5, grids=query.grids), delta_profile(query.pld, eps, 1e-5)):
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


def test_attack_line_off_the_query_grids_is_the_attack_line(query):
    assert (risk.report_summary(query.pld, 1e-5, grids=query.grids) == risk.report_summary(query.pld, 1e-5))
