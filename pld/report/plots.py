"""Plots of accounting results, written straight to a file (no display needed).

matplotlib is optional (``pip install 'pld[plot]'``) and imported only when a
plot is drawn; figures are rendered with the Agg canvas through the
object-oriented API, so the global pyplot backend of the calling program is
never touched.  Files are written to a temporary name and renamed: a failed
plot never leaves a partial file.

* :func:`plot_delta_curve` -- delta(epsilon) with the certified bracket as a band
  and the target delta (log scale);
* :func:`plot_distribution` -- the discretised PLD of each direction
  (dominating side) with its infinity mass;
* :func:`plot_tradeoff` -- the f-DP trade-off curve implied by delta(epsilon);
* :func:`plot_report` -- the three panels in one figure (``pld dpsgd --plot``);
* :func:`plot_epochs` -- certified epsilon after each epoch
  (``pld dpsgd --per-epoch --plot``).
"""

from __future__ import annotations

import io
import math
import os

import numpy as np

from pld.baselines.curves import tradeoff as engine_tradeoff
from pld.io import write_atomic
from pld.report import delta_profile

__all__ = ["plot_delta_curve", "plot_distribution", "plot_tradeoff", "plot_report", "render_report",
           "plot_epochs", "render_epochs",
           "tradeoff_from_delta", "tradeoff", "delta_curve", "check_plot_path", "PlotError"]


class PlotError(RuntimeError):
    """Plotting is unavailable (matplotlib missing) or the file type is unsupported."""


_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp")


def _mpl():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("plotting needs matplotlib: pip install 'pld[plot]' (or pip install matplotlib)") from None
    return Figure, FigureCanvasAgg


