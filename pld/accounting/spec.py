"""Composition spec files for ``pld compose``: JSON or TOML describing what ran.

A spec lists mechanisms, each with an optional ``count`` (how many times it
ran) and an optional Poisson ``sampling_rate``; ``phases`` group mechanisms
that repeat together; ``runs`` repeats the whole thing.  Every mistake is
reported with the path of the offending field, for example
``mechanisms[2].sigma: must be > 0, got -1``.

JSON::

    {
      "delta": 1e-5,
      "mechanisms": [
        {"type": "gaussian", "sigma": 1.1, "sampling_rate": 0.004, "count": 14063},
        {"type": "laplace", "scale": 2.0, "count": 3},
        {"type": "randomized_response", "epsilon": 0.5}
      ],
      "phases": [
        {"name": "fine-tune", "repeat": 2, "mechanisms": [
          {"type": "dpsgd", "noise_multiplier": 2.0, "sampling_rate": 0.01, "steps": 500}
        ]}
      ]
    }

TOML::

    delta = 1e-5
    [[mechanisms]]
    type = "gaussian"
    sigma = 1.1
    sampling_rate = 0.004
    count = 14063

Top-level fields: ``mechanisms`` and/or ``phases`` (at least one mechanism in
all), ``delta`` (number or list; default 1e-5), ``epsilon`` (number or list:
also report delta at these epsilons), ``runs`` (integer >= 1: the whole
composition ran this many times), ``name`` (free text),
``value_discretization_interval`` (expert: fixed grid spacing).

Mechanism types and their fields (``count``, ``sampling_rate``, ``sampling``
and ``name`` are accepted by all; ``sampling`` is ``"poisson"``, the only scheme
a spec composes, spelled as in :func:`pld.dpsgd`):

=====================  ==========================================================
``gaussian``           ``sigma`` > 0, ``sensitivity`` > 0 (default 1; L2)
``laplace``            ``scale`` > 0, ``sensitivity`` > 0 (default 1; L1)
``randomized_response`` ``epsilon`` > 0 (binary randomized response)
``discrete_laplace``   ``scale`` > 0, ``sensitivity`` integer >= 1 (default 1)
``pure_dp``            ``epsilon`` > 0 (any epsilon-DP mechanism, worst case)
``approx_dp``          ``epsilon`` >= 0, ``delta`` in [0, 1)
``pmfs``               ``p``, ``q``: probability vectors of equal length
``dpsgd``              ``noise_multiplier`` > 0, ``sampling_rate`` in (0, 1],
                       ``steps`` integer >= 1 (Poisson-sampled Gaussian steps);
                       or the loader: ``dataset_size``, ``batch_size``, ``epochs``,
                       ``drop_last``, ``steps_per_epoch``, ``physical_batch_size``,
                       ``accumulation_steps`` (:mod:`pld.accounting.loaders`);
                       ``records_per_user`` integer >= 1 (default 1: user-level,
                       example-level sampling, :func:`pld.dpsgd`)
``discrete_gaussian``  ``sigma`` > 0, ``sensitivity`` integer >= 1 (default 1)
``bandmf``             ``noise_multiplier``, ``sampling_rate``, ``steps``,
                       ``bands`` (default 1), ``strategy`` (optional first
                       column of the banded Toeplitz strategy): :func:`pld.bandmf`
``mmcc``               ``noise_multiplier``, ``sampling_rate``, ``steps``,
                       ``strategy`` (first column of a Toeplitz strategy, entries
                       >= 0), ``gradients`` (``"adaptive"`` or ``"aligned"``):
                       :func:`pld.mmcc` (an upper bound, not tight)
``saved``              ``path``: a PLD saved with ``pld.save`` (relative paths
                       are taken from the spec file's folder)
=====================  ==========================================================
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from pld import mechanisms as M
from pld.accounting import sampling as sampling_registry
from pld.accounting.dpsgd import sampling_scheme
from pld.distribution import PLD
from pld.io import load
from pld.mechanisms import adjacency

__all__ = ["Spec", "SpecError", "parse_spec", "load_spec", "MECHANISM_TYPES"]


class SpecError(ValueError):
    """A spec file is malformed; the message starts with the offending field's path."""


