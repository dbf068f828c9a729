"""The subcommands of ``pld`` (dpsgd, calibrate, compose, curve, lab, compare, tune-fft)."""

from __future__ import annotations

import json
import math
import os
import sys

from pld.cli.args import MAX_CURVE_POINTS, CLIError
from pld.cli.util import (
    _check_outputs,
    _config,
    _emit_json,
    _optional,
    _per_epoch,
    _timing,
    _title,
    _write_outputs,
    _wrote,
    flag_names,
)


def cmd_dpsgd(args) -> int:
    import time

    from pld.report import account_dpsgd, dpsgd_pld, format_dpsgd

    cfg = _config(args)
    if args.per_epoch and cfg.runs > 1:
        raise CLIError("--per-epoch accounts one training run: drop --runs")
    _check_outputs(args.save, plot=args.plot)
    t0 = time.perf_counter()
    d = dpsgd_pld(cfg)
    # (the short report shows no curve: it is only worked out for --verbose and --json)
    points = args.curve_points if (args.verbose or args.json) else 0
    res = account_dpsgd(cfg, curve_points=points, pld_obj=d)
    plot_bytes, plot_what = None, "delta curve, PLD and trade-off plot"
    if args.per_epoch:
        res["per_epoch"] = _per_epoch(cfg, res)
        res["seconds"] = time.perf_counter() - t0
        if args.plot:
            from pld.report.plots import render_epochs

            rows = res["per_epoch"]
            plot_bytes = lambda fmt: render_epochs(rows, fmt=fmt, delta=cfg.delta, title=_title(cfg, cfg.delta))  # noqa: E731
            plot_what = "epsilon after each epoch"
    _write_outputs(res, d, cfg.delta, plot=args.plot, save=args.save, title=_title(cfg, cfg.delta),
                   plot_bytes=plot_bytes, plot_what=plot_what)
    _timing(res)
    _stderr(res)
    if args.json:
        _emit_json(res)
    else:
        print(format_dpsgd(res, verbose=args.verbose))
    return 0


def _stderr(res: dict) -> None:
    """Warnings and notes on stderr (the JSON carries them too): stdout's first line is the answer."""
    from pld.report.text import stderr_lines

    lines = stderr_lines(res)
    if lines:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


def _calibrate_target(args) -> str:
    """What to solve for, in the unit the flags speak: ``noise_multiplier``, ``epochs`` (the
    loader defines an epoch), ``steps``, ``batch_size`` (at fixed epochs, with --dataset-size)
    or ``sampling_rate``."""
    have = {"noise_multiplier": args.noise_multiplier is not None,
            "sampling_rate": args.sampling_rate is not None or args.batch_size is not None,
            "steps": args.steps is not None or args.epochs is not None}
    missing = [k for k, v in have.items() if not v]
    if len(missing) != 1:
        raise CLIError("give exactly two of --noise-multiplier, --sampling-rate (or --batch-size with "
                       "--dataset-size), --steps (or --epochs); the third is solved for")
    solve = missing[0]
    loader = (args.dataset_size is not None and args.batch_size is not None) or args.steps_per_epoch is not None
    if solve == "steps" and loader:
        return "epochs"
    if solve == "sampling_rate" and args.dataset_size is not None and args.epochs is not None:
        return "batch_size"
    return solve


