"""pld.sweep on real engines: rows of a process pool and of a Dask LocalCluster equal a
serial run's; a killed and resumed `pld sweep` writes each row exactly once."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

import pld
from pld.accounting import sweeps
from pld.accounting.sweep_work import COLUMNS, TIMING_FIELDS

# fast configurations (tens of milliseconds each), three kinds
CONFIGS = [
    *sweeps.grid(noise_multiplier=[0.9, 1.3], sampling_rate=[0.004, 0.02], steps=[300, 3000]),
    {"sigma": 2.0, "q": 0.05, "T": 200, "delta": 1e-6, "name": "aliases"},
    {"noise_multiplier": 1.1, "sampling_rate": 0.01, "steps": 500, "runs": 3},
    {"noise_multiplier": 1.0, "sampling_rate": 0.02, "steps": 100, "sampling": "without_replacement"},
    {"target_epsilon": 2.0, "sampling_rate": 0.01, "steps": 1000},
    {"spec": {"mechanisms": [{"type": "laplace", "scale": 2.0, "count": 3}]}, "delta": 1e-6},
]


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in rows]


@pytest.fixture(scope="module")
def serial_rows():
    return sweeps.sweep(CONFIGS, executor="serial")


def test_serial_rows_are_certified_brackets_in_input_order(serial_rows):
    assert [r["index"] for r in serial_rows] == list(range(len(CONFIGS)))
    assert all(tuple(r) == COLUMNS for r in serial_rows)
    for r, c in zip(serial_rows, CONFIGS):
        assert r["error"] is None and r["target_met"] is True
        assert 0 < r["epsilon_lower"] <= r["epsilon_upper"] < math.inf
        if "noise_multiplier" in c:  # the row is what pld.dpsgd says for its configuration
            d = pld.dpsgd(c["noise_multiplier"], c["sampling_rate"], c["steps"], sampling=c.get("sampling", "poisson"))
            d = d.self_compose(c["runs"]) if c.get("runs", 1) > 1 else d
            assert (r["epsilon_lower"], r["epsilon_upper"]) == d.epsilon_bounds(c.get("delta", 1e-5))
    cal = serial_rows[-2]
    assert cal["solved_for"] == "noise_multiplier" and cal["epsilon_upper"] <= 2.0
    # Laplace(b=2), 3 releases: pure 1.5-DP, and delta(eps) > 0 below 1.5
    assert serial_rows[-1]["epsilon_upper"] <= 1.5 + 1e-6 and serial_rows[-1]["epsilon_lower"] > 1.3


def test_process_pool_rows_equal_serial(serial_rows):
    with sweeps.process_pool(2) as pool:
        rows = sweeps.sweep(CONFIGS, executor=pool, chunksize=2)
    assert _strip(rows) == _strip(serial_rows)
    assert not rows.interrupted


def test_balanced_pool_rows_equal_serial_in_input_order(serial_rows):
    # default chunking, most expensive first, and the same in input order
    with sweeps.process_pool(2) as pool:
        balanced = sweeps.sweep(CONFIGS, executor=pool)
        plain = sweeps.sweep(CONFIGS, executor=pool, balance=False)
    assert _strip(balanced) == _strip(plain) == _strip(serial_rows)


def _noop(config):
    return {"kind": config["kind"], "seconds": 0.0}


def test_balance_keeps_input_order_and_the_callers_indices():
    configs = [{"noise_multiplier": s, "sampling_rate": q, "steps": t}
               for s, q, t in [(4.0, 0.1, 10), (0.6, 1e-4, 10**6), (1.0, 0.01, 1000), (0.7, 2e-4, 10**5)]]
    for ordered in (True, False):
        run = sweeps.iter_sweep(configs, executor="serial", work=_noop, indices=[7, 3, 9, 1], ordered=ordered)
        got = [r["index"] for r in run]
        assert (got if ordered else sorted(got)) == ([7, 3, 9, 1] if ordered else [1, 3, 7, 9])


def test_estimated_cost_puts_small_noise_and_rate_first():
    from pld.accounting.sweep_work import estimated_cost, normalize

    cost = lambda **c: estimated_cost(normalize(c))
    assert cost(sigma=0.6, q=1e-4, T=10**5) > cost(sigma=1.0, q=0.01, T=10**5) > cost(sigma=4.0, q=0.1, T=10**3)
    assert cost(sigma=1.0, q=0.01, T=10**6) > cost(sigma=1.0, q=0.01, T=10**3)
    assert cost(target_epsilon=1.0, q=0.01, T=1000) > cost(sigma=1.0, q=0.01, T=1000)
    assert cost(spec={"mechanisms": [{"type": "laplace", "scale": 1.0}]}) > 0


def test_any_executor_gives_the_serial_rows(serial_rows):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as threads:
        rows = sweeps.sweep(CONFIGS[:6], executor=threads)
    assert _strip(rows) == _strip(serial_rows[:6])


def test_dask_local_cluster_rows_equal_serial(serial_rows):
    distributed = pytest.importorskip("distributed", reason="dask.distributed not installed (pip install 'pld[dask]')")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        rows = sweeps.sweep(CONFIGS, executor=client)
        by_address = list(sweeps.iter_sweep(CONFIGS[:3], executor=cluster.scheduler_address))
    assert _strip(rows) == _strip(serial_rows)
    assert _strip(by_address) == _strip(serial_rows[:3])


def test_iterator_streams_and_unordered_rows_carry_their_index(serial_rows):
    run = sweeps.iter_sweep(iter(CONFIGS[:4]), executor="serial", ordered=False)
    assert next(run)["index"] == 0  # a generator is read a window at a time, as work is sent
    rest = list(run)
    assert sorted(r["index"] for r in rest) == [1, 2, 3] and run.done == 4


def test_bad_configurations_name_the_field():
    with pytest.raises(ValueError, match=r"configs\[1\]\.sampling_rate"):
        sweeps.sweep([CONFIGS[0], {"noise_multiplier": 1.0, "sampling_rate": 2.0, "steps": 10}], executor="serial")
    with pytest.raises(ValueError, match=r"configs\[0\]: unknown field\(s\) 'sigmaa'"):
        sweeps.sweep([{"sigmaa": 1.0, "sampling_rate": 0.1, "steps": 10}], executor="serial")
    with pytest.raises(ValueError, match="exactly two"):
        sweeps.sweep([{"target_epsilon": 1.0, "steps": 10}], executor="serial")
    with pytest.raises(TypeError, match="executor"):
        sweeps.sweep(CONFIGS[:1], executor=3)


def test_engine_failure_is_the_rows_error_not_the_sweeps():
    rows = sweeps.sweep([{"spec": "/nonexistent/spec.json"}, CONFIGS[0]], executor="serial")
    assert rows[0]["error"].startswith(("FileNotFoundError", "OSError")) and rows[0]["target_met"] is False
    assert rows[1]["error"] is None
    assert "1 failed" in rows.summary()


@pytest.mark.closed_forms
def test_gaussian_rows_answered_in_closed_form_say_so():
    row = sweeps.sweep([{"noise_multiplier": 2.0, "sampling_rate": 1.0, "steps": 50}], executor="serial")[0]
    assert row["settings"]["method"].startswith("closed form") and row["target_met"] is True
    assert (row["epsilon_lower"], row["epsilon_upper"]) == pld.dpsgd(2.0, 1.0, 50).epsilon_bounds(1e-5)


def test_progress_callable_counts_rows():
    seen = []
    sweeps.sweep(CONFIGS[:3], executor="serial", progress=seen.append)
    assert seen == [1, 1, 1]


def test_to_pandas_when_installed(serial_rows):
    pytest.importorskip("pandas", reason="pandas not installed (optional)")
    df = serial_rows.to_pandas()
    assert list(df.columns) == list(COLUMNS) and len(df) == len(CONFIGS)


def test_to_pandas_without_pandas_says_so(serial_rows, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import fails as if it were not installed
    with pytest.raises(ImportError, match="pip install pandas"):
        serial_rows.to_pandas()


# ------------------------------------------------------------ the command
GRID = {"delta": 1e-5, "grid": {"noise_multiplier": [0.9, 1.1, 1.4, 2.0], "sampling_rate": [0.005, 0.02],
                                "steps": [200, 400, 800]}}


def _pld_sweep(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "pld", "sweep", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


#: `pld sweep` in a child whose work function stops for good after ``keep`` rows (a gate
#: that is never opened; it leaves a marker file when reached).  With one worker (the inline
#: executor: work runs on the thread that writes the rows) nothing is written once the gate is
#: reached, so the parent kills a sweep that is mid-way by construction, however fast the
#: machine: no race with the sweep's end
_GATED_SWEEP = """
import pathlib, sys, threading
import pld.accounting.sweep_work as work
from pld import cli
keep, marker, real, calls = int(sys.argv[1]), pathlib.Path(sys.argv[2]), work.account, []
def gated(config):
    calls.append(config)
    if len(calls) > keep:
        marker.write_text("gated")
        threading.Event().wait()  # the row after the keep-th never finishes
    return real(config)