# field name -> (kind, default); kind: "pos" (> 0), "nonneg" (>= 0), "rate" ((0, 1]),
# "prob" ([0, 1)), "int" (integer >= 1), "pmf" (probability vector), "str".
_REQUIRED = object()

MECHANISM_TYPES: dict[str, dict[str, tuple[str, object]]] = {
    "gaussian": {"sigma": ("pos", _REQUIRED), "sensitivity": ("pos", 1.0)},
    "laplace": {"scale": ("pos", _REQUIRED), "sensitivity": ("pos", 1.0)},
    "randomized_response": {"epsilon": ("pos", _REQUIRED)},
    "discrete_laplace": {"scale": ("pos", _REQUIRED), "sensitivity": ("int", 1)},
    "pure_dp": {"epsilon": ("pos", _REQUIRED)},
    "approx_dp": {"epsilon": ("nonneg", _REQUIRED), "delta": ("prob", _REQUIRED)},
    "pmfs": {"p": ("pmf", _REQUIRED), "q": ("pmf", _REQUIRED)},
    "dpsgd": {"noise_multiplier": ("pos", _REQUIRED), "sampling_rate": ("rate", None),
              "steps": ("int", None), "records_per_user": ("int", 1),
              # (the run's loader instead of sampling_rate / steps: pld.accounting.loaders)
              "dataset_size": ("int", None), "batch_size": ("int", None), "epochs": ("pos", None),
              "drop_last": ("bool", False), "steps_per_epoch": ("int", None),
              "physical_batch_size": ("int", None), "accumulation_steps": ("int", None)},
    "discrete_gaussian": {"sigma": ("pos", _REQUIRED), "sensitivity": ("int", 1)},
    "bandmf": {"noise_multiplier": ("pos", _REQUIRED), "sampling_rate": ("rate", _REQUIRED),
               "steps": ("int", _REQUIRED), "bands": ("int", 1), "strategy": ("reals", None)},
    "mmcc": {"noise_multiplier": ("pos", _REQUIRED), "sampling_rate": ("rate", _REQUIRED),
             "steps": ("int", _REQUIRED), "strategy": ("reals", _REQUIRED), "gradients": ("str", "adaptive")},
    "saved": {"path": ("str", _REQUIRED)},
}
_COMMON = {"type", "count", "sampling_rate", "sampling", "name"}
_TOP = {"mechanisms", "phases", "delta", "epsilon", "runs", "name", "value_discretization_interval"}
_PHASE = {"name", "repeat", "mechanisms"}
_MAX_COUNT = 10**12


@dataclass
class Spec:
    """A parsed spec: the composed PLD plus the queries the file asks for."""

    pld: PLD
    deltas: list = field(default_factory=list)
    epsilons: list = field(default_factory=list)
    runs: int = 1
    name: str | None = None
    #: one line per spec entry, for reports: (path, description, count)
    entries: list = field(default_factory=list)


# ----------------------------------------------------------------- checks
def _fmt(x) -> str:
    return json.dumps(x) if isinstance(x, (str, list, dict, bool)) or x is None else repr(x)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _number(path: str, x, kind: str) -> float:
    if not _is_number(x):
        raise SpecError(f"{path}: must be a number, got {_fmt(x)}")
    raw, x = x, float(x)
    if not math.isfinite(x):
        raise SpecError(f"{path}: must be finite, got {_fmt(raw)}")
    if kind == "pos" and not x > 0:
        raise SpecError(f"{path}: must be > 0, got {_fmt(raw)}")
    if kind == "nonneg" and not x >= 0:
        raise SpecError(f"{path}: must be >= 0, got {_fmt(raw)}")
    if kind == "rate" and not 0 < x <= 1:
        raise SpecError(f"{path}: must be in (0, 1], got {_fmt(raw)}")
    if kind == "prob" and not 0 <= x < 1:
        raise SpecError(f"{path}: must be in [0, 1), got {_fmt(raw)}")
    if kind == "open01" and not 0 < x < 1:
        raise SpecError(f"{path}: must be in (0, 1), got {_fmt(raw)}")
    return x


