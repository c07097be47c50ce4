"""The one registry of projections (issue 34): every read model of the log, in order.

:data:`REGISTRY` lists one :class:`Registration` per projection; everything that needs
the projections iterates it:

- the PostgreSQL backend (``memfabric.adapters.bootstrap.open_fabric``) builds its
  :class:`~memfabric.projections.engine.ProjectionEngine` from
  :func:`default_projections`, so catch-up, the runner, ``projections rebuild``,
  ``verify`` and ``status`` (:mod:`memfabric.projections.rebuild`, which iterate the
  engine's projections) see every registered projection;
- ``reembed`` and an embedder adoption rebuild :func:`vector_projections` (those built
  per embedder, ``vectors=True``);
- the in-memory backend (``memfabric.adapters.memory.log``) keeps the rows of each
  registration's :attr:`Registration.memory` tables, computed with the same pure row
  functions, at every append; a registration whose in-memory form is a twin of its own
  (``memory`` a string naming it: the ledger, principals and entity stores, the note
  versions) is served by that twin;
- :func:`projection_tables` lists every projection table.

Adding a projection is one class (``NoteProjection``: ``name``, ``tables``,
``write_side``, ``create``, ``create_indexes``, ``apply``, ``copy``) and one line here::

    Registration("my_index", lambda s: MyIndexProjection(),
                 memory=(MemoryTable(my_index.TABLE, my_index.COLUMNS, my_index.row_for),)),
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memfabric.domain.errors import FabricError
from memfabric.projections import (
    consolidation_index, entities, ledger, link_graph, note_scope, note_versions, principals, recall_index,
    retention_index, tables, working_value,
)
from memfabric.projections.base import NoteProjection
from memfabric.projections.consolidation_index import ConsolidationIndexProjection
from memfabric.projections.entities import EntitiesProjection
from memfabric.projections.ledger import LedgerProjection
from memfabric.projections.link_graph import LinkGraphProjection
from memfabric.projections.note_scope import NoteScopeProjection
from memfabric.projections.note_versions import NoteVersionsProjection
from memfabric.projections.principals import PrincipalsProjection
from memfabric.projections.recall_index import RecallIndexProjection
from memfabric.projections.retention_index import RetentionIndexProjection
from memfabric.projections.working_value import WorkingValueProjection


@dataclass(frozen=True, slots=True)
class Setup:
    """What a projection may be built with: the embedder's ``dim`` and ``embedder_id``
    and ``mapper``, the replay mapper (:class:`memfabric.projections.replay.ReplayMapper`;
    ``None`` in memory) with which a projection replays events from the log."""

    dim: int
    embedder_id: str
    mapper: Any = None


@dataclass(frozen=True, slots=True)
class MemoryTable:
    """One table as the in-memory backend keeps it: ``table`` (its name), ``columns``
    (the row tuple's column names) and ``row(aggregate)``: the row tuple, ``None`` (no
    row) or, with ``many=True``, a list of row tuples (e.g. a note's link edges)."""

    table: str
    columns: Sequence[str]
    row: Callable[[Any], Any]
    many: bool = False


@dataclass(frozen=True, slots=True)
class Registration:
    """One projection: ``name`` (its engine name), ``build(setup)`` → the projection,
    ``vectors``: built per embedder (reembed rebuilds it blue-green), ``memory``: the
    tables the in-memory backend keeps with the same row functions, or the name of the
    in-memory twin that serves it."""

    name: str
    build: Callable[[Setup], NoteProjection]
    vectors: bool = False
    memory: tuple[MemoryTable, ...] | str = field(default=())


def _one(module: Any) -> tuple[MemoryTable, ...]:
    return (MemoryTable(module.TABLE, module.COLUMNS, module.row_for),)


REGISTRY: list[Registration] = [
    Registration(recall_index.NAME, lambda s: RecallIndexProjection(s.dim, s.embedder_id), vectors=True,
                 memory=_one(recall_index)),
    Registration(working_value.NAME, lambda s: WorkingValueProjection(), memory=_one(working_value)),
    Registration(note_scope.NAME, lambda s: NoteScopeProjection(), memory=_one(note_scope)),
    Registration(consolidation_index.NAME, lambda s: ConsolidationIndexProjection(s.dim, s.embedder_id),
                 vectors=True, memory=_one(consolidation_index)),
    Registration(link_graph.NAME, lambda s: LinkGraphProjection(),
                 memory=(MemoryTable(link_graph.TABLE, link_graph.COLUMNS, link_graph.rows_for, many=True),)),
    Registration(ledger.NAME, lambda s: LedgerProjection(), memory="InMemoryLedgerStore (replays the Conversation)"),
    Registration(retention_index.NAME, lambda s: RetentionIndexProjection(), memory=_one(retention_index)),
    Registration(principals.NAME, lambda s: PrincipalsProjection(),
                 memory="InMemoryPrincipalStore (replays the Principal)"),
    Registration(entities.NAME, lambda s: EntitiesProjection(),  # issue 32
                 memory="InMemoryEntityStore (log.projectors)"),
    Registration(note_versions.NAME, lambda s: NoteVersionsProjection(s.dim, s.embedder_id, s.mapper),  # issue 31
                 vectors=True, memory="memory_versions.record (every append)"),
]
"""Every projection, in engine order (the order writers apply them and take their locks)."""


def _setup(embedder: Any, mapper: Any) -> Setup:
    return Setup(int(embedder.dim), str(embedder.id), mapper)


def default_projections(embedder: Any, mapper: Any = None) -> list[NoteProjection]:
    """One instance of every registered projection, in :data:`REGISTRY` order, for
    ``embedder`` (anything with ``id`` and ``dim``) and ``mapper`` (the replay mapper,
    ``None`` where nothing replays from a log)."""
    setup = _setup(embedder, mapper)
    return [r.build(setup) for r in REGISTRY]


def vector_projections(embedder: Any, mapper: Any = None) -> list[NoteProjection]:
    """The registered projections built per embedder (``vectors=True``), for
    ``embedder``: what ``reembed`` rebuilds blue-green and an adoption swaps in."""
    setup = _setup(embedder, mapper)
    return [r.build(setup) for r in REGISTRY if r.vectors]


def registration(name: str) -> Registration:
    """The registration of projection ``name``; ``FabricError`` naming the known ones."""
    for r in REGISTRY:
        if r.name == name:
            return r
    raise FabricError(f"no projection {name!r} is registered; known: {', '.join(r.name for r in REGISTRY)}")


def memory_tables(projections: Sequence[NoteProjection]) -> list[tuple[NoteProjection, MemoryTable]]:
    """``(projection, table)`` for every in-memory table of ``projections`` (those
    served by a twin have none)."""
    out: list[tuple[NoteProjection, MemoryTable]] = []
    for p in projections:
        memory = registration(p.name).memory
        if not isinstance(memory, str):
            out.extend((p, t) for t in memory)
    return out


def projection_tables(projections: Sequence[NoteProjection] | None = None) -> list[str]:
    """Every table the registered projections own (with ``projections``: theirs), in
    registry order, then their tracking tables."""
    found = projections if projections is not None else default_projections(_NoEmbedder())
    owned = [t for p in found for t in p.tables]
    return [*owned, *(tables.tracking(p.name) for p in found)]


class _NoEmbedder:
    """Stands in for an embedder where only table names are asked for."""

    id = "none"
    dim = 1
