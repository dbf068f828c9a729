"""The text of pld's reports: headline, footer, tables and the ``format_*`` of
each command's result dict (``pld dpsgd``, ``compose``, ``calibrate``, curves).

Everything here turns a result dict from :mod:`pld.report` into text; nothing
accounts.  Rounding is outward (:mod:`pld.report.rounding`), so a printed bracket
still contains the certified one.
"""

from __future__ import annotations

import textwrap

import numpy as np

from pld.accounting import sampling as sampling_registry
from pld.report.rounding import bracket, round_down, round_up


def _sampling_name(name: str) -> str:
    """The report's sampling line (the registry's description, or the name as given)."""
    try:
        return sampling_registry.get(name).description
    except (TypeError, ValueError):
        return str(name)


#: the sampling lines of the schemes registered when pld was imported (pld.accounting.sampling)
SAMPLING_NAMES = {n: sampling_registry.get(n).description for n in sampling_registry.names()}


def curve_rows(eps, lo, hi) -> list[dict]:
    return [{"epsilon": float(e), "delta_lower": float(a), "delta_upper": float(b)}
            for e, a, b in zip(np.atleast_1d(eps), np.atleast_1d(lo), np.atleast_1d(hi))]


def curve_csv(rows: list[dict]) -> str:
    lines = ["epsilon,delta_lower,delta_upper"]
    lines += [f"{r['epsilon']!r},{r['delta_lower']!r},{r['delta_upper']!r}" for r in rows]
    return "\n".join(lines) + "\n"


def format_curve(rows: list[dict], *, marker_epsilon: float | None = None, indent: str = "  ") -> str:
    out = [f"{indent}{'epsilon':>12}  {'delta lower':>12}  {'delta upper':>12}"]
    for r in rows:
        tag = ""
        if marker_epsilon is not None and r["epsilon"] == marker_epsilon:
            tag = "  <- reported epsilon"
        out.append(f"{indent}{r['epsilon']:>12.6g}  {r['delta_lower']:>12.5g}  {r['delta_upper']:>12.5g}{tag}")
    return "\n".join(out)


def target_warning(explained: dict) -> list[str]:
    """A report line when the bracket ended wider than its target (never silent)."""
    if explained.get("target_met", True):
        return []
    return [f"the epsilon bracket is wider than its target ({explained.get('target')}): "
            f"{explained.get('target_missed_because')}; both ends are still certified"]


def _fft_note(numerics: dict) -> str:
    return f"; FFT: {numerics['fft']}" if numerics.get("fft") else ""


def _dir_lines(numerics: dict, indent: str = "  ") -> list[str]:
    out: list[str] = []
    rows = []
    for d, n in numerics.get("directions", {}).items():
        parts = []
        if "epsilon_lower" in n and "epsilon_upper" in n:
            parts.append(f"epsilon in {bracket(n['epsilon_lower'], n['epsilon_upper'])}")
            if n.get("binding") is False:
                parts.append("does not bind (below the other direction: settled on a coarse grid)")
        h0, h1 = n.get("grid_spacing_first_step"), n.get("grid_spacing_final")
        if h0 is not None:
            parts.append(f"grid spacing {h0:.3g}" + (f" -> {h1:.3g} (evolving)" if h1 not in (None, h0) else ""))
        powers = [k for k in n.get("fft_power_steps") or [] if k > 1]
        if powers:
            parts.append("first " + "/".join(str(k) for k in powers) + " steps by one FFT power"
                         + (" (in extended precision)" if n.get("fft_precision") == "extended" else ""))
        if n.get("grid_points") is not None:
            parts.append(f"{int(n['grid_points'])} grid points")
        if n.get("tilt") is not None:
            parts.append(f"tilt {n['tilt']:.4g}")
        if n.get("fft_error_bound") is not None:
            parts.append(f"FFT error bound {n['fft_error_bound']:.2g}")
        if n.get("infinity_mass_upper") is not None:
            parts.append(f"mass at +inf <= {n['infinity_mass_upper']:.2g}")
        win = n.get("loss_window")
        if win is not None:
            parts.append(f"loss window [{win[0]:.4g}, {win[1]:.4g}]")
        rows.append((d, "; ".join(parts)))
    for r in numerics.get("big_jump_decomposition") or []:
        lo, hi = r["bracket"]
        rows.append(("remove (big jumps)",
                     f"epsilon in {bracket(lo, hi)} from {r['terms']} terms: each step cut at loss {r['cut']:.4g} "
                     f"(P(step above) = {r['jump_probability']:.3g}), terms with more steps above bounded by "
                     f"{r['tail_bound']:.2g}; grids tuned at epsilon {r['tuned_at']:.6g}"))
    return _table(rows, indent=indent) if rows else out


