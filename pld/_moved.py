"""Where pld's modules used to live: ``pld.rdp`` is now ``pld.baselines.rdp``, and so on.

pld's modules sit in packages by pipeline stage (``engine``, ``mechanisms``,
``accounting``, ``baselines``, ``report``, ``cli``).  Code written against the
flat layout of 0.1.0 keeps working: ``import pld.rdp`` and ``from pld.dpsgd
import dpsgd`` load the module from its new place (the same module object, not
a copy), and ``pld.rdp`` is an attribute of the package as before.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old public module path -> where it lives now
MOVED = {f"pld.{old}": f"pld.{new}" for old, new in {
    "grid": "engine.grid", "discretize": "engine.discretize", "composer": "engine.composer",
    "fft_plans": "engine.fft_plans", "planner": "engine.planner", "queries": "engine.queries",
    "laws": "engine.laws", "engine_cache": "engine.cache", "gaussian_exact": "engine.gaussian_exact",
    "total_variation": "engine.total_variation",
    "mixture_mechanisms": "mechanisms.mixtures", "adjacency": "mechanisms.adjacency",
    "allocation": "mechanisms.allocation",
    "dpsgd": "accounting.dpsgd", "sampling": "accounting.sampling", "accountant": "accounting.accountant",
    "epochs": "accounting.epochs", "calibrate": "accounting.calibrate",
    "calibrate_mechanism": "accounting.calibrate_mechanism", "calibrate_search": "accounting.calibrate_search",
    "search": "accounting.search", "sweeps": "accounting.sweeps", "spec": "accounting.spec",
    "rdp": "baselines.rdp", "rdp_conversion": "baselines.rdp_conversion", "rdp_mechanisms": "baselines.rdp_mechanisms",
    "exact": "baselines.exact", "exact_core": "baselines.exact_core", "exact_rr": "baselines.exact_rr",
    "curves": "baselines.curves", "curves_grids": "baselines.curves_grids", "curves_tail": "baselines.curves_tail",
    "lab": "baselines.lab", "peers": "baselines.peers",
    "report_text": "report.text", "plots": "report.plots",
    # (not moved: short public paths of modules that live in a stage package)
    "risk": "report.risk", "samplers": "accounting.samplers",
}.items()}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module path as the module at its new one."""

    def find_spec(self, fullname, path, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:  # (the module ran at its new place)
        pass


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def preload(old: str) -> None:
    """Register ``old`` as already loaded (its new module is): an ``import`` of it
    then binds nothing on the package, whose attribute of that name is kept."""
    sys.modules.setdefault(old, importlib.import_module(MOVED[old]))
