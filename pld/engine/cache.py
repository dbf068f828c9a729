"""What a PLD remembers between queries, and the threads that build its grids.

A :class:`pld.PLD` is immutable, but answering a query builds laws, grids and
settings that later queries reuse.  All of that lives in one
:class:`EngineCache` per PLD: one lock, bounded stores with one eviction
policy (least recently used), and the set of materialisations being built in
the background.  The worker threads are process-wide (:func:`side_pool`); the
independent parts of one construction run on threads of their own
(:func:`in_parallel`, :func:`in_background`).

Nothing here affects a certificate: an evicted entry is rebuilt from the same
inputs by the same deterministic code.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: entries per store; materialised grids are the large ones (a few MB each)
GRID_ENTRIES = 32
SMALL_ENTRIES = 256


class LRUStore:
    """A bounded mapping that forgets its least recently used entry first.

    Not locked itself: :class:`EngineCache` holds the one lock.
    """

    def __init__(self, capacity: int) -> None:
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._capacity = capacity

    def get(self, key: Hashable) -> Any:
        hit = self._data.get(key)
        if hit is not None:
            self._data.move_to_end(key)
        return hit

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def put(self, key: Hashable, value: Any) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._capacity:
            self._data.popitem(last=False)

    def keys(self) -> list:
        return list(self._data)

    def clear(self) -> None:
        self._data.clear()


class EngineCache:
    """Every cache, the lock and the in-flight builds of one PLD.

    Stores (all :class:`LRUStore`): ``laws`` (explored loss laws per direction
    and truncation budget), ``chernoff`` (tilt and Chernoff epsilon per
    direction and delta), ``grids`` (materialised grid pairs), ``spacings``
    (the grid spacing and tilt a query's refinement settled on, the first
    spacing it starts from, whether its grids use a side thread) and ``used``
    (settings behind each epsilon query, for :meth:`pld.PLD.explain`);
    ``scalars`` holds values computed once per PLD (total variation, largest
    losses).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.laws = LRUStore(SMALL_ENTRIES)
        self.chernoff = LRUStore(SMALL_ENTRIES)
        self.grids = LRUStore(GRID_ENTRIES)
        self.spacings = LRUStore(4 * SMALL_ENTRIES)
        self.used = LRUStore(SMALL_ENTRIES)
        self.scalars: dict[Hashable, Any] = {}
        #: materialisations being built in the background: key -> (pid, future)
        self.inflight: dict[Hashable, tuple[int, Future]] = {}

    def get(self, store: LRUStore, key: Hashable) -> Any:
        with self.lock:
            return store.get(key)

    def put(self, store: LRUStore, key: Hashable, value: Any) -> None:
        with self.lock:
            store.put(key, value)

    def scalar(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per key (a race computes it twice, harmlessly)."""
        with self.lock:
            if key in self.scalars:
                return self.scalars[key]
        value = compute()
        with self.lock:
            return self.scalars.setdefault(key, value)


_POOL_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []


def _forget_pool_after_fork() -> None:
    # a forked child has none of the parent's threads: a pool inherited from
    # the parent would accept work and never run it
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()
    _cores.cache_clear()  # (a child may be pinned elsewhere)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


_LOCAL = threading.local()


@contextlib.contextmanager
def single_threaded():
    """Within the block, queries made by this thread use no side threads (each
    builds its sides one after the other): for a worker that is already one of
    a pool with one per core, such as a sweep's.  Same results either way."""
    before = getattr(_LOCAL, "single", False)
    _LOCAL.single = True
    try:
        yield
    finally:
        _LOCAL.single = before


@functools.cache
def _cores() -> int:
    """The cores this process may run on, read once (the count reads ``/sys``
    on every call, and a query asks a few times): its CPU affinity where the
    platform has one (a worker pinned to one core of a larger machine, by
    ``taskset``, a container's cpuset or a job scheduler, gets no side
    threads, which would only share that core), else the machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        try:
            return max(1, len(affinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1


def side_pool() -> ThreadPoolExecutor | None:
    """Worker threads for the dominating sides (two, so that queries from two
    user threads do not wait on each other), or None on a single core.

    The threads start on first use, never at import.  ``PLD_THREADS=1`` in the
    environment turns the concurrency off (in this thread only:
    :func:`single_threaded`).
    """
    if getattr(_LOCAL, "single", False):
        return None
    threads = os.environ.get("PLD_THREADS")
    n = int(threads) if threads and threads.isdigit() else _cores()
    if n < 2:
        return None
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="pld-side"))
        return _POOL[0]


class Part:
    """A call computed on a thread of its own (:func:`in_background`); :meth:`result` waits for it."""

    def __init__(self, call: Callable[[], Any], concurrent: bool) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        ctx = contextvars.copy_context()
        if concurrent:
            self._thread = threading.Thread(target=self._run, args=(call, ctx), daemon=True, name="pld-part")
            self._thread.start()
        else:
            self._run(call, ctx)

    def _run(self, call: Callable[[], Any], ctx: contextvars.Context) -> None:
        try:
            self._value = ctx.run(call)
        except BaseException as exc:  # (re-raised by result, in the caller's thread)
            self._error = exc

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> Any:
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value


def in_background(call: Callable[[], Any]) -> Part:
    """``call()`` started on a thread of its own (at once, in this thread, where
    :func:`side_pool` is off); ``.result()`` returns its value or raises its exception.

    For independent parts of one construction (the dominating and dominated
    sides of a round's law): a part computes what it would alone, so the
    results are the same bit for bit, concurrent or not, and the kernels
    release the GIL, so two cores overlap them.  A fresh thread, not one of
    :func:`side_pool`'s workers: a part started from one of those must not wait
    on its own pool.  It runs in a copy of the caller's context (numpy's error
    state, pld's context variables).
    """
    return Part(call, side_pool() is not None)


def in_parallel(*calls: Callable[[], Any]) -> list[Any]:
    """``[call() for call in calls]``, the calls after the first started on threads
    of their own (:func:`in_background`) and all of them waited for."""
    parts = [in_background(call) for call in calls[1:]]
    try:
        first = calls[0]()
    finally:
        for part in parts:
            part.wait()
    return [first] + [part.result() for part in parts]