def cmd_calibrate(args) -> int:
    import time
    from dataclasses import replace

    from pld import __version__
    from pld.accounting import calibrate_loader
    from pld.accounting.loaders import resolve_run
    from pld.report import (
        ACCOUNTANT,
        DPSGDConfig,
        dpsgd_pld,
        dpsgd_warnings,
        format_calibrate,
        neighbouring,
        sensitivity_convention,
        shuffle_bounds_of,
    )

    solve = _calibrate_target(args)
    if args.delta is None:
        args.delta = 1e-5
    sigma, target, delta = args.noise_multiplier, args.target_epsilon, args.delta
    loader = dict(dataset_size=args.dataset_size, drop_last=bool(args.drop_last),
                  participations=args.participations)
    info: dict = {}
    value: float
    t0 = time.perf_counter()
    try:
        if solve == "epochs":
            value = calibrate_loader.calibrate_epochs(target, delta, sigma, sampling=args.sampling,
                                                      sampling_rate=args.sampling_rate, batch_size=args.batch_size,
                                                      steps_per_epoch=args.steps_per_epoch, info=info, **loader)
            shape = resolve_run(args.sampling, args.sampling_rate, batch_size=args.batch_size, epochs=value,
                                steps_per_epoch=args.steps_per_epoch, **loader)
        elif solve == "batch_size":
            value = calibrate_loader.calibrate_batch_size(target, delta, sigma, sampling=args.sampling,
                                                          epochs=args.epochs, info=info, **loader)
            shape = resolve_run(args.sampling, batch_size=value, epochs=args.epochs, **loader)
        else:
            fn, kwargs = _calibration_call(solve, args.sampling, info)
            if solve == "noise_multiplier":
                run = dict(epochs=args.epochs, batch_size=args.batch_size, steps_per_epoch=args.steps_per_epoch,
                           **loader)
                shape = resolve_run(args.sampling, args.sampling_rate, args.steps, **run)
                # (the run itself, not its rate and steps: a loader's short last batch, drop_last)
                value = float(_solution(fn(target, delta, args.sampling_rate, args.steps, **run, **kwargs), solve))
                sigma = value
            elif solve == "steps":
                q = resolve_run(args.sampling, args.sampling_rate, 1, **loader).sampling_rate
                value = int(_solution(fn(target, delta, sigma, q, **kwargs), solve))
                shape = resolve_run(args.sampling, args.sampling_rate, value, **loader)
            else:
                T = args.steps if args.steps is not None else None
                if T is None:
                    raise CLIError("--epochs with an unknown rate: give --dataset-size to solve for the batch size, "
                                   "or --steps to solve for the sampling rate")
                value = float(_solution(fn(target, delta, sigma, T, **kwargs), solve))
                shape = resolve_run(args.sampling, value, T, participations=args.participations)
    except (TypeError, ValueError) as exc:
        raise CLIError(flag_names(str(exc))) from None
    cfg = DPSGDConfig(noise_multiplier=sigma, sampling_rate=shape.sampling_rate, steps=shape.steps, delta=delta,
                      sampling=shape.sampling, participations=args.participations, dataset_size=shape.dataset_size,
                      batch_size=shape.batch_size, epochs=shape.epochs, shape=replace(shape))
    if shape.sampling == "shuffle":  # (its lower end from the fast construction: only the upper end decides)
        sb = shuffle_bounds_of(cfg, shape, alternatives=False, random_allocation=False)
        lo, hi = sb.epsilon_lower, sb.epsilon_upper
    else:
        lo, hi = dpsgd_pld(cfg).epsilon_bounds(delta)  # certified check of the solution
    nxt = info.get("next")
    res = {
        "command": "calibrate",
        "solved_for": solve,
        "target_epsilon": target,
        "delta": delta,
        "noise_multiplier": sigma,
        "sampling_rate": shape.sampling_rate,
        "steps": shape.steps,
        "epochs": shape.epochs if solve != "steps" else None,
        "steps_per_epoch": shape.steps_per_epoch,
        "dataset_size": shape.dataset_size,
        "batch_size": shape.batch_size,
        "loader": shape.loader_text() or None,
        "sampling": shape.sampling,
        "neighbouring": neighbouring(shape.sampling),
        "sensitivity_convention": sensitivity_convention(shape.sampling),
        "accountant": ACCOUNTANT,
        "epsilon_lower": lo,
        "epsilon_upper": hi,
        "next": None if not nxt or not math.isfinite(nxt[2]) else {
            "what": f"{nxt[0]} epochs" if solve == "epochs" else f"batch size {nxt[0]}",
            "value": nxt[0], "epsilon_lower": nxt[1], "epsilon_upper": nxt[2]},
        "evaluations": info.get("evaluations"),
        "warnings": dpsgd_warnings(cfg, hi),
        "seconds": time.perf_counter() - t0,
        "pld_version": __version__,
    }
    if solve == "epochs":
        res["epochs"] = int(value)
    res[solve] = value if solve != "epochs" else int(value)
    _timing(res)
    _stderr(res)
    if args.json:
        _emit_json(res)
    else:
        print(format_calibrate(res))
    return 0


