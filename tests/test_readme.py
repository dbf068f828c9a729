"""README.md runs as printed, and what it quotes is what pld says.

* The ```python block is executed statement by statement in a fresh namespace
  (nothing injected: a missing import fails here as it would for a reader).
  A trailing comment ``# -> VALUE`` quotes what its line evaluates to; VALUE is
  compared at its printed precision: a pair of numbers is a bracket quoted
  rounded outward (lower end down, upper end up), a single number is rounded to
  nearest, anything else must be equal.  ``exact X`` after the quote must lie in
  the bracket, ``published X`` must overlap it.
* Every fenced block whose first line is ``$ pld ...`` is run (the installed
  entry point) and its output compared line by line; only the numbers of the
  timing footer may differ.
* The set-up section holds exactly two commands (.ci/run runs both verbatim).

The quoted brackets are pld's own earlier answers: comparing them with what pld says now is a
regression check (the README says what pld does), not a check of accuracy.  That is done
beside them, against references that do not come from pld: the closed forms of
tests/oracles.py for the quotes marked ``exact``, and the peers (prv_accountant's certified
intervals, dp_accounting's pessimistic values; tests/data/peer_values.json or computed live)
for the DP-SGD brackets the README quotes.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tokenize
import warnings

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracles as O  # noqa: E402

# the README runs as a reader runs it: Gaussian compositions from their closed form
pytestmark = pytest.mark.closed_forms

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
#: the documentation pages: their quoted outputs are checked as the README's are
PAGES = sorted((README.parent / "docs").glob("*.md"))
PEER_VALUES = pathlib.Path(__file__).resolve().parent / "data" / "peer_values.json"
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _all_text() -> str:
    """The README and every documentation page."""
    return "\n\n".join(path.read_text(encoding="utf-8") for path in (README, *PAGES))


def _python_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", _text(), flags=re.S)
    assert len(blocks) == 1, "README has one python example"
    return blocks[0]


def _unit(token: str) -> float:
    """The value of one unit in the last printed digit of ``token``."""
    mant, _, exp = token.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 10.0 ** (-decimals + (int(exp) if exp else 0))


def _comments(source: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _split_quote(comment: str) -> tuple[str, str]:
    """``# -> (1, 2); exact 3`` -> ``("(1, 2)", "exact 3")``: the longest literal prefix."""
    body = comment[len("# ->"):].strip()
    for end in range(len(body), 0, -1):
        try:
            ast.literal_eval(body[:end])
        except (ValueError, SyntaxError, TypeError, MemoryError):
            continue
        return body[:end], body[end:].lstrip(" ;:,")
    raise AssertionError(f"README quote {comment!r} does not start with a Python literal")


def _check(quote: str, rest: str, value, where: str) -> None:
    literal = ast.literal_eval(quote)
    tokens = re.findall(NUMBER, quote)
    if isinstance(literal, tuple) and len(literal) == 2 and any(isinstance(x, float) for x in literal):
        lo, hi = (float(x) for x in value)
        (qa, ua), (qb, ub) = ((float(t), _unit(t)) for t in tokens)
        tol = 1e-9
        # outward: the quoted bracket contains the computed one, within one printed unit
        assert qa - tol * ua <= lo < qa + ua * (1 + tol), f"{where}: lower end {lo!r} is not {quote} rounded down"
        assert qb - ub * (1 + tol) < hi <= qb + tol * ub, f"{where}: upper end {hi!r} is not {quote} rounded up"
        for kind, x in re.findall(rf"\b(exact|published)\s+({NUMBER})", rest):
            if kind == "exact":
                # (the quote is rounded to its last digit: the exact value it
                # stands for lies within half a unit of it)
                half = _unit(x) / 2
                assert lo <= float(x) + half and float(x) - half <= hi, (
                    f"{where}: exact {x} is outside [{lo!r}, {hi!r}]")
            else:
                half = _unit(x) / 2
                assert lo <= float(x) + half and float(x) - half <= hi, f"{where}: published {x} vs [{lo}, {hi}]"
    elif isinstance(literal, float):
        assert abs(float(value) - literal) <= _unit(tokens[0]) / 2 * (1 + 1e-9), f"{where}: {value!r} is not {quote}"
    else:
        assert value == literal, f"{where}: {value!r} != {quote}"


def test_python_block_runs_as_printed_and_its_quotes_hold(tmp_path, monkeypatch):
    source = _python_block()
    comments = _comments(source)
    monkeypatch.chdir(tmp_path)  # the example saves a file
    ns: dict = {"__name__": "__readme__"}
    quoted = 0
    tree = ast.parse(source, "README.md")
    # the last statement on a line owns the line's comment
    last_on_line = {}
    for node in tree.body:
        last_on_line[node.end_lineno] = node
    stdout = io.StringIO()
    for node in tree.body:
        comment = comments.get(node.end_lineno, "") if last_on_line.get(node.end_lineno) is node else ""
        where = f"README.md python line {node.lineno}"
        with contextlib.redirect_stdout(stdout):
            if isinstance(node, ast.Expr):
                value = eval(compile(ast.Expression(node.value), where, "eval"), ns)
            elif isinstance(node, ast.Assign):
                value = eval(compile(ast.Expression(node.value), where, "eval"), ns)
                ns["__readme_value__"] = value
                assign = ast.Assign(targets=node.targets, value=ast.Name("__readme_value__", ast.Load()))
                exec(compile(ast.fix_missing_locations(ast.Module([assign], [])), where, "exec"), ns)
            else:
                exec(compile(ast.Module([node], []), where, "exec"), ns)
                value = None
        if comment.startswith("# ->"):
            quote, rest = _split_quote(comment)
            _check(quote, rest, value, where)
            quoted += 1
    assert quoted >= 6
    assert (tmp_path / "run.pld").exists()
    assert "epoch" in stdout.getvalue()  # print(t) printed the per-epoch table


