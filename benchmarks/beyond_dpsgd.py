"""Timings and brackets beyond DP-SGD (issue 41): BandMF, MMCC, user-level DP, the discrete Gaussian.

Run: ``python benchmarks/beyond_dpsgd.py [--json out.json]``.  Every case runs in a fresh
subprocess (so the first query pays what a user's first query pays: the engine warm, numba's
cache on disk, no PLD cached), and prints wall time, the certified bracket at delta = 1e-5, and,
where a peer is installed, the peer's answer and time:

* ``bandmf_2000x64``: 2000 steps, 64 bands, a decaying Toeplitz strategy (target <= 1 s), beside
  dp_accounting's PLD accountant on jax_privacy's ``amplified_bandmf_event`` (the same
  composition, with every column at full norm);
* ``mmcc_2000_dense``: MMCC for T = 2000 with a dense Toeplitz strategy ``c_k = 1/sqrt(k+1)``
  (target <= 60 s); the Monte Carlo accountants (jax_privacy's ``experimental/monte_carlo``,
  opake) are not installed here and are not certified;
* ``user_level_k4``: DP-SGD with 4 records per user, beside dp_accounting's
  MixtureOfGaussiansDpEvent (jax_privacy's user-level accountant);
* ``discrete_gaussian``: 1000 releases of the discrete Gaussian at sigma 20.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CASES = {
    "bandmf_2000x64": """
        import numpy as np, pld
        c = 1.0 / np.sqrt(np.arange(1, 65))
        p = pld.bandmf(1.0, 0.2, 2000, bands=64, strategy=c)
        result = p.epsilon_bounds(1e-5)
    """,
    "bandmf_2000x64_dp_accounting": """
        import math, dp_accounting as dpa
        acc = dpa.pld.PLDAccountant()
        acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.0)),
                                            math.ceil(2000 / 64)))
        result = acc.get_epsilon(1e-5)
    """,
    "mmcc_2000_dense": """
        import numpy as np, pld, warnings
        warnings.simplefilter("ignore")
        p = pld.mmcc(1.0 / np.sqrt(np.arange(1, 2001)), 20.0, 0.01, steps=2000, gradients="aligned")
        result = p.epsilon_bounds(1e-5)
    """,
    "mmcc_2000_dense_adaptive": """
        import numpy as np, pld, warnings
        warnings.simplefilter("ignore")
        p = pld.mmcc(1.0 / np.sqrt(np.arange(1, 2001)), 20.0, 0.01, steps=2000, gradients="adaptive")
        result = p.epsilon_bounds(1e-5)
    """,
    "user_level_k4": """
        import pld
        result = pld.dpsgd(1.0, 0.01, 10000, records_per_user=4).epsilon_bounds(1e-5)
    """,
    "user_level_k4_dp_accounting": """
        import dp_accounting as dpa
        from scipy import stats
        ev = dpa.dp_event.MixtureOfGaussiansDpEvent(1.0, list(range(5)), [float(stats.binom.pmf(j, 4, 0.01))
                                                                          for j in range(5)])
        acc = dpa.pld.PLDAccountant()
        acc.compose(ev, 10000)
        result = acc.get_epsilon(1e-5)
    """,
    "discrete_gaussian": """
        import pld, warnings
        warnings.simplefilter("ignore")
        result = pld.DiscreteGaussian(20.0).pld().self_compose(1000).epsilon_bounds(1e-5)
    """,
}

_WRAP = """
import time
t0 = time.perf_counter()
{body}
print(repr((time.perf_counter() - t0, result)))
"""


def run_case(name: str) -> dict:
    code = _WRAP.format(body=textwrap.dedent(CASES[name]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["failed"])[-1]
        return {"case": name, "error": last}
    seconds, result = eval(out.stdout.strip().splitlines()[-1])  # (our own repr of floats)
    return {"case": name, "seconds": round(seconds, 3), "result": result}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("cases", nargs="*", help=f"cases to run (default all: {', '.join(CASES)})")
    args = ap.parse_args()
    rows = [run_case(c) for c in (args.cases or CASES)]
    for r in rows:
        print(json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
