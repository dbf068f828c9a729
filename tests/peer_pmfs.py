"""dp_accounting's epsilon(delta) at many deltas in one pass over its PMFs.

Its ``get_epsilon_for_delta`` costs tens of milliseconds a call on a fine PMF; tests that
sweep thousands of deltas through a peer's PLD read its PMFs here instead (and check a few
deltas against the method itself).  Reads dp_accounting's private PMF fields; test-only."""

from __future__ import annotations

import math

import numpy as np


def epsilons_of_pmf(pmf, deltas: np.ndarray) -> np.ndarray:
    """The least epsilon >= 0 with delta(epsilon) <= delta on a discrete PLD, each delta:
    delta(eps) = P(L = inf) + sum_{l > eps} p_l (1 - e^(eps - l)) is, between consecutive loss
    values, S1 - e^eps S2 (S1, S2: the sums of p_l and p_l e^-l over the losses above), so
    epsilon is log((S1 + inf - delta) / S2) on the segment where delta falls."""
    dense = pmf.to_dense_pmf()
    p = np.asarray(dense._probs, float)
    loss = (dense._lower_loss + np.arange(p.size)) * dense._discretization
    inf = float(dense._infinity_mass)
    # the sums above each loss value l_k (strictly above), from the top
    s1 = np.concatenate((np.cumsum(p[::-1])[::-1][1:], [0.0]))
    s2 = np.concatenate((np.cumsum((p * np.exp(-loss))[::-1])[::-1][1:], [0.0]))
    at = inf + s1 - np.exp(loss) * s2  # delta at eps = l_k: decreasing in k
    out = np.empty(deltas.size)
    for j, delta in enumerate(deltas):
        if delta < inf:
            out[j] = np.inf
            continue
        k = int(np.searchsorted(-at, -delta, side="left"))  # first k with at[k] <= delta
        if k == 0:
            # delta at or above delta(l_0): the segment below l_0 (all the mass above)
            tot1, tot2 = inf + p.sum(), float((p * np.exp(-loss)).sum())
            eps = math.log((tot1 - delta) / tot2) if tot1 > delta else -np.inf
        else:
            eps = math.log((inf + s1[k - 1] - delta) / s2[k - 1]) if s2[k - 1] > 0 else loss[k]
            eps = min(max(eps, loss[k - 1]), loss[k])
        out[j] = max(eps, 0.0)
    return out


def epsilons_of_pld(d, deltas: np.ndarray) -> np.ndarray:
    """:func:`epsilons_of_pmf` of a dp_accounting ``PrivacyLossDistribution``: the larger of its
    two directions (its ``get_epsilon_for_delta``)."""
    return np.maximum(epsilons_of_pmf(d._pmf_remove, deltas), epsilons_of_pmf(d._pmf_add, deltas))