def test_quoted_exact_references_are_the_closed_forms():
    # the numbers the README calls exact are the closed forms (Balle & Wang), not pld's output:
    # tests/oracles.py computes them without pld
    refs = re.findall(rf"exact\s+({NUMBER})", _python_block())
    mu = math.sqrt(120) / 8.0
    assert len(refs) == 2
    eps, delta6 = refs
    assert abs(O.gaussian_epsilon(1e-6, mu) - float(eps)) <= _unit(eps) / 2
    assert abs(O.gaussian_delta(6.0, mu) - float(delta6)) <= _unit(delta6) / 2


#: dp_accounting's PLD value is pessimistic up to its own (unbounded) error: see tests/test_peers.py
DPA_RTOL = 5e-5


def _quoted_bracket(pattern: str, text: str) -> tuple[float, float]:
    m = re.search(pattern, text)
    assert m, pattern
    return float(m.group(1)), float(m.group(2))


def test_quoted_dpsgd_brackets_against_the_peers():
    """The DP-SGD brackets the README quotes hold the truth as the peers certify it: the
    upper end reaches prv_accountant's certified lower limit, the lower end stays below its
    upper limit and below dp_accounting's pessimistic value.  sigma 1, q 0.01, T 1e4: the
    stored fine values (prv_accountant at eps_error 6.2e-4, dp_accounting at a 1e-5 grid);
    MNIST (sigma 1.1, q 256/60000, T 14100): dp_accounting at its default grid and
    prv_accountant at eps_error 0.01, live (about a second each)."""
    import dp_accounting
    import prv_accountant
    from dp_accounting import pld as dpa_pld

    stored = {tuple(e["config"]): e for e in json.loads(PEER_VALUES.read_text())["configs"]}
    lo, hi = _quoted_bracket(rf"steps=10_000\)[^\n]*\n[^\n]*# -> \(({NUMBER}), ({NUMBER})\); published",
                             _python_block())
    entry = stored[(1.0, 0.01, 10000, 1e-5)]
    p_lo, _, p_hi = entry["prv_accountant_fine"]["value"]
    assert p_lo <= hi and lo <= p_hi and lo <= entry["dp_accounting_fine"]["value"] * (1 + DPA_RTOL)
    lo, hi = _quoted_bracket(rf"certified epsilon in \[({NUMBER}), ({NUMBER})\] at delta = 1e-05\n  run       "
                             rf"sigma = 1\.1,", _all_text())
    sigma, q, steps, delta = 1.1, 256 / 60000, 14100, 1e-5  # (60 epochs of the loader's 235 steps)
    acc = dpa_pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert lo <= acc.get_epsilon(delta) * (1 + DPA_RTOL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prv = prv_accountant.Accountant(noise_multiplier=sigma, sampling_probability=q, delta=delta,
                                        eps_error=0.01, max_compositions=steps).compute_epsilon(steps)
    assert prv[0] <= hi and lo <= prv[2]


def _shell_examples() -> list[tuple[str, list[str]]]:
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", _all_text(), flags=re.S):
        lines = block.rstrip("\n").splitlines()
        if lines and lines[0].startswith("$ pld "):
            out.append((lines[0][2:], lines[1:]))
    return out


FOOTER = re.compile(r"pld \d+\.\d+\.\d+, [\d.]+ s( accounting, [\d.]+ s in all)?( \(--verbose: .*\))?$")


@pytest.mark.parametrize("command", [c for c, _ in _shell_examples()])
def test_shell_examples_print_what_the_readme_shows(command):
    expected = dict(_shell_examples())[command]
    argv = shlex.split(command)
    exe = shutil.which("pld", path=os.path.dirname(sys.executable))
    argv = ([exe] if exe else [sys.executable, "-m", "pld"]) + argv[1:]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = p.stdout.rstrip("\n").splitlines()
    assert len(got) == len(expected), p.stdout
    for want, have in zip(expected, got):
        if FOOTER.match(want):
            assert FOOTER.match(have), have
            # the footer's words are the README's, only its timings differ
            assert re.sub(NUMBER, "#", want) == re.sub(NUMBER, "#", have), have
        else:
            assert have == want


def test_set_up_has_exactly_two_commands():
    section = _text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    section = re.sub(r"```.*?```", "", section, flags=re.S)  # (example output is not a command)
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]
    assert commands == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && pld dpsgd",
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' "
        "&& python -m pytest -q -n auto tests",
    ]


def test_without_replacement_jump_quoted_in_prose():
    import pld
    from pld.report import MNIST_EXAMPLE as ex

    m = re.search(rf"goes from ({NUMBER}) \(Poisson, add-or-remove\) to ({NUMBER}) \(without replacement",
                  " ".join(_all_text().split()))
    assert m, "the documentation explains the without-replacement jump with numbers"
    for quoted, sampling in zip(m.groups(), ("poisson", "without_replacement")):
        # (the example's run as its loader makes it: a short last batch accounted at its own rate)
        hi = pld.dpsgd(ex.noise_multiplier, dataset_size=ex.dataset_size, batch_size=ex.batch_size, epochs=ex.epochs,
                       sampling=sampling).epsilon(ex.delta)
        assert abs(hi - float(quoted)) <= _unit(quoted) / 2, (sampling, hi, quoted)
