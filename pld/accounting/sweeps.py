"""Sweeps: many configurations at once, on this machine or a Dask cluster.

>>> import pld
>>> rows = pld.sweep([{"noise_multiplier": s, "sampling_rate": 0.01, "steps": 1000}
...                   for s in (0.8, 1.0, 1.2)])            # doctest: +SKIP
>>> [round(r["epsilon_upper"], 3) for r in rows]            # doctest: +SKIP

Each configuration (a DP-SGD run, a calibration, or a spec; see
:mod:`pld.accounting.sweep_work`) becomes one row, in input order, with its certified
bracket ``[epsilon_lower, epsilon_upper]``, whether its target was met, a
summary of the numerical settings, and its time.  Rows are computed by
pld's public API in whatever process runs them, so a row does not depend on
where or with what it ran: the same configuration gives the same row in a
serial run, a process pool and a Dask cluster (up to the ``seconds`` field).

Work is sent in chunks sized from the measured time per configuration so
that a task carries about one second of work (the first tasks carry one
configuration each, to measure).  Configurations are read a window at a time
and sent most expensive first (by :func:`pld.accounting.sweep_work.estimated_cost`), so
that a sweep ends on short tasks and no worker idles while another finishes
a long one; rows still come back in input order.  At most a few chunks per
worker are in flight and finished rows wait only for earlier ones, so memory
stays flat however many configurations stream through.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import itertools
import os
import sys
import time
import types
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pld.accounting import sweep_work as _sweep_work
from pld.accounting.sweep_work import COLUMNS, TIMING_FIELDS, estimated_cost, normalize

__all__ = ["sweep", "iter_sweep", "grid", "calibration_grid", "SweepResult", "SweepRun", "COLUMNS",
           "TIMING_FIELDS"]

#: seconds of work one task aims to carry (amortises task overhead and each
#: worker's first kernel load)
TARGET_TASK_SECONDS = 1.0
#: chunks in flight per worker: enough to keep workers busy while results travel
INFLIGHT_PER_WORKER = 3
#: most finished rows held back waiting for an earlier, slower chunk
MAX_BUFFERED_ROWS = 20_000
#: configurations read ahead and sent most expensive first (at least this many,
#: or this many per worker; at most half the buffered rows)
BALANCE_WINDOW = 4096
BALANCE_WINDOW_PER_WORKER = 256


class SweepInterruptedWarning(UserWarning):
    """A sweep stopped early (Ctrl-C); the rows finished so far are returned."""


# ----------------------------------------------------------- configurations
def grid(**params: Any) -> Iterator[dict]:
    """Configurations of the cartesian product of parameter lists, lazily.

    Scalars are held fixed; lists (or tuples) vary.  The last parameter varies
    fastest, as in :func:`itertools.product`.

    >>> list(grid(noise_multiplier=[1.0, 2.0], sampling_rate=0.01, steps=[10, 20]))[1]
    {'noise_multiplier': 1.0, 'sampling_rate': 0.01, 'steps': 20}
    """
    names = list(params)
    values = [list(v) if isinstance(v, (list, tuple)) else [v] for v in params.values()]
    for name, vals in zip(names, values):
        if not vals:
            raise ValueError(f"{name}: an empty list gives an empty grid")
    for combo in itertools.product(*values):
        yield dict(zip(names, combo))


def calibration_grid(target_epsilons, *, sampling_rates, steps, delta: float = 1e-5,
                     sampling: str = "poisson") -> Iterator[dict]:
    """Configurations solving for the noise multiplier: one per (target, q, T).

    Each row of the sweep is then :func:`pld.calibrate_noise` at its target,
    with the certified bracket of the solution.
    """
    return grid(target_epsilon=list(_as_list(target_epsilons)), sampling_rate=list(_as_list(sampling_rates)),
                steps=list(_as_list(steps)), delta=delta, sampling=sampling)


def _as_list(x) -> list:
    return list(x) if isinstance(x, Iterable) and not isinstance(x, (str, Mapping)) else [x]


# ---------------------------------------------------------------- results
class SweepResult(list):
    """The rows of a sweep (a list of dicts, in input order).

    Attributes
    ----------
    interrupted : bool
        True if the sweep was stopped (Ctrl-C) before every row was done.
    """

    interrupted: bool = False

    def to_pandas(self):
        """The rows as a ``pandas.DataFrame`` (pandas is not a dependency of pld)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("SweepResult.to_pandas needs pandas (pip install pandas); "
                              "the rows are plain dicts otherwise") from None
        return pd.DataFrame(list(self), columns=list(COLUMNS) if not self else None)

    def summary(self) -> str:
        """One line: rows, errors, targets missed, time."""
        return summary_line(self, interrupted=self.interrupted)


