"""The privacy-loss lab: one mechanism, several accountants, side by side.

:func:`lab` reproduces the seed lab (repeated Gaussian mechanism: ``k``
unit-sensitivity releases with noise ``sigma``) and puts the engine's certified
bracket next to the exact answer, the privacy-loss-tail check and the RDP
accountant; :func:`compare` runs a DP-SGD configuration through the same
accountants.  ``format_*`` render the results as text, :func:`plot_lab` as a
PNG (matplotlib, imported lazily).

For ``k`` Gaussian releases the privacy loss is exactly
``L ~ N(mu^2/2, mu^2)`` with ``mu = sqrt(k)/sigma`` (Balle & Wang, ICML 2018),
so every number of the lab has a closed form to check the engine against:

* exact epsilon: the analytic Gaussian profile
  ``delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``;
* tail epsilon: smallest eps with ``P(L > eps) <= delta``, a *sufficient*
  (not tight) check, since ``delta(eps) <= P(L > eps)``;
* RDP epsilon: ``min_alpha k alpha/(2 sigma^2) + log(1/delta)/(alpha - 1)``
  (Mironov 2017; the "classic" conversion the seed uses) and the improved
  conversion (Canonne, Kamath & Steinke 2020).

All results are plain dicts of Python scalars (JSON-serialisable).
"""

from __future__ import annotations

import math
import time

import numpy as np

from pld import _validate as _v
from pld.accounting import sampling as sampling_registry
from pld.accounting.dpsgd import dpsgd as _dpsgd
from pld.accounting.dpsgd import sampling_scheme
from pld.baselines import curves as _curves
from pld.baselines import exact as _exact
from pld.baselines import rdp as _rdp
from pld.baselines.peers import peer_epsilons
from pld.mechanisms import Gaussian, adjacency
from pld.report.rounding import bracket

__all__ = ["lab", "format_lab", "plot_lab", "compare", "format_compare"]


def _sci(x: float, digits: int = 3) -> str:
    """``2.726e-5`` style: ``digits`` decimals, exponent without padding or ``+``."""
    if x is None:
        return "n/a"
    x = float(x)
    if x == 0.0:
        return "0"
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    mant, exp = f"{x:.{digits}e}".split("e")
    return f"{mant}e{int(exp)}"


