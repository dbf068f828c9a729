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


def _spread_brute(r, dr, hv, hm, g0, log_ratio, n_out):
    """Every pair ``k dr + hv_j`` spread onto the two grid points around it (the
    fractions by the definition), summed with ``math.fsum``."""
    g = g0 * np.exp(np.arange(n_out) * log_ratio)
    terms = [[] for _ in range(n_out)]
    over = []
    for j in range(hv.size):
        for k in range(r.size):
            w, s = r[k] * hm[j], k * dr + hv[j]
            i = int(np.searchsorted(g, s, side="left")) - 1  # (g_i < s <= g_{i+1})
            i = max(i, 0)
            if i >= n_out - 1:
                over.append(w)
                continue
            f = min(max((s - g[i]) / (g[i + 1] - g[i]), 0.0), 1.0)
            terms[i].append(w * (1.0 - f))
            terms[i + 1].append(w * f)
    return np.array([math.fsum(t) for t in terms]), math.fsum(over)


@pytest.mark.parametrize("seed", range(10))
def test_sum_spread_geometric_is_a_spread_of_every_pair_and_its_ranges_are_its_entries(seed):
    """The kernel against every pair spread by hand (to its rounding slack), and any cut of
    its output range into two computed apart (two threads do so) equal to the whole, bit for bit."""
    from pld.kernels import sum_spread_geometric

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 150)), int(rng.integers(1, 60))
    lr = float(rng.choice([2e-3, 0.05, 0.3]))
    g0 = 1.0
    r = rng.random(n) * (rng.random(n) < 0.8)
    r[int(rng.integers(0, n)):] *= float(rng.choice([0.0, 1.0]))  # (trailing zeros, or not)
    hm = rng.random(m)
    hv = np.sort(g0 * np.exp(rng.random(m) * 3.0))
    dr = float(rng.choice([1e-3, 0.05, 0.7]))
    n_out = int(math.ceil(math.log((n * dr + hv[-1]) / g0) / lr * float(rng.choice([0.6, 1.2])))) + 2
    g, whole, over = sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, 0, n_out)
    ref, ref_over = _spread_brute(r, dr, hv, hm, g0, lr, n_out)
    slack = 32.0 * 2.0 ** -53 / math.expm1(lr) + 8.0 * 2.0 ** -53
    tol = 2 * slack * float(np.sum(r) * np.sum(hm)) + 1e-12 * (ref + float(np.sum(r) * np.sum(hm)))
    assert np.all(whole >= ref - 1e-15) and np.all(whole - ref <= tol)
    assert over == pytest.approx(ref_over, rel=1e-12, abs=1e-300)
    for cut in sorted({0, 1, n_out - 1, n_out, *rng.integers(0, n_out + 1, size=6).tolist()}):
        _, first, _ = sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, 0, cut)
        _, second, over2 = sum_spread_geometric(r, dr, hv, hm, g0, lr, n_out, cut, n_out)
        assert np.array_equal(first[cut:], np.zeros(n_out - cut)) and np.array_equal(second[:cut], np.zeros(cut))
        assert np.array_equal(first + second, whole) and over2 == over


def _every_pair_rounded_up(ca, cb, hv, g):
    """The law of ``A + B`` by the definition: every pair of cells, each at its top, each sum
    at the first point of ``g`` at or above it (beyond the last: ``over``), summed exactly."""
    terms: list[list[float]] = [[] for _ in range(g.size + 1)]
    for i in range(ca.size):
        for j in range(cb.size):
            k = int(np.searchsorted(g, hv[i + 1] + hv[j + 1], side="left"))
            terms[k].append(ca[i] * cb[j])
    law = np.array([math.fsum(t) for t in terms])
    return law[:-1], law[-1]


@pytest.mark.parametrize("seed", range(16))
def test_sum_round_up_is_the_every_pair_law_rounded_up_by_its_error_bound_only(seed):
    # Two heavy coordinates' sum (random allocation's {N = 2} rounds): the kernel takes the
    # pairs in runs that land on one point of the geometric grid, each at its largest sum.
    # Stochastically at least the every-pair law (tail masses from the top), and above it
    # by no more than the rounding the kernel declares (a few parts in 1e12 here).
    from pld.kernels import sum_round_up

    rng = np.random.default_rng(seed)
    n, lr = int(rng.integers(1, 160)), float(rng.choice([0.002, 0.01, 0.05, 0.3]))
    b = float(rng.uniform(0.5, 3.0))
    hv = b * np.exp(np.arange(n + 1) * lr)
    g = 2.0 * b * np.exp(np.arange(int(rng.integers(2, n + 40))) * lr)
    ca = rng.random(n) ** 3 * np.exp(-np.arange(n) * rng.uniform(0.0, 0.3))
    cb = rng.random(n) * np.exp(-np.arange(n) * rng.uniform(0.0, 0.3))
    if n > 3:
        ca[rng.integers(0, n, n // 4)] = 0.0
    law, over = sum_round_up(ca, cb, hv, g)
    ref, ref_over = _every_pair_rounded_up(ca, cb, hv, g)
    tail = np.cumsum(np.append(law, over)[::-1])
    ref_tail = np.cumsum(np.append(ref, ref_over)[::-1])
    assert np.all(tail >= ref_tail)
    assert np.all(tail <= ref_tail * (1 + 1e-9) + 1e-300)