def _table(rows, indent: str = "  ", width: int = 100) -> list[str]:
    key_w = max(len(k) for k, _ in rows)
    pad = indent + " " * (key_w + 2)
    out = []
    for k, v in rows:
        first = f"{indent}{k:<{key_w}}  "
        out += textwrap.wrap(str(v), width=width, initial_indent=first, subsequent_indent=pad,
                             break_on_hyphens=False) or [first.rstrip()]
    return out


# ---------------------------------------------------------------- rounding
# (outward rounding lives in pld.report.rounding, shared with pld.accounting.epochs' table)


def headline(epsilon_lower: float, epsilon_upper: float, delta: float) -> str:
    """The answer in one line: the epsilon to report, then its certified bracket."""
    return (f"({round_up(epsilon_upper, 4)}, {delta:g})-DP: certified epsilon in "
            f"{bracket(epsilon_lower, epsilon_upper)} at delta = {delta:g}")


def footer(r: dict) -> str:
    """``pld VERSION, S s`` plus the wall time when it differs (start-up, first-run compilation:
    a first run is slow for a reason the user should see)."""
    text = f"pld {r.get('pld_version', '')}, {r['seconds']:.2f} s"
    wall = r.get("wall_seconds")
    compiled = r.get("compile_seconds") or 0.0
    if wall is not None and wall > r["seconds"] + 0.05:
        text += f" accounting, {wall:.2f} s in all"
        if compiled > 0:
            text += f" (first run on this machine: {compiled:.1f} s compiling the numba kernels, once)"
    return text


def _rate_text(r: dict, scheme: sampling_registry.SamplingScheme, eq: str = "") -> str:
    """``0.00426667`` with where it came from: ``(expected batch 256 / dataset 60000)``."""
    text = f"{r['sampling_rate']:.6g}"
    m = r.get("steps_per_epoch")
    if not scheme.per_step and m:
        k = round(r["sampling_rate"] * m)
        text = f"{k}/{m}"
        if r.get("dataset_size"):
            text += f" (expected batch {r['dataset_size'] * k / m:.6g} of {r['dataset_size']})"
    elif r.get("batch_size") and r.get("dataset_size"):
        kind = scheme.batch_name
        text += f" ({eq}{kind} {r['batch_size']} / dataset {r['dataset_size']})"
    return text


def _steps_text(r: dict) -> str:
    """``T = 9800 (100 epochs of 98 steps)``."""
    text = f"T = {r['steps']}"
    m, e = r.get("steps_per_epoch"), r.get("epochs")
    if e is not None and m:
        text += f" ({e:g} epochs of {m} steps)"
    elif e is not None:
        text += f" ({e:g} epochs)"
    elif m and r["steps"] >= m:
        text += f" ({r['steps'] / m:.4g} epochs of {m} steps)"
    return text