def _num(x: float) -> str:
    """Compact number for parameters: ``8``, ``0.01``, ``1e-06`` -> ``1e-6``."""
    x = float(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        mant, exp = f"{x:g}".split("e")
        return f"{mant}e{int(exp)}"
    return f"{x:g}"


# ---------------------------------------------------------------------------
# the seed lab
# ---------------------------------------------------------------------------


def lab(sigma: float = 8.0, steps: int = 120, delta: float = 1e-6, probe_epsilon: float = 6.0) -> dict:
    """Seed lab: ``steps`` unit-sensitivity Gaussian releases with noise ``sigma``.

    Parameters
    ----------
    sigma : float, default 8.0
        Noise standard deviation (sensitivity 1).
    steps : int, default 120
        Number of releases ``k``.
    delta : float, default 1e-6
        Target delta for the reported epsilons.
    probe_epsilon : float, default 6.0
        Epsilon at which the deltas are compared.

    Returns
    -------
    dict
        ``sigma, steps, delta, probe_epsilon, mu``;
        ``exact_epsilon`` (analytic Gaussian), ``tail_epsilon`` (exact
        ``P(L > eps) <= delta``), ``rdp_epsilon`` (classic conversion) with
        ``rdp_order``, ``rdp_epsilon_improved`` with ``rdp_order_improved``;
        ``pld_epsilon_lower/upper`` (certified bracket);
        ``pld_tail_epsilon_lower/upper`` (certified bracket on the tail
        epsilon, :func:`pld.baselines.curves.tail_epsilon`);
        at the probe: ``exact_delta_at_probe``, ``tail_delta_at_probe``
        (``P(L > probe)``), ``pld_delta_at_probe_lower/upper``,
        ``pld_tail_delta_at_probe_lower/upper``, ``rdp_delta_at_probe``
        (classic) and ``rdp_delta_at_probe_improved``; ``seconds`` per method.
    """
    sigma = _v.real("sigma", sigma, low=0.0, low_open=True)
    steps = _v.integer("steps", steps, low=1)
    delta = _v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    probe = _v.real("probe_epsilon", probe_epsilon)
    out: dict = {"sigma": sigma, "steps": steps, "delta": delta, "probe_epsilon": probe}
    seconds: dict = {}

    t = time.perf_counter()
    mu = _exact.gaussian_mu(sigma, steps)
    out["mu"] = mu
    out["exact_epsilon"] = float(_exact.gaussian_epsilon(delta, mu))
    out["tail_epsilon"] = float(_exact.privacy_loss_tail_epsilon_gaussian(delta, mu))
    out["exact_delta_at_probe"] = float(_exact.gaussian_delta(probe, mu))
    out["tail_delta_at_probe"] = float(_exact.privacy_loss_tail_delta_gaussian(probe, mu))
    seconds["exact"] = time.perf_counter() - t

    t = time.perf_counter()
    curve = _rdp.RdpCurve.gaussian(sigma) * steps
    out["rdp_epsilon"], out["rdp_order"] = curve.epsilon(delta, "classic")
    out["rdp_epsilon_improved"], out["rdp_order_improved"] = curve.epsilon(delta, "improved")
    out["rdp_delta_at_probe"] = curve.delta(max(probe, 0.0), "classic")[0]
    out["rdp_delta_at_probe_improved"] = curve.delta(max(probe, 0.0), "improved")[0]
    seconds["rdp"] = time.perf_counter() - t

    t = time.perf_counter()
    d = Gaussian(sigma).pld().self_compose(steps)
    out["pld_epsilon_lower"], out["pld_epsilon_upper"] = d.epsilon_bounds(delta)
    out["pld_delta_at_probe_lower"], out["pld_delta_at_probe_upper"] = d.delta_bounds(probe)
    seconds["pld"] = time.perf_counter() - t

    t = time.perf_counter()
    out["pld_tail_epsilon_lower"], out["pld_tail_epsilon_upper"] = _curves.tail_epsilon(d, delta)
    out["pld_tail_delta_at_probe_lower"], out["pld_tail_delta_at_probe_upper"] = _curves.tail_delta(
        d, probe, delta=delta)
    seconds["pld_tail"] = time.perf_counter() - t

    out["seconds"] = seconds
    return {k: (float(v) if isinstance(v, (np.floating, np.integer)) and k != "steps" else v)
            for k, v in out.items()}


def format_lab(result: dict) -> str:
    """The seed table: exact, tail and RDP epsilon, the engine's bracket, deltas at the probe."""
    r = result
    probe = r["probe_epsilon"]
    target = r["delta"]
    mu = r.get("mu", math.sqrt(r["steps"]) / r["sigma"])
    lines = [
        f"Repeated Gaussian mechanism: k = {r['steps']} unit-sensitivity releases, "
        f"sigma = {_num(r['sigma'])}, delta = {_num(target)}",
        f"privacy loss L ~ N({mu * mu / 2:.4g}, {mu * mu:.4g})   (mu = sqrt(k)/sigma = {mu:.4f})",
        "",
        f"exact epsilon   {r['exact_epsilon']:.2f}   analytic Gaussian curve (Balle & Wang 2018)",
        f"tail epsilon    {r['tail_epsilon']:.2f}   smallest eps with P(L > eps) <= delta: sufficient, not tight",
        f"RDP epsilon     {r['rdp_epsilon']:.2f}   classic conversion, best order {r['rdp_order']:.2f}"
        f" (improved conversion: {r['rdp_epsilon_improved']:.2f})",
        f"pld epsilon     [{r['pld_epsilon_lower']:.4f}, {r['pld_epsilon_upper']:.4f}]"
        f"   certified bracket (exact {r['exact_epsilon']:.4f})",
    ]
    if "pld_tail_epsilon_lower" in r:
        lines.append(f"pld tail        [{r['pld_tail_epsilon_lower']:.3f}, {r['pld_tail_epsilon_upper']:.3f}]"
                     f"   certified bracket on the tail epsilon (exact {r['tail_epsilon']:.4f})")
    lines += [
        "",
        f"At the probe epsilon = {_num(probe)}:",
        f"exact delta     {_sci(r['exact_delta_at_probe'])}",
        f"tail            {_sci(r['tail_delta_at_probe'])}   P(L > {_num(probe)})",
        f"pld delta       [{_sci(r['pld_delta_at_probe_lower'])}, {_sci(r['pld_delta_at_probe_upper'])}]"
        f"   certified bracket",
    ]
    if "rdp_delta_at_probe" in r:
        lines.append(f"RDP delta       {_sci(r['rdp_delta_at_probe'])}   classic conversion"
                     f" (improved: {_sci(r['rdp_delta_at_probe_improved'])})")
    ex, tl = r["exact_delta_at_probe"], r["tail_delta_at_probe"]
    if ex > target:
        verdict = (f"The exact curve gives {_sci(ex)} > {_num(target)} at epsilon = {_num(probe)}: "
                   f"the target is missed there; it is met from epsilon = {r['exact_epsilon']:.4f} on.")
    else:
        verdict = (f"The exact curve gives {_sci(ex)} <= {_num(target)} at epsilon = {_num(probe)}: "
                   f"the target is met.")
    lines += ["", verdict]
    if tl > target:
        lines.append(f"The tail check P(L > {_num(probe)}) = {_sci(tl)} is above the target too"
                     + (" and looser than the exact delta." if tl >= ex else "."))
    return "\n".join(lines)


def _rdp_delta_curve(curve, eps: np.ndarray, conversion: str) -> np.ndarray:
    out = np.empty(eps.shape)
    for i, e in enumerate(eps):
        out[i] = curve.delta(max(float(e), 0.0), conversion, optimize=False)[0]
    return out


def plot_lab(result: dict, path) -> None:
    """Two-panel PNG of the lab: delta(eps) curves and the RDP epsilon(alpha) curve.

    Left: the exact Gaussian profile, the privacy-loss tail ``P(L > eps)``, the
    engine's certified band (from :func:`pld.baselines.curves.delta_curve`) and the
    RDP-implied ``delta(eps)`` (classic conversion), log scale, with the target
    delta and the probe epsilon marked.  Right: the classic RDP conversion
    ``eps(alpha) = k alpha/(2 sigma^2) + log(1/delta)/(alpha - 1)`` with its
    minimising order marked.

    Uses matplotlib's Agg canvas directly (no pyplot, no global backend
    change), so it works headless.  Writes PNG (PDF or SVG if ``path`` ends
    in ``.pdf``/``.svg``).

    Raises
    ------
    ImportError
        If matplotlib is not installed (``pip install 'pld[plot]'``).
    """
    try:  # matplotlib is optional (the plot extra): imported only when a plot is asked for
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plot_lab needs matplotlib; install it with `pip install 'pld[plot]'` "
                          "or `pip install matplotlib`") from exc

    r = result
    fig = Figure(figsize=(12, 4.8))
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(1, 2)
    _draw_delta_panel(ax, r)
    _draw_rdp_panel(ax2, r)
    fig.tight_layout()
    suffix = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else ""
    fig.savefig(path, dpi=110, format=suffix if suffix in ("pdf", "svg") else "png")


