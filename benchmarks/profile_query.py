"""Where one epsilon query's time goes: phases, kernels, and what the second core gives.

    python -m benchmarks.profile_query [--workload mnist] [--queries 60] [--out PATH]

For one workload of :data:`benchmarks.workloads.EQUAL_ACCURACY_WORKLOADS`
(fresh inputs each query, as :mod:`benchmarks.equal_accuracy` times them):

1. **Phases** (one thread, ``PLD_THREADS=1`` in a subprocess): inclusive
   time per query of the planner's estimates, each direction's shared
   preparation, each side's composition (split into the FFT power and the
   rest) and the grids' epsilon evaluations, by wrapping those functions.
2. **Kernels**: calls and time per query of every ``pld.kernels`` function,
   by call site.
3. **Threads**: mean wall and CPU per query with one thread and with the
   default (two sides side by side), the median of ``--rounds`` processes
   each, interleaved; the timeline of the median query (which thread ran
   the planner's estimates, each direction's preparation, each side and
   the evaluations, and when); and a GIL
   hand-off probe: two threads each calling a kernel on a 2000-entry array
   (a nogil call followed by a numpy reduction) against one thread doing
   both loops.  Below 1x means fine-grained GIL hand-offs cost more than
   the second core gives.

Means over ``--queries`` queries (noise on a shared 2-core VM is +-10% between
runs; compare within one run).  Writes markdown to stdout and ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: (module, attribute path) of the functions whose inclusive time is a phase
PHASES = [
    ("pld.engine.planner", "Planner.chernoff"),
    ("pld.engine.planner", "Planner.probe_settings"),
    ("pld.engine.planner", "Planner.first_spacing"),
    ("pld.engine.composer", "Composer._prepare"),
    ("pld.engine.composer", "_compose_components"),
    ("pld.engine.self_compose", "_power_start"),
    ("pld.engine.self_compose", "_block_power_start"),
    ("pld.engine.self_compose", "bulk_shift"),
    ("pld.engine.grid", "GridPLD.epsilon"),
]


def _workload(name: str):
    from benchmarks import workloads as W

    for w in W.EQUAL_ACCURACY_WORKLOADS:
        if w.name == name:
            (s, q, t), = w.phases
            return s, q, t, w.delta
    raise SystemExit(f"unknown workload {name!r}")


def _queries(name: str, n: int, warm: int = 5):
    import pld

    s, q, t, d = _workload(name)
    for k in range(warm):
        pld.dpsgd(s * (1 + k * 1e-12), q, t).epsilon_bounds(d)
    for k in range(n):
        yield lambda k=k: pld.dpsgd(s * (1 + (k + warm) * 1e-12), q, t).epsilon_bounds(d)


def _wrap(owner, attr: str, label: str, acc: collections.Counter, calls: collections.Counter, key_fn=None):
    f = getattr(owner, attr)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            key = label if key_fn is None else key_fn(a)
            acc[key] += time.perf_counter() - t0
            calls[key] += 1
    setattr(owner, attr, timed)


def phases(name: str, n: int) -> dict:
    """Inclusive ms per query of each phase and kernel call site (run in a
    ``PLD_THREADS=1`` process: wrappers are per process)."""
    import importlib

    import pld.kernels as K

    acc: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for mod, path in PHASES:
        owner = importlib.import_module(mod)
        parts = path.split(".")
        for p in parts[:-1]:
            owner = getattr(owner, p)
        key_fn = None
        if path == "_compose_components":
            def key_fn(a):  # (entry, h, lam, pessimistic, ...)
                return f"_compose_components ({'dominating' if a[3] else 'dominated'} side)"
        _wrap(owner, parts[-1], path, acc, calls, key_fn)
    kernels = {name_: getattr(K, name_) for name_ in K.__all__}
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("pld") or mod is K or mod is None:
            continue
        for kname, f in kernels.items():
            if getattr(mod, kname, None) is f:
                def site(a, kname=kname):
                    fr = sys._getframe(2)
                    return f"kernel {kname} <- {fr.f_code.co_filename.rsplit('/', 1)[-1]}:{fr.f_lineno}"
                _wrap(mod, kname, kname, acc, calls, site)
    total = 0.0
    queries = list(_queries(name, n))  # (runs the warm-up queries)
    acc.clear()
    calls.clear()
    for q in queries:
        t0 = time.perf_counter()
        q()
        total += time.perf_counter() - t0
    return {"total_ms": 1e3 * total / n,
            "rows": sorted(((k, 1e3 * v / n, calls[k] / n) for k, v in acc.items()), key=lambda r: -r[1])}


def timing(name: str, n: int) -> dict:
    queries = list(_queries(name, n))  # (runs the warm-up queries)
    t_wall = time.perf_counter()
    t_cpu = time.process_time()
    for q in queries:
        q()
    return {"wall_ms": 1e3 * (time.perf_counter() - t_wall) / n, "cpu_ms": 1e3 * (time.process_time() - t_cpu) / n}


#: (module, attribute path, label) of the spans the timeline records, per thread
TIMELINE = [
    ("pld.engine.planner", "Planner.chernoff", "planner: Chernoff estimate"),
    ("pld.engine.planner", "Planner.probe_settings", "planner: probe settings"),
    ("pld.engine.planner", "Planner.first_settings", "planner: first settings"),
    ("pld.engine.composer", "Composer._prepare", "preparation"),
    ("pld.engine.composer", "_compose_components", "side"),
    ("pld.engine.grid", "GridPLD.epsilon", "epsilon"),
]


def timeline(name: str, n: int) -> dict:
    """The spans of the median query (default threads): which thread ran
    what, when (ms from the query's start) and on how much of its CPU; the
    outermost call of each kind only (a span inside another of its own kind
    is not recorded)."""
    import importlib
    import threading

    spans: list = []
    depth: dict = {}

    def wrap(owner, attr: str, label: str) -> None:
        f = getattr(owner, attr)

        def timed(*a, **k):
            key = (threading.get_ident(), label)
            depth[key] = depth.get(key, 0) + 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return f(*a, **k)
            finally:
                depth[key] -= 1
                if not depth[key]:
                    what = label
                    if label == "preparation":
                        what = f"preparation ({a[1]}, h {a[2]:.3g})"
                    elif label == "side":
                        what = f"{'dominating' if a[3] else 'dominated'} side (h {a[1]:.3g})"
                    spans.append((threading.current_thread().name, what, t0, time.perf_counter(),
                                  time.thread_time() - c0))
        setattr(owner, attr, timed)

    for module, path, label in TIMELINE:
        owner = importlib.import_module(module)
        parts = path.split(".")
        for part in parts[:-1]:
            owner = getattr(owner, part)
        wrap(owner, parts[-1], label)
    runs = []
    for q in _queries(name, max(n, 1)):
        spans.clear()
        t0 = time.perf_counter()
        q()
        runs.append((time.perf_counter() - t0, t0, list(spans)))
    wall, t0, chosen = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    return {"wall_ms": 1e3 * wall,
            "spans": [(th, what, 1e3 * (a - t0), 1e3 * (b - t0), 1e3 * cpu)
                      for th, what, a, b, cpu in sorted(chosen, key=lambda sp: sp[2])]}


def gil_probe(iters: int = 20000) -> dict:
    import threading

    import numpy as np

    from pld.kernels import l1_l2_norms

    x = np.random.default_rng(0).random(2000)

    def work() -> None:
        for _ in range(iters):
            l1_l2_norms(x)
            x.sum()

    t0 = time.perf_counter()
    work()
    work()
    one = time.perf_counter() - t0
    threads = [threading.Thread(target=work) for _ in range(2)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    two = time.perf_counter() - t0
    return {"one_thread_s": one, "two_threads_s": two, "speedup": one / two}


def _child(kind: str, name: str, n: int, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.profile_query", "--child", kind,
                          "--workload", name, "--queries", str(n)],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True,
                         cwd=str(HERE.parent))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mnist")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3, help="timing processes per thread count (interleaved)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        fn = {"phases": phases, "timing": timing, "timeline": timeline}.get(args.child)
        print(json.dumps(gil_probe() if args.child == "gil" else fn(args.workload, args.queries)))
        return 0
    serial = {"PLD_THREADS": "1"}
    ph = _child("phases", args.workload, args.queries, serial)
    # (interleaved, three processes each: on a shared VM the speed drifts by
    # 10-15% over minutes, more than the difference asked about)
    runs: dict = {"1": [], "2": []}
    for _ in range(args.rounds):
        for k in runs:
            runs[k].append(_child("timing", args.workload, args.queries, {"PLD_THREADS": k}))
    t1, t2 = ({key: statistics.median(r[key] for r in runs[k]) for key in ("wall_ms", "cpu_ms")} for k in "12")
    gil = _child("gil", args.workload, 0, {})
    tl = _child("timeline", args.workload, min(args.queries, 15), {})
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
        load = f.read().split()[:3]
    s, q, t, d = _workload(args.workload)
    lines = [f"## Profile of one query: {args.workload} (sigma {s}, q {q:.3g}, T {t}, delta {d:g})", "",
             f"{args.queries} queries, fresh inputs; load {' '.join(load)}; `python -m benchmarks.profile_query "
             f"--workload {args.workload}`.", "",
             f"- one thread: wall {t1['wall_ms']:.1f} ms, CPU {t1['cpu_ms']:.1f} ms per query",
             f"- two threads (default): wall {t2['wall_ms']:.1f} ms, CPU {t2['cpu_ms']:.1f} ms per query",
             f"- GIL hand-off probe: two threads do {gil['speedup']:.2f}x the work of one in the same time",
             "", f"Inclusive time per query, one thread (instrumented total {ph['total_ms']:.1f} ms; "
                 "nested rows overlap):", "",
             "| where | ms / query | calls / query |", "|---|---|---|"]
    # (every phase; kernel call sites from 0.01 ms a query)
    lines += [f"| {k} | {v:.2f} | {c:.1f} |" for k, v, c in ph["rows"] if v >= 0.01 or not k.startswith("kernel ")]
    lines += ["", f"Timeline of the median query, default threads ({tl['wall_ms']:.1f} ms; outermost spans, "
                  "ms from its start; CPU of that thread; cache hits under 0.01 ms left out):", "",
              "| thread | span | start | end | CPU |", "|---|---|---|---|---|"]
    lines += [f"| {th} | {what} | {a:.2f} | {b:.2f} | {cpu:.2f} |" for th, what, a, b, cpu in tl["spans"]
              if b - a >= 0.01]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
