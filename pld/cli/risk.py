"""``pld risk``: what an epsilon means for an attacker, certified (:mod:`pld.report.risk`).

For a DP-SGD run (the flags of ``pld dpsgd``): the certified epsilon bracket,
then the certified TPR of the best membership-inference attack at each
``--fpr`` (the larger of the two directions, and which one binds), the largest
advantage, the reconstruction bound of Hayes et al. for ``--candidates``, and
with ``--gdp`` the Gaussian-DP fit.  ``--target-tpr B --at-fpr A`` solves for
the smallest noise multiplier instead (``pld.calibrate_noise(target_tpr=...)``).
"""

from __future__ import annotations

import argparse
import math

from pld.cli.args import CLIError, _add_config, _count, _float, _float_list
from pld.cli.util import _config, _emit_json, _timing

__all__ = ["add_risk", "cmd_risk"]

#: most FPRs (or TPRs) one command reports
MAX_RATES = 64


def add_risk(sub, fmt) -> None:
    """Register ``pld risk`` on the subcommand parser ``sub``."""
    p = sub.add_parser("risk", help="what epsilon means: certified attack TPR at given FPRs, advantage, "
                                    "reconstruction bound; or calibrate sigma to a TPR target",
                       description="Certified brackets on the best membership-inference attack's true-positive "
                                   "rate at each --fpr (from the f-DP trade-off curve of both neighbouring "
                                   "directions), the largest advantage TPR - FPR, and the reconstruction bound of "
                                   "Hayes et al. (NeurIPS 2023) for a uniform prior over --candidates records. "
                                   "With --target-tpr and --at-fpr: the smallest noise multiplier meeting it.",
                       formatter_class=fmt)
    _add_config(p)
    p.add_argument("--fpr", type=_float_list("open01"), default=[1e-4, 1e-3, 1e-2, 0.1], metavar="A[,A...]",
                   help="false-positive rates (default 1e-4,1e-3,0.01,0.1)")
    p.add_argument("--tpr", type=_float_list("open01"), metavar="B[,B...]",
                   help="also: the smallest FPR at which an attack reaches these true-positive rates")
    p.add_argument("--candidates", type=_count(2, 10**12), metavar="M",
                   help="also: the reconstruction bound for a uniform prior over M candidates")
    p.add_argument("--gdp", action="store_true", help="also: the Gaussian-DP mu that fits the curve")
    p.add_argument("--target-tpr", type=_float("open01"), metavar="B",
                   help="solve for the smallest noise multiplier whose TPR at --at-fpr is at most B")
    p.add_argument("--at-fpr", type=_float("open01"), metavar="A", help="the FPR of --target-tpr")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_risk)


def cmd_risk(args: argparse.Namespace) -> int:
    import time

    from pld import __version__
    from pld.report import dpsgd_pld, jsonable, neighbouring
    from pld.report.risk import TradeOff

    if (args.target_tpr is None) != (args.at_fpr is None):
        raise CLIError("give --target-tpr and --at-fpr together")
    for name, values in (("--fpr", args.fpr), ("--tpr", args.tpr or [])):
        if len(values) > MAX_RATES:
            raise CLIError(f"{name}: at most {MAX_RATES} values, got {len(values)}")
    if args.target_tpr is not None:
        return _calibrate(args)
    cfg = _config(args)
    t0 = time.perf_counter()
    d = dpsgd_pld(cfg)
    eps_lo, eps_hi = d.epsilon_bounds(cfg.delta)
    t1 = time.perf_counter()
    # (the grids of that epsilon query: the risk costs their lattice, not another query,
    # unless a bracket misses its target)
    curve = TradeOff(d, delta=cfg.delta)
    risk = curve.tpr(sorted(set(args.fpr)))
    res: dict = {
        "config": {"noise_multiplier": cfg.noise_multiplier, "sampling_rate": cfg.sampling_rate,
                   "steps": cfg.steps, "runs": cfg.runs, "sampling": cfg.sampling,
                   "neighbouring": neighbouring(cfg.sampling)},
        "delta": cfg.delta, "epsilon_lower": eps_lo, "epsilon_upper": eps_hi,
        "attack": risk.as_dict(),
        "advantage": dict(zip(("lower", "upper"), curve.advantage())),
    }
    if args.tpr:
        lo, hi = curve.fpr_bounds(sorted(set(args.tpr)))
        res["fpr_at_tpr"] = {"tpr": sorted(set(args.tpr)), "fpr_lower": list(lo), "fpr_upper": list(hi)}
    if args.candidates is not None:
        r = curve.tpr([1.0 / args.candidates]).by_direction["remove"]
        res["reconstruction"] = {"candidates": args.candidates, "lower": r[0][0], "upper": r[1][0]}
    if args.gdp:
        g = curve.gdp()
        res["gdp"] = {"mu_lower": g.mu_lower, "mu_upper": g.mu_upper, "mu_range_upper": g.mu_range_upper,
                      "fpr_range": [g.fpr_min, g.fpr_max], "gap_upper": g.gap_upper}
    t2 = time.perf_counter()
    res["seconds"] = {"epsilon": t1 - t0, "risk": t2 - t1}
    res["version"] = __version__
    _timing(res)
    if args.json:
        _emit_json(jsonable(res))
    else:
        print(_format(res, cfg))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import pld

    cfg = _config(args, need_sigma=False)
    info: dict = {}
    sigma = pld.calibrate_noise(target_tpr=args.target_tpr, at_fpr=args.at_fpr, sampling_rate=cfg.sampling_rate,
                                steps=cfg.steps * cfg.runs, sampling=cfg.sampling, info=info)
    res = {"noise_multiplier": sigma, "target_tpr": args.target_tpr, "at_fpr": args.at_fpr,
           "sampling_rate": cfg.sampling_rate, "steps": cfg.steps * cfg.runs, "sampling": cfg.sampling,
           "evaluations": info.get("evaluations"), "seconds": info.get("seconds")}
    _timing(res)
    if args.json:
        _emit_json(res)
    else:
        print(f"noise multiplier {sigma:.6g}: the best attack's certified TPR at FPR {args.at_fpr:g} is at most "
              f"{args.target_tpr:g} (q = {cfg.sampling_rate:.6g}, T = {cfg.steps * cfg.runs}, "
              f"{cfg.sampling.replace('_', ' ')}; {info.get('evaluations')} certified accountings)")
    return 0


