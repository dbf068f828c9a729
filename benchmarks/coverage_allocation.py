"""Coverage benchmark for random allocation (issue 39, item 5): how often is pld's bracket within target?

A seeded random sample of random-allocation (balls-in-bins) settings, log-uniform in each parameter,

    sigma in [0.3, 6], steps per epoch t in [2, 1e5], participations k in [1, max(1, t/4)],
    epochs in [1, 1000], delta in [1e-12, 1e-4],

is run through ``RandomAllocation(Gaussian(sigma), t, k).pld().self_compose(epochs).epsilon_bounds(delta)``
(what ``pld.dpsgd(..., sampling="random_allocation", participations=k)`` builds), each call in a worker
process that is killed when it exceeds ``--timeout-per-setting``.  Outcome classes (one per setting):

* ``within``: ``upper - lower <= 1e-4 * upper + 1e-6`` (the default target);
* ``warned``: missed the target and a warning said so;
* ``silent``: missed the target without any warning;
* ``contradicted``: an independent truth excludes the bracket (takes precedence over the above);
* ``timed out`` / ``error``.

Independent truths (none of them uses pld; each is checked against pld's two ends through
``delta(epsilon)``, which is non-increasing: a certified bracket needs ``delta_true(upper) <= delta``
and, when ``lower > 0``, ``delta_true(lower) >= delta``):

* ``gaussian``: two closed-form bounds that always apply.  Below: the sum of each epoch's ``t``
  outputs is a post-processing of the true pair, the Gaussian mechanism with
  ``mu = k sqrt(epochs) / (sigma sqrt(t))``, so ``delta_true >= delta_G(mu_sum)``; above: no
  amplification (``k epochs`` Gaussian steps, joint convexity), ``delta_true <= delta_G(sqrt(k epochs)/sigma)``.
  Evaluated with mpmath (60 digits), so tiny deltas are exact.
* ``quadrature`` (``t = 2``, one epoch): the exact pair's hockey stick in both directions by
  numerical quadrature of one coordinate against the other's closed-form call/put price.
* ``round_oracle`` (one epoch, ``k = 1``, ``sigma`` where it is affordable, about 2.5 up): the
  sum of ``t`` log-normals by one FFT power of its exponentially tilted law
  (:mod:`benchmarks.reference.allocation_round`, numerical, ~1e-5 relative; 1e-4 allowed).
* ``monte_carlo`` (one epoch, ``k = 1``, ``t * n`` within budget): plain sampling of the exact pair in
  both directions, a 99.9% normal confidence interval per direction; informative only when delta is
  large enough for the sample (the verdict says "uninformative" otherwise).
* ``opake`` (its native ``.so``; a certified upper curve for k of t: the block argument) and
  ``PLD_accounting`` (a bracket for k = 1) on a subsample, with a timeout: a peer's certified upper
  below pld's lower end, or its lower above pld's upper, is a contradiction between the two.

Note: random allocation is *not* always below Poisson subsampling at ``q = k/t`` (t = 2, sigma = 1,
eps = 0.5: remove-direction delta 0.14918 against Poisson's 0.14792), so Poisson is no reference.

Usage (repository root, pld installed)::

    nice python -m benchmarks.coverage_allocation --n 40 --seed 39 --jsonl benchmarks/records/coverage-allocation.jsonl
    python -m benchmarks.coverage_allocation --from-jsonl benchmarks/records/coverage-allocation.jsonl --peers 0
    python -m benchmarks.coverage_allocation --space dpsgd --n 80 --seed 1 --peers 0   # pld.dpsgd's 1-of-t space
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.coverage import TARGET_ATOL, TARGET_RTOL, Worker, _load, machine_facts, serve
from benchmarks.reference import allocation_round

ROOT = Path(__file__).resolve().parent.parent

RANGES = {"sigma": (0.3, 6.0), "t": (2, 100_000), "epochs": (1, 1000), "delta": (1e-12, 1e-4)}
#: ``--space strict``: one participation, many epochs at a strict delta (where each round's
#: tails at +inf, summed over the run, reach delta: ``RandomAllocation.deeper``)
RANGES_STRICT = {"sigma": (1.0, 4.0), "t": (100, 5000), "epochs": (100, 3000), "delta": (1e-13, 1e-10)}
#: ``--space dpsgd``: what ``pld.dpsgd(sigma, 1/t, t * epochs, sampling="balls_in_bins")`` meets
#: (one participation; the ranges of the stop hook's random probe)
RANGES_DPSGD = {"sigma": (0.5, 8.0), "t": (2, 20_000), "epochs": (1, 300), "delta": (1e-12, 1e-4)}
#: ``--space long``: one participation, the long epochs of a large dataset in small batches
#: (``N / b`` from 2e4 to 1e6 steps: 5e6 records in batches of 138 make 35974)
RANGES_LONG = {"sigma": (0.5, 4.0), "t": (20_000, 1_000_000), "epochs": (1, 100), "delta": (1e-12, 1e-4)}
SPACES = {"default": (RANGES, "sigma in [0.3, 6], t in [2, 1e5], k in [1, t/4], epochs in [1, 1000], "
                              "delta in [1e-12, 1e-4]"),
          "strict": (RANGES_STRICT, "sigma in [1, 4], t in [100, 5000], k = 1, epochs in [100, 3000], "
                                    "delta in [1e-13, 1e-10]"),
          "dpsgd": (RANGES_DPSGD, "sigma in [0.5, 8], t in [2, 2e4], k = 1, epochs in [1, 300], "
                                  "delta in [1e-12, 1e-4]"),
          "long": (RANGES_LONG, "sigma in [0.5, 4], t in [2e4, 1e6], k = 1, epochs in [1, 100], "
                                "delta in [1e-12, 1e-4]")}
#: Monte Carlo budget: normal draws per direction (t * n)
MC_DRAWS = 4e7
#: two-sided confidence of the Monte Carlo intervals (normal approximation)
MC_Z = 3.29  # 99.9%


def target_width(upper: float) -> float:
    return TARGET_RTOL * max(upper, 0.0) + TARGET_ATOL


@dataclass(frozen=True)
class Setting:
    index: int
    sigma: float
    t: int
    k: int
    epochs: int
    delta: float


def sample_settings(n: int, seed: int, space: str = "default") -> list[Setting]:
    """``n`` settings, five uniforms each from one seeded stream (a prefix of a longer run is a shorter run).

    ``space``: ``"default"`` (:data:`RANGES`), ``"strict"`` (:data:`RANGES_STRICT`, ``k = 1``),
    ``"dpsgd"`` (:data:`RANGES_DPSGD`, ``k = 1``) or ``"long"`` (:data:`RANGES_LONG`, ``k = 1``)."""
    rng = np.random.default_rng(seed)
    ranges = SPACES[space][0]

    def logu(lo: float, hi: float, x: float) -> float:
        return math.exp(math.log(lo) + x * (math.log(hi) - math.log(lo)))

    out = []
    for i in range(n):
        u = rng.random(5)
        t = max(2, int(round(logu(*ranges["t"], u[1]))))
        k_max = max(1, t // 4) if space == "default" else 1
        k = min(k_max, max(1, int(round(logu(1, k_max, u[2]))))) if k_max > 1 else 1
        out.append(Setting(i, logu(*ranges["sigma"], u[0]), t, k,
                           max(1, int(round(logu(*ranges["epochs"], u[3])))), logu(*ranges["delta"], u[4])))
    return out


# ---- independent truths (no pld) --------------------------------------------------------------
def gaussian_delta(mu: float, eps: float) -> float:
    """Balle & Wang's exact delta of the Gaussian mechanism, in 60-digit arithmetic."""
    import mpmath as mp_

    mp_.mp.dps = 60
    m, e = mp_.mpf(mu), mp_.mpf(eps)
    return float(mp_.ncdf(m / 2 - e / m) - mp_.exp(e) * mp_.ncdf(-m / 2 - e / m))


