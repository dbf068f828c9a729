"""The cost of a search: composition of all runs, and Papernot & Steinke's private
selection bound checked against the paper's formulas coded here independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

import pld
from pld.accounting import search as sc

SIGMA = 2.0
GAUSS = {"noise_multiplier": SIGMA, "sampling_rate": 1.0, "steps": 1}  # one Gaussian release
ORDERS = [1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]
DELTA = 1e-5


def _improved_conversion(lam: float, rdp: float, delta: float) -> float:
    # Canonne, Kamath & Steinke 2020, Prop. 12, coded from the paper
    return rdp + math.log((lam - 1) / lam) - (math.log(delta) + math.log(lam)) / (lam - 1)


def _gaussian_rdp(lam: float) -> float:
    return lam / (2 * SIGMA**2)  # Mironov 2017, Prop. 7


def test_tnb_law_matches_its_definition():
    # P[K = k] from the paper's definition, summed by hand for eta = 0.5, gamma = 0.2
    eta, gamma = 0.5, 0.2
    law = sc.TruncatedNegativeBinomial(eta, gamma)
    ks = np.arange(1, 400)
    p = np.array([(1 - gamma) ** k / (gamma**-eta - 1) * math.prod((l + eta) / (l + 1) for l in range(k))
                  for k in ks])
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert law.mean() == pytest.approx(float((ks * p).sum()), rel=1e-12)
    assert law.pmf(3) == pytest.approx(p[2], rel=1e-12)
    assert sc.TruncatedNegativeBinomial(1.0, 0.1).mean() == pytest.approx(10.0)  # geometric: 1/gamma


def test_tnb_selection_bound_equals_the_paper_formula_on_a_tiny_case():
    # Theorem 2 with Q = one Gaussian release (RDP lam / (2 sigma^2)), eta = 1, gamma = 0.1
    eta, gamma = 1.0, 0.1
    mean_k = eta * (1 - gamma) / (gamma * (1 - gamma**eta))
    hat = min([(1 + eta) * (1 - 1 / lh) * _gaussian_rdp(lh) + (1 + eta) * math.log(1 / gamma) / lh
               for lh in ORDERS] + [(1 + eta) * math.log(1 / gamma)])
    per_order = [_improved_conversion(lam, _gaussian_rdp(lam) + hat + math.log(mean_k) / (lam - 1), DELTA)
                 for lam in ORDERS]
    got = sc.selection_epsilon([GAUSS], DELTA, sc.TruncatedNegativeBinomial(eta, gamma), orders=ORDERS)
    assert got["epsilon"] == pytest.approx(min(per_order), rel=1e-12)
    assert got["theorem"].endswith("Theorem 2")


def test_tnb_default_orders_stay_above_the_continuous_optimum():
    # over all real orders the bound can only be smaller: the grid's answer is above
    # the continuous optimum (a proof) and close to it
    from scipy.optimize import minimize_scalar

    eta, gamma = 1.0, 0.1
    mean_k = 10.0
    a = 1 + eta
    lh = math.sqrt(2 * SIGMA**2 * math.log(1 / gamma))  # argmin of (lh - 1)/sigma^2 + a log(1/g)/lh
    hat = a * (lh - 1) / (2 * SIGMA**2) + a * math.log(1 / gamma) / lh
    best = minimize_scalar(lambda lam: _improved_conversion(
        lam, _gaussian_rdp(lam) + hat + math.log(mean_k) / (lam - 1), DELTA), bounds=(1.01, 500), method="bounded")
    got = sc.selection_epsilon([GAUSS], DELTA, sc.TruncatedNegativeBinomial(eta, gamma))["epsilon"]
    assert best.fun <= got <= best.fun * 1.02


def test_poisson_selection_bound_against_the_paper_formula():
    # Theorem 6 with the Gaussian's exact delta(eps) (Balle & Wang 2018): pld's
    # certified delta is above it, so the bound is above the hand value, and close
    mu = 5.0
    m = 1 / SIGMA

    def delta_exact(eps):
        return norm.cdf(-eps / m + m / 2) - math.exp(eps) * norm.cdf(-eps / m - m / 2)

    per_order = []
    for lam in ORDERS:
        eps_hat = math.log(1 + 1 / (lam - 1))
        rdp = _gaussian_rdp(lam) + mu * delta_exact(eps_hat) + math.log(mu) / (lam - 1)
        per_order.append(_improved_conversion(lam, rdp, DELTA))
    got = sc.selection_epsilon([GAUSS], DELTA, sc.PoissonTrials(mu), orders=ORDERS)
    assert min(per_order) <= got["epsilon"] <= min(per_order) + 1e-5
    assert got["theorem"].endswith("Theorem 6")


def test_candidates_take_the_worst_rdp():
    runs = [{"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 100},
            {"noise_multiplier": 3.0, "sampling_rate": 0.01, "steps": 100}]
    law = sc.TruncatedNegativeBinomial(1.0, 0.2)
    both = sc.selection_epsilon(runs, DELTA, law)["epsilon"]
    assert both == pytest.approx(sc.selection_epsilon(runs[:1], DELTA, law)["epsilon"], rel=1e-12)
    assert both > sc.selection_epsilon(runs[1:], DELTA, law)["epsilon"]


def test_search_composes_every_run_and_reports_the_chosen_one():
    # four runs, two settings: composition = the Gaussian closed form of sigma_eff
    runs = [GAUSS, GAUSS, {**GAUSS, "noise_multiplier": 4.0}, {**GAUSS, "noise_multiplier": 4.0}]
    res = sc.search_cost(runs, DELTA, chosen=2)
    mu = math.sqrt(2 / SIGMA**2 + 2 / 4.0**2)  # mu-GDP of the composition (Dong, Roth & Su 2019)

    def delta_exact(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    lo, hi = res["search"]["epsilon_lower"], res["search"]["epsilon_upper"]
    assert delta_exact(hi) <= DELTA <= delta_exact(lo)
    assert hi - lo < 1e-3 * hi
    c = res["chosen"]
    assert c["index"] == 2 and c["epsilon_upper"] < lo
    assert "search cost (4 runs" in sc.format_search_cost(res)


def test_search_cost_refuses_what_it_cannot_bound():
    with pytest.raises(ValueError, match="runs\\[0\\].*sampling"):
        sc.selection_epsilon([{**GAUSS, "sampling_rate": 0.5, "sampling": "without_replacement"}], DELTA,
                             sc.PoissonTrials(3))
    with pytest.raises(ValueError, match="gamma"):
        sc.TruncatedNegativeBinomial(1.0, 1.5)
    with pytest.raises(ValueError, match="chosen"):
        sc.search_cost([GAUSS], DELTA, chosen=3)
    with pytest.raises(ValueError, match="DP-SGD"):
        sc.selection_epsilon([pld.dpsgd(1.0, 0.1, 10)], DELTA, sc.PoissonTrials(3))


@pytest.mark.parametrize("module", ["pld.accounting.search", "pld.accounting.sweeps"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, module
