"""The engine's shape: adjacency first-class, one sampling registry, no import cycles.

These tests pin contracts a newcomer relies on when adding a mechanism or a
sampling scheme (issue 18), not numbers.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib

import pytest

import pld
from pld.accounting import sampling
from pld.accounting.dpsgd import dpsgd_mechanism
from pld.mechanisms import adjacency

PACKAGE = pathlib.Path(pld.__file__).parent


def test_composing_different_neighbouring_relations_raises_naming_both():
    wor = pld.SampledWithoutReplacement(pld.Gaussian(1.0), 0.01).pld()
    poisson = pld.PoissonSampled(pld.Gaussian(1.0), 0.01).pld()
    with pytest.raises(ValueError, match=r"SampledWithoutReplacement.*substitute.*PoissonSampled.*add_or_remove"):
        wor.compose(poisson)
    with pytest.raises(ValueError, match="different neighbouring relations"):
        pld.PLD([(pld.PoissonSampledSubstitute(pld.Gaussian(2.0), 0.1), 3),
                 (pld.PoissonSampled(pld.Gaussian(2.0), 0.1), 2)])


def test_sensitivity_pairs_compose_with_every_relation():
    lap = pld.Laplace(3.0).pld()
    for other in (pld.dpsgd(2.0, 0.1, 3), pld.dpsgd(2.0, 0.1, 3, sampling="without_replacement")):
        both = lap.compose(other)
        assert both.adjacency == other.adjacency
    assert lap.adjacency == adjacency.ANY


def test_every_mechanism_declares_its_relation_and_symmetry():
    for name in pld.__all__:
        obj = getattr(pld, name)
        if isinstance(obj, type) and issubclass(obj, pld.Mechanism) and obj is not pld.Mechanism:
            assert obj.adjacency in adjacency.RELATIONS, name
            assert isinstance(inspect.getattr_static(obj, "symmetric"), (bool, property)), name
    with pytest.raises(TypeError, match="must declare adjacency and symmetric"):
        class Forgetful(pld.Mechanism):  # noqa: F841  (refused when defined)
            def loss_model(self, direction):
                raise NotImplementedError


def test_a_toy_scheme_is_one_registry_entry():
    """Full-batch DP-SGD as a new scheme: registered here, used by dpsgd,
    dpsgd_schedule and the Accountant without touching any other module."""
    toy = sampling.SamplingScheme(
        name="toy_full_batch", aliases=("toy-full", "all_records"), adjacency=adjacency.ADD_OR_REMOVE,
        description="every record in every batch", batch_name="batch",
        step_mechanism=lambda sigma, q: pld.PoissonSampled(pld.Gaussian(sigma), 1.0))
    sampling.register(toy)
    try:
        assert "toy_full_batch" in sampling.names()
        p = pld.dpsgd(2.0, 0.5, 10, sampling="Toy-Full")
        assert p.components == ((pld.PoissonSampled(pld.Gaussian(2.0), 1.0), 10),)
        assert p.adjacency == adjacency.ADD_OR_REMOVE
        sched = pld.dpsgd_schedule([(2.0, 0.5, 4), (2.0, 0.5, 6)], sampling="all records")
        assert sched.components == p.components
        assert dpsgd_mechanism(2.0, 0.5, sampling="toy_full_batch") == pld.PoissonSampled(pld.Gaussian(2.0), 1.0)
        with pytest.raises(ValueError, match="already name"):
            sampling.register(dataclasses.replace(toy, name="other", aliases=("toy-full",)))
    finally:
        sampling.unregister("toy_full_batch")
    with pytest.raises(ValueError, match="must be 'poisson', 'without_replacement'"):
        pld.dpsgd(2.0, 0.5, 10, sampling="toy_full_batch")


def test_a_run_level_scheme_composes_its_phases():
    calls = []

    def run(sigma, q, steps):
        calls.append((sigma, q, steps))
        return pld.PoissonSampled(pld.Gaussian(sigma), q).pld().self_compose(steps)

    sampling.register(sampling.SamplingScheme(
        name="toy_runs", aliases=(), adjacency=adjacency.ADD_OR_REMOVE, description="toy",
        batch_name="batch", run_pld=run))
    try:
        p = pld.dpsgd_schedule([(2.0, 0.1, 3), (3.0, 0.2, 4)], sampling="toy_runs")
        assert calls == [(2.0, 0.1, 3), (3.0, 0.2, 4)]
        assert p.components == pld.dpsgd_schedule([(2.0, 0.1, 3), (3.0, 0.2, 4)]).components
        with pytest.raises(ValueError, match="no mechanism per step"):
            dpsgd_mechanism(2.0, 0.1, sampling="toy_runs")
    finally:
        sampling.unregister("toy_runs")


def test_a_scheme_gives_exactly_one_way_to_build_a_run():
    with pytest.raises(ValueError, match="exactly one of step_mechanism and run_pld"):
        sampling.SamplingScheme(name="x", aliases=(), adjacency=adjacency.ADD_OR_REMOVE, description="x",
                                batch_name="batch")


def _module_level_imports(path: pathlib.Path) -> set[str]:
    """``pld.*`` modules imported at module level (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pld":
                out.update(f"pld.{a.name}" for a in node.names)
            elif node.module.startswith("pld."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("pld."))
    return out


def test_no_import_cycles_inside_the_package():
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            continue  # the façade re-exports; it is imported last
        modules[name] = path
    graph = {m: {d for d in _module_level_imports(p) if d in modules} for m, p in modules.items()}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in graph[m]:
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d] if d in stack else [m, d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_no_module_is_named_like_the_package():
    assert not (PACKAGE / "pld.py").exists()


def test_curves_read_the_engines_own_grids():
    """One certified evaluator: pld.baselines.curves evaluates delta on the very grids
    (and with the error bounds) of the engine, through PLD.grids()."""
    import numpy as np

    from pld.baselines import curves_grids

    p = pld.PLD([(pld.PoissonSampled(pld.Gaussian(1.0), 0.05), 200)])
    pairs = p.grids(1e-6)
    dirs = curves_grids.directions(p, 1e-6)
    assert [d.name for d in dirs] == list(pairs)
    eps = np.linspace(0.0, 3.0, 7)
    for d in dirs:
        assert d.upper.grid is pairs[d.name].dominating and d.lower.grid is pairs[d.name].dominated
        assert np.array_equal(d.upper.delta(eps), np.clip(pairs[d.name].dominating.delta(eps), 0, 1))
        assert d.upper.log_err == np.log(pairs[d.name].dominating.err)


# ------------------------------------------------------------------ the house
SOURCE_ROOTS = (PACKAGE, PACKAGE.parent / "kernels")


def _modules() -> dict[str, pathlib.Path]:
    """Every source module of pld (and its kernels), by dotted name."""
    out = {}
    for root, prefix in ((PACKAGE, "pld"), (PACKAGE.parent / "kernels", "pld.kernels")):
        if not root.is_dir():
            continue
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts or (prefix == "pld" and "kernels" in path.relative_to(root).parts[:1]):
                continue
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def _imports(name: str, path: pathlib.Path, known: set) -> set:
    """The pld modules ``name`` imports (anywhere in its body: a deferred import still ties it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_no_import_circles():
    """Each room imports only from rooms below it: the import graph has no cycle
    (an import inside a function counts too, as it ties the two rooms as well)."""
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    # a package's __init__ re-exporting its own rooms is not a tie back up
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m.startswith(t + ".") and mods[t].name == "__init__.py")}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == [], f"import circles: {cycles}"


def test_rooms_fit():
    """No source module over 700 lines; pld's top level holds the facade and a handful of modules."""
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700}
    assert long == {}, long
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top
    stages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"engine", "mechanisms", "accounting", "baselines", "report", "cli", "interop"} <= stages


def test_old_module_paths_still_import():
    """Code written against 0.1.0's flat layout keeps working (pld._moved)."""
    import importlib

    for old, new in (("pld.rdp", "pld.baselines.rdp"), ("pld.dpsgd", "pld.accounting.dpsgd"),
                     ("pld.allocation", "pld.mechanisms.allocation"), ("pld.curves", "pld.baselines.curves")):
        assert importlib.import_module(old) is importlib.import_module(new)
    from pld.exact import gaussian_epsilon  # noqa: F401  (the old spelling of an import)
    assert pld.rdp is importlib.import_module("pld.baselines.rdp")
    assert callable(pld.dpsgd)  # (the function, not the module of the same old name)
