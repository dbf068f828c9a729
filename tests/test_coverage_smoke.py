"""Smoke test of the coverage benchmark (benchmarks/coverage.py): three quick settings through
the worker processes, one dp_accounting and one oracle reference; no timing assertions."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is run from the repository root, not installed
    sys.path.insert(0, str(ROOT))

from benchmarks import coverage as C  # noqa: E402

QUICK = {"sigma": (0.8, 2.0), "q": (1e-3, 0.05), "T": (50, 200), "delta": (1e-7, 1e-5)}


def test_sampling_is_seeded_log_uniform_and_prefix_stable():
    a = C.sample_settings(50, seed=4)
    b = C.sample_settings(3, seed=4)
    assert [s.key() for s in a[:3]] == [s.key() for s in b]
    assert a != C.sample_settings(50, seed=5)
    for s in a:
        assert 0.3 <= s.sigma <= 6 and 3e-6 <= s.q <= 0.5 and 50 <= s.T <= 3_000_000 and 1e-12 <= s.delta <= 1e-4
    # log-uniform: the median of log q sits near the middle of the log range
    mid = 0.5 * (math.log(3e-6) + math.log(0.5))
    logs = sorted(math.log(s.q) for s in C.sample_settings(400, seed=1))
    assert abs(logs[200] - mid) < 0.1 * (math.log(0.5) - math.log(3e-6))


def test_judging_references():
    r = {"pld": {"status": "ok", "lower": 1.0, "upper": 1.1}}
    r["dp_accounting"] = {"status": "ok", "upper": 0.99}
    C._judge_reference(r, "dp_accounting", one_sided=True)
    assert r["dp_accounting"]["verdict"].startswith("VIOLATION")
    r["dp_accounting"] = {"status": "ok", "upper": 1.2}
    C._judge_reference(r, "dp_accounting", one_sided=True)
    assert r["dp_accounting"]["verdict"] == "above"
    r["oracle"] = {"status": "ok", "lower": 1.05, "upper": 1.3}
    C._judge_reference(r, "oracle", one_sided=False)
    assert r["oracle"]["verdict"] == "intersects"
    r["oracle"] = {"status": "ok", "lower": 1.11, "upper": 1.3}
    C._judge_reference(r, "oracle", one_sided=False)
    assert r["oracle"]["verdict"].startswith("VIOLATION")
    rec = C.evaluate({"pld": {"status": "ok", "lower": 1.0, "upper": 1.0 + 2e-4, "warnings": []}})
    assert not rec["pld"]["within"] and rec["pld"]["silent_miss"] and rec["pld"]["ratio"] > 1


def test_self_consistency_rule():
    d = 1e-5
    assert C.consistent(0.5, d, [0.9e-5, 1.0e-5], [1.0e-5, 1.1e-5])
    assert not C.consistent(0.5, d, [1.1e-5, 1.2e-5], [1.0e-5, 1.1e-5])   # upper end not (eps, delta)-DP
    assert not C.consistent(0.5, d, [0.9e-5, 1.0e-5], [0.8e-5, 0.9e-5])   # lower end above the truth
    # epsilon clamped at 0 with delta(0) < delta: only the upper condition applies
    assert C.consistent(0.0, d, [0.8e-5, 0.9e-5], [0.8e-5, 0.9e-5])


@pytest.mark.slow  # three worker processes each load pld's kernels: ~20 s
def test_three_quick_settings_end_to_end(tmp_path):
    jsonl = tmp_path / "cov.jsonl"
    cfg = C.Config(n=3, seed=0, timeout=120.0, ranges=dict(QUICK), peer_n=1, peer_worst=0, peer_vdi=1e-3,
                   peer_timeout=120.0, oracle_worst=1, oracle_max_points=2**16, oracle_timeout=300.0,
                   verbose=False, jsonl=jsonl)
    recs, md = C.run(cfg)
    assert len(recs) == 3
    for r in recs:
        p = r["pld"]
        assert p["status"] == "ok", p
        assert 0 < p["lower"] <= p["upper"] < math.inf
        assert p["consistent"] is True
        assert p["ratio"] == (p["upper"] - p["lower"]) / C.target_width(p["upper"])
    peers = [r for r in recs if "dp_accounting" in r]
    oracles = [r for r in recs if "oracle" in r]
    assert len(peers) == 1 and peers[0]["dp_accounting"]["status"] == "ok"
    assert peers[0]["dp_accounting"]["verdict"] in ("inside", "above")
    assert len(oracles) == 1 and oracles[0]["oracle"]["status"] == "ok", oracles[0]["oracle"]
    assert not oracles[0]["oracle"]["verdict"].startswith("VIOLATION")
    assert "## Coverage (issue 19)" in md and "within target" in md and "Worst 10 settings" in md
    back = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [b["index"] for b in back] == [0, 1, 2] and back[0]["pld"]["upper"] == recs[0]["pld"]["upper"]


def test_a_hanging_task_times_out_and_the_worker_is_replaced():
    w = C.Worker("sleep")
    try:
        w._start()
        first = w.proc
        status, _ = w.run({"seconds": 60}, timeout=1.0)
        assert status == "timeout" and w.proc is None and not first.is_alive()
        status, res = w.run({"seconds": 0.01}, timeout=60.0)
        assert status == "ok" and res == {"slept": 0.01}
    finally:
        w.stop()


def test_allocation_samples_stay_in_their_ranges():
    """The allocation coverage's spaces: k in [1, t/4] by default; k = 1, many epochs at a
    strict delta with ``--space strict``; k = 1 in pld.dpsgd's balls-in-bins ranges with
    ``--space dpsgd``; a prefix of a longer sample is a shorter one."""
    from benchmarks import coverage_allocation as A

    for space, ranges in (("default", A.RANGES), ("strict", A.RANGES_STRICT), ("dpsgd", A.RANGES_DPSGD)):
        sample = A.sample_settings(200, 3, space)
        assert sample[:7] == A.sample_settings(7, 3, space)
        for s in sample:
            assert ranges["sigma"][0] <= s.sigma <= ranges["sigma"][1]
            assert ranges["t"][0] <= s.t <= ranges["t"][1]
            assert ranges["epochs"][0] <= s.epochs <= ranges["epochs"][1]
            assert ranges["delta"][0] <= s.delta <= ranges["delta"][1]
            assert 1 <= s.k <= (max(1, s.t // 4) if space == "default" else 1)


def test_allocation_round_oracle_judges_one_epoch():
    """The one-round truth accepts pld's bracket and contradicts one whose upper end is 1% low."""
    import pld
    from benchmarks import coverage_allocation as A

    lo, hi = pld.dpsgd(5.0, 1 / 10, 10, sampling="balls_in_bins").epsilon_bounds(1e-9)
    for upper, verdict in ((hi, "ok"), (0.99 * lo, "CONTRADICTED")):
        rec = {"sigma": 5.0, "t": 10, "k": 1, "epochs": 1, "delta": 1e-9,
               "pld": {"status": "ok", "lower": min(lo, upper), "upper": upper, "wall": 0.0, "warnings": []}}
        A.judge_truths(rec, 0, mc=False)
        assert rec["truths"]["round_oracle"]["verdict"].startswith(verdict), rec["truths"]


