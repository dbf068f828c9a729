"""Sweep throughput: 10^4 DP-SGD configurations, measured on a random subset.

    python -m benchmarks.sweep [--subset 200] [--workers 2] [--json out.json]   # from the repository root

Configurations: sigma uniform in [0.5, 4], q log-uniform in [1e-4, 0.1], T
log-uniform in [1e3, 1e6] (integers), delta 1e-5, seed 0.  A random subset is
accounted

* serially in this process (pld's default: a query's two sides on two threads),
* on a pool of 1 worker process (one thread per query: the per-core cost),
* on a pool of ``--workers`` processes (the default engine of ``pld.sweep``),

and the rows of the pool are checked equal to the serial rows.  The sweep
machinery's own cost per configuration is measured with a no-op work function
over all 10^4 configurations (validation, chunking, pickling, ordering).  The
times of the subset extrapolate to the 10^4 (and to a cluster of W workers at
the measured per-worker rate).  The machine's load (``os.getloadavg``) is
printed next to the numbers: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import pld
from pld import sweeps


def configs(n: int = 10_000, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    sigma = rng.uniform(0.5, 4.0, n)
    q = 10 ** rng.uniform(-4, -1, n)
    steps = np.round(10 ** rng.uniform(3, 6, n)).astype(int)
    return [{"noise_multiplier": float(s), "sampling_rate": float(r), "steps": int(t), "delta": 1e-5}
            for s, r, t in zip(sigma, q, steps)]


def noop(config: dict) -> dict:
    """A row without accounting: what the machinery costs by itself."""
    return {"kind": config["kind"], "epsilon_upper": None, "seconds": 0.0}


def _busy(n: int = 3_000_000) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t0


def parallel_capacity(workers: int) -> float:
    """How many cores' worth of a busy loop ``workers`` processes get right now
    (``workers`` on an idle machine; less when others load it)."""
    import multiprocessing as mp

    alone = _busy()
    with mp.get_context("forkserver").Pool(workers) as pool:
        pool.map(_busy, [10_000] * workers)  # started
        t0 = time.perf_counter()
        pool.map(_busy, [3_000_000] * workers)
        together = time.perf_counter() - t0
    return workers * alone / together


def _cpu_seconds(pool) -> float:
    """User + system CPU seconds the pool's worker processes have used (Linux
    /proc; NaN elsewhere): the work a sweep costs whatever the machine's load,
    so 1 and W workers can be compared on a busy machine."""
    total = 0.0
    try:
        for pid in list(pool._processes):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return float("nan")
    return total


def _timed(label: str, fn) -> tuple[float, object]:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    print(f"  {label}: {wall:.2f} s (load before {load:.2f}, after {os.getloadavg()[0]:.2f})", flush=True)
    return wall, out


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    every = configs()
    rng = np.random.default_rng(1)
    subset = [every[i] for i in sorted(rng.choice(len(every), args.subset, replace=False))]
    print(f"pld {pld.__version__}; {len(every)} configurations, subset of {len(subset)}; "
          f"{os.cpu_count()} cores; load {os.getloadavg()}", flush=True)
    sweeps.sweep(subset[:2], executor="serial")  # this process's first kernel loads, not timed
    t_serial, serial = _timed("serial, this process", lambda: sweeps.sweep(subset, executor="serial"))

    cpu: dict = {}

    def pooled(n):
        with sweeps.process_pool(n) as pool:
            out = sweeps.sweep(subset, executor=pool)
            cpu[n] = _cpu_seconds(pool)
            return out

    t_one, one = _timed("pool of 1 worker (with its start)", lambda: pooled(1))
    t_pool, rows = _timed(f"pool of {args.workers} workers (with their start)", lambda: pooled(args.workers))
    print(f"  CPU seconds of the workers: 1 worker {cpu[1]:.1f}, {args.workers} workers {cpu[args.workers]:.1f}",
          flush=True)
    assert _strip(rows) == _strip(serial) == _strip(one), "pool rows differ from the serial rows"

    def noop_run(executor):
        return sweeps.sweep(every, executor=executor, work=noop, chunksize=None)

    t_noop_serial, _ = _timed("no-op work, 10^4 configurations, serial", lambda: noop_run("serial"))
    with sweeps.process_pool(args.workers) as pool:
        pool.submit(int).result()  # workers started: the per-configuration cost alone
        t_noop_pool, _ = _timed(f"no-op work, 10^4 configurations, {args.workers} workers",
                                lambda: noop_run(pool))
    capacity = parallel_capacity(args.workers)
    print(f"  parallel capacity now: {capacity:.2f} cores' worth for {args.workers} busy processes", flush=True)
    work = sum(r["seconds"] for r in serial)
    worst = max(serial, key=lambda r: r["seconds"])
    res = {
        "subset": len(subset), "workers": args.workers, "load_after": os.getloadavg(),
        "serial_s": t_serial, "pool1_s": t_one, "pool_s": t_pool,
        "serial_configs_per_s": len(subset) / t_serial, "pool1_configs_per_s": len(subset) / t_one,
        "pool_configs_per_s": len(subset) / t_pool, "speedup_vs_serial": t_serial / t_pool,
        "speedup_vs_pool1": t_one / t_pool,
        "work_s_serial": work, "work_s_pool1": sum(r["seconds"] for r in one),
        "work_s_pool": sum(r["seconds"] for r in rows), "parallel_capacity": capacity,
        "cpu_s_pool1": cpu[1], "cpu_s_pool": cpu[args.workers],
        "mean_config_s": work / len(subset), "median_config_s": float(np.median([r["seconds"] for r in serial])),
        "slowest_config": {k: worst[k] for k in ("noise_multiplier", "sampling_rate", "steps", "seconds")},
        "overhead_ms_per_config_serial": 1e3 * t_noop_serial / len(every),
        "overhead_ms_per_config_pool": 1e3 * t_noop_pool / len(every),
        "extrapolated_10k_serial_h": len(every) / (len(subset) / t_serial) / 3600,
        "extrapolated_10k_pool_h": len(every) / (len(subset) / t_pool) / 3600,
        "targets_missed": sum(r["target_met"] is False for r in serial),
        "errors": sum(r["error"] is not None for r in serial),
    }
    print(json.dumps(res, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
