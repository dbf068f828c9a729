"""First run after install: kernels compiled in two processes (pld._jit_warm).

The shares must name every kernel with the signature a query really calls it
with (otherwise the helper compiles a specialisation nobody uses and the first
query compiles the real one again), and a cold cache must come out of
``import pld`` complete, helper or not.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pld
from pld import _jit_warm as J
from pld import kernels

SHARES = J.OWN_SHARE + J.HELPER_SHARE


def test_every_kernel_is_in_one_share():
    names = [name for name, _ in SHARES]
    assert sorted(names) == sorted(kernels.__all__)
    assert len(set(names)) == len(names)


def test_shares_have_the_signatures_queries_compile():
    # in a process whose import compiled nothing (PLD_JIT_HELPER=0), so that
    # the signatures are those the engine's calls asked for: subsampled DP-SGD
    # (both sides, FFT power, re-grids), a Gaussian and randomized response
    code = ("import pld\n"
            "from pld import kernels, _jit_warm as J\n"
            "pld.dpsgd(1.1, 256 / 60000, 14040).epsilon_bounds(1e-5)\n"
            "pld.Gaussian(2.0).pld().self_compose(100).epsilon_bounds(1e-5)\n"
            "pld.RandomizedResponse(1.0).pld().self_compose(100).epsilon_bounds(1e-5)\n"
            "for name, sig in J.OWN_SHARE + J.HELPER_SHARE:\n"
            "    compiled = [tuple(s) for s in getattr(kernels, name).signatures]\n"
            "    print(name, tuple(sig) in compiled, compiled)\n")
    for line in _run(code, PLD_JIT_HELPER="0").splitlines():
        name, ok, compiled = line.split(" ", 2)
        assert ok == "True", (name, compiled)


def _run(code: str, **env) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("helper", ["on", "0"])
def test_cold_cache_comes_out_of_import_complete(tmp_path, helper):
    code = ("import pld._jit_warm as J\n"
            "print(sorted(J.cold_kernels()))\n")
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    if helper == "0":
        env["PLD_JIT_HELPER"] = "0"
        # off: nothing compiles at import, every kernel compiles on first use
        assert _run(code, **env) == repr(sorted(kernels.__all__))
    else:
        env["PLD_JIT_HELPER"] = ""  # (on, whatever this run's environment says)
        # a first run of the command, as after install
        out = subprocess.run([sys.executable, "-m", "pld", "dpsgd", "--noise-multiplier", "2", "--sampling-rate",
                              "0.5", "--steps", "3"], env=dict(os.environ, **env), capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        # the silent seconds are announced, once, on stderr, and counted in the report's wall time
        assert out.stderr.startswith("pld: first run on this machine: compiling the numba kernels (about 7 s")
        assert out.stderr.count("\n") == 1
        footer = out.stdout.strip().splitlines()[-1]
        assert "s in all (first run on this machine: " in footer and "s compiling the numba kernels, once)" in footer
        # the next process finds every kernel cached, and says nothing
        again = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True,
                               text=True, timeout=600)
        assert again.returncode == 0 and again.stderr == "", again.stderr
        assert again.stdout.strip() == "[]"
        # the helper's share is in the cache too (written by the helper: this
        # process compiled only its own share)
        written = " ".join(p.name for p in tmp_path.rglob("*.nbi"))
        for name, _ in J.HELPER_SHARE:
            assert f".{name}-" in written, name


def test_warm_up_survives_a_helper_that_cannot_start(monkeypatch):
    compiled = []
    monkeypatch.setattr(J, "_helper", [])
    monkeypatch.setattr(J, "_tried", False)
    monkeypatch.setattr(J, "cold_kernels", lambda: ["optimistic_merge_centred", "log_mgf_grid"])
    monkeypatch.setattr(J, "_compile", lambda share: compiled.append(share))

    def broken(*a, **k):
        raise OSError("no such interpreter")

    monkeypatch.setattr(J.subprocess, "Popen", broken)
    monkeypatch.delenv("PLD_JIT_HELPER", raising=False)
    assert J.warm_up_if_cold() is True
    assert compiled == [J.OWN_SHARE]  # its own share; the first query compiles the rest
    assert J.warm_up_if_cold() is False  # once per process


def test_warm_up_does_nothing_when_warm_or_off(monkeypatch, capsys):
    monkeypatch.setattr(J, "_helper", [])
    monkeypatch.setattr(J, "_tried", False)
    monkeypatch.setattr(J, "_compile", lambda share: pytest.fail("nothing to compile"))
    monkeypatch.setattr(J, "cold_kernels", lambda: [])
    monkeypatch.delenv("PLD_JIT_HELPER", raising=False)
    assert J.warm_up_if_cold() is False
    assert capsys.readouterr().err == ""  # a warm cache is silent
    monkeypatch.setattr(J, "cold_kernels", lambda: ["log_mgf_grid"])
    for off in ("0", "off", "helper"):
        monkeypatch.setattr(J, "_tried", False)
        monkeypatch.setenv("PLD_JIT_HELPER", off)
        assert J.warm_up_if_cold() is False
        err = capsys.readouterr().err
        if off == "helper":  # the helper process itself says nothing
            assert err == ""
        else:  # helper off: the kernels compile on first use, and the user is told
            assert err.startswith("pld: first run on this machine: compiling the numba kernels"), err
            assert "each kernel on its first use" in err and err.count("\n") == 1
