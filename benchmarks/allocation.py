"""Random allocation (balls-in-bins) and shuffling: pld's certified brackets against the peers.

Run ``python -m benchmarks.allocation`` (``--peers`` adds opake's upper bounds,
``--pld-accounting`` PLD_accounting's bracket for the first workload, which
takes minutes).  Prints a markdown table; results are recorded by hand in
benchmarks/ALLOCATION.md.

Each pld time is a cold query: the allocation laws' cache is cleared and a
fresh PLD object is built (numba kernels already compiled by a warm-up).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import math
import os
import time
import warnings

import pld
from pld.mechanisms.allocation import RandomAllocation, Shuffling
from pld.mechanisms.allocation import sums as _allocation_sum


def _opake():
    import opake  # noqa: F401  (locate the wheel; its facade may fail to import)

    root = os.path.dirname(importlib.util.find_spec("opake").submodule_search_locations[0])
    path = glob.glob(os.path.join(root, "opake", "api", "accounting", "core", "opake_accounting*.so"))[0]
    spec = importlib.util.spec_from_file_location("opake_accounting", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cold() -> None:
    """Forget every law a query built (the allocation sums, the geometric rounds and their
    partial sums, the label-sum pairs and the process-wide explored laws), keeping the
    compiled kernels and FFT plans."""
    from pld.engine import laws
    from pld.mechanisms.allocation import geometric, partial_sums

    _allocation_sum.sum_laws.cache_clear()
    _allocation_sum.label_sum_pair.cache_clear()
    geometric.geometric_laws.cache_clear()
    partial_sums.clear()
    with laws._SHARED_LOCK:
        laws._SHARED.clear()


def _pld_bracket(build, delta: float, rtol: float | None):
    _cold()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = build()
        lo, hi = d.epsilon_bounds(delta) if rtol is None else d.epsilon_bounds(delta, rtol=rtol)
    seconds = time.perf_counter() - t0
    notes = sorted({w.category.__name__ for w in caught})
    return lo, hi, seconds, notes


def _row(name: str, lo: float, hi: float, seconds: float, notes, peer: str = "") -> str:
    width = hi - lo
    rel = width / hi if math.isfinite(hi) and hi > 0 else math.inf
    return (f"| {name} | [{lo:.5f}, {hi:.5f}] | {rel:.1e} | {seconds:.2f} | {', '.join(notes) or '-'} | "
            f"{peer or '-'} |")


def workloads(quick: bool):
    g1 = pld.Gaussian(1.0)
    yield ("sigma 1, 1-of-100, 100 epochs, delta 1e-5, rtol 1e-3",
           lambda: RandomAllocation(g1, 100).pld().self_compose(100), 1e-5, 1e-3, ("alloc", 1.0, 100, 1, 100))
    yield ("same, default target 1e-4 eps + 1e-6",
           lambda: RandomAllocation(g1, 100).pld().self_compose(100), 1e-5, None, None)
    yield ("same, spacing 0.01 sd, default target",
           lambda: RandomAllocation(g1, 100, spacing=0.01).pld().self_compose(100), 1e-5, None, None)
    yield ("Poisson q = 0.01, T = 10^4 (reference 6.1877)",
           lambda: pld.PoissonSampled(g1, 0.01).pld().self_compose(10_000), 1e-5, 1e-3, None)
    yield ("shuffling, sigma 1, 100 batches, 100 epochs",
           lambda: Shuffling(g1, 100).pld().self_compose(100), 1e-5, 1e-3, None)
    for sigma in (2.0, 1.0, 0.7, 0.5, 0.3):
        if quick and sigma < 0.7:
            continue
        yield (f"single epoch, sigma {sigma}, t = 10^5, delta 1e-10",
               (lambda s=sigma: RandomAllocation(pld.Gaussian(s), 100_000).pld()), 1e-10, 1e-3,
               ("alloc", sigma, 100_000, 1, 1))
        yield (f"single epoch, sigma {sigma}, t = 10^5, delta 1e-5",
               (lambda s=sigma: RandomAllocation(pld.Gaussian(s), 100_000).pld()), 1e-5, 1e-3, None)
    for k in (1, 8, 64):
        yield (f"sigma 1, {k}-of-1024, 10 epochs, delta 1e-5",
               (lambda k=k: RandomAllocation(g1, 1024, participations=k).pld().self_compose(10)), 1e-5, 1e-3,
               ("alloc", 1.0, 1024, k, 10))


def ratio_rows(opake, reps: int) -> list[str]:
    """Issue 42's allocation line: sigma 1, 1-of-100, 100 epochs, delta 1e-5 at the default
    target, pld cold (laws forgotten, kernels compiled) against opake's
    ``random_allocation_gaussian_pld`` at its default configuration (upper end only),
    interleaved in this process; the minimum of ``reps`` runs each."""
    build = (lambda: RandomAllocation(pld.Gaussian(1.0), 100).pld().self_compose(100))
    ours, theirs, up = [], [], math.nan
    for _ in range(reps):
        lo, hi, sec, _ = _pld_bracket(build, 1e-5, None)
        ours.append(sec)
        if opake is not None:
            t0 = time.perf_counter()
            p = opake.random_allocation_gaussian_pld(1.0, 100, 1, config=opake.DiscretizationConfig())
            up = p.self_compose(100).epsilon_at(1e-5)
            theirs.append(time.perf_counter() - t0)
    rows = [f"| sigma 1, 1-of-100, 100 epochs, delta 1e-5, default target (min of {reps}) | [{lo:.5f}, {hi:.5f}] | "
            f"{(hi - lo) / hi:.1e} | {min(ours):.3f} | - | "
            + (f"opake upper {up:.5f} in {min(theirs):.1f} s: {min(theirs) / min(ours):.0f}x |" if theirs else "- |")]
    return rows


def calibration_row() -> str:
    """calibrate_noise with balls-in-bins, cold (laws forgotten), beside the same run's
    Poisson calibration (issue 39: within 3x of it)."""
    seconds = {}
    for sampling in ("poisson", "balls_in_bins"):
        _cold()
        info: dict = {}
        t0 = time.perf_counter()
        sigma = pld.calibrate_noise(6.0, 1e-5, 0.01, 10_000, sampling=sampling, info=info)
        seconds[sampling] = time.perf_counter() - t0
    ratio = seconds["balls_in_bins"] / seconds["poisson"]
    return (f"| calibrate_noise(6.0, 1e-5, q = 0.01, 10^4 steps, balls_in_bins) | sigma = {sigma:.5f} | "
            f"{info['evaluations']} evaluations | {seconds['balls_in_bins']:.2f} | - | "
            f"Poisson's calibration {seconds['poisson']:.3f} s: {ratio:.0f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--peers", action="store_true", help="opake's upper bounds (seconds to a minute each)")
    ap.add_argument("--pld-accounting", action="store_true", help="PLD_accounting on the first workload (minutes)")
    ap.add_argument("--quick", action="store_true", help="skip sigma < 0.7 at t = 10^5")
    ap.add_argument("--opake-discretization", type=float, default=1e-4)
    ap.add_argument("--ratio", type=int, metavar="REPS", help="only issue 42's allocation line (with --peers: "
                    "against opake), REPS runs each")
    args = ap.parse_args()
    RandomAllocation(pld.Gaussian(1.0), 8).pld().epsilon_bounds(1e-3, rtol=1e-2)  # compile the kernels
    opake = _opake() if args.peers else None
    if args.ratio:
        print("| workload | pld bracket | width/eps | pld s | warnings | peer |")
        print("|---|---|---|---|---|---|")
        for row in ratio_rows(opake, args.ratio):
            print(row, flush=True)
        print(calibration_row(), flush=True)
        return
    print("| workload | pld bracket | width/eps | pld s | warnings | peer |")
    print("|---|---|---|---|---|---|")
    for name, build, delta, rtol, peer_spec in workloads(args.quick):
        try:
            lo, hi, sec, notes = _pld_bracket(build, delta, rtol)
        except ValueError as exc:  # a refusal is a result
            lo, hi, sec, notes = 0.0, math.inf, 0.0, [f"refused: {str(exc)[:70]}"]
        peer = ""
        if opake is not None and peer_spec is not None:
            _, sigma, t, k, epochs = peer_spec
            t0 = time.perf_counter()
            try:
                cfg = opake.DiscretizationConfig(discretization=args.opake_discretization)
                p = opake.random_allocation_gaussian_pld(sigma, t, k, config=cfg)
                if epochs > 1:
                    p = p.self_compose(epochs)
                peer = f"opake upper {p.epsilon_at(delta):.5f} in {time.perf_counter() - t0:.1f} s"
            except Exception as exc:  # a peer's failure is a result, not a crash
                peer = f"opake: {type(exc).__name__}: {str(exc)[:60]}"
        print(_row(name, lo, hi, sec, notes, peer), flush=True)
    print(calibration_row(), flush=True)
    if args.peers:
        try:
            import PLD_accounting as P
        except ImportError:
            P = None
        for sigma, t, epochs in ((1.0, 10, 10), (1.0, 100, 1)) if P is not None else ():
            t0 = time.perf_counter()
            up, low = P.gaussian_allocation_epsilon_range(delta=1e-5, sigma=sigma, num_steps=t, num_epochs=epochs)
            t1 = time.perf_counter()
            lo, hi, sec, notes = _pld_bracket(
                lambda s=sigma, t=t, e=epochs: RandomAllocation(pld.Gaussian(s), t).pld().self_compose(e), 1e-5, None)
            print(_row(f"sigma {sigma}, 1-of-{t}, {epochs} epochs, delta 1e-5 (default target)", lo, hi, sec,
                       notes, f"PLD_accounting [{low:.5f}, {up:.5f}] in {t1 - t0:.1f} s"))
    if args.pld_accounting:
        import PLD_accounting as P

        t0 = time.perf_counter()
        up, low = P.gaussian_allocation_epsilon_range(delta=1e-5, sigma=1.0, num_steps=100, num_epochs=100)
        print(f"\nPLD_accounting sigma 1, 1-of-100, 100 epochs: [{low:.5f}, {up:.5f}] in "
              f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
