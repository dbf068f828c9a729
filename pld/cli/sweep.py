"""``pld sweep``: many configurations from a grid file to a CSV or JSON-lines file, resumably.

A grid file (TOML or JSON) holds

* ``grid``: a table of parameter lists (their cartesian product; a scalar is
  held fixed), and/or
* ``rows``: explicit configurations (after the grid's, in order),
* any other top-level key: a default for every row (``delta``, ``sampling``, ...).

Each configuration is what :func:`pld.sweep` takes (DP-SGD, a calibration when
``target_epsilon`` is given with two of sigma, q, T, or ``spec``: a spec file,
relative to the grid file).  Row ``i`` of the output is configuration ``i``.

Rows are appended to the output as they finish, one write each, so a killed
run loses no finished row; when the sweep completes, the file is rewritten in
input order (row ``i`` is line ``i``; atomically: a kill during the rewrite
leaves the unsorted file).  ``--resume`` skips the indices already in the
file (after checking that they were written for the same configurations),
drops a trailing partial line a kill may leave, and sorts the whole file when
it completes.  Each index is written exactly once.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import time

from pld.cli.args import CLIError, _count

#: top-level keys of a grid file besides the defaults
_GRID_KEYS = ("grid", "rows")
_FORMATS = (".csv", ".jsonl")
#: fields compared on --resume: a file written for another grid is refused
_IDENTITY = ("kind", "noise_multiplier", "sampling_rate", "steps", "epochs", "dataset_size", "batch_size",
             "steps_per_epoch", "delta", "target_epsilon", "sampling", "runs")

SWEEP_EPILOG = """\
grid file example (TOML; JSON with the same structure works the same):
  delta = 1e-5                          # defaults for every row
  [grid]                                # cartesian product of the lists
  noise_multiplier = [0.8, 1.0, 1.2]
  sampling_rate = [0.001, 0.01]
  steps = [1000, 10000]
  [[rows]]                              # explicit rows, after the grid's
  target_epsilon = 2.0                  # calibration: sigma for this target
  sampling_rate = 0.01
  steps = 10000
  [[rows]]                              # every run field of the command line:
  noise_multiplier = 1.0                # dataset_size, batch_size, epochs, drop_last,
  dataset_size = 50000                  # steps_per_epoch, physical_batch_size,
  batch_size = 512                      # accumulation_steps, participations, sampling
  epochs = 100
  sampling = "balls_in_bins"

rows go to --out as they finish (CSV or JSON lines, by extension) and the file is
put in input order when the sweep completes; --resume continues a run that was
stopped or killed, writing every row exactly once.
--search-cost adds what the whole search cost (every row run on the same data,
composed), --chosen I the cost of row I alone, --trials the Papernot & Steinke
(ICLR 2022) bound for the best of a random number of trials.
"""


def add_sweep(sub, fmt) -> None:
    """The ``sweep`` subcommand's parser."""
    p = sub.add_parser("sweep", help="account many configurations (a grid file) to CSV/JSON lines",
                       description="Account every configuration of a grid file (lists per parameter or "
                                   "explicit rows) on local workers or a Dask scheduler; resumable.",
                       epilog=SWEEP_EPILOG, formatter_class=fmt)
    p.add_argument("grid", metavar="GRID", help="grid file (.toml or .json)")
    p.add_argument("--out", "-o", required=True, metavar="FILE", help="output file: .csv or .jsonl")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", "-j", type=_count(1, 4096), metavar="N",
                       help="local worker processes (default: one per core; 1: this process)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="a Dask scheduler address, e.g. tcp://10.0.0.1:8786 (pip install 'pld[dask]')")
    p.add_argument("--resume", action="store_true",
                   help="skip the rows already in --out (a stopped or killed run continues)")
    p.add_argument("--chunksize", type=_count(1, 10**6), metavar="K",
                   help="configurations per task (default: measured, about 1 s of work per task)")
    p.add_argument("--search-cost", action="store_true",
                   help="also the certified epsilon of the whole search (all rows composed, same data)")
    p.add_argument("--chosen", type=_count(0, 10**12), metavar="I",
                   help="index of the row that was kept: its own cost beside the search's")
    p.add_argument("--trials", metavar="LAW",
                   help="the number of trials was random: 'tnb:ETA,GAMMA' (truncated negative binomial) "
                        "or 'poisson:MU'; adds the private-selection bound (DP-SGD rows, Poisson sampling)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (default: on a terminal)")
    p.add_argument("--json", action="store_true", help="print the summary (and costs) as JSON")
    p.set_defaults(func=cmd_sweep)