def _call(a: float, c: float) -> float:
    """E[(Y - c)_+], log Y ~ N(-a^2/2, a^2)."""
    from scipy.stats import norm

    if c <= 0:
        return 1.0 - c
    d1 = (-math.log(c) + a * a / 2) / a
    return float(norm.sf(-d1) - c * norm.sf(a - d1))


def _put(a: float, c: float) -> float:
    """E[(c - Y)_+], log Y ~ N(-a^2/2, a^2)."""
    from scipy.stats import norm

    if c <= 0:
        return 0.0
    d1 = (-math.log(c) + a * a / 2) / a
    return float(c * norm.cdf(a - d1) - norm.cdf(-d1))


def t2_delta(sigma: float, eps: float) -> tuple[float, float]:
    """Exact (remove, add) delta of one epoch of 1-of-2 allocation by quadrature.

    ``Lambda = (Y_1 + Y_2)/2`` with ``Y_i`` iid log-normal under ``Q``: remove ``E_Q[(Lambda - e^eps)_+]``,
    add ``E_Q[(1 - e^eps Lambda)_+]``; the inner expectation over ``Y_2`` is a call/put price."""
    from scipy import integrate
    from scipy.stats import norm

    a, c = 1.0 / sigma, math.exp(eps)

    def rem(z):
        return 0.5 * _call(a, 2 * c - math.exp(-a * a / 2 + a * z)) * norm.pdf(z)

    def add(z):
        return 0.5 * c * _put(a, 2 / c - math.exp(-a * a / 2 + a * z)) * norm.pdf(z)

    out = []
    for f, k in ((rem, 2 * c), (add, 2 / c)):
        z0 = (math.log(k) + a * a / 2) / a
        pts = sorted({-14.0, 14.0} | {max(-14.0, min(14.0, z0 + dz)) for dz in (-3.0, 0.0, 3.0)})
        out.append(math.fsum(integrate.quad(f, lo, hi, epsabs=0.0, epsrel=1e-11, limit=500)[0]
                             for lo, hi in zip(pts[:-1], pts[1:]) if hi > lo))
    return out[0], out[1]


