"""Spec files for ``pld compose``: parsing, validation messages, JSON and TOML."""

from __future__ import annotations

import json

import pytest

import pld
from pld.accounting.spec import SpecError, load_spec, parse_spec


def _mechs(spec):
    return dict((m, k) for m, k in spec.pld.components)


def test_all_mechanism_types_build_the_right_components():
    spec = parse_spec({
        "delta": [1e-5, 1e-6],
        "epsilon": 1.0,
        "mechanisms": [
            {"type": "gaussian", "sigma": 2.0, "sampling_rate": 0.05, "count": 50},
            {"type": "laplace", "scale": 5.0, "sensitivity": 2, "count": 3},
            {"type": "randomized_response", "epsilon": 0.1},
            {"type": "discrete_laplace", "scale": 10, "sensitivity": 2},
            {"type": "pure_dp", "epsilon": 0.05},
            {"type": "approx_dp", "epsilon": 0.0, "delta": 1e-8},
            {"type": "pmfs", "p": [0.5, 0.5], "q": [0.25, 0.75], "name": "survey"},
            {"type": "dpsgd", "noise_multiplier": 1.1, "sampling_rate": 0.01, "steps": 100, "count": 2},
        ],
    })
    comps = _mechs(spec)
    assert comps[pld.PoissonSampled(pld.Gaussian(2.0), 0.05)] == 50
    assert comps[pld.Laplace(5.0, 2.0)] == 3
    assert comps[pld.RandomizedResponse(0.1)] == 1
    assert comps[pld.DiscreteLaplace(10.0, 2)] == 1
    assert comps[pld.PureDP(0.05)] == 1
    assert comps[pld.ApproxDP(0.0, 1e-8)] == 1
    assert comps[pld.FromPMFs((0.5, 0.5), (0.25, 0.75))] == 1
    assert comps[pld.PoissonSampled(pld.Gaussian(1.1), 0.01)] == 200  # steps x count
    assert spec.deltas == [1e-5, 1e-6]
    assert spec.epsilons == [1.0]
    assert len(spec.entries) == 8


def test_phases_repeat_and_runs_multiply_counts():
    spec = parse_spec({
        "runs": 3,
        "mechanisms": [{"type": "gaussian", "sigma": 4.0, "count": 2}],
        "phases": [
            {"name": "warm-up", "repeat": 5, "mechanisms": [{"type": "laplace", "scale": 1.0}]},
            {"mechanisms": [{"type": "gaussian", "sigma": 4.0}]},  # merges with the first entry
        ],
    })
    comps = _mechs(spec)
    assert comps[pld.Gaussian(4.0)] == (2 + 1) * 3
    assert comps[pld.Laplace(1.0)] == 5 * 3
    assert spec.runs == 3 and spec.deltas == [1e-5]


