"""Argument parsing of the ``pld`` command: the parser class, argument types, shared flags."""

from __future__ import annotations

import argparse
import difflib
import math
import re

from pld.accounting import sampling as sampling_registry

EXAMPLES = """\
examples:
  pld dpsgd                                   # MNIST example: sigma=1.1, batch 256 of 60000, 60 epochs, delta=1e-5
  pld dpsgd --noise-multiplier 1.0 --sampling-rate 0.01 --steps 10000 --delta 1e-5
  pld dpsgd --noise-multiplier 1 -n 50000 -b 512 --epochs 100 --sampling shuffle   # a shuffling loader
  pld dpsgd --noise-multiplier 1 -n 50000 -b 512 --epochs 100 --sampling balls_in_bins --drop-last
  pld dpsgd --noise-multiplier 1 -n 50000 --batch-size 512 --physical-batch-size 128 --epochs 100  # accumulation
  pld dpsgd --per-epoch --plot epochs.png     # epsilon after every epoch, and its plot
  pld dpsgd --runs 5 --plot run.png --verbose # five training runs, report plot, full report
  pld calibrate --target-epsilon 2 --delta 1e-5 --sampling-rate 0.01 --steps 10000   # solve for sigma
  pld calibrate --target-epsilon 3 --noise-multiplier 1 -n 50000 -b 512               # epochs
  pld calibrate --target-epsilon 3 --noise-multiplier 1 -n 50000 --epochs 10          # batch size
  pld calibrate --target-epsilon 2 --delta 1e-5 --noise-multiplier 1.0 --steps 10000  # rate
  pld compose spec.json --delta 1e-6 --json   # mechanisms from a JSON or TOML spec
  pld curve --noise-multiplier 1.0 --sampling-rate 0.01 --steps 1000 --csv --output curve.csv
  pld lab --plot lab.png                      # sigma=8, k=120 Gaussian lab
  pld compare --noise-multiplier 1.0 --sampling-rate 0.01 --steps 1000 --delta 1e-5
  pld tune-fft                                # once per machine: measured FFT plans, faster queries
  pld sweep grid.toml --workers 2 --out rows.csv --resume   # many configurations, resumable

A run is --sampling-rate or --batch-size with --dataset-size (the logical batch: the one noise is
added to), and --steps or --epochs; an epoch is the loader's ceil(N / b) steps (floor with
--drop-last), --steps-per-epoch, or m steps for a rate 1/m.  --noise-multiplier is required, but
without any run flag the DP-SGD commands account the MNIST example: sigma 1.1, expected batch 256
of 60000 (Poisson), 60 epochs of ceil(60000 / 256) = 235 steps, T = 14100, delta 1e-5.  sigma is the
noise standard deviation divided by the L2 sensitivity (the clipping norm).  Warnings and notes go
to stderr: the first line of the output is the answer.
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
    #: the subcommands' parsers by name (set by the parser builder)
    _commands: dict
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
_COMMANDS = ("dpsgd", "calibrate", "compose", "curve", "lab", "compare", "tune-fft", "sweep", "warm")

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
        where = _ELSEWHERE.get((command or "", name))
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
                raise argparse.ArgumentTypeError(f"must be at most {_limit(high)}, got {text!r}") from None
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


def _sampling_help() -> str:
    """``--sampling``'s help, from the registry (pld.accounting.sampling)."""
    schemes = [f"{s.name} ({s.description}; {s.adjacency.replace('_', '-')} neighbouring)"
               for s in map(sampling_registry.get, sampling_registry.names())]
    extra = sorted({a.replace("_", "-") for n in sampling_registry.names()
                    for a in sampling_registry.get(n).aliases[:2]})
    return "batch sampling, default poisson: " + "; ".join(schemes) + "; also accepted: " + ", ".join(extra)


def _sampling(text: str) -> str:
    from pld.accounting.dpsgd import sampling_scheme

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
    g = p.add_argument_group("DP-SGD run (without any run flag: the MNIST example)")
    g.add_argument("--noise-multiplier", "--sigma", type=_float("pos"), metavar="S",
                   help="noise std / L2 sensitivity (clipping norm); required with run flags")
    g.add_argument("--sampling-rate", "-q", type=_float("rate"), metavar="Q",
                   help="probability a record is in a batch (Poisson) or batch/dataset size; a rate within a few "
                        "ulps of 1/m (1/len(loader)) is m steps per epoch")
    g.add_argument("--steps", "-T", type=_int, metavar="T", help="number of noisy steps (logical batches)")
    g.add_argument("--delta", type=_float("open01"), metavar="D", default=delta_default,
                   help=f"target delta (default {delta_default:g})" if delta_default
                   else "target delta (default: the spec's first delta, else 1e-5)")
    g.add_argument("--epochs", type=_float("pos"), metavar="E",
                   help="instead of --steps: T = ceil(E x steps per epoch) (the loader's ceil(N / b), "
                        "--steps-per-epoch, or m for q = 1/m; else ceil(E / q))")
    g.add_argument("--dataset-size", "-n", type=_int, metavar="N",
                   help="number of training examples (also checks delta < 1/N)")
    g.add_argument("--batch-size", "--logical-batch-size", "-b", type=_int, metavar="B",
                   help="instead of --sampling-rate: the logical batch (noise is added once per logical batch): "
                        "q = B / N, ceil(N / B) steps per epoch (needs --dataset-size)")
    g.add_argument("--drop-last", action="store_true",
                   help="the loader drops its short last batch: floor(N / B) steps per epoch")
    g.add_argument("--steps-per-epoch", type=_int, metavar="M",
                   help="steps in one epoch, e.g. len(data_loader), when it is not ceil(N / B)")
    g.add_argument("--physical-batch-size", type=_int, metavar="P",
                   help="gradient accumulation: the micro-batch a logical batch is summed from (the run is "
                        "accounted per logical batch)")
    g.add_argument("--accumulation-steps", type=_int, metavar="K",
                   help="gradient accumulation: micro-batches per logical batch (logical batch = K x "
                        "--physical-batch-size)")
    g.add_argument("--sampling", type=_sampling, default="poisson",
                   metavar="{" + ",".join(sampling_registry.names()) + "}", help=_sampling_help())
    g.add_argument("--participations", "-k", type=_int, default=None, metavar="K",
                   help="--sampling random_allocation: steps of an epoch each record takes part in "
                        "(steps per epoch = K / q; default 1)")