def _accounted(r: dict, scheme: sampling_registry.SamplingScheme) -> list[tuple[str, str]]:
    """What the figure covers, in a few rows (the short report)."""
    run = "one training run" if r["runs"] == 1 else f"{r['runs']} training runs composed ({r['total_steps']} steps)"
    rows = []
    shuffled = r.get("shuffle")
    if shuffled:
        rows.append(("publish", _publish_text(r, shuffled)))
    rows.append(("run", f"sigma = {r['noise_multiplier']:g}, q = {_rate_text(r, scheme)}, {_steps_text(r)}; {run}"))
    if r.get("loader"):
        rows.append(("loader", r["loader"]))
    if shuffled:
        rows.append(("sampling", "shuffling (a permutation cut into batches each epoch), the record replaced by a "
                                 "zero record in its slot; sigma = noise std / clipping norm C"))
        rows.append(("instead", _instead_text(shuffled)))
    else:
        rows.append(("sampling", scheme.summary or scheme.description))
    if r.get("attack"):
        a = r["attack"]
        places = max(2, 3 - int(np.floor(np.log10(max(a["tpr_upper"], 1e-300)))))  # (4 significant digits)
        rows.append(("attack", f"an attacker's TPR at {a['fpr']:.0%} FPR <= {round_up(a['tpr_upper'], places)} "
                               f"(certified {bracket(a['tpr_lower'], a['tpr_upper'], places + 2)})"))
    if r.get("example"):
        rows.append(("example", f"{r['example']} (the default; give --noise-multiplier with --sampling-rate "
                                "or --batch-size and --dataset-size, and --steps or --epochs for your run)"))
    return rows


def _publish_text(r: dict, sb: dict) -> str:
    """The shuffling report's first row: what to publish, what no analysis can beat, which bound binds."""
    others = [c for c in sb["constructions"] if c["name"] != sb["binding"]]
    text = (f"{round_up(sb['epsilon_upper'], 4)}, the certified upper end: no amplification by shuffling "
            f"({sb['epochs']} Gaussian steps, exact closed form). No analysis can give less than "
            f"{round_down(sb['epsilon_lower'], 4)}: {sb['binding']} binds")
    if others:
        text += " (" + "; ".join(f"{c['name']}: {round_down(c['epsilon_lower'], 4)}" for c in others) + ")"
    return text


def _instead_text(sb: dict) -> str:
    """The one line on what a user can switch to, with the epsilon each gives for the same run."""
    alt = sb.get("alternatives") or {}
    parts = []
    b = alt.get("balls_in_bins")
    if b:
        parts.append(f"a balls-in-bins loader ({b['steps_per_epoch']} batches per epoch, --sampling balls_in_bins) "
                     f"gives {round_up(b['epsilon_upper'], 4)}")
    p = alt.get("poisson")
    if p:
        parts.append(f"Poisson sampling at q = {p['sampling_rate']:.6g} (--sampling poisson) "
                     f"{round_up(p['epsilon_upper'], 4)}")
    text = "no tight analysis of shuffling is known"
    if parts:
        text += "; for this run " + " and ".join(parts) + ", both tight (pld.samplers runs either)"
    return text


def format_epochs(rows: list[dict], indent: str = "  ") -> list[str]:
    """The per-epoch table: epoch, steps, epsilon (rounded up) and the bracket."""
    out = [f"{indent}{'epoch':>7}  {'steps':>10}  {'epsilon':>9}  certified bracket"]
    for row in rows:
        out.append(f"{indent}{row['epoch']:>7g}  {row['steps']:>10d}  {round_up(row['epsilon_upper'], 4):>9}  "
                   f"{bracket(row['epsilon_lower'], row['epsilon_upper'])}")
    return out


