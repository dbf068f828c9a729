"""Regenerate tests/data/peer_values.json: DP-SGD epsilons from the peer accountants.

The peers are slow on long runs (prv_accountant needs ~30 s at 1e5 steps and
much longer at 1e6), so tests/test_peers.py compares pld against these stored
values and recomputes only a few cheap configurations live.

Run (takes tens of minutes; every peer call runs in a subprocess with a timeout):

    python tests/data/make_peer_values.py [--timeout SECONDS] [--only INDEX ...]
    python tests/data/make_peer_values.py --fine [--timeout SECONDS] [--only INDEX ...]

``--fine`` adds, to the configurations of at most FINE_MAX_STEPS steps, prv_accountant
at ``eps_error = FINE_RELATIVE_ERROR * eps`` (eps: its own coarse estimate, so nothing
here comes from pld) and dp_accounting at the grid FINE_DPA_INTERVAL: a certified
interval about 1e-4 wide and a pessimistic estimate close to the truth.

Peers:
* prv_accountant (Gopi, Lee & Wutschitz 2021): ``Accountant(noise_multiplier,
  sampling_probability, delta, eps_error, max_compositions).compute_epsilon(T)``
  -> (eps_low, eps_estimate, eps_upper), a certified interval.
* dp_accounting's PLD accountant at its default grid (value_discretization_interval
  1e-4), ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` composed T times,
  add-or-remove adjacency: a pessimistic estimate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "peer_values.json"

#: (noise_multiplier, sampling_rate, steps, delta): sigma 0.5-20, q 1e-4-1, T 1-1e6, delta 1e-3-1e-12
CONFIGS = [
    (1.0, 0.01, 1000, 1e-5),      # published anchor 1.8282
    (1.0, 0.01, 10000, 1e-5),     # published anchor 6.188
    (0.8, 0.004, 100000, 1e-5),   # published anchor 13.070
    (1.3, 0.0025, 6000, 1e-5),    # TF-Privacy style, tight 0.640
    (0.5, 0.001, 10000, 1e-6),
    (0.5, 1.0, 1, 1e-3),
    (2.0, 0.1, 100, 1e-8),
    (20.0, 1.0, 1000, 1e-12),
    (4.0, 0.05, 10000, 1e-10),
    (1.0, 1e-4, 1000000, 1e-5),
    (10.0, 0.5, 50, 1e-6),
    (0.7, 0.02, 500, 1e-4),
    (1.5, 0.001, 1000000, 1e-9),
    (3.0, 0.3, 20, 1e-12),
    (0.6, 1e-4, 100000, 1e-3),
    (5.0, 1.0, 1, 1e-5),
    (1.1, 0.05, 2000, 1e-7),
    (8.0, 0.2, 5000, 1e-11),
    (0.9, 0.003, 50000, 1e-6),
    (2.5, 0.01, 300000, 1e-8),
    (15.0, 0.8, 10, 1e-4),
    (1.0, 1.0, 10, 1e-5),
]

PRV_EPS_ERROR = 0.01
DPA_INTERVAL = 1e-4
#: --fine: prv_accountant's eps_error relative to its coarse estimate, dp_accounting's grid,
#: and the longest run fine values are computed for (prv_accountant's cost grows ~1/eps_error)
FINE_RELATIVE_ERROR = 1e-4
FINE_DPA_INTERVAL = 1e-5
FINE_MAX_STEPS = 10_000


def prv_epsilon(sigma: float, q: float, steps: int, delta: float, eps_error: float = PRV_EPS_ERROR):
    import prv_accountant

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acc = prv_accountant.Accountant(noise_multiplier=sigma, sampling_probability=q, delta=delta,
                                        eps_error=eps_error, max_compositions=steps)
        lo, est, hi = acc.compute_epsilon(steps)
    return [float(lo), float(est), float(hi)]


def dp_accounting_epsilon(sigma: float, q: float, steps: int, delta: float, interval: float = DPA_INTERVAL):
    import dp_accounting
    from dp_accounting import pld as dpl

    acc = dpl.PLDAccountant(value_discretization_interval=interval)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return float(acc.get_epsilon(delta))


def _worker(fn_name, args, conn):
    try:
        t = time.perf_counter()
        val = globals()[fn_name](*args)
        conn.send(("ok", val, time.perf_counter() - t))
    except Exception as exc:  # pragma: no cover - recorded in the JSON
        conn.send(("error", repr(exc), 0.0))


def run_with_timeout(fn_name, args, timeout):
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_worker, args=(fn_name, args, b))
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.terminate()
        p.join()
        return {"status": "timeout", "timeout_seconds": timeout}
    if not a.poll():
        return {"status": "crashed"}
    status, val, secs = a.recv()
    if status != "ok":
        return {"status": "error", "error": val}
    return {"status": "ok", "value": val, "seconds": round(secs, 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per peer call")
    ap.add_argument("--only", type=int, nargs="*", help="indices of CONFIGS to (re)compute")
    ap.add_argument("--fine", action="store_true",
                    help="add prv_accountant at eps_error 1e-4 eps and dp_accounting at a 1e-5 grid "
                         f"(configurations of at most {FINE_MAX_STEPS} steps)")
    args = ap.parse_args(argv)

    import dp_accounting
    import prv_accountant

    old = json.loads(OUT.read_text()) if OUT.exists() else {"configs": []}
    by_key = {tuple(e["config"]): e for e in old.get("configs", [])}
    todo = range(len(CONFIGS)) if not args.only else args.only
    for i in todo:
        cfg = CONFIGS[i]
        sigma, q, steps, delta = cfg
        print(f"[{i}] sigma={sigma} q={q} T={steps} delta={delta}", flush=True)
        if args.fine:
            entry = by_key[tuple(cfg)]
            if steps > FINE_MAX_STEPS or entry["prv_accountant"]["status"] != "ok":
                continue
            err = FINE_RELATIVE_ERROR * entry["prv_accountant"]["value"][1]
            prv = run_with_timeout("prv_epsilon", (sigma, q, steps, delta, err), args.timeout)
            prv["eps_error"] = err
            print(f"    prv_accountant (eps_error {err:.3g}): {prv}", flush=True)
            dpa = run_with_timeout("dp_accounting_epsilon", (sigma, q, steps, delta, FINE_DPA_INTERVAL),
                                   args.timeout)
            dpa["value_discretization_interval"] = FINE_DPA_INTERVAL
            print(f"    dp_accounting (grid {FINE_DPA_INTERVAL:g}): {dpa}", flush=True)
            entry["prv_accountant_fine"], entry["dp_accounting_fine"] = prv, dpa
        else:
            prv = run_with_timeout("prv_epsilon", (sigma, q, steps, delta), args.timeout)
            print(f"    prv_accountant: {prv}", flush=True)
            dpa = run_with_timeout("dp_accounting_epsilon", (sigma, q, steps, delta), args.timeout)
            print(f"    dp_accounting:  {dpa}", flush=True)
            fine = {k: v for k, v in by_key.get(tuple(cfg), {}).items() if k.endswith("_fine")}
            by_key[tuple(cfg)] = {"config": list(cfg), "prv_accountant": prv, "dp_accounting": dpa, **fine}
        data = {
            "description": "DP-SGD epsilons from peer accountants; regenerate with tests/data/make_peer_values.py",
            "peers": {
                "prv_accountant": {"version": getattr(prv_accountant, "__version__", "0.2.0"),
                                   "eps_error": PRV_EPS_ERROR,
                                   "value": "[eps_low, eps_estimate, eps_upper]"},
                "dp_accounting": {"version": getattr(dp_accounting, "__version__", "?"),
                                  "value_discretization_interval": DPA_INTERVAL,
                                  "value": "PLDAccountant epsilon (pessimistic)"},
                "prv_accountant_fine": {"eps_error": f"{FINE_RELATIVE_ERROR:g} x the coarse estimate (per entry)",
                                        "value": "[eps_low, eps_estimate, eps_upper]"},
                "dp_accounting_fine": {"value_discretization_interval": FINE_DPA_INTERVAL,
                                       "value": "PLDAccountant epsilon (pessimistic)"},
            },
            "configs": [by_key[tuple(c)] for c in CONFIGS if tuple(c) in by_key],
        }
        tmp = OUT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
