"""Accounting reports: what a DP-SGD (or any composition) figure must state.

A reported epsilon means little without the settings that produced it, so a
report states the accountant, delta, sigma, q, T, the sampling method and
neighbouring relation, the sensitivity (clipping) convention, whether the
figure covers one run or several, the accountant's curve around the answer
(both certified bounds) and the numerical settings behind the certificate,
plus warnings for common mistakes.

:func:`account_dpsgd` computes a JSON-ready result dict; :func:`format_dpsgd`
turns it into text (:mod:`pld.report.text` holds the text of every report).
The CLI (``pld dpsgd``) is a thin layer over both.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from pld import __version__

# pld.report is not imported by pld/__init__, so the package (and __version__) is complete here
from pld.accounting import sampling as sampling_registry
from pld.accounting.loaders import RunShape, resolve_run, run_pld
from pld.accounting.sampling import SamplingScheme
from pld.baselines.curves import delta_curve
from pld.distribution import PLD, GridPair
from pld.engine.fft import fft_backend
from pld.report.rounding import bracket, round_down, round_up  # noqa: F401  (re-exported: report's former API)
from pld.report.text import (  # the text of the reports; re-exported
    SAMPLING_NAMES,
    curve_csv,
    curve_rows,
    footer,
    format_calibrate,
    format_compose,
    format_curve,
    format_dpsgd,
    format_epochs,
    headline,
    target_warning,
)

__all__ = [
    "ACCOUNTANT", "DPSGDConfig", "MNIST_EXAMPLE", "account_dpsgd", "dpsgd_pld", "dpsgd_warnings", "dpsgd_notes",
    "EpsilonQuery", "shuffle_bounds_of",
    "format_dpsgd", "account_compose", "format_compose", "format_calibrate", "format_curve",
    "curve_rows", "curve_csv", "delta_profile", "nice_epsilons", "neighbouring", "sensitivity_convention", "jsonable",
    "footer", "headline", "format_epochs", "SAMPLING_NAMES",
]

ACCOUNTANT = "pld: certified PLD, FFT composition"
#: target width of every epsilon bracket (see pld.engine.targets.EPS_RTOL / EPS_ATOL)
BRACKET_TARGET = "upper - lower <= 1e-4 * epsilon + 1e-6"
LARGE_EPSILON = 10.0


@dataclass(frozen=True)
class DPSGDConfig:
    """One DP-SGD accounting question (frozen: its run, ``shape``, is resolved once, when it is made)."""

    noise_multiplier: float
    sampling_rate: float
    steps: int
    delta: float
    sampling: str = "poisson"          # a scheme of pld.accounting.sampling
    participations: int | None = None  # random allocation: steps of an epoch each record joins
    runs: int = 1
    dataset_size: int | None = None
    batch_size: int | None = None
    epochs: float | None = None
    batch_size_given: bool = False     # --batch-size was passed explicitly
    sampling_rate_given: bool = False  # --sampling-rate was passed explicitly
    example: str | None = None         # name of the built-in example, when defaults were used
    shape: RunShape | None = None      # the run resolved from its loader (pld.accounting.loaders)

    def __post_init__(self) -> None:
        # (the run resolved once, when the question is made: everything after reads it)
        if self.shape is None and self.sampling_rate is not None and self.steps is not None:
            loader = self.batch_size is not None and self.dataset_size is not None
            shape = resolve_run(self.sampling, None if loader else self.sampling_rate, self.steps,
                                dataset_size=self.dataset_size if loader else None,
                                batch_size=self.batch_size if loader else None, participations=self.participations)
            object.__setattr__(self, "shape", shape)

    @property
    def total_steps(self) -> int:
        return self.steps * self.runs

    def run_shape(self) -> RunShape:
        """The run as the accountant composes it (:func:`pld.accounting.loaders.resolve_run`),
        resolved when the configuration was made."""
        if self.shape is None:
            raise ValueError("the run is not whole: give sampling_rate (or dataset_size and batch_size) and steps")
        return self.shape


#: the default ``pld dpsgd`` question: MNIST DP-SGD (Abadi et al. 2016 / TF Privacy tutorial
#: setting): 60 000 examples, expected batch 256 (Poisson), 60 epochs, sigma 1.1, delta 1e-5.
#: An epoch is the loader's ceil(60000 / 256) = 235 steps: T = 60 x 235 = 14100.
_MNIST_SHAPE = resolve_run("poisson", dataset_size=60000, batch_size=256, epochs=60.0)
MNIST_EXAMPLE = DPSGDConfig(noise_multiplier=1.1, sampling_rate=256 / 60000, steps=_MNIST_SHAPE.steps, delta=1e-5,
                            dataset_size=60000, batch_size=256, epochs=60.0,
                            example="MNIST DP-SGD: 60000 examples, expected batch 256, 60 epochs")


def neighbouring(sampling: str | SamplingScheme) -> str:
    """The report's neighbouring line for a sampling scheme (:mod:`pld.accounting.sampling`)."""
    return sampling_registry.get(sampling).neighbouring


