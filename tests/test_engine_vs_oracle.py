"""pld's certified brackets against the independent tilted rounding oracle (tests/oracles.py).

Both are certified, so both contain the true epsilon and must intersect:
``pld.lower <= oracle.upper`` and ``oracle.lower <= pld.upper``.  A miss is a soundness bug in
one of the two (the oracle is numpy/scipy only and shares no code with pld).

* Short runs (T <= 100, in the default run): the oracle is cheap at a spacing that makes its
  bracket ~1e-4 of epsilon wide (<= 0.1% asserted), so an error of that size in either of
  pld's ends fails.
* Moderate DP-SGD settings (q in {1e-3, 1e-2}, T <= 2000, delta in {1e-6, 1e-10}; ``slow``):
  pld meets its target there; the oracle's bracket is ~0.1-1% wide (its width is T h), so the
  check catches any error larger than that.
* The hard settings of issue 19: containment (intersection with the oracle and with the
  reference intervals quoted in the issue / DESIGN.md) must hold, and so must the width
  target ``upper - lower <= 1e-4 * upper + 1e-6`` (met since the big-jump decomposition).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import pytest

import pld

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracles as O  # noqa: E402

RTOL, ATOL = 1e-4, 1e-6  # pld's default bracket target (restated: the instrument must not move)


def _target(hi: float) -> float:
    return RTOL * hi + ATOL


@functools.cache
def _engine(sigma, q, T, delta):
    return pld.dpsgd(sigma, q, T).epsilon_bounds(delta)


@functools.cache
def _oracle(sigma, q, T, delta, width=None, max_points=2**21):
    return O.subsampled_gaussian_epsilon(sigma, q, T, delta, width=width, max_points=max_points)


def _assert_intersects(eng, orc, what):
    lo, hi = eng
    # a few ulps for two independent floating-point computations
    slack = 1e-12 * max(1.0, abs(hi))
    assert lo <= orc.upper + slack and orc.lower <= hi + slack, (
        f"SOUNDNESS: {what}: pld bracket [{lo!r}, {hi!r}] and the rounding oracle's "
        f"[{orc.lower!r}, {orc.upper!r}] are disjoint: one of them excludes the true epsilon")


SHORT = [
    # sigma, q, T, delta        (oracle bracket at width 1e-4 eps; seconds on 2 shared cores)
    (1.0, 0.2, 10, 1e-5),       # [4.983985, 4.984442], 0.8 s
    (3.0, 0.3, 20, 1e-12),      # [3.710390, 3.710714], 0.8 s
    (2.0, 0.1, 100, 1e-8),      # [3.282205, 3.282715], 3.5 s
]


@pytest.mark.parametrize("sigma,q,T,delta", SHORT)
def test_short_runs_agree_with_a_fine_rounding_oracle(sigma, q, T, delta):
    lo, hi = _engine(sigma, q, T, delta)
    orc = _oracle(sigma, q, T, delta, width=1e-4 * hi)
    _assert_intersects((lo, hi), orc, f"sigma={sigma}, q={q}, T={T}, delta={delta}")
    # the check has teeth: the oracle pins epsilon to 0.1% or better
    assert orc.width <= 1e-3 * hi
    assert hi - lo <= _target(hi)


MODERATE = [
    # sigma, q, T, delta        (oracle bracket measured at max_points = 2**21)
    (1.0, 1e-2, 1000, 1e-6),    # [2.11728, 2.13175]
    (1.0, 1e-2, 2000, 1e-10),   # [4.25165, 4.29353]
    (1.5, 1e-3, 2000, 1e-6),    # [0.127576, 0.128553]
    (2.0, 1e-2, 500, 1e-10),    # [0.743791, 0.744754]
]


@pytest.mark.slow
@pytest.mark.parametrize("sigma,q,T,delta", MODERATE)
def test_moderate_settings_agree_with_the_rounding_oracle(sigma, q, T, delta):
    lo, hi = _engine(sigma, q, T, delta)
    orc = _oracle(sigma, q, T, delta)
    _assert_intersects((lo, hi), orc, f"sigma={sigma}, q={q}, T={T}, delta={delta}")
    # the check has teeth: the oracle pins epsilon to about 1% (its width is T h)
    assert orc.width <= 1.5e-2 * hi
    # and pld meets its own target here
    assert hi - lo <= _target(hi)


# ---- issue 19: the hard settings ----------------------------------------------------------------

HARD = {
    # name: (sigma, q, T, delta, oracle width asked, reference interval quoted in the issue)
    # measured on main 048fc5a: pld [0.09262, 0.22442], oracle [0.09774, 0.10150]
    "mnist-like-1e-12": (1.547, 3.12e-4, 4847, 1e-12, 4e-3, (0.100, 0.105)),
    # pld [0.06582, 0.07145], oracle [0.066588, 0.067839]; the quoted interval is DESIGN.md's
    "tiny-loss-1.1e-18": (4.0, 3.3e-4, 10_000, 1.1e-18, 1.5e-3, (0.0665, 0.0680)),
    # pld [0.003560, 0.13834], oracle [0.003553, 0.004323] (add direction [0.0035534, 0.0035683])
    "tiny-q-1e-10": (1.191, 1.3e-5, 3500, 1e-10, None, None),
}

# pld at 048fc5a missed the width target on all three by 700-9000x (RESULTS.md, "Coverage
# (issue 19)"); the big-jump decomposition of the remove direction (pld.engine.big_jumps) meets it.


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HARD))
def test_hard_settings_contain_the_truth(name):
    sigma, q, T, delta, width, ref = HARD[name]
    lo, hi = _engine(sigma, q, T, delta)
    assert 0.0 <= lo <= hi < math.inf
    orc = _oracle(sigma, q, T, delta, width=width, max_points=2**21)
    _assert_intersects((lo, hi), orc, name)
    if ref is not None:
        assert lo <= ref[1] and ref[0] <= hi, f"SOUNDNESS: {name}: pld [{lo}, {hi}] excludes the quoted {ref}"
        # the oracle reproduces the quoted interval (a check of the oracle itself)
        assert orc.lower <= ref[1] and ref[0] <= orc.upper


@pytest.mark.parametrize("name", list(HARD))
def test_hard_settings_meet_the_width_target(name):
    sigma, q, T, delta, _, _ = HARD[name]
    lo, hi = _engine(sigma, q, T, delta)
    assert hi - lo <= _target(hi), f"{name}: width {hi - lo:.3g} > target {_target(hi):.3g}"