@pytest.mark.parametrize("doc, message", [
    ({"mechanisms": [{"type": "gaussian", "sigma": 1}, {"type": "gaussian", "sigma": 1},
                     {"type": "gaussian", "sigma": -1}]}, "mechanisms[2].sigma: must be > 0, got -1"),
    ({"mechanisms": [{"type": "gaussian", "sigma": 0}]}, "mechanisms[0].sigma: must be > 0"),
    ({"mechanisms": [{"type": "gaussian"}]}, "mechanisms[0].sigma: missing"),
    ({"mechanisms": [{"type": "gaussian", "sigma": "1"}]}, "mechanisms[0].sigma: must be a number"),
    ({"mechanisms": [{"type": "gaussian", "sigma": True}]}, "mechanisms[0].sigma: must be a number"),
    ({"mechanisms": [{"type": "gaussian", "sigma": 1, "sigmaa": 2}]}, "mechanisms[0].sigmaa: unknown field"),
    ({"mechanisms": [{"sigma": 1}]}, "mechanisms[0].type: missing"),
    ({"mechanisms": [{"type": "gauss", "sigma": 1}]}, "mechanisms[0].type: unknown mechanism \"gauss\""),
    ({"mechanisms": [{"type": "gaussian", "sigma": 1, "count": 0}]}, "mechanisms[0].count: must be an integer >= 1"),
    ({"mechanisms": [{"type": "gaussian", "sigma": 1, "count": 2.5}]}, "mechanisms[0].count: must be an integer"),
    ({"mechanisms": [{"type": "gaussian", "sigma": 1, "sampling_rate": 1.5}]},
     "mechanisms[0].sampling_rate: must be in (0, 1]"),
    ({"mechanisms": [{"type": "gaussian", "sigma": 1, "sampling_rate": 0.1, "sampling": "sliced"}]},
     "mechanisms[0].sampling: must be 'poisson', 'without_replacement'"),
    ({"mechanisms": [{"type": "dpsgd", "noise_multiplier": 1, "sampling_rate": 0.1, "steps": 3,
                      "sampling": "without-replacement"}]},
     "mechanisms[0].sampling: 'without_replacement' (substitute neighbouring) cannot be composed"),
    ({"mechanisms": [{"type": "approx_dp", "epsilon": 1, "delta": 1}]}, "mechanisms[0].delta: must be in [0, 1)"),
    ({"mechanisms": [{"type": "approx_dp", "epsilon": -1, "delta": 0}]}, "mechanisms[0].epsilon: must be >= 0"),
    ({"mechanisms": [{"type": "discrete_laplace", "scale": 1, "sensitivity": 1.5}]},
     "mechanisms[0].sensitivity: must be an integer"),
    ({"mechanisms": [{"type": "pmfs", "p": [0.5, 0.6], "q": [0.5, 0.5]}]}, "mechanisms[0].p: must sum to 1"),
    ({"mechanisms": [{"type": "pmfs", "p": [0.5, -0.5, 1.0], "q": [0.5, 0.5, 0]}]},
     "mechanisms[0].p[1]: must be a probability"),
    ({"mechanisms": [{"type": "pmfs", "p": [0.5, 0.5], "q": [1.0]}]}, "mechanisms[0].q: must have the same length"),
    ({"mechanisms": [{"type": "dpsgd", "noise_multiplier": 1, "sampling_rate": 0.1}]},
     "mechanisms[0]: give steps or epochs"),
    ({"mechanisms": [{"type": "dpsgd", "noise_multiplier": 1, "dataset_size": 100, "batch_size": 10,
                      "epochs": 1, "drop_last": 1}]}, "mechanisms[0].drop_last: must be true or false"),
    ({"mechanisms": ["gaussian"]}, "mechanisms[0]: must be a table/object"),
    ({"mechanisms": {"type": "gaussian"}}, "mechanisms: must be a list"),
    ({"mechanisms": []}, "describes no mechanism"),
    ({}, "describes no mechanism"),
    ({"mechanism": []}, "mechanism: unknown field"),
    ({"phases": [{"repeat": 2, "mechanisms": [{"type": "laplace", "scale": -3}]}]},
     "phases[0].mechanisms[0].scale: must be > 0"),
    ({"phases": [{"repeat": 0, "mechanisms": [{"type": "laplace", "scale": 3}]}]},
     "phases[0].repeat: must be an integer >= 1"),
    ({"phases": [{"mechanisms": []}]}, "phases[0].mechanisms: must be a non-empty list"),
    ({"phases": [{"mechanisms": [{"type": "laplace", "scale": 3}], "steps": 4}]}, "phases[0].steps: unknown field"),
    ({"delta": 0, "mechanisms": [{"type": "laplace", "scale": 3}]}, "delta: must be in (0, 1)"),
    ({"delta": [1e-5, 2], "mechanisms": [{"type": "laplace", "scale": 3}]}, "delta[1]: must be in (0, 1)"),
    ({"epsilon": ["x"], "mechanisms": [{"type": "laplace", "scale": 3}]}, "epsilon[0]: must be a finite number"),
    ({"runs": 0, "mechanisms": [{"type": "laplace", "scale": 3}]}, "runs: must be an integer >= 1"),
    ({"mechanisms": [{"type": "saved"}]}, "mechanisms[0].path: missing"),
    ([1, 2], "the top level must be a table/object"),
])
def test_validation_messages_point_at_the_bad_field(doc, message):
    with pytest.raises(SpecError) as err:
        parse_spec(doc)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_count_limit():
    with pytest.raises(SpecError, match=r"runs: the spec composes"):
        parse_spec({"runs": 10**7, "mechanisms": [{"type": "laplace", "scale": 1, "count": 10**6}]})