def _sensitivity_text(scheme: SamplingScheme) -> str:
    text = ("noise multiplier sigma = noise standard deviation / L2 sensitivity; in DP-SGD the "
            "L2 sensitivity is the per-example clipping norm C (noise std = sigma * C on the sum "
            "of clipped gradients); C itself is not a privacy parameter")
    note = scheme.sensitivity_note
    return text + ("; " + note if note else "")


def sensitivity_convention(sampling: str | SamplingScheme) -> str:
    """The report's line on what sigma is relative to, for a sampling scheme."""
    return _sensitivity_text(sampling_registry.get(sampling))


# ------------------------------------------------------------------ JSON
def jsonable(x):
    """Recursively convert numpy types, tuples and non-finite floats to JSON values."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return [jsonable(v) for v in x.tolist()]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if x is None or isinstance(x, str):
        return x
    return str(x)


# ----------------------------------------------------------------- query
@dataclass(frozen=True)
class EpsilonQuery:
    """One certified epsilon query of a PLD, made once and read by every part of a report.

    ``explained`` is :meth:`pld.PLD.explain` at ``delta`` (the bracket, each direction's
    numbers, whether the target was met); ``grids`` the grid pair of each direction behind
    it (:meth:`pld.PLD.grids`).  The delta(epsilon) curve and the attack line read these
    grids instead of asking the PLD for them again.
    """

    pld: PLD
    delta: float
    explained: dict
    grids: dict[str, GridPair]

    @classmethod
    def run(cls, pld_obj: PLD, delta: float) -> EpsilonQuery:
        """The query at ``delta`` (the grids are the ones :meth:`pld.PLD.explain` built: read, not rebuilt)."""
        return cls(pld_obj, delta, pld_obj.explain(delta), pld_obj.grids(delta))


# ---------------------------------------------------------------- curves
def _nice_step(x: float) -> float:
    if not x > 0 or not math.isfinite(x):
        return 0.25
    e = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10**e >= x * 0.999:
            return m * 10**e
    return 10 ** (e + 1)  # pragma: no cover


def nice_epsilons(center: float, points: int = 4) -> list[float]:
    """``points`` round epsilon values bracketing ``center`` (spacing about center/8)."""
    if points <= 0:
        return []
    step = _nice_step(max(center, 1e-3) / 8)
    base = math.floor(center / step)
    first = base - (points - 1) // 2
    if first < 0:
        first = 0
    return [round((first + i) * step, 12) for i in range(points)]


#: a one-grid delta bracket wider than this (relative to its upper end) is re-tuned
RETUNE_WIDTH = 0.01


def delta_profile(pld_obj, epsilons, delta: float, *, tuned: bool | str = "auto",
                  grids: dict[str, GridPair] | None = None):
    """Certified ``(delta_lower, delta_upper, method)`` at ``epsilons``.

    ``tuned="auto"`` (default) reads the whole curve off the grid pair the
    engine built for the query ``delta`` (:func:`pld.baselines.curves.delta_curve`: no
    extra composition, tightest near ``epsilon(delta)``) and re-tunes only
    the epsilons where that bracket is wider than 1% of its upper end (far in
    the tail, where the grid's round-off floor would show a flat upper bound
    many times too high) with :meth:`pld.PLD.delta_bounds`; both brackets are
    certified, so their intersection is.  ``tuned=True`` tunes every epsilon
    (slower), ``tuned=False`` none (the method says so).  ``grids``: the grid pairs of
    that query when already at hand (:attr:`EpsilonQuery.grids`).
    """
    eps = np.asarray(epsilons, dtype=float)
    if tuned is True:
        lo, hi = pld_obj.delta_bounds(eps)
        return np.asarray(lo, float), np.asarray(hi, float), "grids tuned per epsilon (PLD.delta_bounds)"
    lo, hi = delta_curve(pld_obj, eps, delta=delta, grids=grids)
    lo, hi = np.array(lo, float, ndmin=1), np.array(hi, float, ndmin=1)
    method = f"one grid pair tuned at delta = {delta:g} (pld.baselines.curves.delta_curve)"
    with np.errstate(divide="ignore", invalid="ignore"):
        wide = np.flatnonzero(np.where(hi > 0, (hi - lo) / hi, 0.0) > RETUNE_WIDTH)
    if tuned == "auto" and wide.size:
        t_lo, t_hi = pld_obj.delta_bounds(eps.reshape(-1)[wide])
        lo[wide] = np.maximum(lo[wide], t_lo)
        hi[wide] = np.minimum(hi[wide], t_hi)
        method += (f"; {wide.size} epsilon{'s' if wide.size > 1 else ''} where that bracket was wider than "
                   f"{RETUNE_WIDTH:.0%} re-tuned (PLD.delta_bounds)")
    elif wide.size:
        method += (f"; {wide.size} bracket{'s' if wide.size > 1 else ''} wider than {RETUNE_WIDTH:.0%} "
                   "(far from epsilon(delta): --tuned narrows them)")
    return lo.reshape(eps.shape), hi.reshape(eps.shape), method


# ----------------------------------------------------------------- dpsgd
def dpsgd_pld(cfg: DPSGDConfig, shape: RunShape | None = None):
    """The PLD of the configured run(s): the run (:func:`pld.dpsgd`) composed ``runs`` times
    (``shape``: the run as :meth:`DPSGDConfig.run_shape` resolves it, when already known)."""
    d = run_pld(cfg.noise_multiplier, cfg.run_shape() if shape is None else shape)
    if cfg.runs > 1:
        d = d.self_compose(cfg.runs)
    return d


def dpsgd_warnings(cfg: DPSGDConfig, epsilon_upper: float | None,
                   scheme: SamplingScheme | None = None) -> list[str]:
    """The run's warnings (``scheme``: ``cfg.sampling`` resolved, when already known)."""
    scheme = sampling_registry.get(cfg.sampling) if scheme is None else scheme
    w = []
    if cfg.dataset_size and cfg.delta >= 1.0 / cfg.dataset_size:
        w.append(f"delta = {cfg.delta:g} is not below 1/dataset size = 1/{cfg.dataset_size} = "
                 f"{1.0 / cfg.dataset_size:.3g}: releasing one whole random record meets this delta; "
                 f"choose delta well below 1/n (e.g. {_nice_delta(cfg.dataset_size)})")
    if cfg.sampling_rate_given and cfg.sampling_rate == 1.0:
        w.append("q = 1 is full-batch training (every record in every step); if you meant 1%, "
                 "give --sampling-rate 0.01")
    if cfg.batch_size_given and scheme.batch_size_warning:
        w.append(scheme.batch_size_warning)
    if epsilon_upper is not None and (epsilon_upper > LARGE_EPSILON or not math.isfinite(epsilon_upper)):
        w.append(f"epsilon = {epsilon_upper:.4g} > {LARGE_EPSILON:g}: a very weak guarantee "
                 f"(likelihood ratios up to e^epsilon = {_exp_text(epsilon_upper)}); check sigma, q and T")
    return w


