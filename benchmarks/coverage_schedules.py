"""Coverage of schedules (issue 35): random 2-4-phase DP-SGD runs, short phases included.

Each schedule draws 2-4 phases log-uniformly from the coverage box (sigma 0.3-6,
q 3e-6-0.5, T 50-3e6); with probability one half one phase is a short warm-up
(sigma 2-12, q 1e-4-1e-2, T 1-20 steps), the shape that wrecked a schedule's
bracket before the big-jump decomposition carried the other phases.  delta is
log-uniform in [1e-12, 1e-4].  Each schedule runs in a worker process (killed
at the timeout, as in :mod:`benchmarks.coverage`), then its largest phase
(largest epsilon) alone and every phase alone, for the time ratios.

Reported: how many meet the default target (``upper - lower <= 1e-4 eps +
1e-6``), how many miss it with a warning (and whether a phase alone misses
too) and silently; the time against the leading phase alone and against all
phases alone together (median, worst); whether the schedule's bracket reaches
the leading phase's lower end (a composition is at least as leaky as a part).

Usage::

    nice python -m benchmarks.coverage_schedules --n 60 --seed 7 --jsonl /tmp/schedules.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks.coverage import DEFAULT_RANGES, Worker, target_width


def sample_schedules(n: int, seed: int, shape: str = "mixed") -> list[dict]:
    """``shape`` "mixed": 2-4 phases, half with a warm-up; "warmup": a warm-up then one
    phase from the box (the stop hook's schedules)."""
    rng = np.random.default_rng(seed)

    def logu(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))

    out = []
    for i in range(n):
        if shape == "warmup":
            warm = (round(logu(2.0, 12.0), 3), float(f"{logu(1e-4, 1e-2):.2g}"), int(rng.integers(1, 21)))
            main = (round(logu(*DEFAULT_RANGES["sigma"]), 4), float(f"{logu(*DEFAULT_RANGES['q']):.2g}"),
                    max(1, int(float(f"{logu(*DEFAULT_RANGES['T']):.2g}"))))
            out.append({"index": i, "phases": [warm, main],
                        "delta": float(f"{logu(*DEFAULT_RANGES['delta']):.1g}")})
            continue
        k = int(rng.integers(2, 5))
        phases = []
        for _ in range(k):
            phases.append((round(logu(*DEFAULT_RANGES["sigma"]), 4), float(f"{logu(*DEFAULT_RANGES['q']):.3g}"),
                           max(1, int(logu(*DEFAULT_RANGES["T"])))))
        if rng.random() < 0.5:
            phases[int(rng.integers(0, k))] = (round(logu(2.0, 12.0), 3), float(f"{logu(1e-4, 1e-2):.2g}"),
                                               int(rng.integers(1, 21)))
        out.append({"index": i, "phases": phases, "delta": float(f"{logu(*DEFAULT_RANGES['delta']):.2g}")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coverage_schedules",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--jsonl", type=Path)
    ap.add_argument("--shape", choices=("mixed", "warmup"), default="mixed",
                    help="mixed: 2-4 phases, half with a warm-up; warmup: a warm-up then one phase")
    a = ap.parse_args(argv)
    recs = []
    worker = Worker("schedule")
    try:
        for s in sample_schedules(a.n, a.seed, a.shape):
            status, res = worker.run(s, a.timeout)
            rec = dict(s, status=status, **(res if status == "ok" else {"message": res}))
            if status == "ok":
                rec["within"] = rec["upper"] - rec["lower"] <= target_width(rec["upper"])
                rec["warned"] = bool(rec["warnings"])
                rec["ratio"] = rec["wall"] / max(rec["alone_wall"], 1e-3)
                rec["ratio_sum"] = rec["wall"] / max(rec["sum_alone_wall"], 1e-3)
                rec["phase_warned"] = any(a["warned"] for a in rec["phases_alone"])
                rec["reaches_phase"] = rec["upper"] >= rec["alone"][0] * (1 - 1e-12)
            recs.append(rec)
            print(json.dumps(rec), file=sys.stderr, flush=True)
    finally:
        worker.stop()
    if a.jsonl:
        a.jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ok = [r for r in recs if r["status"] == "ok"]
    ratios = [r["ratio"] for r in ok]
    print(f"schedules: {len(recs)}; answered {len(ok)}; within target {sum(r['within'] for r in ok)}; "
          f"missed and warned {sum(not r['within'] and r['warned'] for r in ok)} "
          f"({sum(not r['within'] and r['phase_warned'] for r in ok)} of them with a phase that misses alone); "
          f"missed silently {sum(not r['within'] and not r['warned'] for r in ok)}; "
          f"upper end below its phase's lower end {sum(not r['reaches_phase'] for r in ok)}")
    if ratios:
        sums = [r["ratio_sum"] for r in ok]
        print(f"time / the leading phase alone (largest epsilon): median {statistics.median(ratios):.2f}, "
              f"max {max(ratios):.2f}; / all phases alone together: median {statistics.median(sums):.2f}, "
              f"max {max(sums):.2f}; "
              f"schedule time p50 {statistics.median(r['wall'] for r in ok):.3f} s, max {max(r['wall'] for r in ok):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