def _calibration_call(solve: str, sampling: str, info: dict):
    """The calibration function for ``solve`` and its keyword arguments."""
    import inspect

    fname = {"noise_multiplier": "calibrate_noise", "steps": "calibrate_steps",
             "sampling_rate": "calibrate_sampling_rate"}[solve]
    (fn,) = _optional("pld.accounting.calibrate", (fname,), "calibration")
    kwargs: dict = {"sampling": sampling}
    try:
        if "info" in inspect.signature(fn).parameters:
            kwargs["info"] = info
    except (TypeError, ValueError):  # pragma: no cover
        pass
    return fn, kwargs


def _solution(out, solve: str):
    """Extract the solved value from whatever pld.accounting.calibrate returns."""
    import numbers

    if isinstance(out, numbers.Real) and not isinstance(out, bool):
        return out
    if isinstance(out, dict):
        for k in (solve, "value", "solution", "result"):
            if k in out:
                return out[k]
    for k in (solve, "value", "solution"):
        if hasattr(out, k):
            return getattr(out, k)
    if isinstance(out, (tuple, list)) and out:
        return out[0]
    raise CLIError(f"pld.accounting.calibrate returned an unexpected result: {out!r}")


def cmd_compose(args) -> int:
    from pld.accounting.spec import load_spec
    from pld.report import account_compose, format_compose

    _check_outputs(args.save, plot=args.plot)
    spec = load_spec(args.spec)
    res = account_compose(spec, deltas=args.delta, epsilons=args.epsilon)
    _write_outputs(res, spec.pld, res["delta"], plot=args.plot, save=args.save,
                   title=f"{spec.name or os.path.basename(args.spec)}, delta={res['delta']:g}")
    _timing(res)
    if args.json:
        _emit_json(res)
    else:
        print(format_compose(res))
    return 0


def cmd_curve(args) -> int:
    import time

    import numpy as np

    from pld import __version__
    from pld.report import (
        ACCOUNTANT,
        curve_csv,
        curve_rows,
        delta_profile,
        dpsgd_pld,
        format_curve,
        jsonable,
        neighbouring,
    )

    _check_outputs(args.output, plot=args.plot)
    t0 = time.perf_counter()
    if args.spec:
        from pld.accounting.spec import load_spec

        spec = load_spec(args.spec)
        d = spec.pld if args.runs == 1 else spec.pld.self_compose(args.runs)
        delta = args.delta if args.delta is not None else spec.deltas[0]
        config = {"spec": args.spec, "runs": args.runs * spec.runs}
    else:
        cfg = _config(args)
        d = dpsgd_pld(cfg)
        delta = cfg.delta
        config = {"noise_multiplier": cfg.noise_multiplier, "sampling_rate": cfg.sampling_rate,
                  "steps": cfg.steps, "runs": cfg.runs, "sampling": cfg.sampling,
                  "neighbouring": neighbouring(cfg.sampling), "example": cfg.example}
    eps_at = None
    if args.epsilons:
        eps = sorted(set(args.epsilons))
        if len(eps) > MAX_CURVE_POINTS:
            raise CLIError(f"--epsilons: at most {MAX_CURVE_POINTS} values, got {len(eps)}")
    else:
        top = args.eps_max
        if top is None:
            eps_at = d.epsilon_bounds(delta)
            top = _round_up(2 * eps_at[1]) if math.isfinite(eps_at[1]) else 10.0
        if top <= args.eps_min:
            raise CLIError(f"--eps-max ({top:g}) must be larger than --eps-min ({args.eps_min:g})")
        eps = [float(x) for x in np.linspace(args.eps_min, top, args.points)]
    lo, hi, method = delta_profile(d, eps, delta, tuned=True if args.tuned else "auto")
    rows = curve_rows(eps, lo, hi)
    if args.plot:
        from pld.report.plots import plot_delta_curve

        title = (f"{os.path.basename(args.spec)} x {args.runs} runs, delta={delta:g}" if args.spec
                 else _title(cfg, delta))
        plot_delta_curve(args.plot, curve=(eps, lo, hi), target_delta=delta,
                         target_epsilon=eps_at[1] if eps_at else None, title=title)
    res = {"command": "curve", "config": config, "accountant": ACCOUNTANT, "delta": delta,
           "epsilon_at_delta": None if eps_at is None else {"lower": eps_at[0], "upper": eps_at[1]},
           "curve": rows, "curve_method": method, "seconds": time.perf_counter() - t0,
           "pld_version": __version__}
    if args.json:
        text = json.dumps(jsonable(res), indent=2, allow_nan=False) + "\n"
    elif args.csv:
        text = curve_csv(rows)
    else:
        head = (f"delta(epsilon), max over directions, certified bounds ({ACCOUNTANT}; "
                f"{method})")
        text = head + "\n" + format_curve(rows) + "\n"
    if args.output:
        from pld.io import write_atomic

        write_atomic(args.output, text.encode("utf-8"))
        _wrote(args.output, f"{len(rows)} epsilons, " + ("JSON" if args.json else "CSV" if args.csv else "table"))
    else:
        sys.stdout.write(text)
    if args.plot:
        _wrote(args.plot, "delta(epsilon) plot")
    return 0


