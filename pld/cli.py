"""The ``pld`` command: certified privacy accounting from the shell.

Every subcommand prints a human report by default and JSON with ``--json``.
Errors exit with status 2 and one line ``pld: error: ...`` on stderr (set
``PLD_TRACEBACK=1`` to see a traceback for unexpected errors); output files
(plots, CSV, saved PLDs) are written atomically, never partially.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import sys
from fractions import Fraction

__all__ = ["main", "build_parser"]

EXAMPLES = """\
examples:
  pld dpsgd                                   # MNIST example: sigma=1.1, q=256/60000, T=14063, delta=1e-5
  pld dpsgd --noise-multiplier 1.0 --sampling-rate 0.01 --steps 10000 --delta 1e-5
  pld dpsgd --noise-multiplier 1.1 --epochs 60 --dataset-size 60000 --batch-size 256 \\
            --sampling without_replacement --json
  pld dpsgd --per-epoch --plot epochs.png     # epsilon after every epoch, and its plot
  pld dpsgd --runs 5 --plot run.png --verbose # five training runs, report plot, full report
  pld calibrate --target-epsilon 2 --delta 1e-5 --sampling-rate 0.01 --steps 10000   # solve for sigma
  pld calibrate --target-epsilon 2 --delta 1e-5 --noise-multiplier 1.0 --sampling-rate 0.01  # steps
  pld calibrate --target-epsilon 2 --delta 1e-5 --noise-multiplier 1.0 --steps 10000  # rate
  pld compose spec.json --delta 1e-6 --json   # mechanisms from a JSON or TOML spec
  pld curve --noise-multiplier 1.0 --sampling-rate 0.01 --steps 1000 --csv --output curve.csv
  pld lab --plot lab.png                      # sigma=8, k=120 Gaussian lab
  pld compare --noise-multiplier 1.0 --sampling-rate 0.01 --steps 1000 --delta 1e-5
  pld tune-fft                                # once per machine: measured FFT plans, faster queries

Without --sampling-rate/--steps (or --epochs/--dataset-size/--batch-size) the DP-SGD
commands use the MNIST example: sigma 1.1, q = 256/60000, T = ceil(60 * 60000 / 256) = 14063
steps (60 epochs), delta 1e-5, Poisson sampling, add-or-remove neighbouring.
sigma is the noise standard deviation divided by the L2 sensitivity (the clipping norm).
"""

COMPOSE_EPILOG = """\
spec example (JSON; TOML with [[mechanisms]] tables works the same):
  {"delta": 1e-5, "epsilon": [1, 2],
   "mechanisms": [
     {"type": "gaussian", "sigma": 1.1, "sampling_rate": 0.004, "count": 14063},
     {"type": "laplace", "scale": 2.0, "count": 3},
     {"type": "approx_dp", "epsilon": 0.1, "delta": 1e-7}],
   "phases": [{"name": "fine-tune", "repeat": 2, "mechanisms": [
     {"type": "dpsgd", "noise_multiplier": 2.0, "sampling_rate": 0.01, "steps": 500}]}],
   "runs": 1}
mechanism types: gaussian (sigma, sensitivity), laplace (scale, sensitivity),
  randomized_response (epsilon), discrete_laplace (scale, sensitivity), pure_dp (epsilon),
  approx_dp (epsilon, delta), pmfs (p, q), dpsgd (noise_multiplier, sampling_rate, steps),
  saved (path: a file written by pld.save / --save); every entry takes count, sampling_rate
  (Poisson subsampling) and name.
"""


class CLIError(Exception):
    """A user error: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        m = re.match(r"argument (COMMAND|command): invalid choice: '([^']*)'", message)
        if m:
            close = difflib.get_close_matches(m.group(2), list(_COMMANDS), n=1, cutoff=0.6)
            if close:
                message += f"; did you mean '{close[0]}'?"
        raise CLIError(f"{message} (see '{self.prog} --help')")

    def parse_args(self, args=None, namespace=None):
        # unknown flags are reported with the subcommand that saw them, so that a
        # misspelt or misplaced flag can point to the right one
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = getattr(self, "_commands", {}).get(getattr(parsed, "command", None))
            (sub or self).error(_unrecognized(extras, sub or self, getattr(parsed, "command", None)))
        return parsed


