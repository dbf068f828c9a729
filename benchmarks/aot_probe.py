"""The kernels built ahead of time against the warm JIT cache, in fresh processes.

    python -m benchmarks.aot_probe [--dir DIR] [--reps N]

Issue 23, item 4 (a fresh ``pld dpsgd`` <= 0.5 s).  A process whose numba
cache is warm still imports numba (~0.2-0.3 s) and initialises its JIT on the
first kernel it loads (~0.2 s), then loads each kernel (~5-10 ms): most of a
fresh query's second.  This builds the module of :mod:`pld.kernels._aot` (what
``pld.warm(ahead_of_time=True)`` builds) in a temporary directory, then times
fresh processes answering the MNIST and tiny-loss queries with the JIT
kernels (``PLD_KERNELS_AOT=off``) and with the module
(``PLD_KERNELS_AOT=DIR``), and checks that both give the same brackets, bit
for bit, and that the second never imports numba.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

_QUERY = ("import sys, time\n"
          "import pld\n"
          "a = pld.dpsgd(1.1, 256 / 60000, 14063).epsilon_bounds(1e-5)\n"
          "b = pld.dpsgd(4.0, 0.00033, 10000).epsilon_bounds(1e-12)\n"
          "print(repr((a, b)), 'numba' in sys.modules, len(pld.kernels.AHEAD_OF_TIME))\n")


def build(base: str) -> float:
    """Build the module under ``base`` (as ``PLD_KERNELS_AOT=base`` finds it);
    returns the seconds it took."""
    from pld.engine import warm as _jit_warm
    from pld.kernels import _aot

    t0 = time.perf_counter()
    os.environ["PLD_KERNELS_AOT"] = base
    try:
        _aot.build(_jit_warm.find_kernels(), _aot.directory())
    finally:
        del os.environ["PLD_KERNELS_AOT"]
    return time.perf_counter() - t0


def _fresh(code: str, aot: str) -> tuple[str, float, float]:
    """Run ``code`` in a fresh interpreter: (stdout, wall, child CPU seconds)."""
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PLD_KERNELS_AOT=aot))
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
        print(f"building the kernels ahead of time under {out_dir} ...", file=sys.stderr)
        print(f"build: {build(out_dir):.1f} s")
        _fresh(_QUERY, "off")  # (the JIT cache is warm for the timed runs)
        rows: dict = {"jit (numba cache warm)": [], "ahead of time": []}
        answers = {}
        for _ in range(args.reps):
            for label, aot in zip(rows, ("off", out_dir)):
                text, wall, cpu = _fresh(_QUERY, aot)
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
