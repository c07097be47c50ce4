"""Issue 34 items 5 and 7: the layering and the size of the code, checked on every run.

- ``domain/`` imports nothing above it, ``projections/`` nothing from ``adapters/``
  (``adapters > projections > domain``);
- no runtime import cycle among the modules of ``memfabric`` (imports under
  ``if TYPE_CHECKING:`` do not count: they never run);
- no module of ``domain/``, ``projections/`` or ``adapters/`` over 600 lines;
- no function at radon grade D or worse (cyclomatic complexity over 20).

The import graph is grimp's (the library import-linter runs on; ``.ci/run`` also runs
``lint-imports`` with the contracts in ``pyproject.toml``). grimp finds a package on
``sys.path``, and the editable install maps ``memfabric.*`` to the three folders through
an import hook it cannot follow, so the graph is built in a subprocess from a folder of
symlinks laid out as the wheel installs the package (as ``.ci/run``'s mypy step does).
Each check reports every offender by name; :func:`test_each_check_catches_a_planted_violation`
shows each one fails on a small tree that breaks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from radon.complexity import cc_rank, cc_visit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "projections", "adapters")
"""The three folders, lowest layer first (``memfabric.<folder>``)."""
MAX_LINES = 600
WORST_GRADE = "C"
"""The worst radon grade allowed (D: complexity 21-30, E, F are refused)."""

_GRAPH_SCRIPT = """
import json, sys
import grimp
g = grimp.build_graph(sys.argv[1], exclude_type_checking_imports=True, cache_dir=None)
print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in sorted(g.modules)}))
"""


def import_graph(source: Path, links: Path, package: str = "memfabric") -> dict[str, set[str]]:
    """``{module: modules of package it imports at run time}`` for the folders
    ``source/{domain,projections,adapters}`` installed as ``package.<folder>``: symlinks
    in ``links/package/``, grimp in a subprocess with ``links`` first on its path."""
    top = links / package
    top.mkdir(parents=True, exist_ok=True)
    for folder in PACKAGES:
        if (source / folder).is_dir() and not (top / folder).exists():
            (top / folder).symlink_to(source / folder, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(links)}
    out = subprocess.run([sys.executable, "-c", _GRAPH_SCRIPT, package], cwd=links, env=env,
                         capture_output=True, text=True, check=True, timeout=120).stdout
    graph: dict[str, list[str]] = json.loads(out)
    return {m: {i for i in imported if i.startswith(package + ".")} for m, imported in graph.items()}


def _layer(module: str) -> int:
    """0 for ``<pkg>.domain...``, 1 for projections, 2 for adapters, -1 for the top."""
    parts = module.split(".")
    return PACKAGES.index(parts[1]) if len(parts) > 1 and parts[1] in PACKAGES else -1


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"importer -> imported"`` for every import of a higher layer by a lower one."""
    return sorted(f"{m} -> {i}" for m, imported in graph.items() for i in imported
                  if _layer(i) > _layer(m) >= 0)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each sorted), by
    Tarjan's algorithm (iterative): every runtime import cycle lies within one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def _sources(source: Path) -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (source / folder).rglob("*.py"))


def long_modules(source: Path, limit: int = MAX_LINES) -> list[str]:
    """``"folder/module.py: N lines"`` for every module over ``limit`` lines."""
    out = []
    for path in _sources(source):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{path.relative_to(source)}: {n} lines")
    return out


def complex_functions(source: Path, worst: str = WORST_GRADE) -> list[str]:
    """``"folder/module.py:LINE name: grade (complexity)"`` for every function or method
    whose radon grade is worse than ``worst``."""
    out = []
    for path in _sources(source):
        for block in cc_visit(path.read_text(encoding="utf-8")):
            grade = cc_rank(block.complexity)
            if grade > worst:
                out.append(f"{path.relative_to(source)}:{block.lineno} {block.fullname}: "
                           f"{grade} ({block.complexity})")
    return out


