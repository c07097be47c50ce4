"""Issue 34 item 1: handlers take their dependencies explicitly.

- No domain module but the facades imports :mod:`memfabric.domain.service` (a handler
  receives a :class:`~memfabric.domain.deps.Deps`, never the service), counting imports
  under ``TYPE_CHECKING`` and inside functions, and neither ``service`` nor ``deps`` is
  on an import cycle among the domain modules.
- ``MemoryService`` is immutable once built: assigning or deleting an attribute raises
  ``AttributeError``; the dependencies are frozen too.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from memfabric.adapters.memory import open_memory_fabric

DOMAIN = Path(__file__).resolve().parents[2] / "domain"

FACADES = {"service", "notes", "notes_lifecycle", "access_notes", "__init__"}
"""The modules that wrap the service (``Notes``, a principal's handle) or export it."""


def _imports(path: Path) -> set[str]:
    """The ``memfabric.domain`` modules ``path`` imports, anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n.split(".")[2] for n in names
                if n.startswith("memfabric.domain.") and (DOMAIN / f"{n.split('.')[2]}.py").exists()}
    return out


def _graph() -> dict[str, set[str]]:
    return {p.stem: _imports(p) - {p.stem} for p in DOMAIN.glob("*.py")}


def test_no_handler_module_imports_the_service() -> None:
    offenders = sorted(m for m, deps in _graph().items() if "service" in deps and m not in FACADES)
    assert offenders == [], f"these domain modules import memfabric.domain.service: {offenders}"


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


@pytest.mark.parametrize("module", ["service", "deps"])
def test_service_and_deps_are_on_no_import_cycle(module: str) -> None:
    graph = _graph()
    back = sorted(m for m in _reaches(graph, module) if module in _reaches(graph, m) or m == module)
    assert back == [], f"{module} imports (through) {back}, which import {module} back"


def test_the_service_refuses_attribute_assignment() -> None:
    fabric = open_memory_fabric()
    service = fabric.service
    for name, value in [("clock", lambda: None), ("ledger_store", None), ("store", None),
                        ("embedder", None), ("anything_new", 1)]:
        with pytest.raises(AttributeError):
            setattr(service, name, value)
    with pytest.raises(AttributeError):
        del service.store
    assert not hasattr(service, "configure_workers")


def test_the_dependencies_are_frozen_and_replace_gives_a_new_service() -> None:
    from memfabric.domain.deps import Deps  # noqa: PLC0415 - issue 34

    fabric = open_memory_fabric()
    deps = fabric.service.deps
    assert isinstance(deps, Deps)
    with pytest.raises(dataclasses.FrozenInstanceError):
        deps.clock = lambda: None  # type: ignore[misc]
    other = fabric.service.replace(require_consent=True)
    assert other.require_consent and not fabric.service.require_consent
    assert other.deps.gate is deps.gate and other.deps.embedders is deps.embedders  # shared run-time state


def test_the_embedder_slot_is_what_changes_and_adopting_retries_once() -> None:
    from memfabric.adapters.embedders import HashEmbedder  # noqa: PLC0415
    from memfabric.domain.deps import EmbedderSlot  # noqa: PLC0415
    from memfabric.domain.errors import EmbedderChangedError  # noqa: PLC0415

    fabric = open_memory_fabric()
    new = HashEmbedder(256)
    slot = EmbedderSlot(fabric.service.embedder, lambda: (slot.use(new), True)[1])
    service = fabric.service.replace(embedders=slot)
    calls: list[int] = []

    def once() -> int:
        calls.append(service.embedder.dim)
        if len(calls) == 1:
            raise EmbedderChangedError("the index was migrated")
        return len(calls)

    assert service.adopting(once) == 2 and calls == [384, 256] and service.embedder is new
    assert fabric.service.embedder.dim == 384  # another slot: the first service is unchanged
    with pytest.raises(EmbedderChangedError):  # no adopter: raised as it is
        fabric.service.adopting(lambda: (_ for _ in ()).throw(EmbedderChangedError("x")))
