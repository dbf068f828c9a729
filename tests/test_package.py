"""The package as a newcomer meets it: ``import pld``, its submodules, ``python -m pld``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LAZY = ("rdp", "exact", "curves", "lab", "interop")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_submodules_are_reachable_after_import_pld_without_being_imported_by_it():
    code = ("import sys, json, pld\n"
            f"names = {LAZY!r}\n"
            "before = [n for n in names if 'pld.' + n in sys.modules]\n"
            "listed = [n for n in names if n in dir(pld)]\n"
            "kinds = [type(getattr(pld, n)).__name__ for n in names]\n"
            "print(json.dumps([before, listed, kinds, pld.baselines.rdp.rdp_gaussian(2.0, 1.0)]))\n")
    p = _python(code)
    assert p.returncode == 0, p.stderr
    before, listed, kinds, rdp2 = json.loads(p.stdout)
    assert before == []  # `import pld` does not pay for them
    assert listed == list(LAZY)
    assert kinds == ["module"] * len(LAZY)
    assert rdp2 == pytest.approx(1.0)  # D_2 of N(1, 1) vs N(0, 1): alpha / (2 sigma^2)


def test_unknown_attribute_is_still_an_attribute_error():
    import pld

    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        pld.not_a_module  # noqa: B018
    assert not hasattr(pld, "kernels_x")


def test_python_dash_m_pld_runs_the_command():
    import pld

    p = subprocess.run([sys.executable, "-m", "pld", "--version"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"pld {pld.__version__}"
    p = subprocess.run([sys.executable, "-m", "pld", "dpsgd", "--noise-multiplier", "2", "--sampling-rate",
                        "0.05", "--steps", "50", "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["epsilon_upper"] == pytest.approx(pld.dpsgd(2.0, 0.05, 50).epsilon(1e-5), rel=1e-9)


def test_a_query_does_not_import_dask_and_dask_still_imports_after():
    """pyfftw's interfaces import dask.array when dask is installed (a few tenths
    of a second per process); pld hides it from that import (pld.engine.fft)."""
    import importlib.util

    p = _python("import sys, pld\n"
                "pld.dpsgd(1.1, 0.01, 100).epsilon_bounds(1e-5)\n"
                "print('dask.array' in sys.modules)\n"
                "import importlib.util\n"
                "if importlib.util.find_spec('dask') is not None:\n"
                "    import dask.array\n"
                "    print(dask.array.__name__)\n")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0] == "False"
    if importlib.util.find_spec("dask") is not None:
        assert lines[1] == "dask.array"


#: imported by scipy.special / scipy.fft (their array-API layer clones the
#: numpy namespace) or by np.unique: tenths of a second of every process start
HEAVY = ("scipy.special", "scipy.fft", "scipy._lib._array_api", "numpy.f2py", "numpy.testing", "numpy.ma")


def test_a_dpsgd_query_does_not_import_scipy_special_and_its_functions_are_scipys():
    """``pld dpsgd`` needs only log_ndtr and erfcx (pld._special loads them
    without scipy.special's package import); they, and scipy.special imported
    afterwards, are scipy's own ufuncs."""
    p = _python("import sys, json, pld\n"
                "lo, hi = pld.dpsgd(1.1, 0.01, 100).epsilon_bounds(1e-5)\n"
                f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
                "import scipy.special, scipy.fft\n"
                "from pld import _special\n"
                "import numpy as np; x = np.linspace(-40.0, 10.0, 1001)\n"
                "ours, theirs = ([getattr(m, n) for n in _special.FAST] for m in (_special, scipy.special))\n"
                "# (with SCIPY_ARRAY_API, scipy's are wrappers of the same ufuncs)\n"
                "same = [f is g or np.array_equal(f(x), g(x)) for f, g in zip(ours, theirs)]\n"
                "print(json.dumps([loaded, same, _special.logsumexp is scipy.special.logsumexp,\n"
                "                  float(_special.ndtri(0.25)), lo, hi]))\n")
    assert p.returncode == 0, p.stderr
    loaded, same, lse, q, lo, hi = json.loads(p.stdout)
    assert loaded == []
    assert same == [True] * len(same) and lse
    assert q == pytest.approx(-0.6744897501960817, rel=1e-12)
    assert 0 < lo <= hi
