"""Measured FFT plans (``pld tune-fft``): found, saved, read back, and still certified.

Wisdom only changes which FFTW algorithm computes a transform, so the test that
matters is that brackets computed with measured plans still contain the exact
Gaussian epsilon (DESIGN.md's closed form, not our engine), and agree with the
estimated plans' brackets to rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pld.baselines.exact import gaussian_epsilon, gaussian_mu
from pld.engine import fft as _fft

pyfftw = pytest.importorskip("pyfftw")
fft_plans = pytest.importorskip("pld.engine.fft_plans")


@pytest.fixture
def clean_fftw(monkeypatch, tmp_path):
    """A wisdom file under ``tmp_path``, and the process's FFTW state put back afterwards."""
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("PLD_FFTW_WISDOM", str(path))
    monkeypatch.setitem(_fft._wisdom, "checked", True)  # nothing to read yet
    monkeypatch.setitem(_fft._wisdom, "path", None)
    _fft._drop_plans()
    yield path
    pyfftw.forget_wisdom()
    _fft._drop_plans()


def test_plan_sizes_are_the_canonical_sizes():
    for lo, hi in ((1024, 1 << 18), (1500, 9000), (5120, 5120), (1024, 1024)):
        want = sorted({_fft._canonical_size(m) for m in range(lo, hi + 1)} & set(range(lo, hi + 1)))
        assert fft_plans.plan_sizes(hi, lo) == want


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"max_points": 100}, ValueError, "max_points"),
    ({"max_points": 1 << 24}, ValueError, "max_points"),
    ({"max_points": 4096.5}, TypeError, "max_points"),
    ({"max_points": 4096, "min_points": 8192}, ValueError, "min_points"),
])
def test_tune_fft_rejects_bad_ranges(clean_fftw, kwargs, exc, words):
    with pytest.raises(exc, match=words):
        fft_plans.tune_fft(**kwargs)
    assert not clean_fftw.exists()


def test_tune_fft_refuses_when_wisdom_is_off(clean_fftw, monkeypatch):
    monkeypatch.setenv("PLD_FFTW_WISDOM", "off")
    assert _fft.wisdom_path() is None
    with pytest.raises(ValueError, match="PLD_FFTW_WISDOM"):
        fft_plans.tune_fft(2048)


def _query():
    import pld

    d = pld.Gaussian(sigma=3.0).pld().self_compose(400)
    return d.epsilon_bounds(1e-6)


def test_measured_plans_stay_certified(clean_fftw, monkeypatch):
    sizes = []
    acquire = _fft._acquire_plan
    monkeypatch.setattr(_fft, "_acquire_plan", lambda n: (sizes.append(n), acquire(n))[1])
    lo0, hi0 = _query()
    used = sorted(s for s in set(sizes) if s >= 1024)
    assert used, "the query should use pooled pyfftw plans"
    for s in used:  # measure just the lengths this query plans (seconds, not minutes)
        result = fft_plans.tune_fft(s, min_points=s)
    assert result["path"] == str(clean_fftw)
    assert _fft.wisdom_in_use() == str(clean_fftw)
    assert "measured" in _fft.fft_backend()
    sizes.clear()
    lo1, hi1 = _query()
    assert set(used) <= set(sizes)  # the measured plans were built (the pool was dropped)
    exact = float(gaussian_epsilon(1e-6, gaussian_mu(3.0, 400)))
    assert lo1 <= exact <= hi1
    assert hi1 - lo1 <= 1e-4 * exact + 1e-6
    # another FFTW algorithm moves only the rounding
    assert abs(hi1 - hi0) <= 1e-9 * hi0 and abs(lo1 - lo0) <= 1e-9 * lo0
    doc = json.loads(clean_fftw.read_text())
    assert doc["format"] == _fft.WISDOM_FORMAT and doc["key"] == _fft._machine_key()
    assert all(isinstance(w, str) for w in doc["wisdom"])


