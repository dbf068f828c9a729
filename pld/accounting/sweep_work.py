"""One configuration of a sweep: its validation and its work (run in any process).

A configuration is a mapping in one of three kinds, told apart by its keys:

* **dpsgd**: ``noise_multiplier`` (alias ``sigma``), ``sampling_rate`` (``q``),
  ``steps`` (``T``), or instead of the last two every run field the command
  line takes: ``dataset_size``, ``batch_size`` (the logical batch),
  ``epochs``, ``drop_last``, ``steps_per_epoch``, ``physical_batch_size``,
  ``accumulation_steps``, ``participations`` (resolved as :func:`pld.dpsgd`
  does: :mod:`pld.accounting.loaders`); optional ``delta`` (default 1e-5),
  ``sampling`` (any scheme), ``runs`` (training runs on the same data,
  composed; default 1), ``name``.
* **calibrate**: ``target_epsilon`` and two of the three DP-SGD parameters (the
  rate as ``batch_size`` with ``dataset_size``, the length as ``epochs``); the
  missing one is solved for with :func:`pld.calibrate_noise`,
  :func:`pld.calibrate_steps` or :func:`pld.calibrate_sampling_rate`, or in a
  loader's units (``epochs`` when the loader defines an epoch, ``batch_size``
  at fixed epochs with ``dataset_size``: :mod:`pld.accounting.calibrate_loader`).
* **spec**: ``spec``, a path to a spec file or an inline spec mapping (see
  :mod:`pld.accounting.spec`); optional ``delta`` (default: the spec's first delta).

Everything here uses pld's public API only (``pld.dpsgd``, the calibration
functions, :mod:`pld.accounting.spec`), so that it is independent of the engine's inner
layout.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Mapping
from typing import Any

from pld import _validate as v

#: spellings accepted for the DP-SGD parameters
ALIASES = {"sigma": "noise_multiplier", "q": "sampling_rate", "T": "steps"}
DPSGD_PARAMS = ("noise_multiplier", "sampling_rate", "steps")
_OPTIONAL = ("delta", "sampling", "runs", "name")
#: the run's loader (pld.accounting.loaders), instead of sampling_rate / steps
LOADER_PARAMS = ("dataset_size", "batch_size", "epochs", "drop_last", "steps_per_epoch", "physical_batch_size",
                 "accumulation_steps", "participations")
_ALLOWED = {
    "dpsgd": set(DPSGD_PARAMS) | set(_OPTIONAL) | set(LOADER_PARAMS),
    "calibrate": set(DPSGD_PARAMS) | set(_OPTIONAL) | set(LOADER_PARAMS) | {"target_epsilon"},
    "spec": {"spec", "delta", "name"},
}
DEFAULT_DELTA = 1e-5
#: keys normalization adds (ignored on input)
_DERIVED = ("kind", "solved_for")

#: the columns of a row, in order (a row of one kind leaves the others' fields None)
COLUMNS = ("index", "kind", "name", "noise_multiplier", "sampling_rate", "steps", "epochs", "steps_per_epoch",
           "dataset_size", "batch_size", "drop_last", "runs", "sampling", "delta", "target_epsilon", "solved_for",
           "spec", "epsilon_lower", "epsilon_upper", "target_met", "note", "settings", "seconds", "error")
#: fields that depend on the machine's speed, not on the configuration
TIMING_FIELDS = ("seconds",)


def normalize(config: Mapping[str, Any], where: str = "config") -> dict:
    """Validate one configuration and return it in canonical form.

    Parameters
    ----------
    config : mapping
        One configuration (see the module docstring).
    where : str
        Its position, for messages (``"configs[3]"``).

    Returns
    -------
    dict
        ``kind`` plus the canonical fields (aliases resolved, defaults filled).

    Raises
    ------
    TypeError, ValueError
        Naming the field and its valid range.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"{where} must be a mapping of parameter names to values, got {type(config).__name__}")
    c = {}
    for key, value in config.items():
        if key in _DERIVED or value is None:
            continue  # (a normalized configuration normalizes to itself)
        canon = ALIASES.get(key, key)
        if canon in c:
            raise ValueError(f"{where}: {key!r} repeats {canon!r}")
        c[canon] = value
    if "kind" in config:
        # (a normalized configuration or a sweep row, read again: its rate and steps were derived
        # from its loader and epochs, which say them again)
        if c.get("dataset_size") is not None and c.get("batch_size") is not None:
            c.pop("sampling_rate", None)
        if c.get("epochs") is not None:
            c.pop("steps", None)
    if "spec" in c:
        kind = "spec"
    elif "target_epsilon" in c:
        kind = "calibrate"
    else:
        kind = "dpsgd"
    unknown = sorted(set(c) - _ALLOWED[kind])
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} for a {kind} "
                         f"configuration; allowed: {', '.join(sorted(_ALLOWED[kind]))}")
    out: dict = {"kind": kind, "name": None if c.get("name") is None else str(c["name"])}
    if kind == "spec":
        return _normalize_spec(c, out, where)
    return _normalize_dpsgd(c, out, kind, where)


