"""Helpers of the ``pld`` command: DP-SGD flags to a configuration, outputs, timing."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from fractions import Fraction

from pld.accounting import sampling as sampling_registry
from pld.cli.args import CLIError


def _frac(x: float) -> Fraction:
    return Fraction(repr(float(x)))


#: DP-SGD flags that describe the run (any of them: the run is the user's, not the example)
_RUN_FLAGS = ("sampling_rate", "steps", "dataset_size", "batch_size", "epochs", "steps_per_epoch",
              "physical_batch_size", "accumulation_steps")
_PARAMETERS = re.compile(r"\b(noise_multiplier|sampling_rate|dataset_size|physical_batch_size|batch_size|"
                         r"accumulation_steps|steps_per_epoch|drop_last|participations)\b|\b(steps|epochs)(?==)")


def flag_names(message: str) -> str:
    """An API error message in the command line's words (``batch_size`` -> ``--batch-size``)."""
    message = message.replace("give steps or epochs", "give --steps or --epochs")
    message = message.replace("either steps or epochs", "either --steps or --epochs")
    message = message.replace("drop_last=True", "--drop-last").replace("drop_last=False", "no --drop-last")
    message = re.sub(r"sampling='([a-z_]+)'", r"--sampling \1", message)
    return _PARAMETERS.sub(lambda m: "--" + (m.group(1) or m.group(2)).replace("_", "-"), message)


def _given(args, name: str):
    return getattr(args, name, None)


def _config(args, *, need_sigma: bool = True, need_q: bool = True, need_t: bool = True):
    """Resolve the DP-SGD flags into a DPSGDConfig (the MNIST example when no run flag is given).

    The run's loader (``--dataset-size``, ``--batch-size``, ``--drop-last``,
    ``--steps-per-epoch``, gradient accumulation) is resolved by
    :func:`pld.accounting.loaders.resolve_run`, as ``pld.dpsgd`` does.  A
    missing ``--noise-multiplier`` is an error unless no run flag is given.
    """
    from pld.accounting.loaders import RunShape, resolve_run
    from pld.report import MNIST_EXAMPLE, DPSGDConfig

    sigma = args.noise_multiplier
    if args.delta is None:
        args.delta = 1e-5
    q, T, n, b, E = args.sampling_rate, args.steps, args.dataset_size, args.batch_size, args.epochs
    drop = bool(_given(args, "drop_last"))
    runs = getattr(args, "runs", 1) or 1
    k = _given(args, "participations")
    if not drop and all(_given(args, f) is None for f in _RUN_FLAGS) and need_q and need_t:
        ex = MNIST_EXAMPLE
        try:
            shape = resolve_run(args.sampling, dataset_size=ex.dataset_size, batch_size=ex.batch_size,
                                epochs=ex.epochs, participations=k)
        except (TypeError, ValueError) as exc:
            raise CLIError(flag_names(str(exc))) from None
        return DPSGDConfig(noise_multiplier=ex.noise_multiplier if sigma is None else sigma,
                           sampling_rate=shape.sampling_rate, steps=shape.steps, delta=args.delta,
                           sampling=args.sampling, participations=k, runs=runs, dataset_size=ex.dataset_size,
                           batch_size=ex.batch_size, epochs=ex.epochs, batch_size_given=False,
                           example=ex.example, shape=shape)
    if need_sigma and sigma is None:
        raise CLIError("give --noise-multiplier (noise std / clipping norm): it is what the run's privacy rests on; "
                       "only 'pld dpsgd' without run flags accounts an example (MNIST, sigma 1.1)")
    loader = dict(epochs=E, dataset_size=n, batch_size=b, drop_last=drop,
                  steps_per_epoch=_given(args, "steps_per_epoch"),
                  physical_batch_size=_given(args, "physical_batch_size"),
                  accumulation_steps=_given(args, "accumulation_steps"), participations=k)
    resolved: RunShape | None = None
    try:
        if need_q and need_t:
            resolved = resolve_run(args.sampling, q, T, **loader)
            q, T = resolved.sampling_rate, resolved.steps
            b = resolved.batch_size
        else:  # (calibration: one of them is solved for; pld.accounting.calibrate_loader resolves the rest)
            if q is None and need_q:
                raise CLIError("give --sampling-rate (or --batch-size with --dataset-size)")
            if T is None and E is None and need_t:
                raise CLIError("give --steps (or --epochs)")
    except (TypeError, ValueError) as exc:
        raise CLIError(flag_names(str(exc))) from None
    return DPSGDConfig(noise_multiplier=sigma, sampling_rate=q, steps=T, delta=args.delta,
                       sampling=args.sampling, participations=k, runs=runs, dataset_size=n, batch_size=b,
                       epochs=E, batch_size_given=b is not None, sampling_rate_given=args.sampling_rate is not None,
                       shape=resolved)


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
    """Certified epsilon at the end of every epoch of one run (the last row is the answer).

    Every row is its own query at the default bracket target; a row whose bracket
    misses it is said in ``res["warnings"]`` (never silent).  Shuffling: the rows'
    lower ends are the max-of-epoch construction (random allocation's, slower, only
    in the last row, which is the report's)."""
    import warnings
    from dataclasses import replace

    from pld.accounting.epochs import MAX_ROWS
    from pld.accounting.loaders import run_pld
    from pld.distribution import TargetMissedWarning

    shape = cfg.run_shape()
    m = shape.steps_per_epoch
    if m is not None:
        epochs = cfg.epochs if cfg.epochs is not None else shape.steps / m
        counts_of = lambda e: e * m  # noqa: E731
    else:
        qf = _frac(cfg.sampling_rate)
        epochs = cfg.epochs if cfg.epochs is not None else float(cfg.steps * qf)
        counts_of = lambda e: math.ceil(Fraction(e) / qf)  # noqa: E731
    full = math.floor(_frac(epochs))
    if full > MAX_ROWS:
        raise CLIError(f"--per-epoch shows at most {MAX_ROWS} epochs (one certified query each); "
                       f"this run has {full}")
    rows = []
    missed = []
    for e in range(1, full + 1):
        t = counts_of(e)
        if t >= cfg.steps:
            break
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TargetMissedWarning)
            if shape.sampling == "shuffle":
                from pld.report import shuffle_bounds_of

                sb = shuffle_bounds_of(replace(cfg, runs=1), replace(shape, steps=t, epochs=None),
                                       alternatives=False, random_allocation=False)
                lo, hi = sb.epsilon_lower, sb.epsilon_upper
                met = all(c.target_met for c in sb.constructions)
            else:
                lo, hi = run_pld(cfg.noise_multiplier, replace(shape, steps=t, epochs=None)).epsilon_bounds(cfg.delta)
                met = True
        met = met and not any(issubclass(w.category, TargetMissedWarning) for w in caught)
        if not met:
            missed.append(e)
        rows.append({"epoch": float(e), "steps": t, "epsilon_lower": float(lo), "epsilon_upper": float(hi),
                     "target_met": met})
    rows.append({"epoch": float(epochs), "steps": cfg.steps, "epsilon_lower": res["epsilon_lower"],
                 "epsilon_upper": res["epsilon_upper"], "target_met": bool(res.get("target_met", True))})
    if missed:
        which = ", ".join(map(str, missed[:8])) + (", ..." if len(missed) > 8 else "")
        res.setdefault("warnings", []).append(
            f"the brackets of epoch{'s' if len(missed) > 1 else ''} {which} are wider than their target "
            f"(upper - lower <= 1e-4 * epsilon + 1e-6); both ends are still certified")
    return rows
