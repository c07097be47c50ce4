"""Issue 31: the in-memory backend's note versions and its read side at ``known_at``.

The twin of :mod:`memfabric.projections.note_versions`: after every append, the versions
of each note it touched are computed afresh from the note's events as the log decodes
them now (keys destroyed by the append read erased, so a forgotten note keeps no
version): one entry per event whose state has a recall row, ``recorded_from`` = the
event's ``timestamp``, ``recorded_to`` = the next event's (``None`` for the latest); a
note under legal hold keeps none (its content stays sealed only) until it is released.
:class:`MemoryKnownAtStore` runs the in-memory store's own recall and listing on the
rows and edges recorded at ``known_at``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from memfabric.adapters.memory.store import InMemoryNoteStore
from memfabric.domain import replay
from memfabric.domain.bitemporal import KnownAtStore
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import link_graph, recall_index

Put = Callable[[dict[UUID, dict[str, Any]], UUID, Sequence[str], "tuple[Any, ...] | None"], None]
"""The memory backend's row writer (:func:`memfabric.adapters.memory.rows.put`)."""


@dataclass(frozen=True, slots=True)
class Version:
    """One recorded state of a note with a recall row: ``row`` (the memory recall
    row), ``edges`` (its link-graph rows) and ``[recorded_from, recorded_to)``."""

    recorded_from: datetime
    recorded_to: datetime | None
    row: dict[str, Any]
    edges: list[dict[str, Any]]

    def at(self, known_at: datetime) -> bool:
        """Whether this was the note's state at ``known_at``."""
        return self.recorded_from <= known_at and (self.recorded_to is None or known_at < self.recorded_to)


def versions_of(events: Sequence[Any], put: Put) -> list[Version]:
    """The versions of one note from its decoded events in version order."""
    found: list[tuple[datetime, dict[str, Any], list[dict[str, Any]]]] = []
    closes: dict[int, datetime] = {}
    state: Any = None
    for event in events:
        if found and len(found) - 1 not in closes:
            closes[len(found) - 1] = event.timestamp
        state = replay.step(event, state)
        row = recall_index.row_for(state)
        if row is not None:
            table: dict[UUID, dict[str, Any]] = {}
            put(table, state.id, recall_index.COLUMNS, row)
            edges = [dict(zip(link_graph.COLUMNS, e, strict=True)) for e in link_graph.rows_for(state)]
            found.append((state.modified_on, table[state.id], edges))
    return [Version(at, closes.get(i), row, edges) for i, (at, row, edges) in enumerate(found)]


def record(log: Any, aggregate_ids: Sequence[UUID], put: Put) -> None:
    """Recompute the versions of ``aggregate_ids`` in ``log.version_rows`` (under the
    log's lock, inside the append)."""
    for aid in aggregate_ids:
        events = log.events(aid)
        state = log.replay(aid)
        versions = versions_of(events, put) if state is not None and state.live else []
        if versions:
            log.version_rows[aid] = versions
        else:
            log.version_rows.pop(aid, None)


@dataclass
class _Recorded:
    """What the in-memory store reads (``lock``, ``recall_rows``, ``link_rows``), as
    recorded at one instant."""

    recall_rows: dict[UUID, dict[str, Any]]
    link_rows: dict[UUID, list[dict[str, Any]]]
    lock: Any = field(default_factory=threading.RLock)


class MemoryKnownAtStore(KnownAtStore):
    """The in-memory read side as recorded at ``known_at`` (see the module doc)."""

    def _store(self) -> InMemoryNoteStore:
        log = self.store.log
        rows: dict[UUID, dict[str, Any]] = {}
        edges: dict[UUID, list[dict[str, Any]]] = {}
        with log.lock:
            for aid, versions in log.version_rows.items():
                hit = next((v for v in versions if v.at(self.known_at)), None)
                if hit is not None:
                    rows[aid] = hit.row
                    if hit.edges:
                        edges[aid] = hit.edges
        return InMemoryNoteStore(_Recorded(rows, edges))

    def recall(self, scope: Scope, *, embedding: Any, query: str | None, kinds: Sequence[str],
               as_of: datetime, limit: int, require_consent: bool, filters: NoteFilter | None = None,
               expand: int = 0) -> list[Candidate]:
        return self._store().recall(scope, embedding=embedding, query=query, kinds=kinds, as_of=as_of,
                                    limit=limit, require_consent=require_consent, filters=filters,
                                    expand=expand)

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        return self._store().hit_links(scope, aggregate_ids, filters)

    def hits(self, scope: Scope, aggregate_ids: Sequence[UUID], filters: NoteFilter | None = None,
             complete: Sequence[UUID] = ()) -> tuple[dict[UUID, list[dict[str, Any]]], dict[UUID, dict[str, Any]]]:
        return self._store().hits(scope, aggregate_ids, filters, complete)

    def list_notes(self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int) -> list[Candidate]:
        return self._store().list_notes(query, after=after, limit=limit)

    def count_notes(self, query: ListQuery) -> int:
        return self._store().count_notes(query)

    def working_notes(self, scope: Scope) -> list[tuple[UUID, bool]]:
        t, r, th = scope.sql()
        log = self.store.log
        with log.lock:
            rows = [row for row in log.scope_rows.values()
                    if (row["tenant_id"], row["resource_id"], row["thread_id"]) == (t, r, th)
                    and row["kind"] == "working"]
        return sorted((row["aggregate_id"], bool(row["held"])) for row in rows)
