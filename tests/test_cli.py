"""The ``pld`` command: the installed console script end to end, plus in-process checks.

Subprocess tests run the console script installed next to the interpreter
(``pld = "pld.cli:main"``); the rest call :func:`pld.cli.main` directly, which
is much cheaper.  Configurations are small so the file runs in seconds.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import pld
from pld import cli
from pld.report import MNIST_EXAMPLE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracles as O  # noqa: E402

PEER_VALUES = pathlib.Path(__file__).resolve().parent / "data" / "peer_values.json"

SMALL = ["--noise-multiplier", "2", "--sampling-rate", "0.05", "--steps", "50"]


def _script() -> list[str]:
    exe = shutil.which("pld", path=os.path.dirname(sys.executable)) or shutil.which("pld")
    return [exe] if exe else [sys.executable, "-m", "pld.cli"]


def run(*args, check=True, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PLD_TRACEBACK", None)
    p = subprocess.run(_script() + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300, cwd=cwd, env=env)
    if check:
        assert p.returncode == 0, p.stderr
        assert warnings_in(p.stderr) == [], p.stderr
    return p


def warnings_in(stderr: str) -> list[str]:
    """The lines of stderr that are not notes (``pld: note: ...`` and its continuation lines):
    warnings, errors, anything unexpected."""
    out, note = [], False
    for line in stderr.splitlines():
        if line.startswith("pld: note: "):
            note = True
        elif not (note and line.startswith("    ")):
            note = False
            out.append(line)
    return out


def call(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, fragment=None):
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pld: error: ")
    assert "Traceback" not in err
    if fragment is not None:
        assert fragment in lines[0], lines[0]


# ------------------------------------------------------------ console script
def test_version_and_help():
    assert run("--version").stdout.strip() == f"pld {pld.__version__}"
    out = run("--help").stdout
    assert "examples:" in out and "pld dpsgd" in out and "pld calibrate" in out and "14100" in out


def test_dpsgd_json_round_trips():
    res = json.loads(run("dpsgd", *SMALL, "--delta", "1e-5", "--json").stdout)
    for key in ("epsilon_lower", "epsilon_upper", "delta", "noise_multiplier", "sampling_rate", "steps",
                "sampling", "neighbouring", "accountant", "seconds", "curve", "numerics", "warnings"):
        assert key in res, key
    assert res["noise_multiplier"] == 2.0 and res["sampling_rate"] == 0.05 and res["steps"] == 50
    assert res["delta"] == 1e-5 and res["sampling"] == "poisson" and res["runs"] == 1
    assert "add-or-remove" in res["neighbouring"]
    assert res["accountant"] == "pld: certified PLD, FFT composition"
    lo, hi = res["epsilon_lower"], res["epsilon_upper"]
    assert 0 < lo <= hi <= lo + 1e-4 * hi + 1e-6
    ref = pld.dpsgd(2.0, 0.05, 50).epsilon_bounds(1e-5)
    assert (lo, hi) == pytest.approx(ref, rel=1e-9)
    assert set(res["numerics"]["directions"]) == {"remove", "add"}
    curve = res["curve"]
    assert any(r["epsilon"] == hi for r in curve)
    eps = [r["epsilon"] for r in curve]
    ups = [r["delta_upper"] for r in curve]
    assert eps == sorted(eps) and ups == sorted(ups, reverse=True)
    assert all(r["delta_lower"] <= r["delta_upper"] for r in curve)


def test_dpsgd_default_is_the_mnist_example():
    out = run("dpsgd").stdout
    lines = out.splitlines()
    # the answer at a glance: line 1 (no warnings here), a short report below it
    assert lines[0].startswith("(2.3") and "-DP: certified epsilon in [2.3" in lines[0]  # about 2.39
    assert lines[0].endswith("at delta = 1e-05")
    assert len(lines) <= 13, out  # (with the attack line: the best attack's TPR at 1% FPR, issue 40)
    flat = " ".join(out.split())
    for text in ("MNIST", "sigma = 1.1", "T = 14100", "0.00426667", "add-or-remove", "clipping norm",
                 "one training run", "--verbose", "235 steps per epoch = ceil(60000 / 256)"):
        assert text in flat, text
    assert "Numerical settings" not in out and "grid spacing" not in out
    verbose = run("dpsgd", "--verbose").stdout
    assert verbose.splitlines()[0] == lines[0]
    for text in ("accountant", "pld: certified PLD, FFT composition", "delta             1e-05",
                 "sigma = 1.1", "T = 14100", "0.00426667", "add-or-remove", "clipping norm",
                 "one training run", "Accountant curve", "Numerical settings", "grid spacing", "tilt",
                 "FFT error bound"):
        assert text in verbose, text


def test_calibrate_solves_for_sigma():
    res = json.loads(run("calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.1",
                         "--steps", "10", "--json").stdout)
    assert res["solved_for"] == "noise_multiplier"
    assert res["epsilon_upper"] <= 1.0 < res["epsilon_upper"] * 1.01
    assert 1.0 < res["noise_multiplier"] < 3.0


def test_compose_spec_file(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"delta": 1e-5, "mechanisms": [
        {"type": "gaussian", "sigma": 2.0, "sampling_rate": 0.05, "count": 10},
        {"type": "pmfs", "p": [0.5, 0.5], "q": [0.4, 0.6]}]}))
    res = json.loads(run("compose", spec, "--json").stdout)
    ref = (pld.PoissonSampled(pld.Gaussian(2.0), 0.05).pld().self_compose(10)
           .compose(pld.FromPMFs((0.5, 0.5), (0.4, 0.6)).pld()).epsilon_bounds(1e-5))
    assert (res["epsilon_lower"], res["epsilon_upper"]) == pytest.approx(ref, rel=1e-9)
    assert res["queries"][0]["delta"] == 1e-5 and res["total_steps"] == 11
    assert res["components"][1]["description"] == "FromPMFs(2 outcomes) x 1"


def test_curve_csv():
    out = run("curve", *SMALL, "--eps-max", "2", "--points", "5", "--csv").stdout
    lines = out.strip().splitlines()
    assert lines[0] == "epsilon,delta_lower,delta_upper"
    rows = [[float(x) for x in line.split(",")] for line in lines[1:]]
    assert [r[0] for r in rows] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert all(0 <= lo <= hi <= 1 for _, lo, hi in rows)
    assert all(a[2] >= b[2] for a, b in zip(rows, rows[1:]))


@pytest.mark.parametrize("args, fragment", [
    (["dpsgd", "--noise-multiplier", "-1"], "--noise-multiplier"),
    (["dpsgd", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_flags_exit_2_with_one_line(args, fragment):
    p = run(*args, check=False)
    assert_one_line_error(p.returncode, p.stdout, p.stderr, fragment)


def test_bad_spec_points_at_the_field(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('[[mechanisms]]\ntype = "gaussian"\nsigma = 1.0\n'
                    '[[mechanisms]]\ntype = "laplace"\nscale = 1.0\n'
                    '[[mechanisms]]\ntype = "gaussian"\nsigma = -0.5\n')
    p = run("compose", spec, check=False)
    assert_one_line_error(p.returncode, p.stdout, p.stderr, "mechanisms[2].sigma: must be > 0")


# --------------------------------------------------------------- in process
def _args(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_config_resolution():
    cfg = cli._config(_args("dpsgd"))
    assert (cfg.noise_multiplier, cfg.sampling_rate, cfg.steps, cfg.delta) == (1.1, 256 / 60000, 14100, 1e-5)
    assert cfg.example and not cfg.batch_size_given and cfg.dataset_size == 60000
    assert MNIST_EXAMPLE.steps == 60 * math.ceil(60000 / 256) == 14100  # 60 epochs of the loader's 235 steps
    cfg = cli._config(_args("dpsgd", "--noise-multiplier", "1.1", "--epochs", "60", "--dataset-size", "60000",
                            "--batch-size", "256"))
    assert (cfg.sampling_rate, cfg.steps, cfg.batch_size_given, cfg.example) == (256 / 60000, 14100, True, None)
    cfg = cli._config(_args("dpsgd", "--epochs", "3", "--sampling-rate", "0.01", "--noise-multiplier", "0.9"))
    assert (cfg.steps, cfg.noise_multiplier) == (300, 0.9)  # exact: no 300.00000000000006 -> 301
    cfg = cli._config(_args("dpsgd", "-q", "0.02", "-T", "7", "--sampling", "without-replacement", "--runs", "3",
                            "--noise-multiplier", "1"))
    assert (cfg.sampling, cfg.runs, cfg.total_steps) == ("without_replacement", 3, 21)


def test_a_missing_noise_multiplier_is_an_error_unless_no_run_flag_is_given(capsys):
    code, out, err = call(capsys, "dpsgd", "-n", "50000", "-b", "512", "--epochs", "10")
    assert_one_line_error(code, out, err, "give --noise-multiplier")
    assert cli._config(_args("dpsgd", "--sampling", "shuffle")).example  # no run flag: the example, labelled


@pytest.mark.parametrize("args, fragment", [
    (["dpsgd", "--sigma", "1", "--steps", "10"], "give --sampling-rate"),
    (["dpsgd", "--sigma", "1", "-q", "0.1"], "give --steps"),
    (["dpsgd", "--sigma", "1", "-q", "0.1", "--steps", "10", "--epochs", "2"], "either --steps or --epochs"),
    (["dpsgd", "--sigma", "1", "-q", "0.1", "--batch-size", "10", "-n", "100", "-T", "3"],
     "either --sampling-rate or --batch-size"),
    (["dpsgd", "--sigma", "1", "--batch-size", "10", "-T", "3"], "--batch-size needs --dataset-size"),
    (["dpsgd", "--sigma", "1", "--batch-size", "1000", "-n", "100", "-T", "3"], "larger than --dataset-size"),
    (["dpsgd", "--sigma", "1", "--epochs", "2", "-n", "100"], "give --sampling-rate"),
    (["dpsgd", "--sigma", "1", "-n", "100", "-b", "10", "-T", "3", "--sampling", "shuffle", "--drop-last",
      "--steps-per-epoch", "3"], "--steps-per-epoch=3 does not match --dataset-size and --batch-size"),
    (["dpsgd", "--sigma", "1", "-q", "0.3", "-T", "3", "--sampling", "shuffle"], "needs whole batches per epoch"),
    (["dpsgd", "--sigma", "1", "-n", "100", "-b", "10", "-T", "3", "--physical-batch-size", "20"],
     "larger than the logical"),
    (["dpsgd", "-q", "1.5", "-T", "3"], "must be a probability in (0, 1], got '1.5'; for 1.5% give 0.015"),
    (["dpsgd", "-q", "0.1", "-T", "2.5"], "must be an integer"),
    (["dpsgd", "-q", "0.1", "-T", "0"], "must be an integer >= 1"),
    (["dpsgd", "--delta", "0"], "must be in (0, 1)"),
    (["dpsgd", "--delta", "nan"], "must be finite"),
    (["dpsgd", "--sampling", "shuffle-ish"], "must be 'poisson', 'without_replacement'"),
    (["dpsgd", "--plot", "out.unknown"], "image format"),
    (["dpsgd", "--save", "/no/such/dir/x.pld"], "does not exist"),
    (["calibrate", "--target-epsilon", "1", "-q", "0.1"], "exactly two of"),
    (["calibrate", "--target-epsilon", "1", "-q", "0.1", "-T", "5", "--noise-multiplier", "1"], "exactly two of"),
    (["calibrate", "-q", "0.1", "-T", "5"], "--target-epsilon"),
    (["calibrate", "--target-epsilon", "1", "--noise-multiplier", "1", "-q", "0.1", "--epochs", "2"],
     "exactly two of"),
    (["compose", "/no/such/spec.json"], "No such file"),
    (["curve", "--sigma", "1", "-q", "0.1", "-T", "5", "--eps-min", "3", "--eps-max", "2"], "must be larger than"),
    (["curve", "-q", "0.1", "-T", "5", "--csv", "--json"], "not allowed with"),
    ([], "choose a command"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_errors(capsys, args, fragment):
    assert_one_line_error(*call(capsys, *args), fragment)


def test_engine_errors_are_one_line(capsys, monkeypatch):
    import pld.report as report

    def boom(*a, **k):
        raise ValueError("sampling must be one of ('poisson',)")
    monkeypatch.setattr(report, "dpsgd_pld", boom)
    assert_one_line_error(*call(capsys, "dpsgd", *SMALL), "sampling must be one of")

    class Weird(Exception):
        pass

    def weird(*a, **k):
        raise Weird("multi\nline")
    monkeypatch.setattr(report, "dpsgd_pld", weird)
    assert_one_line_error(*call(capsys, "dpsgd", *SMALL), "internal error (Weird): multi line")


def test_subcommand_help_has_examples(capsys):
    assert call(capsys, "dpsgd", "--help")[0] == 0
    code, out, _ = call(capsys, "compose", "--help")
    assert code == 0 and "mechanism types:" in out and "approx_dp" in out


def test_report_states_what_a_dpsgd_figure_needs(capsys):
    code, out, err = call(capsys, "dpsgd", *SMALL, "--runs", "2", "--dataset-size", "1000", "--verbose")
    assert code == 0 and warnings_in(err) == [], err
    out = " ".join(out.split())  # undo line wrapping
    for text in ("pld: certified PLD, FFT composition", "sigma = 2", "q = 0.05", "T = 50", "n = 1000",
                 "Poisson", "add-or-remove one record", "clipping norm", "2 training runs (composed)",
                 "2 x 50 = 100 steps", "delta lower", "delta upper", "grid spacing", "tilt", "grid points",
                 "FFT error bound", "bracket target"):
        assert text in out, text
    assert "warning" not in out
    code, out, _ = call(capsys, "dpsgd", *SMALL, "--runs", "2", "--json")
    two = json.loads(out)
    one = pld.dpsgd(2.0, 0.05, 50).epsilon(1e-5)
    assert two["total_steps"] == 100 and two["epsilon_upper"] > one
    assert two["epsilon_upper"] == pytest.approx(pld.dpsgd(2.0, 0.05, 100).epsilon(1e-5), rel=1e-9)


def test_warnings(capsys):
    code, out, _ = call(capsys, "dpsgd", "--noise-multiplier", "3", "--epochs", "1", "--dataset-size", "200",
                        "--batch-size", "20", "--delta", "0.01", "--json")
    res = json.loads(out)
    w = " ".join(res["warnings"])
    assert "not below 1/dataset size" in w and "--sampling without_replacement" in w and "--sampling shuffle" in w
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "0.3", "-q", "1", "-T", "1", "--curve-points", "0")
    # warnings go to stderr: the first line of the output is the answer
    assert code == 0 and out.startswith("(") and err.startswith("pld: warning:") and "> 10: a very weak" in err
    flat = " ".join(err.split())
    assert "q = 1 is full-batch training" in flat and "give --sampling-rate 0.01" in flat
    assert "warning" not in out
    code, out, _ = call(capsys, "dpsgd", "--noise-multiplier", "3", "--epochs", "1", "--dataset-size", "200",
                        "--batch-size", "20", "--sampling", "without-replacement", "--json")
    res = json.loads(out)
    assert res["sampling"] == "without_replacement" and "substitute" in res["neighbouring"]
    assert not any("without_replacement" in x for x in res["warnings"])
    assert res["epsilon_upper"] == pytest.approx(
        pld.dpsgd(3.0, 0.1, 10, sampling="without_replacement").epsilon(1e-5), rel=1e-9)
    # the Poisson report's note (stderr, and the JSON) points to the shuffling scheme
    code, out, err = call(capsys, "dpsgd", *SMALL, "--json")
    assert any("--sampling shuffle" in n for n in json.loads(out)["notes"]) and "--sampling shuffle" in err


def test_plot_save_and_compose_on_top(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png, saved = tmp_path / "run.png", tmp_path / "run.pld"
    code, out, err = call(capsys, "dpsgd", *SMALL, "--plot", png, "--save", saved, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    assert pld.load(saved).epsilon_bounds(1e-5) == (res["epsilon_lower"], res["epsilon_upper"])
    spec = tmp_path / "two.json"
    spec.write_text(json.dumps({"mechanisms": [{"type": "saved", "path": "run.pld", "count": 2}]}))
    code, out, err = call(capsys, "compose", spec, "--json")
    assert code == 0, err
    assert json.loads(out)["epsilon_upper"] == pytest.approx(pld.dpsgd(2.0, 0.05, 100).epsilon(1e-5), rel=1e-9)
    assert sorted(os.listdir(tmp_path)) == ["run.pld", "run.png", "two.json"]


def test_curve_outputs_are_written_whole_or_not_at_all(capsys, tmp_path):
    target = tmp_path / "c.json"
    code, out, err = call(capsys, "curve", *SMALL, "--epsilons", "0.5,1,2", "--json", "--output", target)
    assert code == 0 and out == "" and err == f"pld: wrote {target} (3 epsilons, JSON, {target.stat().st_size} bytes)\n"
    res = json.loads(target.read_text())
    assert [r["epsilon"] for r in res["curve"]] == [0.5, 1.0, 2.0]
    assert res["config"]["steps"] == 50 and res["delta"] == 1e-5
    # tuned per-epsilon brackets contain the one-grid ones' truth: they must overlap
    code, out, _ = call(capsys, "curve", *SMALL, "--epsilons", "1", "--tuned", "--json")
    tuned = json.loads(out)["curve"][0]
    one = res["curve"][1]
    assert tuned["delta_lower"] <= one["delta_upper"] and one["delta_lower"] <= tuned["delta_upper"]
    bad = tmp_path / "bad.csv"
    assert_one_line_error(*call(capsys, "curve", *SMALL, "--eps-min", "5", "--eps-max", "1", "--csv",
                                "--output", bad), "must be larger")
    assert not bad.exists()
    assert sorted(os.listdir(tmp_path)) == ["c.json"]


def test_calibrate_wiring_and_check(capsys, monkeypatch):
    calibrate = pytest.importorskip("pld.accounting.calibrate")
    seen = {}

    def fake_steps(target_epsilon, delta, noise_multiplier, sampling_rate, *, sampling="poisson", info=None):
        seen.update(target=target_epsilon, delta=delta, sigma=noise_multiplier, q=sampling_rate, sampling=sampling)
        return 40

    monkeypatch.setattr(calibrate, "calibrate_steps", fake_steps)
    code, out, err = call(capsys, "calibrate", "--target-epsilon", "3", "--noise-multiplier", "2",
                          "-q", "0.05", "--sampling", "without-replacement", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert seen == dict(target=3.0, delta=1e-5, sigma=2.0, q=0.05, sampling="without_replacement")
    assert res["solved_for"] == "steps" and res["steps"] == 40
    ref = pld.dpsgd(2.0, 0.05, 40, sampling="without_replacement").epsilon_bounds(1e-5)
    assert (res["epsilon_lower"], res["epsilon_upper"]) == pytest.approx(ref, rel=1e-9)
    code, out, err = call(capsys, "calibrate", "--target-epsilon", "3", "--noise-multiplier", "2",
                          "-q", "0.05")
    assert code == 0 and "Calibrated steps T = 40" in out and "check: certified epsilon" in out


def test_calibrate_answers_in_the_unit_asked(capsys):
    """A dataset and batch size define an epoch: the answer is in epochs; with a dataset size
    and epochs, the batch size is solved for.  Each answer fits (certified upper end <= target)
    and one more does not (its upper end > target)."""
    code, out, err = call(capsys, "calibrate", "--target-epsilon", "3", "--noise-multiplier", "1",
                          "-n", "50000", "-b", "512", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["solved_for"] == "epochs" and res["steps_per_epoch"] == 98 and res["steps"] == 98 * res["epochs"]
    E = res["epochs"]
    assert pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=E).epsilon(1e-5) <= 3.0
    assert pld.dpsgd(1.0, dataset_size=50000, batch_size=512, epochs=E + 1).epsilon(1e-5) > 3.0
    assert res["next"]["value"] == E + 1 and res["next"]["epsilon_upper"] > 3.0
    code, out, err = call(capsys, "calibrate", "--target-epsilon", "3", "--noise-multiplier", "1",
                          "-n", "50000", "--epochs", "10")
    assert code == 0, err
    assert out.startswith("Calibrated batch size = ")
    b = int(out.split()[4])
    assert pld.dpsgd(1.0, dataset_size=50000, batch_size=b, epochs=10).epsilon(1e-5) <= 3.0
    assert pld.dpsgd(1.0, dataset_size=50000, batch_size=b + 1, epochs=10).epsilon(1e-5) > 3.0


def test_lab_runs_the_real_lab(capsys, tmp_path):
    """`pld lab` on pld.baselines.lab itself: its exact epsilon is the Gaussian closed form
    (tests/oracles.py, no pld), inside pld's bracket, which meets its target; the plot
    is a real PNG; the text report is the seed table."""
    code, out, err = call(capsys, "lab", "--sigma", "4", "--steps", "10", "--delta", "1e-5", "--json",
                          "--plot", tmp_path / "lab.png")
    assert code == 0, err
    res = json.loads(out)
    assert (res["sigma"], res["steps"], res["delta"]) == (4.0, 10, 1e-5)
    exact = O.gaussian_epsilon(1e-5, math.sqrt(10) / 4.0)
    assert res["exact_epsilon"] == pytest.approx(exact, rel=1e-10)
    lo, hi = res["pld_epsilon_lower"], res["pld_epsilon_upper"]
    assert lo <= exact <= hi and hi - lo <= 1e-4 * hi + 1e-6
    data = (tmp_path / "lab.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert sorted(os.listdir(tmp_path)) == ["lab.png"]
    code, out, err = call(capsys, "lab", "--sigma", "4", "--steps", "10", "--delta", "1e-5")
    assert code == 0, err
    assert f"exact epsilon   {exact:.2f}" in out and "RDP epsilon" in out


def test_compare_runs_the_real_peers(capsys):
    """`pld compare` with the peers installed (the test extra): each peer's value is
    the one tests/data/peer_values.json stores for the same configuration (computed by
    calling the peers directly), and sits where it must around pld's bracket."""
    cfg = (2.0, 0.1, 100, 1e-8)
    code, out, err = call(capsys, "compare", "--noise-multiplier", "2", "-q", "0.1", "-T", "100",
                          "--delta", "1e-8", "--json")
    assert code == 0, err
    res = json.loads(out)
    lo, hi = res["pld_epsilon_lower"], res["pld_epsilon_upper"]
    assert 0 < lo <= hi <= lo + 1e-4 * hi + 1e-6
    peers = {p["key"]: p for p in res["peers"]}
    assert {"dp_accounting.pld", "dp_accounting.rdp", "prv_accountant"} <= set(peers)
    assert all(peers[k]["installed"] for k in ("dp_accounting.pld", "dp_accounting.rdp", "prv_accountant"))
    stored = {tuple(e["config"]): e for e in json.loads(PEER_VALUES.read_text())["configs"]}[cfg]
    dpa = peers["dp_accounting.pld"]["epsilon"]
    assert dpa == pytest.approx(stored["dp_accounting"]["value"], rel=1e-9)
    assert lo <= dpa <= hi + 1e-4 * hi  # pessimistic, and close
    prv = peers["prv_accountant"]
    assert [prv["epsilon_lower"], prv["epsilon"], prv["epsilon_upper"]] == pytest.approx(
        stored["prv_accountant"]["value"], rel=1e-6)
    assert prv["epsilon_lower"] <= hi and lo <= prv["epsilon_upper"]
    assert hi <= peers["dp_accounting.rdp"]["epsilon"] <= res["rdp_epsilon_classic"] * (1 + 1e-6)
    code, out, err = call(capsys, "compare", "--noise-multiplier", "2", "-q", "0.1", "-T", "100",
                          "--delta", "1e-8")
    assert code == 0, err
    assert "prv_accountant" in out and "dp_accounting" in out