def format_dpsgd(r: dict, *, verbose: bool = False) -> str:
    """Human-readable DP-SGD report: the answer first (warnings and notes: :func:`stderr_lines`).

    The short form (default) is the answer, what was accounted and the time;
    ``verbose`` adds every setting, the delta(epsilon) curve and the
    numerical settings behind the certificate.
    """
    lo, hi = r["epsilon_lower"], r["epsilon_upper"]
    scheme = sampling_registry.get(r["sampling"])  # (resolved once: every row below reads it)
    lines = [headline(lo, hi, r["delta"])]
    if not verbose:
        lines += _table(_accounted(r, scheme))
    else:
        lines += _verbose_rows(r, scheme)
    if r.get("per_epoch"):
        lines.append("")
        lines.append(f"Epsilon at the end of each epoch (delta = {r['delta']:g}; every row its own certified query"
                     + ("; shuffling: lower ends from the max-of-epoch construction)" if r.get("shuffle") else ")"))
        lines += format_epochs(r["per_epoch"])
    if verbose:
        if r.get("curve"):
            lines.append("")
            lines.append("Accountant curve delta(epsilon) (max over directions; certified bounds)")
            lines.append(format_curve(r["curve"], marker_epsilon=hi))
            if r.get("curve_method"):
                lines.append(f"  (from {r['curve_method']})")
        lines.append("")
        lines.append(f"Numerical settings (bracket target: {r['numerics']['bracket_target']}"
                     f"{_fft_note(r['numerics'])})")
        lines += _dir_lines(r["numerics"])
    lines.append("")
    tail = footer(r)
    if not verbose:
        tail += " (--verbose: all settings, delta curve, numerics)"
    lines.append(tail)
    return _warnings_first(r, lines)


def _verbose_rows(r: dict, scheme: sampling_registry.SamplingScheme) -> list[str]:
    qtxt = _rate_text(r, scheme, eq="= ")
    ttxt = f"{r['steps']}"
    m = r.get("steps_per_epoch")
    if r.get("epochs") is not None:
        if m:
            ttxt += f" (= ceil({r['epochs']:g} epochs x {m} steps per epoch))"
        else:
            ttxt += f" (= ceil({r['epochs']:g} epochs / q))"
    rows = [
        ("accountant", r["accountant"]),
        ("delta", f"{r['delta']:g}"),
        ("noise multiplier", f"sigma = {r['noise_multiplier']:g}"),
        ("sampling rate", f"q = {qtxt}"),
        ("steps", f"T = {ttxt}"),
        ("sampling", scheme.description),
        ("neighbouring", r["neighbouring"]),
        ("sensitivity", r["sensitivity_convention"]),
        ("covers", r["covers"] + (f": {r['runs']} x {r['steps']} = {r['total_steps']} steps"
                                  if r["runs"] > 1 else "")),
    ]
    if r.get("loader"):
        rows.insert(5, ("loader", r["loader"]))
    if r.get("example"):
        rows.insert(0, ("example", r["example"]))
    if r.get("dataset_size"):
        rows.insert(5 if r.get("example") else 4, ("dataset size", f"n = {r['dataset_size']}"))
    sb = r.get("shuffle")
    if sb:
        rows.append(("publish", _publish_text(r, sb)))
        rows.append(("upper end", sb["upper"]))
        for c in sb["constructions"]:
            rows.append(("lower end" if c["name"] == sb["binding"] else "also",
                         f"{c['name']}: {round_down(c['epsilon_lower'], 6)} -- {c['pair']} ({c['reference']})"))
        rows.append(("instead", _instead_text(sb)))
    return [""] + _table(rows)


def format_compose(r: dict) -> str:
    lines = ["Composition privacy accounting" + (f": {r['name']}" if r.get("name") else "")]
    for q in r["queries"]:
        lines.append("  " + headline(q["epsilon_lower"], q["epsilon_upper"], q["delta"]))
    lines.append("")
    lines.append("What ran")
    for c in r["components"]:
        lines.append(f"  {c['entry']}: {c['description']}")
    lines.append(f"  covers: {r['covers']}; {r['total_steps']} mechanism runs in total")
    lines.append(f"  neighbouring: {r['neighbouring']}")
    lines.append(f"  accountant: {r['accountant']}")
    if r.get("curve"):
        lines.append("")
        lines.append("delta(epsilon) (max over directions; certified bounds)")
        lines.append(format_curve(r["curve"]))
        if r.get("curve_method"):
            lines.append(f"  (from {r['curve_method']})")
    if r.get("numerics"):
        lines.append("")
        lines.append(f"Numerical settings at delta = {r['queries'][0]['delta']:g} "
                     f"(bracket target: {r['numerics']['bracket_target']}{_fft_note(r['numerics'])})")
        lines += _dir_lines(r["numerics"])
    lines.append("")
    lines.append(footer(r))
    return _warnings_first(r, lines)


