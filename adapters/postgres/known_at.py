"""Issue 31: the PostgreSQL read side as recorded at ``known_at``.

Recall, its hit links and listing run the very statements of
:mod:`memfabric.projections.recall_index` through a
:class:`~memfabric.projections.note_versions.RecordedCursor`: the names
``mf_recall_index`` and ``mf_link_graph`` then denote the note versions and edges
recorded at ``known_at`` (two ``WITH`` items), so ranking, filters, visibility, consent
and link expansion are the live recall's own. The vector list is always the exact
scan of the scope's versions (the versions table has no HNSW index, see
``docs/bitemporal.md``). Single notes (``get``) replay their events up to ``known_at``
(:class:`memfabric.domain.bitemporal.KnownAtStore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

from memfabric.adapters.postgres import dimension_guard
from memfabric.domain.bitemporal import KnownAtStore
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import recall_index
from memfabric.projections.note_versions import RecordedCursor


class PostgresKnownAtStore(KnownAtStore):
    """``PostgresNoteStore`` reads as recorded at ``known_at`` (see the module doc);
    reads run on the primary."""

    def _cursor(self, conn: Any) -> Any:
        return RecordedCursor(conn.cursor(), self.known_at)

    def recall(self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
               kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
               filters: NoteFilter | None = None, expand: int = 0) -> list[Candidate]:
        with dimension_guard(), self.store.connection() as conn:
            return recall_index.select_candidates(
                self._cursor(conn), scope, embedding=embedding, query=query, kinds=kinds, as_of=as_of,
                limit=limit, require_consent=require_consent, filters=filters, expand=expand, exact=True)

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        with self.store.connection() as conn:
            return recall_index.select_links(self._cursor(conn), scope, aggregate_ids, filters)

    def list_notes(self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int) -> list[Candidate]:
        with self.store.connection() as conn:
            return recall_index.select_page(self._cursor(conn), query, after=after, limit=limit)

    def count_notes(self, query: ListQuery) -> int:
        with self.store.connection() as conn:
            return recall_index.count_rows(self._cursor(conn), query)

    def last_served_by(self) -> str:
        """Always the primary (the versions are read there)."""
        return "primary"
