"""Which end of a k-of-t random allocation bracket is loose, and by how much (issue 39).

For ``k > 1`` pld's upper end is the block argument (k rounds of 1-of-t/k) and its lower end
a statistic of the outputs (its first lower view: the Poisson likelihood-ratio statistic where
it fits, :mod:`pld.mechanisms.allocation.lower_parts`); the gap between them is structural.  This script places the truth
inside that gap by plain Monte Carlo of one round's remove-direction hockey stick,
``E_Q[(L - e^eps)_+]`` with the exact likelihood ratio ``L = e_k(Y) / C(t, k)`` (``e_k`` the
elementary symmetric polynomial of the per-step ratios ``Y_i``, by the usual recursion), and
prints it beside the two constructions' delta brackets.  Monte Carlo is an estimate (its
standard error printed), not a certificate: it says which end the width belongs to.

    python -m benchmarks.k_of_t_ends            # ~2 minutes on 2 cores
"""

from __future__ import annotations

import math
import warnings

import numpy as np

import pld
from pld.mechanisms.allocation import RandomAllocation

SETTINGS = [(1.0, 20, 2), (1.0, 40, 4), (2.0, 100, 4), (1.35, 200, 2)]
EPSILONS = (0.05, 0.2, 0.5)


def elementary_symmetric(y: np.ndarray, k: int) -> np.ndarray:
    """``e_k`` of each row of ``y`` (``e_j <- e_j + y_i e_{j-1}`` over the columns)."""
    e = np.zeros((y.shape[0], k + 1))
    e[:, 0] = 1.0
    for i in range(y.shape[1]):
        e[:, 1:] = e[:, 1:] + y[:, i:i + 1] * e[:, :-1]
    return e[:, k]


def mc_remove_delta(sigma: float, t: int, k: int, eps: float, batches: int = 10, n: int = 200_000,
                    seed: int = 1) -> tuple[float, float]:
    """(estimate, standard error) of one round's remove-direction delta at ``eps``."""
    rng = np.random.default_rng(seed)
    a = 1.0 / sigma
    vals = []
    for _ in range(batches):
        y = np.exp(a * rng.standard_normal((n, t)) - a * a / 2)
        lam = elementary_symmetric(y, k) / math.comb(t, k)
        vals.append(float(np.maximum(lam - math.exp(eps), 0.0).mean()))
    return float(np.mean(vals)), float(np.std(vals) / math.sqrt(batches))


def main() -> None:
    warnings.simplefilter("ignore")
    print("| sigma | t | k | eps | Monte Carlo delta | block argument (upper) | statistic (lower) | upper/MC - 1 | "
          "1 - lower/MC |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sigma, t, k in SETTINGS:
        upper, lower = RandomAllocation(pld.Gaussian(sigma), t, k).pld().bounds()
        for eps in EPSILONS:
            est, se = mc_remove_delta(sigma, t, k, eps)
            u = upper.delta_bounds(eps)
            lo = lower.delta_bounds(eps) if lower is not None else (0.0, 0.0)
            print(f"| {sigma:g} | {t} | {k} | {eps:g} | {est:.5g} ± {se:.2g} | [{u[0]:.5g}, {u[1]:.5g}] | "
                  f"[{lo[0]:.5g}, {lo[1]:.5g}] | {u[1] / est - 1:+.2%} | {1 - lo[0] / est:+.2%} |", flush=True)


if __name__ == "__main__":
    main()
