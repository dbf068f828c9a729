"""Printing certified numbers: epsilon rounded up, brackets rounded outward.

A printed epsilon must never be below the certified one (a user copies what
is printed), and a printed bracket must contain the certified bracket.
"""

from __future__ import annotations

import math

__all__ = ["round_up", "round_down", "bracket"]


def round_up(x: float, decimals: int) -> str:
    """``x`` printed with ``decimals`` decimals, rounded *up*: a reported epsilon
    (or the upper end of a bracket) is never shown below the certified value."""
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    scale = 10 ** decimals
    r = math.ceil(x * scale) / scale
    while r < x:  # (x * scale can round down in binary)
        r += 1.0 / scale
    return f"{r:.{decimals}f}"


def round_down(x: float, decimals: int) -> str:
    """``x`` rounded *down* to ``decimals`` decimals (lower ends of brackets)."""
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    scale = 10 ** decimals
    r = math.floor(x * scale) / scale
    while r > x:
        r -= 1.0 / scale
    return f"{r:.{decimals}f}"


def bracket(lo: float, hi: float, decimals: int = 6) -> str:
    """``[lo, hi]`` rounded outward: the printed bracket contains the certified one."""
    return f"[{round_down(lo, decimals)}, {round_up(hi, decimals)}]"