# ------------------------------------------------------------- grid file
class Grid:
    """The configurations of a grid file, read lazily (memory flat in their number).

    Every value is validated when the file is read: each grid list's values in
    the first combination (the kind of a configuration, and so which fields it
    checks, is the same for every combination) and every explicit row.
    """

    def __init__(self, path: str):
        from pld.accounting.spec import read_document

        doc = read_document(path)
        if not isinstance(doc, dict):
            raise CLIError(f"{path}: the top level must be a table/object with 'grid' and/or 'rows'")
        if not any(k in doc for k in _GRID_KEYS):
            raise CLIError(f"{path}: give 'grid' (lists per parameter) and/or 'rows' (explicit configurations)")
        self.path = path
        self._base = os.path.dirname(os.path.abspath(path))
        self._defaults = {k: val for k, val in doc.items() if k not in _GRID_KEYS}
        grid = doc.get("grid", {})
        if not isinstance(grid, dict) or ("grid" in doc and not grid):
            raise CLIError(f"{path}: grid must be a non-empty table of parameter lists")
        self._lists = {k: list(val) if isinstance(val, (list, tuple)) else [val] for k, val in grid.items()}
        for k, vals in self._lists.items():
            if not vals:
                raise CLIError(f"{path}: grid.{k}: an empty list gives an empty grid")
        self._rows = doc.get("rows", [])
        if not isinstance(self._rows, list) or not all(isinstance(r, dict) for r in self._rows):
            raise CLIError(f"{path}: rows must be a list of tables/objects")
        self._grid_size = math.prod(len(v) for v in self._lists.values()) if self._lists else 0
        if len(self) == 0:
            raise CLIError(f"{path}: no configurations")
        self._check()

    def __len__(self) -> int:
        return self._grid_size + len(self._rows)

    def _raw(self):
        import itertools

        if self._lists:
            names = list(self._lists)
            for combo in itertools.product(*self._lists.values()):
                yield {**self._defaults, **dict(zip(names, combo))}
        for r in self._rows:
            yield {**self._defaults, **r}

    def _normalize(self, c: dict, i: int | str) -> dict:
        from pld.accounting.sweep_work import normalize

        if isinstance(c.get("spec"), str) and not os.path.isabs(c["spec"]):
            c = {**c, "spec": os.path.join(self._base, c["spec"])}  # relative to the grid file
        return normalize(c, f"{os.path.basename(self.path)}: " + (f"row {i}" if isinstance(i, int) else i))

    def _check(self) -> None:
        if self._lists:
            first = {**self._defaults, **{k: v[0] for k, v in self._lists.items()}}
            for k, vals in self._lists.items():
                for val in vals:
                    self._normalize({**first, k: val}, "grid")
        for j, r in enumerate(self._rows):
            self._normalize({**self._defaults, **r}, self._grid_size + j)

    def configs(self, skip: bytearray | None = None):
        """The configurations in order, lazily; those with ``skip[i]`` left out."""
        for i, c in enumerate(self._raw()):
            if skip is None or not skip[i]:
                yield self._normalize(c, i)

    def pick(self, wanted) -> dict:
        """``{index: configuration}`` for the indices in ``wanted`` (one pass)."""
        return {i: self._normalize(c, i) for i, c in enumerate(self._raw()) if i in wanted}


# ---------------------------------------------------------------- output
def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, dict):
        return json.dumps(x, sort_keys=True, allow_nan=True)
    return " ".join(str(x).split())  # one line per row, whatever a name holds


def _line(row: dict, fmt: str) -> bytes:
    from pld.accounting.sweep_work import COLUMNS
    from pld.report import jsonable

    if fmt == ".jsonl":
        return (json.dumps(jsonable({k: row.get(k) for k in COLUMNS}), allow_nan=False) + "\n").encode()
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_cell(row.get(k)) for k in COLUMNS])
    return buf.getvalue().encode()