def _round_up(x: float) -> float:
    if x <= 0:
        return 1.0
    e = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10**e >= x:
            return float(m * 10**e)
    return float(10 ** (e + 1))  # pragma: no cover


def cmd_lab(args) -> int:
    names = ("lab", "format_lab") + (("plot_lab",) if args.plot else ())
    fns = _optional("pld.baselines.lab", names, "pld lab")
    _check_outputs(plot=args.plot)
    result = fns[0](sigma=args.sigma, steps=args.steps, delta=args.delta, probe_epsilon=args.probe_epsilon)
    if args.plot:
        import tempfile

        from pld.io import write_atomic

        # plot_lab writes to a path: render into a temporary file, then move it into place
        ext = os.path.splitext(args.plot)[1]
        folder = os.path.dirname(os.path.abspath(args.plot))
        fd, tmp = tempfile.mkstemp(prefix=".pld-", suffix=ext, dir=folder)
        os.close(fd)
        try:
            fns[2](result, tmp)
            with open(tmp, "rb") as f:
                data = f.read()
            if not data:
                raise CLIError("pld.baselines.lab.plot_lab wrote an empty file")
            write_atomic(args.plot, data)
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _wrote(args.plot, "lab plot")
    if args.json:
        _emit_json(result)
    else:
        print(fns[1](result))
    return 0


def cmd_compare(args) -> int:
    (compare,) = _optional("pld.baselines.lab", ("compare",), "pld compare")
    from pld.report.compare import compare_quietly, format_compare

    cfg = _config(args)
    kwargs: dict = {"sampling": cfg.sampling}
    if args.no_peers:
        kwargs["peers"] = False
    # (the peers' own warnings, e.g. scipy's IntegrationWarning, stay out of the table: one line on stderr)
    result = compare_quietly(compare, cfg.noise_multiplier, cfg.sampling_rate, cfg.steps, cfg.delta, **kwargs)
    if result["peer_warnings"]:
        sys.stderr.write(f"pld: note: the peers raised {len(result['peer_warnings'])} kind(s) of warning, kept out "
                         f"of the table (--json: peer_warnings): {result['peer_warnings'][0]}\n")
    if args.json:
        _emit_json(result)
    else:
        print(format_compare(result))
    return 0


def cmd_tune_fft(args) -> int:
    from pld.engine.fft_plans import tune_fft

    def show(row: dict) -> None:
        if args.json:
            return
        if not shown:  # (after the arguments are checked: errors print alone)
            print("FFT forward + inverse pair, estimated -> measured plan")
            shown.append(row["size"])
        print(f"  {row['size']:>8d} points: {1e3 * row['estimate_s']:8.3f} -> {1e3 * row['measured_s']:8.3f} ms"
              f"  (planned in {row['planning_s']:.1f} s)", flush=True)

    shown: list = []
    try:
        result = tune_fft(args.max_points, progress=show)
    except (RuntimeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        _emit_json(result)
    else:
        print(f"saved to {result['path']}")
    return 0


def cmd_warm(args) -> int:
    import pld

    res = pld.warm(args.processes, ahead_of_time=not args.jit_only, announce=not args.json)
    if args.json:
        _emit_json(res)
        return 0
    print(f"pld: {len(res['compiled'])} of {res['kernels']} kernels compiled ({res['processes']} processes, "
          f"{res['seconds']:.1f} s in all); the rest were cached")
    aot = res.get("ahead_of_time")
    if aot is not None:
        state = f"not built: {aot['error']}" if aot["error"] else "built" if aot["built"] else "already built"
        print(f"pld: kernels ahead of time ({aot['path']}): {state}")
    return 0