def test_compare_defaults_are_the_mnist_run(capsys, monkeypatch):
    """Without flags `pld compare` accounts the MNIST example (the real pld.baselines.lab.compare,
    its arguments recorded on the way; peers off to keep it cheap)."""
    import pld.baselines.lab

    seen = []
    real = pld.baselines.lab.compare

    def recording(*args, **kwargs):
        seen.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(pld.baselines.lab, "compare", recording)
    code, out, err = call(capsys, "compare", "--json", "--no-peers", "--sampling", "without-replacement")
    assert code == 0, err
    assert seen == [((1.1, 256 / 60000, 14100, 1e-5), {"sampling": "without_replacement", "peers": False})]
    res = json.loads(out)
    assert res["peers"] == [] and res["sampling"] == "without_replacement"
    ref = pld.dpsgd(1.1, 256 / 60000, 14100, sampling="without_replacement").epsilon_bounds(1e-5)
    assert (res["pld_epsilon_lower"], res["pld_epsilon_upper"]) == pytest.approx(ref, rel=1e-12)


def test_lab_missing_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pld.baselines.lab", None)  # import fails as if the module were absent
    code, out, err = call(capsys, "lab")
    assert code == 2 and err.startswith("pld: error: ") and len(err.splitlines()) == 1


def test_lab_console_script():
    """The installed entry point runs the real lab (JSON on stdout, nothing on stderr)."""
    res = json.loads(run("lab", "--sigma", "4", "--steps", "10", "--json").stdout)
    assert res["pld_epsilon_lower"] <= res["exact_epsilon"] <= res["pld_epsilon_upper"]