work.account = gated
sys.exit(cli.main(sys.argv[3:]))
"""


def test_killed_and_resumed_sweep_writes_each_row_exactly_once(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    out = tmp_path / "rows.jsonl"
    n, keep, marker = 24, 10, tmp_path / "gated"
    proc = subprocess.Popen([sys.executable, "-c", _GATED_SWEEP, str(keep), str(marker), "sweep", str(grid),
                             "--workers", "1", "--chunksize", "1", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300  # (only a hung child takes this long: the gate is reached after 10 rows)
    while time.monotonic() < deadline and proc.poll() is None and not marker.exists():
        time.sleep(0.02)
    assert marker.exists() and proc.poll() is None, f"the gated sweep ended: {proc.communicate()}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = out.read_text().count("\n")
    assert 1 <= before <= keep < n
    done = _pld_sweep(grid, "--workers", 1, "--out", out, "--resume", "--no-progress")
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr
    rows = _rows(out)
    assert sorted(r["index"] for r in rows) == list(range(n))  # every row, each once
    assert f"({before} already there)" in stdout and f"{n - before} rows written" in stdout
    serial = sweeps.sweep(list(sweeps.grid(**GRID["grid"], delta=1e-5)), executor="serial")
    by_index = {r["index"]: r for r in rows}
    assert _strip([by_index[i] for i in range(n)]) == json.loads(json.dumps(_strip(serial)))


def test_resume_refuses_another_grid_and_no_resume_refuses_to_overwrite(tmp_path, capsys):
    from pld import cli

    grid = tmp_path / "grid.toml"
    grid.write_text('delta = 1e-5\n[grid]\nnoise_multiplier = [1.0, 2.0]\nsampling_rate = 0.01\nsteps = 100\n')
    out = tmp_path / "rows.csv"
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress",
                     "--search-cost", "--chosen", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rows_written"] == 2 and res["search_cost"]["runs"] == 2
    assert res["search_cost"]["chosen"]["epsilon_upper"] < res["search_cost"]["search"]["epsilon_lower"]
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1"]) == 2
    assert "--resume" in capsys.readouterr().err
    grid.write_text('delta = 1e-5\n[grid]\nnoise_multiplier = [1.0, 3.0]\nsampling_rate = 0.01\nsteps = 100\n')
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--resume"]) == 2
    assert "different grid" in capsys.readouterr().err
    with open(out, "ab") as f:  # a kill mid-write leaves a partial line: it is dropped and redone
        f.write(b"2,dpsgd,,1.0")
    grid.write_text('delta = 1e-5\n[grid]\nnoise_multiplier = [1.0, 2.0, 0.7]\nsampling_rate = 0.01\nsteps = 100\n')
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--resume", "--no-progress"]) == 0
    assert "1 rows written" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("2,dpsgd,,0.7,")


def test_ctrl_c_stops_a_pooled_sweep_cleanly(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"grid": {"noise_multiplier": [0.9, 1.1, 1.4, 2.0], "sampling_rate": [0.005, 0.02],
                                         "steps": [2000, 8000, 32000, 100000] * 3}}))
    out = tmp_path / "rows.csv"
    proc = _pld_sweep(grid, "--workers", 2, "--out", out, "--no-progress",
                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= 3:  # the header and two rows
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted with" in stdout and "--resume" in stdout
    assert "Traceback" not in stderr  # the workers ignore Ctrl-C; the parent stops them
    indices = [int(line.split(",", 1)[0]) for line in out.read_text().splitlines()[1:]]
    assert len(indices) == len(set(indices)) >= 2


def test_grid_file_rows_specs_and_calibrations(tmp_path, capsys):
    from pld import cli

    (tmp_path / "lap.json").write_text(json.dumps({"mechanisms": [{"type": "laplace", "scale": 2.0, "count": 3}]}))
    grid = tmp_path / "grid.toml"
    grid.write_text('delta = 1e-6\n[grid]\nnoise_multiplier = [1.0, 2.0]\nsampling_rate = 0.01\nsteps = 100\n'
                    '[[rows]]\ntarget_epsilon = 1.0\nsampling_rate = 0.01\nsteps = 100\n'
                    '[[rows]]\nspec = "lap.json"\n')
    out = tmp_path / "rows.jsonl"
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    assert "4 rows written" in capsys.readouterr().out
    rows = sorted(_rows(out), key=lambda r: r["index"])
    assert [r["kind"] for r in rows] == ["dpsgd", "dpsgd", "calibrate", "spec"]
    assert rows[2]["epsilon_upper"] <= 1.0 and rows[2]["solved_for"] == "noise_multiplier"
    assert rows[3]["epsilon_upper"] <= 1.5 + 1e-6
    grid.write_text('[grid]\nnoise_multiplier = [1.0, -2.0]\nsampling_rate = 0.01\nsteps = 100\n')
    assert cli.main(["sweep", str(grid), "--out", str(tmp_path / "x.csv")]) == 2
    assert "grid.toml: grid.noise_multiplier must be" in capsys.readouterr().err  # before any work


def test_a_completed_sweep_file_is_in_input_order(tmp_path, capsys):
    """Rows are written as they finish (most expensive first), and the file is rewritten in
    input order when the sweep completes: line i is row i."""
    from pld import cli

    grid = tmp_path / "grid.toml"
    grid.write_text('delta = 1e-5\n[grid]\nnoise_multiplier = [2.0, 0.8]\nsampling_rate = [0.01, 0.001]\n'
                    'steps = [100, 1000]\n')
    for name in ("rows.csv", "rows.jsonl"):
        out = tmp_path / name
        assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
        lines = out.read_text().splitlines()
        body = lines[1:] if name.endswith(".csv") else lines
        indices = [int(line.split(",", 1)[0]) if name.endswith(".csv") else json.loads(line)["index"]
                   for line in body]
        assert indices == list(range(8))
    capsys.readouterr()


def test_grid_files_take_every_run_field(tmp_path, capsys):
    from pld import cli

    grid = tmp_path / "grid.toml"
    grid.write_text('noise_multiplier = 1.0\ndataset_size = 50000\nbatch_size = 512\n'
                    '[grid]\nepochs = [1, 2]\nsampling = ["poisson", "balls_in_bins"]\n'
                    '[[rows]]\ntarget_epsilon = 3.0\n'
                    '[[rows]]\nepochs = 2\ndrop_last = true\nphysical_batch_size = 128\n')
    out = tmp_path / "rows.jsonl"
    assert cli.main(["sweep", str(grid), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    rows = _rows(out)
    assert [r["index"] for r in rows] == list(range(6))
    assert [(r["steps"], r["steps_per_epoch"]) for r in rows[:4]] == [(98, 98), (98, 98), (196, 98), (196, 98)]
    ref = pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=2, sampling="balls_in_bins").epsilon(1e-5)
    assert rows[3]["epsilon_upper"] == pytest.approx(ref, rel=1e-12)
    assert rows[4]["solved_for"] == "epochs" and rows[4]["epsilon_upper"] <= 3.0
    assert rows[4]["steps"] == 98 * rows[4]["epochs"]
    assert (rows[5]["steps"], rows[5]["steps_per_epoch"], rows[5]["drop_last"]) == (194, 97, True)
    capsys.readouterr()


_UNGUARDED = """
import pld.accounting.sweeps as sweeps
print(sweeps.unguarded_main_call())
def f():
    return sweeps.unguarded_main_call()
print(f())
if __name__ == "__main__":
    print(f())
pool = sweeps.process_pool(2)
"""


def test_a_script_without_the_main_guard_is_told_what_to_add(tmp_path):
    """A pool started at a script's top level would be started again by every worker, which
    imports the script: one clear line says to add the guard, before any process starts."""
    script = tmp_path / "train.py"
    script.write_text(_UNGUARDED)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    out = p.stdout.splitlines()
    assert out == ["train.py, line 3", "train.py, line 6", "None"]
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: pld.sweep runs its configurations in worker processes")
    assert 'put it under `if __name__ == "__main__":`' in last and "(train.py, line 9)" in last
    assert "BrokenProcessPool" not in p.stderr and p.stderr.count("Traceback") == 1