def dpsgd_notes(cfg: DPSGDConfig, scheme: SamplingScheme | None = None) -> list[str]:
    """What the figure does not cover, for stderr and the JSON (the scheme's caveat)."""
    scheme = sampling_registry.get(cfg.sampling) if scheme is None else scheme
    if scheme.name == "shuffle":  # (its report says it in its own rows)
        return []
    if cfg.batch_size_given and scheme.batch_size_warning:  # (the warning says it)
        return []
    return [scheme.caveat] if scheme.caveat else []


def shuffle_bounds_of(cfg: DPSGDConfig, shape: RunShape, **options):
    """:func:`pld.accounting.shuffle.shuffle_bounds` of a configured shuffling run (``options``
    passed on: ``alternatives``, ``random_allocation``, ``rtol``)."""
    from pld.accounting.shuffle import shuffle_bounds

    loader = shape.steps_per_epoch_source in ("ceil", "floor")
    # (drop_last's chance that a record sits out an epoch needs both sizes, even where the
    # steps per epoch were given: without it the lower ends would assume every record in)
    sizes = loader or shape.drop_last
    return shuffle_bounds(cfg.noise_multiplier, steps=shape.steps, delta=cfg.delta,
                          dataset_size=shape.dataset_size if sizes else None,
                          batch_size=shape.batch_size if sizes else None, drop_last=shape.drop_last,
                          steps_per_epoch=None if loader else shape.steps_per_epoch, runs=cfg.runs, **options)


