"""Sweep throughput: 10^4 DP-SGD configurations, measured on a random subset.

    python -m benchmarks.sweep [--subset 1000] [--workers 2] [--rounds 2] [--json out.json]   # from the repo root

Configurations: sigma uniform in [0.5, 4], q log-uniform in [1e-4, 0.1], T
log-uniform in [1e3, 1e6] (integers), delta 1e-5, seed 0.  A random subset is
accounted, in each of ``--rounds`` rounds, in every mode:

* serially in this process (pld's default: a query's two sides on two threads),
* on a pool of 1 worker process (one thread per query: the per-core cost),
* on a pool of ``--workers`` processes (the default engine of ``pld.sweep``),
* the same pool with the configurations sent in input order (``balance=False``),

the modes of a round interleaved in a rotating order, so that the ratios
compare runs made in the same minutes of a shared machine.  A pool's time
includes starting its workers (forked from the forkserver, which is started,
once per process, before the rounds: its start is printed apart), and the rows
of every mode are checked equal to the serial rows.  The sweep machinery's own
cost per configuration is measured with a no-op work function over all 10^4
configurations (validation, cost estimates, chunking, pickling, ordering).
The machine's load (``os.getloadavg``) is printed next to every number, with
the CPU seconds each mode used: on a shared machine wall times move with the
load, CPU seconds much less.  Where Linux shares CPU between sessions
(autogroup, printed), a busy machine gives the benchmark one session's share
however many workers it runs, so the speed-ups only show on a quiet machine;
each mode's time on an idle machine is therefore also estimated from CPU
accounting: a pool's busiest worker's CPU seconds, and for the in-process run
its main thread's CPU seconds plus the part of its sleep (waiting for a side
thread) the side threads spent on a CPU (per-thread ``schedstat``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import pld
from pld.accounting import sweeps


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


def _worker_cpu_seconds(pool) -> list[float]:
    """User + system CPU seconds each of the pool's worker processes has used
    (Linux /proc; empty elsewhere): the work a sweep costs whatever the
    machine's load."""
    out = []
    try:
        for pid in list(pool._processes):
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    except (OSError, AttributeError, ValueError, IndexError):
        return []
    return out


def _schedstat() -> dict[int, tuple[float, float]]:
    """This process's threads: ``{tid: (seconds on a CPU, seconds runnable but
    waiting for one)}`` (Linux /proc/<pid>/task/<tid>/schedstat; empty elsewhere)."""
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, _ = (int(x) for x in f.read().split())
            out[int(tid)] = (run / 1e9, wait / 1e9)
    except (OSError, ValueError):
        return {}
    return out


def _serial_idle_estimate(before: dict, after: dict, wall: float) -> dict:
    """What the in-process run would take on an otherwise idle machine.

    The main thread is, at every moment, on a CPU, waiting for one (the load's
    doing), or asleep: waiting for a side thread's result.  On an idle machine
    the first stays, the second goes, and the third shrinks to the part the
    side thread spent on a CPU (``rho``, its share of its runnable time).
    Bounds: the main thread's CPU time, and that plus all its sleep.
    """
    import threading

    main = threading.get_native_id()
    d = {t: (a[0] - before.get(t, (0.0, 0.0))[0], a[1] - before.get(t, (0.0, 0.0))[1]) for t, a in after.items()}
    if main not in d:
        return {}
    main_cpu, main_wait = d[main]
    side_cpu = sum(v[0] for t, v in d.items() if t != main)
    side_wait = sum(v[1] for t, v in d.items() if t != main)
    asleep = max(wall - main_cpu - main_wait, 0.0)
    rho = side_cpu / (side_cpu + side_wait) if side_cpu + side_wait > 0 else 1.0
    return {"main_cpu_s": main_cpu, "main_runnable_waiting_s": main_wait, "main_asleep_s": asleep,
            "side_cpu_s": side_cpu, "side_runnable_waiting_s": side_wait,
            "idle_estimate_s": main_cpu + rho * asleep, "idle_bounds_s": [main_cpu, main_cpu + asleep]}