def _decimals(x: float, digits: int = 5) -> int:
    """Decimals that show ``x`` to ``digits`` significant digits."""
    return max(0, digits - 1 - math.floor(math.log10(x))) if x > 0 and math.isfinite(x) else digits


def _format(res: dict, cfg) -> str:
    from pld.report.rounding import bracket as _bracket
    from pld.report.rounding import round_up as _round_up

    def round_up(x: float, digits: int) -> str:  # (significant digits, rounded up)
        return _round_up(x, _decimals(x, digits))

    def bracket(lo: float, hi: float) -> str:  # (outward, one more digit than the point value)
        return _bracket(lo, hi, _decimals(hi, 6))

    a = res["attack"]
    lines = [f"({round_up(res['epsilon_upper'], 5)}, {res['delta']:g})-DP means, for the best membership-inference "
             "attack (certified brackets):",
             f"  run   sigma = {cfg.noise_multiplier:g}, q = {cfg.sampling_rate:.6g}, T = {cfg.steps}"
             + (f" x {cfg.runs} runs" if cfg.runs > 1 else "") + f"; {res['config']['neighbouring']}",
             "        FPR   TPR at most   certified bracket          binding test"]
    for i, fpr in enumerate(a["fpr"]):
        d = a["binding_direction"][i]
        test = "membership (in vs out)" if d == "remove" else "non-membership (out vs in)"
        lines.append(f"  {fpr:9.3g}   {round_up(a['tpr_upper'][i], 5):<11}   "
                     f"{bracket(a['tpr_lower'][i], a['tpr_upper'][i]):<24}   {test}"
                     + ("" if a["binding_certain"][i] else " (not proven)"))
    adv = res["advantage"]
    lines.append(f"  advantage   max TPR - FPR at most {round_up(adv['upper'], 5)}  "
                 f"{bracket(adv['lower'], adv['upper'])}")
    if "fpr_at_tpr" in res:
        f = res["fpr_at_tpr"]
        for b, lo, hi in zip(f["tpr"], f["fpr_lower"], f["fpr_upper"]):
            lines.append(f"  to reach TPR {b:g} an attack needs FPR at least {lo:.5g}  {bracket(lo, hi)}")
    if "reconstruction" in res:
        r = res["reconstruction"]
        lines.append(f"  reconstruction   uniform prior over {r['candidates']} candidates: success at most "
                     f"{round_up(r['upper'], 5)}  {bracket(r['lower'], r['upper'])} (Hayes et al. 2023)")
    if "gdp" in res:
        g = res["gdp"]
        rng = f"FPR in [{g['fpr_range'][0]:g}, {g['fpr_range'][1]:g}]"
        gdp = (f"  Gaussian DP   best-fit mu {bracket(g['mu_lower'], g['mu_upper'])}; mu-GDP on {rng} for "
               f"mu = {round_up(g['mu_range_upper'], 4)} (the curve within {round_up(g['gap_upper'], 3)} of it)")
        lines.append(gdp)
    if not all(a["target_met"]):
        lines.append("  note  some TPR brackets are wider than their target (1e-4 relative); both ends are certified")
    secs = res["seconds"]
    lines.append(f"pld {res['version']}, epsilon {secs['epsilon']:.2f} s, risk {1e3 * secs['risk']:.0f} ms")
    return "\n".join(lines)