def _shuffle_warnings(shuffled) -> list[str]:
    if shuffled is None:
        return []
    binding = next((c for c in shuffled.constructions if c.name == shuffled.binding), None)
    if binding is not None and not binding.target_met:
        return [f"the lower end's own bracket ({binding.name}) is wider than its target; the lower end is still "
                "certified"]
    return []


def _exp_text(eps: float) -> str:
    if not math.isfinite(eps) or eps > 700:
        return "overflow"
    return f"{math.exp(eps):.3g}"


def _nice_delta(n: int) -> str:
    return f"1e-{max(1, math.ceil(math.log10(n)) + 1)}"


def _numerics(explained: dict) -> dict:
    out: dict = {"bracket_target": BRACKET_TARGET, "fft": fft_backend(), "directions": {}}
    for d, info in (explained.get("directions") or {}).items():
        out["directions"][d] = {k: v for k, v in info.items()}
    if explained.get("big_jump_decomposition"):
        # the remove direction's bracket came from its large steps split off
        # (pld.engine.big_jumps): the grids above describe the whole-law grids only
        out["method"] = explained.get("method")
        out["big_jump_decomposition"] = explained["big_jump_decomposition"]
    return out


def account_dpsgd(cfg: DPSGDConfig, *, curve_points: int = 4, curve_epsilons=None, pld_obj=None,
                  tuned_curve: bool | str = "auto") -> dict:
    """Account ``cfg`` and return a JSON-ready result (see the module docstring).

    ``curve_points`` round epsilons around the answer are queried for the
    accountant's curve (0: none); ``curve_epsilons`` gives them explicitly.
    """
    t0 = time.perf_counter()
    # (the run and its scheme resolved once, and handed to everything below)
    shape = cfg.run_shape()
    scheme = shape.scheme
    d = pld_obj if pld_obj is not None else dpsgd_pld(cfg, shape)
    query = shuffled = None
    if shape.sampling == "shuffle":
        # (not tight by construction: the upper end from its closed form, the lower end the best
        # published construction; pld.accounting.shuffle)
        shuffled = shuffle_bounds_of(cfg, shape)
        explained = {"epsilon_lower": shuffled.epsilon_lower, "epsilon_upper": shuffled.epsilon_upper,
                     "directions": {}, "target_met": True}
    else:
        # (the one engine query: the curve and the attack line below read its grids)
        query = EpsilonQuery.run(d, cfg.delta)
        explained = query.explained
    lo, hi = float(explained["epsilon_lower"]), float(explained["epsilon_upper"])
    t_eps = time.perf_counter() - t0
    if curve_epsilons is None:
        curve_epsilons = nice_epsilons(hi, curve_points) if math.isfinite(hi) else []
    rows = []
    method = None
    if len(curve_epsilons) and query is not None:
        dl, dh, method = delta_profile(d, curve_epsilons, cfg.delta, tuned=tuned_curve, grids=query.grids)
        rows = curve_rows(curve_epsilons, dl, dh)
    # delta at the reported epsilon, from explain (no extra work)
    at = [v.get("delta_at_epsilon_upper") for v in explained.get("directions", {}).values()]
    at = [a for a in at if a is not None]
    if at:
        rows.append({"epsilon": hi, "delta_lower": max(float(a[0]) for a in at),
                     "delta_upper": max(float(a[1]) for a in at)})
        rows.sort(key=lambda r: r["epsilon"])
    seconds = time.perf_counter() - t0
    numerics = _numerics(explained)
    res = {
        "command": "dpsgd",
        "epsilon_lower": lo,
        "epsilon_upper": hi,
        "epsilon": hi,
        "delta": cfg.delta,
        "noise_multiplier": cfg.noise_multiplier,
        "sampling_rate": cfg.sampling_rate,
        "steps": cfg.steps,
        "runs": cfg.runs,
        "total_steps": cfg.total_steps,
        "covers": "one training run" if cfg.runs == 1 else f"{cfg.runs} training runs (composed)",
        "sampling": cfg.sampling,
        "neighbouring": scheme.neighbouring,
        "sensitivity_convention": _sensitivity_text(scheme),
        "accountant": ACCOUNTANT,
        "dataset_size": cfg.dataset_size,
        "batch_size": cfg.batch_size,
        "epochs": cfg.epochs,
        "steps_per_epoch": shape.steps_per_epoch,
        "steps_per_epoch_source": shape.steps_per_epoch_source or None,
        "drop_last": shape.drop_last,
        "physical_batch_size": shape.physical_batch_size,
        "accumulation_steps": shape.accumulation_steps,
        "short_batch": shape.short_batch,
        "loader": shape.loader_text() or None,
        "example": cfg.example,
        "curve": rows,
        "curve_method": method,
        "numerics": numerics,
        "target_met": bool(explained.get("target_met", True)),
        "target_missed_because": explained.get("target_missed_because"),
        "warnings": target_warning(explained) + dpsgd_warnings(cfg, hi, scheme) + _shuffle_warnings(shuffled),
        "notes": dpsgd_notes(cfg, scheme),
        "seconds": seconds,
        "seconds_epsilon": t_eps,
        "pld_version": __version__,
    }
    if shuffled is not None:
        res["shuffle"] = shuffled.as_dict()
        numerics["method"] = ("upper end: the Gaussian mechanism's closed form; lower end: each construction's "
                                     "own certified query (its dominated side)")
    from pld.report.risk import report_summary  # (issue 40: the best attack's TPR at 1% FPR, same grids)

    res["attack"] = report_summary(d, cfg.delta, grids=None if query is None else query.grids)
    return res