def _autogroup() -> str | None:
    """Whether the kernel shares CPU between sessions rather than threads (then
    a busy machine gives this run one session's share however many workers it
    has, and wall-clock speed-ups say little)."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return "on" if f.read().strip() == "1" else "off"
    except OSError:
        return None


def _timed(label: str, fn) -> tuple[float, object]:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    print(f"  {label}: {wall:.2f} s (load before {load:.2f}, after {os.getloadavg()[0]:.2f})", flush=True)
    return wall, out


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


MODES = ("serial", "pool1", "pool", "pool_input_order")


def _run_mode(mode: str, subset: list, workers: int) -> dict:
    """One timed sweep of ``subset``: wall and CPU seconds, load before and after."""
    load = os.getloadavg()[0]
    c0 = time.process_time()
    s0 = _schedstat()
    t0 = time.perf_counter()
    per_worker: list[float] = []
    if mode == "serial":
        rows = sweeps.sweep(subset, executor="serial")
    else:
        n = 1 if mode == "pool1" else workers
        with sweeps.process_pool(n) as pool:
            rows = sweeps.sweep(subset, executor=pool, balance=mode != "pool_input_order")
            per_worker = _worker_cpu_seconds(pool)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0 + sum(per_worker)
    out = {"mode": mode, "wall_s": wall, "configs_per_s": len(subset) / wall, "cpu_s": cpu,
           "work_s": sum(r["seconds"] for r in rows), "load_before": load, "load_after": os.getloadavg()[0]}
    # on an idle machine: a pool takes its busiest worker's CPU time (each has a
    # core), the in-process run what its threads' accounting says
    if mode == "serial":
        out.update(_serial_idle_estimate(s0, _schedstat(), wall))
    elif per_worker:
        out.update(worker_cpu_s=per_worker, idle_estimate_s=max(per_worker))
    idle = out.get("idle_estimate_s")
    if idle:
        out["idle_configs_per_s"] = len(subset) / idle
    print(f"  {mode:>16}: {wall:6.2f} s wall, {out['configs_per_s']:5.1f} configs/s, {cpu:6.1f} CPU s, "
          f"idle-machine estimate {idle or float('nan'):6.2f} s (load {load:.2f} -> {out['load_after']:.2f})",
          flush=True)
    return out | {"rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES) or "serial" not in modes:
        ap.error(f"--modes: a list of {', '.join(MODES)} including serial")
    every = configs()
    rng = np.random.default_rng(1)
    subset = [every[i] for i in sorted(rng.choice(len(every), args.subset, replace=False))]
    print(f"pld {pld.__version__}; {len(every)} configurations, subset of {len(subset)}; "
          f"{os.cpu_count()} cores; load {os.getloadavg()}", flush=True)
    sweeps.sweep(subset[:2], executor="serial")  # this process's first kernel loads, not timed
    t0 = time.perf_counter()
    with sweeps.process_pool(1) as pool:
        pool.submit(int).result()  # the forkserver (pld imported, kernels loaded), once per process
    forkserver_s = time.perf_counter() - t0
    print(f"  forkserver start (once per process): {forkserver_s:.2f} s", flush=True)

    runs: list[dict] = []
    serial_rows = None
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        print(f"round {r + 1}: {', '.join(order)}", flush=True)
        for mode in order:
            out = _run_mode(mode, subset, args.workers)
            rows = out.pop("rows")
            if serial_rows is None:
                serial_rows = _strip(rows)
            assert _strip(rows) == serial_rows, f"{mode}: rows differ from the first run's"
            runs.append(out | {"round": r + 1})

    def per(mode, key="configs_per_s"):
        return [x[key] for x in runs if x["mode"] == mode]

    # ratios within each round (the modes of a round ran in the same minutes)
    def ratios(num, den):
        return [a / b for a, b in zip(per(num), per(den))]

    def noop_run(executor):
        return sweeps.sweep(every, executor=executor, work=noop, chunksize=None)

    t_noop_serial, _ = _timed("no-op work, 10^4 configurations, serial", lambda: noop_run("serial"))
    with sweeps.process_pool(args.workers) as pool:
        pool.submit(int).result()  # workers started: the per-configuration cost alone
        t_noop_pool, _ = _timed(f"no-op work, 10^4 configurations, {args.workers} workers",
                                lambda: noop_run(pool))
    capacity = parallel_capacity(args.workers)
    print(f"  parallel capacity now: {capacity:.2f} cores' worth for {args.workers} busy processes", flush=True)
    serial_cps = statistics.median(per("serial"))
    pool_cps = statistics.median(per("pool")) if "pool" in modes else float("nan")
    res: dict = {
        "subset": len(subset), "workers": args.workers, "rounds": args.rounds, "forkserver_start_s": forkserver_s,
        "runs": runs,
        "median_configs_per_s": {m: statistics.median(per(m)) for m in modes},
        "median_cpu_s": {m: statistics.median(per(m, "cpu_s")) for m in modes},
        "autogroup": _autogroup(),
        "parallel_capacity": capacity,
        "overhead_ms_per_config_serial": 1e3 * t_noop_serial / len(every),
        "overhead_ms_per_config_pool": 1e3 * t_noop_pool / len(every),
        "extrapolated_10k_serial_min": len(every) / serial_cps / 60,
        "extrapolated_10k_pool_min": len(every) / pool_cps / 60,
    }
    for num, den in (("pool", "serial"), ("pool", "pool1"), ("serial", "pool1"), ("pool", "pool_input_order")):
        if num in modes and den in modes:
            rs = ratios(num, den)
            res[f"{num}_over_{den}"] = {"per_round": rs, "median": statistics.median(rs)}
            try:
                rs = [a / b for a, b in zip(per(num, "idle_configs_per_s"), per(den, "idle_configs_per_s"))]
                res[f"{num}_over_{den}_idle_estimate"] = {"per_round": rs, "median": statistics.median(rs)}
            except (KeyError, statistics.StatisticsError):
                pass
    if "pool1" in modes:
        res["per_worker_configs_per_s"] = statistics.median(per("pool1"))
    print(json.dumps(res, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
