"""Side threads only where they pay, and never change an answer.

The two sides of a materialisation go side by side from a first step of
``pld.engine.composer.SIDE_THREAD_CELLS`` cells (MNIST: its transforms and
kernels overlap the other side's Python); a tiny grid (a randomized response)
builds both in the calling thread.  Other directions are built speculatively
only beside a wide leading grid (``PARALLEL_POINTS``: sigma 0.7, q 5e-4,
T 2e5), where three threads on two cores still pay.  The brackets are the
same either way, to the bit.
"""

from __future__ import annotations

import contextvars
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pld
from pld.engine import composer as C
from pld.engine.cache import in_background, in_parallel, side_pool, single_threaded

needs_two_cores = pytest.mark.skipif(side_pool() is None, reason="one core: no side threads at all")


def _threads_used(monkeypatch, sigma, q, steps, delta, build=None):
    """The threads that composed a side, and whether anything was speculated."""
    threads: set = set()
    speculated: list = []
    compose, speculate = C._compose_components, C.Composer.speculate

    def spy_compose(*a, **k):
        threads.add(threading.current_thread().name)
        return compose(*a, **k)

    def spy_speculate(self, *a, **k):
        speculated.append(a)
        return speculate(self, *a, **k)

    monkeypatch.setattr(C, "_compose_components", spy_compose)
    monkeypatch.setattr(C.Composer, "speculate", spy_speculate)
    pld_ = pld.dpsgd(sigma, q, steps) if build is None else build()
    bracket = pld_.epsilon_bounds(delta)
    return threads, speculated, bracket


@needs_two_cores
def test_mnist_builds_its_two_sides_side_by_side_and_speculates_nothing(monkeypatch):
    threads, speculated, _ = _threads_used(monkeypatch, 1.1, 256 / 60000, 14063, 1e-5)
    assert len(threads) >= 2
    assert speculated == []


@needs_two_cores
def test_a_tiny_grid_stays_in_the_calling_thread(monkeypatch):
    threads, speculated, _ = _threads_used(monkeypatch, 0, 0, 0, 1e-6,
                                           build=lambda: pld.RandomizedResponse(1.0).pld().self_compose(50))
    assert threads == {threading.current_thread().name}
    assert speculated == []


@needs_two_cores
def test_a_wide_long_run_builds_its_sides_side_by_side(monkeypatch):
    threads, speculated, _ = _threads_used(monkeypatch, 0.7, 5e-4, 200_000, 1e-5)
    assert len(threads) >= 2
    assert speculated


@pytest.mark.parametrize("sigma, q, steps, delta", [
    (1.1, 256 / 60000, 14063, 1e-5),
    (0.7, 5e-4, 200_000, 1e-5),
    (5.0, 0.01, 50_000, 1e-10),
])
def test_threads_never_change_the_bracket(sigma, q, steps, delta):
    default = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    with single_threaded():
        alone = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert default == alone


@needs_two_cores
@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.6, 8.0), q=st.floats(1e-4, 0.3), steps=st.integers(1, 200_000),
       log_delta=st.floats(-12.0, -3.0))
def test_two_sides_side_by_side_answer_what_one_thread_answers(sigma, q, steps, log_delta):
    """Across DP-SGD settings (first steps of a few cells to tens of thousands,
    one thread or two sides side by side or a speculative probe beside them),
    the bracket does not depend on the threads, to the bit."""
    delta = 10.0 ** log_delta
    default = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    with single_threaded():
        alone = pld.dpsgd(sigma, q, steps).epsilon_bounds(delta)
    assert default == alone


# ---- parts of one construction on threads of their own (pld.engine.cache.in_parallel)
_VAR = contextvars.ContextVar("_VAR", default="unset")


@needs_two_cores
def test_parts_run_on_threads_of_their_own_in_the_callers_context():
    _VAR.set("caller")
    names = in_parallel(*(lambda: (threading.current_thread().name, _VAR.get()) for _ in range(3)))
    assert names[0] == (threading.current_thread().name, "caller")
    assert {n for n, _ in names[1:]} == {"pld-part"} and all(v == "caller" for _, v in names)


