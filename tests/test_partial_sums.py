"""Shared partial sums of random allocation's geometric rounds, and the sizing read of long
explorations (a spread in blocks of loss).

* ``pld.mechanisms.allocation.partial_sums``: a round's laws do not depend on which round
  was built first (the memo's rule fixes every partial sum); a round of ``t + 1`` steps
  built after one of ``t`` takes at most ``popcount(t + 1)`` sums; two threads asking for
  one entry compute it once; an error is not memoised.
* ``pld.engine.windows._spread_blocks``: a mean-preserving spread, so ``psi`` from it lies
  between the exact ``psi`` and that plus ``theta`` times a block's width (checked at
  every theta of a grid, against ``logsumexp`` of the points).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from pld.engine import windows
from pld.mechanisms.allocation import geometric, partial_sums


def _laws_arrays(laws):
    upper, lower, info = laws
    out = []
    for side in (upper, lower):
        for direction in (side.remove, side.add):
            out.extend(np.asarray(x) for x in direction)
    return out, info


def _cold():
    geometric.geometric_laws.cache_clear()
    partial_sums.clear()


@pytest.mark.parametrize("sigma, t", [(0.5, 20), (0.45, 23), (0.6, 7)])
def test_a_round_is_the_same_whichever_round_was_built_first(sigma, t):
    """Laws of ``t + 1`` steps built cold, and after the round of ``t`` steps (whose
    partial sums they then share), are the same arrays bit for bit."""
    _cold()
    alone, info_alone = _laws_arrays(geometric.geometric_laws(sigma, t + 1, 0.02))
    _cold()
    geometric.geometric_laws(sigma, t, 0.02)
    after, info_after = _laws_arrays(geometric.geometric_laws(sigma, t + 1, 0.02))
    assert len(alone) == len(after)
    for x, y in zip(alone, after):
        assert np.array_equal(x, y)
    assert info_alone == info_after
    _cold()


@pytest.mark.parametrize("t", [20, 23, 31, 48])
def test_the_next_round_takes_at_most_popcount_sums(monkeypatch, t):
    """After the round of ``t`` steps, the round of ``t + 1`` adds at most
    ``popcount(t + 1)`` partial sums per side (from cold: ``bit_length - 1 + popcount - 1``)."""
    from pld import kernels

    calls = {"spread": 0, "merge": 0}
    spread, merge = kernels.geometric_sum_spread, kernels.geometric_sum_merge

    def counted_spread(*a):
        calls["spread"] += 1
        return spread(*a)

    def counted_merge(*a):
        calls["merge"] += 1
        return merge(*a)

    monkeypatch.setattr(kernels, "geometric_sum_spread", counted_spread)
    monkeypatch.setattr(kernels, "geometric_sum_merge", counted_merge)
    _cold()
    geometric.geometric_laws(0.5, t, 0.02)
    cold = (t.bit_length() - 1) + (bin(t).count("1") - 1)
    assert calls == {"spread": cold, "merge": cold}
    calls.update(spread=0, merge=0)
    geometric.geometric_laws(0.5, t + 1, 0.02)
    assert 1 <= calls["spread"] <= bin(t + 1).count("1")
    assert calls["merge"] == calls["spread"]
    _cold()


def test_two_threads_compute_one_entry_once():
    built = []
    gate = threading.Event()

    def first():
        built.append(1)
        gate.wait(5.0)
        return np.ones(4)

    def add(x, y, m):
        return x + y

    out = []
    threads = [threading.Thread(target=lambda: out.append(partial_sums.partial_sum(("t", 1), 4, first, add,
                                                                                    lambda v: v.nbytes)))
               for _ in range(2)]
    for th in threads:
        th.start()
    gate.set()
    for th in threads:
        th.join()
    assert built == [1]
    assert len(out) == 2 and all(np.array_equal(v, np.full(4, 4.0)) for v in out)
    partial_sums.clear()


def test_an_error_is_raised_to_every_caller_and_not_kept():
    def first():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        partial_sums.partial_sum(("e", 2), 3, first, lambda x, y, m: x, lambda v: 0)
    ok = partial_sums.partial_sum(("e", 2), 3, lambda: 1.0, lambda x, y, m: x + y, lambda v: 0)
    assert ok == 3.0
    with pytest.raises(ValueError, match="m >= 1"):
        partial_sums.partial_sum(("e", 2), 0, lambda: 1.0, lambda x, y, m: x + y, lambda v: 0)
    partial_sums.clear()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 3000), blocks=st.sampled_from([3, 17, 256]),
       spread=st.floats(0.1, 40.0))
def test_the_sizing_spread_brackets_psi(seed, n, blocks, spread):
    rng = np.random.default_rng(seed)
    loss = np.sort(rng.normal(0.0, spread / 6, n)) if seed % 2 else rng.uniform(-spread, spread, n)
    log_p = rng.normal(0.0, 8.0, n)
    log_p[rng.random(n) < 0.05] = -np.inf
    log_p -= logsumexp(log_p)
    width = (float(loss.max()) - float(loss.min())) / blocks
    L, P = windows._spread_blocks(loss, log_p, width)
    assert L.size <= 2 * (blocks + 1)
    ok = np.isfinite(P)
    assert L[ok].min() >= loss.min() and L[ok].max() <= loss.max()
    # same mass and mean
    assert logsumexp(P) == pytest.approx(0.0, abs=1e-9)
    fin = np.isfinite(log_p)
    mean = float(np.sum(np.exp(log_p[fin]) * loss[fin]))
    assert float(np.sum(np.exp(P[ok]) * L[ok])) == pytest.approx(mean, abs=1e-9 * (1.0 + abs(loss).max()))
    for theta in (-30.0, -1.0, 0.3, 1.0, 5.0, 100.0):
        exact = logsumexp(log_p[fin] + theta * loss[fin])
        got = logsumexp(P[ok] + theta * L[ok])
        slack = 1e-9 * (1.0 + abs(exact))
        assert exact - slack <= got <= exact + abs(theta) * width + slack, theta
