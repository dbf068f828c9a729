"""Mutation check (issue 36): break one safe-side move of the engine, see which fast tests fail.

Each mutation below makes one approximation land on the unsafe side (a bound dropped, a share
rounded the wrong way, a margin shrunk).  For each, a fresh copy of the repository at ``HEAD`` gets
the one-line change, and the fast tests of the engine (``-m "not slow"``) run against it; the
report lists the tests that fail.  A mutation that no fast test catches is a missing test.

Usage (from the repository root; about an hour of one core: every kernel mutation recompiles)::

    nice python -m benchmarks.mutation_check --out /tmp/mutations.md
    python -m benchmarks.mutation_check --only fft_roundoff_dropped
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> (file, the exact text, its unsafe replacement, what it breaks)
MUTATIONS = {
    "fft_roundoff_dropped": (
        "pld/engine/grid.py",
        "err = self.err * b1 + other.err * a1 + fft_err",
        "err = 0.0 * (self.err * b1 + other.err * a1 + fft_err)",
        "the FFT convolution's round-off bound is not carried (dominating entries not raised by it)"),
    "spread_one_cell_down": (
        "kernels/discretize.py",
        "out[i + 1] = _logaddexp(out[i + 1], lp + math.log(frac_up))",
        "out[i] = _logaddexp(out[i], lp + math.log(frac_up))",
        "the dominating split puts its upper share one cell down (rounds losses down)"),
    "spread_share_low": (
        "kernels/discretize.py",
        "frac_up = min(1.0, frac_up + _PESSIMISTIC_SLACK)",
        "frac_up = max(0.0, frac_up * (1.0 - 1e-3))",
        "the dominating split's upper share 0.1% short (no longer a spread)"),
    "merge_margin_zero": (
        "kernels/merge_settle.py",
        "    return e_loss + 2.01 * e_mass * spread + (2.0 * k + 8.0) * _U * max(1.0, abs(li))",
        "    return 0.0 * (e_loss + 2.01 * e_mass * spread + (2.0 * k + 8.0) * _U * max(1.0, abs(li)))",
        "the dominated merge places buckets without the margin of their loss error"),
    "merge_one_cell_up": (
        "kernels/merge.py",
        "out[target[i]] += pb[i]  # merged loss at (or above) that grid point",
        "out[min(target[i] + 1, n - 1)] += pb[i]",
        "the dominated merge places a bucket one grid point above its merged loss"),
    "truncation_not_to_inf": (
        "pld/engine/grid.py",
        "inf_mass = min(1.0, inf_mass + moved)",
        "inf_mass = inf_mass",
        "mass the dominating side truncates above its window is dropped instead of sent to +inf"),
    "loss_cap_below_truth": (
        "pld/engine/queries.py",
        "    return engine.laws.largest_loss(d)\n",
        "    return engine.laws.largest_loss_bounds(d)[0] * (1.0 - 1e-3)\n",
        "delta is taken as 0 from just below the largest loss"),
    "closed_form_error_dropped": (
        "pld/engine/gaussian_exact.py",
        "    err = np.where(use_direct, direct_err, scaled_err)\n",
        "    err = 0.0 * np.where(use_direct, direct_err, scaled_err)\n",
        "the Gaussian closed form's special-function error is not added"),
    "evaluator_slack_dropped": (
        "pld/engine/grid.py",
        "        slack = (gamma[m] + 4.0 * _U) * (a + x * b + 4.0 * em) + x * b * x_rel\n",
        "        slack = 0.0 * ((gamma[m] + 4.0 * _U) * (a + x * b + 4.0 * em) + x * b * x_rel)\n",
        "the evaluator's suffix-sum rounding is not added"),
}

#: the fast tests of the engine and its references
TESTS = ["tests/test_engine_exact.py", "tests/test_grid.py", "tests/test_discretize.py", "tests/test_fft.py",
         "tests/test_power.py", "tests/test_exact_certificates.py", "tests/test_dominated_bottom.py",
         "tests/test_bulk_shift.py", "tests/test_bulk_dominated.py", "tests/test_gaussian_exact.py",
         "tests/test_properties.py", "tests/test_reference_table.py", "tests/test_engine_vs_oracle.py",
         "tests/test_block_power.py", "tests/test_cell_errors.py", "tests/test_edges.py"]


def _copy(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if not name:
            continue
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    (dst / "pld" / "kernels").symlink_to(dst / "kernels")


def run(name: str, timeout: float) -> dict:
    path, old, new, what = MUTATIONS[name]
    with tempfile.TemporaryDirectory(prefix=f"pld-mut-{name}-") as tmp:
        work = Path(tmp)
        _copy(work)
        src = (work / path).read_text()
        if src.count(old) != 1:
            return {"name": name, "what": what, "error": f"the text to mutate is not once in {path}"}
        (work / path).write_text(src.replace(old, new))
        env = dict(os.environ, PYTHONPATH=str(work), PLD_KERNELS_AOT="off", PLD_TIME_BUDGET="0")
        t0 = time.time()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                            "--maxfail=20", *TESTS], cwd=work, env=env, capture_output=True, text=True,
                           timeout=timeout)
        failed = sorted(set(re.findall(r"^FAILED (\S+)", p.stdout, flags=re.M)))
        tail = p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else []
        return {"name": name, "what": what, "failed": failed, "summary": tail, "seconds": time.time() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.mutation_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    lines = ["| mutation | what it breaks | fast tests that fail |", "|---|---|---|"]
    for name in a.only or list(MUTATIONS):
        r = run(name, a.timeout)
        print(r, flush=True)
        if "error" in r:
            caught = r["error"]
        elif r["failed"]:
            shown = ", ".join(f"`{f.split('::')[0].removeprefix('tests/')}::{f.split('::')[-1][:50]}`"
                              for f in r["failed"][:4])
            caught = f"{len(r['failed'])}{'+' if len(r['failed']) >= 20 else ''}: {shown}"
        else:
            caught = "**none** (a missing test)"
        lines.append(f"| `{name}` | {r['what']} | {caught} |")
    md = "\n".join(lines) + "\n"
    print(md)
    if a.out:
        a.out.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