def _draw_delta_panel(ax, r: dict) -> None:
    """Left panel of :func:`plot_lab`: the delta(eps) curves, log scale."""
    sigma, steps, target, probe = r["sigma"], r["steps"], r["delta"], r["probe_epsilon"]
    mu = r.get("mu", math.sqrt(steps) / sigma)
    e_max = max(r["rdp_epsilon"], r["tail_epsilon"], probe) * 1.25 + 0.5
    eps = np.linspace(0.0, e_max, 400)

    exact_d = np.asarray(_exact.gaussian_delta(eps, mu))
    tail_d = np.asarray(_exact.privacy_loss_tail_delta_gaussian(eps, mu))
    d = Gaussian(sigma).pld().self_compose(steps)
    band_lo, band_hi = _curves.delta_curve(d, eps, delta=target)
    curve = _rdp.RdpCurve.gaussian(sigma, orders=np.geomspace(1.001, 1e4, 600)) * steps
    rdp_d = _rdp_delta_curve(curve, eps, "classic")

    floor = target * 1e-3

    def clip(y):
        y = np.asarray(y, dtype=float)
        return np.where(y >= floor, y, np.nan)  # below the axis: not drawn

    ax.fill_between(eps, np.maximum(band_lo, floor), np.maximum(band_hi, floor), color="tab:blue",
                    alpha=0.35, lw=0)
    ax.plot(eps, clip(band_hi), color="tab:blue", lw=6, alpha=0.3,
            label="pld certified band (narrower than the line)")
    ax.plot(eps, clip(exact_d), color="k", lw=1.2, label="exact Gaussian delta(eps)")
    ax.plot(eps, clip(tail_d), color="tab:orange", ls="--", lw=1.4, label="tail P(L > eps)")
    ax.plot(eps, clip(rdp_d), color="tab:red", ls="-.", lw=1.4, label="RDP delta(eps), classic")
    ax.axhline(target, color="gray", ls=":", lw=1.2, label=f"target delta = {_num(target)}")
    ax.axvline(probe, color="tab:green", ls=":", lw=1.2, label=f"probe eps = {_num(probe)}")
    ax.plot([probe, probe], [max(r["exact_delta_at_probe"], floor), max(r["tail_delta_at_probe"], floor)],
            "o", color="tab:green", ms=4)
    for x, c in ((r["exact_epsilon"], "k"), (r["tail_epsilon"], "tab:orange"), (r["rdp_epsilon"], "tab:red")):
        ax.plot([x], [target], "v", color=c, ms=6)
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.5)
    ax.set_xlim(0.0, e_max)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("delta")
    ax.set_title(f"k = {steps} Gaussian releases, sigma = {_num(sigma)}, delta = {_num(target)}")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(True, which="major", alpha=0.3)