def _report(title: str, lines: list[str]) -> str:
    return f"{title} ({len(lines)}):\n  " + "\n  ".join(lines)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    return import_graph(ROOT, tmp_path_factory.mktemp("layout"))


def test_the_graph_covers_the_three_packages(graph: dict[str, set[str]]) -> None:
    """A check over an empty graph cannot fail: the graph has every module."""
    for folder in PACKAGES:
        modules = {f"memfabric.{folder}.{p.stem}" for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}
        assert modules <= set(graph), sorted(modules - set(graph))
    assert "memfabric.domain.scope" in graph["memfabric.domain.notes"]  # edges are there too


def test_nothing_imports_upward(graph: dict[str, set[str]]) -> None:
    upward = upward_imports(graph)
    assert not upward, _report("upward imports (domain < projections < adapters)", upward)


def test_no_runtime_import_cycle(graph: dict[str, set[str]]) -> None:
    cycles = import_cycles(graph)
    assert not cycles, _report("import cycles (modules that reach each other)",
                               [" <-> ".join(m.removeprefix("memfabric.") for m in c) for c in cycles])


def test_no_module_over_600_lines() -> None:
    long = long_modules(ROOT)
    assert not long, _report(f"modules over {MAX_LINES} lines", long)


def test_no_function_at_radon_grade_d_or_worse() -> None:
    knotty = complex_functions(ROOT)
    assert not knotty, _report(f"functions worse than radon grade {WORST_GRADE}", knotty)


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_each_check_catches_a_planted_violation(tmp_path: Path) -> None:
    """A tree that breaks every rule once: each check names exactly the planted offender,
    and a cycle closed only under ``TYPE_CHECKING`` is not one."""
    src = tmp_path / "src"
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(25))
    _plant(src, {
        "domain/__init__.py": "",
        "domain/up.py": "from planted.adapters import leaf\n",
        "domain/ping.py": "from planted.domain import pong\n",
        "domain/pong.py": "def f():\n    from planted.domain import ping\n    return ping\n",
        "domain/typed.py": ("from typing import TYPE_CHECKING\nfrom planted.domain import pong\n"
                            "if TYPE_CHECKING:\n    from planted.domain import typed_back\n"),
        "domain/typed_back.py": "from planted.domain import typed\n",
        "projections/__init__.py": "",
        "projections/view.py": "from planted.domain import pong\n",
        "adapters/__init__.py": "",
        "adapters/leaf.py": "from planted.projections import view\n",
        "adapters/big.py": "x = 1\n" * (MAX_LINES + 1),
        "adapters/knotty.py": f"def knotty(x):\n{branches}    return -1\n",
    })
    graph = import_graph(src, tmp_path / "links", package="planted")
    assert upward_imports(graph) == ["planted.domain.up -> planted.adapters.leaf"]
    assert import_cycles(graph) == [["planted.domain.ping", "planted.domain.pong"]]
    assert long_modules(src) == [f"adapters/big.py: {MAX_LINES + 1} lines"]
    assert complex_functions(src) == ["adapters/knotty.py:1 knotty: D (26)"]
    for bad in (upward_imports(graph), import_cycles(graph), long_modules(src), complex_functions(src)):
        assert bad  # each would fail its test above


def test_a_handle_built_without_a_tools_factory_says_so() -> None:
    """Item 5: the domain's ``Notes`` no longer imports ``adapters.tools``; the fabric
    injects ``MemoryTools`` and a bare handle refuses ``tools()`` with a named error."""
    from memfabric.adapters import open_memory_fabric
    from memfabric.adapters.tools import MemoryTools
    from memfabric.domain.errors import NotSupportedError
    from memfabric.domain.notes import Notes
    from memfabric.domain.scope import Scope

    with pytest.raises(NotSupportedError, match="tools factory"):
        Notes(None, Scope(tenant_id="acme")).tools()  # type: ignore[arg-type]
    fabric = open_memory_fabric()
    tools = fabric.scope("acme", "u", "t").tools()
    assert isinstance(tools, MemoryTools) and tools.notes.scope.key == fabric.scope("acme", "u", "t").scope.key