def _integer(path: str, x, low: int = 1) -> int:
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    if not isinstance(x, int) or isinstance(x, bool):
        raise SpecError(f"{path}: must be an integer, got {_fmt(x)}")
    if x < low:
        raise SpecError(f"{path}: must be an integer >= {low}, got {x}")
    if x > _MAX_COUNT:
        raise SpecError(f"{path}: must be at most {_MAX_COUNT}, got {x}")
    return x


def _pmf(path: str, x) -> tuple:
    if not isinstance(x, list) or not x:
        raise SpecError(f"{path}: must be a non-empty list of probabilities, got {_fmt(x)}")
    out = []
    for i, p in enumerate(x):
        if not _is_number(p) or not math.isfinite(float(p)) or not 0 <= float(p) <= 1:
            raise SpecError(f"{path}[{i}]: must be a probability in [0, 1], got {_fmt(p)}")
        out.append(float(p))
    s = math.fsum(out)
    if abs(s - 1.0) > 1e-9:
        raise SpecError(f"{path}: must sum to 1 (within 1e-9), sums to {s!r}")
    return tuple(out)


def _numbers(path: str, x, kind: str) -> list:
    if isinstance(x, list):
        if not x:
            raise SpecError(f"{path}: must be a number or a non-empty list of numbers")
        return [_number(f"{path}[{i}]", v, kind) for i, v in enumerate(x)]
    return [_number(path, x, kind)]


def _unknown(path: str, obj: dict, allowed) -> None:
    for k in obj:
        if k not in allowed:
            where = f"{path}.{k}" if path else str(k)
            raise SpecError(f"{where}: unknown field (expected one of: {', '.join(sorted(allowed))})")


# -------------------------------------------------------------- building
def _mechanism(path: str, obj, base_dir: str | None):
    """Return ``(components, description)``; components = [(mechanism, count)]."""
    if not isinstance(obj, dict):
        raise SpecError(f"{path}: must be a table/object describing a mechanism, got {_fmt(obj)}")
    if "type" not in obj:
        raise SpecError(f"{path}.type: missing (one of: {', '.join(MECHANISM_TYPES)})")
    kind = obj["type"]
    if not isinstance(kind, str) or kind.strip().lower().replace("-", "_") not in MECHANISM_TYPES:
        raise SpecError(f"{path}.type: unknown mechanism {_fmt(kind)} (one of: {', '.join(MECHANISM_TYPES)})")
    kind = kind.strip().lower().replace("-", "_")
    schema = MECHANISM_TYPES[kind]
    _unknown(path, obj, _COMMON | set(schema))
    vals = _fields(path, obj, kind, schema)
    count = _integer(f"{path}.count", obj["count"]) if "count" in obj else 1
    if "name" in obj and not isinstance(obj["name"], str):
        raise SpecError(f"{path}.name: must be a string, got {_fmt(obj['name'])}")
    if "sampling" in obj:
        _check_sampling(path, obj["sampling"])
    try:
        if kind == "dpsgd":
            _dpsgd_run(vals)
        if kind == "dpsgd" and vals["records_per_user"] == 1:
            mech = M.PoissonSampled(M.Gaussian(vals["noise_multiplier"]), vals["sampling_rate"])
            desc = (f"DP-SGD step (Gaussian sigma={vals['noise_multiplier']:g}, "
                    f"Poisson q={vals['sampling_rate']:g})")
            return [(mech, vals["steps"] * count)], f"{desc} x {vals['steps'] * count}"
        if kind in ("dpsgd", "bandmf", "mmcc"):
            return _matrix_or_user(kind, vals, count)
        if kind == "saved":
            return _saved(path, vals["path"], count, base_dir)
        mech, desc = _build(path, kind, vals)
    except SpecError:
        raise
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    if "sampling_rate" in obj:
        q = _number(f"{path}.sampling_rate", obj["sampling_rate"], "rate")
        mech = M.PoissonSampled(mech, q)
        desc = f"{desc} on a Poisson subsample (q={q:g})"
    return [(mech, count)], f"{desc} x {count}"