def test_plot_without_matplotlib_fails_before_any_work(capsys, monkeypatch, tmp_path):
    import pld.report as report

    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(report, "dpsgd_pld", lambda cfg: pytest.fail("accounting ran before the plot check"))
    out = tmp_path / "x.png"
    assert_one_line_error(*call(capsys, "dpsgd", *SMALL, "--plot", out), "pip install 'pld[plot]'")
    assert not out.exists()


def test_curve_for_a_spec(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('delta = 1e-6\n[[mechanisms]]\ntype = "gaussian"\nsigma = 4.0\ncount = 4\n')
    code, out, err = call(capsys, "curve", "--spec", spec, "--runs", "4", "--epsilons", "1,2", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["delta"] == 1e-6 and res["config"]["runs"] == 4
    # 16 releases of sigma 4 = one release of sigma 1: delta(1) = Phi(-0.5) - e Phi(-1.5) = 0.1269
    lo, hi = res["curve"][0]["delta_lower"], res["curve"][0]["delta_upper"]
    assert lo <= 0.12693673 <= hi and hi - lo < 1e-4


def test_first_command_line_run_compiles_in_parallel_and_says_so_once(tmp_path):
    """A cold kernel cache: the first `pld dpsgd` compiles (pld.warm, parallel
    processes), says so in one line on stderr and counts it in its last line;
    the second run compiles nothing and says nothing."""
    import os
    import re
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PLD_KERNELS_AOT="off")
    cmd = [sys.executable, "-m", "pld", "dpsgd", "--noise-multiplier", "2", "--sampling-rate", "0.5",
           "--steps", "3"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert re.match(r"^pld: first run on this machine: compiling \d+ numba kernels in \d+ process",
                    first.stderr), first.stderr
    assert len(warnings_in(first.stderr)) == 1, first.stderr
    assert "s compiling the numba kernels, once)" in first.stdout.strip().splitlines()[-1]
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert second.returncode == 0 and warnings_in(second.stderr) == [], second.stderr


def test_shuffle_with_given_steps_per_epoch_and_drop_last(capsys):
    # the steps per epoch given with a drop_last loader: the shuffle bounds get the sizes too
    # (they failed without them), so the lower end mixes in the epochs a record sits out
    code, out, err = call(capsys, "dpsgd", "--noise-multiplier", "1.5", "-n", "10000", "-b", "512", "--drop-last",
                          "--steps-per-epoch", "19", "--epochs", "2", "--sampling", "shuffle", "--json")
    assert code == 0, err
    from pld.accounting.shuffle import shuffle_bounds

    r = json.loads(out)
    sits_out = shuffle_bounds(1.5, dataset_size=10000, batch_size=512, drop_last=True, epochs=2, delta=1e-5)
    always_in = shuffle_bounds(1.5, steps_per_epoch=19, epochs=2, delta=1e-5)
    assert r["epsilon_lower"] == pytest.approx(sits_out.epsilon_lower, rel=1e-9)
    assert r["epsilon_lower"] < always_in.epsilon_lower