# --------------------------------------------------------------- compose
def account_compose(spec, *, deltas=None, epsilons=None, tuned_curve: bool | str = "auto") -> dict:
    """Result dict for a parsed :class:`pld.accounting.spec.Spec`."""
    t0 = time.perf_counter()
    d = spec.pld
    deltas = list(spec.deltas if deltas is None else deltas)
    epsilons = list(spec.epsilons if epsilons is None else epsilons)
    queries = []
    numerics = None
    for i, dl in enumerate(deltas):
        ex = d.explain(dl)
        if i == 0:
            numerics = _numerics(ex)
        queries.append({"delta": float(dl), "epsilon_lower": float(ex["epsilon_lower"]),
                        "epsilon_upper": float(ex["epsilon_upper"])})
    curve = []
    method = None
    if epsilons:
        lo, hi, method = delta_profile(d, epsilons, deltas[0], tuned=tuned_curve)
        curve = curve_rows(epsilons, lo, hi)
    eps_max = max((q["epsilon_upper"] for q in queries), default=None)
    warnings = []
    if eps_max is not None and eps_max > LARGE_EPSILON:
        warnings.append(f"epsilon = {eps_max:.4g} > {LARGE_EPSILON:g}: a very weak guarantee")
    if any(not m.symmetric for m, _ in d.components):
        neigh = "add-or-remove one record (both directions composed: remove and add)"
    else:
        neigh = "add-or-remove one record (symmetric mechanisms: one direction)"
    return {
        "command": "compose",
        "name": spec.name,
        "components": [{"entry": p, "description": desc} for p, desc in spec.entries],
        "mechanisms": [{"mechanism": repr(m), "count": int(k)} for m, k in d.components],
        "runs": spec.runs,
        "total_steps": int(d.steps),
        "covers": "one run" if spec.runs == 1 else f"{spec.runs} runs (composed)",
        "neighbouring": neigh,
        "accountant": ACCOUNTANT,
        "queries": queries,
        "epsilon_lower": queries[0]["epsilon_lower"] if queries else None,
        "epsilon_upper": queries[0]["epsilon_upper"] if queries else None,
        "delta": queries[0]["delta"] if queries else None,
        "curve": curve,
        "curve_method": method,
        "numerics": numerics,
        "warnings": warnings,
        "seconds": time.perf_counter() - t0,
        "pld_version": __version__,
    }


def config_dict(cfg: DPSGDConfig) -> dict:
    return asdict(cfg)