def _draw_rdp_panel(ax2, r: dict) -> None:
    """Right panel of :func:`plot_lab`: the RDP conversion eps(alpha) and its best order."""
    steps, sigma, target = r["steps"], r["sigma"], r["delta"]
    order = float(r["rdp_order"])
    alphas = np.geomspace(1.05, max(64.0, 8 * order), 400)
    c = steps / (2.0 * sigma * sigma)
    eps_classic = c * alphas + math.log(1.0 / target) / (alphas - 1.0)
    eps_improved = (c * alphas + np.log1p(-1.0 / alphas) - (math.log(target) + np.log(alphas)) / (alphas - 1.0))
    ax2.plot(alphas, eps_classic, color="tab:red", lw=1.5, label="classic conversion")
    ax2.plot(alphas, eps_improved, color="tab:red", lw=1.0, ls="--", alpha=0.6, label="improved conversion")
    ax2.plot([order], [r["rdp_epsilon"]], "o", color="tab:red", ms=6)
    ax2.axvline(order, color="tab:red", ls=":", lw=1.0)
    ax2.annotate(f"alpha* = {order:.2f}\neps = {r['rdp_epsilon']:.2f}", (order, r["rdp_epsilon"]),
                 textcoords="offset points", xytext=(10, 18), fontsize=9)
    ax2.axhline(r["exact_epsilon"], color="k", lw=1.0, ls=":", label=f"exact eps = {r['exact_epsilon']:.2f}")
    ax2.set_xscale("log")
    ax2.set_ylim(0.0, min(float(np.max(eps_classic)), 4.0 * r["rdp_epsilon"]))
    ax2.set_xlabel("Renyi order alpha")
    ax2.set_ylabel("epsilon(alpha)")
    ax2.set_title("RDP: eps(alpha) = k alpha/(2 sigma^2) + log(1/delta)/(alpha-1)")
    ax2.legend(fontsize=8)
    ax2.grid(True, which="both", alpha=0.3)


