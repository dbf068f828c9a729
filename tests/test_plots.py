"""Plots: files written without a display, valid trade-off conversion, clear errors."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from scipy.stats import norm

import pld
from pld.report import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = open(path, "rb").read()
    return data[:8] == PNG_MAGIC and len(data) > 5000


def _gaussian_delta(eps, mu):
    eps = np.asarray(eps, float)
    return norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * norm.cdf(-mu / 2 - eps / mu)


def test_tradeoff_from_delta_is_a_valid_lower_bound_close_to_the_gaussian_curve():
    mu = 1.0
    eps = np.linspace(0.0, 8.0, 801)
    alphas = np.linspace(0.0, 1.0, 101)
    beta = plots.tradeoff_from_delta(eps, _gaussian_delta(eps, mu), alphas)
    exact = norm.cdf(norm.ppf(1 - alphas) - mu)  # G_mu
    assert np.all(beta <= exact + 1e-12)
    assert np.max(exact - beta) < 2e-3
    assert beta[0] == pytest.approx(1.0 - _gaussian_delta(8.0, mu), abs=1e-12)  # sup over eps
    assert np.all(np.diff(beta) <= 1e-15) and beta[-1] == 0.0
    # a coarse epsilon grid is only more conservative
    coarse = plots.tradeoff_from_delta(eps[::50], _gaussian_delta(eps[::50], mu), alphas)
    assert np.all(coarse <= beta + 1e-15)
    # huge epsilons do not overflow into NaN
    big = plots.tradeoff_from_delta([0.0, 800.0], [0.5, 0.0], alphas)
    assert np.all(np.isfinite(big)) and np.all((big >= 0) & (big <= 1))


def test_curve_plot_from_precomputed_values(tmp_path):
    pytest.importorskip("matplotlib")
    eps = np.linspace(0.0, 6.0, 25)
    hi = _gaussian_delta(eps, 1.5)
    out = tmp_path / "curve.png"
    plots.plot_delta_curve(out, curve=(eps, hi * 0.99, hi), target_delta=1e-5, target_epsilon=3.0)
    assert _is_png(out)
    svg = tmp_path / "tradeoff.svg"
    plots.plot_tradeoff(svg, curve=(eps, hi * 0.99, hi))
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))


def _pyplot_state(matplotlib):
    """What a plot through pyplot would change: whether pyplot is imported, its open
    figures, and the backend setting as stored (read without resolving it)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    return (pyplot is not None, tuple(pyplot.get_fignums()) if pyplot else (),
            dict.__getitem__(matplotlib.rcParams, "backend"))


def test_report_plot_and_distribution_for_a_pld(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    before = _pyplot_state(matplotlib)
    d = pld.PoissonSampled(pld.Gaussian(2.0), 0.05).pld().self_compose(50)
    out = tmp_path / "report.png"
    plots.plot_report(out, d, delta=1e-5, title="test")
    assert _is_png(out)
    img = matplotlib.image.imread(str(out))
    assert img.ndim == 3 and img.shape[1] > 2 * img.shape[0]  # three panels side by side
    out2 = tmp_path / "pld.png"
    plots.plot_distribution(out2, d, delta=1e-5)
    assert _is_png(out2)
    beta_lo, beta_hi = plots.tradeoff(d, np.linspace(0, 1, 11), delta=1e-5)
    assert np.all(beta_lo <= beta_hi + 1e-12) and np.all((beta_lo >= 0) & (beta_lo <= 1))
    # the global pyplot state is never touched: not imported by pld.report.plots, no figure left
    # open, the backend setting as it was
    assert _pyplot_state(matplotlib) == before


def test_bad_paths_fail_before_any_work(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(plots.PlotError, match="image format"):
        plots.check_plot_path(tmp_path / "x.unknown")
    with pytest.raises(plots.PlotError, match="does not exist"):
        plots.check_plot_path(tmp_path / "nope" / "x.png")
    eps = np.linspace(0, 1, 3)
    with pytest.raises(plots.PlotError):
        plots.plot_delta_curve(tmp_path / "x.txt", curve=(eps, eps, eps))
    assert os.listdir(tmp_path) == []


def test_missing_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with pytest.raises(plots.PlotError, match=r"pip install 'pld\[plot\]'"):
        plots.plot_delta_curve(tmp_path / "x.png", curve=([0, 1], [0.1, 0.01], [0.1, 0.01]))
    assert os.listdir(tmp_path) == []
