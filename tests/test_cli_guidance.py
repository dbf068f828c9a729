"""What a newcomer meets on the command line: errors that point the way, the
answer at a glance, files confirmed, epsilon per epoch, peers in compare.

Most cases run the installed ``pld`` entry point in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pld
from pld import cli
from pld.baselines import exact
from pld.report import footer

SMALL = ["--noise-multiplier", "2", "--sampling-rate", "0.05", "--steps", "50"]


def run(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    exe = shutil.which("pld", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "pld"]
    full = dict(os.environ)
    full.pop("PLD_TRACEBACK", None)
    full.update(env or {})
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300,
                          env=full, cwd=cwd)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pld: error: "), p.stderr
    return lines[0]


# ------------------------------------------------------------ errors that point the way
@pytest.mark.parametrize("args, expected", [
    (["dpsgd", "--noise-multiplyer", "1.0"], "did you mean --noise-multiplier?"),
    (["dpsgd", "--sampling-rtae", "0.01"], "did you mean --sampling-rate?"),
    (["calibrate", "--target-epsilon", "2", "-q", "0.01", "--stpes", "100"], "did you mean --steps?"),
    (["dpsdg"], "did you mean 'dpsgd'?"),
    (["dpsgd", "--epsilon", "2"], "'pld calibrate --target-epsilon E ...'"),
    (["dpsgd", "--sampling-rate", "256"], "256 looks like a batch size: give --batch-size 256 --dataset-size N"),
    (["dpsgd", "--noise-multiplier", "1_0"], "must be a plain number without '_', got '1_0'"),
    (["dpsgd", "--steps", "1_000", "-q", "0.01"], "must be a plain number without '_', got '1_000'"),
    (["curve", "--points", "100000000"], "--points: must be at most 10000, got '100000000'"),
])
def test_errors_point_the_way(args, expected):
    assert expected in one_line_error(run(*args))


def test_epsilon_on_dpsgd_names_both_places_to_go():
    line = one_line_error(run("dpsgd", "--epsilon=2"))
    assert "pld calibrate" in line and "pld curve --epsilons" in line


def test_huge_epochs_get_a_short_message():
    line = one_line_error(run("dpsgd", "--sigma", "1", "--sampling-rate", "0.01", "--epochs", "1e300"))
    assert "above the limit of 1e12" in line and "1e+302" in line
    assert len(line) < 200 and not re.search(r"\d{20}", line)


def test_full_batch_rate_is_warned_about_on_stderr():
    p = run("dpsgd", "--noise-multiplier", "5", "--sampling-rate", "1", "--steps", "10")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert p.stderr.startswith("pld: warning: q = 1 is full-batch training")
    assert "give --sampling-rate 0.01" in " ".join(p.stderr.split())
    # the answer is the first line of the output (`pld dpsgd ... | head -1`)
    answer = lines[0]
    assert "-DP: certified epsilon in" in answer
    # full batch: T Gaussian releases, exact epsilon from the closed form
    lo, hi = map(float, re.search(r"in \[([\d.]+), ([\d.]+)\]", answer).groups())
    assert lo <= float(exact.gaussian_epsilon(1e-5, exact.gaussian_mu(5.0, 10))) <= hi


# ------------------------------------------------------------ the answer at a glance
def test_short_report_and_verbose(capsys):
    code = cli.main(["dpsgd", *SMALL])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("(") and "-DP: certified epsilon in [" in lines[0]
    assert len(lines) <= 9 and "--verbose" in lines[-1]  # (8, and the attack line of issue 40)
    assert cli.main(["dpsgd", *SMALL, "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert verbose.splitlines()[0] == lines[0]
    assert "Numerical settings" in verbose and "Accountant curve" in verbose and len(verbose.splitlines()) > 20


def test_printed_epsilon_is_never_below_the_certified_one(capsys):
    cli.main(["dpsgd", *SMALL, "--json"])
    res = json.loads(capsys.readouterr().out)
    cli.main(["dpsgd", *SMALL])
    first = capsys.readouterr().out.splitlines()[0]
    shown, lo, hi = map(float, re.match(r"\(([\d.]+), .*in \[([\d.]+), ([\d.]+)\]", first).groups())
    assert shown >= res["epsilon_upper"] and hi >= res["epsilon_upper"] and lo <= res["epsilon_lower"]
    assert shown - res["epsilon_upper"] < 1e-4


def test_without_replacement_explains_the_larger_epsilon():
    p = run("dpsgd", *SMALL, "--sampling", "without_replacement")
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "substitute one record" in out and "up to 2C" in out and "much larger than Poisson" in out


def test_footer_states_wall_time_and_first_run_compilation():
    r = {"pld_version": "0.1.0", "seconds": 0.15, "wall_seconds": 7.4, "compile_seconds": 6.2}
    assert footer(r) == ("pld 0.1.0, 0.15 s accounting, 7.40 s in all (first run on this machine: "
                         "6.2 s compiling the numba kernels, once)")
    assert footer({"pld_version": "0.1.0", "seconds": 0.15, "wall_seconds": 0.16}) == "pld 0.1.0, 0.15 s"
    p = run("dpsgd", *SMALL, "--json")
    res = json.loads(p.stdout)
    assert res["wall_seconds"] >= res["seconds"] > 0 and res["compile_seconds"] >= 0


# ------------------------------------------------------------ files confirmed, plots titled
def test_plot_and_save_confirm_the_files_they_wrote(tmp_path):
    pytest.importorskip("matplotlib")
    p = run("dpsgd", *SMALL, "--plot", "r.png", "--save", "r.pld", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)  # stdout stays pure JSON
    err = [line for line in p.stderr.splitlines() if line.startswith("pld: wrote ")]
    png, saved = tmp_path / "r.png", tmp_path / "r.pld"
    assert err[0] == f"pld: wrote r.png (delta curve, PLD and trade-off plot, {png.stat().st_size // 1024} kB)" \
        or err[0].startswith("pld: wrote r.png (delta curve, PLD and trade-off plot, ")
    assert err[1].startswith("pld: wrote r.pld (the composed PLD; pld.load reads it, ")
    assert len(err) == 2 and png.stat().st_size > 10_000 and saved.exists()


def test_plot_titles_carry_the_run(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "matplotlibrc").write_text("svg.fonttype: none\n")  # text stays text in the SVG
    env = {"MATPLOTLIBRC": str(tmp_path)}
    p = run("dpsgd", *SMALL, "--plot", "r.svg", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "r.svg").read_text()
    for part in ("sigma=2", "q=0.05", "T=50", "delta=1e-05"):
        assert part in text, part
    p = run("curve", *SMALL, "--epsilons", "1,2", "--plot", "c.svg", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "sigma=2 q=0.05 T=50 delta=1e-05" in (tmp_path / "c.svg").read_text()
    assert p.stderr.startswith("pld: wrote c.svg (delta(epsilon) plot")


# ------------------------------------------------------------ epsilon per epoch
def test_per_epoch_table_against_the_closed_form(tmp_path):
    pytest.importorskip("matplotlib")
    # full batch (q = 1): each epoch is one Gaussian release, exact epsilon known
    p = run("dpsgd", "--noise-multiplier", "5", "--sampling-rate", "1", "--epochs", "4", "--per-epoch", "--json",
            "--plot", "e.png", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    rows = res["per_epoch"]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4] and [r["steps"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        truth = float(exact.gaussian_epsilon(1e-5, exact.gaussian_mu(5.0, r["steps"])))
        assert r["epsilon_lower"] <= truth <= r["epsilon_upper"]
    assert rows[-1]["epsilon_upper"] == res["epsilon_upper"]
    assert "pld: wrote e.png (epsilon after each epoch" in p.stderr
    assert (tmp_path / "e.png").read_bytes()[:4] == b"\x89PNG"


def test_per_epoch_text_table():
    p = run("dpsgd", *SMALL[:2], "--sampling-rate", "0.1", "--epochs", "3", "--per-epoch")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "Epsilon at the end of each epoch" in out
    table = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s+\d+\s+[\d.]+\s+\[", line)]
    assert [(row[0], row[1]) for row in table] == [("1", "10"), ("2", "20"), ("3", "30")]
    eps = [float(row[2]) for row in table]
    assert eps == sorted(eps)
    assert eps[-1] >= pld.dpsgd(2.0, 0.1, 30).epsilon(1e-5)


def test_per_epoch_refuses_several_runs():
    assert "--per-epoch accounts one training run" in one_line_error(run("dpsgd", *SMALL, "--runs", "2",
                                                                          "--per-epoch"))


# ------------------------------------------------------------ compare shows the peers
def test_compare_shows_installed_peers_and_names_missing_ones(tmp_path):
    pytest.importorskip("dp_accounting")
    # prv_accountant made unimportable for this process only
    shim = tmp_path / "prv_accountant"
    shim.mkdir()
    (shim / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = run("compare", *SMALL, env=env)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "dp_accounting: PLDAccountant" in out and "dp_accounting (RDP): RdpAccountant" in out
    assert "Opacus (RDP): RDPAccountant" in out  # (computed from Opacus' formulas: shown without it)
    assert "not installed: prv_accountant (eps_error 0.01) (pip install prv-accountant)" in out


def test_compare_names_the_rows_as_users_know_them_and_keeps_peer_warnings_out(capsys, monkeypatch):
    """The rows say which number Opacus' accountants and dp_accounting print; a peer's
    warning (scipy's IntegrationWarning from a quadrature, here raised on purpose) is one
    line on stderr, not a traceback in the table."""
    import warnings

    from scipy.integrate import IntegrationWarning

    import pld.baselines.lab

    real = pld.baselines.lab.compare

    def noisy(*args, **kwargs):
        warnings.warn("The maximum number of subdivisions (50) has been achieved.", IntegrationWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(pld.baselines.lab, "compare", noisy)
    assert cli.main(["compare", *SMALL, "--no-peers"]) == 0
    out, err = capsys.readouterr()
    assert "Opacus (RDP): RDPAccountant, 150 orders" in out and "publish its upper end" in out
    assert "IntegrationWarning" not in out and "subdivisions" not in out
    assert err.startswith("pld: note: the peers raised 1 kind(s) of warning") and len(err.splitlines()) == 1
    assert cli.main(["compare", *SMALL, "--no-peers", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["peer_warnings"] == ["IntegrationWarning: The maximum number of subdivisions (50) has been achieved."]


@pytest.mark.parametrize("sigma, q", [(1.0, 0.01), (1.1, 256 / 60000), (0.8, 0.02), (2.0, 0.1)])
def test_the_opacus_rdp_row_is_the_subsampled_gaussians_rdp_at_opacus_orders(sigma, q):
    """Opacus' RDPAccountant: the RDP of the Poisson-subsampled Gaussian at its 150 default
    orders (Mironov, Talwar & Zhang's series, exact), Balle et al.'s conversion.  The series
    against A_alpha = E_{N(0, s^2)}[(1 - q + q e^((2z - 1) / 2s^2))^alpha] by quadrature."""
    from scipy import integrate, stats

    from pld.report.compare import OPACUS_ALPHAS, _rdp, opacus_rdp_epsilon

    def quad_rdp(alpha):
        def f(z):  # (in logs: the tilted integrand peaks near z = alpha, far out for large orders)
            return math.exp(stats.norm.logpdf(z, scale=sigma)
                            + alpha * np.logaddexp(math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * sigma**2)))
        a = integrate.quad(f, -20 * sigma, alpha + 20 * sigma, points=[0.0, 0.5, 1.0, alpha], epsabs=0,
                           epsrel=1e-13, limit=500)[0]
        return math.log(a) / (alpha - 1)

    for alpha in (1.5, 2.0, 2.5, 7.8, 12.0, 33.0):
        assert alpha in OPACUS_ALPHAS
        assert _rdp(q, sigma, alpha) == pytest.approx(quad_rdp(alpha), rel=1e-7), alpha
    eps, order = opacus_rdp_epsilon(sigma, q, 1000, 1e-5)
    alphas = np.array(OPACUS_ALPHAS)
    rdp = np.array([_rdp(q, sigma, x) for x in alphas]) * 1000
    conv = rdp - (math.log(1e-5) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas)
    assert eps == np.nanmin(conv) and order == alphas[np.nanargmin(conv)]
    assert eps >= pld.dpsgd(sigma, q, 1000).epsilon(1e-5)  # an RDP bound: above the certified epsilon


# ------------------------------------------------------------ pld curve: no flat upper bounds
def test_curve_tail_is_not_a_round_off_floor():
    # full batch: Gaussian releases, exact delta(epsilon) from the closed form
    p = run("curve", "--noise-multiplier", "5", "--sampling-rate", "1", "--steps", "10", "--eps-max", "5",
            "--points", "11", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    mu = exact.gaussian_mu(5.0, 10)
    for r in res["curve"]:
        truth = float(exact.gaussian_delta(r["epsilon"], mu))
        assert r["delta_lower"] <= truth <= r["delta_upper"]
        assert r["delta_upper"] <= 1.01 * r["delta_lower"] + 1e-300, r  # never 200x too wide
    assert "re-tuned" in res["curve_method"] or "wider" not in res["curve_method"]
