"""Helpers of the ``pld`` command: DP-SGD flags to a configuration, outputs, timing."""

from __future__ import annotations

import json
import math
import os
import sys
from fractions import Fraction

from pld.accounting import sampling as sampling_registry
from pld.cli.args import CLIError


def _frac(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _config(args, *, need_sigma: bool = True, need_q: bool = True, need_t: bool = True):
    """Resolve the DP-SGD flags into a DPSGDConfig (MNIST example when none given)."""
    from pld.report import MNIST_EXAMPLE, DPSGDConfig

    sigma = args.noise_multiplier
    if args.delta is None:
        args.delta = 1e-5
    q, T, n, b, E = args.sampling_rate, args.steps, args.dataset_size, args.batch_size, args.epochs
    run_flags = [x is not None for x in (q, T, n, b, E)]
    runs = getattr(args, "runs", 1) or 1
    if not any(run_flags) and need_q and need_t:
        ex = MNIST_EXAMPLE
        return DPSGDConfig(noise_multiplier=ex.noise_multiplier if sigma is None else sigma,
                           sampling_rate=ex.sampling_rate, steps=ex.steps, delta=args.delta,
                           sampling=args.sampling, participations=getattr(args, "participations", None),
                           runs=runs, dataset_size=ex.dataset_size,
                           batch_size=ex.batch_size, epochs=ex.epochs, batch_size_given=False,
                           example=ex.example)
    if T is not None and E is not None:
        raise CLIError("give either --steps or --epochs, not both")
    if q is not None and b is not None:
        raise CLIError("give either --sampling-rate or --batch-size (with --dataset-size), not both")
    if b is not None and n is None:
        raise CLIError("--batch-size needs --dataset-size (q = batch size / dataset size)")
    if b is not None and b > n:
        raise CLIError(f"--batch-size {b} is larger than --dataset-size {n}")
    qf = None
    if b is not None:
        qf = Fraction(b, n)
        q = b / n
    elif q is not None:
        qf = _frac(q)
    if E is not None:
        if qf is None:
            raise CLIError("--epochs needs --sampling-rate or --batch-size with --dataset-size")
        T = math.ceil(_frac(E) / qf)
        if T > 10**12:
            # (the count itself can have hundreds of digits: say how large, not what)
            approx = E / float(qf)
            size = f"about {approx:.3g}" if math.isfinite(approx) else "more than 1e308"
            raise CLIError(f"--epochs {E:g} at q = {float(qf):g} needs {size} steps, above the limit of 1e12")
    if need_q and q is None:
        raise CLIError("give --sampling-rate (or --batch-size with --dataset-size)")
    if need_t and T is None:
        raise CLIError("give --steps (or --epochs)")
    if need_sigma and sigma is None:
        sigma = MNIST_EXAMPLE.noise_multiplier
    return DPSGDConfig(noise_multiplier=sigma, sampling_rate=q, steps=T, delta=args.delta,
                       sampling=args.sampling, participations=getattr(args, "participations", None),
                       runs=runs, dataset_size=n, batch_size=b, epochs=E,
                       batch_size_given=b is not None, sampling_rate_given=args.sampling_rate is not None)


def _emit_json(obj) -> None:
    from pld.report import jsonable

    sys.stdout.write(json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def _check_outputs(*paths, plot=None) -> None:
    """Fail before any work if an output cannot be written."""
    for p in paths:
        if p is None:
            continue
        folder = os.path.dirname(os.path.abspath(p))
        if not os.path.isdir(folder):
            raise CLIError(f"cannot write {p!r}: folder {folder!r} does not exist")
        if os.path.isdir(p):
            raise CLIError(f"cannot write {p!r}: it is a folder")
    if plot is not None:
        from pld.report.plots import check_plot_path

        check_plot_path(plot)


def _optional(module: str, names: tuple, what: str):
    """Import ``names`` from ``module`` lazily; a clear CLIError if not available yet."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise CLIError(f"{what} is not available in this installation ({module} is missing)") from None
        raise
    out = []
    for n in names:
        f = getattr(mod, n, None)
        if f is None:
            raise CLIError(f"{what} is not available in this installation ({module}.{n} is missing)")
        out.append(f)
    return out


def _wrote(path: str, what: str) -> None:
    """Confirm a written file on stderr (stdout may be JSON or CSV)."""
    size = os.path.getsize(path)
    sys.stderr.write(f"pld: wrote {path} ({what}, {_size(size)})\n")


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10_000 else f"{n / 1024:.0f} kB"


def _write_outputs(res: dict, pld_obj, delta: float, *, plot, save, title, plot_bytes=None,
                   plot_what: str = "delta curve, PLD and trade-off plot") -> None:
    """Render every output file first, then write each atomically (no half-done set)."""
    files = []
    if plot:
        from pld.report.plots import check_plot_path, render_report

        fmt = check_plot_path(plot)
        data = plot_bytes(fmt) if plot_bytes is not None else render_report(
            pld_obj, fmt=fmt, delta=delta, epsilon=res["epsilon_upper"], title=title)
        files.append((plot, data, plot_what))
        res["plot"] = plot
    if save:
        from pld.io import to_bytes

        files.append((save, to_bytes(pld_obj, delta=delta), "the composed PLD; pld.load reads it"))
        res["saved"] = save
    if files:
        from pld.io import write_atomic

        for path, data, _ in files:
            write_atomic(path, data)
        for path, _, what in files:
            _wrote(path, what)


#: ``[(when main() started, whether it is the process's first command)]``
_STARTED: list = []


def _timing(res: dict) -> dict:
    """Wall time of the command -- with ``import pld`` (and any first-run kernel
    compilation) on the first command of a process -- and the compilation."""
    import time

    import pld
    from pld.engine import warm as _jit_warm

    started, first = _STARTED[-1] if _STARTED else (time.perf_counter(), False)
    res["wall_seconds"] = time.perf_counter() - started + (pld._IMPORT_SECONDS if first else 0.0)
    res["compile_seconds"] = _jit_warm.compile_seconds if first else 0.0
    return res


def _title(cfg, delta: float) -> str:
    """What a plot shows: sigma, q, T (and runs), delta."""
    t = (f"DP-SGD sigma={cfg.noise_multiplier:g} q={cfg.sampling_rate:.4g} T={cfg.steps}"
         + (f" x {cfg.runs} runs" if cfg.runs > 1 else ""))
    if cfg.sampling != sampling_registry.POISSON.name:
        t += f" ({cfg.sampling.replace('_', ' ')})"
    return t + f" delta={delta:g}"


def _per_epoch(cfg, res: dict) -> list[dict]:
    """Certified epsilon at the end of every epoch of one run (the last row is the answer)."""
    from pld.accounting.dpsgd import dpsgd_mechanism
    from pld.accounting.epochs import MAX_ROWS, epsilon_over_steps

    if cfg.batch_size and cfg.dataset_size:
        qf = Fraction(cfg.batch_size, cfg.dataset_size)
    else:
        qf = _frac(cfg.sampling_rate)
    epochs = cfg.epochs if cfg.epochs is not None else float(cfg.steps * qf)
    full = math.floor(_frac(epochs)) if cfg.epochs is not None else int(cfg.steps * qf)
    if full > MAX_ROWS:
        raise CLIError(f"--per-epoch shows at most {MAX_ROWS} epochs (one certified query each); "
                       f"this run has {full}")
    marks = list(range(1, full + 1))
    counts = [math.ceil(Fraction(e) / qf) for e in marks]
    rows_at = [(e, t) for e, t in zip(marks, counts) if t < cfg.steps]
    rows = []
    if rows_at:
        # 1e-3 brackets: the table prints 4 decimals of the (certified) upper end
        table = epsilon_over_steps(dpsgd_mechanism(cfg.noise_multiplier, cfg.sampling_rate, sampling=cfg.sampling),
                                   [t for _, t in rows_at], cfg.delta, rtol=1e-3)
        rows = [{"epoch": float(e), "steps": t, "epsilon_lower": float(a), "epsilon_upper": float(b),
                 "bracket_rtol": 1e-3}
                for (e, t), a, b in zip(rows_at, table.epsilon_lower, table.epsilon_upper)]
    rows.append({"epoch": float(epochs), "steps": cfg.steps, "epsilon_lower": res["epsilon_lower"],
                 "epsilon_upper": res["epsilon_upper"], "bracket_rtol": 1e-4})
    return rows