def test_parts_run_in_the_calling_thread_when_single_threaded():
    with single_threaded():
        names = in_parallel(*(lambda: threading.current_thread().name for _ in range(3)))
    assert set(names) == {threading.current_thread().name}


def test_a_parts_exception_reaches_the_caller_after_all_parts_end():
    ended = threading.Event()

    def slow():
        ended.wait(0.05)
        ended.set()
        return 1

    def bad():
        raise ValueError("part failed")

    with pytest.raises(ValueError, match="part failed"):
        in_parallel(slow, bad)
    assert ended.is_set()
    part = in_background(bad)
    with pytest.raises(ValueError, match="part failed"):
        part.result()
    assert in_background(lambda: 7).result() == 7


@pytest.mark.parametrize("build, args", [
    ("geometric", (0.45, 10, 0.02)),
    ("heavy", (0.7406, 100, 0.02)),
    ("linear", (1.0, 100, 0.02)),
    ("label", (1.0, 1024, 8, 0.02)),
])
def test_a_rounds_laws_are_the_same_built_in_parts_or_in_one_thread(build, args):
    """The dominating and dominated sides of a round (and the label sums) are built
    concurrently: the same arrays, bit for bit, as built one after the other."""
    import dataclasses

    import numpy as np

    from pld.mechanisms.allocation import geometric, heavy, sums

    fn = {"geometric": geometric.geometric_laws.__wrapped__, "heavy": heavy.heavy_laws,
          "linear": lambda *a: sums.sum_laws.__wrapped__(*a, "linear"),
          "label": sums.label_sum_pair.__wrapped__}[build]

    def flat(x):
        if dataclasses.is_dataclass(x):
            return flat(dataclasses.astuple(x))
        if isinstance(x, (tuple, list)):
            return [y for v in x for y in flat(v)]
        if isinstance(x, dict):
            return [y for k in sorted(x) for y in flat(x[k])]
        return [np.asarray(x)]

    concurrent = flat(fn(*args))
    with single_threaded():
        alone = flat(fn(*args))
    assert len(concurrent) == len(alone)
    assert all(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc") for a, b in zip(concurrent, alone))


def test_a_k_of_t_bracket_is_the_same_with_its_block_rounds_built_side_by_side(monkeypatch):
    """A k-of-t round's upper end composes block rounds of two lengths, whose laws the
    engine builds side by side (``build_laws``): both are built, and the bracket is the
    one built one after the other."""
    from pld.mechanisms.allocation import RandomAllocation, sums

    def bracket():
        sums.sum_laws.cache_clear()
        d = RandomAllocation(pld.Gaussian(1.5), 101, 2).pld().self_compose(3)
        with pytest.warns(pld.NotTightWarning):
            return d.epsilon_bounds(1e-6)

    built = []
    original = RandomAllocation.build_laws
    monkeypatch.setattr(RandomAllocation, "build_laws", lambda self: built.append(self.steps) or original(self))
    default = bracket()
    assert sorted(built[:2]) == [50, 51]
    with single_threaded():
        alone = bracket()
    assert default == alone


@pytest.mark.parametrize("usable, threads", [({3}, False), ({0, 5}, True)])
def test_side_threads_follow_the_cores_the_process_may_use(monkeypatch, usable, threads):
    """A worker pinned to one core of a larger machine (taskset, a cpuset) gets
    no side threads: they would only share its core."""
    from pld.engine import cache as K

    monkeypatch.setattr(K.os, "sched_getaffinity", lambda pid: usable, raising=False)
    monkeypatch.setattr(K.os, "cpu_count", lambda: 64)
    monkeypatch.delenv("PLD_THREADS", raising=False)
    K._cores.cache_clear()
    try:
        assert K._cores() == len(usable)
        assert (K.side_pool() is not None) == threads
    finally:
        monkeypatch.undo()
        K._cores.cache_clear()
