"""The privacy cost of a hyper-parameter search, next to the chosen run's.

Every training run of a search on the same data spends privacy budget.  Two
ways to state what the whole search cost:

1. **Composition** (always valid): the search released (or could have
   released) every run, so its cost is the composition of all runs' PLDs, any
   mix of settings; certified by pld like any composition.
2. **Private selection** (Papernot & Steinke, "Hyperparameter tuning with
   Renyi differential privacy", ICLR 2022, arXiv:2110.03620): if the number
   of trials ``K`` is itself random, drawn from a known distribution, each
   trial runs one candidate (chosen independently of the data) and only the
   best trial is released, the cost is far below the composition.  Two
   distributions, each with the theorem of that paper (numbered as in
   arXiv:2110.03620v2 / the ICLR version):

   * truncated negative binomial ``D_{eta, gamma}`` (Theorem 2): for
     ``eta > -1``, ``gamma in (0, 1)``,
     ``P[K = k] = (1 - gamma)^k / (gamma^-eta - 1) * prod_{l=0}^{k-1} (l + eta) / (l + 1)``
     (``eta = 0``: the logarithmic law ``(1 - gamma)^k / (k log(1/gamma))``;
     ``eta = 1``: geometric).  If one trial ``Q`` is ``(lambda, eps(lambda))``-RDP
     for all orders, the selection ``A`` is ``(lambda, eps')``-RDP with

     ``eps' = eps(lambda) + (1 + eta)(1 - 1/lhat) eps(lhat) + (1 + eta) log(1/gamma)/lhat + log(E[K])/(lambda - 1)``

     for every ``lhat >= 1``, and ``E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta))``
     (``eta = 0``: ``(1/gamma - 1)/log(1/gamma)``).
   * Poisson ``K ~ Poisson(mu)`` (Theorem 6): if ``Q`` is ``(lambda, eps(lambda))``-RDP
     and ``(epshat, deltahat)``-DP with ``exp(epshat) <= 1 + 1/(lambda - 1)``,
     ``A`` is ``(lambda, eps(lambda) + mu * deltahat + log(mu)/(lambda - 1))``-RDP.
     (``K = 0`` outputs nothing, as in the paper.)

   The RDP curve of a DP-SGD trial is :func:`pld.baselines.rdp.rdp_subsampled_gaussian`
   times its steps (Mironov, Talwar & Zhang 2019; Poisson sampling, add-or-
   remove neighbours), ``deltahat`` is pld's certified delta at ``epshat``
   (the upper end of its bracket), and the selection's RDP curve is turned into
   ``(epsilon, delta)`` by :func:`pld.baselines.rdp.epsilon_from_rdp` (Canonne, Kamath &
   Steinke 2020, Prop. 12).  With several candidates, one trial draws one of
   them independently of the data; its RDP at each order is at most the largest
   candidate's (Renyi divergence is jointly quasi-convex: van Erven &
   Harremoës 2014, Thm. 13) and its ``delta(eps)`` at most the largest
   candidate's (the hockey-stick divergence is jointly convex), which is what
   is used here.

Every step rounds toward a larger epsilon: any ``lhat`` gives a valid bound (the
grid's best is used), conversions are upper bounds, ``deltahat`` is a
certified upper end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pld import _validate as v

__all__ = ["TruncatedNegativeBinomial", "PoissonTrials", "search_cost", "selection_epsilon",
           "selection_rdp", "format_search_cost"]


@dataclass(frozen=True)
class TruncatedNegativeBinomial:
    """Number of trials ``K ~ D_{eta, gamma}`` (Papernot & Steinke 2022, Sec. 3).

    ``eta = 1`` is the geometric law ``P[K = k] = gamma (1 - gamma)^(k - 1)``;
    ``eta = 0`` the logarithmic law.
    """

    eta: float
    gamma: float

    def __post_init__(self):
        v.real("eta", self.eta, low=-1.0, low_open=True)
        v.real("gamma", self.gamma, low=0.0, high=1.0, low_open=True, high_open=True)

    @property
    def name(self) -> str:
        return "truncated_negative_binomial"

    def mean(self) -> float:
        """``E[K]``."""
        eta, g = float(self.eta), float(self.gamma)
        if eta == 0.0:
            return (1.0 / g - 1.0) / math.log(1.0 / g)
        return eta * (1.0 - g) / (g * -math.expm1(eta * math.log(g)))

    def pmf(self, k: int) -> float:
        """``P[K = k]`` for ``k >= 1``."""
        k = v.integer("k", k, low=1)
        eta, g = float(self.eta), float(self.gamma)
        if eta == 0.0:
            return (1.0 - g) ** k / (k * math.log(1.0 / g))
        prod = 1.0
        for l in range(k):  # (for eta < 0 the first factor and the normaliser are both negative)
            prod *= (l + eta) / (l + 1)
        return (1.0 - g) ** k * prod / math.expm1(-eta * math.log(g))

    def describe(self) -> dict:
        return {"distribution": self.name, "eta": float(self.eta), "gamma": float(self.gamma),
                "expected_trials": self.mean(), "theorem": "Papernot & Steinke (ICLR 2022), Theorem 2"}


@dataclass(frozen=True)
class PoissonTrials:
    """Number of trials ``K ~ Poisson(mu)`` (Papernot & Steinke 2022, Theorem 6)."""

    mu: float

    def __post_init__(self):
        v.real("mu", self.mu, low=0.0, low_open=True)

    @property
    def name(self) -> str:
        return "poisson"

    def mean(self) -> float:
        return float(self.mu)

    def describe(self) -> dict:
        return {"distribution": self.name, "mu": float(self.mu), "expected_trials": float(self.mu),
                "theorem": "Papernot & Steinke (ICLR 2022), Theorem 6"}


# ------------------------------------------------------------------ runs
def _run_config(run, where: str) -> dict:
    """A normalized DP-SGD/spec configuration from a config, a sweep row or a PLD."""
    from pld.accounting.sweep_work import COLUMNS, normalize

    if not isinstance(run, Mapping):
        raise TypeError(f"{where} must be a configuration mapping, a sweep row or a pld.PLD, "
                        f"got {type(run).__name__}")
    if "kind" in run and "index" in run:  # a sweep row: its configuration, solved values included
        if run.get("error") is not None:
            raise ValueError(f"{where}: this row failed ({run['error']}); its run cannot be accounted")
        keep = ("kind", "noise_multiplier", "sampling_rate", "steps", "epochs", "steps_per_epoch", "dataset_size",
                "batch_size", "drop_last", "sampling", "runs", "delta") if run["kind"] != "spec" else ("spec", "delta")
        run = {k: run[k] for k in keep if k in COLUMNS and run.get(k) is not None}
        if "spec" in run and isinstance(run["spec"], str) and run["spec"].lstrip().startswith("{"):
            import json

            run["spec"] = json.loads(run["spec"])
    c = normalize(run, where)
    if c["kind"] == "calibrate":
        raise ValueError(f"{where}: a calibration is not a run; pass its sweep row (with the solved value)")
    return c


def _run_pld(run, where: str):
    from pld.distribution import PLD

    if isinstance(run, PLD):
        return run, None
    c = _run_config(run, where)
    if c["kind"] == "spec":
        import os

        from pld.accounting.spec import load_spec, parse_spec

        spec = load_spec(c["spec"]) if isinstance(c["spec"], str) else parse_spec(c["spec"], base_dir=os.getcwd())
        return spec.pld, c
    import pld
    from pld.accounting.sweep_work import run_kwargs

    d = pld.dpsgd(c["noise_multiplier"], **run_kwargs(c))
    return (d.self_compose(c["runs"]) if c["runs"] > 1 else d), c


def _compose(plds: list):
    """One PLD of all runs; identical runs are counted, not repeated."""
    groups: dict = {}
    for d in plds:
        key = (d.components, d.value_discretization_interval)
        groups[key] = (d, groups.get(key, (d, 0))[1] + 1)
    total = None
    for d, count in groups.values():
        part = d if count == 1 else d.self_compose(count)
        total = part if total is None else total.compose(part)
    return total


# ------------------------------------------------------------- selection
def _candidate_rdp(configs: list, orders: np.ndarray) -> np.ndarray:
    """Largest RDP over the candidates at every order (one trial picks one)."""
    from pld.baselines.rdp import rdp_gaussian, rdp_subsampled_gaussian

    worst = np.zeros_like(orders)
    for i, c in enumerate(configs):
        if c is None or c["kind"] != "dpsgd":
            raise ValueError(f"runs[{i}]: the selection bound needs DP-SGD runs (an RDP curve); got a "
                             f"{'PLD' if c is None else c['kind']}")
        if c["sampling"] != "poisson":
            raise ValueError(f"runs[{i}]: the selection bound uses the RDP of Poisson-sampled DP-SGD; "
                             f"sampling={c['sampling']!r} has none in pld.baselines.rdp")
        sigma, q = c["noise_multiplier"], c["sampling_rate"]
        per_step = rdp_gaussian(orders, sigma) if q == 1.0 else rdp_subsampled_gaussian(orders, sigma, q)
        worst = np.maximum(worst, c["steps"] * c["runs"] * np.asarray(per_step, dtype=float))
    return worst


def selection_rdp(rdp: np.ndarray, orders: np.ndarray, trials, *, delta_hat=None) -> np.ndarray:
    """RDP curve of the best of ``K`` trials (Papernot & Steinke 2022).

    Parameters
    ----------
    rdp : array
        One trial's RDP at ``orders`` (all > 1).
    orders : array
        Orders ``lambda``, also the grid of ``lhat`` for Theorem 2.
    trials : TruncatedNegativeBinomial or PoissonTrials
    delta_hat : array, optional
        For Poisson trials: one trial's delta at ``epshat = log(1 + 1/(lambda - 1))``
        per order (an upper bound).

    Returns
    -------
    array
        ``eps'(lambda)`` per order (clipped at 0: a Renyi divergence is >= 0).
    """
    rdp = np.asarray(rdp, dtype=float)
    orders = np.asarray(orders, dtype=float)
    log_mean = math.log(trials.mean())
    if isinstance(trials, TruncatedNegativeBinomial):
        a = 1.0 + float(trials.eta)
        log_inv_gamma = -math.log(float(trials.gamma))
        # any lhat >= 1 is valid: the best of the grid, and lhat = 1 where the
        # first term vanishes (a finite KL divergence times 1 - 1/1 = 0)
        hat = a * (1.0 - 1.0 / orders) * rdp + a * log_inv_gamma / orders
        best_hat = min(float(np.min(hat)), a * log_inv_gamma)
        out = rdp + best_hat + log_mean / (orders - 1.0)
    elif isinstance(trials, PoissonTrials):
        if delta_hat is None:
            raise ValueError("Poisson trials need delta_hat (the trial's delta at epshat per order)")
        out = rdp + float(trials.mu) * np.asarray(delta_hat, dtype=float) + log_mean / (orders - 1.0)
    else:
        raise TypeError(f"trials must be TruncatedNegativeBinomial or PoissonTrials, got {type(trials).__name__}")
    return np.maximum(out, 0.0)


def selection_epsilon(runs: Sequence, delta: float, trials, *, orders=None) -> dict:
    """Certified (epsilon, delta) of releasing the best of ``K`` random trials.

    Parameters
    ----------
    runs : sequence
        The candidate DP-SGD runs (configurations or sweep rows; Poisson sampling).
        One trial runs one of them, chosen independently of the data.
    delta : float
        In ``(0, 1)``.
    trials : TruncatedNegativeBinomial or PoissonTrials
        The law of the number of trials.
    orders : array, optional
        Renyi orders (default :data:`pld.baselines.rdp.DEFAULT_ORDERS`); all > 1.

    Returns
    -------
    dict
        ``epsilon`` (an upper bound), ``order`` attaining it, the trials'
        description (theorem, expected trials) and ``conversion``.

    Raises
    ------
    TypeError, ValueError
        For a malformed run, a run that is not Poisson-sampled DP-SGD, or
        invalid orders.
    """
    from pld.baselines.rdp import DEFAULT_ORDERS, epsilon_from_rdp

    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if not runs:
        raise ValueError("runs must hold at least one candidate run")
    o = np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=float)
    if o.ndim != 1 or o.size == 0 or not np.all(o > 1.0) or not np.all(np.isfinite(o)):
        raise ValueError("orders must be a non-empty list of finite orders > 1")
    items = [_run_pld(r, f"runs[{i}]") for i, r in enumerate(runs)]
    rdp = _candidate_rdp([c for _, c in items], o)
    delta_hat = None
    if isinstance(trials, PoissonTrials):
        # the theorem needs exp(epshat) <= 1 + 1/(lambda - 1): a hair below the
        # boundary, so that rounding cannot cross it (a smaller epshat only
        # makes deltahat larger)
        eps_hat = np.log1p(1.0 / (o - 1.0)) * (1.0 - 1e-9)
        delta_hat = np.zeros_like(o)
        for d, _ in items:  # certified upper ends; the largest candidate's bounds the mixture
            delta_hat = np.maximum(delta_hat, np.asarray(d.delta_bounds(eps_hat)[1], dtype=float))
    curve = selection_rdp(rdp, o, trials, delta_hat=delta_hat)
    eps, order = epsilon_from_rdp(o, curve, delta)
    return {"epsilon": float(eps), "delta": delta, "order": float(order), **trials.describe(),
            "candidates": len(items),
            "conversion": "RDP to (epsilon, delta): Canonne, Kamath & Steinke 2020, Prop. 12 (pld.baselines.rdp)"}


# --------------------------------------------------------------- report
def search_cost(runs: Sequence, delta: float, *, chosen: int | None = None, trials=None,
                orders=None) -> dict:
    """What a search on the same data cost, next to what the chosen run cost.

    Parameters
    ----------
    runs : sequence
        Every run of the search: DP-SGD or spec configurations (as for
        :func:`pld.sweep`), rows of a sweep (solved values included), or
        :class:`pld.PLD` objects.  Any mix of settings.
    delta : float
        In ``(0, 1)``.
    chosen : int, optional
        Index in ``runs`` of the run that was kept.
    trials : TruncatedNegativeBinomial or PoissonTrials, optional
        If the number of trials was random with this law and only the best
        trial is released: also the private-selection bound of Papernot &
        Steinke 2022 over these runs as candidates (DP-SGD, Poisson sampling).
    orders : array-like, optional
        Renyi orders the selection bound is minimised over (default
        :data:`pld.baselines.rdp.DEFAULT_ORDERS`); all > 1.

    Returns
    -------
    dict
        ``search``: the certified bracket of the composition of all runs
        (``epsilon_lower``, ``epsilon_upper``); ``chosen``: the chosen run's
        bracket (or None); ``selection``: the selection bound (or None);
        ``runs``, ``delta``.

    Raises
    ------
    TypeError, ValueError
        For a malformed run (named as ``runs[i]``), ``chosen`` out of range, or
        a selection bound over runs without an RDP curve here.

    Examples
    --------
    >>> import pld
    >>> from pld.accounting.search import TruncatedNegativeBinomial
    >>> runs = [{"noise_multiplier": s, "sampling_rate": 0.01, "steps": 1000} for s in (0.9, 1.1, 1.3)]
    >>> cost = pld.search_cost(runs, 1e-5, chosen=1, trials=TruncatedNegativeBinomial(eta=1.0, gamma=0.2))
    >>> cost["chosen"]["epsilon_upper"] < cost["search"]["epsilon_lower"]   # the search cost more
    True
    >>> round(cost["selection"]["expected_trials"], 9)       # E[K] = 1/gamma (geometric)
    5.0
    """
    delta = v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if not runs:
        raise ValueError("runs must hold at least one run")
    items = [_run_pld(r, f"runs[{i}]") for i, r in enumerate(runs)]
    lo, hi = _compose([d for d, _ in items]).epsilon_bounds(delta)
    out = {"delta": delta, "runs": len(items),
           "search": {"epsilon_lower": float(lo), "epsilon_upper": float(hi),
                      "method": "composition of every run's PLD (certified)"},
           "chosen": None, "selection": None}
    if chosen is not None:
        chosen = v.integer("chosen", chosen, low=0, high=len(items) - 1)
        clo, chi = items[chosen][0].epsilon_bounds(delta)
        out["chosen"] = {"index": chosen, "epsilon_lower": float(clo), "epsilon_upper": float(chi)}
    if trials is not None:
        out["selection"] = selection_epsilon(runs, delta, trials, orders=orders)
    return out


def format_search_cost(r: dict) -> str:
    """Human lines for a :func:`search_cost` result."""
    s = r["search"]
    lines = [f"search cost ({r['runs']} runs on the same data, composed): epsilon in "
             f"[{s['epsilon_lower']:.6g}, {s['epsilon_upper']:.6g}] at delta={r['delta']:g}"]
    if r.get("chosen"):
        c = r["chosen"]
        lines.append(f"chosen run (row {c['index']}) alone: epsilon in [{c['epsilon_lower']:.6g}, "
                     f"{c['epsilon_upper']:.6g}] -- not the cost of the search")
    if r.get("selection"):
        sel = r["selection"]
        law = (f"truncated negative binomial eta={sel['eta']:g}, gamma={sel['gamma']:g}"
               if sel["distribution"] == "truncated_negative_binomial" else f"Poisson mu={sel['mu']:g}")
        lines.append(f"best of a random number of trials ({law}; E[K] = {sel['expected_trials']:.3g}): "
                     f"epsilon <= {sel['epsilon']:.6g} ({sel['theorem']}, RDP order {sel['order']:g})")
    return "\n".join(lines)
