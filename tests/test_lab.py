"""The privacy-loss lab (pld.baselines.lab): seed numbers, text, plot, DP-SGD comparison.

The module fixtures run the engine, not the Gaussian closed form (pld.engine.gaussian_exact): they
are built before conftest's function-scoped switch applies, so they switch it off themselves
(:func:`engine_only`); the lab's ``exact`` columns come from pld.baselines.exact and are checked against
tests/oracles.py (numpy/scipy only), which shares no code with pld.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

import pld.distribution
from pld.baselines import lab as L

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles as O  # noqa: E402

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def engine_only():
    """conftest.py's closed-form switch, for module fixtures (conftest's autouse fixture is
    function-scoped, so a module fixture is built before it applies)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pld.distribution, "CLOSED_FORMS", False)
        yield


@pytest.fixture(scope="module")
def seed(engine_only):
    return L.lab()


def test_module_fixtures_run_the_engine(seed, monkeypatch):
    """The seed's bracket is the engine's, not the closed form's."""
    engine = pld.Gaussian(8.0).pld().self_compose(120).epsilon_bounds(1e-6)  # (conftest: engine)
    monkeypatch.setattr(pld.distribution, "CLOSED_FORMS", True)
    closed = pld.Gaussian(8.0).pld().self_compose(120).epsilon_bounds(1e-6)
    assert engine != closed
    assert (seed["pld_epsilon_lower"], seed["pld_epsilon_upper"]) == engine


# ---------------------------------------------------------------- seed numbers
def test_seed_numbers_to_printed_digits(seed):
    assert seed["sigma"] == 8.0 and seed["steps"] == 120 and seed["delta"] == 1e-6
    assert seed["probe_epsilon"] == 6.0
    assert f"{seed['exact_epsilon']:.2f}" == "7.02"
    assert f"{seed['tail_epsilon']:.2f}" == "7.45"
    assert f"{seed['rdp_epsilon']:.2f}" == "8.14"  # classic conversion, as in the seed
    assert f"{seed['exact_delta_at_probe']:.3e}" == "2.726e-05"
    assert f"{seed['tail_delta_at_probe']:.3e}" == "1.090e-04"


def test_seed_pld_bracket_contains_exact(seed):
    lo, hi = seed["pld_epsilon_lower"], seed["pld_epsilon_upper"]
    assert lo <= seed["exact_epsilon"] <= hi
    assert round(seed["exact_epsilon"], 4) == 7.0168
    assert hi - lo <= 1e-4 * hi + 1e-6
    # the lab's exact references against the independent closed forms
    mu = math.sqrt(120) / 8.0
    assert seed["exact_epsilon"] == pytest.approx(O.gaussian_epsilon(1e-6, mu), rel=1e-10)
    assert seed["exact_delta_at_probe"] == pytest.approx(O.gaussian_delta(6.0, mu), rel=1e-10)
    assert lo <= O.gaussian_epsilon(1e-6, mu) <= hi
    assert seed["pld_delta_at_probe_lower"] <= seed["exact_delta_at_probe"] <= seed["pld_delta_at_probe_upper"]
    assert seed["pld_tail_epsilon_lower"] <= seed["tail_epsilon"] <= seed["pld_tail_epsilon_upper"]
    assert (seed["pld_tail_delta_at_probe_lower"] <= seed["tail_delta_at_probe"]
            <= seed["pld_tail_delta_at_probe_upper"])


def test_seed_ordering(seed):
    # exact <= tail <= RDP, improved conversion <= classic, every delta above the target at 6.0
    assert seed["exact_epsilon"] <= seed["tail_epsilon"] <= seed["rdp_epsilon"]
    assert seed["rdp_epsilon_improved"] <= seed["rdp_epsilon"]
    assert 4.0 < seed["rdp_order"] < 6.0
    assert seed["delta"] < seed["exact_delta_at_probe"] < seed["tail_delta_at_probe"] < seed["rdp_delta_at_probe"]


def test_result_is_json_serialisable(seed):
    back = json.loads(json.dumps(seed))
    assert back["exact_epsilon"] == seed["exact_epsilon"]


