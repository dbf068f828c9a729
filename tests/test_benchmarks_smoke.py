"""Smoke test of the benchmark harness: one trivial workload, one repetition, no timing assertions."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is run from the repository root, not installed
    sys.path.insert(0, str(ROOT))

from benchmarks import run as R  # noqa: E402
from benchmarks import workloads as W  # noqa: E402


def test_trivial_workload_runs_through_pld_and_rdp():
    w = W.Workload("smoke", "smoke", ((1.0, 0.01, 100),))
    cfg = R.Config.make(quick=True, reps=1, verbose=False)
    peers = [W.PldPeer(), W.PldRdpPeer()]
    rows, facts = R.bench_workload(w, peers, cfg)
    by = {r.label: r for r in rows}
    pld_row = next(r for r in rows if isinstance(r.peer, W.PldPeer) and not r.warm)
    warm = next(r for r in rows if r.warm)
    rdp_row = next(r for r in rows if isinstance(r.peer, W.PldRdpPeer))
    assert len(by) == 3
    lo, hi = pld_row.answer.lower, pld_row.answer.upper
    assert 0 < lo <= hi < math.inf
    assert (warm.answer.lower, warm.answer.upper) == (lo, hi)
    assert rdp_row.answer.upper >= lo  # RDP is an upper bound
    assert len(pld_row.walls) == 1 and pld_row.walls[0] > 0
    text = R.table(rows)
    assert "pld (certified bracket)" in text and "smoke" in text
    assert "pld/" in R.ratio_summary(rows)
    assert set(facts) >= {"load_start", "load_end"}


def test_sections_and_workloads_are_named():
    names = [w.name for w in W.workloads()]
    assert names == [w.name for w in W.workloads(quick=True)]
    assert set(names) <= set(R.SECTIONS)
    assert {"scaling", "process"} <= set(R.SECTIONS)


def test_equal_accuracy_refines_a_peer_into_the_widened_bracket():
    from benchmarks import equal_accuracy as E

    w = W.Workload("smoke", "smoke", ((1.0, 0.01, 100),))
    res = E.bench(w, ["dp_accounting"], reps=1, limit=10.0, log=lambda msg: None)
    lo, hi = res["pld"]
    base, default, equal = res["settings"]
    assert base.library == "pld" and (base.lower, base.value) == (lo, hi) and 0 < lo <= hi
    assert default.grid == "default" and default.h == 1e-4 and default.value is not None
    # either found (and then inside pld's bracket widened by its width) or said why not
    if equal.h is not None:
        assert lo - (hi - lo) <= equal.value <= hi + (hi - lo)
        assert equal.h <= 1e-4 and len(equal.walls) == 1
    else:
        assert equal.note.startswith("never as accurate")
    text = E.table([res])
    assert "| smoke | pld | default |" in text and "dp_accounting" in text


def test_opake_native_module_loads_when_installed():
    if importlib.util.find_spec("opake") is None:
        pytest.skip("opake-accounting is not installed")
    assert W.OpakePeer().available() is None
    eps = W.opake_epsilon(((1.0, 0.01, 100),), 1e-5)
    assert 0 < eps < 10


def test_profile_query_reports_phases_kernels_and_threads(tmp_path):
    """benchmarks.profile_query: the phases and kernels it wraps exist (a
    renamed function would leave a row out silently), and every number it
    prints parses; one query of the cheapest workload, in child processes."""
    from benchmarks import profile_query as P

    out = tmp_path / "profile.md"
    assert P.main(["--workload", "tiny-loss", "--queries", "1", "--rounds", "1", "--out", str(out)]) == 0
    text = out.read_text()
    for _, path in P.PHASES:
        if path != "bulk_shift":  # (the dominated side's search: not every law has a bulk to shift)
            assert f"| {path.split(' ')[0]}" in text or path in text, path
    assert "| kernel " in text and "GIL hand-off probe" in text
    head, _, timeline = text.partition("Timeline of the median query")
    rows = [line for line in head.splitlines() if line.startswith("| ") and not line.startswith("| where")]
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert float(cells[1]) >= 0 and float(cells[2]) > 0, line
    spans = [line for line in timeline.splitlines() if line.startswith("| ") and not line.startswith("| thread")]
    assert any("dominating side" in line for line in spans) and any("preparation" in line for line in spans)
    for line in spans:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert 0 <= float(cells[2]) <= float(cells[3]) and float(cells[4]) >= 0, line


def test_results_keep_their_hand_written_sections(tmp_path):
    """A benchmark run rewrites only the generated part of RESULTS.md (issue 37: a full run
    used to drop the coverage sections)."""
    from benchmarks.run import GENERATED_BEGIN, GENERATED_END, write_generated

    path = tmp_path / "RESULTS.md"
    write_generated(path, "# run 1\n")
    path.write_text(path.read_text() + "\n\n## Coverage (hand-written)\nkept\n")
    write_generated(path, "# run 2\n")
    text = path.read_text()
    assert "# run 2" in text and "# run 1" not in text and "## Coverage (hand-written)\nkept" in text
    assert text.index(GENERATED_BEGIN) < text.index("# run 2") < text.index(GENERATED_END) < text.index("kept")
