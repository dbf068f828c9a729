"""Random allocation's pair kernels against brute force over all pairs.

``group_pairs`` sums each product into the geometric group of ``rv_k + hv_j``
by runs of ``k`` and block sums; the reference below forms every pair, finds
its group by the definition (the first boundary ``g0 e^{(i+1) log_ratio}``
above the sum) and adds with ``math.fsum``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pld.kernels import group_pairs


def _brute(rq_lo, rq_hi, rp_lo, rp_hi, rv, hq_lo, hq_hi, hp_lo, hp_hi, hv, g0, log_ratio, n_out):
    bound = np.array([g0 * math.exp((i + 1) * log_ratio) for i in range(n_out)])
    terms = [[[] for _ in range(n_out)] for _ in range(6)]
    for k in range(rv.size):
        for j in range(hv.size):
            s = rv[k] + hv[j]
            i = min(int(np.searchsorted(bound, s, side="right")), n_out - 1)
            ql, pl = max(rq_lo[k], 0.0), max(rp_lo[k], 0.0)
            for slot, x in enumerate((ql * hq_lo[j], rq_hi[k] * hq_hi[j], ql * hp_lo[j],
                                      rq_hi[k] * hp_hi[j], pl * hq_lo[j], rp_hi[k] * hq_hi[j])):
                terms[slot][i].append(x)
    return [np.array([math.fsum(t) for t in slot]) for slot in terms]


@pytest.mark.parametrize("seed", range(12))
def test_group_pairs_equals_every_pair_summed(seed):
    rng = np.random.default_rng(seed)
    n, m, n_out = int(rng.integers(0, 120)), int(rng.integers(1, 80)), int(rng.integers(1, 200))
    rv = np.sort(rng.random(n) * float(rng.choice([1.0, 10.0, 1000.0])))
    rv[: n // 5] = 0.0  # (ties: several labels at the same value)
    rv = np.sort(rv)
    hv = np.sort(1.0 + rng.random(m) * float(rng.choice([1.0, 100.0, 1e6])))
    masses = [rng.random(n) - 0.05 for _ in range(4)] + [rng.random(m) for _ in range(4)]
    g0, lr = float(rng.uniform(0.5, 1.5)), float(rng.choice([1e-3, 2e-3, 0.1]))
    args = (*masses[:4], rv, *masses[4:], hv, g0, lr, n_out)
    got = group_pairs(*args)
    want = _brute(*args)
    for g, w in zip(got, want):
        # the same pairs in the same groups; sums to the round-off of n m terms
        np.testing.assert_allclose(g, w, rtol=4 * (n * m + 4) * 2.0 ** -53, atol=1e-300)