def _normalize_spec(c: dict, out: dict, where: str) -> dict:
    spec = c["spec"]
    if not isinstance(spec, (str, Mapping)):
        raise TypeError(f"{where}.spec must be a file path or a spec mapping, got {type(spec).__name__}")
    out["spec"] = spec if isinstance(spec, str) else dict(spec)
    out["delta"] = (None if c.get("delta") is None else
                    v.real(f"{where}.delta", c["delta"], low=0.0, high=1.0, low_open=True, high_open=True))
    return out


def _normalize_dpsgd(c: dict, out: dict, kind: str, where: str) -> dict:
    from pld.accounting.dpsgd import sampling_scheme
    from pld.accounting.loaders import resolve_run

    out["delta"] = v.real(f"{where}.delta", c.get("delta", DEFAULT_DELTA), low=0.0, high=1.0,
                          low_open=True, high_open=True)
    out["sampling"] = sampling_scheme(c.get("sampling", "poisson"), f"{where}.sampling")
    out["runs"] = v.integer(f"{where}.runs", c.get("runs", 1), low=1, high=10**6)
    have = {"noise_multiplier": c.get("noise_multiplier") is not None,
            "sampling_rate": c.get("sampling_rate") is not None or c.get("batch_size") is not None
            or c.get("physical_batch_size") is not None,
            "steps": c.get("steps") is not None or c.get("epochs") is not None}
    missing = [p for p, ok in have.items() if not ok]
    if kind == "dpsgd" and missing:
        raise ValueError(f"{where}: missing {', '.join(missing)} (give noise_multiplier, sampling_rate (or "
                         "dataset_size and batch_size) and steps (or epochs); or target_epsilon and two of them "
                         "to solve for the third)")
    if kind == "calibrate":
        if len(missing) != 1:
            raise ValueError(f"{where}: with target_epsilon give exactly two of noise_multiplier, "
                             f"sampling_rate, steps (the third is solved for), got {3 - len(missing)}")
        solve = missing[0]
        loader = (c.get("dataset_size") is not None and c.get("batch_size") is not None) \
            or c.get("steps_per_epoch") is not None
        if solve == "steps" and loader:
            solve = "epochs"
        elif solve == "sampling_rate" and c.get("dataset_size") is not None and c.get("epochs") is not None:
            solve = "batch_size"
        out["solved_for"] = solve
        out["target_epsilon"] = v.real(f"{where}.target_epsilon", c["target_epsilon"], low=0.0, low_open=True)
        if out["runs"] != 1:
            raise ValueError(f"{where}.runs: calibration solves for one run; got runs={out['runs']}")
    if c.get("noise_multiplier") is not None:
        out["noise_multiplier"] = v.real(f"{where}.noise_multiplier", c["noise_multiplier"],
                                         low=0.0, low_open=True)
    loader_kw = {k: c[k] for k in LOADER_PARAMS if c.get(k) is not None}
    rate, steps, solved = c.get("sampling_rate"), c.get("steps"), out.get("solved_for")
    # what is known of the run, resolved as pld.dpsgd would; a calibration leaves open what it solves for
    keep: tuple = ("sampling_rate", "steps", "epochs", "steps_per_epoch", "dataset_size", "batch_size", "drop_last")
    try:
        if solved in ("steps", "epochs"):
            loader_kw.pop("epochs", None)
            shape = resolve_run(out["sampling"], rate, 1, **loader_kw)
            keep = ("sampling_rate", "steps_per_epoch", "dataset_size", "batch_size", "drop_last")
        elif solved == "batch_size":
            shape = resolve_run(out["sampling"], None, None, **{**loader_kw, "batch_size": 1})
            keep = ("epochs", "dataset_size", "drop_last")
        elif solved == "sampling_rate":
            shape = resolve_run(out["sampling"], 1.0, steps, **loader_kw)
            keep = ("steps",)
        else:
            shape = resolve_run(out["sampling"], rate, steps, **loader_kw)
    except (TypeError, ValueError) as exc:
        text = str(exc)  # ("sampling_rate must be ..." -> "configs[1].sampling_rate must be ...")
        first = text.split(" ", 1)[0]
        raise type(exc)(f"{where}.{text}" if first in _ALLOWED["calibrate"] else f"{where}: {text}") from None
    for key in keep:
        val = getattr(shape, key)
        if val is not None and val is not False:
            out[key] = val
    if shape.participations != 1:
        out["participations"] = shape.participations
    for key in ("physical_batch_size", "accumulation_steps"):
        if c.get(key) is not None:
            out[key] = v.integer(f"{where}.{key}", c[key], low=1)
    return out