#: subcommands (for "did you mean")
_COMMANDS = ("dpsgd", "calibrate", "compose", "curve", "lab", "compare", "tune-fft")

#: flags of one subcommand that belong to another, and where to go instead
_ELSEWHERE = {
    ("dpsgd", "--epsilon"): "pld dpsgd computes epsilon from sigma, q and T: to solve for sigma, T or q "
                            "at a target epsilon use 'pld calibrate --target-epsilon E ...', for delta at "
                            "given epsilons 'pld curve --epsilons E,...'",
    ("dpsgd", "--target-epsilon"): "pld dpsgd computes epsilon from sigma, q and T: to solve for sigma, T or "
                                   "q at a target epsilon use 'pld calibrate --target-epsilon E ...'",
    ("dpsgd", "--epsilons"): "for delta at given epsilons use 'pld curve --epsilons E,...'",
    ("compare", "--epsilon"): "pld compare reports each accountant's epsilon at --delta; for delta at given "
                              "epsilons use 'pld curve --epsilons E,...'",
}


def _unrecognized(extras: list, parser: argparse.ArgumentParser, command: str | None) -> str:
    flags = [x for x in extras if x.startswith("-") and not _looks_numeric(x)]
    message = f"unrecognized arguments: {' '.join(extras)}"
    for flag in flags:
        name = flag.split("=", 1)[0]
        where = _ELSEWHERE.get((command, name))
        if where is None and command == "dpsgd" and name.startswith("--eps") and name != "--epochs":
            where = _ELSEWHERE[("dpsgd", "--epsilon")]
        if where:
            return f"{message}: {where}"
        known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        if close:
            return f"{message}; did you mean {close[0]}?"
    return message


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------ arg types
#: most epsilons one curve evaluates (each is read off certified grids; beyond this a
#: table is unreadable and a long list only costs memory and time)
MAX_CURVE_POINTS = 10_000
#: most epsilons the dpsgd report's curve shows
MAX_REPORT_CURVE_POINTS = 100


def _plain_number(text: str) -> str:
    """Refuse spellings Python's float() / int() accept but a reader would not
    expect: '1_0' is 10 to Python, a typo to a person."""
    if "_" in text:
        raise argparse.ArgumentTypeError(f"must be a plain number without '_', got {text!r}")
    return text.strip()


def _float(kind: str):
    def parse(text: str) -> float:
        _plain_number(text)
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
        if kind == "pos" and not x > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        if kind == "nonneg" and not x >= 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
        if kind == "rate" and not 0 < x <= 1:
            hint = ""
            if x > 1 and x.is_integer():
                hint = (f"; {int(x)} looks like a batch size: give --batch-size {int(x)} --dataset-size N "
                        f"(q = batch size / dataset size)")
            elif 1 < x <= 100:
                hint = f"; for {x:g}% give {x / 100:g}"
            raise argparse.ArgumentTypeError(f"must be a probability in (0, 1], got {text!r}{hint}")
        if kind == "open01" and not 0 < x < 1:
            raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
        return x
    parse.__name__ = f"{kind}_number"
    return parse


def _count(low: int, high: int):
    """Integer in ``[low, high]`` ('1e4' is accepted, '2.5' and '1_000' are not)."""
    def parse(text: str) -> int:
        _plain_number(text)
        try:
            x = int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
            if not math.isfinite(f) or not f.is_integer():
                raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
            if f > high:  # (before int(): no 300-digit integers in messages)
                raise argparse.ArgumentTypeError(f"must be at most {_limit(high)}, got {text!r}")
            x = int(f)
        if x < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        if x > high:
            raise argparse.ArgumentTypeError(
                f"must be at most {_limit(high)}, got {text!r}" if high >= 10**6 else
                f"must be at most {high}, got {text!r}")
        return x
    parse.__name__ = "integer"
    return parse


def _limit(n: int) -> str:
    return f"{n:.0e}".replace("e+", "e")


_int = _count(1, 10**12)


def _sampling(text: str) -> str:
    from pld.dpsgd import sampling_scheme

    try:
        return sampling_scheme(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("sampling must be", "must be")) from None


def _float_list(kind: str):
    one = _float(kind)

    def parse(text: str) -> list:
        parts = [p for p in text.replace(" ", ",").split(",") if p]
        if not parts:
            raise argparse.ArgumentTypeError("must be a comma-separated list of numbers")
        return [one(p) for p in parts]
    parse.__name__ = f"{kind}_list"
    return parse


