"""One spelling of each sampling scheme in Python, on the command line and in spec files.

The canonical names are "poisson" and "without_replacement"; aliases are
accepted everywhere, and every message uses the canonical spelling.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import pld
from pld.accounting.dpsgd import SAMPLING_ALIASES, SAMPLING_SCHEMES, sampling_scheme
from pld.accounting.spec import SpecError, parse_spec

ALIASES = ["without_replacement", "without-replacement", "Without Replacement", "WOR", "fixed-batch", "fixed",
           "sampled_without_replacement"]


def _pld_cli(*args) -> subprocess.CompletedProcess:
    exe = shutil.which("pld", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "pld"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("alias", ALIASES)
def test_python_accepts_every_alias(alias):
    assert sampling_scheme(alias) == "without_replacement"
    d = pld.dpsgd(2.0, 0.1, 5, sampling=alias)
    assert d.components == pld.dpsgd(2.0, 0.1, 5, sampling="without_replacement").components
    assert pld.Accountant(sampling=alias).sampling == "without_replacement"


def test_aliases_map_onto_the_schemes_and_shuffling_is_its_own():
    assert set(SAMPLING_ALIASES.values()) == set(SAMPLING_SCHEMES)
    assert all(sampling_scheme(k) == v for k, v in SAMPLING_ALIASES.items())
    # shuffled fixed batches are neither Poisson nor without-replacement sampling: their own scheme
    assert sampling_scheme("Shuffling") == "shuffle" != sampling_scheme("wor")
    for wrong in ("sliced", "replacement", ""):
        with pytest.raises(ValueError, match="sampling must be 'poisson', 'without_replacement'"):
            sampling_scheme(wrong)
    with pytest.raises(TypeError, match="sampling must be a string, 'poisson', 'without_replacement'"):
        sampling_scheme(None)


def test_command_line_takes_aliases_and_reports_the_canonical_name():
    res = json.loads(_pld_cli("dpsgd", "-q", "0.1", "-T", "5", "--noise-multiplier", "2", "--sampling", "wor",
                              "--json").stdout)
    assert res["sampling"] == "without_replacement"
    bad = _pld_cli("dpsgd", "--sampling", "sliced")
    assert bad.returncode == 2
    assert "must be 'poisson', 'without_replacement'" in bad.stderr
    helptext = " ".join(_pld_cli("dpsgd", "--help").stdout.split())
    assert "{poisson,without_replacement,balls_in_bins,random_allocation,shuffle}" in helptext


def test_compare_accepts_without_replacement_on_the_command_line():
    # it used to fail whatever the spelling ("sampling must be 'poisson'")
    p = _pld_cli("compare", "--sampling", "without-replacement", "-q", "0.05", "-T", "20",
                 "--noise-multiplier", "2", "--no-peers", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["sampling"] == "without_replacement"
    assert res["pld_epsilon_upper"] == pld.dpsgd(2.0, 0.05, 20, sampling="without_replacement").epsilon(1e-5)
    assert res["rdp_epsilon_improved"] is None  # pld.baselines.rdp covers Poisson sampling only: said, not faked


def test_spec_files_take_the_same_spellings():
    base = {"type": "dpsgd", "noise_multiplier": 2.0, "sampling_rate": 0.1, "steps": 3}
    spec = parse_spec({"mechanisms": [dict(base, sampling="Poisson")]})
    assert spec.pld.components == pld.dpsgd(2.0, 0.1, 3).components
    with pytest.raises(SpecError, match=r"mechanisms\[0\].sampling: 'without_replacement' \(substitute"):
        parse_spec({"mechanisms": [dict(base, sampling="fixed-batch")]})
    with pytest.raises(SpecError, match=r"mechanisms\[0\].sampling: must be 'poisson', 'without_replacement'"):
        parse_spec({"mechanisms": [dict(base, sampling="sliced")]})
    with pytest.raises(SpecError, match=r"mechanisms\[0\].sampling: 'balls_in_bins' \(add-or-remove"):
        parse_spec({"mechanisms": [dict(base, sampling="balls_in_bins")]})
