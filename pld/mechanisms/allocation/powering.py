"""The ``m``-fold sum of a law by binary powering (the allocation rounds' label and light sums)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def by_squaring(x: T, m: int, square: Callable[[T], T], add: Callable[[T, T], T]) -> T:
    """``x`` summed ``m >= 1`` times: ``x`` squared repeatedly, the powers of ``m``'s set bits
    added (``add(result, power)``), lowest first; ``2 log2 m`` operations at most."""
    if m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    result: T | None = None
    cur = x
    while True:
        if m & 1:
            result = cur if result is None else add(result, cur)
        m >>= 1
        if not m:
            assert result is not None
            return result
        cur = square(cur)