def test_schedule_samples_keep_their_shapes():
    """The schedule benchmark's shapes: ``warmup`` is a warm-up phase (sigma 2-12, q 1e-4-1e-2,
    1-20 steps) then one phase of the coverage box; ``mixed`` 2-4 phases; both seeded."""
    from benchmarks import coverage_schedules as CS

    warm = CS.sample_schedules(50, 11, "warmup")
    assert warm == CS.sample_schedules(50, 11, "warmup")
    for r in warm:
        (s0, q0, t0), (s, q, t) = r["phases"]
        assert 2.0 <= s0 <= 12.0 and 1e-4 <= q0 <= 1e-2 and 1 <= t0 <= 20
        assert 0.3 <= s <= 6.0 and 3e-6 * 0.95 <= q <= 0.5 and 50 * 0.95 <= t <= 3e6
        assert 1e-12 * 0.95 <= r["delta"] <= 1e-4 * 1.05
    assert all(2 <= len(r["phases"]) <= 4 for r in CS.sample_schedules(20, 7))


def test_without_replacement_sample_and_record():
    """The sampling-without-replacement benchmark: a seeded sample in its box, and one
    record with both pairs' brackets, the upper pair's above the concrete pair's lower end."""
    from benchmarks import coverage_without_replacement as CW

    rows = CW.sample_settings(40, 6)
    assert rows == CW.sample_settings(40, 6)
    for r in rows:
        assert 0.5 <= r["sigma"] <= 4.0 and 1e-6 * 0.99 <= r["q"] <= 1e-3 * 1.01
        assert 0.9 <= r["q"] * r["T"] <= 301 and 1e-12 * 0.99 <= r["delta"] <= 1e-5 * 1.01
    rec = CW.run_one({"index": 0, "sigma": 2.0, "q": 1e-3, "T": 2000, "delta": 1e-6}, 120.0)
    assert rec["status"] == "ok" and rec["class"] in ("within", "warned")
    assert rec["lower_pair"][0] <= rec["upper_pair"][1] and rec["lower"] <= rec["upper"] == rec["upper_pair"][1]
    assert "upper pair within its target" in CW.summary([rec])
