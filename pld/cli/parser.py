"""The ``pld`` command's parser: one function per subcommand."""

from __future__ import annotations

import argparse

from pld.cli.args import (
    COMPOSE_EPILOG,
    EXAMPLES,
    MAX_CURVE_POINTS,
    MAX_REPORT_CURVE_POINTS,
    _add_config,
    _count,
    _float,
    _float_list,
    _int,
    _Parser,
)
from pld.cli.bandmf import add_beyond_dpsgd
from pld.cli.commands import (
    cmd_calibrate,
    cmd_compare,
    cmd_compose,
    cmd_curve,
    cmd_dpsgd,
    cmd_lab,
    cmd_tune_fft,
    cmd_warm,
)
from pld.cli.risk import add_risk
from pld.cli.sweep import add_sweep


def build_parser() -> argparse.ArgumentParser:
    from pld import __version__

    top = _Parser(prog="pld", description="Certified privacy-loss-distribution (PLD) accounting: "
                  "every epsilon is a bracket [lower, upper] that contains the true value.",
                  epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"pld {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    fmt = argparse.RawDescriptionHelpFormatter

    _add_dpsgd(sub, fmt)
    _add_calibrate(sub, fmt)
    _add_compose(sub, fmt)
    _add_curve(sub, fmt)
    _add_lab(sub, fmt)
    _add_compare(sub, fmt)
    add_risk(sub, fmt)
    add_beyond_dpsgd(sub, fmt)
    _add_tune_fft(sub, fmt)
    add_sweep(sub, fmt)
    _add_warm(sub, fmt)
    top._commands = dict(sub.choices)
    return top


def _add_dpsgd(sub, fmt) -> None:
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


def _add_calibrate(sub, fmt) -> None:
    p = sub.add_parser("calibrate", help="solve for sigma, epochs (or steps) or batch size (or rate)",
                       description="Give --target-epsilon, --delta and exactly two of --noise-multiplier, "
                                   "--sampling-rate (or --batch-size with --dataset-size), --steps (or "
                                   "--epochs); the third is solved for in the unit the flags speak: the "
                                   "smallest sigma; the most epochs when the loader defines one (--dataset-size "
                                   "and --batch-size, or --steps-per-epoch), else the most steps; the largest "
                                   "batch size at fixed --epochs with --dataset-size, else the largest rate.",
                       epilog=EXAMPLES, formatter_class=fmt)
    p.add_argument("--target-epsilon", "--epsilon", type=_float("pos"), required=True, metavar="E")
    _add_config(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_calibrate)


def _add_compose(sub, fmt) -> None:
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


def _add_curve(sub, fmt) -> None:
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


def _add_lab(sub, fmt) -> None:
    p = sub.add_parser("lab", help="the seed lab: Gaussian composition, exact vs tail vs RDP vs PLD",
                       formatter_class=fmt)
    p.add_argument("--sigma", type=_float("pos"), default=8.0, metavar="S", help="default 8")
    p.add_argument("--steps", type=_int, default=120, metavar="K", help="default 120")
    p.add_argument("--delta", type=_float("open01"), default=1e-6, metavar="D", help="default 1e-6")
    p.add_argument("--probe-epsilon", type=_float("nonneg"), default=6.0, metavar="E", help="default 6")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", metavar="FILE", help="write the lab plot")
    p.set_defaults(func=cmd_lab)


def _add_compare(sub, fmt) -> None:
    p = sub.add_parser("compare", help="compare accountants (PLD, RDP, peers) on one DP-SGD run",
                       description="pld's certified bracket beside RDP, the privacy-loss tail and the "
                                   "installed peer libraries (dp_accounting, prv_accountant); peers that "
                                   "are not installed are named.",
                       epilog=EXAMPLES, formatter_class=fmt)
    _add_config(p)
    p.add_argument("--no-peers", action="store_true", help="skip the peer libraries (faster)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_compare)


def _add_warm(sub, fmt) -> None:
    p = sub.add_parser("warm", help="compile the numba kernels now (once per machine): faster later starts",
                       description="Compile every numba kernel that the on-disk cache lacks, in parallel "
                                   "processes, and build them ahead of time into an extension module for this "
                                   "machine, from which later processes load them without numba "
                                   "(pld.warm(ahead_of_time=True); about 10 s of CPU once, needs a C compiler). "
                                   "Other commands compile what is missing first anyway.",
                       formatter_class=fmt)
    p.add_argument("--processes", type=_int, default=None, metavar="N",
                   help="processes compiling at once (default: CPU count, at most 4)")
    p.add_argument("--jit-only", action="store_true", help="skip the ahead-of-time build")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_warm)


def _add_tune_fft(sub, fmt) -> None:
    p = sub.add_parser("tune-fft", help="measure FFT plans once for this machine (faster later queries)",
                       description="Measure FFTW plans for every transform length pld uses up to "
                                   "--max-points and save them (FFTW wisdom) for later processes: "
                                   "1.1-2.3x faster transforms, about 1.5 minutes at the default. "
                                   "PLD_FFTW_WISDOM sets the file (off: no wisdom).",
                       formatter_class=fmt)
    p.add_argument("--max-points", type=_int, default=1 << 18, metavar="N",
                   help="longest transform to measure, 1024..8388608 (default 262144)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_tune_fft)
