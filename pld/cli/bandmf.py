"""``pld bandmf``, ``pld mmcc`` and ``pld user-level``: accounting beyond DP-SGD from the shell.

* ``pld bandmf``: a banded matrix factorisation run with cyclic Poisson
  sampling (:func:`pld.bandmf`), jax_privacy's ``BandMFConfig`` flags;
* ``pld mmcc``: a non-negative lower-triangular strategy with Poisson sampling
  at every step (:func:`pld.mmcc`, an upper bound with a concrete lower end);
* ``pld user-level``: DP-SGD whose users own several records, each sampled and
  clipped on its own (``pld.dpsgd(..., records_per_user=k)``), or a group of
  ``k`` records (:func:`pld.group_privacy`, the same pair for DP-SGD).

Each prints the certified bracket, the run, what each end claims and the
time, or JSON with ``--json``.  ``--strategy`` takes comma-separated
coefficients (the first column of a Toeplitz strategy) or a file (``.npy``, or
text: one row per line, a single row or column being the first column).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from pld.cli.args import CLIError, _count, _float
from pld.cli.util import _emit_json, _timing

__all__ = ["add_beyond_dpsgd", "read_strategy"]


def read_strategy(text: str) -> np.ndarray:
    """``--strategy``: comma-separated coefficients, or a ``.npy`` / text file (a matrix or a first column)."""
    if os.path.exists(text):
        try:
            arr = np.load(text) if text.endswith(".npy") else np.loadtxt(text, delimiter=None, ndmin=2)
        except (OSError, ValueError) as exc:
            raise CLIError(f"--strategy: cannot read {text!r}: {exc}") from None
        arr = np.asarray(arr, dtype=float)
        if arr.ndim == 2 and 1 in arr.shape:
            arr = arr.ravel()
        return arr
    try:
        return np.array([float(p) for p in text.replace(" ", ",").split(",") if p])
    except ValueError:
        raise CLIError(f"--strategy: neither a file nor comma-separated numbers: {text!r}") from None


def _common(p: argparse.ArgumentParser, *, steps_help: str) -> None:
    p.add_argument("--noise-multiplier", "-s", type=_float("pos"), required=True, metavar="SIGMA",
                   help="noise standard deviation over the clipping norm (times the strategy's largest column norm)")
    p.add_argument("--sampling-rate", "-q", type=_float("rate"), required=True, metavar="Q",
                   help="Poisson sampling rate of a record at a step it may be sampled at")
    p.add_argument("--steps", "-T", type=_count(1, 10**9), required=True, metavar="T", help=steps_help)
    p.add_argument("--delta", type=_float("open01"), default=1e-5, help="target delta (default 1e-5)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def add_beyond_dpsgd(sub, fmt) -> None:
    """Register ``pld bandmf``, ``pld mmcc`` and ``pld user-level`` on the subcommand parser ``sub``."""
    p = sub.add_parser("bandmf", help="account a banded matrix factorisation (BandMF) run, cyclic Poisson sampling",
                       description="Certified (epsilon, delta) of BandMF (Choquette-Choo et al., NeurIPS 2023): "
                                   "records split into --bands groups, step t samples group t mod b, a b-banded "
                                   "strategy; the exact reduction to Poisson-subsampled Gaussian steps. "
                                   "jax_privacy: --sampling-rate = expected_participations * bands / iterations.",
                       formatter_class=fmt)
    _common(p, steps_help="number of steps (iterations)")
    p.add_argument("--bands", "-b", type=_count(1, 10**9), default=1, metavar="B", help="number of bands/groups")
    p.add_argument("--strategy", metavar="COEFFS|FILE",
                   help="first column of the banded Toeplitz strategy, or a file with it or the whole matrix")
    p.set_defaults(func=cmd_bandmf)

    p = sub.add_parser("mmcc", help="account a matrix mechanism with Poisson sampling (MMCC's upper bound)",
                       description="Certified bracket of a matrix mechanism (DP-FTRL) with Poisson sampling at "
                                   "every step: MMCC's conditional composition (Choquette-Choo et al., ICLR 2024) "
                                   "as the upper end, a concrete pair of datasets as the lower end. Not tight.",
                       formatter_class=fmt)
    _common(p, steps_help="number of steps (rows of the strategy; at most 4096)")
    p.add_argument("--strategy", metavar="COEFFS|FILE", required=True,
                   help="first column of a Toeplitz strategy, or a file with the lower-triangular matrix (>= 0)")
    p.add_argument("--gradients", choices=("adaptive", "aligned"), default="adaptive",
                   help="adaptive: any adaptively chosen gradients (default); aligned: a record's clipped gradient "
                        "is the same vector whenever it is sampled (e.g. continual counting)")
    p.set_defaults(func=cmd_mmcc)

    p = sub.add_parser("user-level", help="account DP-SGD for users with several records (or a group of k)",
                       description="Certified (epsilon, delta) for adding or removing a whole user who owns up to "
                                   "--records-per-user records, each sampled (Poisson) and clipped on its own: "
                                   "the binomial mixture of Gaussians per step (tight). The same pair is DP-SGD's "
                                   "group privacy for k records.",
                       formatter_class=fmt)
    _common(p, steps_help="number of steps")
    p.add_argument("--records-per-user", "-k", type=_count(1, 10**4), required=True, metavar="K",
                   help="the most records one user owns")
    p.set_defaults(func=cmd_user_level)


def _report(kind: str, run: dict, p, delta: float, args, t0: float, notes: list[str]) -> int:
    import pld
    from pld.report.rounding import bracket, round_up

    with warnings.catch_warnings():  # (a bracket wide because the pair is not tight: the report says so)
        warnings.simplefilter("ignore", pld.NotTightWarning)
        lo, hi = p.epsilon_bounds(delta)
    t1 = time.perf_counter()
    res: dict = {"command": kind, "run": run, "delta": delta, "epsilon_lower": lo, "epsilon_upper": hi,
                 "tight": p.tight, "version": pld.__version__, "seconds": {"accounting": t1 - t0}}
    if not p.tight:
        low = p.bounds()[1]
        parts = [m for m, _ in p.components if not m.tight]
        res["bounds"] = {"upper": [m.bound_notes()["upper"] for m in parts],
                         "lower": [m.bound_notes()["lower"] for m in parts] if low is not None else None}
    _timing(res)
    if args.json:
        _emit_json(res)
        return 0
    digits = 6
    lines = [f"({round_up(hi, 4)}, {delta:g})-DP: certified epsilon in {bracket(lo, hi, digits)} at delta = {delta:g}",
             "  run       " + ", ".join(f"{k} = {v}" for k, v in run.items())]
    lines += [f"  {n}" for n in notes]
    if not p.tight:
        for u in res["bounds"]["upper"]:
            lines.append(f"  upper     {u}")
        for lw in res["bounds"]["lower"] or ["none known: the lower end is 0"]:
            lines.append(f"  lower     {lw}")
    lines.append(f"pld {pld.__version__}, {t1 - t0:.2f} s accounting")
    print("\n".join(lines))
    return 0


def cmd_bandmf(args: argparse.Namespace) -> int:
    import pld

    t0 = time.perf_counter()
    strategy = read_strategy(args.strategy) if args.strategy else None
    try:
        p = pld.bandmf(args.noise_multiplier, args.sampling_rate, args.steps, bands=args.bands, strategy=strategy)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    participations = -(-args.steps // args.bands)
    run = {"sigma": args.noise_multiplier, "q": args.sampling_rate, "T": args.steps, "bands": args.bands,
           "strategy": "none (full columns)" if strategy is None else f"{strategy.shape} array"}
    notes = [f"sampling  cyclic Poisson: {args.bands} groups, a record sampled at most {participations} times "
             "(every b-th step); add-or-remove one record",
             "claim     " + ("tight: the exact reduction (Choquette-Choo et al. 2023, Thm 4), the record in the "
                            "first group, its gradients aligned" if p.tight else
                            "bounded: the groups' column norms differ")]
    return _report("bandmf", run, p, args.delta, args, t0, notes)


def cmd_mmcc(args: argparse.Namespace) -> int:
    import pld

    t0 = time.perf_counter()
    strategy = read_strategy(args.strategy)
    try:
        p = pld.mmcc(strategy, args.noise_multiplier, args.sampling_rate,
                     steps=args.steps if strategy.ndim == 1 else None, gradients=args.gradients)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    run = {"sigma": args.noise_multiplier, "q": args.sampling_rate, "T": args.steps, "gradients": args.gradients}
    notes = ["sampling  Poisson at every step; add-or-remove one record (both directions)"]
    return _report("mmcc", run, p, args.delta, args, t0, notes)


def cmd_user_level(args: argparse.Namespace) -> int:
    import pld

    t0 = time.perf_counter()
    try:
        p = pld.dpsgd(args.noise_multiplier, args.sampling_rate, args.steps, records_per_user=args.records_per_user)
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    run = {"sigma": args.noise_multiplier, "q": args.sampling_rate, "T": args.steps,
           "records_per_user": args.records_per_user}
    notes = ["sampling  example-level Poisson, each record clipped to C; add-or-remove a whole user",
             "claim     tight: the binomial mixture of Gaussians (a user's k gradients aligned attain it)"]
    return _report("user-level", run, p, args.delta, args, t0, notes)