# ------------------------------------------------------------- calibrate
def format_calibrate(r: dict) -> str:
    solved = r["solved_for"]
    label = {"noise_multiplier": "noise multiplier sigma", "steps": "steps T", "epochs": "epochs",
             "sampling_rate": "sampling rate q", "batch_size": "batch size"}[solved]
    goal = {"noise_multiplier": "smallest sigma", "steps": "largest T", "epochs": "most whole epochs",
            "sampling_rate": "largest q", "batch_size": "largest batch"}[solved]
    val = r[solved]
    vtxt = f"{val}" if solved in ("steps", "epochs", "batch_size") else f"{val:.6g}"
    if solved == "epochs":
        vtxt += f" (T = {r['steps']} steps, {r['steps_per_epoch']} per epoch)"
    elif solved == "batch_size":
        vtxt += (f" of {r['dataset_size']} (q = {r['sampling_rate']:.6g}; {r['steps_per_epoch']} steps per epoch, "
                 f"T = {r['steps']})")
    lines = [f"Calibrated {label} = {vtxt}",
             f"  ({goal} with epsilon <= {r['target_epsilon']:g} at delta = {r['delta']:g})"]
    if r.get("epsilon_upper") is not None:
        ok = r["epsilon_upper"] <= r["target_epsilon"]
        lines.append(f"  check: certified epsilon in {bracket(r['epsilon_lower'], r['epsilon_upper'])}"
                     f" {'<=' if ok else '>'} target {r['target_epsilon']:g}")
    if r.get("next") is not None:
        nxt = r["next"]
        above = "> target" if nxt["epsilon_lower"] > r["target_epsilon"] else "(its upper end > target)"
        lines.append(f"  next:  {nxt['what']}: certified epsilon in "
                     f"{bracket(nxt['epsilon_lower'], nxt['epsilon_upper'])} {above}")
    lines.append("")
    rows = [("noise multiplier", f"sigma = {r['noise_multiplier']:.6g}"),
            ("sampling rate", f"q = {r['sampling_rate']:.6g}"),
            ("steps", f"T = {r['steps']}")]
    if r.get("loader"):
        rows.append(("loader", r["loader"]))
    rows += [("delta", f"{r['delta']:g}"),
             ("sampling", _sampling_name(r["sampling"])),
             ("neighbouring", r["neighbouring"]),
             ("sensitivity", r["sensitivity_convention"]),
             ("accountant", r["accountant"])]
    lines += _table(rows)
    lines.append("")
    evals = f", {r['evaluations']} engine accountings" if r.get("evaluations") else ""
    lines.append(footer(r) + evals)
    return _warnings_first(r, lines)


def _warnings_first(r: dict, lines: list[str]) -> str:
    """The report text.  Warnings and notes are not in it: the command line writes them
    to stderr (:func:`stderr_lines`) and the JSON carries them, so that the first line
    of the output is the answer (``pld dpsgd ... | head -1``)."""
    return "\n".join(lines)


def stderr_lines(r: dict) -> list[str]:
    """``pld: warning: ...`` and ``pld: note: ...`` lines of a result, for stderr."""
    out = []
    for kind, key in (("warning", "warnings"), ("note", "notes")):
        for w in r.get(key) or []:
            out += textwrap.wrap(f"pld: {kind}: {w}", width=100, subsequent_indent="    ", break_on_hyphens=False)
    return out
