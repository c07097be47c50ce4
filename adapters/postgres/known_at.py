"""Issue 31: the PostgreSQL read side as recorded at ``known_at``.

Recall, its hit links and listing run the very statements of
:mod:`memfabric.projections.recall_index` through a
:class:`~memfabric.projections.note_versions.RecordedCursor`: the names
``mf_recall_index`` and ``mf_link_graph`` then denote the note versions and edges
recorded at ``known_at`` (two ``WITH`` items), so ranking, filters, visibility, consent
and link expansion are the live recall's own. The rows at ``known_at`` are the live
recall-index rows recorded by then (current versions) and the closed versions current
then. The vector list is the exact scan of those rows for a tenant searched exactly now
(``exact_search_max``); a larger one reads the live rows through the live recall index's
HNSW graph and scans exactly only the versions closed since
(:data:`memfabric.projections.note_versions.RECORDED_VECTOR_LIST`; the versions table
has no HNSW index, see ``docs/bitemporal.md``). Single notes (``get``) replay their
events up to ``known_at`` (:class:`memfabric.domain.bitemporal.KnownAtStore`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np
from psycopg import sql

from memfabric.adapters.postgres import EF_SEARCH_MAX, dimension_guard
from memfabric.domain.bitemporal import KnownAtStore
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import note_scope, recall_hits, recall_index, tables
from memfabric.projections.note_versions import RecordedCursor, recorded_vector_list

_VECTOR_LISTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""The recorded vector list of each note store (its live table's schema, read once)."""


def _vector_list(store: Any, conn: Any) -> str:
    """:func:`recorded_vector_list` with ``store``'s live recall-index table, qualified
    with the schema the unqualified name resolves to (the statement's own
    ``mf_recall_index`` names the versions at T)."""
    found = _VECTOR_LISTS.get(store)
    if found is None:
        row = conn.execute("SELECT n.nspname AS schema FROM pg_class c JOIN pg_namespace n"
                           " ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
                           (tables.RECALL_INDEX,)).fetchone()
        found = recorded_vector_list(sql.Identifier(row["schema"], tables.RECALL_INDEX))
        _VECTOR_LISTS[store] = found
    return found


class PostgresKnownAtStore(KnownAtStore):
    """``PostgresNoteStore`` reads as recorded at ``known_at`` (see the module doc);
    reads run on the primary. ``live_in_step``: the recall index and the note versions
    are projected in the writer's transaction (``open_fabric``'s default), so a large
    tenant's current versions may be read through the live HNSW index; ``False`` (a
    separate runner) keeps the exact scan, and a live row whose version is already
    closed is left out (``note_versions.NOT_CLOSED``)."""

    def __init__(self, store: Any, known_at: datetime, *, live_in_step: bool = True) -> None:
        super().__init__(store, known_at)
        self.live_in_step = live_in_step

    def _cursor(self, conn: Any) -> Any:
        return RecordedCursor(conn.cursor(), self.known_at, in_step=self.live_in_step)

    def recall(self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
               kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
               filters: NoteFilter | None = None, expand: int = 0) -> list[Candidate]:
        with dimension_guard(), self.store.connection() as conn:
            vectors = self._through_graph(conn, scope, limit) if embedding is not None else None
            return recall_index.select_candidates(
                self._cursor(conn), scope, embedding=embedding, query=query, kinds=kinds, as_of=as_of,
                limit=limit, require_consent=require_consent, filters=filters, expand=expand, exact=True,
                vector_list=vectors)

    def _through_graph(self, conn: Any, scope: Scope, limit: int) -> str | None:
        """The recorded vector list when ``scope``'s tenant is searched through HNSW now
        and the projections are in step (the connection's HNSW settings made as plain
        recall makes them), else ``None`` (the exact scan of the versions)."""
        if not (self.live_in_step and self.store.needs_hnsw(conn.cursor(), scope.tenant_id)):
            return None
        self.store._hnsw_settings(conn, min(EF_SEARCH_MAX, max(self.store.ef_search, limit)))  # noqa: SLF001
        if self.store.tail is not None:  # as plain recall: a tail another process wrote
            self.store.tail.want([scope.tenant_id])
        return _vector_list(self.store, conn)

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        with self.store.connection() as conn:
            return recall_hits.select_links(self._cursor(conn), scope, aggregate_ids, filters)

    def hits(self, scope: Scope, aggregate_ids: Sequence[UUID], filters: NoteFilter | None = None,
             complete: Sequence[UUID] = ()) -> tuple[dict[UUID, list[dict[str, Any]]], dict[UUID, dict[str, Any]]]:
        with self.store.connection() as conn:
            return recall_hits.select_hits(self._cursor(conn), scope, aggregate_ids, filters, complete)

    def list_notes(self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int) -> list[Candidate]:
        with self.store.connection() as conn:
            return recall_index.select_page(self._cursor(conn), query, after=after, limit=limit)

    def count_notes(self, query: ListQuery) -> int:
        with self.store.connection() as conn:
            return recall_index.count_rows(self._cursor(conn), query)

    def working_notes(self, scope: Scope) -> list[tuple[UUID, bool]]:
        with self.store.connection() as conn:
            return note_scope.select_kind(conn.cursor(), scope, "working")

    def last_served_by(self) -> str:
        """Always the primary (the versions are read there)."""
        return "primary"