# ---------------------------------------------------------------------------
# DP-SGD comparison
# ---------------------------------------------------------------------------


def compare(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
            sampling: str = "poisson", *, peers: bool = True) -> dict:
    """Run a DP-SGD configuration through every accountant, pld's and its peers'.

    Parameters
    ----------
    noise_multiplier : float
        Noise standard deviation / clipping norm, in ``(0, inf)``.
    sampling_rate : float
        Sampling rate ``q`` in ``(0, 1]`` (Poisson rate, or batch / dataset size).
    steps : int
        Number of steps, ``>= 1``.
    delta : float
        Target delta in ``(0, 1)``.
    sampling : {"poisson", "without_replacement"}
        Sampling scheme, any spelling :func:`pld.dpsgd` accepts.  Without
        replacement pairs with substitute adjacency (sensitivity ``2 C``); the
        RDP accountant of :mod:`pld.baselines.rdp` covers Poisson sampling only.
    peers : bool, default True
        Also ask the installed peer libraries (:func:`pld.baselines.peers.peer_epsilons`).

    Returns
    -------
    dict
        Inputs; ``pld_epsilon_lower/upper`` (certified bracket,
        :func:`pld.dpsgd`); ``rdp_epsilon_classic``/``rdp_order_classic`` and
        ``rdp_epsilon_improved``/``rdp_order_improved`` (Mironov-Talwar-Zhang
        RDP with optimal orders, :mod:`pld.baselines.rdp`; ``None`` without Poisson
        sampling); ``tail_epsilon_lower/upper`` (certified bracket on the
        privacy-loss-tail epsilon from the PLD); ``exact_epsilon`` and
        ``exact_tail_epsilon`` when ``sampling_rate == 1`` (plain Gaussian,
        closed form), else ``None``; ``peers`` (one dict per peer library,
        installed or not); ``seconds`` per method.

    Raises
    ------
    TypeError, ValueError
        For an invalid parameter (named in the message).

    Examples
    --------
    >>> r = compare(1.0, 0.01, 1000, 1e-5, peers=False)
    >>> r["pld_epsilon_upper"] <= r["rdp_epsilon_improved"]
    True
    """
    sampling = sampling_scheme(sampling)
    sigma = _v.real("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    q = _v.real("sampling_rate", sampling_rate, low=0.0, high=1.0, low_open=True)
    steps = _v.integer("steps", steps, low=1)
    delta = _v.real("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    out: dict = {"noise_multiplier": sigma, "sampling_rate": q, "steps": steps, "delta": delta,
                 "sampling": sampling}
    seconds: dict = {}

    t = time.perf_counter()
    d = _dpsgd(sigma, q, steps, sampling=sampling)
    lo, hi = d.epsilon_bounds(delta)
    out["pld_epsilon_lower"], out["pld_epsilon_upper"] = float(lo), float(hi)
    seconds["pld"] = time.perf_counter() - t

    for conversion in ("improved", "classic"):
        if sampling_registry.get(sampling) is sampling_registry.POISSON:  # (pld.baselines.rdp covers Poisson only)
            t = time.perf_counter()
            e, o = _rdp.dpsgd_rdp_epsilon(sigma, q, steps, delta, conversion)
            out[f"rdp_epsilon_{conversion}"], out[f"rdp_order_{conversion}"] = float(e), float(o)
            seconds[f"rdp_{conversion}"] = time.perf_counter() - t
        else:
            out[f"rdp_epsilon_{conversion}"] = out[f"rdp_order_{conversion}"] = None

    t = time.perf_counter()
    tl, th = _curves.tail_epsilon(d, delta)
    out["tail_epsilon_lower"], out["tail_epsilon_upper"] = float(tl), float(th)
    seconds["tail"] = time.perf_counter() - t

    if q == 1.0:
        t = time.perf_counter()
        # full batch: the Gaussian mechanism; a substituted record moves the sum by 2C
        substitute = sampling_registry.get(sampling).adjacency == adjacency.SUBSTITUTE
        mu = _exact.gaussian_mu(sigma, steps, sensitivity=2.0 if substitute else 1.0)
        out["exact_epsilon"] = float(_exact.gaussian_epsilon(delta, mu))
        out["exact_tail_epsilon"] = float(_exact.privacy_loss_tail_epsilon_gaussian(delta, mu))
        seconds["exact"] = time.perf_counter() - t
    else:
        out["exact_epsilon"] = None
        out["exact_tail_epsilon"] = None
    if peers:
        out["peers"] = peer_epsilons(sigma, q, steps, delta, sampling)
    else:
        out["peers"] = []
    out["seconds"] = seconds
    return out


def format_compare(result: dict) -> str:
    """The comparison as a text table (epsilon and seconds per method)."""
    r = result
    s = r.get("seconds", {})

    def sec(v):
        return f"{v:8.2f}" if v is not None else ""

    rows = [("PLD, certified bracket", bracket(r["pld_epsilon_lower"], r["pld_epsilon_upper"], 5),
             sec(s.get("pld")))]
    if r.get("rdp_epsilon_improved") is not None:
        rows += [(f"RDP, improved conversion (order {r['rdp_order_improved']:.3g})",
                  f"{r['rdp_epsilon_improved']:.5f}", sec(s.get("rdp_improved"))),
                 (f"RDP, classic conversion (order {r['rdp_order_classic']:.3g})",
                  f"{r['rdp_epsilon_classic']:.5f}", sec(s.get("rdp_classic")))]
    else:
        rows.append(("RDP (pld.baselines.rdp)", "n/a (Poisson sampling only)", ""))
    rows.append(("privacy-loss tail, P(L > eps) <= delta",
                 bracket(r["tail_epsilon_lower"], r["tail_epsilon_upper"], 4), sec(s.get("tail"))))
    if r.get("exact_epsilon") is not None:
        rows.append(("exact (Gaussian, q = 1)", f"{r['exact_epsilon']:.5f}", sec(s.get("exact"))))
        rows.append(("exact tail (Gaussian, q = 1)", f"{r['exact_tail_epsilon']:.5f}", ""))
    else:
        rows.append(("exact", "n/a (needs sampling_rate = 1)", ""))
    missing = []
    for p in r.get("peers") or []:
        if not p.get("installed"):
            missing.append(p)
            continue
        name = p["label"] + (f" {p['version']}" if p.get("version") else "")
        if p.get("epsilon") is None:
            rows.append((name, f"n/a ({p.get('note')})", ""))
            continue
        if p.get("epsilon_lower") is not None:
            value = f"{p['epsilon']:.5f} in [{p['epsilon_lower']:.5f}, {p['epsilon_upper']:.5f}]"
        else:
            value = f"{p['epsilon']:.5f}"
        rows.append((name, value, sec(p.get("seconds"))))
        if p.get("note"):
            rows.append(("  (" + p["note"] + ")", "", ""))
    w0 = max(len(a) for a, b, _ in rows if b)
    w1 = max(len(b) for _, b, _ in rows)
    used = sampling_registry.get(r.get("sampling", "poisson"))
    neigh = {adjacency.ADD_OR_REMOVE: "add-or-remove",
             adjacency.SUBSTITUTE: "substitute (sensitivity 2C)"}.get(used.adjacency, used.adjacency)
    scheme = used.description.split(" (")[0]
    head = (f"DP-SGD, {scheme}, {neigh} adjacency: "
            f"noise multiplier {_num(r['noise_multiplier'])}, sampling rate {_num(r['sampling_rate'])}, "
            f"steps {r['steps']}, delta {_num(r['delta'])}")
    lines = [head, "", f"{'method':<{w0}}  {'epsilon':<{w1}}  {'seconds':>8s}",
             f"{'-' * w0}  {'-' * w1}  {'-' * 8}"]
    for a, b, c in rows:
        lines.append(f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip())
    if missing:
        lines.append("")
        lines.append("not installed: " + "; ".join(
            f"{p['label']} (pip install {p['package']})" for p in missing))
    return "\n".join(lines)
