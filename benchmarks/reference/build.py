"""Regenerate ``dpsgd_table.json``: ``python -m benchmarks.reference.build [--only NAME] [--jobs J]``.

Resumable: settings already in the table (same name and oracle version) are skipped, and every
finished setting is written at once.  Run under ``nice`` with one BLAS/FFT thread per job.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

TABLE = Path(__file__).with_name("dpsgd_table.json")


def _record(setting, res: dict, target: float) -> dict:
    from .oracle import ORACLE_VERSION

    dirs = res["directions"]
    return {
        "name": setting.name,
        "adjacency": setting.adjacency,
        "phases": [[float(s), float(q), int(t)] for s, q, t in setting.phases],
        "delta": setting.delta,
        "lower": float(res["lower"]),
        "upper": float(res["upper"]),
        "rel_width": float(res["rel_width"]),
        "within_target": bool(res["rel_width"] <= target),
        "target": target,
        "h": float(res["h"]),
        "points": int(max(d.get("N", 0) for d in dirs.values())),
        "cells": int(sum(d.get("cells", 0) for d in dirs.values())),
        "seconds": round(float(res["total_seconds"]), 1),
        "oracle_version": ORACLE_VERSION,
        "directions": {k: {kk: (float(vv) if isinstance(vv, float) or hasattr(vv, "dtype") else vv)
                           for kk, vv in d.items()} for k, d in dirs.items()},
        "history": res["history"],
    }


def _run_one(args: tuple) -> dict:
    name, target, budget = args
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = "1"
    from .oracle import reference_epsilon
    from .settings import all_settings

    setting = {s.name: s for s in all_settings()}[name]
    t0 = time.time()
    try:
        res = reference_epsilon(setting, target=target, time_budget=budget)
    except Exception as exc:  # record the failure, keep going
        return {"name": name, "error": f"{type(exc).__name__}: {exc}", "seconds": time.time() - t0}
    return _record(setting, res, target)


def load() -> list[dict]:
    if TABLE.exists():
        return json.loads(TABLE.read_text())["settings"]
    return []


def save(records: list[dict]) -> None:
    from .oracle import ORACLE_VERSION
    from .settings import all_settings

    order = {s.name: i for i, s in enumerate(all_settings())}
    records = sorted(records, key=lambda r: order.get(r["name"], math.inf))
    doc = {"description": "Independent reference brackets for composed Poisson-subsampled Gaussian (DP-SGD) "
                          "accounting; see docs/reference-oracle.md. epsilon in [lower, upper] at delta.",
           "oracle_version": ORACLE_VERSION, "settings": records}
    tmp = TABLE.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(TABLE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", action="append", help="run only this setting (repeatable); re-runs it")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--target", type=float, default=2e-5, help="relative bracket width to reach")
    ap.add_argument("--budget", type=float, default=1200.0, help="seconds per setting")
    a = ap.parse_args(argv)
    from .oracle import ORACLE_VERSION
    from .settings import all_settings

    records = [r for r in load() if "error" not in r]
    done = {r["name"] for r in records if r.get("oracle_version") == ORACLE_VERSION}
    names = [s.name for s in all_settings()]
    if a.only:
        names = [n for n in names if n in a.only]
        records = [r for r in records if r["name"] not in a.only]
        done -= set(a.only)
    todo = [n for n in names if n not in done]
    print(f"{len(todo)} settings to run ({len(done)} in the table)", flush=True)
    jobs = [(n, a.target, a.budget) for n in todo]
    if a.jobs > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(a.jobs, maxtasksperchild=1) as pool:
            for rec in pool.imap_unordered(_run_one, jobs):
                _report(rec, records)
    else:
        for j in jobs:
            _report(_run_one(j), records)
    return 0


def _report(rec: dict, records: list[dict]) -> None:
    if "error" in rec:
        print(f"{rec['name']}: FAILED {rec['error']}", flush=True)
        return
    records[:] = [r for r in records if r["name"] != rec["name"]] + [rec]
    save(records)
    print(f"{rec['name']}: [{rec['lower']:.9g}, {rec['upper']:.9g}] rel {rec['rel_width']:.2e} "
          f"h {rec['h']:.3g} N {rec['points']} {rec['seconds']:.0f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