def run_kwargs(c: dict) -> dict:
    """:func:`pld.dpsgd` keyword arguments of a normalized DP-SGD configuration (its loader when
    it has one, so that a short last batch or whole epochs count as they ran)."""
    kw: dict = {"sampling": c["sampling"], "steps": c["steps"]}
    if c.get("dataset_size") is not None and c.get("batch_size") is not None:
        kw.update(dataset_size=c["dataset_size"], batch_size=c["batch_size"], drop_last=bool(c.get("drop_last")))
        if c.get("steps_per_epoch") is not None and c["sampling"] == "poisson":
            kw["steps_per_epoch"] = c["steps_per_epoch"]
    else:
        kw["sampling_rate"] = c["sampling_rate"]
        if c.get("steps_per_epoch") is not None:
            kw["steps_per_epoch"] = c["steps_per_epoch"]
    if c.get("participations") is not None:
        kw["participations"] = c["participations"]
    return kw


# ------------------------------------------------------------------- cost
#: log-linear fit of one DP-SGD query's CPU seconds on one core (800 random
#: configurations, sigma in [0.5, 4], q in [1e-4, 0.1], T in [1e3, 1e6]; test
#: R^2 0.67 on 200 others) in log T, log q, log sigma: small sigma with small q
#: (heavy-tailed losses) costs the most.  Only the order matters.
_COST_FIT = (-6.773, 0.227, -0.26, 0.25, 0.231, 0.471)
#: queries a calibration makes (a bisection, then the solution's bracket)
_CALIBRATION_QUERIES = 12
#: what is assumed of a parameter a calibration solves for, and of a spec
_COST_DEFAULTS = {"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 10_000}
_SPEC_COST = 0.035


def estimated_cost(config: dict) -> float:
    """A rough estimate of the seconds one normalized configuration takes.

    Used only to send expensive configurations first (so that a sweep ends on
    short tasks) and to size chunks; rows never depend on it.  Typically
    within a factor 2-3 of the time; never raises.
    """
    try:
        kind = config.get("kind")
        if kind == "spec":
            return _SPEC_COST
        p: dict[str, Any] = {k: _COST_DEFAULTS[k] if config.get(k) is None else config[k] for k in DPSGD_PARAMS}
        ls, lq = math.log(float(p["noise_multiplier"])), math.log(float(p["sampling_rate"]))
        lt = math.log(float(p["steps"]) * float(config.get("runs") or 1))
        c0, ct, cq, cs, csq, css = _COST_FIT
        log_cost = c0 + ct * lt + cq * lq + cs * ls + csq * ls * lq + css * ls * ls
        cost = math.exp(min(max(log_cost, -20.0), 5.0))
        return cost * _CALIBRATION_QUERIES if kind == "calibrate" else cost
    except (TypeError, ValueError, OverflowError, KeyError):
        return _SPEC_COST


# ------------------------------------------------------------------- work
def account(config: dict) -> dict:
    """The row of one normalized configuration (without ``index``).

    Never raises for an engine failure: the error is the row's ``error`` field
    (its brackets are then None), so that one failing configuration does not
    cost a sweep its other rows.  Warnings raised while accounting (such as
    :class:`pld.TargetMissedWarning`) go into ``note``.
    """
    row: dict[str, Any] = {k: None for k in COLUMNS if k != "index"}
    row.update({k: (json.dumps(val, sort_keys=True) if k == "spec" and not isinstance(val, str) else val)
                for k, val in config.items()})
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if config["kind"] == "spec":
                _account_spec(config, row)
            elif config["kind"] == "calibrate":
                _account_calibrate(config, row)
            else:
                _account_dpsgd(config, row)
        except (ValueError, TypeError, ArithmeticError, MemoryError, RuntimeError, OSError) as exc:
            row["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            row["target_met"] = False
    notes = sorted({f"{type(w.message).__name__}: {' '.join(str(w.message).split())}" for w in caught
                    if issubclass(w.category, RuntimeWarning) and not _numpy_chatter(w)})
    if notes:
        row["note"] = "; ".join(filter(None, [row.get("note"), *notes]))
        if any(n.startswith("TargetMissedWarning") for n in notes) and config["kind"] != "calibrate":
            row["target_met"] = False
    row["seconds"] = time.perf_counter() - t0
    return row


def _numpy_chatter(w) -> bool:
    # floating-point overflow/underflow messages from numpy inside the engine
    # are expected and handled there; they are not news for the caller
    return type(w.message) is RuntimeWarning and "encountered in" in str(w.message)


def _bracket(pld_obj, delta: float, row: dict) -> None:
    lo, hi = pld_obj.epsilon_bounds(delta)
    row["epsilon_lower"], row["epsilon_upper"] = float(lo), float(hi)
    row["target_met"] = True
    row["settings"] = settings_summary(pld_obj, delta)
    if row["settings"].get("target_met") is False:
        row["target_met"] = False
        row["note"] = f"bracket wider than its target: {row['settings'].get('target_missed_because')}"


def settings_summary(pld_obj, delta: float) -> dict:
    """The numerical settings behind a bracket, in a few fields (from ``PLD.explain``).

    ``explain`` reads the grids the query built (milliseconds); if this
    installation's PLD has no ``explain``, the summary says so.
    """
    # a Gaussian composition answered in closed form has no grids, and explain()
    # would build them (a whole FFT query): say how it was answered instead.
    # (_closed_form_mu is the engine's own test; absent after a redesign, the
    # summary falls back to explain())
    closed = getattr(pld_obj, "_closed_form_mu", None)
    mu = closed() if callable(closed) else None
    if mu is not None:
        return {"method": f"closed form (one Gaussian mechanism, mu = {mu:.6g})", "target_met": True}
    try:
        ex = pld_obj.explain(delta)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # pragma: no cover - engine redesign
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    out = {"method": ex.get("method"), "target": ex.get("target"), "target_met": ex.get("target_met")}
    if ex.get("target_missed_because"):
        out["target_missed_because"] = ex["target_missed_because"]
    for d, info in (ex.get("directions") or {}).items():
        out[d] = {"grid_points": info.get("grid_points"), "grid_spacing": info.get("grid_spacing_final")}
    return out


def _account_dpsgd(c: dict, row: dict) -> None:
    import pld

    d = pld.dpsgd(c["noise_multiplier"], **run_kwargs(c))
    if c["runs"] > 1:
        d = d.self_compose(c["runs"])
    _bracket(d, c["delta"], row)


def _account_calibrate(c: dict, row: dict) -> None:
    import pld
    from pld.accounting import calibrate_loader

    solve, eps, delta, s = c["solved_for"], c["target_epsilon"], c["delta"], c["sampling"]
    info: dict = {}
    loader = {k: c[k] for k in ("dataset_size", "drop_last", "participations") if c.get(k) is not None}
    if solve == "noise_multiplier":
        value = pld.calibrate_noise(eps, delta, c["sampling_rate"], c["steps"], sampling=s, info=info)
    elif solve == "steps":
        value = pld.calibrate_steps(eps, delta, c["noise_multiplier"], c["sampling_rate"], sampling=s, info=info)
    elif solve == "epochs":
        value = calibrate_loader.calibrate_epochs(
            eps, delta, c["noise_multiplier"], sampling=s, batch_size=c.get("batch_size"),
            sampling_rate=None if c.get("batch_size") else c.get("sampling_rate"),
            steps_per_epoch=c.get("steps_per_epoch"), info=info, **loader)
        row["steps"] = int(value) * c["steps_per_epoch"]
    elif solve == "batch_size":
        value = calibrate_loader.calibrate_batch_size(eps, delta, c["noise_multiplier"], sampling=s,
                                                      epochs=c["epochs"], info=info, **loader)
        shape = pld.accounting.loaders.resolve_run(s, batch_size=value, epochs=c["epochs"], **loader)
        row.update(sampling_rate=shape.sampling_rate, steps=shape.steps, steps_per_epoch=shape.steps_per_epoch)
    else:
        value = pld.calibrate_sampling_rate(eps, delta, c["noise_multiplier"], c["steps"], sampling=s, info=info)
    row[solve] = int(value) if solve in ("steps", "epochs", "batch_size") else float(value)
    # the certified bracket of the solution, evaluated anew: what the row states is
    # checked by the engine, not taken from the search's bookkeeping
    d = pld.dpsgd(row["noise_multiplier"], **run_kwargs({**c, **{k: row[k] for k in (
        "sampling_rate", "steps", "batch_size", "steps_per_epoch") if row.get(k) is not None}}))
    _bracket(d if d.tight else d.bounds()[0], delta, row)  # (shuffling: its upper end decides)
    row["target_met"] = bool(row["epsilon_upper"] <= eps)
    if not row["target_met"]:
        row["note"] = f"certified epsilon {row['epsilon_upper']:.6g} above the target {eps:g}"
    row["settings"]["calibration_evaluations"] = info.get("evaluations")


def _account_spec(c: dict, row: dict) -> None:
    import os

    from pld.accounting.spec import load_spec, parse_spec

    spec = c["spec"]
    parsed = load_spec(spec) if isinstance(spec, str) else parse_spec(spec, base_dir=os.getcwd())
    delta = c["delta"] if c["delta"] is not None else parsed.deltas[0]
    row["delta"] = delta
    row["runs"] = parsed.runs
    _bracket(parsed.pld, delta, row)