# -------------------------------------------------------------- parsers
def _add_config(p: argparse.ArgumentParser, *, delta_default: float | None = 1e-5) -> None:
    g = p.add_argument_group("DP-SGD run (defaults: the MNIST example)")
    g.add_argument("--noise-multiplier", "--sigma", type=_float("pos"), metavar="S",
                   help="noise std / L2 sensitivity (clipping norm); default 1.1")
    g.add_argument("--sampling-rate", "-q", type=_float("rate"), metavar="Q",
                   help="probability a record is in a batch (Poisson) or batch/dataset size")
    g.add_argument("--steps", "-T", type=_int, metavar="T", help="number of noisy steps")
    g.add_argument("--delta", type=_float("open01"), metavar="D", default=delta_default,
                   help=f"target delta (default {delta_default:g})" if delta_default
                   else "target delta (default: the spec's first delta, else 1e-5)")
    g.add_argument("--epochs", type=_float("pos"), metavar="E",
                   help="instead of --steps: T = ceil(E * dataset size / batch size) (or ceil(E / q))")
    g.add_argument("--dataset-size", "-n", type=_int, metavar="N",
                   help="number of training examples (also checks delta < 1/N)")
    g.add_argument("--batch-size", "-b", type=_int, metavar="B",
                   help="instead of --sampling-rate: q = B / N (needs --dataset-size)")
    g.add_argument("--sampling", type=_sampling, default="poisson", metavar="{poisson,without_replacement}",
                   help="batch sampling: poisson (add-or-remove neighbouring, default) or "
                        "without_replacement (fixed-size batches, substitute neighbouring: a replaced "
                        "record moves the clipped sum by 2C, so epsilon is much larger); "
                        "also accepted: without-replacement, wor, fixed-batch")


