"""Coverage benchmark (issue 19, item 5): how often does pld meet its bracket target?

A seeded random sample of DP-SGD settings, log-uniform in each parameter,

    sigma in [0.3, 6], q in [3e-6, 0.5], T in [50, 3e6], delta in [1e-12, 1e-4],

is run through ``pld.dpsgd(sigma, q, T).epsilon_bounds(delta)``, each call in a worker process
that is killed (and replaced) when it exceeds ``--timeout-per-setting``, so one slow setting
cannot hang the run.  Warnings raised by the call are recorded.  The report gives

* the fraction of settings whose bracket meets the default target
  ``upper - lower <= 1e-4 * epsilon + 1e-6`` (``epsilon`` = the bracket's upper end, the value
  pld reports; ``pld.engine.targets.EPS_RTOL``/``EPS_ATOL``),
* how many missed it *silently* (no warning raised),
* the worst width ratio ``(upper - lower) / target``,
* p50/p95/max wall time of the call (fresh PLD, kernels warm),
* a self-consistency check on independent grids: ``delta_bounds(upper)[0] <= delta <=
  delta_bounds(lower)[1]`` (``delta(epsilon)`` is non-increasing, ``upper`` is at or above the
  true epsilon and ``lower`` at or below it, so a certified curve must satisfy both),
* independent references where available:

  - dp_accounting's ``PLDAccountant`` (connect-the-dots, pessimistic) at a fine
    ``value_discretization_interval`` on a random subsample and on the worst settings.  It is a
    one-sided *upper* estimate, so it must be ``>= pld's lower end``; below it means one of the
    two is wrong (dp_accounting's untilted FFT round-off only ever pushes it up, so a violation
    points at pld first).
  - the tilted rounding oracle of ``tests/oracles.py`` (numpy/scipy only, no pld) on the worst
    settings, when it fits in ``--oracle-max-points``: a certified-ish bracket whose width is
    ``T*h`` (``h`` = its grid spacing); pld's bracket must intersect it.

Outputs: a JSONL file with one record per setting (``--jsonl``) and a markdown section for
``benchmarks/RESULTS.md`` (``--out``; printed to stdout as well).

Usage (from the repository root, pld installed)::

    nice python -m benchmarks.coverage --n 300 --seed 19 --out /tmp/coverage.md --jsonl /tmp/coverage.jsonl
    python -m benchmarks.coverage --from-jsonl /tmp/coverage.jsonl --oracle-worst 10   # references only
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import multiprocessing as mp
import os
import platform
import resource
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

#: the default bracket target of pld (``pld.engine.targets.EPS_RTOL``, ``EPS_ATOL``), restated here so the
#: instrument does not move when the engine's constants do
TARGET_RTOL = 1e-4
TARGET_ATOL = 1e-6

#: default sampling box (issue 19): log-uniform in each coordinate
DEFAULT_RANGES = {
    "sigma": (0.3, 6.0),
    "q": (3e-6, 0.5),
    "T": (50, 3_000_000),
    "delta": (1e-12, 1e-4),
}


def target_width(eps_upper: float, rtol: float = TARGET_RTOL, atol: float = TARGET_ATOL) -> float:
    """The default bracket target ``rtol * epsilon + atol`` (``epsilon`` = reported upper end)."""
    return rtol * max(eps_upper, 0.0) + atol


@dataclass(frozen=True)
class Setting:
    """One DP-SGD question: Poisson rate ``q``, noise multiplier ``sigma``, ``T`` steps, ``delta``."""

    index: int
    sigma: float
    q: float
    T: int
    delta: float

    def key(self) -> tuple:
        return (self.sigma, self.q, self.T, self.delta)


def sample_settings(n: int, seed: int, ranges: Optional[dict] = None) -> list[Setting]:
    """``n`` settings drawn log-uniformly from ``ranges`` with a seeded generator.

    Each setting takes four consecutive uniforms from one ``numpy.random.default_rng(seed)``
    stream, so the first ``k`` settings of a run with ``n > k`` are those of a run with ``n = k``.
    ``T`` is rounded to the nearest integer.
    """
    r = dict(DEFAULT_RANGES)
    r.update(ranges or {})
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        u = rng.random(4)

        def logu(lo_hi, x):
            lo, hi = lo_hi
            return math.exp(math.log(lo) + x * (math.log(hi) - math.log(lo)))

        out.append(Setting(
            index=i,
            sigma=logu(r["sigma"], u[0]),
            q=logu(r["q"], u[1]),
            T=max(1, int(round(logu(r["T"], u[2])))),
            delta=logu(r["delta"], u[3]),
        ))
    return out


# ---- worker processes -------------------------------------------------------------------------


def _limit_memory(fraction: float) -> None:
    """Cap this process' address space at ``fraction`` of MemAvailable (at least 4 GiB), so a
    setting that outgrows a shared machine fails with MemoryError instead of waking the OOM
    killer."""
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return
    cap = max(4 << 30, int(fraction * avail))
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ValueError, OSError):
        pass


def consistent(lower: float, delta: float, at_upper, at_lower) -> bool:
    """The self-consistency check of one bracket against the engine's own delta brackets.

    The true epsilon lies in [lower, upper] and delta(epsilon) is continuous and non-increasing,
    so delta_true(upper) <= delta (certified upper end) and, when epsilon > 0, delta_true(lower)
    >= delta; certified delta brackets must allow both: ``at_upper[0] <= delta`` and
    ``delta <= at_lower[1]``.  When the bracket's lower end is 0, epsilon may be 0 with
    delta(0) < delta (epsilon(delta) is the smallest epsilon >= 0), and only the first holds.
    """
    return bool(at_upper[0] <= delta and (lower <= 0.0 or delta <= at_lower[1]))


def _task_pld(t: dict) -> dict:
    import pld

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c0, w0 = time.process_time(), time.perf_counter()
        d = pld.dpsgd(t["sigma"], t["q"], t["T"])
        lo, hi = d.epsilon_bounds(t["delta"])
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    out = {"lower": float(lo), "upper": float(hi), "wall": wall, "cpu": cpu,
           "warnings": [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught]}
    if t.get("consistency", True):
        # delta(epsilon) is non-increasing and the true epsilon lies in [lo, hi]:
        # delta_true(hi) <= delta <= delta_true(lo) (see consistent()).
        with warnings.catch_warnings(record=True) as caught2:
            warnings.simplefilter("always")
            w0 = time.perf_counter()
            d_at_hi = d.delta_bounds(hi)
            d_at_lo = d.delta_bounds(lo)
            out["consistency_wall"] = time.perf_counter() - w0
        out["delta_bounds_at_upper"] = [float(x) for x in d_at_hi]
        out["delta_bounds_at_lower"] = [float(x) for x in d_at_lo]
        out["consistent"] = consistent(float(lo), t["delta"], out["delta_bounds_at_upper"], out["delta_bounds_at_lower"])
        out["consistency_warnings"] = [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught2]
    return out


def _task_dp_accounting(t: dict) -> dict:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    w0 = time.perf_counter()
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=t["vdi"])
    acc.compose(dp_event.PoissonSampledDpEvent(t["q"], dp_event.GaussianDpEvent(t["sigma"])), int(t["T"]))
    eps = float(acc.get_epsilon(t["delta"]))
    return {"upper": eps, "wall": time.perf_counter() - w0, "vdi": t["vdi"]}


def _task_oracle(t: dict) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    import oracles  # tests/oracles.py: numpy/scipy only

    w0 = time.perf_counter()
    r = oracles.subsampled_gaussian_epsilon(t["sigma"], t["q"], t["T"], t["delta"],
                                            width=t.get("width"), max_points=t["max_points"])
    return {"lower": r.lower, "upper": r.upper, "h": r.h, "points": r.points,
            "wall": time.perf_counter() - w0}


def _task_schedule(t: dict) -> dict:
    """A schedule of phases ``[(sigma, q, T), ...]``, and its largest phase (most steps) alone."""
    import pld

    phases = [tuple(p) for p in t["phases"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w0 = time.perf_counter()
        lo, hi = pld.dpsgd_schedule(phases).epsilon_bounds(t["delta"])
        wall = time.perf_counter() - w0
    alone = []
    for ph in phases:  # (each phase alone: its bracket, time, and whether it met its target)
        with warnings.catch_warnings(record=True) as c2:
            warnings.simplefilter("always")
            w0 = time.perf_counter()
            a_lo, a_hi = pld.dpsgd(*ph).epsilon_bounds(t["delta"])
            alone.append({"bracket": [float(a_lo), float(a_hi)], "wall": time.perf_counter() - w0,
                          "warned": bool(c2)})
    lead = max(alone, key=lambda a: a["bracket"][1])  # (the phase that leaks the most)
    return {"lower": float(lo), "upper": float(hi), "wall": wall, "phases_alone": alone,
            "alone_wall": lead["wall"], "alone": lead["bracket"],
            "slowest_alone_wall": max(a["wall"] for a in alone), "sum_alone_wall": sum(a["wall"] for a in alone),
            "warnings": [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught]}


def _task_sleep(t: dict) -> dict:
    """A task that hangs for ``seconds`` (tests the timeout path)."""
    time.sleep(t["seconds"])
    return {"slept": t["seconds"]}


_TASKS = {"pld": _task_pld, "dp_accounting": _task_dp_accounting, "oracle": _task_oracle, "sleep": _task_sleep,
          "schedule": _task_schedule}


def serve(conn, fn, mem_fraction: float, warm_up=()) -> None:
    """A worker's loop: capped memory, estimated FFT plans (as on a fresh install), ``fn`` called
    on each ``warm_up`` task first (the kernels loaded before the first timed call; a failure there
    is reported by the first real task instead), then every task received until ``None``; a
    failure is sent back as a data point."""
    _limit_memory(mem_fraction)
    os.environ.setdefault("PLD_FFTW_WISDOM", "off")
    for task in warm_up:
        try:
            fn(task)
        except Exception:  # noqa: BLE001
            pass
    conn.send(("ready", None))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            conn.send(("ok", fn(task)))
        except MemoryError:
            conn.send(("error", "MemoryError (address-space cap)"))
        except Exception as exc:  # noqa: BLE001 -- any failure is a data point
            tb = traceback.format_exc().strip().splitlines()
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300] + " | " + " / ".join(tb[-3:])[:500]))


def _worker_main(conn, kind: str, mem_fraction: float) -> None:
    warm = [{"sigma": 1.0, "q": 0.01, "T": 10, "delta": 1e-5, "consistency": False}] if kind == "pld" else []
    serve(conn, _TASKS[kind], mem_fraction, warm)


class Worker:
    """A persistent worker process for one kind of task, replaced when a task times out or dies."""

    def __init__(self, kind: str, mem_fraction: float = 0.5, start_timeout: float = 600.0):
        self.kind = kind
        self.mem_fraction = mem_fraction
        self.start_timeout = start_timeout
        self.proc = None
        self.conn = None

    #: the process's entry point: ``main(conn, kind, mem_fraction)`` (module level, for spawn)
    main = staticmethod(_worker_main)

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # no inherited numba/FFTW state
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=self.main, args=(child, self.kind, self.mem_fraction), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout):
            self.stop()
            raise RuntimeError(f"{self.kind} worker did not start in {self.start_timeout} s")
        parent.recv()

    def run(self, task: dict, timeout: float) -> tuple[str, Any]:
        """``("ok", result)``, ``("error", message)``, ``("timeout", None)`` or ``("crashed", msg)``."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(task)
        try:
            ready = self.conn.poll(timeout)
        except (EOFError, OSError):
            ready = False
        if not ready:
            alive = self.proc.is_alive()
            self.stop()
            return ("timeout", None) if alive else ("crashed", "worker exited")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self.proc.exitcode
            self.stop()
            return "crashed", f"worker exited with code {code}"

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()  # this worker only, by its own handle
            self.proc.join(5)
        self.proc = None
        self.conn = None


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Config:
    n: int = 300
    seed: int = 19
    timeout: float = 120.0
    ranges: dict = field(default_factory=lambda: dict(DEFAULT_RANGES))
    peer_n: int = 30
    peer_worst: int = 10
    peer_vdi: float = 1e-4
    peer_timeout: float = 300.0
    oracle_worst: int = 0
    oracle_max_points: int = 2**22
    oracle_timeout: float = 600.0
    consistency: bool = True
    verbose: bool = True
    jsonl: Optional[Path] = None