def mc_delta(sigma: float, t: int, eps_list: list[float], seed: int, draws: float = MC_DRAWS) -> dict:
    """Plain Monte Carlo of one epoch of 1-of-t allocation: per direction and eps, (mean, half-width)."""
    rng = np.random.default_rng(seed)
    a = 1.0 / sigma
    n = int(draws // t)
    chunk = max(1, int(2e6 // t))
    acc = {d: [[0.0, 0.0] for _ in eps_list] for d in ("remove", "add")}
    done = 0
    while done < n:
        m = min(chunk, n - done)
        z = rng.standard_normal((m, t))
        # remove: under P the first coordinate is marked (exchangeable)
        lz = -0.5 * a * a + a * z
        lz[:, 0] += a * a
        mx = lz.max(axis=1)
        lam_p = mx + np.log(np.exp(lz - mx[:, None]).sum(axis=1)) - math.log(t)  # log Lambda under P
        lz[:, 0] -= a * a
        mx = lz.max(axis=1)
        lam_q = mx + np.log(np.exp(lz - mx[:, None]).sum(axis=1)) - math.log(t)  # log Lambda under Q
        for j, e in enumerate(eps_list):
            for d, x in (("remove", -np.expm1(np.minimum(e - lam_p, 0.0))),   # (1 - e^{eps - L})_+, L = log Lambda
                         ("add", -np.expm1(np.minimum(e + lam_q, 0.0)))):     # L = -log Lambda under Q
                acc[d][j][0] += float(x.sum())
                acc[d][j][1] += float((x * x).sum())
        done += m
    out: dict[str, Any] = {"n": n}
    for d in acc:
        rows = []
        for s1, s2 in acc[d]:
            mean = s1 / n
            var = max(s2 / n - mean * mean, 0.0)
            rows.append((mean, MC_Z * math.sqrt(var / n) + 1.0 / n))
        out[d] = rows
    return out


# ---- workers ---------------------------------------------------------------------------------
def _task_pld(task: dict) -> dict:
    import pld
    from pld.mechanisms.allocation import RandomAllocation

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w0 = time.perf_counter()
        d = RandomAllocation(pld.Gaussian(task["sigma"]), task["t"], task["k"]).pld()
        if task["epochs"] > 1:
            d = d.self_compose(task["epochs"])
        lo, hi = d.epsilon_bounds(task["delta"])
        wall = time.perf_counter() - w0
    return {"lower": float(lo), "upper": float(hi), "wall": wall,
            "warnings": [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught]}


def _task_opake(task: dict) -> dict:
    sys.path.insert(0, str(ROOT))
    from benchmarks.allocation import _opake

    mod = _opake()
    w0 = time.perf_counter()
    p = mod.random_allocation_gaussian_pld(task["sigma"], task["t"], task["k"],
                                           config=mod.DiscretizationConfig(discretization=1e-4))
    if task["epochs"] > 1:
        p = p.self_compose(task["epochs"])
    return {"upper": float(p.epsilon_at(task["delta"])), "wall": time.perf_counter() - w0}


def _task_pld_accounting(task: dict) -> dict:
    import PLD_accounting as P

    w0 = time.perf_counter()
    up, low = P.gaussian_allocation_epsilon_range(delta=task["delta"], sigma=task["sigma"], num_steps=task["t"],
                                                  num_epochs=task["epochs"])
    return {"upper": float(up), "lower": float(low), "wall": time.perf_counter() - w0}


_TASKS = {"pld": _task_pld, "opake": _task_opake, "PLD_accounting": _task_pld_accounting}


def _worker_main(conn, kind: str, mem_fraction: float) -> None:
    warm = ([{"sigma": 1.0, "t": 8, "k": 1, "epochs": 2, "delta": 1e-5},
             {"sigma": 0.5, "t": 8, "k": 1, "epochs": 1, "delta": 1e-5},
             {"sigma": 1.0, "t": 64, "k": 4, "epochs": 1, "delta": 1e-5}] if kind == "pld" else [])
    serve(conn, _TASKS[kind], mem_fraction, warm)


class AllocWorker(Worker):
    """benchmarks.coverage's worker, running this module's tasks."""

    main = staticmethod(_worker_main)


# ---- judging -------------------------------------------------------------------------------------
def _verdict(lo: float, hi: float, delta: float, d_hi: tuple[float, float], d_lo: tuple[float, float]) -> str:
    """``d_hi``/``d_lo``: (lower, upper) bounds on the true delta at pld's upper/lower end.

    Contradicted when the truth at the upper end is surely above delta (the upper end is not a
    valid epsilon) or, for ``lo > 0``, the truth at the lower end is surely below delta."""
    slack = 1e-9 * delta
    if d_hi[0] > delta + slack:
        return "CONTRADICTED (upper end below the truth)"
    if lo > 0 and d_lo[1] < delta - slack:
        return "CONTRADICTED (lower end above the truth)"
    return "ok"


def judge_truths(rec: dict, mc_seed: int, mc: bool = True) -> None:
    p = rec["pld"]
    if p.get("status") != "ok":
        return
    s, t, k, E, delta = rec["sigma"], rec["t"], rec["k"], rec["epochs"], rec["delta"]
    lo, hi = p["lower"], p["upper"]
    truths: dict[str, Any] = {}
    mu_sum, mu_none = k * math.sqrt(E) / (s * math.sqrt(t)), math.sqrt(k * E) / s
    if math.isfinite(hi):
        dh = (gaussian_delta(mu_sum, hi), gaussian_delta(mu_none, hi))
        dl = (gaussian_delta(mu_sum, lo), gaussian_delta(mu_none, lo))
        truths["gaussian"] = {"verdict": _verdict(lo, hi, delta, dh, dl)}
    if t == 2 and E == 1 and k == 1 and math.isfinite(hi):
        th, tl = max(t2_delta(s, hi)), max(t2_delta(s, lo))
        truths["quadrature"] = {"delta_at_upper": th, "delta_at_lower": tl,
                                "verdict": _verdict(lo, hi, delta, (th * (1 - 1e-7), th * (1 + 1e-7)),
                                                    (tl * (1 - 1e-7), tl * (1 + 1e-7)))}
    if E == 1 and k == 1 and 0 < lo and math.isfinite(hi) and allocation_round.affordable(s):
        # (the tilted-FFT round of benchmarks.reference.allocation_round: ~1e-5 relative; 1e-4 allowed)
        th, tl = allocation_round.delta(s, t, hi), allocation_round.delta(s, t, lo)
        truths["round_oracle"] = {"delta_at_upper": th, "delta_at_lower": tl,
                                  "verdict": _verdict(lo, hi, delta, (th * (1 - 1e-4), th * (1 + 1e-4)),
                                                      (tl * (1 - 1e-4), tl * (1 + 1e-4)))}
    if mc and E == 1 and k == 1 and t <= MC_DRAWS / 1e4 and math.isfinite(hi):
        w0 = time.perf_counter()
        r = mc_delta(s, t, [hi, lo], mc_seed)
        rows = [[(m - h, m + h) for m, h in r[d]] for d in ("remove", "add")]
        d_hi = (max(rows[0][0][0], rows[1][0][0]), max(rows[0][0][1], rows[1][0][1]))
        d_lo = (max(rows[0][1][0], rows[1][1][0]), max(rows[0][1][1], rows[1][1][1]))
        v = _verdict(lo, hi, delta, d_hi, d_lo)
        informative = d_hi[0] > 0 or d_lo[1] < 2 * delta
        truths["monte_carlo"] = {"n": r["n"], "delta_at_upper": d_hi, "delta_at_lower": d_lo,
                                 "wall": time.perf_counter() - w0,
                                 "verdict": v if (informative or v != "ok") else "uninformative"}
    for name in ("opake", "PLD_accounting"):
        ref = rec.get(name)
        if not ref or ref.get("status") != "ok":
            continue
        slack = 1e-9 * max(1.0, abs(hi))
        if ref["upper"] < lo - slack:
            ref["verdict"] = "CONTRADICTED (peer's upper below pld's lower)"
        elif "lower" in ref and ref["lower"] > hi + slack:
            ref["verdict"] = "CONTRADICTED (peer's lower above pld's upper)"
        else:
            ref["verdict"] = "ok"
        truths[name] = {"verdict": ref["verdict"]}
    rec["truths"] = truths


def classify(rec: dict) -> str:
    p = rec["pld"]
    if p.get("status") != "ok":
        return "timed out" if p.get("status") == "timeout" else "error"
    if any(v["verdict"].startswith("CONTRADICTED") for v in rec.get("truths", {}).values()):
        return "contradicted"
    if p["lower"] > p["upper"]:
        # (pld's own two ends contradict each other: one of them is not a bound)
        rec.setdefault("truths", {})["own ends"] = {"verdict": "CONTRADICTED: lower > upper"}
        return "contradicted"
    width = p["upper"] - p["lower"]
    p["ratio"] = width / target_width(p["upper"]) if math.isfinite(width) else math.inf
    if math.isfinite(p["upper"]) and width <= target_width(p["upper"]):
        return "within"
    return "warned" if p.get("warnings") else "silent"


# ---- the run ---------------------------------------------------------------------------------
def run_pld(settings: list[Setting], timeout: float, jsonl: Path | None) -> list[dict]:
    recs: list[dict] = []
    worker = AllocWorker("pld")
    try:
        for s in settings:
            task = {"sigma": s.sigma, "t": s.t, "k": s.k, "epochs": s.epochs, "delta": s.delta}
            w0 = time.perf_counter()
            status, res = worker.run(task, timeout)
            rec = {"index": s.index, **task}
            rec["pld"] = ({"status": "ok", **res} if status == "ok"
                          else {"status": status, "message": res, "elapsed": time.perf_counter() - w0})
            recs.append(rec)
            p = rec["pld"]
            print(f"[{s.index + 1}/{len(settings)}] sigma={s.sigma:.4g} t={s.t} k={s.k} E={s.epochs} "
                  f"delta={s.delta:.3g}: " + (f"[{p['lower']:.6g}, {p['upper']:.6g}] {p['wall']:.2f}s"
                                              + (" warned" if p["warnings"] else "") if status == "ok"
                                              else f"{status} {str(res)[:160]}"), file=sys.stderr, flush=True)
            _save(recs, jsonl)
    finally:
        worker.stop()
    return recs


def run_peers(recs: list[dict], n: int, seed: int, timeout: float) -> None:
    if n <= 0:
        return
    rng = np.random.default_rng(seed + 1)
    ok = [r for r in recs if r["pld"].get("status") == "ok"]
    pick = [ok[i] for i in sorted(rng.choice(len(ok), size=min(n, len(ok)), replace=False).tolist())]
    for kind in ("opake", "PLD_accounting"):
        worker = AllocWorker(kind)
        try:
            for r in pick:
                if kind == "PLD_accounting" and r["k"] != 1:
                    continue
                task = {key: r[key] for key in ("sigma", "t", "k", "epochs", "delta")}
                status, res = worker.run(task, timeout)
                r[kind] = {"status": "ok", **res} if status == "ok" else {"status": status, "message": res}
                print(f"  {kind} #{r['index']}: {r[kind]}"[:200], file=sys.stderr, flush=True)
        finally:
            worker.stop()


def _save(recs: list[dict], jsonl: Path | None) -> None:
    if jsonl is not None:
        tmp = jsonl.with_name(jsonl.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
        tmp.replace(jsonl)


def summary(recs: list[dict]) -> dict:
    classes = {c: [r["index"] for r in recs if r.get("class") == c]
               for c in ("within", "warned", "silent", "contradicted", "timed out", "error")}
    walls = [r["pld"]["wall"] for r in recs if r["pld"].get("status") == "ok"]
    truth_counts: dict[str, dict[str, int]] = {}
    for r in recs:
        for name, v in r.get("truths", {}).items():
            key = v["verdict"].split(" (")[0]
            truth_counts.setdefault(name, {}).setdefault(key, 0)
            truth_counts[name][key] += 1
    return {"n": len(recs), "classes": classes, "truths": truth_counts,
            "p50": float(np.percentile(walls, 50)) if walls else math.nan,
            "max": float(max(walls)) if walls else math.nan}


def markdown(recs: list[dict], args, facts: dict) -> str:
    s = summary(recs)
    n = s["n"]
    c = s["classes"]
    L = ["## Coverage of random allocation (issue 39)", "",
         f"- date: {facts['date']}; pld commit {facts['commit']}; {facts['machine']}; load {facts['load']}",
         f"- `python -m benchmarks.coverage_allocation --n {args.n} --seed {args.seed} --timeout-per-setting "
         f"{args.timeout_per_setting:g}" + (f" --space {args.space}" if args.space != "default" else "") + "`: "
         + SPACES[args.space][1]
         + ", log-uniform each; target `upper - lower <= 1e-4*upper + 1e-6`", "",
         "| outcome | settings |", "|---|---|"]
    for name in ("within", "warned", "silent", "contradicted", "timed out", "error"):
        L.append(f"| {name} | {len(c[name])}/{n} ({100 * len(c[name]) / max(n, 1):.0f}%)"
                 + (f": #{', #'.join(map(str, c[name]))}" if c[name] and name != "within" else "") + " |")
    L.append(f"| wall time per query | p50 {s['p50']:.2f} s, max {s['max']:.2f} s |")
    for name, counts in sorted(s["truths"].items()):
        L.append(f"| truth: {name} | " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + " |")
    L += ["", "| # | sigma | t | k | epochs | delta | pld [lower, upper] | width/target | s | outcome |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        p = r["pld"]
        br = f"[{p['lower']:.6g}, {p['upper']:.6g}]" if p.get("status") == "ok" else p.get("status")
        ratio = f"{p.get('ratio', math.nan):.3g}" if p.get("status") == "ok" else "-"
        tm = f"{p['wall']:.2f}" if p.get("status") == "ok" else f">{args.timeout_per_setting:g}"
        L.append(f"| {r['index']} | {r['sigma']:.3g} | {r['t']} | {r['k']} | {r['epochs']} | {r['delta']:.2g} | {br} "
                 f"| {ratio} | {tm} | {r.get('class')} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.coverage_allocation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--space", choices=tuple(SPACES), default="default",
                    help="strict: k = 1, 100-3000 epochs, delta 1e-13..1e-10 (RANGES_STRICT); dpsgd: "
                         "k = 1, sigma 0.5-8, t 2-2e4, 1-300 epochs (RANGES_DPSGD); long: k = 1, "
                         "sigma 0.5-4, t 2e4-1e6, 1-100 epochs (RANGES_LONG)")
    ap.add_argument("--timeout-per-setting", type=float, default=60.0)
    ap.add_argument("--jsonl", type=Path)
    ap.add_argument("--out", type=Path, help="write the markdown section here")
    ap.add_argument("--from-jsonl", type=Path, help="reuse pld's results; (re)judge and run the peers only")
    ap.add_argument("--peers", type=int, default=8, help="settings checked with opake / PLD_accounting")
    ap.add_argument("--peer-timeout", type=float, default=60.0)
    ap.add_argument("--no-mc", action="store_true")
    args = ap.parse_args(argv)
    facts = machine_facts()
    load0 = _load()
    if args.from_jsonl:
        recs = [json.loads(line) for line in args.from_jsonl.read_text().splitlines() if line.strip()]
        args.n = len(recs)
    else:
        recs = run_pld(sample_settings(args.n, args.seed, args.space), args.timeout_per_setting, args.jsonl)
    if not any(("opake" in r or "PLD_accounting" in r) for r in recs):
        run_peers(recs, args.peers, args.seed, args.peer_timeout)
    for r in recs:
        judge_truths(r, args.seed + r["index"], mc=not args.no_mc)
        r["class"] = classify(r)
    _save(recs, args.jsonl or args.from_jsonl)
    facts["load"] = f"{load0} at start, {_load()} at end"
    md = markdown(recs, args, facts)
    if args.out:
        args.out.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