def test_json_and_toml_files_give_the_same_composition(tmp_path):
    doc = {"delta": 1e-6, "mechanisms": [
        {"type": "gaussian", "sigma": 1.5, "sampling_rate": 0.02, "count": 100},
        {"type": "randomized_response", "epsilon": 0.3, "count": 2}],
        "phases": [{"name": "ft", "repeat": 2, "mechanisms": [{"type": "laplace", "scale": 4.0}]}]}
    pj = tmp_path / "spec.json"
    pj.write_text(json.dumps(doc))
    pt = tmp_path / "spec.toml"
    pt.write_text(
        'delta = 1e-6\n'
        '[[mechanisms]]\ntype = "gaussian"\nsigma = 1.5\nsampling_rate = 0.02\ncount = 100\n'
        '[[mechanisms]]\ntype = "randomized_response"\nepsilon = 0.3\ncount = 2\n'
        '[[phases]]\nname = "ft"\nrepeat = 2\n'
        '[[phases.mechanisms]]\ntype = "laplace"\nscale = 4.0\n')
    a, b = load_spec(str(pj)), load_spec(str(pt))
    assert a.pld.components == b.pld.components
    assert a.deltas == b.deltas == [1e-6]
    # an unknown extension is sniffed: JSON first, then TOML
    px = tmp_path / "spec.cfg"
    px.write_text(pt.read_text())
    assert load_spec(str(px)).pld.components == a.pld.components


def test_syntax_errors_name_the_file_and_position(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"mechanisms": [\n  {"type": "gaussian", "sigma": 1,}\n]}')
    with pytest.raises(SpecError, match=r"bad\.json: invalid JSON at line 2"):
        load_spec(str(p))
    p = tmp_path / "bad.toml"
    p.write_text("[[mechanisms]]\ntype = gaussian\n")
    with pytest.raises(SpecError, match=r"bad\.toml: invalid TOML"):
        load_spec(str(p))
    p = tmp_path / "nan.json"
    p.write_text('{"mechanisms": [{"type": "gaussian", "sigma": NaN}]}')
    with pytest.raises(SpecError, match="NaN is not allowed"):
        load_spec(str(p))
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match="not a text file"):
        load_spec(str(p))
    with pytest.raises(OSError):
        load_spec(str(tmp_path / "missing.json"))


def test_saved_entry_composes_a_stored_pld_relative_to_the_spec(tmp_path):
    from pld.io import save

    stored = pld.PoissonSampled(pld.Gaussian(1.3), 0.01).pld().self_compose(77).compose(
        pld.RandomizedResponse(0.2).pld())
    save(stored, tmp_path / "run1.pld", delta=None)  # composition only: no grids, no compute
    (tmp_path / "spec.json").write_text(json.dumps({"mechanisms": [
        {"type": "saved", "path": "run1.pld", "count": 2},
        {"type": "laplace", "scale": 3.0}]}))
    spec = load_spec(str(tmp_path / "spec.json"))
    comps = _mechs(spec)
    assert comps[pld.PoissonSampled(pld.Gaussian(1.3), 0.01)] == 154
    assert comps[pld.RandomizedResponse(0.2)] == 2
    assert comps[pld.Laplace(3.0)] == 1
    (tmp_path / "bad.json").write_text(json.dumps({"mechanisms": [{"type": "saved", "path": "spec.json"}]}))
    with pytest.raises(SpecError, match=r"mechanisms\[0\]\.path: not a pld file"):
        load_spec(str(tmp_path / "bad.json"))
