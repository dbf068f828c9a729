"""Kernels compile ahead of use only when asked (pld.warm), never at import.

``import pld`` in a fresh process must start no process and compile nothing,
even with an empty numba cache.  :func:`pld.warm` must find every kernel by
itself (a kernel added to kernels/ with its ``@called_with`` line is warmed
without being listed anywhere else), with the argument types a query really
calls it with, and leave the cache complete.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys

import pytest
from numba.core.registry import CPUDispatcher

import pld
from pld import kernels
from pld.engine import warm as J


def _run(code: str, **env) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


#: records every way a process could start another, then imports pld
_SPY = """
import json, os, subprocess, multiprocessing, threading
started = []
def spy(name, real):
    def call(*a, **k):
        started.append(name)
        return real(*a, **k)
    return call
subprocess.Popen.__init__ = spy("Popen", subprocess.Popen.__init__)
multiprocessing.Process.start = spy("Process.start", multiprocessing.Process.start)
for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnve", "execv", "execve", "system"):
    if hasattr(os, name):
        setattr(os, name, spy(name, getattr(os, name)))
import pld
from pld.engine import warm as J
children = []
for task in os.listdir("/proc/self/task"):
    try:
        children += open(f"/proc/self/task/{task}/children").read().split()
    except OSError:
        pass
