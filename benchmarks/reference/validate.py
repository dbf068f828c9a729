"""Checks of the oracle and comparisons: ``python -m benchmarks.reference.validate [gauss|dpacc|pld]``.

* ``gauss``: q = 1 brackets against the exact Gaussian composition (must contain it, <= 2e-5 wide);
* ``dpacc``: dp_accounting's PLDAccountant (pessimistic; must not fall below the oracle's lower end)
  at fine grids on a few table entries;
* ``pld``: pld's bracket (public API, default settings) against every table entry: intersection,
  and the position of pld's ends relative to the oracle's bracket.

Results go to ``validation.json`` beside the table (pld's timings are machine-dependent).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

OUT = Path(__file__).with_name("validation.json")


def _load_out() -> dict:
    return json.loads(OUT.read_text()) if OUT.exists() else {}


def gauss() -> list[dict]:
    from .oracle import Setting, gaussian_epsilon, reference_epsilon

    rows = []
    for sigma, T, delta in [(1.0, 50, 1e-5), (4.0, 1000, 1e-10), (0.5, 200, 1e-12), (6.0, 3000, 1e-4),
                            (8.0, 120, 1e-6), (2.0, 5, 1e-8), (0.3, 2000, 1e-9), (3.0, 100000, 1e-7)]:
        truth = gaussian_epsilon(delta, math.sqrt(T) / sigma)
        r = reference_epsilon(Setting("g", [(sigma, 1.0, T)], delta))
        rows.append({"sigma": sigma, "T": T, "delta": delta, "truth": truth, "lower": r["lower"],
                     "upper": r["upper"], "contains": r["lower"] <= truth <= r["upper"],
                     "rel_width": r["rel_width"], "seconds": round(r["total_seconds"], 1)})
        print(rows[-1], flush=True)
    return rows


def dpacc(names: list[str] | None = None) -> list[dict]:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    from .build import load

    recs = {r["name"]: r for r in load()}
    names = names or ["readme_s1_q01_T1000", "readme_s13_q0025_T6000", "mnist", "rand001", "rand033"]
    rows = []
    for n in names:
        r = recs.get(n)
        if r is None or r["adjacency"] != "add_remove" or len(r["phases"]) != 1:
            continue
        (sigma, q, T), = r["phases"]
        for grid in (1e-4, 2e-5):
            t0 = time.time()
            acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=grid)
            acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), int(T))
            eps = acc.get_epsilon(r["delta"])
            rows.append({"name": n, "grid": grid, "dp_accounting": eps, "oracle_lower": r["lower"],
                         "oracle_upper": r["upper"], "above_oracle_lower": eps >= r["lower"],
                         "excess_over_upper_rel": (eps - r["upper"]) / r["upper"],
                         "seconds": round(time.time() - t0, 1)})
            print(rows[-1], flush=True)
    return rows


def pld_cmp() -> list[dict]:
    import pld

    from .build import load

    rows = []
    for r in load():
        phases = [tuple(p) for p in r["phases"]]
        t0 = time.time()
        if r["adjacency"] == "substitute":
            (s, q, T), = phases
            law = pld.PoissonSampledSubstitute(pld.Gaussian(s), q).pld().self_compose(int(T))
        elif len(phases) == 1:
            s, q, T = phases[0]
            law = pld.dpsgd(s, q, int(T))
        else:
            law = pld.dpsgd_schedule([(s, q, int(t)) for s, q, t in phases])
        lo, hi = law.epsilon_bounds(r["delta"])
        dt = time.time() - t0
        olo, ohi = r["lower"], r["upper"]
        eps = 0.5 * (olo + ohi)
        rows.append({"name": r["name"], "pld_lower": lo, "pld_upper": hi, "oracle_lower": olo, "oracle_upper": ohi,
                     "intersects": max(lo, olo) <= min(hi, ohi), "upper_ok": hi >= olo, "lower_ok": lo <= ohi,
                     # pld's upper end's excess over the truth is at least (hi - ohi)/eps, at most (hi - olo)/eps
                     "pld_upper_excess_rel": [(hi - ohi) / eps, (hi - olo) / eps],
                     "pld_lower_shortfall_rel": [(olo - lo) / eps, (ohi - lo) / eps],
                     "pld_rel_width": (hi - lo) / hi if hi > 0 else 0.0, "pld_seconds": round(dt, 2)})
        print(rows[-1]["name"], rows[-1]["intersects"], f"{lo:.9g} {hi:.9g} | {olo:.9g} {ohi:.9g}", flush=True)
    return rows


def summary() -> None:
    """Print the table's coverage and pld's position relative to the oracle (markdown)."""
    from .build import load

    recs = load()
    tight = [r for r in recs if r["rel_width"] <= 2e-5]
    print(f"{len(recs)} settings, {len(tight)} within 2e-5; worst width within target "
          f"{max(r['rel_width'] for r in tight):.2e}; total oracle time {sum(r['seconds'] for r in recs) / 3600:.2f} h")
    for r in recs:
        if r["rel_width"] > 2e-5:
            print(f"  not within target: {r['name']} {r['phases']} delta={r['delta']} "
                  f"[{r['lower']:.9g}, {r['upper']:.9g}] rel {r['rel_width']:.2e}")
    out = _load_out().get("pld", [])
    if out:
        bad = [p for p in out if not p["intersects"]]
        print(f"pld: {len(out)} compared, {len(bad)} not intersecting")
        ex = sorted(p["pld_upper_excess_rel"][0] for p in out if p["name"] in {r["name"] for r in tight})
        sh = sorted(p["pld_lower_shortfall_rel"][0] for p in out if p["name"] in {r["name"] for r in tight})
        print(f"pld upper end above the oracle's upper end (relative to eps): median {ex[len(ex) // 2]:.2e}, "
              f"max {ex[-1]:.2e}, min {ex[0]:.2e}")
        print(f"pld lower end below the oracle's lower end: median {sh[len(sh) // 2]:.2e}, max {sh[-1]:.2e}, "
              f"min {sh[0]:.2e}")


def main(argv: list[str]) -> int:
    if argv == ["summary"]:
        summary()
        return 0
    what = argv or ["gauss", "dpacc", "pld"]
    out = _load_out()
    if "gauss" in what:
        out["gauss"] = gauss()
    if "dpacc" in what:
        out["dp_accounting"] = dpacc()
    if "pld" in what:
        out["pld"] = pld_cmp()
    OUT.write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