def build_parser() -> argparse.ArgumentParser:
    from pld import __version__

    top = _Parser(prog="pld", description="Certified privacy-loss-distribution (PLD) accounting: "
                  "every epsilon is a bracket [lower, upper] that contains the true value.",
                  epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"pld {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("dpsgd", help="account a DP-SGD run (default: the MNIST example)",
                       description="Certified (epsilon, delta) of DP-SGD with a full report.",
                       epilog=EXAMPLES, formatter_class=fmt)
    _add_config(p)
    p.add_argument("--runs", type=_int, default=1, metavar="N",
                   help="number of training runs on the same data (composed; default 1)")
    p.add_argument("--curve-points", type=_count(0, MAX_REPORT_CURVE_POINTS), default=4, metavar="K",
                   help="epsilons around the answer at which --verbose and --json show delta "
                        f"(default 4, 0: none, at most {MAX_REPORT_CURVE_POINTS})")
    p.add_argument("--per-epoch", action="store_true",
                   help="also show the certified epsilon at the end of every epoch (one query each; "
                        "with --plot: epsilon against epochs)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="the full report: every setting, the delta(epsilon) curve and the numerical settings")
    p.add_argument("--json", action="store_true", help="print the result as JSON (everything, as with --verbose)")
    p.add_argument("--plot", metavar="FILE", help="write a report plot (delta curve, PLD, trade-off)")
    p.add_argument("--save", metavar="FILE", help="save the composed PLD (pld.save format, .npz)")
    p.set_defaults(func=cmd_dpsgd)

    p = sub.add_parser("calibrate", help="solve for sigma, steps or sampling rate",
                       description="Give --target-epsilon, --delta and exactly two of --noise-multiplier, "
                                   "--sampling-rate, --steps; the third is solved for (smallest sigma, "
                                   "largest T or largest q meeting the target).",
                       epilog=EXAMPLES, formatter_class=fmt)
    p.add_argument("--target-epsilon", "--epsilon", type=_float("pos"), required=True, metavar="E")
    _add_config(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("compose", help="account a composition described in a JSON/TOML spec",
                       description="Account mechanisms listed in a spec file (JSON or TOML).",
                       epilog=COMPOSE_EPILOG, formatter_class=fmt)
    p.add_argument("spec", metavar="SPEC", help="spec file (.json or .toml)")
    p.add_argument("--delta", type=_float_list("open01"), metavar="D[,D...]",
                   help="override the spec's delta(s)")
    p.add_argument("--epsilon", type=_float_list("nonneg"), metavar="E[,E...]",
                   help="also report delta at these epsilons")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--save", metavar="FILE", help="save the composed PLD (pld.save format, .npz)")
    p.add_argument("--plot", metavar="FILE", help="write a plot of the composed PLD at the first delta")
    p.set_defaults(func=cmd_compose)

    p = sub.add_parser("curve", help="delta(epsilon) over a range of epsilons",
                       description="Certified delta(epsilon) bracket over a range, for a DP-SGD "
                                   "configuration (or a compose spec with --spec).",
                       epilog=EXAMPLES, formatter_class=fmt)
    _add_config(p, delta_default=None)
    p.add_argument("--spec", metavar="SPEC", help="use a compose spec instead of the DP-SGD flags")
    p.add_argument("--runs", type=_int, default=1, metavar="N", help="number of runs composed (default 1)")
    p.add_argument("--eps-min", type=_float("nonneg"), default=0.0, metavar="E", help="default 0")
    p.add_argument("--eps-max", type=_float("pos"), metavar="E",
                   help="default: about 2 x epsilon(delta), rounded up")
    p.add_argument("--points", type=_count(2, MAX_CURVE_POINTS), default=21, metavar="K",
                   help=f"number of epsilons (default 21, at most {MAX_CURVE_POINTS})")
    p.add_argument("--epsilons", type=_float_list("nonneg"), metavar="E,E,...",
                   help="explicit epsilons (instead of --eps-min/--eps-max/--points)")
    p.add_argument("--tuned", action="store_true",
                   help="tune the grids for every epsilon (PLD.delta_bounds: tightest brackets far "
                        "from epsilon(delta), slower); default: read the curve off the grids tuned for "
                        "--delta and re-tune only the epsilons where that bracket is wider than 1%%")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON output")
    out.add_argument("--csv", action="store_true", help="CSV output: epsilon,delta_lower,delta_upper")
    p.add_argument("--output", "-o", metavar="FILE", help="write the table/JSON/CSV to FILE instead of stdout")
    p.add_argument("--plot", metavar="FILE", help="write a plot of the curve")
    p.set_defaults(func=cmd_curve)

    p = sub.add_parser("lab", help="the seed lab: Gaussian composition, exact vs tail vs RDP vs PLD",
                       formatter_class=fmt)
    p.add_argument("--sigma", type=_float("pos"), default=8.0, metavar="S", help="default 8")
    p.add_argument("--steps", type=_int, default=120, metavar="K", help="default 120")
    p.add_argument("--delta", type=_float("open01"), default=1e-6, metavar="D", help="default 1e-6")
    p.add_argument("--probe-epsilon", type=_float("nonneg"), default=6.0, metavar="E", help="default 6")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="FILE", help="write the lab plot")
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser("compare", help="compare accountants (PLD, RDP, peers) on one DP-SGD run",
                       description="pld's certified bracket beside RDP, the privacy-loss tail and the "
                                   "installed peer libraries (dp_accounting, prv_accountant); peers that "
                                   "are not installed are named.",
                       epilog=EXAMPLES, formatter_class=fmt)
    _add_config(p)
    p.add_argument("--no-peers", action="store_true", help="skip the peer libraries (faster)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("tune-fft", help="measure FFT plans once for this machine (faster later queries)",
                       description="Measure FFTW plans for every transform length pld uses up to "
                                   "--max-points and save them (FFTW wisdom) for later processes: "
                                   "1.1-2.3x faster transforms, about 1.5 minutes at the default. "
                                   "PLD_FFTW_WISDOM sets the file (off: no wisdom).",
                       formatter_class=fmt)
    p.add_argument("--max-points", type=_int, default=1 << 18, metavar="N",
                   help="longest transform to measure, 1024..2097152 (default 262144)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_tune_fft)
    top._commands = dict(sub.choices)
    return top


# ------------------------------------------------------------- helpers
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
                           sampling=args.sampling, runs=runs, dataset_size=ex.dataset_size,
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
                       sampling=args.sampling, runs=runs, dataset_size=n, batch_size=b, epochs=E,
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
        from pld.plots import check_plot_path

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
        from pld.plots import check_plot_path, render_report

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
    from pld import _jit_warm

    started, first = _STARTED[-1] if _STARTED else (time.perf_counter(), False)
    res["wall_seconds"] = time.perf_counter() - started + (pld._IMPORT_SECONDS if first else 0.0)
    res["compile_seconds"] = _jit_warm.compile_seconds if first else 0.0
    return res


def _title(cfg, delta: float) -> str:
    """What a plot shows: sigma, q, T (and runs), delta."""
    t = (f"DP-SGD sigma={cfg.noise_multiplier:g} q={cfg.sampling_rate:.4g} T={cfg.steps}"
         + (f" x {cfg.runs} runs" if cfg.runs > 1 else ""))
    if cfg.sampling != "poisson":
        t += " (without replacement)"
    return t + f" delta={delta:g}"


def _per_epoch(cfg, res: dict) -> list[dict]:
    """Certified epsilon at the end of every epoch of one run (the last row is the answer)."""
    from pld.dpsgd import dpsgd_mechanism
    from pld.epochs import MAX_ROWS, epsilon_over_steps

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


# ------------------------------------------------------------ commands
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
            from pld.plots import render_epochs

            rows = res["per_epoch"]
            plot_bytes = lambda fmt: render_epochs(rows, fmt=fmt, delta=cfg.delta, title=_title(cfg, cfg.delta))  # noqa: E731
            plot_what = "epsilon after each epoch"
    _write_outputs(res, d, cfg.delta, plot=args.plot, save=args.save, title=_title(cfg, cfg.delta),
                   plot_bytes=plot_bytes, plot_what=plot_what)
    _timing(res)
    if args.json:
        _emit_json(res)
    else:
        print(format_dpsgd(res, verbose=args.verbose))
    return 0


def cmd_calibrate(args) -> int:
    import inspect
    import time

    from pld import __version__
    from pld.report import (ACCOUNTANT, dpsgd_pld, dpsgd_warnings, format_calibrate, neighbouring,
                            sensitivity_convention)

    have = {"noise_multiplier": args.noise_multiplier is not None,
            "sampling_rate": args.sampling_rate is not None or args.batch_size is not None,
            "steps": args.steps is not None or args.epochs is not None}
    missing = [k for k, v in have.items() if not v]
    if len(missing) != 1:
        raise CLIError("give exactly two of --noise-multiplier, --sampling-rate (or --batch-size), "
                       "--steps (or --epochs); the third is solved for")
    solve = missing[0]
    if solve == "steps" and args.epochs is not None:
        raise CLIError("--epochs cannot be used when solving for steps")
    cfg = _config(args, need_sigma=solve != "noise_multiplier", need_q=solve != "sampling_rate",
                  need_t=solve != "steps")
    fname = {"noise_multiplier": "calibrate_noise", "steps": "calibrate_steps",
             "sampling_rate": "calibrate_sampling_rate"}[solve]
    (fn,) = _optional("pld.calibrate", (fname,), "calibration")
    kwargs = {}
    if cfg.sampling != "poisson":
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # pragma: no cover
            params = {}
        if "sampling" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            raise CLIError(f"solving for {solve.replace('_', ' ')} with --sampling without_replacement "
                           f"is not supported by this installation's pld.calibrate.{fname}")
        kwargs["sampling"] = cfg.sampling
    info: dict = {}
    try:
        if "info" in inspect.signature(fn).parameters:
            kwargs["info"] = info
    except (TypeError, ValueError):  # pragma: no cover
        pass
    t0 = time.perf_counter()
    if solve == "noise_multiplier":
        out = fn(args.target_epsilon, cfg.delta, cfg.sampling_rate, cfg.steps, **kwargs)
    elif solve == "steps":
        out = fn(args.target_epsilon, cfg.delta, cfg.noise_multiplier, cfg.sampling_rate, **kwargs)
    else:
        out = fn(args.target_epsilon, cfg.delta, cfg.noise_multiplier, cfg.steps, **kwargs)
    value = _solution(out, solve)
    if solve == "steps":
        cfg.steps = int(value)
    elif solve == "sampling_rate":
        cfg.sampling_rate = float(value)
    else:
        cfg.noise_multiplier = float(value)
    lo = hi = None
    if cfg.steps >= 1 and 0 < cfg.sampling_rate <= 1 and cfg.noise_multiplier > 0:
        lo, hi = dpsgd_pld(cfg).epsilon_bounds(cfg.delta)  # certified check of the solution
    res = {
        "command": "calibrate",
        "solved_for": solve,
        "target_epsilon": args.target_epsilon,
        "delta": cfg.delta,
        "noise_multiplier": cfg.noise_multiplier,
        "sampling_rate": cfg.sampling_rate,
        "steps": cfg.steps,
        "sampling": cfg.sampling,
        "neighbouring": neighbouring(cfg.sampling),
        "sensitivity_convention": sensitivity_convention(cfg.sampling),
        "accountant": ACCOUNTANT,
        "epsilon_lower": lo,
        "epsilon_upper": hi,
        "evaluations": info.get("evaluations"),
        "warnings": dpsgd_warnings(cfg, hi),
        "seconds": time.perf_counter() - t0,
        "pld_version": __version__,
    }
    _timing(res)
    if args.json:
        _emit_json(res)
    else:
        print(format_calibrate(res))
    return 0


def _solution(out, solve: str):
    """Extract the solved value from whatever pld.calibrate returns."""
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
    raise CLIError(f"pld.calibrate returned an unexpected result: {out!r}")


def cmd_compose(args) -> int:
    from pld.report import account_compose, format_compose
    from pld.spec import load_spec

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
    from pld.report import (ACCOUNTANT, curve_csv, curve_rows, delta_profile, dpsgd_pld, format_curve,
                            jsonable, neighbouring)

    _check_outputs(args.output, plot=args.plot)
    t0 = time.perf_counter()
    if args.spec:
        from pld.spec import load_spec

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
        from pld.plots import plot_delta_curve

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
    fns = _optional("pld.lab", names, "pld lab")
    _check_outputs(plot=args.plot)
    result = fns[0](sigma=args.sigma, steps=args.steps, delta=args.delta, probe_epsilon=args.probe_epsilon)
    if args.plot:
        from pld.io import write_atomic
        import tempfile

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
                raise CLIError("pld.lab.plot_lab wrote an empty file")
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
    compare, format_compare = _optional("pld.lab", ("compare", "format_compare"), "pld compare")
    cfg = _config(args)
    kwargs = {} if cfg.sampling == "poisson" else {"sampling": cfg.sampling}
    if args.no_peers:
        kwargs["peers"] = False
    result = compare(cfg.noise_multiplier, cfg.sampling_rate, cfg.steps, cfg.delta, **kwargs)
    if args.json:
        _emit_json(result)
    else:
        print(format_compare(result))
    return 0


def cmd_tune_fft(args) -> int:
    from pld.tuning import tune_fft

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


# ----------------------------------------------------------------- main
def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def main(argv=None) -> int:
    """Entry point of the ``pld`` console script; returns the exit status."""
    import time
    import warnings

    _STARTED[:] = [(time.perf_counter(), not _STARTED)]

    try:
        with warnings.catch_warnings():
            if not os.environ.get("PLD_TRACEBACK"):
                # numpy floating-point chatter (overflow in exp, inf casts) is not actionable for
                # a shell user and would break the "one line on stderr" contract
                warnings.simplefilter("ignore", RuntimeWarning)
            parser = build_parser()
            args = parser.parse_args(argv)
            if not getattr(args, "command", None):
                raise CLIError("choose a command: dpsgd, calibrate, compose, curve, lab, compare "
                               "(see 'pld --help')")
            return args.func(args)
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        sys.stderr.write("pld: error: interrupted\n")
        return 130
    except BrokenPipeError:  # e.g. `pld curve --csv | head -2`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (CLIError, ValueError, TypeError, OSError, MemoryError, RuntimeError) as exc:
        if os.environ.get("PLD_TRACEBACK") and not isinstance(exc, CLIError):
            raise
        sys.stderr.write(f"pld: error: {_one_line(exc)}\n")
        return 2
    except Exception as exc:  # unexpected: still one line unless asked for the traceback
        if os.environ.get("PLD_TRACEBACK"):
            raise
        sys.stderr.write(f"pld: error: internal error ({type(exc).__name__}): {_one_line(exc)} "
                         f"(set PLD_TRACEBACK=1 for details)\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