def _fields(path: str, obj: dict, kind: str, schema: dict) -> dict:
    """The mechanism's parameters, each checked against its kind in ``schema``."""
    vals = {}
    for name, (fk, default) in schema.items():
        p = f"{path}.{name}"
        if name not in obj:
            if default is _REQUIRED:
                raise SpecError(f"{p}: missing (required for type {kind!r})")
            vals[name] = default
            continue
        x = obj[name]
        if fk == "int":
            vals[name] = _integer(p, x)
        elif fk == "reals":
            vals[name] = _numbers(p, x, "nonneg")
        elif fk == "pmf":
            vals[name] = _pmf(p, x)
        elif fk == "bool":
            if not isinstance(x, bool):
                raise SpecError(f"{p}: must be true or false, got {_fmt(x)}")
            vals[name] = x
        elif fk == "str":
            if not isinstance(x, str) or not x:
                raise SpecError(f"{p}: must be a non-empty string, got {_fmt(x)}")
            vals[name] = x
        else:
            vals[name] = _number(p, x, fk)
    return vals


def _dpsgd_run(vals: dict) -> None:
    """A ``dpsgd`` entry's rate and steps from whatever describes its run (the loader's shape:
    :func:`pld.accounting.loaders.resolve_run`, Poisson sampling); in place."""
    from pld.accounting.loaders import resolve_run

    shape = resolve_run("poisson", vals["sampling_rate"], vals["steps"], epochs=vals["epochs"],
                        dataset_size=vals["dataset_size"], batch_size=vals["batch_size"],
                        drop_last=vals["drop_last"], steps_per_epoch=vals["steps_per_epoch"],
                        physical_batch_size=vals["physical_batch_size"],
                        accumulation_steps=vals["accumulation_steps"])
    vals["sampling_rate"], vals["steps"] = shape.sampling_rate, shape.steps


