"""Printing certified numbers: epsilon rounded up, brackets rounded outward.

A printed epsilon must never be below the certified one (a user copies what
is printed), and a printed bracket must contain the certified bracket.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

#: enough digits for every double (its exact decimal has at most 767 significant digits)
_EXACT = Context(prec=800)

__all__ = ["round_up", "round_down", "bracket"]


def round_up(x: float, decimals: int) -> str:
    """``x`` printed with ``decimals`` decimals, rounded *up*: a reported epsilon
    (or the upper end of a bracket) is never shown below the certified value."""
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    # (exact decimal arithmetic: a binary x * 10^d rounds, and a printed
    # decimal is not the double it was formatted from)
    return format(Decimal(x).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_CEILING, context=_EXACT), "f")


def round_down(x: float, decimals: int) -> str:
    """``x`` rounded *down* to ``decimals`` decimals (lower ends of brackets)."""
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return format(Decimal(x).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_FLOOR, context=_EXACT), "f")


def bracket(lo: float, hi: float, decimals: int = 6) -> str:
    """``[lo, hi]`` rounded outward: the printed bracket contains the certified one."""
    return f"[{round_down(lo, decimals)}, {round_up(hi, decimals)}]"
