"""Bad inputs fail at the boundary with ValueError/TypeError naming the parameter."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import pld

BAD = (ValueError, TypeError)

#: non-positive, non-finite and non-real values for a parameter that must be a positive real
BAD_POSITIVE_REALS = [
    pytest.param(0.0, id="zero"),
    pytest.param(-1.0, id="negative"),
    pytest.param(-0.0, id="minus-zero"),
    pytest.param(math.nan, id="nan"),
    pytest.param(np.float64("nan"), id="np-nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param("1.0", id="string"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="None"),
    pytest.param(1 + 2j, id="complex"),
    pytest.param([1.0], id="list"),
]


def raises_naming(name: str):
    """pytest.raises for ValueError/TypeError whose message names ``name`` as a word."""
    return pytest.raises(BAD, match=rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])")


# ---------------------------------------------------------------------------
# mechanism parameters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_gaussian_sigma(value):
    with raises_naming("sigma"):
        pld.Gaussian(value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_gaussian_sensitivity(value):
    with raises_naming("sensitivity"):
        pld.Gaussian(1.0, sensitivity=value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_laplace_scale(value):
    with raises_naming("scale"):
        pld.Laplace(value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_laplace_sensitivity(value):
    with raises_naming("sensitivity"):
        pld.Laplace(1.0, sensitivity=value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_randomized_response_epsilon(value):
    with raises_naming("epsilon"):
        pld.RandomizedResponse(value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_pure_dp_epsilon(value):
    with raises_naming("epsilon"):
        pld.PureDP(value)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_discrete_laplace_scale(value):
    with raises_naming("scale"):
        pld.DiscreteLaplace(value)


@pytest.mark.parametrize("value", [0, -1, 1.5, math.nan, math.inf, "2", True, None])
def test_discrete_laplace_sensitivity(value):
    with raises_naming("sensitivity"):
        pld.DiscreteLaplace(1.0, sensitivity=value)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "1", True, None])
def test_approx_dp_epsilon(value):
    with raises_naming("epsilon"):
        pld.ApproxDP(value, 1e-5)


@pytest.mark.parametrize("value", [1.0, 1.5, -1e-9, -1.0, math.nan, math.inf, "0.1", True, None])
def test_approx_dp_delta(value):
    with raises_naming("delta"):
        pld.ApproxDP(1.0, value)


def test_valid_edge_values_are_accepted():
    pld.ApproxDP(0.0, 0.0)
    pld.ApproxDP(0.0, 0.5)
    pld.Gaussian(np.float32(2.0), sensitivity=np.int64(3))
    pld.Gaussian(2)  # int is a real
    pld.DiscreteLaplace(1.0, sensitivity=np.int32(2))
    pld.PoissonSampled(pld.Gaussian(1.0), 1.0)
    pld.PoissonSampled(pld.Gaussian(1.0), 1e-12)


# ---------------------------------------------------------------------------
# FromPMFs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("p,q,name", [
    pytest.param([0.5, 0.4], [0.5, 0.5], "p", id="p-sums-to-0.9"),
    pytest.param([0.5, 0.5], [0.6, 0.5], "q", id="q-sums-to-1.1"),
    pytest.param([1.2, -0.2], [0.5, 0.5], "p", id="p-negative-entry"),
    pytest.param([0.5, 0.5], [-0.5, 1.5], "q", id="q-negative-entry"),
    pytest.param([math.nan, 1.0], [0.5, 0.5], "p", id="p-nan"),
    pytest.param([0.5, 0.5], [math.inf, 0.0], "q", id="q-inf"),
    pytest.param([], [], "p", id="empty"),
    pytest.param([[0.5, 0.5]], [[0.5, 0.5]], "p", id="2-d"),
    pytest.param(["a", "b"], [0.5, 0.5], "p", id="p-strings"),
    pytest.param([0.5, 0.5], None, "q", id="q-None"),
    pytest.param([0.5, 0.5], "ab", "q", id="q-string"),
])
def test_from_pmfs_bad_vectors(p, q, name):
    with raises_naming(name):
        pld.FromPMFs(p, q)


@pytest.mark.parametrize("p,q", [
    ([0.5, 0.5], [0.2, 0.3, 0.5]),
    ([1.0], [0.5, 0.5]),
])
def test_from_pmfs_mismatched_lengths(p, q):
    with pytest.raises(ValueError) as info:
        pld.FromPMFs(p, q)
    msg = str(info.value)
    assert re.search(r"\bp\b", msg) and re.search(r"\bq\b", msg), msg
    assert "length" in msg


def test_from_pmfs_accepts_tuples_arrays_and_rounding():
    pld.FromPMFs((0.25, 0.75), np.array([0.5, 0.5]))
    pld.FromPMFs([0.1] * 10, [0.1] * 10)  # sums to 0.9999999999999999


# ---------------------------------------------------------------------------
# sampling and steps
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.0, -0.1, 1.0 + 1e-9, 1.5, math.nan, math.inf, "0.5", True, None])
def test_poisson_sampling_rate(value):
    with raises_naming("sampling_rate"):
        pld.PoissonSampled(pld.Gaussian(1.0), value)


@pytest.mark.parametrize("value", [1.0, "gaussian", None, pld.Gaussian(1.0).pld()])
def test_poisson_mechanism_type(value):
    with raises_naming("mechanism"):
        pld.PoissonSampled(value, 0.5)


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, math.nan, "0.01", True])
def test_dpsgd_sampling_rate(value):
    with raises_naming("sampling_rate"):
        pld.dpsgd(1.0, value, 100)


@pytest.mark.parametrize("value", BAD_POSITIVE_REALS)
def test_dpsgd_noise_multiplier(value):
    with raises_naming("noise_multiplier"):
        pld.dpsgd(value, 0.01, 100)


@pytest.mark.parametrize("value", [0, -1, -100, 1.5, 0.5, math.nan, math.inf, "10", True, None, 10 ** 13])
def test_dpsgd_steps(value):
    with raises_naming("steps"):
        pld.dpsgd(1.0, 0.01, value)


def test_dpsgd_sampling_scheme():
    with raises_naming("sampling"):
        pld.dpsgd(1.0, 0.01, 10, sampling="sliced")


@pytest.mark.parametrize("value", [0, -1, 1.5, math.nan, "3", True, None])
def test_self_compose_count(value):
    with raises_naming("count"):
        pld.Gaussian(1.0).pld().self_compose(value)


def test_integral_float_steps_are_accepted():
    assert pld.Gaussian(1.0).pld().self_compose(3.0).steps == 3
    assert pld.dpsgd(1.0, 0.01, 1e3).steps == 1000


def test_compose_type():
    with pytest.raises(TypeError):
        pld.Gaussian(1.0).pld().compose(pld.Gaussian(1.0))


@pytest.mark.parametrize("value", [0.0, -1e-3, math.nan, math.inf, "0.01", True])
def test_value_discretization_interval(value):
    with raises_naming("value_discretization_interval"):
        pld.Gaussian(1.0).pld(value_discretization_interval=value)


# ---------------------------------------------------------------------------
# queries
# ---------------------------------------------------------------------------

# (0 and 1 are answered: epsilon(0) is the largest loss, epsilon(1) = 0)
BAD_DELTAS = [
    pytest.param(-1e-6, id="negative"),
    pytest.param(1.5, id="above-one"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param("1e-6", id="string"),  # accepted (np.asarray(dtype=float)) before commit 0b7c7f7
    pytest.param(True, id="bool"),
    pytest.param(None, id="None"),
    pytest.param(np.array([1e-6, -0.0001]), id="array-with-negative"),
    pytest.param([1e-6, math.nan], id="list-with-nan"),
]


@pytest.fixture(scope="module")
def gauss():
    return pld.Gaussian(1.0).pld()


@pytest.mark.parametrize("value", BAD_DELTAS)
def test_epsilon_bounds_delta(gauss, value):
    with raises_naming("delta"):
        gauss.epsilon_bounds(value)


@pytest.mark.parametrize("value", BAD_DELTAS)
def test_epsilon_delta(gauss, value):
    with raises_naming("delta"):
        gauss.epsilon(value)


@pytest.mark.parametrize("value", [0.0, 1.0, -1.0, math.nan, "x"])
def test_explain_delta(gauss, value):
    with raises_naming("delta"):
        gauss.explain(value)


# (+-inf are answered: delta(inf) is the mass at +inf, delta(-inf) = 1)
@pytest.mark.parametrize("value", [
    pytest.param(math.nan, id="nan"),
    pytest.param("1.0", id="string"),  # returned delta(1.0) before commit 0b7c7f7
    pytest.param(True, id="bool"),  # returned delta(1.0) before commit 0b7c7f7
    pytest.param(np.array([True, False]), id="bool-array"),
    pytest.param(None, id="None"),
    pytest.param(np.array([1.0, math.nan]), id="array-with-nan"),
])
def test_delta_bounds_epsilon(gauss, value):
    with raises_naming("epsilon"):
        gauss.delta_bounds(value)
    with raises_naming("epsilon"):
        gauss.delta(value)


def test_distribution_arguments(gauss):
    with raises_naming("direction"):
        gauss.distribution(direction="both")
    with raises_naming("side"):
        gauss.distribution(side="middle")
    with raises_naming("delta"):
        gauss.distribution(delta=0.0)


def test_good_queries_return_python_floats(gauss):
    lo, hi = gauss.epsilon_bounds(1e-5)
    assert type(lo) is float and type(hi) is float
    lo, hi = gauss.delta_bounds(1.0)
    assert type(lo) is float and type(hi) is float
    lo, hi = gauss.delta_bounds(-2.0)  # negative epsilon is a legal query
    assert 0.0 <= lo <= hi <= 1.0


# ---------------------------------------------------------------------------
# the shared checks themselves (pld._validate), as rdp, exact and curves use them
# ---------------------------------------------------------------------------


def test_real_scalar_names_parameter_and_range():
    from pld import _validate as v

    assert v.real_scalar("x", np.float64(0.5), low=0.0, high=1.0) == 0.5
    assert v.real_scalar("x", np.array(2.0), low=0.0) == 2.0  # a 0-d array is one number
    assert v.real_scalar("x", math.inf, low=0.0) == math.inf  # the range allows it
    with pytest.raises(ValueError, match=r"x must be in \(0\.0, inf\)"):
        v.real_scalar("x", math.inf, low=0.0, high=math.inf, low_open=True, high_open=True)
    with pytest.raises(TypeError, match="x must be a scalar"):
        v.real_scalar("x", [1.0, 2.0])
    for bad in ("0.5", None, True, 1j):
        with pytest.raises(TypeError, match="x must be a real number"):
            v.real_scalar("x", bad)


def test_count_refuses_fractions_as_values_and_non_numbers_as_types():
    from pld import _validate as v

    assert v.count("steps", 6000.0) == 6000 and v.count("steps", np.int64(0)) == 0
    for bad in (2.5, math.nan, -1):
        with pytest.raises(ValueError, match="steps must be an integer >= 0"):
            v.count("steps", bad)
    for bad in ("3", True, None):
        with pytest.raises(TypeError, match="steps"):
            v.count("steps", bad)


def test_choice_lists_the_options():
    from pld import _validate as v

    assert v.choice("conversion", "classic", ("improved", "classic")) == "classic"
    with pytest.raises(ValueError, match="conversion must be one of 'improved', 'classic', got 'tight'"):
        v.choice("conversion", "tight", ("improved", "classic"))
    with pytest.raises(TypeError, match="conversion"):
        v.choice("conversion", 1, ("improved", "classic"))


@pytest.mark.parametrize("sampling", ["balls_in_bins", "shuffle"])
@pytest.mark.parametrize("sigma", [0.03, 0.09, 1001.0, 1e4, 1e308])
def test_run_level_noise_outside_its_range_fails_fast(sampling, sigma):
    """A round of two or more steps is built for noise multipliers in [0.1, 1000]: below, its
    sums overflowed (sigma 0.03: OverflowError); above, its grids grew for minutes and then
    raised MemoryError (sigma 1e4, 1e6).  Now a ValueError that names the noise multiplier, its
    range and the bounds that still apply, before any grid is built."""
    with pytest.raises(ValueError, match=r"noise multiplier .* must be in \[0.1, 1000\]"):
        pld.dpsgd(sigma, 0.01, 100, sampling=sampling).epsilon_bounds(1e-5)


@pytest.mark.parametrize("sigma", [0.1, 1000.0])
def test_run_level_noise_at_its_range_ends_works(sigma):
    lo, hi = pld.dpsgd(sigma, 0.5, 200, sampling="balls_in_bins").epsilon_bounds(1e-8)
    assert 0.0 <= lo <= hi < math.inf
    # (one step per round is the Gaussian mechanism itself: no range)
    lo1, hi1 = pld.dpsgd(sigma * 1e3, 1.0, 10, sampling="balls_in_bins").epsilon_bounds(1e-8)
    assert 0.0 <= lo1 <= hi1 < math.inf


def test_subnormal_sampling_rate_is_a_rate_like_any():
    """q = 1e-320: 1 / q is inf, which the loader's step count rounded (OverflowError); it is
    no whole number of steps, and the run is (almost) free of the record."""
    lo, hi = pld.dpsgd(1.0, 1e-320, 100).epsilon_bounds(1e-5)
    assert 0.0 <= lo <= hi <= 1e-6