def test_fresh_process_reads_the_saved_plans(clean_fftw):
    fft_plans.tune_fft(1024, min_points=1024)
    # the query alone must load the wisdom: a wisdom-only plan of the tuned
    # length is then possible (FFTW raises without wisdom for it)
    code = ("import pld, pld.engine.fft as f, pyfftw, pld.distribution as engine\n"
            "engine.CLOSED_FORMS = False  # (through the FFT engine, not the Gaussian closed form)\n"
            "pld.Gaussian(sigma=3.0).pld().self_compose(400).epsilon_bounds(1e-6)\n"
            "a = pyfftw.empty_aligned(1024, dtype='float64'); s = pyfftw.empty_aligned(513, dtype='complex128')\n"
            "pyfftw.FFTW(a, s, flags=('FFTW_ESTIMATE', 'FFTW_WISDOM_ONLY'), threads=1)\n"
            "print(f.wisdom_in_use()); print(f.fft_backend())")
    env = dict(os.environ, PLD_FFTW_WISDOM=str(clean_fftw))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    path, backend = out.stdout.split("\n")[:2]
    assert path == str(clean_fftw) and backend == "pyfftw (measured plans)"


def test_unreadable_wisdom_is_reported_and_skipped(clean_fftw, monkeypatch):
    clean_fftw.write_text("{not json")
    monkeypatch.setitem(_fft._wisdom, "checked", False)
    with pytest.warns(RuntimeWarning, match="unreadable FFTW wisdom"):
        assert _fft.wisdom_in_use() is None
    lo, hi = _query()  # estimated plans: still certified
    exact = float(gaussian_epsilon(1e-6, gaussian_mu(3.0, 400)))
    assert lo <= exact <= hi


def test_another_machines_wisdom_is_ignored(clean_fftw, monkeypatch):
    clean_fftw.write_text(json.dumps({"format": _fft.WISDOM_FORMAT, "key": "elsewhere", "wisdom": ["x", "", ""]}))
    monkeypatch.setitem(_fft._wisdom, "checked", False)
    assert _fft.wisdom_in_use() is None
    assert _fft.fft_backend() == "pyfftw"


def test_cli_tune_fft(clean_fftw, capsys):
    from pld import cli

    code = cli.main(["tune-fft", "--max-points", "1024", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["path"] == str(clean_fftw) and [r["size"] for r in doc["sizes"]] == [1024]
    assert all(r["measured_s"] > 0 and r["estimate_s"] > 0 for r in doc["sizes"])
    assert clean_fftw.exists()


@pytest.mark.parametrize("value, fragment", [("10", "max_points"), ("16777216", "max_points"), ("x", "--max-points")])
def test_cli_tune_fft_bad_input(clean_fftw, capsys, value, fragment):
    from pld import cli

    code = cli.main(["tune-fft", "--max-points", value])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("pld: error: ") and fragment in err, err
    assert not clean_fftw.exists()


def test_default_wisdom_path(monkeypatch, tmp_path):
    monkeypatch.delenv("PLD_FFTW_WISDOM", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = _fft.wisdom_path()
    assert path.startswith(str(tmp_path / "pld" / "fftw-wisdom-")) and path.endswith(".json")
    assert _fft._machine_key() in path  # one file per machine
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _fft.wisdom_path().startswith(str(tmp_path / "home" / ".cache" / "pld"))
    monkeypatch.setenv("PLD_FFTW_WISDOM", "~/w.json")
    assert _fft.wisdom_path() == str(tmp_path / "home" / "w.json")


def test_round_off_bound_holds_for_measured_plans(clean_fftw):
    # the l2 round-off bound of pld.engine.fft against exact integer convolutions
    # (tests/test_fft.py's references), now through measured plans
    sys.path.insert(0, os.path.dirname(__file__))
    from test_fft import exact_conv_fixed, fixed_point, gaussian_pmf, l2_error_fixed

    cases = [(1 << 13, None), (1 << 12, 5000), (3000, 2500)]
    for na, nb in cases:
        n = _fft._canonical_size(na + (nb or na) - 1)
        fft_plans.tune_fft(n, min_points=n)
        assert _fft.wisdom_in_use() == str(clean_fftw)
        A, a, ea = fixed_point(gaussian_pmf(na, na / 2, na / 7))
        if nb is None:
            B, b, eb = A, a, ea
        else:
            B, b, eb = fixed_point(gaussian_pmf(nb, nb / 3, nb / 50))
        c, bound = _fft.convolve(a, a if nb is None else b)
        err = l2_error_fixed(c, exact_conv_fixed(A, B), ea + eb)
        assert 0 < err <= bound, (na, nb, err, bound)
