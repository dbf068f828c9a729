"""help() on the public functions: numpy-style sections, and examples that run.

The examples are executed (doctest), so a docstring cannot drift from what
the function does.  The PLD methods and mechanism classes live in the engine
modules (pld/pld.py, pld/mechanisms.py) and are not covered here.
"""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

import pld

FUNCTIONS = ["dpsgd", "dpsgd_schedule", "epsilon_per_epoch", "epsilon_over_steps", "calibrate_noise",
             "calibrate_steps", "calibrate_sampling_rate", "calibrate_parameter", "save", "load", "tune_fft", "warm",
             "sweep", "search_cost"]
ACCOUNTANT = ["step", "record", "epsilon_bounds", "epsilon", "delta_bounds", "delta", "state_dict",
              "from_state_dict", "pld"]
MODULES = ["pld.accounting.dpsgd", "pld.accounting.epochs", "pld.accounting.calibrate", "pld.accounting.accountant",
           "pld.io", "pld.baselines.lab", "pld.mechanisms.allocation"]


def _sections(obj) -> set[str]:
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    return {a.strip() for a, b in zip(lines, lines[1:]) if b.strip() and set(b.strip()) == {"-"}
            and len(b.strip()) == len(a.strip())}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_public_functions_have_numpy_style_docstrings(name):
    fn = getattr(pld, name)
    assert name in pld.__all__
    have = _sections(fn)
    assert {"Parameters", "Raises", "Examples"} <= have, (name, have)
    if inspect.signature(fn).return_annotation not in (None, "None"):
        assert "Returns" in have, name
    # every parameter is documented
    doc = inspect.getdoc(fn)
    for p in inspect.signature(fn).parameters:
        assert p in doc, (name, p)


@pytest.mark.parametrize("name", ACCOUNTANT)
def test_accountant_methods_have_numpy_style_docstrings(name):
    method = getattr(pld.Accountant, name)
    have = _sections(method)
    assert "Returns" in have or "Parameters" in have, (name, have)
    assert {"Parameters", "Raises", "Examples"} <= _sections(pld.Accountant)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, module
    assert result.failed == 0, module