def check_plot_path(path) -> str:
    """Validate ``path`` before any work: matplotlib importable, known extension, folder exists.

    Returns the image format (e.g. ``"png"``).
    """
    _mpl()
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in _FORMATS:
        raise PlotError(f"cannot tell the image format of {path!r}: use one of "
                        f"{', '.join('.' + f for f in _FORMATS)}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PlotError(f"cannot write {path!r}: folder {folder!r} does not exist")
    return ext


def _new_figure(ncols: int = 1, width: float = 6.0, height: float = 4.2):
    Figure, FigureCanvasAgg = _mpl()
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _render(fig, fmt: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()


def _save(fig, path) -> str:
    fmt = check_plot_path(path)
    write_atomic(path, _render(fig, fmt))
    return os.fspath(path)


# ---------------------------------------------------------------- curves
def delta_curve(pld_obj, epsilons, *, delta: float = 1e-5, tuned: bool = False):
    """``(epsilons, delta_lower, delta_upper)``: see :func:`pld.report.delta_profile`."""
    eps = np.asarray(epsilons, dtype=float)
    lo, hi, _ = delta_profile(pld_obj, eps, delta, tuned=tuned)
    return eps, lo, hi


def tradeoff_from_delta(epsilons, deltas, alphas) -> np.ndarray:
    """f-DP trade-off ``beta(alpha)`` implied by (epsilon, delta(epsilon))-DP at each epsilon.

    Each pair gives the lower bound ``max(0, 1 - delta - e^eps alpha,
    e^-eps (1 - delta - alpha))`` on the type-II error (Dong, Roth & Su 2022,
    Prop. 2.12); their maximum over the epsilons given is a valid trade-off
    curve (a coarse epsilon grid only makes it more conservative).  Use upper
    bounds on delta for a certified curve.  Clipped to [0, 1 - alpha].
    """
    eps = np.asarray(epsilons, float).reshape(-1, 1)
    dl = np.asarray(deltas, float).reshape(-1, 1)
    a = np.asarray(alphas, float).reshape(1, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        b1 = 1.0 - dl - np.exp(eps) * a
        b2 = np.exp(-eps) * (1.0 - dl - a)
    b1 = np.where(np.isfinite(b1), b1, 0.0)
    beta = np.max(np.maximum(b1, b2), axis=0)
    return np.clip(beta, 0.0, np.clip(1.0 - a.ravel(), 0.0, 1.0))


def tradeoff(pld_obj, alphas, *, delta: float = 1e-5, curve=None):
    """``(beta_lower, beta_upper)`` on the f-DP trade-off curve of ``pld_obj``.

    ``beta_lower`` is certified (every test at level alpha has type II error at
    least that); both come from :func:`pld.baselines.curves.tradeoff`.  ``curve`` is
    accepted for callers that already hold a delta(epsilon) curve and is not
    needed (:func:`tradeoff_from_delta` turns such a curve into a trade-off).
    """
    al = np.asarray(alphas, float)
    out = engine_tradeoff(pld_obj, al, delta=delta)
    if isinstance(out, tuple) and len(out) == 2:
        return np.asarray(out[0], float), np.asarray(out[1], float)
    out = np.asarray(out, float)
    return out, out


# ----------------------------------------------------------------- drawing
def _draw_delta(ax, eps, lo, hi, target_delta=None, target_epsilon=None, title=None) -> None:
    floor = 1e-300
    ax.fill_between(eps, np.maximum(lo, floor), np.maximum(hi, floor), color="tab:blue", alpha=0.3,
                    label="certified bracket", step=None)
    ax.plot(eps, np.maximum(hi, floor), color="tab:blue", lw=1.5, label="delta upper (certified)")
    ax.plot(eps, np.maximum(lo, floor), color="tab:blue", lw=0.8, ls="--", label="delta lower")
    if target_delta is not None:
        ax.axhline(target_delta, color="tab:red", lw=1, ls=":", label=f"target delta = {target_delta:g}")
    if target_epsilon is not None and math.isfinite(target_epsilon):
        ax.axvline(target_epsilon, color="tab:gray", lw=1, ls=":", label=f"epsilon = {target_epsilon:.4g}")
    ax.set_yscale("log")
    pos = hi[hi > 0]
    if pos.size:
        bottom = max(float(np.min(pos)) / 3, 1e-300)
        if target_delta is not None:
            bottom = min(bottom, target_delta / 10)
        ax.set_ylim(bottom=bottom, top=min(1.5, max(float(np.max(pos)) * 3, bottom * 10)))
    ax.set_xlabel("epsilon")
    ax.set_ylabel("delta(epsilon)")
    ax.set_title(title or "privacy curve delta(epsilon)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _draw_distribution(ax, pld_obj, delta: float) -> None:
    directions = ("remove",) if pld_obj.symmetric else ("remove", "add")
    colors = {"remove": "tab:blue", "add": "tab:orange"}
    any_pos = False
    for d in directions:
        losses, masses, inf_mass = pld_obj.distribution(d, "upper", delta=delta)
        losses = np.asarray(losses, float)
        masses = np.asarray(masses, float)
        h = float(losses[1] - losses[0]) if losses.size > 1 else 1.0
        dens = masses / h
        keep = dens > 0
        if np.any(keep):
            any_pos = True
        label = d if not pld_obj.symmetric else "both directions (symmetric)"
        label += f", grid {losses.size} pts, h={h:.3g}"
        if inf_mass > 0:
            label += f", mass at +inf {inf_mass:.2g}"
        ax.plot(losses[keep], dens[keep], color=colors[d], lw=1, label=label)
    ax.set_yscale("log")
    if any_pos:
        lo, hi = ax.get_ylim()
        ax.set_ylim(bottom=max(lo, hi * 1e-18))
    ax.set_xlabel("privacy loss L")
    ax.set_ylabel("probability / grid spacing")
    ax.set_title(f"privacy loss distribution (dominating grid, query delta={delta:g})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _draw_tradeoff(ax, alphas, beta, beta_upper=None, label="certified trade-off f(alpha)") -> None:
    if beta_upper is not None and np.any(beta_upper > beta):
        ax.fill_between(alphas, beta, beta_upper, color="tab:green", alpha=0.3, label="bracket")
    ax.plot(alphas, beta, color="tab:green", lw=1.5, label=label)
    ax.plot([0, 1], [1, 0], color="tab:gray", lw=0.8, ls=":", label="perfect privacy (1 - alpha)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("type I error alpha")
    ax.set_ylabel("type II error beta")
    ax.set_title("f-DP trade-off curve")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


# ------------------------------------------------------------- public API
def plot_delta_curve(path, *, pld=None, epsilons=None, curve=None, target_delta=None,
                     target_epsilon=None, title=None) -> str:
    """Plot delta(epsilon) with its certified band.  Give ``pld`` and ``epsilons``
    (grids tuned at ``target_delta``, default 1e-5), or a precomputed
    ``curve = (epsilons, delta_lower, delta_upper)``."""
    check_plot_path(path)
    if curve is None:
        if pld is None or epsilons is None:
            raise ValueError("give either curve=(eps, lo, hi) or pld= and epsilons=")
        curve = delta_curve(pld, epsilons, delta=target_delta or 1e-5)
    eps, lo, hi = (np.asarray(x, float) for x in curve)
    fig, (ax,) = _new_figure()
    _draw_delta(ax, eps, lo, hi, target_delta, target_epsilon, title)
    return _save(fig, path)


def plot_distribution(path, pld, *, delta: float = 1e-5) -> str:
    """Plot the dominating grid PLD of both directions at the query ``delta``."""
    check_plot_path(path)
    fig, (ax,) = _new_figure()
    _draw_distribution(ax, pld, delta)
    return _save(fig, path)


def plot_tradeoff(path, *, pld=None, curve=None, delta: float = 1e-5, alphas=None) -> str:
    """Plot the f-DP trade-off curve (from ``pld`` or a precomputed delta curve)."""
    check_plot_path(path)
    alphas = np.linspace(0.0, 1.0, 201) if alphas is None else np.asarray(alphas, float)
    if pld is not None:
        b_lo, b_hi = tradeoff(pld, alphas, delta=delta, curve=curve)
    elif curve is not None:
        b_lo, b_hi = tradeoff_from_delta(curve[0], curve[2], alphas), None
    else:
        raise ValueError("give pld= or curve=(eps, lo, hi)")
    fig, (ax,) = _new_figure()
    _draw_tradeoff(ax, alphas, b_lo, b_hi)
    return _save(fig, path)


def plot_report(path, pld, *, delta: float, curve=None, epsilon: float | None = None,
                title: str | None = None) -> str:
    """Three panels: delta(epsilon) curve, PLD histogram, trade-off curve.

    ``curve = (epsilons, delta_lower, delta_upper)``; by default 41 epsilons
    from 0 to 1.6 x epsilon(delta) read off the grids tuned at ``delta``.
    """
    fmt = check_plot_path(path)
    write_atomic(path, render_report(pld, fmt=fmt, delta=delta, curve=curve, epsilon=epsilon, title=title))
    return os.fspath(path)


def render_report(pld, *, fmt: str = "png", delta: float, curve=None, epsilon: float | None = None,
                  title: str | None = None) -> bytes:
    """The :func:`plot_report` figure as image bytes (nothing written)."""
    _mpl()
    if epsilon is None:
        epsilon = pld.epsilon(delta)
    if curve is None:
        top = max(1.6 * epsilon, 0.5) if math.isfinite(epsilon) else 10.0
        curve = delta_curve(pld, np.linspace(0.0, top, 41), delta=delta)
    eps, lo, hi = (np.asarray(x, float) for x in curve)
    alphas = np.linspace(0.0, 1.0, 201)
    b_lo, b_hi = tradeoff(pld, alphas, delta=delta, curve=(eps, lo, hi))
    fig, axes = _new_figure(3, width=5.2, height=4.6)
    _draw_delta(axes[0], eps, lo, hi, delta, epsilon)
    _draw_distribution(axes[1], pld, delta)
    _draw_tradeoff(axes[2], alphas, b_lo, b_hi)
    if title:
        fig.suptitle(title)
    return _render(fig, fmt)


def render_epochs(rows, *, fmt: str = "png", delta: float, title: str | None = None) -> bytes:
    """Certified epsilon against epochs as image bytes (nothing written).

    ``rows``: dicts with ``epoch``, ``epsilon_lower`` and ``epsilon_upper``
    (:meth:`pld.EpsilonTable.rows`, or ``pld dpsgd --per-epoch --json``).
    """
    _mpl()
    epochs = np.array([r["epoch"] for r in rows], float)
    lo = np.array([r["epsilon_lower"] for r in rows], float)
    hi = np.array([r["epsilon_upper"] for r in rows], float)
    fig, (ax,) = _new_figure()
    ax.fill_between(epochs, lo, hi, color="tab:blue", alpha=0.3, label="certified bracket")
    ax.plot(epochs, hi, color="tab:blue", lw=1.5, marker="o" if epochs.size <= 60 else None, ms=3,
            label="epsilon (certified upper end)")
    ax.set_xlabel("epochs")
    ax.set_ylabel(f"epsilon at delta = {delta:g}")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(title or f"epsilon after each epoch (delta = {delta:g})", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _render(fig, fmt)


def plot_epochs(path, table, *, title: str | None = None) -> str:
    """Plot a :class:`pld.EpsilonTable` with epochs (:func:`pld.epsilon_per_epoch`)."""
    fmt = check_plot_path(path)
    if getattr(table, "epochs", None) is None:
        raise ValueError("table has no epochs: use pld.epsilon_per_epoch")
    write_atomic(path, render_epochs(table.rows(), fmt=fmt, delta=table.delta, title=title))
    return os.fspath(path)