def checkpoint(recs: list[dict], cfg: Config) -> None:
    """Rewrite the JSONL file (if any) with the records so far: a long run that is stopped
    keeps what it measured."""
    if cfg.jsonl is not None:
        tmp = cfg.jsonl.with_name(cfg.jsonl.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
        tmp.replace(cfg.jsonl)


def _log(cfg: Config, msg: str) -> None:
    if cfg.verbose:
        print(msg, file=sys.stderr, flush=True)


def evaluate(rec: dict) -> dict:
    """Derived fields of a record whose pld call finished: width, target, ratio, verdicts."""
    p = rec.get("pld") or {}
    if p.get("status") != "ok":
        return rec
    lo, hi = p["lower"], p["upper"]
    width = hi - lo
    tgt = target_width(hi)
    p["width"] = width
    p["target"] = tgt
    p["ratio"] = width / tgt if math.isfinite(width) else math.inf
    p["within"] = bool(width <= tgt)
    p["silent_miss"] = bool(not p["within"] and not p.get("warnings"))
    if "delta_bounds_at_upper" in p:  # (re)judged here so that saved runs follow the current rule
        p["consistent"] = consistent(lo, rec["delta"], p["delta_bounds_at_upper"], p["delta_bounds_at_lower"])
    return rec


def run_pld(settings: list[Setting], cfg: Config) -> list[dict]:
    """Every setting through pld, one worker process, replaced after a timeout."""
    recs = []
    worker = Worker("pld")
    try:
        for s in settings:
            task = {"sigma": s.sigma, "q": s.q, "T": s.T, "delta": s.delta, "consistency": cfg.consistency}
            w0 = time.perf_counter()
            status, res = worker.run(task, cfg.timeout)
            rec = {"index": s.index, "sigma": s.sigma, "q": s.q, "T": s.T, "delta": s.delta}
            if status == "ok":
                rec["pld"] = {"status": "ok", **res}
            else:
                rec["pld"] = {"status": status, "message": res, "elapsed": time.perf_counter() - w0}
            evaluate(rec)
            recs.append(rec)
            if len(recs) % 10 == 0:
                checkpoint(recs, cfg)
            p = rec["pld"]
            _log(cfg, f"[{s.index + 1}/{len(settings)}] sigma={s.sigma:.4g} q={s.q:.3g} T={s.T} delta={s.delta:.3g}: "
                 + (f"[{p['lower']:.6g}, {p['upper']:.6g}] ratio {p['ratio']:.3g} {p['wall']:.2f}s"
                    + ("" if p.get("consistent", True) else " INCONSISTENT")
                    if p["status"] == "ok" else p["status"] + " " + str(p.get("message"))[:200]))
    finally:
        worker.stop()
    return recs


def _worst(recs: list[dict], k: int) -> list[dict]:
    """The ``k`` records with the largest width ratio (timeouts and errors first)."""
    def badness(r):
        p = r.get("pld") or {}
        return math.inf if p.get("status") != "ok" else p["ratio"]
    return sorted(recs, key=badness, reverse=True)[:k]


def run_peer(recs: list[dict], cfg: Config) -> None:
    """dp_accounting on a seeded random subsample plus the worst settings (in place)."""
    if cfg.peer_n <= 0 and cfg.peer_worst <= 0:
        return
    rng = np.random.default_rng(cfg.seed + 1)
    pick = set(rng.choice(len(recs), size=min(cfg.peer_n, len(recs)), replace=False).tolist()) if cfg.peer_n > 0 else set()
    pick |= {recs.index(r) for r in _worst(recs, cfg.peer_worst)}
    worker = Worker("dp_accounting")
    try:
        for j, i in enumerate(sorted(pick)):
            r = recs[i]
            if (r.get("dp_accounting") or {}).get("status") == "ok" and r["dp_accounting"].get("vdi") == cfg.peer_vdi:
                continue
            task = {"sigma": r["sigma"], "q": r["q"], "T": r["T"], "delta": r["delta"], "vdi": cfg.peer_vdi}
            w0 = time.perf_counter()
            status, res = worker.run(task, cfg.peer_timeout)
            r["dp_accounting"] = ({"status": "ok", **res} if status == "ok"
                                  else {"status": status, "message": res, "elapsed": time.perf_counter() - w0,
                                        "vdi": cfg.peer_vdi})
            _judge_reference(r, "dp_accounting", one_sided=True)
            a = r["dp_accounting"]
            _log(cfg, f"  dp_accounting [{j + 1}/{len(pick)}] #{r['index']}: "
                 + (f"{a['upper']:.6g} ({a['wall']:.1f}s) {a['verdict']}" if a["status"] == "ok"
                    else f"{a['status']} {str(a.get('message'))[:200]}"))
    finally:
        worker.stop()


def run_oracle(recs: list[dict], cfg: Config) -> None:
    """The rounding oracle (tests/oracles.py) on the worst settings (in place)."""
    if cfg.oracle_worst <= 0:
        return
    worker = Worker("oracle", mem_fraction=0.6)
    try:
        for r in _worst(recs, cfg.oracle_worst):
            if (r.get("oracle") or {}).get("status") == "ok":
                continue  # answered in an earlier pass (--from-jsonl)
            p = r.get("pld") or {}
            # ask for a bracket no wider than pld's target when that fits the point budget;
            # the oracle widens h itself to stay within max_points
            width = target_width(p["upper"]) if p.get("status") == "ok" and math.isfinite(p["upper"]) else None
            task = {"sigma": r["sigma"], "q": r["q"], "T": r["T"], "delta": r["delta"],
                    "width": width, "max_points": cfg.oracle_max_points}
            w0 = time.perf_counter()
            status, res = worker.run(task, cfg.oracle_timeout)
            r["oracle"] = ({"status": "ok", **res} if status == "ok"
                           else {"status": status, "message": res, "elapsed": time.perf_counter() - w0})
            _judge_reference(r, "oracle", one_sided=False)
            o = r["oracle"]
            _log(cfg, f"  oracle #{r['index']}: "
                 + (f"[{o['lower']:.6g}, {o['upper']:.6g}] ({o['wall']:.1f}s) {o['verdict']}" if o["status"] == "ok"
                    else f"{o['status']} {str(o.get('message'))[:200]}"))
    finally:
        worker.stop()


def _judge_reference(r: dict, name: str, one_sided: bool) -> None:
    """Verdict of a reference against pld's bracket.

    One-sided (an upper estimate ``u``): ``u >= pld.lower`` is required ("ok"); "inside" /
    "above" say where it lies.  Two-sided (a bracket ``[a, b]``): the two certified brackets must
    intersect, ``pld.lower <= b and a <= pld.upper``; "VIOLATION" otherwise.
    """
    ref = r[name]
    p = r.get("pld") or {}
    if ref.get("status") != "ok" or p.get("status") != "ok":
        ref["verdict"] = "n/a"
        return
    lo, hi = p["lower"], p["upper"]
    # relative slack for the last bits of two independent floating-point computations
    slack = 1e-12 * max(1.0, abs(hi))
    if one_sided:
        u = ref["upper"]
        if not math.isfinite(u):
            ref["verdict"] = "no value (inf)"
        elif u < lo - slack:
            ref["verdict"] = "VIOLATION (below pld lower)"
        elif u <= hi + slack:
            ref["verdict"] = "inside"
        else:
            ref["verdict"] = "above"
    else:
        a, b = ref["lower"], ref["upper"]
        if lo > b + slack or a > hi + slack:
            ref["verdict"] = "VIOLATION (disjoint)"
        elif lo <= a and b <= hi:
            ref["verdict"] = "contains oracle"
        else:
            ref["verdict"] = "intersects"


# ---- report ----------------------------------------------------------------------------------


def _fmt(x: float, d: int = 6) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return f"{x:.{d}g}"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pld", "kernels"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + (" (pld/ or kernels/ modified)" if dirty else " (engine clean)")
    except (OSError, subprocess.SubprocessError):
        return "?"


def summary(recs: list[dict]) -> dict:
    """Aggregate numbers of a run (see the module docstring)."""
    ok = [r for r in recs if (r.get("pld") or {}).get("status") == "ok"]
    fail = [r for r in recs if (r.get("pld") or {}).get("status") != "ok"]
    within = [r for r in ok if r["pld"]["within"]]
    missed = [r for r in ok if not r["pld"]["within"]]
    silent = [r for r in missed if r["pld"]["silent_miss"]]
    walls = np.array([r["pld"]["wall"] for r in ok]) if ok else np.array([math.nan])
    ratios = [r["pld"]["ratio"] for r in ok]
    incons = [r for r in ok if r["pld"].get("consistent") is False]
    nan_or_bad = [r for r in ok if not (0.0 <= r["pld"]["lower"] <= r["pld"]["upper"])]

    def refstats(name):
        rs = [r for r in recs if (r.get(name) or {}).get("status") == "ok" and (r.get(name) or {}).get("verdict") != "n/a"]
        tried = [r for r in recs if name in r]
        v = {}
        for r in rs:
            v[r[name]["verdict"]] = v.get(r[name]["verdict"], 0) + 1
        return {"tried": len(tried), "answered": len(rs), "verdicts": v,
                "violations": [r["index"] for r in rs if r[name]["verdict"].startswith("VIOLATION")]}

    return {
        "n": len(recs), "completed": len(ok), "failed": len(fail),
        "failed_kinds": {k: sum(1 for r in fail if r["pld"]["status"] == k) for k in {r["pld"]["status"] for r in fail}},
        "within": len(within), "missed": len(missed), "silent_misses": len(silent),
        "worst_ratio": max(ratios) if ratios else math.nan,
        "median_ratio": float(np.median(ratios)) if ratios else math.nan,
        "p50": float(np.percentile(walls, 50)), "p95": float(np.percentile(walls, 95)), "max": float(np.max(walls)),
        "inconsistent": [r["index"] for r in incons], "malformed": [r["index"] for r in nan_or_bad],
        "dp_accounting": refstats("dp_accounting"), "oracle": refstats("oracle"),
    }


def _bins_table(recs: list[dict], key: str, edges: list[float], label: str) -> list[str]:
    ok = [r for r in recs if (r.get("pld") or {}).get("status") == "ok"]
    lines = [f"| {label} | settings | within target | median ratio | worst ratio | median time (s) |",
             "|---|---|---|---|---|---|"]
    for a, b in zip(edges[:-1], edges[1:]):
        rs = [r for r in ok if a <= r[key] < b]
        if not rs:
            continue
        ratios = [r["pld"]["ratio"] for r in rs]
        lines.append(f"| [{a:.3g}, {b:.3g}) | {len(rs)} | {sum(r['pld']['within'] for r in rs)}/{len(rs)} "
                     f"({100 * np.mean([r['pld']['within'] for r in rs]):.0f}%) | {_fmt(float(np.median(ratios)), 3)} "
                     f"| {_fmt(max(ratios), 3)} | {np.median([r['pld']['wall'] for r in rs]):.3f} |")
    return lines


def _vdis(recs: list[dict], cfg: Config) -> str:
    v = sorted({(r.get("dp_accounting") or {}).get("vdi") for r in recs} - {None})
    return ", ".join(f"{x:g}" for x in v) if v else f"{cfg.peer_vdi:g}"


def markdown(recs: list[dict], cfg: Config, facts: dict) -> str:
    """The "Coverage (issue 19)" section for benchmarks/RESULTS.md."""
    s = summary(recs)
    rg = cfg.ranges
    L = ["## Coverage (issue 19)", "",
         f"- date: {facts['date']}; pld commit {facts['commit']}; {facts['machine']}; "
         f"load {facts['load_start']} at start, {facts['load_end']} at end",
         f"- `python -m benchmarks.coverage --n {cfg.n} --seed {cfg.seed} --timeout-per-setting {cfg.timeout:g}`: "
         f"sigma in [{rg['sigma'][0]:g}, {rg['sigma'][1]:g}], q in [{rg['q'][0]:g}, {rg['q'][1]:g}], "
         f"T in [{rg['T'][0]:g}, {rg['T'][1]:g}], delta in [{rg['delta'][0]:g}, {rg['delta'][1]:g}], "
         "log-uniform each; `pld.dpsgd(sigma, q, T).epsilon_bounds(delta)` on a fresh PLD in a worker process "
         "(kernels warm, estimated FFT plans); target `upper - lower <= 1e-4*upper + 1e-6`",
         f"- references: dp_accounting `PLDAccountant(value_discretization_interval={_vdis(recs, cfg)})` (an upper "
         f"estimate: must be >= pld's lower end) on {s['dp_accounting']['tried']} settings (a seeded random "
         f"subsample plus the worst); the tilted rounding oracle (`tests/oracles.py`, numpy/scipy only) on "
         f"{s['oracle']['tried']} of the worst (at most {cfg.oracle_max_points} FFT points; its bracket must "
         "intersect pld's)",
         "",
         "| measure | value |", "|---|---|",
         f"| settings completed | {s['completed']}/{s['n']}"
         + (f" (failed: {', '.join(f'{v} {k}' for k, v in s['failed_kinds'].items())})" if s["failed"] else "") + " |",
         f"| within target | {s['within']}/{s['completed']} ({100 * s['within'] / max(s['completed'], 1):.1f}%) |",
         f"| missed target | {s['missed']} (silently, no warning: {s['silent_misses']}) |",
         f"| width / target | median {_fmt(s['median_ratio'], 3)}, worst {_fmt(s['worst_ratio'], 4)} |",
         f"| wall time per query | p50 {s['p50']:.3f} s, p95 {s['p95']:.3f} s, max {s['max']:.3f} s |",
         f"| self-consistency `delta_bounds(upper)[0] <= delta <= delta_bounds(lower)[1]` | "
         f"{s['completed'] - len(s['inconsistent'])}/{s['completed']} hold"
         + (f"; **fails at #{', #'.join(map(str, s['inconsistent']))}**" if s["inconsistent"] else "") + " |",
         ]
    for name, what in (("dp_accounting", "dp_accounting upper estimate vs pld lower end"),
                       ("oracle", "rounding-oracle bracket intersects pld's")):
        st = s[name]
        if st["tried"]:
            verdicts = ", ".join(f"{k}: {v}" for k, v in sorted(st["verdicts"].items()))
            L.append(f"| {what} | {st['answered']}/{st['tried']} answered ({verdicts})"
                     + (f"; **VIOLATIONS at #{', #'.join(map(str, st['violations']))}**" if st["violations"] else "; no violation")
                     + " |")
    L += ["", "Within target by delta and by q:", ""]
    L += _bins_table(recs, "delta", [1e-12, 1e-10, 1e-8, 1e-6, 1.0001e-4], "delta")
    L += [""]
    L += _bins_table(recs, "q", [3e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.50001], "q")
    L += [""]
    L += _bins_table(recs, "T", [50, 1e3, 1e4, 1e5, 1e6, 3.00001e6], "T")
    L += ["", "Worst 10 settings (largest width / target; timeouts first):", "",
          "| # | sigma | q | T | delta | pld [lower, upper] | width/target | time (s) | warnings | dp_accounting | oracle |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in _worst(recs, 10):
        p = r["pld"]
        if p["status"] == "ok":
            br = f"[{p['lower']:.7g}, {p['upper']:.7g}]"
            ratio = _fmt(p["ratio"], 4)
            tm = f"{p['wall']:.2f}"
            wn = str(len(p.get("warnings") or [])) if p.get("warnings") else "none"
        else:
            br, ratio, tm, wn = p["status"], "-", f"{p.get('elapsed', math.nan):.0f}", "-"
        a = r.get("dp_accounting") or {}
        ac = (f"{a['upper']:.7g} ({a['verdict']})" if a.get("status") == "ok" else a.get("status", "-"))
        o = r.get("oracle") or {}
        oc = (f"[{o['lower']:.7g}, {o['upper']:.7g}] ({o['verdict']})" if o.get("status") == "ok" else o.get("status", "-"))
        L.append(f"| {r['index']} | {r['sigma']:.4g} | {r['q']:.3g} | {r['T']} | {r['delta']:.3g} | {br} | {ratio} | {tm} "
                 f"| {wn} | {ac} | {oc} |")
    viol = [r for r in recs for n in ("dp_accounting", "oracle")
            if str((r.get(n) or {}).get("verdict", "")).startswith("VIOLATION")]
    if viol:
        L += ["", "**Reference violations (a bracket that excludes an independent reference: a soundness bug in "
              "one of the two):**", ""]
        for r in viol:
            L.append(f"- #{r['index']} sigma={r['sigma']:.6g} q={r['q']:.6g} T={r['T']} delta={r['delta']:.6g}: pld "
                     f"[{r['pld']['lower']:.9g}, {r['pld']['upper']:.9g}], dp_accounting "
                     f"{(r.get('dp_accounting') or {}).get('upper')}, oracle "
                     f"{[(r.get('oracle') or {}).get(k) for k in ('lower', 'upper')]}")
    return "\n".join(L) + "\n"


def machine_facts() -> dict:
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.processor())
    except OSError:
        cpu = platform.processor()
    return {"machine": f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "commit": _git_commit(), "date": _dt.date.today().isoformat()}


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def run(cfg: Config, recs: Optional[list[dict]] = None) -> tuple[list[dict], str]:
    """Run the pld phase (unless ``recs`` are given), then the reference phases; return the
    records and the markdown section."""
    facts = machine_facts()
    facts["load_start"] = _load()
    if recs is None:
        recs = run_pld(sample_settings(cfg.n, cfg.seed, cfg.ranges), cfg)
    else:
        for r in recs:
            evaluate(r)
    checkpoint(recs, cfg)
    run_peer(recs, cfg)
    checkpoint(recs, cfg)
    run_oracle(recs, cfg)
    checkpoint(recs, cfg)
    facts["load_end"] = _load()
    return recs, markdown(recs, cfg, facts)


def _parse(argv=None) -> tuple[Config, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coverage", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="number of settings (default 300)")
    ap.add_argument("--seed", type=int, default=19, help="sampling seed (default 19)")
    ap.add_argument("--timeout-per-setting", type=float, default=120.0, help="seconds per pld call (default 120)")
    ap.add_argument("--out", type=Path, help="write the markdown section here (it is printed too)")
    ap.add_argument("--jsonl", type=Path, help="write one JSON record per setting here")
    ap.add_argument("--from-jsonl", type=Path, help="reuse the pld results of an earlier run; run the references only")
    for name, (lo, hi) in DEFAULT_RANGES.items():
        ap.add_argument(f"--{name}-range", type=float, nargs=2, metavar=("LO", "HI"), default=None,
                        help=f"sampling range of {name} (default {lo:g} {hi:g})")
    ap.add_argument("--peer-n", type=int, default=30, help="random settings checked with dp_accounting (default 30)")
    ap.add_argument("--peer-worst", type=int, default=10, help="worst settings checked with dp_accounting (default 10)")
    ap.add_argument("--peer-vdi", type=float, default=1e-4, help="dp_accounting value_discretization_interval")
    ap.add_argument("--peer-timeout", type=float, default=300.0)
    ap.add_argument("--oracle-worst", type=int, default=0, help="worst settings checked with the rounding oracle")
    ap.add_argument("--oracle-max-points", type=int, default=2**22)
    ap.add_argument("--oracle-timeout", type=float, default=600.0)
    ap.add_argument("--no-consistency", action="store_true", help="skip the delta_bounds self-consistency check")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    ranges = dict(DEFAULT_RANGES)
    for name in DEFAULT_RANGES:
        v = getattr(a, f"{name}_range")
        if v is not None:
            ranges[name] = (v[0], v[1])
    cfg = Config(n=a.n, seed=a.seed, timeout=a.timeout_per_setting, ranges=ranges, peer_n=a.peer_n,
                 peer_worst=a.peer_worst, peer_vdi=a.peer_vdi, peer_timeout=a.peer_timeout,
                 oracle_worst=a.oracle_worst, oracle_max_points=a.oracle_max_points,
                 oracle_timeout=a.oracle_timeout, consistency=not a.no_consistency, verbose=not a.quiet,
                 jsonl=a.jsonl)
    return cfg, a


def main(argv=None) -> int:
    cfg, a = _parse(argv)
    recs = None
    if a.from_jsonl:
        recs = [json.loads(line) for line in a.from_jsonl.read_text().splitlines() if line.strip()]
        cfg.n = len(recs)
    recs, md = run(cfg, recs)
    if a.out:
        a.out.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
