"""Partial sums ``S_m = Y_1 + ... + Y_m`` of one grid family, shared between rounds.

A round of ``t`` steps needs ``S_t``; a k-of-t round's upper end composes block rounds of
``t_1`` and ``t_1 + 1`` steps (:meth:`pld.mechanisms.allocation.RandomAllocation.blocks`),
whose sums differ by one coordinate.  Each ``S_m`` here is defined by one rule,

    ``S_m = S_(m - b) + S_b``, ``b`` the highest set bit of ``m``; ``S_(2b) = S_b + S_b``,

so its value does not depend on which round asked first (the bits of every law are a
function of its own arguments), and a round computes the sums the binary method does
(``bit_length - 1`` doublings, ``popcount - 1`` additions, the smaller partial sums
first: on a relative grid each sum's spread or merge costs in proportion to its size,
and adding the largest parts first widened upper ends by up to 3e-6 relative).
``S_(m + 1)`` then reuses every doubling of ``S_m`` and, for its low bits, the
partial sums the two share: at most ``popcount(m + 1)`` sums instead of about
``log2(m) + popcount(m + 1)``.

Entries are memoised per ``(family, m)`` while in use and shortly after (a bounded
memo); two threads asking for the same entry compute it once (the second waits).
Waits only go to smaller ``m``, so they cannot form a cycle.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

#: bytes of memoised arrays kept once their rounds are built
_MEMO_BYTES = 96 << 20


class _Entry:
    __slots__ = ("done", "value", "error", "nbytes")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.nbytes = 0


_memo: OrderedDict[tuple, _Entry] = OrderedDict()
_memo_bytes = 0
_lock = threading.Lock()


def clear() -> None:
    """Forget every finished entry (benchmarks' cold runs; entries in flight stay)."""
    global _memo_bytes
    with _lock:
        for key in [k for k, e in _memo.items() if e.done.is_set()]:
            _memo_bytes -= _memo.pop(key).nbytes


def _evict() -> None:
    global _memo_bytes
    for key in list(_memo):
        if _memo_bytes <= _MEMO_BYTES:
            return
        e = _memo[key]
        if e.done.is_set():
            _memo_bytes -= e.nbytes
            del _memo[key]


def partial_sum(family: Hashable, m: int, first: Callable[[], Any], add: Callable[[Any, Any, int], Any],
                nbytes: Callable[[Any], int]) -> Any:
    """``S_m`` of ``family`` by the rule of the module: ``first()`` is ``S_1``,
    ``add(x, y, m)`` the sum of ``S_i`` and ``S_j`` with ``i + j = m``; ``nbytes(value)``
    sizes an entry for the memo."""
    global _memo_bytes
    if m < 1:
        raise ValueError(f"a partial sum needs m >= 1, got {m}")
    key = (family, m)
    with _lock:
        entry = _memo.get(key)
        owner = entry is None
        if owner:
            entry = _memo[key] = _Entry()
        else:
            _memo.move_to_end(key)
    assert entry is not None
    if not owner:
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
        return entry.value
    try:
        if m == 1:
            value = first()
        else:
            top = 1 << (m.bit_length() - 1)
            if top == m:
                half = partial_sum(family, m // 2, first, add, nbytes)
                value = add(half, half, m)
            else:
                value = add(partial_sum(family, m - top, first, add, nbytes),
                            partial_sum(family, top, first, add, nbytes), m)
        entry.value = value
        entry.nbytes = int(nbytes(value))
    except BaseException as exc:
        entry.error = exc
        with _lock:
            if _memo.get(key) is entry:
                del _memo[key]
        entry.done.set()
        raise
    with _lock:
        _memo_bytes += entry.nbytes
        entry.done.set()
        _evict()
    return value