def _parse_file(path: str, fmt: str) -> list[dict]:
    """Complete rows of an output file; a trailing partial line is cut off the file."""
    with open(path, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    if end < len(data):  # a kill mid-write: the partial line goes, its row is redone
        with open(path, "r+b") as f:
            f.truncate(end)
        data = data[:end]
    text = data.decode("utf-8")
    if fmt == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise CLIError(f"{path}: line {n} is not JSON; not a pld sweep output?") from None
        return rows
    from pld.accounting.sweep_work import COLUMNS

    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is not None and tuple(reader.fieldnames) != COLUMNS:
        raise CLIError(f"{path}: its columns are not those of pld sweep ({', '.join(COLUMNS[:4])}, ...)")
    return list(reader)


def _same(a, b) -> bool:
    if b is None or a in (None, ""):
        return b is None and a in (None, "")
    if isinstance(b, str):
        return str(a) == b
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


#: rows of an output file checked against the grid on --resume (a different grid
#: differs in many rows; checking all would hold them all in memory)
_CHECKED_ROWS = 10_000


def _done_indices(path: str, fmt: str, grid: Grid) -> bytearray:
    """``done[i]`` = 1 for the rows already in the output, checked against the grid."""
    done = bytearray(len(grid))
    sample: dict = {}
    for r in _parse_file(path, fmt):
        try:
            i = int(r["index"])
        except (KeyError, TypeError, ValueError):
            raise CLIError(f"{path}: a row without an index; not a pld sweep output?") from None
        if not 0 <= i < len(grid):
            raise CLIError(f"{path}: row index {i} is outside this grid's {len(grid)} rows")
        if done[i]:
            raise CLIError(f"{path}: row {i} appears twice")
        done[i] = 1
        if len(sample) < _CHECKED_ROWS:
            sample[i] = {k: r.get(k) for k in _IDENTITY}
    for i, c in grid.pick(sample).items():
        for k in _IDENTITY:  # (a field the grid leaves open, such as a spec's delta, is the row's)
            if c.get(k) is not None and k != c.get("solved_for") and not _same(sample[i][k], c[k]):
                raise CLIError(f"{path}: row {i} was written for {k}={sample[i][k]!r}, the grid says "
                               f"{c[k]!r}: a different grid (write to another file)")
    return done


def _open_output(args, grid: Grid) -> tuple[int, bytearray, str]:
    """``(file descriptor, rows done, format)``, the file ready to append to."""
    from pld.accounting.sweep_work import COLUMNS

    fmt = os.path.splitext(args.out)[1].lower()
    if fmt not in _FORMATS:
        raise CLIError(f"--out must end in .csv or .jsonl, got {args.out!r}")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise CLIError(f"cannot write {args.out!r}: folder {folder!r} does not exist")
    exists = os.path.exists(args.out) and os.path.getsize(args.out) > 0
    if exists and not args.resume:
        raise CLIError(f"{args.out} exists: --resume continues it, or choose another --out")
    done = _done_indices(args.out, fmt, grid) if exists else bytearray(len(grid))
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if fmt == ".csv" and os.fstat(fd).st_size == 0:
        os.write(fd, (",".join(COLUMNS) + "\n").encode())
    return fd, done, fmt


# --------------------------------------------------------------- command
def _executor(args):
    from pld.accounting import sweeps

    if args.scheduler:
        return args.scheduler
    if args.workers == 1:
        return "serial"
    if args.workers:
        return sweeps.process_pool(args.workers)
    return None  # pld.sweep's default: one worker per core


def _trials(text: str | None):
    from pld.accounting.search import PoissonTrials, TruncatedNegativeBinomial

    if text is None:
        return None
    law, _, params = text.partition(":")
    try:
        values = [float(x) for x in params.split(",") if x.strip()]
    except ValueError:
        values = []
    if law.strip().lower() in ("tnb", "negative_binomial", "truncated_negative_binomial") and len(values) == 2:
        return TruncatedNegativeBinomial(*values)
    if law.strip().lower() == "poisson" and len(values) == 1:
        return PoissonTrials(values[0])
    raise CLIError(f"--trials must be 'tnb:ETA,GAMMA' or 'poisson:MU', got {text!r}")


def cmd_sweep(args) -> int:
    from pld.accounting import sweeps

    trials = _trials(args.trials)
    grid = Grid(args.grid)
    if args.chosen is not None and args.chosen >= len(grid):
        raise CLIError(f"--chosen {args.chosen}: the grid has rows 0..{len(grid) - 1}")
    fd, done, fmt = _open_output(args, grid)
    before = sum(done)
    t0 = time.perf_counter()
    stats = {"rows": 0, "met": 0, "missed": 0, "failed": 0, "seconds": 0.0}
    # the rows left, read lazily (memory flat in the grid's size)
    engine = _executor(args)
    run = sweeps.iter_sweep(grid.configs(skip=done), indices=(i for i in range(len(grid)) if not done[i]),
                            executor=engine, chunksize=args.chunksize, total=len(grid) - before,
                            progress=False if args.no_progress else None, ordered=False)
    interrupted = False
    try:
        for row in run:
            os.write(fd, _line(row, fmt))  # one write per row: a kill leaves whole rows
            _count_row(stats, row)
        interrupted = run.interrupted
    except KeyboardInterrupt:
        interrupted = True
        run.close()
    finally:
        os.close(fd)
        if hasattr(engine, "shutdown"):  # our pool: what has not started is not waited for
            engine.shutdown(wait=False, cancel_futures=True)
    if not interrupted and before + stats["rows"] == len(grid):
        _sort_output(args.out, fmt)
    res = _summary(args, stats, len(grid), before, time.perf_counter() - t0, interrupted)
    if not interrupted and (args.search_cost or args.chosen is not None or trials is not None):
        res["search_cost"] = _search_cost(args, grid, fmt, trials)
    _print(args, res)
    return 130 if interrupted else 0


def _sort_output(path: str, fmt: str) -> None:
    """Rewrite a complete output file in input order (row ``i`` on line ``i``), atomically;
    the rows' bytes are kept as written."""
    from pld.io import write_atomic

    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    head = lines[:1] if fmt == ".csv" else []
    body = [line for line in lines[len(head):] if line.strip()]

    def index(line: bytes) -> int:
        if fmt == ".jsonl":
            return int(json.loads(line)["index"])
        return int(line.split(b",", 1)[0])

    body.sort(key=index)
    write_atomic(path, b"".join(head + body))


def _count_row(stats: dict, row: dict) -> None:
    stats["rows"] += 1
    stats["seconds"] += row.get("seconds") or 0.0
    if row.get("error") is not None:
        stats["failed"] += 1
    elif row.get("target_met") is False:
        stats["missed"] += 1
    else:
        stats["met"] += 1


def _summary(args, stats: dict, total: int, before: int, wall: float, interrupted: bool) -> dict:
    from pld import __version__

    left = total - before - stats["rows"]
    return {"command": "sweep", "grid": args.grid, "out": args.out, "rows_total": total,
            "rows_before": before, "rows_written": stats["rows"], "rows_left": left,
            "target_met": stats["met"], "target_missed": stats["missed"], "failed": stats["failed"],
            "work_seconds": stats["seconds"], "wall_seconds": wall,
            "configs_per_second": stats["rows"] / wall if wall > 0 else math.inf,
            "interrupted": interrupted, "pld_version": __version__}


def _search_cost(args, grid: Grid, fmt: str, trials) -> dict:
    """Search cost over every row of the output (solved values from the file)."""
    from pld.accounting.search import search_cost

    rows = sorted(_parse_file(args.out, fmt), key=lambda r: int(r["index"]))
    configs = grid.pick({int(r["index"]) for r in rows})
    runs = []
    for r in rows:
        if r.get("error") not in (None, ""):
            raise CLIError(f"row {r['index']} failed ({r['error']}): the search cost needs every run accounted")
        config = configs[int(r["index"])]
        c = {k: v for k, v in config.items() if v is not None and k not in
             ("name", "solved_for", "target_epsilon")}
        if config.get("solved_for"):
            key = config["solved_for"]
            c[key] = int(r[key]) if key in ("steps", "epochs", "batch_size") else float(r[key])
            c["kind"] = "dpsgd"  # (a run now; its rate and steps follow from its loader again)
        runs.append(c)
    deltas = {float(r["delta"]) for r in rows}  # what each row was accounted at
    if len(deltas) > 1:
        raise CLIError(f"the search cost is stated at one delta: the rows use {len(deltas)} "
                       f"({', '.join(f'{d:g}' for d in sorted(deltas))})")
    return search_cost([{k: v for k, v in c.items() if k != "delta"} for c in runs], deltas.pop(),
                       chosen=args.chosen, trials=trials)


def _print(args, res: dict) -> None:
    from pld.report import jsonable

    if args.json:
        sys.stdout.write(json.dumps(jsonable(res), indent=2, allow_nan=False) + "\n")
        return
    line = (f"pld sweep: {res['rows_written']} rows written to {res['out']}"
            + (f" ({res['rows_before']} already there)" if res["rows_before"] else "")
            + f"; {res['target_met']} met their target, {res['target_missed']} missed, {res['failed']} failed; "
            f"{res['wall_seconds']:.1f} s, {res['configs_per_second']:.3g} configs/s")
    if res["interrupted"]:
        line += f"; interrupted with {res['rows_left']} rows left: run again with --resume"
    print(line)
    if res.get("search_cost"):
        from pld.accounting.search import format_search_cost

        print(format_search_cost(res["search_cost"]))
