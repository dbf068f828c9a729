"""The block power (``pld.engine.self_compose._block_power_start``) keeps the certificate and the width.

A long self-composition may be built as a power of a block of ``c`` steps, the
block re-gridded to a coarser spacing, then a power of blocks (and the steps
over a whole number of blocks convolved in).  Truths used here do not come from
the composer:

* the closed-form delta of a composition of Gaussian mechanisms
  (``pld.baselines.exact``): the dominating grid must stay above it and the dominated
  grid below it, at every epsilon asked, whatever the block size and the
  remainders (a step miscounted moves epsilon by far more than the bracket);
* the same grids built by the single power, on the same settings: the block
  power must not widen the bracket by more than a few percent of its width.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pld
from pld.baselines.exact import gaussian_delta, gaussian_epsilon
from pld.engine import self_compose as C


def _spy(monkeypatch) -> list:
    """Record which sides the block power composed (it returned a start)."""
    seen: list = []
    real = C._block_power_start

    def spy(step, base, h, levels, pessimistic):
        out = real(step, base, h, levels, pessimistic)
        if out is not None:
            seen.append(pessimistic)
        return out

    monkeypatch.setattr(C, "_block_power_start", spy)
    return seen


def test_block_size_prefers_a_whole_number_of_blocks():
    h = 1e-4
    bias = h * h / 6
    # c >= (4 h)^2 / (4 * 0.1 * h^2 / 6) = 240; 14063 = 7^3 * 41 has the divisor 287 in [240, 480)
    assert C._block_size(14063, h, bias) == 287
    # n - 1 blocks a multiple of 4 (the second power's level squared twice),
    # then the fewest steps over: 14057 is a prime
    c = C._block_size(14057, h, bias)
    fits = [k for k in range(240, 480) if (14057 // k - 1) % 4 == 0]
    assert c in fits and 14057 % c == min(14057 % k for k in fits)
    assert C._block_size(16 * 240 - 1, h, bias) is None  # fewer than 16 blocks
    assert C._block_size(10**6, h, 0.0) is None


@settings(max_examples=12, deadline=None)
@given(steps=st.sampled_from([4001, 14057, 14063, 65536, 200_003]),
       scale=st.floats(0.5, 3.0), delta_exp=st.integers(3, 10))
def test_block_power_brackets_the_exact_gaussian_composition(steps, scale, delta_exp):
    with pytest.MonkeyPatch.context() as mp:
        # (small steps too, and where the single power would be cheaper: force the path)
        mp.setattr(C, "BLOCK_MIN_POINTS", 64)
        mp.setattr(C, "_block_pays", lambda *a: True)
        seen = _spy(mp)
        _check_gaussian(seen, steps, scale, delta_exp)


def _check_gaussian(seen: list, steps: int, scale: float, delta_exp: int) -> None:
    sigma = scale * math.sqrt(steps)  # mu = 1 / scale: epsilon of a few units
    mu = math.sqrt(steps) / sigma
    delta = 10.0 ** -delta_exp
    p = pld.Gaussian(sigma).pld().self_compose(steps)
    pair = p.grids(delta)["remove"]
    assert True in seen, "the dominating side did not take the block power"
    exact = float(gaussian_epsilon(delta, mu))
    pess, opt = pair.dominating, pair.dominated
    assert opt.epsilon(delta) <= exact <= pess.epsilon(delta)
    eps = exact + mu * np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    d_exact = np.asarray(gaussian_delta(eps, mu))
    assert np.all(pess.delta(eps) >= d_exact * (1 - 1e-12))
    assert np.all(opt.delta(eps) <= d_exact * (1 + 1e-12))


@pytest.mark.parametrize("sigma, q, steps, delta", [
    (1.1, 256 / 60000, 14063, 1e-5),   # MNIST: both sides' bracket within 10% of the single power's
    (0.7, 5e-4, 200_000, 1e-5),        # a long run whose single power does not fit one transform
])
def test_block_power_keeps_the_bracket_width(monkeypatch, sigma, q, steps, delta):
    seen = _spy(monkeypatch)
    pair = pld.dpsgd(sigma, q, steps).grids(delta)["remove"]
    assert True in seen
    block = (pair.dominated.epsilon(delta), pair.dominating.epsilon(delta))
    monkeypatch.setattr(C, "_block_power_start", lambda *a: None)
    # (a fresh PLD: nothing cached; the same settings)
    pess, opt = pld.dpsgd(sigma, q, steps)._engine().composer.materialize("remove", *pair.settings)
    plain = (opt.epsilon(delta), pess.epsilon(delta))
    # both certified: they intersect; the block's bracket is no more than 10%
    # wider (each side's blocks may cost a tenth of its first discretisation's
    # bias, BLOCK_BIAS_SHARE: about 4% of the width each on MNIST, where both
    # sides take the block power and the dominated side is near its ideal)
    assert block[0] <= plain[1] and plain[0] <= block[1]
    assert block[1] - block[0] <= 1.10 * (plain[1] - plain[0]), (block, plain)


@pytest.mark.parametrize("sigma, q, steps", [(1.0, 1e-3, 10**8), (1.0, 1e-3, 10**9), (1.1, 0.00427, 14063),
                                             (0.7, 5e-4, 200000), (2.0, 1e-3, 10**6)])
def test_second_power_precheck_declines_only_powers_that_fail(monkeypatch, sigma, q, steps):
    """The block power's pre-check (``_second_power_may_fit``) may only skip
    work: wherever it says no, the first power and re-grids, built anyway,
    lead to a second power that does not fit."""
    from pld.engine import self_compose as sc

    verdicts, results = [], []
    real_check, real_power = sc._second_power_may_fit, sc.self_compose_powers

    def check(*args):
        verdicts.append(real_check(*args))
        results.append([])
        return True

    def power(g, *args, **kwargs):
        out = real_power(g, *args, **kwargs)
        if results:
            results[-1].append(out)
        return out

    monkeypatch.setenv("PLD_THREADS", "1")  # (one thread: the calls in order)
    monkeypatch.setattr(sc, "_second_power_may_fit", check)
    monkeypatch.setattr(sc, "self_compose_powers", power)
    pld.dpsgd(sigma * (1 + 3e-11), q, steps).epsilon_bounds(1e-6)
    assert verdicts
    for ok, calls in zip(verdicts, results):
        # calls: the first power, then (if it succeeded) the second
        if not ok:
            assert calls and (calls[0] is None or (len(calls) > 1 and calls[1] is None))
