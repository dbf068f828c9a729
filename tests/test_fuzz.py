"""Fuzzing the spec parser and the command line: random and malformed input must give a
clear error (``SpecError``/``ValueError`` from the parser; exit status 2 and one line on
stderr from the CLI), never another exception, a traceback or a partial output file."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pld import cli
from pld.accounting.spec import SpecError, parse_spec

if not hasattr(contextlib, "chdir"):  # Python < 3.11
    pytest.skip("contextlib.chdir needs Python 3.11", allow_module_level=True)

# JSON-like values, biased toward the spec's own vocabulary so the fuzzer reaches deep
_words = st.sampled_from(["mechanisms", "type", "gaussian", "laplace", "randomized_response",
                          "discrete_laplace", "pure_dp", "approx_dp", "pmfs", "sigma", "scale",
                          "epsilon", "delta", "count", "sampling_rate", "phases", "repeat", "p", "q",
                          "sensitivity", "dpsgd", "noise_multiplier", "steps", "runs", "x"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6),
                     st.floats(allow_nan=True, allow_infinity=True), _words, st.text(max_size=5))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(_words, inner, max_size=5)), max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_json)
def test_spec_parser_rejects_cleanly(doc):
    try:
        parse_spec(doc)
    except (SpecError, ValueError, TypeError) as e:
        msg = str(e)
        assert msg and "\n" not in msg.strip(), msg
        assert "Traceback" not in msg


_flags = st.sampled_from(["dpsgd", "calibrate", "compose", "curve", "lab", "compare", "--json",
                          "--noise-multiplier", "--sampling-rate", "--steps", "--delta", "--epochs",
                          "--dataset-size", "--batch-size", "--sampling", "--runs", "--target-epsilon",
                          "-q", "-1", "0", "1e-300", "nan", "inf", "poisson", "x", "1.5", "7"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=st.lists(_flags, max_size=7))
def test_cli_bad_arguments_exit_cleanly(argv):
    # keep each example cheap: a fuzzed command that happens to be valid must not run for long
    if "dpsgd" in argv and "--steps" not in argv:
        argv = argv + ["--steps", "3"]
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = cli.main(argv)
            except SystemExit as e:  # argparse's own exits (--help, usage errors)
                code = e.code
        err = err.getvalue()
        assert code in (0, 2, None), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code == 2:
            assert "pld: error:" in err or "usage:" in err, (argv, err)
        # nothing half-written
        assert not any(name.endswith((".tmp", ".part")) for name in os.listdir(d))


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"mechanisms": 3}', "\x00\x01", "🙂"])
def test_cli_compose_malformed_files(tmp_path, capsys, text):
    spec = tmp_path / "spec.json"
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "out.json"
    code = cli.main(["compose", str(spec), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("pld: error:") and "Traceback" not in err
    assert not out.exists()