compiled = {name: len(d.signatures) for name, d, _ in J.find_kernels()}
print(json.dumps({"started": started, "children": children, "compiled": compiled}))
"""


def test_import_starts_no_process_and_compiles_nothing(tmp_path):
    cache = tmp_path / "numba"
    out = json.loads(_run(_SPY, NUMBA_CACHE_DIR=str(cache), PLD_KERNELS_AOT="off").splitlines()[-1])
    assert out["started"] == [] and out["children"] == []
    # an empty cache stays empty: nothing was compiled (nor loaded) at import
    assert set(out["compiled"]) == set(kernels.__all__)
    assert not any(out["compiled"].values()), out["compiled"]
    assert not cache.exists() or not any(cache.rglob("*.nbi"))


def test_every_kernel_is_found_with_its_declared_types():
    found = {name: sig for name, _, sig in J.find_kernels()}
    assert sorted(found) == sorted(kernels.__all__)
    # no public kernel without a declaration (it would be left out of warm())
    for module in {d.py_func.__module__ for _, d, _ in J.find_kernels()}:
        for name, obj in vars(sys.modules[module]).items():
            if isinstance(obj, CPUDispatcher) and not name.startswith("_"):
                assert name in found, f"{module}.{name} lacks @called_with(...)"


def test_declared_types_are_those_queries_compile():
    # a fresh process, nothing warmed: the signatures are those the engine's
    # calls asked for (subsampled DP-SGD, both sides, FFT powers, re-grids; a
    # Gaussian; randomized response; an approximate-DP step's mass at +inf on the dominated side;
    # random allocation's laws, the geometric grid's and the log labels' too),
    # and only those
    code = ("import pld\n"
            "from pld.engine import warm as J\n"
            "pld.dpsgd(1.1, 256 / 60000, 14040).epsilon_bounds(1e-5)\n"
            "pld.Gaussian(2.0).pld().self_compose(100).epsilon_bounds(1e-5)\n"
            "pld.RandomizedResponse(1.0).pld().self_compose(100).epsilon_bounds(1e-5)\n"
            "pld.ApproxDP(1.0, 1e-6).pld().self_compose(10).epsilon_bounds(1e-5)\n"
            "pld.RandomAllocation(pld.Gaussian(1.0), 1000, 1).pld().epsilon_bounds(1e-10)\n"
            "pld.RandomAllocation(pld.Gaussian(2.0), 64, 8).pld().epsilon_bounds(1e-5)\n"
            "pld.RandomAllocation(pld.Gaussian(0.5), 4, 1).pld().epsilon_bounds(1e-5)\n"
            "pld.RandomAllocation(pld.Gaussian(0.5), 40, 4).pld().epsilon_bounds(1e-5)\n"
            "pld.RandomAllocation(pld.Gaussian(1.0), 1000, 1, construction='linear').pld().epsilon_bounds(1e-5)\n"
            "for name, d, sig in J.find_kernels():\n"
            "    print(name, [tuple(s) for s in d.signatures] == [tuple(sig)], d.signatures)\n")
    for line in _run(code, PLD_KERNELS_AOT="off").splitlines():  # (the JIT kernels, even after `pld warm`)
        name, ok, compiled = line.split(" ", 2)
        assert ok == "True", (name, compiled)


#: three of the cheapest kernels (all of them take ~10 s of CPU to compile)
SMALL = ["l1_l2_norms", "dot_compensated", "hockey_stick_suffix"]


def test_warm_fills_an_empty_cache_in_two_processes(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    out = json.loads(_run(f"import json, pld; print(json.dumps(pld.warm(processes=2, kernels={SMALL})))", **env))
    assert sorted(out["compiled"]) == sorted(SMALL)
    assert out["processes"] == 2 and out["kernels"] == len(kernels.__all__) and out["seconds"] > 0
    written = " ".join(p.name for p in tmp_path.rglob("*.nbi"))
    for name in kernels.__all__:  # what was asked for, and nothing else
        assert (f".{name}-" in written) == (name in SMALL), name
    # the next process finds them cached: nothing to do, nothing started
    again = json.loads(_run(f"import json, pld; print(json.dumps(pld.warm(kernels={SMALL})))", **env))
    assert again["compiled"] == [] and again["processes"] == 0
    cold = json.loads(_run("import json, pld.engine.warm; print(json.dumps(pld.engine.warm.cold_kernels()))", **env))
    assert sorted(cold) == sorted(set(kernels.__all__) - set(SMALL))


class _FakeDispatcher:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def compile(self, sig):
        self.log.append(self.name)


def test_warm_compiles_here_when_no_helper_can_start(monkeypatch, capsys):
    log: list = []
    fakes = [(n, _FakeDispatcher(log, n), ()) for n in ("a", "b", "c")]
    monkeypatch.setattr(J, "find_kernels", lambda: fakes)
    monkeypatch.setattr(kernels, "AHEAD_OF_TIME", [])  # (as without `pld warm`'s module)
    monkeypatch.setattr(J, "_cached", lambda d: d.name in log)

    def broken(*a, **k):
        raise OSError("no such interpreter")

    monkeypatch.setattr(J.subprocess, "Popen", broken)
    out = J.warm(processes=3, announce=True)
    assert log == ["a", "b", "c"] and out["processes"] == 1 and out["compiled"] == ["a", "b", "c"]
    err = capsys.readouterr().err
    assert err.startswith("pld: first run on this machine: compiling 3 numba kernels") and err.count("\n") == 1
    # warm: nothing compiled, nothing said
    assert J.warm(announce=True)["compiled"] == [] and capsys.readouterr().err == ""


@pytest.mark.parametrize("kwargs, exc, word", [({"processes": 0}, ValueError, "processes"),
                                               ({"processes": 1.5}, TypeError, "processes"),
                                               ({"processes": "2"}, TypeError, "processes"),
                                               ({"kernels": "l1_l2_norms"}, TypeError, "kernels"),
                                               ({"kernels": ["l1_l2_norm"]}, ValueError, "kernels")])
def test_warm_rejects_bad_arguments(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        pld.warm(**kwargs)


def test_ahead_of_time_kernels_serve_declared_types_and_hand_the_rest_to_the_jit(tmp_path):
    # two small kernels built ahead of time (all of them take ~10 s of CPU)
    env = {"PLD_KERNELS_AOT": str(tmp_path / "aot")}
    built = json.loads(_run("import json, warnings, pld\n"
                            "warnings.simplefilter('error')\n"
                            f"print(json.dumps(pld.warm(kernels={SMALL[:2]}, ahead_of_time=True)))", **env))
    aot = built["ahead_of_time"]
    assert aot["error"] is None and aot["built"] is True, aot
    code = ("import json, numpy as np, pld\n"
            "from pld import kernels\n"
            "from pld.kernels import hockey\n"
            "x = np.random.default_rng(1).random(1001); y = np.random.default_rng(2).random(1001)\n"
            "ro = x.copy(); ro.flags.writeable = False\n"
            "cases = [(x,), (x[::2],), (ro,)]\n"
            "same = [kernels.l1_l2_norms(*c) == hockey.l1_l2_norms(*c) for c in cases]\n"
            "same.append(kernels.dot_compensated(x, y) == hockey.dot_compensated(x, y))\n"
            "jit = [len(hockey.l1_l2_norms.signatures), len(hockey.dot_compensated.signatures)]\n"
            "print(json.dumps({'aot': kernels.AHEAD_OF_TIME, 'same': same, 'jit': jit,\n"
            "                  'served': kernels.l1_l2_norms is not hockey.l1_l2_norms}))\n")
    out = json.loads(_run(code, **env))
    assert out["aot"] == sorted(SMALL[:2]) and out["served"]
    assert out["same"] == [True] * 4  # bit for bit, through the guard or not
    # the strided and the read-only array went to the JIT kernel (2 signatures
    # compiled there, plus the comparison's own contiguous call); the
    # declared types never reached it from the ahead-of-time path
    assert out["jit"] == [3, 1]
    # another source, numba or CPU has another key: nothing is loaded
    off = json.loads(_run("import json, pld; print(json.dumps(pld.kernels.AHEAD_OF_TIME))",
                          PLD_KERNELS_AOT="off"))
    assert off == []


def test_a_module_built_at_install_is_used_only_with_this_key(tmp_path):
    from pld.kernels import _aot

    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"{_aot.MODULE}{suffix}").write_bytes(b"")
    kinds = {"l1_l2_norms": {"module": "hockey", "args": ["f8[::1]"]}}
    sidecar = tmp_path / _aot.PACKAGED_SIDECAR
    sidecar.write_text(json.dumps({"key": _aot.key(), "kernels": kinds}))
    assert _aot._packaged(str(tmp_path)) == (str(tmp_path / f"{_aot.MODULE}{suffix}"), kinds)
    # another CPU, numba, Python or kernel source: not this key, not used
    sidecar.write_text(json.dumps({"key": "0" * 20, "kernels": kinds}))
    assert _aot._packaged(str(tmp_path)) is None
    sidecar.write_text("{damaged")
    assert _aot._packaged(str(tmp_path)) is None


def test_after_an_install_that_built_the_kernels_a_query_imports_no_numba():
    from pld.kernels import _aot

    if _aot._packaged() is None:
        pytest.skip("this install did not build the kernels (no C compiler, PLD_BUILD_KERNELS=0, or edited since)")
    code = ("import json, sys, pld\n"
            "from pld import kernels\n"
            "pld.dpsgd(1.1, 256 / 60000, 14040).epsilon_bounds(1e-5)\n"
            "print(json.dumps([len(kernels.AHEAD_OF_TIME), len(kernels.__all__), 'numba' in sys.modules,\n"
            "                  pld.warm()['compiled']]))\n")
    env = {k: v for k, v in os.environ.items() if k != "PLD_KERNELS_AOT"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    served, total, numba_imported, compiled = json.loads(out.stdout.strip().splitlines()[-1])
    assert served == total and not numba_imported and compiled == []
