"""The package's layers: imports go one way, and no package reaches into another's privates.

Truth: the source itself, parsed (``ast``), every import at the top or inside a function,
``TYPE_CHECKING`` blocks included (a type is a dependency too).
"""

from __future__ import annotations

import ast
import graphlib

import pytest

import _source
import test_runs
from test_runs import PACKAGE, _module


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each first-level part of eligibility (subpackage or top module) → the parts it imports."""

    def part(m: str) -> str:
        return m.split(".")[1] if "." in m else m

    out: dict[str, set[str]] = {}
    for m, imported in graph.items():
        if m != "eligibility":  # the package's front door imports what it shows
            out.setdefault(part(m), set()).update(part(i) for i in imported)
    return {p: deps - {p} for p, deps in out.items()}


def test_the_packages_import_in_one_direction():
    """No two parts import each other, through any chain: an order of layers exists."""
    packages = _packages(test_runs.import_graph())
    try:
        order = list(graphlib.TopologicalSorter(packages).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"the packages import in a cycle: {' → '.join(err.args[1])}")
    assert order.index("backends") < order.index("reinforce")  # the agent sits below the trainer
    assert order.index("runs") < min(order.index("reinforce"), order.index("lm"))


def test_no_two_modules_import_each_other():
    """No module reaches itself back through a chain of imports (inside functions too).

    A lazy import is still a dependency: ``lab.sequence.model`` once reached back into
    ``lab.sequence.hf``, which imports it, from inside a function. A package's face (its
    ``__init__``, which hands its modules' names on) is left out of the chains.
    """
    graph = test_runs.import_graph()
    faces = {m for m in graph if any(o.startswith(m + ".") for o in graph)}
    modules = {m: deps - faces - {m} for m, deps in graph.items() if m not in faces}
    try:
        list(graphlib.TopologicalSorter(modules).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"modules import in a cycle: {' → '.join(err.args[1])}")


def test_the_backends_import_nothing_of_the_trainer():
    """What an agent asks of a head and of its settings is said in backends (its protocols)."""
    reached = test_runs._reach(test_runs.import_graph(), "eligibility.backends")
    assert not {m for m in reached if m.startswith("eligibility.reinforce")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _visible(package: str, target: str, modules: set[str]) -> bool:
    """Whether a module of ``package`` may use ``target`` (a dotted name).

    A private module (``pkg._m``) is its package's: any module inside ``pkg`` may use it. A
    private name of a module (``pkg.m._f``) is its package's too: the modules beside ``m``.
    """
    parts = target.split(".")
    for i, part in enumerate(parts):
        if not _private(part):
            continue
        owner = ".".join(parts[: i + 1])
        if owner in modules:
            scope = ".".join(parts[:i])
            if package != scope and not package.startswith(scope + "."):
                return False
        elif package != ".".join(parts[: i - 1]):
            return False
    return True


def _uses(module: str, nodes: tuple[ast.AST, ...], is_package: bool) -> list[str]:
    """The eligibility names ``module`` imports, and the attributes it reads of them.

    ``nodes``: every node of the module's tree (``_source.nodes``, walked once a worker and
    shared with the import graph's tests)."""
    used, bound = [], {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([node.module] if node.module else [])])
            for a in node.names:
                used.append(f"{base}.{a.name}")
                bound[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                used.append(a.name)
                if a.asname:
                    bound[a.asname] = a.name
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in bound:
                used.append(f"{bound[node.value.id]}.{node.attr}")
    return [u for u in used if u.startswith("eligibility.")]


def test_no_module_uses_another_packages_private_names():
    """``from eligibility.x._m import f`` only inside ``x``; ``from eligibility.x.m import _f``
    (or ``m._f``) only beside ``m``: a private name is its package's to change."""
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    found = {
        (m, used)
        for m, p in paths.items()
        for used in _uses(m, _source.nodes(p), p.name == "__init__.py")
        if not _visible(m if p.name == "__init__.py" else m.rpartition(".")[0], used, modules)
    }
    assert found == set()


@pytest.mark.parametrize(
    ("package", "target", "ok"),
    [
        ("eligibility.torch", "eligibility.torch._common.check_tensor", True),
        ("eligibility.torch.x", "eligibility.torch._common.check_tensor", True),
        ("eligibility.torch", "eligibility._io.atomic_write_bytes", True),
        ("eligibility.distributions", "eligibility.distributions._spec.reject", True),
        ("eligibility", "eligibility.distributions._spec.reject", False),
        ("eligibility.sweep", "eligibility._dataclass_args._unwrap", False),
        ("eligibility", "eligibility._dataclass_args._unwrap", True),
        ("eligibility.check", "eligibility.check.verdict._passes", True),
        ("eligibility.torch", "eligibility.torch._compose._helper", True),
        ("eligibility.lm", "eligibility.torch._compose.compose", False),
        ("eligibility.lm", "eligibility.torch.fused._logits", False),
    ],
)
def test_the_rule_reads_a_name_as_it_says(package, target, ok):
    modules = {
        "eligibility._io",
        "eligibility._dataclass_args",
        "eligibility.distributions._spec",
        "eligibility.torch._common",
        "eligibility.torch._compose",
        "eligibility.torch.fused",
        "eligibility.check.verdict",
    }
    assert _visible(package, target, modules) is ok