def _check_sampling(path: str, value) -> None:
    """A spec entry's ``sampling`` must be Poisson (any spelling pld.dpsgd accepts)."""
    try:  # (the same spellings and aliases as pld.dpsgd and the command line)
        sampling = sampling_scheme(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{path}.sampling: " + str(exc).removeprefix("sampling ")) from None
    scheme = sampling_registry.get(sampling)
    if scheme.adjacency != adjacency.ADD_OR_REMOVE or not scheme.per_step:
        # a spec composes its entries under add-or-remove adjacency, step by step
        relation = scheme.adjacency.replace("_", "-")
        raise SpecError(f"{path}.sampling: {scheme.name!r} ({relation} neighbouring) cannot be "
                        "composed in a spec, whose entries are accounted under add-or-remove "
                        f"neighbouring; account it with pld dpsgd --sampling {scheme.name} or "
                        f"pld.dpsgd(..., sampling={scheme.name!r})")


def _build(path: str, kind: str, vals: dict):
    """``(mechanism, description)`` of one of the plain mechanism types."""
    if kind == "gaussian":
        return (M.Gaussian(vals["sigma"], vals["sensitivity"]),
                f"Gaussian(sigma={vals['sigma']:g}, sensitivity={vals['sensitivity']:g})")
    if kind == "laplace":
        return (M.Laplace(vals["scale"], vals["sensitivity"]),
                f"Laplace(scale={vals['scale']:g}, sensitivity={vals['sensitivity']:g})")
    if kind == "randomized_response":
        return M.RandomizedResponse(vals["epsilon"]), f"RandomizedResponse(epsilon={vals['epsilon']:g})"
    if kind == "discrete_laplace":
        return (M.DiscreteLaplace(vals["scale"], vals["sensitivity"]),
                f"DiscreteLaplace(scale={vals['scale']:g}, sensitivity={vals['sensitivity']})")
    if kind == "discrete_gaussian":
        return (M.DiscreteGaussian(vals["sigma"], vals["sensitivity"]),
                f"DiscreteGaussian(sigma={vals['sigma']:g}, sensitivity={vals['sensitivity']})")
    if kind == "pure_dp":
        return M.PureDP(vals["epsilon"]), f"PureDP(epsilon={vals['epsilon']:g})"
    if kind == "approx_dp":
        return (M.ApproxDP(vals["epsilon"], vals["delta"]),
                f"ApproxDP(epsilon={vals['epsilon']:g}, delta={vals['delta']:g})")
    # pmfs
    if len(vals["p"]) != len(vals["q"]):
        raise SpecError(f"{path}.q: must have the same length as p ({len(vals['p'])}), "
                        f"got {len(vals['q'])}")
    return M.FromPMFs(vals["p"], vals["q"]), f"FromPMFs({len(vals['p'])} outcomes)"


def _matrix_or_user(kind: str, vals: dict, count: int):
    """Components and description of a user-level DP-SGD run, a BandMF run or an MMCC bound."""
    from pld.accounting.matrix import bandmf, mmcc
    from pld.mechanisms.user_level import example_level_user_step

    sigma, q, steps = vals["noise_multiplier"], vals["sampling_rate"], vals["steps"]
    if kind == "dpsgd":
        mech = example_level_user_step(sigma, q, vals["records_per_user"])
        return ([(mech, steps * count)], f"DP-SGD step, {vals['records_per_user']} records per user "
                f"(sigma={sigma:g}, Poisson q={q:g}) x {steps * count}")
    if kind == "bandmf":
        run = bandmf(sigma, q, steps, bands=vals["bands"], strategy=vals["strategy"])
        desc = f"BandMF run (sigma={sigma:g}, q={q:g}, {steps} steps, {vals['bands']} bands)"
    else:
        run = mmcc(vals["strategy"], sigma, q, steps=steps, gradients=vals["gradients"])
        desc = f"MMCC bound (sigma={sigma:g}, q={q:g}, {steps} steps, {vals['gradients']} gradients)"
    return [(m, k * count) for m, k in run.components], f"{desc} x {count}"


def _saved(path: str, file: str, count: int, base_dir: str | None):
    full = file if os.path.isabs(file) or base_dir is None else os.path.join(base_dir, file)
    try:
        saved = load(full)
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}.path: {exc}") from None
    comps = [(m, k * count) for m, k in saved.components]
    return comps, f"saved PLD {file} ({saved.steps} steps) x {count}"


