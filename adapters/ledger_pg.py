"""The ledger's read side on PostgreSQL (the ``LedgerStore`` port of
:mod:`memfabric.domain.conversation`): queries of :mod:`memfabric.projections.ledger`
on the log's pool, and conversation replays."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from memfabric.adapters.postgres import NoteLog, select_notes
from memfabric.domain.ledger import Conversation
from memfabric.projections import ledger


class PostgresLedgerStore:
    """``LedgerStore`` on the ledger projection."""

    def __init__(self, log: NoteLog) -> None:
        self.log = log

    def entries(self, aggregate_id: UUID, *, after: int | None, before: int | None,
                limit: int, descending: bool) -> list[dict[str, Any]]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.select_entries(cur, aggregate_id, after=after, before=before,
                                         limit=limit, descending=descending)

    def position(self, aggregate_id: UUID, entry_id: str) -> int | None:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.entry_position(cur, aggregate_id, entry_id)

    def search(self, aggregate_id: UUID, words: Sequence[str]) -> Iterator[list[dict[str, Any]]]:
        with self.log.datastore.get_connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield from ledger.search_entries(cur, aggregate_id, words)

    def observation(self, aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.observation(cur, aggregate_id, observation_id)

    def search_observations(self, aggregate_ids: Sequence[UUID], words: Sequence[str],
                            limit: int) -> list[dict[str, Any]]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.search_observations(cur, aggregate_ids, words, limit)

    def threads(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.threads_in_prefix(cur, tenant_id, resource_id, thread_id)

    def load(self, aggregate_id: UUID) -> Conversation | None:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            found = select_notes(cur, self.log.sealing_mapper, [aggregate_id])
        conv: Any = found[0] if found else None
        return conv if isinstance(conv, Conversation) else None
