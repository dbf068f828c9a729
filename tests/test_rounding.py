"""Printed epsilons are rounded up and brackets outward (pld.report.rounding)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from pld.report.rounding import bracket, round_down, round_up

finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(finite, st.integers(min_value=0, max_value=8))
def test_round_up_is_never_below_and_within_one_unit(x, d):
    up, down = float(round_up(x, d)), float(round_down(x, d))
    assert down <= x <= up
    # exactly, as decimals: the printed text itself brackets the double
    assert Decimal(round_down(x, d)) <= Decimal(x) <= Decimal(round_up(x, d))
    assert up - x <= 10.0 ** -d * (1 + 1e-9) + 1e-9 * x
    assert x - down <= 10.0 ** -d * (1 + 1e-9) + 1e-9 * x
    assert len(round_up(x, d).split(".")[-1]) == d or d == 0


def test_examples():
    assert round_up(2.3817641, 4) == "2.3818" and round_down(2.3817641, 4) == "2.3817"
    assert round_up(0.718043, 4) == "0.7181"  # nearest would print 0.7180, below the certificate
    assert round_up(1.0, 3) == "1.000" and round_down(1.0, 3) == "1.000"
    # the double 7.016639 is 7.0166389999999996...: its lower end prints one unit down
    assert bracket(7.016639, 7.0170315) == "[7.016638, 7.017032]"
    assert bracket(7.0166395, 7.0170315) == "[7.016639, 7.017032]"
    assert round_up(0.1, 1) == "0.2"  # (the double 0.1 is 0.1000000000000000055...)
    assert round_up(float("inf"), 4) == "inf"