def summary_line(rows, *, interrupted: bool = False, seconds: float | None = None, extra: str = "") -> str:
    """``"200 rows: 198 met their target, 1 missed, 1 error; 12.3 s of work"``."""
    n = errors = missed = 0
    work = 0.0
    for r in rows:
        n += 1
        errors += r.get("error") is not None
        missed += r.get("error") is None and r.get("target_met") is False
        work += r.get("seconds") or 0.0
    text = f"{n} rows: {n - errors - missed} met their target, {missed} missed, {errors} failed; {work:.1f} s of work"
    if seconds is not None:
        text += f" in {seconds:.1f} s wall"
    if interrupted:
        text += " (interrupted)"
    return text + extra


# -------------------------------------------------------------- executors
class _InlineExecutor(cf.Executor):
    """Runs each task at submission, in this process (the serial engine)."""

    def submit(self, fn, /, *args, **kwargs):
        f: cf.Future = cf.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(exc, KeyboardInterrupt):
                raise
            f.set_exception(exc)
        return f


def local_workers() -> int:
    """Cores this process may use (its CPU affinity where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _worker_init() -> None:
    import signal

    # Ctrl-C reaches the whole process group: the parent stops the sweep, the
    # workers must not die mid-task with tracebacks of their own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # one worker per core: a query's two sides run one after the other here
    os.environ.setdefault("PLD_THREADS", "1")


#: what a script that starts a pool outside its ``__main__`` guard is told (one line)
GUARD_MESSAGE = ("pld.sweep runs its configurations in worker processes, which import {where} again and would "
                 "run this call again: put it under `if __name__ == \"__main__\":` (or pass executor=\"serial\")")


def unguarded_main_call() -> str | None:
    """``"script.py, line 12"`` when the current call runs at the top level of the main
    script outside an ``if __name__ == "__main__":`` block, else None.

    Worker processes started by spawn or forkserver import the main script again
    (as ``__mp_main__``) to find what the parent pickled; a call to start a pool
    at its top level then starts pools from every worker while it bootstraps,
    and the pool dies (``BrokenProcessPool``, after a traceback from each worker).
    The line being run in the script's module frame is looked up in the script's
    syntax tree: inside a guard, or not.
    """
    import ast

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return None  # (an interactive session or a notebook: workers import nothing of it)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None

    def is_guard(node: ast.stmt) -> bool:
        test = getattr(node, "test", None)
        if not isinstance(node, ast.If) or not isinstance(test, ast.Compare) or len(test.comparators) != 1:
            return False
        sides = [test.left, test.comparators[0]]
        names = [x for x in sides if isinstance(x, ast.Name) and x.id == "__name__"]
        mains = [x for x in sides if isinstance(x, ast.Constant) and x.value == "__main__"]
        return isinstance(test.ops[0], ast.Eq) and len(names) == 1 and len(mains) == 1

    for node in tree.body:
        if is_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return None
    return f"{os.path.basename(path)}, line {line}"


def _check_guard() -> None:
    where = unguarded_main_call()
    if where is not None:
        raise RuntimeError(GUARD_MESSAGE.format(where=where.split(",")[0]) + f" ({where})")


def process_pool(workers: int | None = None) -> cf.ProcessPoolExecutor:
    """The default engine: a pool of ``workers`` processes (default: the cores).

    Workers start from a forkserver that has imported pld and loaded its kernels
    once (POSIX, :mod:`pld.accounting.sweep_worker`), so each starts in milliseconds
    without inheriting this process's threads.  A script that calls this (or
    :func:`sweep`) at its top level, outside ``if __name__ == "__main__":``, gets
    a ``RuntimeError`` saying so before any process starts (its workers would
    import the script again and start pools of their own).
    """
    import multiprocessing as mp

    _check_guard()

    n = local_workers() if workers is None else _positive_int("workers", workers)
    ctx: Any
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["pld.accounting.sweep_worker"])
    else:  # pragma: no cover - Windows
        ctx = mp.get_context("spawn")
    return cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init)


def _positive_int(name: str, x) -> int:
    from pld import _validate as v

    return v.integer(name, x, low=1, high=100_000)


def _resolve(executor) -> tuple[cf.Executor, int, Callable[[], None]]:
    """``(executor, workers, close)`` for whatever the caller passed."""
    if executor is None:
        n = local_workers()
        if n == 1:
            return _InlineExecutor(), 1, lambda: None
        pool = process_pool(n)
        return pool, n, lambda: pool.shutdown(wait=False, cancel_futures=True)
    if executor == "serial":
        return _InlineExecutor(), 1, lambda: None
    if isinstance(executor, str):
        client = _dask_client(executor)
        return client.get_executor(), _dask_workers(client), client.close
    if _is_dask_client(executor):
        return executor.get_executor(), _dask_workers(executor), lambda: None
    if isinstance(executor, cf.Executor):
        workers = getattr(executor, "_max_workers", None)
        return executor, workers if isinstance(workers, int) and workers > 0 else local_workers(), lambda: None
    raise TypeError("executor must be None (a local process pool), 'serial', a concurrent.futures.Executor, "
                    f"a dask.distributed Client or a scheduler address string, got {type(executor).__name__}")


def _is_dask_client(x) -> bool:
    return type(x).__module__.startswith("distributed") and hasattr(x, "get_executor")


def _dask_client(address: str):
    try:
        import distributed
    except ImportError:
        raise ImportError(f"a scheduler address ({address!r}) needs Dask: pip install 'pld[dask]'") from None
    return distributed.Client(address)


def _dask_workers(client) -> int:
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - a count for chunk sizing only
        return 1


# ------------------------------------------------------------- the engine
def _run_chunk(work: Callable[[dict], dict], chunk: list, single_thread: bool = False) -> list:
    """Rows of ``[(index, config), ...]`` (runs in a worker).

    ``single_thread``: each query on this thread alone (a worker of a pool or
    cluster is one of one per core: side threads would oversubscribe them).
    """
    from pld.engine.cache import single_threaded

    rows = []
    with single_threaded() if single_thread else contextlib.nullcontext():
        for index, config in chunk:
            t0 = time.perf_counter()
            row = work(config)
            row = {"index": index, **row}
            if row.get("seconds") is None:
                row["seconds"] = time.perf_counter() - t0
            rows.append(row)
    return rows


class SweepRun:
    """An iterator over a sweep's rows, in input order, as they are done.

    Attributes
    ----------
    interrupted : bool
        Set when Ctrl-C stopped the sweep: the rows finished by then are still
        yielded (possibly after a gap: their ``index`` says which they are).
    done : int
        Rows yielded so far.
    workers : int
        Workers of the engine.
    """

    def __init__(self, configs, *, executor=None, chunksize: int | None = None, progress=None,
                 work: Callable[[dict], dict] | None = None, ordered: bool = True, indices=None,
                 total: int | None = None, target_seconds: float = TARGET_TASK_SECONDS, balance: bool = True):
        self._configs = _validated(configs)
        self._total = len(configs) if isinstance(configs, Sequence) else total
        # the rows' index: their position, or what the caller says (a resumed run's rows)
        self._indices = itertools.count() if indices is None else iter(indices)
        self._chunksize = None if chunksize is None else _positive_int("chunksize", chunksize)
        self._work = work if work is not None else _sweep_work.account
        if not callable(self._work):
            raise TypeError(f"work must be callable, got {type(work).__name__}")
        self._target = target_seconds
        self._ordered = bool(ordered)
        self._balance = bool(balance)
        self._executor_arg = executor
        self._progress_arg = progress
        self.interrupted = False
        self.done = 0
        self.workers = 0
        self._timed_rows = 0
        self._timed_seconds = 0.0
        self._timed_units = 0.0  # estimated cost of the timed rows (seconds per unit = seconds / units)
        self._units: dict[int, float] = {}  # estimated cost of each row in flight
        self._gen = self._generate()

    def __iter__(self) -> SweepRun:
        return self

    def __next__(self) -> dict:
        return next(self._gen)

    def close(self) -> None:
        """Stop early: cancel what has not started and release the engine."""
        self._gen.close()

    # the configurations not yet sent: read a window at a time, most expensive first
    def _window_size(self) -> int:
        return min(max(BALANCE_WINDOW, BALANCE_WINDOW_PER_WORKER * self.workers), MAX_BUFFERED_ROWS // 2)

    def _refill(self, queue: deque, order: deque, source: Iterator, read: int) -> tuple[float, bool]:
        """Read the next window into ``queue`` as ``(units, index, config)`` (and
        its indices in input order into ``order``, in ordered mode);
        ``(its units, whether it is the sweep's last)``."""
        size = self._window_size()
        items = [(estimated_cost(c) if self._balance else 1.0, i, c) for i, c in itertools.islice(source, size)]
        if self._ordered:
            order.extend(i for _, i, _ in items)
        if self._balance:
            items.sort(key=lambda item: -item[0])  # stable: equal estimates keep input order
        queue.extend(items)
        last = len(items) < size or (self._total is not None and read + len(items) >= self._total)
        return sum(item[0] for item in items), last

    # chunk sizes: one configuration per task until rows have been timed, then
    # about target_seconds of (estimated) work per task, and at the end of a
    # sweep never so large that the tail leaves workers idle
    def _next_chunk(self, queue: deque, units_left: float, last: bool) -> list:
        if self._chunksize is not None:
            n = self._chunksize
        elif self._timed_rows < self.workers:
            n = 1
        else:
            n = min(len(queue), MAX_BUFFERED_ROWS // (2 * INFLIGHT_PER_WORKER * self.workers) or 1)
            per_unit = max(self._timed_seconds, 1e-9) / max(self._timed_units, 1e-300)
            budget = self._target / per_unit
            if last:
                budget = min(budget, units_left / (2 * self.workers))
            chunk = [queue.popleft()]
            spent = chunk[0][0]
            while queue and len(chunk) < n and spent + queue[0][0] <= budget:
                spent += queue[0][0]
                chunk.append(queue.popleft())
            return chunk
        return [queue.popleft() for _ in range(min(n, len(queue)))]

    def _receive(self, rows: list, buffer: dict, bar) -> None:
        for row in rows:
            buffer[row["index"]] = row
            self._timed_rows += 1
            self._timed_seconds += row.get("seconds") or 0.0
            self._timed_units += self._units.pop(row["index"], 0.0)
            bar(1)

    def _generate(self) -> Generator[dict, None, None]:
        ex, self.workers, close = _resolve(self._executor_arg)
        single = not isinstance(ex, _InlineExecutor)  # in a pool or cluster: one thread a query
        bar = _progress_bar(self._progress_arg, self._total)
        source = zip(self._indices, self._configs)
        queue: deque = deque()  # (estimated cost, index, config) read and not yet sent
        units_left = 0.0
        last = False
        pending: dict = {}
        buffer: dict = {}
        # indices read, in input order (ordered mode yields in it)
        order: deque = deque()
        read = submitted = 0
        try:
            while True:
                while (len(pending) < INFLIGHT_PER_WORKER * self.workers
                       and submitted - self.done < MAX_BUFFERED_ROWS):
                    if not queue:
                        if last:
                            break
                        units_left, last = self._refill(queue, order, source, read)
                        read += len(queue)
                        if not queue:
                            last = True
                            break
                    chunk = self._next_chunk(queue, units_left, last)
                    for units, index, _ in chunk:
                        self._units[index] = units
                        units_left -= units
                    pending[ex.submit(_run_chunk, self._work, [(i, c) for _, i, c in chunk], single)] = chunk[0][1]
                    submitted += len(chunk)
                if not pending:
                    break
                finished, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for f in finished:
                    del pending[f]
                    try:
                        rows = f.result()
                    except cf.process.BrokenProcessPool:
                        raise RuntimeError(
                            "pld.sweep: a worker process died (killed, out of memory, or a script that starts the "
                            "sweep outside `if __name__ == \"__main__\":`, which its workers import again); "
                            "executor=\"serial\" runs it in this process") from None
                    self._receive(rows, buffer, bar)
                if not self._ordered:  # as they finish: nothing waits behind a slow chunk
                    for index in sorted(buffer):
                        self.done += 1
                        yield buffer.pop(index)
                while order and order[0] in buffer:
                    self.done += 1
                    yield buffer.pop(order.popleft())
        except KeyboardInterrupt:
            self.interrupted = True
            for f in pending:
                f.cancel()
            # rows finished out of order are still work done: hand them over
            for f in [f for f in pending if f.done() and not f.cancelled() and f.exception() is None]:
                self._receive(f.result(), buffer, bar)
            for index in sorted(buffer):
                self.done += 1
                yield buffer.pop(index)
        finally:
            for f in pending:
                f.cancel()
            bar(None)
            close()


def _validated(configs) -> Iterable[dict]:
    if isinstance(configs, (str, bytes, Mapping)) or not isinstance(configs, Iterable):
        raise TypeError(f"configs must be an iterable of configuration mappings, got {type(configs).__name__}")
    if isinstance(configs, Sequence):
        # a list is checked whole before any work: a typo in row 9000 is an error now
        return [normalize(c, f"configs[{i}]") for i, c in enumerate(configs)]
    return (normalize(c, f"configs[{i}]") for i, c in enumerate(configs))


def _progress_bar(progress, total: int | None) -> Callable[[int | None], None]:
    """``update(n)``; ``update(None)`` closes.  tqdm on a terminal (or if asked)."""
    if progress is False or (progress is None and not _stderr_is_tty()):
        return lambda n: None
    if callable(progress) and progress is not True:
        return lambda n: None if n is None else progress(n)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress is True:
            warnings.warn("progress=True needs tqdm (pip install tqdm): no progress bar", RuntimeWarning,
                          stacklevel=4)
        return lambda n: None
    t = tqdm(total=total, unit="config", file=sys.stderr, dynamic_ncols=True)
    return lambda n: t.close() if n is None else t.update(n)


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# ------------------------------------------------------------ public entry
def iter_sweep(configs, *, executor=None, chunksize: int | None = None, progress=None,
               work: Callable[[dict], dict] | None = None, ordered: bool = True, indices=None,
               total: int | None = None, balance: bool = True) -> SweepRun:
    """The rows of a sweep as an iterator (memory flat in the number of rows).

    Parameters
    ----------
    configs, executor, chunksize, progress, work
        As in :func:`sweep`.  ``configs`` may be a generator (for example
        :func:`grid`): it is read a window of a few thousand at a time as work
        is sent, never as a whole.
    ordered : bool
        True: rows in input order.  False: each row as soon as its chunk is
        done (its ``index`` says where it belongs), so that nothing finished
        waits behind a slow configuration (what a file that must lose no
        finished row wants).
    indices : iterable of int, optional
        Each configuration's row ``index`` (default 0, 1, 2, ...), distinct: a
        resumed sweep passes the indices it has left.
    total : int, optional
        Number of configurations, for the progress bar when ``configs`` is a
        generator.
    balance : bool
        True (default): configurations are read a window at a time (a few
        thousand) and sent most expensive first, by an estimate of their cost,
        so that the sweep ends on short tasks.  False: sent in input order.
        Rows are the same either way.

    Returns
    -------
    SweepRun
        The iterator; ``.interrupted`` after Ctrl-C, ``.close()`` to stop.

    Raises
    ------
    TypeError, ValueError
        As :func:`sweep` (for a generator, when the bad configuration is read).

    Examples
    --------
    >>> import pld
    >>> run = pld.iter_sweep(pld.accounting.sweeps.grid(noise_multiplier=[1.0, 2.0], sampling_rate=0.01, steps=100),
    ...                      executor="serial")
    >>> [row["index"] for row in run]
    [0, 1]
    """
    if executor is None and local_workers() > 1:
        _check_guard()
    return SweepRun(configs, executor=executor, chunksize=chunksize, progress=progress, work=work,
                    ordered=ordered, indices=indices, total=total, balance=balance)


def sweep(configs, *, executor=None, chunksize: int | None = None, progress=None,
          work: Callable[[dict], dict] | None = None, balance: bool = True) -> SweepResult:
    """Account many configurations; one row per configuration, in input order.

    Parameters
    ----------
    configs : iterable of mappings
        DP-SGD runs (``noise_multiplier``, ``sampling_rate``, ``steps``;
        optional ``delta`` = 1e-5, ``sampling``, ``runs``, ``name``),
        calibrations (``target_epsilon`` plus two of the three: the third is
        solved for), or spec files (``spec``: a path or a spec mapping;
        optional ``delta``).  A list is validated whole before any work.
    executor : None, "serial", concurrent.futures.Executor, dask Client or str
        None: a process pool with one worker per core (inline on one core);
        "serial": this process; any Executor (a Dask ``Client.get_executor()``
        too); a ``dask.distributed.Client``; or a scheduler address such as
        ``"tcp://10.0.0.1:8786"`` (needs ``pip install 'pld[dask]'``).
    chunksize : int, optional
        Configurations per task.  Default: measured, about one second of work
        per task.
    progress : None, bool or callable
        None: a tqdm bar on a terminal if tqdm is installed, else silent;
        True/False: on/off; a callable is called with the number of rows newly finished.
    work : callable, optional
        Replaces the accounting of one normalized configuration (a picklable
        top-level function ``dict -> dict``); for measurements of the sweep
        machinery itself.
    balance : bool
        Send the most expensive configurations first (default; see
        :func:`iter_sweep`).  Rows are the same either way.

    Returns
    -------
    SweepResult
        A list of row dicts with the fields of :data:`COLUMNS`: ``index``,
        ``kind``, the configuration, ``epsilon_lower`` / ``epsilon_upper``
        (certified; None with ``error``), ``target_met`` (the bracket met its
        accuracy target; for a calibration, the certified epsilon of the
        solution is at most the target), ``note`` (warnings raised while
        accounting), ``settings`` (grid sizes and spacings per direction),
        ``seconds`` and ``error``.  ``.to_pandas()`` gives a DataFrame.
        After Ctrl-C the rows done so far are returned, ``.interrupted`` is
        True and a :class:`SweepInterruptedWarning` says so.

    Raises
    ------
    TypeError, ValueError
        For a malformed configuration (named as ``configs[i].field``) or engine.
    ImportError
        For a scheduler address without Dask installed.

    Notes
    -----
    A row depends only on its configuration: any engine and chunking give
    the rows of a serial run (``seconds`` aside).  A failure of the engine on
    one configuration is that row's ``error``, not the sweep's.  The default
    process pool starts its workers from a forkserver: as with any process
    pool, a script calling this needs the ``if __name__ == "__main__":`` guard.

    Examples
    --------
    >>> import pld
    >>> rows = pld.sweep(pld.accounting.sweeps.grid(noise_multiplier=[1.0, 2.0], sampling_rate=0.01, steps=100),
    ...                  executor="serial")
    >>> [r["epsilon_upper"] > r["epsilon_lower"] > 0 for r in rows]
    [True, True]
    >>> rows[0]["epsilon_upper"] > rows[1]["epsilon_upper"]     # more noise, less epsilon
    True
    """
    if executor is None and local_workers() > 1:
        _check_guard()  # (here: the script's line, one frame down, in the traceback)
    run = iter_sweep(configs, executor=executor, chunksize=chunksize, progress=progress, work=work,
                     balance=balance)
    out = SweepResult(run)
    out.interrupted = run.interrupted
    if run.interrupted:
        warnings.warn(f"sweep interrupted: {len(out)} rows done are returned", SweepInterruptedWarning,
                      stacklevel=2)
    return out