def test_format_lab_prints_seed_table(seed):
    text = L.format_lab(seed)
    for line in ("exact epsilon   7.02", "tail epsilon    7.45", "RDP epsilon     8.14"):
        assert line in text
    assert "2.726e-5" in text and "1.090e-4" in text
    assert f"[{seed['pld_epsilon_lower']:.4f}, {seed['pld_epsilon_upper']:.4f}]" in text
    assert "sufficient, not tight" in text


def test_lab_other_parameters():
    r = L.lab(sigma=4.0, steps=10, delta=1e-5, probe_epsilon=1.0)
    assert r["pld_epsilon_lower"] <= r["exact_epsilon"] <= r["pld_epsilon_upper"]
    assert r["exact_epsilon"] <= r["tail_epsilon"] <= r["rdp_epsilon"]
    assert "epsilon = 1" in L.format_lab(r)


@pytest.mark.parametrize("kwargs", [dict(sigma=0.0), dict(steps=0), dict(steps=2.5), dict(delta=1.0),
                                    dict(delta=0.0), dict(probe_epsilon=float("nan"))])
def test_lab_rejects_bad_input(kwargs):
    with pytest.raises((ValueError, TypeError)):
        L.lab(**kwargs)


# ----------------------------------------------------------------------- plot
def test_plot_lab_writes_png(seed, tmp_path):
    import matplotlib.image as mpimg

    path = tmp_path / "lab.png"
    L.plot_lab(seed, str(path))
    assert path.stat().st_size > 10_000
    img = mpimg.imread(str(path))
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] > 300 and img.shape[1] > 2 * img.shape[0] * 0.9  # two panels side by side
    assert float(np.std(img[..., :3])) > 0.01  # not blank


def test_plot_lab_without_matplotlib_is_a_clear_error(seed, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="matplotlib"):
        L.plot_lab(seed, str(tmp_path / "x.png"))


# -------------------------------------------------------------------- compare
@pytest.fixture(scope="module")
def dpsgd_result(engine_only):
    return L.compare(1.0, 0.01, 1000, 1e-5)


def test_compare_dpsgd(dpsgd_result):
    r = dpsgd_result
    assert r["pld_epsilon_lower"] <= 1.8282 + 5e-5 and 1.8282 - 5e-5 <= r["pld_epsilon_upper"]  # (4 decimals)
    assert r["pld_epsilon_upper"] <= r["rdp_epsilon_improved"] <= r["rdp_epsilon_classic"]
    assert r["tail_epsilon_upper"] >= r["pld_epsilon_lower"]
    assert r["exact_epsilon"] is None
    assert set(r["seconds"]) >= {"pld", "rdp_improved", "rdp_classic", "tail"}
    assert all(v >= 0 for v in r["seconds"].values())
    json.dumps(r)


def test_format_compare_table(dpsgd_result):
    text = L.format_compare(dpsgd_result)
    assert "PLD, certified bracket" in text and "RDP, classic conversion" in text
    assert "RDP, improved conversion" in text and "privacy-loss tail" in text
    assert f"{dpsgd_result['rdp_epsilon_classic']:.5f}" in text
    assert "n/a" in text  # no exact reference below q = 1


def test_compare_full_batch_has_exact_reference():
    r = L.compare(2.0, 1.0, 100, 1e-5)
    assert r["pld_epsilon_lower"] <= r["exact_epsilon"] <= r["pld_epsilon_upper"]
    assert r["tail_epsilon_lower"] <= r["exact_tail_epsilon"] <= r["tail_epsilon_upper"]
    assert r["exact_epsilon"] <= r["rdp_epsilon_improved"] <= r["rdp_epsilon_classic"]
    assert "exact (Gaussian, q = 1)" in L.format_compare(r)


def test_compare_refuses_other_sampling_schemes():
    with pytest.raises(ValueError, match="poisson"):
        L.compare(1.0, 0.01, 10, 1e-5, sampling="sliced")
    with pytest.raises(ValueError):
        L.compare(1.0, 1.5, 10, 1e-5)
