"""dp_accounting's own test suite for its PLD accountant, run on pld's ``PLDAccountant``.

The installed ``dp_accounting/pld/pld_privacy_accountant_test.py`` (with the
generic ``privacy_accountant_test`` it inherits from) is loaded from
dp_accounting's package directory -- not a copy -- under a private module name,
and the name ``pld_privacy_accountant`` its tests call is pointed at a shim
holding pld's :class:`pld.interop.dp_accounting.PLDAccountant`.  Every test
runs unchanged except those skipped below by name; the reasons are also in the
docstring of :mod:`pld.interop.dp_accounting`:

* ``test_mixture_of_gaussians_basic`` pins dp_accounting's own discretisation
  (epsilon 17.193115 to 1e-6 and delta to 1e-12 on a 1e-4 grid); pld's
  certified bracket [17.19294, 17.19348] contains that value.
* ``test_truncated_subsampled_gaussian_basic`` pins 17.904330 to 1e-6; pld's
  pair for a cut batch is tighter than dp_accounting's, so its certified
  upper end is below that value (see ``test_truncated_against_dp_accounting``
  in ``test_interop_dp_accounting.py``).
"""

from __future__ import annotations

import importlib.util
import types
import unittest
from typing import Any

import pytest

pytest.importorskip("dp_accounting")
pytest.importorskip("absl")

from dp_accounting import privacy_accountant as _pa  # noqa: E402

from pld.interop import dp_accounting as _adapter  # noqa: E402

_SUITE = "dp_accounting.pld.pld_privacy_accountant_test"


def _load_suite() -> types.ModuleType:
    """dp_accounting's test module, executed from its installed file under a private name."""
    spec = importlib.util.find_spec(_SUITE)
    if spec is None or spec.origin is None:  # pragma: no cover - the wheel ships its tests
        pytest.skip(f"{_SUITE} is not installed", allow_module_level=True)
    private = importlib.util.spec_from_file_location("_dp_accounting_pld_suite_on_pld", spec.origin)
    assert private is not None and private.loader is not None
    module: Any = importlib.util.module_from_spec(private)
    private.loader.exec_module(module)
    # the tests call pld_privacy_accountant.PLDAccountant / .NeighborRel at run time
    shim: Any = types.ModuleType("pld_privacy_accountant_shim")
    shim.PLDAccountant = _adapter.PLDAccountant
    shim.NeighborRel = _pa.NeighboringRelation
    shim.CompositionErrorDetails = _pa.PrivacyAccountant.CompositionErrorDetails
    module.pld_privacy_accountant = shim
    return module


_suite: Any = _load_suite()  # (built at run time: its attributes are not known statically)

SKIPPED = {
    "test_mixture_of_gaussians_basic":
        "pins dp_accounting's own discretisation (epsilon to 1e-6, delta to 1e-12 on its 1e-4 grid); "
        "pld's certified bracket [17.19294, 17.19348] contains its 17.193115",
    "test_truncated_subsampled_gaussian_basic":
        "pins dp_accounting's own 17.904330 to 1e-6; pld's dominating pair for a cut batch is tighter than "
        "dp_accounting's (its certified upper end is 16.457, see test_truncated_upper_end_at_most_dp_accounting)",
}


class TestDpAccountingPLDSuiteOnPLD(_suite.PldPrivacyAccountantTest):
    """dp_accounting's ``PldPrivacyAccountantTest``, every test on pld's accountant."""


for _name, _reason in SKIPPED.items():
    setattr(TestDpAccountingPLDSuiteOnPLD, _name,
            unittest.skip(_reason)(getattr(_suite.PldPrivacyAccountantTest, _name)))


def test_the_suite_runs_on_pld():
    """The shim is in place: the suite's accountants are pld's, for all three relations."""
    accountants = TestDpAccountingPLDSuiteOnPLD()._make_test_accountants()
    assert len(accountants) == 3
    assert all(isinstance(a, _adapter.PLDAccountant) for a in accountants)
    assert {a.neighboring_relation for a in accountants} == set(_pa.NeighboringRelation)
    # the skips name real tests of the installed suite
    assert all(callable(getattr(_suite.PldPrivacyAccountantTest, name)) for name in SKIPPED)
