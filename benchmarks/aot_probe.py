"""Probe: pld's kernels compiled ahead of time (numba.pycc) instead of loaded from numba's JIT cache.

    python -m benchmarks.aot_probe [--dir DIR] [--reps N]

A measurement, not a feature (issue 23, item 4: a fresh ``pld dpsgd`` <= 0.5 s).
A process whose numba cache is warm still imports numba (~0.2-0.3 s) and
initialises its JIT on the first kernel it loads (~0.2 s), then loads each
kernel (~5-10 ms): most of a fresh query's second.  This builds every kernel
that :func:`pld.warm` finds into one extension module with ``numba.pycc``, then
times fresh processes that answer the MNIST and tiny-loss queries with the
JIT kernels and with the extension swapped in for ``pld.kernels`` (numba is
then never imported), and checks that both give the same brackets, bit for bit.

How the build keeps the kernels' own compile options: pycc compiles the
functions it exports with default flags (no ``fastmath``, ``error_model``,
``nogil``), so each export is a one-line wrapper that calls the kernel's numba
dispatcher, which is compiled with its own options; the wrappers are given
``release_gil`` through a Flags subclass (pycc has no option for it).
Caveats before this could ship: ``numba.pycc`` is deprecated; it needs a C
compiler; its wrappers do not check argument types (a call with other types
than the declared ones must be routed to the JIT kernel by a Python guard);
the module is tied to this CPU (``target_cpu = "host"``) and to the kernels'
source, so it must live in a cache keyed on both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

MODULE = "pld_kernels_aot"

_QUERY = ("import sys, time\n"
          "t0 = time.perf_counter()\n"
          "{inject}"
          "import pld\n"
          "a = pld.dpsgd(1.1, 256 / 60000, 14063).epsilon_bounds(1e-5)\n"
          "b = pld.dpsgd(4.0, 0.00033, 10000).epsilon_bounds(1e-12)\n"
          "print(repr((a, b)), 'numba' in sys.modules, time.perf_counter() - t0)\n")
_INJECT = ("import importlib; sys.path.insert(0, {dir!r}); "
           "sys.modules['pld.kernels'] = importlib.import_module({module!r})\n")


def build(out_dir: str) -> float:
    """Build the extension into ``out_dir``; returns the seconds it took."""
    warnings.simplefilter("ignore")  # (pycc's deprecation notice)
    import numba.pycc.compiler as pycc_compiler
    from numba.core.compiler import Flags
    from numba.pycc import CC

    from pld import _jit_warm

    class _GilFreeFlags(Flags):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.release_gil = True

    pycc_compiler.Flags = _GilFreeFlags
    t0 = time.perf_counter()
    cc = CC(MODULE)
    cc.output_dir = out_dir
    cc.target_cpu = "host"
    for name, dispatcher, sig in _jit_warm.find_kernels():
        dispatcher.compile(sig)  # (for the return type)
        signature = dispatcher.overloads[tuple(sig)].signature
        args = ", ".join(f"a{i}" for i in range(len(sig)))
        namespace = {"_kernel": dispatcher}
        exec(f"def {name}({args}):\n    return _kernel({args})\n", namespace)
        cc.export(name, signature)(namespace[name])
    cc.compile()
    return time.perf_counter() - t0


def _fresh(code: str) -> tuple[str, float, float]:
    """Run ``code`` in a fresh interpreter: (stdout, wall, child CPU seconds)."""
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return out.stdout.strip(), wall, cpu


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.aot_probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to build (default: a temporary directory)")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per variant (default 3)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pld-aot-") as tmp:
        out_dir = args.dir or tmp
        os.makedirs(out_dir, exist_ok=True)
        print(f"building {MODULE} in {out_dir} ...", file=sys.stderr)
        print(f"build: {build(out_dir):.1f} s")
        jit = _QUERY.format(inject="")
        aot = _QUERY.format(inject=_INJECT.format(dir=out_dir, module=MODULE))
        _fresh(jit)  # (the JIT cache is warm for the timed runs)
        rows: dict = {"jit (numba cache warm)": [], "aot (numba not imported)": []}
        answers = {}
        for _ in range(args.reps):
            for label, code in zip(rows, (jit, aot)):
                text, wall, cpu = _fresh(code)
                answer, imported, _ = text.rsplit(" ", 2)
                answers.setdefault(label, set()).add(answer)
                rows[label].append((wall, cpu, imported))
        print(f"load average {os.getloadavg()[0]:.2f}")
        for label, runs in rows.items():
            walls = [w for w, _, _ in runs]
            cpus = [c for _, c, _ in runs]
            print(f"{label}: fresh process (import pld, MNIST and tiny-loss) wall median "
                  f"{statistics.median(walls):.2f} s, CPU median {statistics.median(cpus):.2f} s, "
                  f"numba imported: {runs[0][2]}")
        same = len(set.union(*answers.values())) == 1
        print(f"brackets identical: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