def parse_spec(data, *, base_dir: str | None = None) -> Spec:
    """Build a :class:`Spec` from an already-decoded JSON/TOML document."""
    if not isinstance(data, dict):
        raise SpecError(f"spec: the top level must be a table/object, got {_fmt(data)}")
    _unknown("", data, _TOP)
    components: list = []
    entries: list = []

    mechs = data.get("mechanisms", [])
    if not isinstance(mechs, list):
        raise SpecError(f"mechanisms: must be a list of mechanisms, got {_fmt(mechs)}")
    for i, m in enumerate(mechs):
        comps, desc = _mechanism(f"mechanisms[{i}]", m, base_dir)
        components += comps
        entries.append((f"mechanisms[{i}]", desc))

    phases = data.get("phases", [])
    if not isinstance(phases, list):
        raise SpecError(f"phases: must be a list of phases, got {_fmt(phases)}")
    for j, ph in enumerate(phases):
        pp = f"phases[{j}]"
        if not isinstance(ph, dict):
            raise SpecError(f"{pp}: must be a table/object with a mechanisms list, got {_fmt(ph)}")
        _unknown(pp, ph, _PHASE)
        if "name" in ph and not isinstance(ph["name"], str):
            raise SpecError(f"{pp}.name: must be a string, got {_fmt(ph['name'])}")
        repeat = _integer(f"{pp}.repeat", ph["repeat"]) if "repeat" in ph else 1
        pm = ph.get("mechanisms")
        if not isinstance(pm, list) or not pm:
            raise SpecError(f"{pp}.mechanisms: must be a non-empty list of mechanisms")
        label = ph.get("name", pp)
        for i, m in enumerate(pm):
            comps, desc = _mechanism(f"{pp}.mechanisms[{i}]", m, base_dir)
            components += [(mm, k * repeat) for mm, k in comps]
            entries.append((f"{pp}.mechanisms[{i}]", f"{desc}" + (f" x {repeat} ({label})" if repeat > 1 else
                                                                    f" ({label})")))

    if not components:
        raise SpecError("mechanisms: the spec describes no mechanism (give 'mechanisms' and/or 'phases')")
    runs = _integer("runs", data["runs"]) if "runs" in data else 1
    deltas = _numbers("delta", data["delta"], "open01") if "delta" in data else [1e-5]
    epsilons = []
    if "epsilon" in data:
        eps = data["epsilon"]
        eps_list = eps if isinstance(eps, list) else [eps]
        if isinstance(eps, list) and not eps:
            raise SpecError("epsilon: must be a number or a non-empty list of numbers")
        for i, e in enumerate(eps_list):
            p = f"epsilon[{i}]" if isinstance(eps, list) else "epsilon"
            if not _is_number(e) or not math.isfinite(float(e)):
                raise SpecError(f"{p}: must be a finite number, got {_fmt(e)}")
            epsilons.append(float(e))
    h = None
    if "value_discretization_interval" in data:
        h = _number("value_discretization_interval", data["value_discretization_interval"], "pos")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise SpecError(f"name: must be a string, got {_fmt(name)}")
    total = sum(k for _, k in components) * runs
    if total > _MAX_COUNT:
        raise SpecError(f"runs: the spec composes {total} mechanism runs, above the limit of {_MAX_COUNT}")
    pld_obj = PLD([(m, k * runs) for m, k in components], value_discretization_interval=h)
    return Spec(pld=pld_obj, deltas=deltas, epsilons=epsilons, runs=runs, name=name, entries=entries)


def read_document(path: str):
    """Decode a JSON or TOML file (by extension; otherwise JSON, then TOML)."""
    import tomllib  # here, not at the top: Python 3.10 (supported) has no tomllib, and JSON specs need none

    with open(path, "rb") as f:
        raw = f.read()
    ext = os.path.splitext(path)[1].lower()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (expected JSON or TOML in UTF-8)") from None

    def as_json():
        try:
            return json.loads(text, parse_constant=_bad_constant)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None

    def as_toml():
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: invalid TOML: {exc}") from None

    if ext == ".json":
        return as_json()
    if ext == ".toml":
        return as_toml()
    try:
        return as_json()
    except SpecError:
        try:
            return as_toml()
        except SpecError:
            raise SpecError(f"{path}: neither valid JSON nor valid TOML") from None


def _bad_constant(name: str):
    raise SpecError(f"spec: {name} is not allowed (numbers must be finite)")


def load_spec(path: str) -> Spec:
    """Read and validate a spec file; raise :class:`SpecError` naming the bad field."""
    data = read_document(path)
    return parse_spec(data, base_dir=os.path.dirname(os.path.abspath(path)))
