"""Benchmark pld against its peers; writes benchmarks/RESULTS.md (its generated part), records/scaling.png.

    python -m benchmarks.run [--quick] [--only NAME[,NAME...]] [--reps N] [--out PATH]

Run from the repository root.  Sections (names for ``--only``): the workloads of
:mod:`benchmarks.workloads` (``sgd-1e4``, ``mnist``, ``long-1e5``, ``huge-1e6``,
``tiny-loss``, ``schedule``, ``calibrate``), ``scaling`` and ``process``.
See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from benchmarks import workloads as W

warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: a peer whose single call is predicted or measured above this is run once
SLOW_S = 30.0
#: a peer predicted above this is skipped; one run in a subprocess is killed after it
LIMIT_S = 300.0
#: tracemalloc pass only for calls whose median is below this (it re-runs the call)
MEM_PASS_MAX_S = 30.0
#: calls whose median stays below this get extra interleaved rounds, up to
#: FAST_REPS in all (any library alike): a median of 3 millisecond calls
#: moved by 20% with one load spike on this shared machine
FAST_S = 1.0
FAST_REPS = 9

QUICK_SLOW_S = 5.0
QUICK_LIMIT_S = 10.0
QUICK_MEM_PASS_MAX_S = 1.0


# --------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------

def _status_kb(field_name: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


CAN_RESET_PEAK = _reset_peak_rss()


@dataclass
class Measurement:
    value: object
    wall: float
    cpu: float
    rss_delta_mb: Optional[float]
    traced_peak_mb: Optional[float] = None


def measure(fn: Callable[[], object], trace: bool = False) -> Measurement:
    """Run ``fn`` once: wall and CPU seconds (all threads), peak RSS growth, and
    (``trace``) the tracemalloc peak of Python-visible allocations."""
    gc.collect()
    if CAN_RESET_PEAK:
        _reset_peak_rss()
        base = _status_kb("VmRSS")
    else:  # fall back to the lifetime maximum: only growth beyond it shows
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if trace:
        tracemalloc.start()
    c0 = time.process_time()
    t0 = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak = None
    if trace:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    top = _status_kb("VmHWM") if CAN_RESET_PEAK else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss = None if (top is None or base is None) else max(0, top - base) / 1024
    return Measurement(value, wall, cpu, rss, peak)


def load() -> tuple:
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return (math.nan,) * 3


# --------------------------------------------------------------------------
# one workload through all peers
# --------------------------------------------------------------------------

@dataclass
class Row:
    workload: W.Workload
    peer: W.Peer
    label: str
    walls: list = field(default_factory=list)
    cpus: list = field(default_factory=list)
    rss: list = field(default_factory=list)
    traced_mb: Optional[float] = None
    answer: Optional[W.Answer] = None
    mode: str = "in-process"          # in-process | subprocess | skipped | failed
    notes: list = field(default_factory=list)
    predicted_s: Optional[float] = None
    pld_check: Optional[tuple] = None  # calibration: pld's bracket at this row's sigma
    warm: bool = False                 # pld's warm repeat query row

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.walls) if self.walls else None

    @property
    def cpu_median(self) -> Optional[float]:
        return statistics.median(self.cpus) if self.cpus else None


@dataclass
class Config:
    reps: int = 3
    #: rounds for calls faster than FAST_S (at least ``reps``)
    fast_reps: int = FAST_REPS
    quick: bool = False
    slow_s: float = SLOW_S
    limit_s: float = LIMIT_S
    mem_pass_max_s: float = MEM_PASS_MAX_S
    verbose: bool = True

    @classmethod
    def make(cls, quick: bool, reps: Optional[int] = None, verbose: bool = True) -> "Config":
        if quick:
            return cls(reps=reps or 1, fast_reps=reps or 1, quick=True, slow_s=QUICK_SLOW_S,
                       limit_s=QUICK_LIMIT_S, mem_pass_max_s=QUICK_MEM_PASS_MAX_S, verbose=verbose)
        return cls(reps=reps or 3, fast_reps=max(reps or 3, FAST_REPS), verbose=verbose)


#: measured seconds per grid point, per cost-model family (Peer.rate_key)
_RATES: dict = {}


def _log(cfg: Config, msg: str) -> None:
    if cfg.verbose:
        print(msg, file=sys.stderr, flush=True)


def _predict(peer: W.Peer, w: W.Workload) -> tuple[Optional[float], Optional[float]]:
    try:
        pts = peer.predict_points(w)
    except Exception:  # a cost model failing must not stop the run
        return None, None
    if pts is None:
        return None, None
    # the largest rate seen so far: large grids run no faster per point than small ones
    seen = _RATES.get(peer.rate_key)
    rate = max(seen) if seen else peer.default_rate
    return pts * rate, pts


#: a subprocess may use at most this fraction of the memory available when it starts
CHILD_MEM_FRACTION = 0.8


def mem_available() -> Optional[int]:
    """MemAvailable in bytes (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _run_child(peer: W.Peer, w: W.Workload, cfg: Config) -> dict:
    """One call in a fresh process, killed after ``cfg.limit_s``; its address space is capped
    at CHILD_MEM_FRACTION of the available memory so that a peer that outgrows the machine fails
    with MemoryError instead of waking the OOM killer on a shared machine."""
    cmd = [sys.executable, "-m", "benchmarks.run", "--child", peer.key, w.name]
    if cfg.quick:
        cmd.append("--quick")
    avail = mem_available()
    cap = None if avail is None else max(4 << 30, int(CHILD_MEM_FRACTION * avail))

    def limit():  # runs in the child before exec
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=cfg.limit_s,
                             preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return {"timeout": True, "elapsed": time.perf_counter() - t0}
    if out.returncode != 0:
        err = (out.stderr.strip().splitlines() or ["?"])[-1]
        if "MemoryError" in out.stderr and cap is not None:
            err = f"MemoryError at the {cap / 2**30:.1f} GiB address-space cap (memory guard)"
        return {"error": err}
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_workload(w: W.Workload, peers: list, cfg: Config) -> tuple[list, dict]:
    """Run ``w`` through ``peers`` (interleaved, ``cfg.reps`` rounds); returns rows and facts."""
    facts = {"load_start": load()}
    rows: list[Row] = []
    warm_row: Optional[Row] = None
    for p in peers:
        if not p.supports(w):
            continue
        r = Row(w, p, p.label)
        why = p.available()
        if cfg.quick and not p.in_quick:
            r.mode = "skipped"
            r.notes.append("left out of --quick")
        elif why is not None:
            r.mode = "skipped"
            r.notes.append(f"not available ({why})")
        else:
            pred, pts = _predict(p, w)
            r.predicted_s = pred
            if pred is not None:
                if pred > cfg.limit_s:
                    r.mode = "skipped"
                    r.notes.append(f"skipped: predicted ≈ {pred:.0f} s > {cfg.limit_s:.0f} s "
                                   f"({pts:.3g} grid points at the measured rate)")
                elif pred > cfg.slow_s:
                    r.mode = "subprocess"
        rows.append(r)
        if isinstance(p, W.PldPeer) and not w.calibrate:
            warm_row = Row(w, p, "pld, warm repeat query (same object)", warm=True)
            rows.append(warm_row)

    live = [r for r in rows if not r.warm and r.mode in ("in-process", "subprocess")]
    for rep in range(max(cfg.reps, cfg.fast_reps)):
        k = rep % max(1, len(live))
        for r in live[k:] + live[:k]:  # rotate the order each round
            if r.mode == "failed" or (r.walls and r.mode == "subprocess"):
                continue
            if rep >= cfg.reps and not (r.mode == "in-process" and r.walls and r.median < FAST_S):
                continue  # extra rounds only for fast calls
            if r.walls and r.walls[-1] > cfg.slow_s and r.mode == "in-process":
                if not any("one run" in n for n in r.notes):
                    r.notes.append(f"one run (took > {cfg.slow_s:.0f} s)")
                continue
            _log(cfg, f"  [{w.name}] rep {rep + 1}: {r.label} ({r.mode})")
            if r.mode == "subprocess":
                res = _run_child(r.peer, w, cfg)
                if res.get("timeout"):
                    r.mode = "failed"
                    r.notes.append(f"> {cfg.limit_s:.0f} s (timed out in a subprocess; "
                                   f"predicted ≈ {r.predicted_s:.0f} s)")
                    continue
                if "error" in res:
                    r.mode = "failed"
                    r.notes.append(f"error: {res['error']}")
                    continue
                r.walls.append(res["wall"])
                r.cpus.append(res["cpu"])
                if res.get("rss_delta_mb") is not None:
                    r.rss.append(res["rss_delta_mb"])
                r.answer = W.Answer(**res["answer"])
                r.notes.append(f"one run in a subprocess (predicted ≈ {r.predicted_s:.0f} s)")
                _learn_rate(r, res["wall"])
                continue
            r.peer.prepare()
            try:
                m = measure(lambda: r.peer.run(w))
            except Exception as exc:
                r.mode = "failed"
                r.notes.append(f"error: {type(exc).__name__}: {exc}")
                continue
            r.walls.append(m.wall)
            r.cpus.append(m.cpu)
            if m.rss_delta_mb is not None:
                r.rss.append(m.rss_delta_mb)
            r.answer = m.value
            _learn_rate(r, m.wall)
            if warm_row is not None and r.peer is warm_row.peer and m.value.obj is not None:
                d = m.value.obj
                wm = measure(lambda: d.epsilon_bounds(w.delta))
                warm_row.walls.append(wm.wall)
                warm_row.cpus.append(wm.cpu)
                if wm.rss_delta_mb is not None:
                    warm_row.rss.append(wm.rss_delta_mb)
                lo, hi = wm.value
                warm_row.answer = W.Answer(lower=lo, upper=hi)
                m.value.obj = None
            del m

    # tracemalloc pass (untimed): one more call with allocation tracing on
    for r in rows:
        if r.warm or r.mode != "in-process" or not r.walls:
            continue
        if r.median > cfg.mem_pass_max_s:
            r.notes.append("tracemalloc pass skipped (slow)")
            continue
        _log(cfg, f"  [{w.name}] tracemalloc pass: {r.label}")
        r.peer.prepare()
        try:
            m = measure(lambda: r.peer.run(w), trace=True)
            r.traced_mb = m.traced_peak_mb
            if m.value.obj is not None:
                d = m.value.obj
                m.value.obj = None
                if warm_row is not None and r.peer is warm_row.peer:
                    warm_row.traced_mb = measure(lambda: d.epsilon_bounds(w.delta), trace=True).traced_peak_mb
                del d
        except Exception as exc:  # pragma: no cover
            r.notes.append(f"tracemalloc pass failed: {exc}")
        del m

    if w.calibrate:
        _check_calibrations(w, rows, cfg)
    facts["load_end"] = load()
    return rows, facts


def _learn_rate(r: Row, wall: float) -> None:
    if r.predicted_s is None or r.workload.calibrate:
        return
    pts = r.peer.predict_points(r.workload)
    if pts:
        _RATES.setdefault(r.peer.rate_key, []).append(wall / pts)


def _check_calibrations(w: W.Workload, rows: list, cfg: Config) -> None:
    """pld's certified bracket at every peer's calibrated sigma (untimed)."""
    import pld
    _, q, t = w.phases[0]
    for r in rows:
        if r.answer is None or r.answer.sigma is None:
            continue
        if isinstance(r.peer, W.PldPeer) and r.answer.upper is not None:
            r.pld_check = (r.answer.lower, r.answer.upper)
            continue
        _log(cfg, f"  [{w.name}] pld check at σ={r.answer.sigma:.5g} ({r.label})")
        r.pld_check = pld.dpsgd(r.answer.sigma, q, t).epsilon_bounds(w.delta)


def sigma_guess(w: W.Workload) -> float:
    """Cheap RDP calibration: where the PRV cost model looks for a calibration's cost."""
    try:
        return W.PldRdpPeer().run(w).sigma
    except Exception:  # pragma: no cover
        return 1.0


# --------------------------------------------------------------------------
# scaling
# --------------------------------------------------------------------------

SCALING_SIGMA, SCALING_Q, SCALING_DELTA = 1.0, 0.01, 1e-5


def bench_scaling(cfg: Config) -> dict:
    import pld
    top = 5 if cfg.quick else 7
    ts = [10**k for k in range(2, top + 1)]
    res = {t: {"walls": [], "cpus": [], "rss": [], "traced": None, "eps": None, "dpa": None} for t in ts}
    for rep in range(cfg.reps):
        for t in (ts if rep % 2 == 0 else ts[::-1]):
            _log(cfg, f"  [scaling] rep {rep + 1}/{cfg.reps}: T={t:g}")
            m = measure(lambda: pld.dpsgd(SCALING_SIGMA, SCALING_Q, t).epsilon_bounds(SCALING_DELTA))
            res[t]["walls"].append(m.wall)
            res[t]["cpus"].append(m.cpu)
            if m.rss_delta_mb is not None:
                res[t]["rss"].append(m.rss_delta_mb)
            res[t]["eps"] = m.value
    for t in ts:
        if statistics.median(res[t]["walls"]) <= cfg.mem_pass_max_s:
            _log(cfg, f"  [scaling] tracemalloc pass T={t:g}")
            res[t]["traced"] = measure(
                lambda: pld.dpsgd(SCALING_SIGMA, SCALING_Q, t).epsilon_bounds(SCALING_DELTA), trace=True
            ).traced_peak_mb
    # peak RSS growth in a fresh process per T (this process already holds buffers from earlier runs)
    for t in ts:
        _log(cfg, f"  [scaling] fresh-process memory T={t:g}")
        try:
            out = subprocess.run([sys.executable, "-m", "benchmarks.run", "--scale-child", str(t)], cwd=ROOT,
                                 capture_output=True, text=True, timeout=max(cfg.limit_s, 120))
            res[t]["fresh_rss"] = json.loads(out.stdout.strip().splitlines()[-1])["rss_delta_mb"]
        except (subprocess.SubprocessError, ValueError, IndexError, KeyError):
            res[t]["fresh_rss"] = None
    # dp_accounting as a reference line (one run per T, stops once a run is slow)
    peer = W.DpaPldPeer()
    if peer.available() is None:
        for t in ts:
            wl = W.Workload(f"scale-{t}", "", ((SCALING_SIGMA, SCALING_Q, t),), delta=SCALING_DELTA)
            _log(cfg, f"  [scaling] dp_accounting T={t:g}")
            m = measure(lambda: peer.run(wl))
            res[t]["dpa"] = (m.wall, m.value.upper, m.rss_delta_mb)
            if m.wall > cfg.slow_s:
                break
    return {"ts": ts, "res": res, "fit": _fit(ts, res)}


def _slope(xs, ys) -> Optional[float]:
    pts = [(math.log10(x), math.log10(y)) for x, y in zip(xs, ys) if y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _fit(ts, res) -> dict:
    wall = [statistics.median(res[t]["walls"]) for t in ts]
    cpu = [statistics.median(res[t]["cpus"]) for t in ts]
    rss = [res[t].get("fresh_rss") for t in ts]
    traced = [res[t]["traced"] for t in ts]
    big = [i for i, t in enumerate(ts) if t >= 10**4]
    out = {
        "wall_all": _slope(ts, wall),
        "wall_large": _slope([ts[i] for i in big], [wall[i] for i in big]),
        "cpu_all": _slope(ts, cpu),
        "cpu_large": _slope([ts[i] for i in big], [cpu[i] for i in big]),
        "traced_all": _slope(ts, traced),
        "rss_all": _slope(ts, rss),
    }
    dpa = [(t, res[t]["dpa"][0]) for t in ts if res[t]["dpa"]]
    out["dpa_wall_all"] = _slope([a for a, _ in dpa], [b for _, b in dpa]) if len(dpa) > 1 else None
    return out


def plot_scaling(sc: dict, path: Path) -> Optional[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # pragma: no cover
        return f"no plot ({exc})"
    ts, res = sc["ts"], sc["res"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    wall = [statistics.median(res[t]["walls"]) for t in ts]
    lo = [min(res[t]["walls"]) for t in ts]
    hi = [max(res[t]["walls"]) for t in ts]
    cpu = [statistics.median(res[t]["cpus"]) for t in ts]
    a1.errorbar(ts, wall, yerr=[[w - l for w, l in zip(wall, lo)], [h - w for w, h in zip(wall, hi)]],
                marker="o", capsize=3, label="pld wall (median, min–max)")
    a1.plot(ts, cpu, "s--", label="pld CPU (median)")
    dpa = [(t, res[t]["dpa"][0]) for t in ts if res[t]["dpa"]]
    if dpa:
        a1.plot([a for a, _ in dpa], [b for _, b in dpa], "^:", label="dp_accounting PLD wall (1 run)")
    f = sc["fit"]
    title = "time"
    if f.get("wall_large") is not None:
        title += f"  (pld slope, T≥1e4: {f['wall_large']:.2f})"
    a1.set(xscale="log", yscale="log", xlabel="steps T", ylabel="seconds", title=title)
    a1.grid(True, which="both", alpha=0.3)
    a1.legend(fontsize=8)
    traced = [(t, res[t]["traced"]) for t in ts if res[t]["traced"]]
    rss = [(t, res[t]["fresh_rss"]) for t in ts if res[t].get("fresh_rss")]
    if traced:
        a2.plot([a for a, _ in traced], [b for _, b in traced], "o-", label="tracemalloc peak")
    if rss:
        a2.plot([a for a, _ in rss], [max(b, 1e-2) for _, b in rss], "s--", label="peak RSS growth (fresh process)")
    a2.set(xscale="log", yscale="log", xlabel="steps T", ylabel="MiB",
           title=f"pld memory (σ={SCALING_SIGMA:g}, q={SCALING_Q:g}, δ={SCALING_DELTA:g})")
    a2.grid(True, which="both", alpha=0.3)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------
# whole-process timings
# --------------------------------------------------------------------------

MNIST_CLI = ["dpsgd", "--noise-multiplier", "1.1", "--sampling-rate", "0.0042667",
             "--steps", "14040", "--delta", "1e-5", "--json"]

_PY_PLD = ("import pld; print(pld.dpsgd(1.1, 0.0042667, 14040).epsilon_bounds(1e-5))")
#: which kernels a fresh process serves ahead of time, and from where (install-time build or `pld warm`)
_PY_AOT = ("import pld.kernels as k, pld.kernels._aot as a; "
           "print(len(k.AHEAD_OF_TIME), len(k.__all__), a.loaded_from)")
#: the JIT kernels only: what an install without its kernel build runs (no C compiler, a wheel from another CPU)
_JIT_ONLY = {"PLD_KERNELS_AOT": "off"}
_PY_DPA = ("import dp_accounting as d; from dp_accounting.pld import PLDAccountant; "
           "a = PLDAccountant(value_discretization_interval=1e-4); "
           "a.compose(d.PoissonSampledDpEvent(0.0042667, d.GaussianDpEvent(1.1)), 14040); "
           "print(a.get_epsilon(1e-5))")
_PY_PRV = ("from prv_accountant import Accountant; "
           "print(Accountant(noise_multiplier=1.1, sampling_probability=0.0042667, delta=1e-5, "
           "eps_error=0.01, max_compositions=14040).compute_epsilon(num_compositions=14040))")


def _process_env(extra: Optional[dict] = None) -> dict:
    """The children's environment: this one, plus ``extra``, without PYTHONDONTWRITEBYTECODE (a
    harness may set it; a user's process reads pld's modules from their cached bytecode, written
    by the untimed first run, instead of compiling them again: ~0.1 s of CPU each time)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra or {})
    return env


def _timed_process(cmd: list, env: Optional[dict] = None, timeout: float = 900) -> dict:
    env = _process_env(env)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"wall": None, "error": f"> {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    res = {"wall": wall, "cpu": cpu, "rc": out.returncode}
    if out.returncode != 0:
        res["error"] = (out.stderr.strip().splitlines() or ["?"])[-1]
    try:
        j = json.loads(out.stdout)
        res["inner"] = {k: j.get(k) for k in ("seconds", "seconds_epsilon", "epsilon_lower", "epsilon_upper")}
    except (ValueError, AttributeError):
        res["stdout"] = out.stdout.strip()[-200:]
    return res


def bench_process(cfg: Config) -> dict:
    bindir = Path(sys.executable).parent
    cli = bindir / "pld"
    py = sys.executable
    cmd_cli = [str(cli)] + MNIST_CLI if cli.exists() else [py, "-m", "pld"] + MNIST_CLI
    cli_note = f"console script {cli}" if cli.exists() else "no console script: `python -m pld` used instead"
    try:
        served, total, where = subprocess.run([py, "-c", _PY_AOT], cwd=ROOT, capture_output=True, text=True,
                                              timeout=300).stdout.split(maxsplit=2)
        aot_note = (f"kernels served ahead of time: {served} of {total}"
                    + (f" (module {where})" if int(served) else " (none: every kernel is JIT-compiled)"))
    except (subprocess.SubprocessError, ValueError):
        aot_note = "kernels served ahead of time: unknown"
    # (name, command, extra environment)
    cases = [("pld CLI (`pld dpsgd … --json`), fresh process", cmd_cli, None),
             ("pld CLI, fresh process, JIT kernels from numba's cache (PLD_KERNELS_AOT=off)", cmd_cli, _JIT_ONLY),
             ("pld via `python -c` (import pld; epsilon_bounds)", [py, "-c", _PY_PLD], None),
             ("dp_accounting PLDAccountant via `python -c`", [py, "-c", _PY_DPA], None)]
    if not cfg.quick:
        cases.append(("prv_accountant (eps_error=0.01) via `python -c`", [py, "-c", _PY_PRV], None))
        cases.append(("`python -c 'import pld'` (import only)", [py, "-c", "import pld, pld.kernels"], None))
        cases.append(("`python -c 'import dp_accounting.pld'` (import only)",
                      [py, "-c", "import dp_accounting.pld"], None))
    _log(cfg, "  [process] populating the numba cache (untimed run)")
    warmup = _timed_process(cmd_cli, env=_JIT_ONLY)
    _timed_process(cmd_cli)  # (and the bytecode of what a run with the install's kernels imports)
    results: dict = {name: [] for name, _, _ in cases}
    for rep in range(cfg.reps):
        k = rep % len(cases)
        for name, cmd, extra in cases[k:] + cases[:k]:
            _log(cfg, f"  [process] rep {rep + 1}/{cfg.reps}: {name}")
            results[name].append(_timed_process(cmd, env=extra))
    # the first run after install: an empty numba cache (NUMBA_CACHE_DIR), with the kernels the install
    # built (loaded, nothing compiled) and without them (JIT-compiled, pld.warm in parallel processes)
    cold = [("pld CLI, first run after install (NUMBA_CACHE_DIR empty; kernels built at install)", None),
            ("pld CLI, first run without install-time kernels (NUMBA_CACHE_DIR empty, PLD_KERNELS_AOT=off: "
             "JIT compile)", _JIT_ONLY)]
    for name, extra in cold:
        results[name] = []
        for rep in range(1 if cfg.quick else 2):
            with tempfile.TemporaryDirectory(prefix="numba-cold-") as d:
                env = dict(extra or {}, NUMBA_CACHE_DIR=d)
                _log(cfg, f"  [process] cold run {rep + 1}: {name}")
                results[name].append(_timed_process(cmd_cli, env=env))
    return {"results": results, "cli_note": f"{cli_note}; {aot_note}", "warmup": warmup}


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

def _f(x, nd=4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.{nd}f}" if abs(x) >= 1e-3 else f"{x:.3g}"


def _s(x) -> str:
    if x is None:
        return "—"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def _spread(vals) -> str:
    if not vals:
        return "—"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{_s(med)} (n=1)"
    return f"{_s(med)} [{_s(min(vals))}–{_s(max(vals))}] (n={len(vals)})"


def _vs_pld(r: Row, pld_row: Optional[Row]) -> str:
    if r.answer is None:
        return ""
    if r.workload.calibrate:
        if r.pld_check is None:
            return ""
        lo, hi = r.pld_check
        t = r.workload.target_epsilon
        verdict = "≤ target" if hi <= t else ("OVER target" if lo > t else "straddles target")
        return f"pld ε∈[{lo:.4f}, {hi:.4f}] at this σ ({verdict})"
    if pld_row is None or pld_row.answer is None or r is pld_row or r.warm:
        return ""
    lo, hi = pld_row.answer.lower, pld_row.answer.upper
    v = r.answer.upper if r.answer.upper is not None else r.answer.estimate
    if v is None:
        return ""
    parts = []
    if v < lo:
        parts.append(f"upper {v - lo:+.2e} BELOW pld's certified lower bound")
    elif v > hi:
        parts.append(f"{v - hi:+.2e} above pld upper")
    else:
        parts.append("inside pld bracket")
    if r.answer.lower is not None and r.answer.lower > hi:
        parts.append("its lower bound is ABOVE pld's certified upper bound")
    return "; ".join(parts)


def _ratios(r: Row, pld_row: Optional[Row]) -> tuple[str, str]:
    if pld_row is None or not pld_row.median or not r.median or r is pld_row or r.warm:
        return "", ""
    cw = f"{pld_row.median / r.median:.2f}"
    cc = f"{pld_row.cpu_median / r.cpu_median:.2f}" if (r.cpu_median and pld_row.cpu_median) else ""
    return cw, cc


def _mem_cols(r: Row) -> list:
    return [_s(r.traced_mb) if r.traced_mb is not None else "—", _s(max(r.rss)) if r.rss else "—"]


def table(rows: list) -> str:
    """Markdown: one table for epsilon workloads, one for calibration workloads."""
    by_w: dict = {}
    for r in rows:
        by_w.setdefault(r.workload.name, []).append(r)
    eps_lines, cal_lines = [], []
    for name, rs in by_w.items():
        pld_row = next((r for r in rs if isinstance(r.peer, W.PldPeer) and not r.warm), None)
        for r in rs:
            a = r.answer
            rw, rc = _ratios(r, pld_row)
            wl = name if r is rs[0] else ""
            notes = list(r.notes)
            if r.workload.calibrate:
                own = ""
                if a is not None and a.upper is not None:
                    own = f"[{_f(a.lower, 5)}, {_f(a.upper, 5)}]" if a.lower is not None else _f(a.upper, 5)
                cal_lines.append("| " + " | ".join([
                    wl, r.label, f"{a.sigma:.5g}" if a and a.sigma else "—",
                    str(a.evaluations) if a and a.evaluations else "—", own,
                    _spread(r.walls), _s(r.cpu_median), rw, rc, *_mem_cols(r),
                    _vs_pld(r, pld_row), "; ".join(notes)]) + " |")
                continue
            lo, est, up = (a.lower, a.estimate, a.upper) if a else (None, None, None)
            width = (up - lo) if (lo is not None and up is not None) else None
            if isinstance(r.peer, W.DpaPldPeer):
                notes.append("pessimistic estimate, no lower side")
            eps_lines.append("| " + " | ".join([
                wl, r.label, _f(lo, 5), _f(est, 5), _f(up, 5), _f(width, 6) if width is not None else "—",
                _spread(r.walls), _s(r.cpu_median), rw, rc, *_mem_cols(r),
                _vs_pld(r, pld_row), "; ".join(notes)]) + " |")
    out = []
    if eps_lines:
        out += ["| workload | library | ε lower | ε estimate | ε upper | width | wall s median [min–max] (n) "
                "| CPU s median | pld/peer wall | pld/peer CPU | tracemalloc peak MiB | peak RSS Δ MiB (max of reps) "
                "| vs pld | notes |", "|" + "---|" * 14] + eps_lines
    if cal_lines:
        if out:
            out.append("")
        out += ["| workload | library | σ found | accountings | its own ε at σ | wall s median [min–max] (n) "
                "| CPU s median | pld/peer wall | pld/peer CPU | tracemalloc peak MiB | peak RSS Δ MiB (max of reps) "
                "| pld's certified ε at this σ | notes |", "|" + "---|" * 13] + cal_lines
    return "\n".join(out)


def ratio_summary(rows: list) -> str:
    """pld time / peer time per workload (wall medians), one column per peer."""
    keys: list = []
    data: dict = {}
    for r in rows:
        if r.warm:
            continue
        data.setdefault(r.workload.name, {})[r.peer.key] = r
        if r.peer.key not in keys and r.peer.key != "pld":
            keys.append(r.peer.key)
    out = ["| workload | pld wall s | pld warm query s | " + " | ".join(f"pld/{k}" for k in keys) + " |",
           "|" + "---|" * (3 + len(keys))]
    warm = {r.workload.name: r for r in rows if r.warm}
    for name, d in data.items():
        p = d.get("pld")
        cells = []
        for k in keys:
            r = d.get(k)
            if r is None:
                cells.append("")
            elif p is None or not p.median:
                cells.append("—")
            elif not r.median:
                cells.append("skipped" if r.mode == "skipped" else (r.notes[-1].split(" (")[0] if r.notes else r.mode))
            else:
                cells.append(f"{p.median / r.median:.2f}")
        wr = warm.get(name)
        out.append(f"| {name} | {_s(p.median) if p and p.median else '—'} | "
                   f"{_s(wr.median) if wr and wr.median else '—'} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def scaling_table(sc: dict) -> str:
    ts, res, f = sc["ts"], sc["res"], sc["fit"]
    out = ["| T | ε lower | ε upper | wall s median [min–max] (n) | CPU s median | tracemalloc peak MiB "
           "| peak RSS Δ MiB, fresh process | dp_accounting wall s (1 run) | dp_accounting ε |",
           "|---|---|---|---|---|---|---|---|---|"]
    for t in ts:
        r = res[t]
        lo, hi = r["eps"]
        dpa = r["dpa"]
        out.append(f"| {t:.0e} | {_f(lo, 5)} | {_f(hi, 5)} | {_spread(r['walls'])} | "
                   f"{_s(statistics.median(r['cpus']))} | {_s(r['traced']) if r['traced'] else '—'} | "
                   f"{_s(r.get('fresh_rss')) if r.get('fresh_rss') is not None else '—'} | "
                   f"{_s(dpa[0]) if dpa else '—'} | {_f(dpa[1], 5) if dpa else '—'} |")
    fmt = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    out.append("")
    out.append(f"Fitted growth exponents (least-squares slope of log median vs log T): "
               f"pld wall {fmt(f['wall_all'])} over all T, **{fmt(f['wall_large'])} for T ≥ 1e4**; "
               f"pld CPU {fmt(f['cpu_all'])} (all), {fmt(f['cpu_large'])} (T ≥ 1e4); "
               f"tracemalloc peak {fmt(f['traced_all'])}; fresh-process peak RSS Δ {fmt(f['rss_all'])}; "
               f"dp_accounting wall {fmt(f['dpa_wall_all'])}.")
    return "\n".join(out)


def process_table(pr: dict) -> str:
    out = ["| process | wall s median [min–max] (n) | CPU s (user+sys) median | inside: engine s | ε |",
           "|---|---|---|---|---|"]
    for name, runs in pr["results"].items():
        ok = [x for x in runs if x.get("wall") is not None and not x.get("error")]
        errs = [x["error"] for x in runs if x.get("error")]
        walls = [x["wall"] for x in ok]
        cpus = [x["cpu"] for x in ok]
        inner = ok[-1].get("inner") if ok else None
        eng = ""
        eps = ""
        if inner:
            eng = f"{_s(inner.get('seconds'))} (ε only {_s(inner.get('seconds_epsilon'))})"
            eps = f"[{_f(inner.get('epsilon_lower'), 5)}, {_f(inner.get('epsilon_upper'), 5)}]"
        elif ok and ok[-1].get("stdout"):
            eps = ok[-1]["stdout"].replace("|", "/")
        out.append(f"| {name} | {_spread(walls)}{' ERROR: ' + errs[0] if errs else ''} | "
                   f"{_s(statistics.median(cpus)) if cpus else '—'} | {eng} | {eps} |")
    return "\n".join(out)


def machine_facts(peers: list) -> dict:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = _status_kb("VmRSS")
    try:
        with open("/proc/meminfo") as f:
            total = int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        total = math.nan
    versions = {}
    for p in peers:
        if p.available() is None:
            versions[p.dist or p.module] = p.version()
    for mod in ("numpy", "scipy", "numba", "pyFFTW", "torch"):
        try:
            from importlib.metadata import version
            versions[mod] = version(mod)
        except Exception:
            pass
    git = "?"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pld", "kernels"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
        git = head + (f" + {len(dirty)} uncommitted file(s) under pld/ and kernels/" if dirty else " (clean)")
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "git": git,
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": round(total, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "rss_start_mb": (mem or 0) / 1024,
        "peak_reset": CAN_RESET_PEAK,
        "load_start": load(),
    }


def write_results(path: Path, cfg: Config, facts: dict, rows: list, wfacts: dict,
                  sc: Optional[dict], pr: Optional[dict], paths: dict, elapsed: float,
                  argv: list) -> None:
    v = facts["versions"]
    lines = [
        "# Benchmark results",
        "",
        ("**QUICK RUN** (`--quick`: 1 repetition, about 10x fewer steps, slow peers skipped sooner) — "
         "not the full benchmark." if cfg.quick else
         f"Full run: {cfg.reps} interleaved repetitions per workload, up to {cfg.fast_reps} for calls "
         f"under {FAST_S:g} s."),
        "",
        f"Produced by `python -m benchmarks.run {' '.join(argv)}`".rstrip() + f" on {facts['date']}, "
        f"in {elapsed / 60:.1f} min.",
        "",
        "## Machine",
        "",
        f"- CPU: {facts['cpu']}; {facts['cores']} logical cores "
        f"({facts['affinity']} usable by this process); {facts['mem_gib']} GiB RAM",
        f"- {facts['platform']}, Python {facts['python']}",
        f"- load average (1, 5, 15 min) at start {facts['load_start']}, at end {facts.get('load_end')} — "
        "**the machine was shared**: wall times are inflated and noisy whenever the load exceeds the core "
        "count; CPU time (all threads of the process) is less sensitive to it.",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- pld source: commit {facts.get('git')}",
        "- pld paths: " + (", ".join(f"{k}: {val}" for k, val in paths.items()) or "pld.dpsgd"),
        f"- pld FFT: {facts.get('fft', '?')}" + ("" if "measured" in str(facts.get("fft")) else
                                                  " with estimated plans, as after a fresh install "
                                                  "(`pld tune-fft` measured plans: `--fft-wisdom`)"),
        "",
    ]
    if rows:
        lines += [
            "## Workloads",
            "",
            "Each workload runs through every library in one process, interleaved (the order rotates each "
            "repetition). pld builds a fresh PLD per repetition; its \"warm repeat query\" row re-asks the "
            "same object. Ratios are pld time / peer time (< 1: pld faster). δ = 1e-5 unless said.",
            "",
        ]
        for w in {r.workload.name: r.workload for r in rows}.values():
            f = wfacts.get(w.name, {})
            lines.append(f"- **{w.name}**: {w.describe()} — load {f.get('load_start')} → {f.get('load_end')}")
        lines += ["", table(rows), "", "### Speed ratios (pld wall / peer wall, medians)", "",
                  ratio_summary(rows), ""]
    if sc is not None:
        lines += [f"## Scaling: pld, σ={SCALING_SIGMA:g}, q={SCALING_Q:g}, δ={SCALING_DELTA:g} against T", "",
                  f"load {sc.get('load_start')} → {sc.get('load_end')}", "",
                  scaling_table(sc), "", "![scaling](records/scaling.png)", ""]
    if pr is not None:
        lines += ["## Whole-process times (MNIST query: σ=1.1, q=0.0042667, T=14040, δ=1e-5)", "",
                  f"Fresh interpreter per run, wall time around `subprocess.run` (includes interpreter start, "
                  f"imports, kernel load, query, output); {pr['cli_note']}. CPU is the child's user+sys. "
                  f"load {pr.get('load_start')} → {pr.get('load_end')}", "", process_table(pr), ""]
    lines += ["## What is measured", "",
              "See benchmarks/README.md. In short: wall = `time.perf_counter` around one call that builds "
              "everything from scratch; CPU = `time.process_time` (all threads); tracemalloc peak = Python-"
              "visible allocations (numpy buffers included) in a separate untimed call; peak RSS Δ = kernel "
              "peak-RSS mark (VmHWM, reset through /proc/self/clear_refs before each call) minus RSS before "
              "the call, so it includes C/Fortran/FFT buffers but not memory already held by the process.",
              ""]
    write_generated(path, "\n".join(lines))


#: RESULTS.md: a run rewrites what lies between these markers and keeps every hand-written
#: section after them (coverage, equal accuracy, spot checks)
GENERATED_BEGIN = "<!-- generated by `python -m benchmarks.run`: rewritten by each run, up to the end marker -->"
GENERATED_END = "<!-- end of the generated part: the hand-written sections below are kept by every run -->"


def write_generated(path: Path, generated: str) -> None:
    """Write ``generated`` between the markers of ``path``, keeping what lies outside them."""
    old = path.read_text() if path.exists() else ""
    before, after = "", ""
    if GENERATED_BEGIN in old and GENERATED_END in old:
        before = old.split(GENERATED_BEGIN, 1)[0]
        after = old.split(GENERATED_END, 1)[1]
    elif old:
        after = "\n\n" + old  # (a file without markers: kept whole, below the new run)
    path.write_text(before + GENERATED_BEGIN + "\n" + generated.rstrip("\n") + "\n" + GENERATED_END + after)


# --------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------

def _scale_child(t: int) -> int:
    import pld
    pld.dpsgd(SCALING_SIGMA, SCALING_Q, 1).epsilon_bounds(SCALING_DELTA)  # load the kernels first
    m = measure(lambda: pld.dpsgd(SCALING_SIGMA, SCALING_Q, t).epsilon_bounds(SCALING_DELTA))
    print(json.dumps({"wall": m.wall, "rss_delta_mb": m.rss_delta_mb, "eps": m.value}))
    return 0


def _child(argv: list) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--child", nargs=2)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    key, wname = a.child
    w = W.workload_by_name(wname, a.quick)
    peer = next(x for x in W.all_peers() if x.key == key)
    why = peer.available()  # import the library before measuring
    if why is not None:
        raise SystemExit(why)
    peer.prepare()
    m = measure(lambda: peer.run(w))
    print(json.dumps({"wall": m.wall, "cpu": m.cpu, "rss_delta_mb": m.rss_delta_mb,
                      "answer": m.value.to_json()}))
    return 0


SECTIONS = tuple(w.name for w in W.WORKLOADS) + ("scaling", "process")


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--child" in argv:
        return _child(argv)
    if "--scale-child" in argv:
        return _scale_child(int(argv[argv.index("--scale-child") + 1]))
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 repetition, ~10x fewer steps, tighter time limits")
    ap.add_argument("--only", action="append", default=[],
                    help=f"run only these sections (comma-separated, repeatable): {', '.join(SECTIONS)}")
    ap.add_argument("--reps", type=int, help="repetitions (default 3, --quick 1)")
    ap.add_argument("--out", help="results file (default benchmarks/RESULTS.md; with --only: print only)")
    ap.add_argument("--limit", type=float, help=f"per-call limit in seconds (default {LIMIT_S:g}, quick "
                                                 f"{QUICK_LIMIT_S:g})")
    ap.add_argument("--fft-wisdom", action="store_true",
                    help="use this machine's measured FFT plans (from `pld tune-fft`); default: estimated "
                         "plans, as after a fresh install")
    args = ap.parse_args(argv)
    if not args.fft_wisdom:
        # (inherited by the fresh processes of the process section too)
        os.environ["PLD_FFTW_WISDOM"] = "off"
    only = [s for x in args.only for s in x.split(",") if s]
    bad = [s for s in only if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    cfg = Config.make(args.quick, args.reps)
    if args.limit:
        cfg.limit_s = args.limit
    out = Path(args.out) if args.out else (None if only else HERE / "RESULTS.md")
    t_start = time.perf_counter()
    peers = W.all_peers()
    facts = machine_facts(peers)
    from pld.engine.fft import fft_backend

    facts["fft"] = fft_backend()
    _log(cfg, f"machine: {facts['cpu']}, {facts['cores']} cores, load {facts['load_start']}")
    sel = lambda name: not only or name in only  # noqa: E731

    rows: list = []
    wfacts: dict = {}
    for w in W.workloads(args.quick):
        if not sel(w.name):
            continue
        _log(cfg, f"workload {w.name}: {w.describe()}")
        if w.calibrate:
            g = sigma_guess(w)
            for p in peers:
                if hasattr(p, "sigma_guess"):
                    p.sigma_guess = g
        rs, f = bench_workload(w, peers, cfg)
        rows += rs
        wfacts[w.name] = f
        print(table(rs), flush=True)
    sc = None
    if sel("scaling"):
        _log(cfg, "scaling")
        l0 = load()
        sc = bench_scaling(cfg)
        sc["load_start"], sc["load_end"] = l0, load()
        print(scaling_table(sc), flush=True)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            plot_scaling(sc, out.parent / "records" / "scaling.png")
    pr = None
    if sel("process"):
        _log(cfg, "whole-process timings")
        l0 = load()
        pr = bench_process(cfg)
        pr["load_start"], pr["load_end"] = l0, load()
        print(process_table(pr), flush=True)
    facts["load_end"] = load()
    paths = {}
    for p in peers:
        paths.update(getattr(p, "paths", {}))
    if rows:
        print("\n" + ratio_summary(rows), flush=True)
    elapsed = time.perf_counter() - t_start
    if out is not None:
        write_results(out, cfg, facts, rows, wfacts, sc, pr, paths, elapsed, argv)
        _log(cfg, f"wrote {out} ({elapsed / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
