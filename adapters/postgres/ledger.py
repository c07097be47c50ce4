"""The ledger's read side on PostgreSQL (the ``LedgerStore`` port of
:mod:`memfabric.domain.conversation`): queries of :mod:`memfabric.projections.ledger`
on the log's pool, and conversation replays."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from datetime import datetime, timezone

from eventsourcing.utils import get_topic
from psycopg import Connection

from memfabric.adapters.postgres import NoteLog, select_notes
from memfabric.adapters.postgres.replicas import ReplicaRouter
from memfabric.domain.ledger import Conversation
from memfabric.domain.scope import Scope
from memfabric.projections import ledger, tables

T = TypeVar("T")

_HEAD_SQL = (
    f"SELECT max(originator_version) AS version,"  # noqa: S608
    " count(*) FILTER (WHERE topic = %(appended)s) AS appended,"
    " count(*) FILTER (WHERE topic = %(erased)s) AS erasures,"
    " coalesce(max(originator_version) FILTER (WHERE topic = %(erased)s), 0) AS erased_at"
    f" FROM {tables.EVENTS} WHERE originator_id = %(id)s"
)
_BEFORE_SQL = (
    f"SELECT count(*) AS n FROM {tables.EVENTS} WHERE originator_id = %(id)s"  # noqa: S608
    " AND topic = %(appended)s AND originator_version < %(erased_at)s"
)


def select_head(conn: Connection[Any], aggregate_id: UUID, scope: Scope) -> Conversation | None:
    """The write head of a conversation (``Conversation.head``) from the log's index on
    ``conn``: version, positions and erasures counted, nothing replayed or decrypted;
    ``None`` when the conversation has no events yet."""
    params = {"id": aggregate_id, "appended": get_topic(Conversation.EntryAppended),
              "erased": get_topic(Conversation.Erased)}
    row = conn.execute(_HEAD_SQL, params).fetchone()
    if row is None or _col(row, "version", 0) is None:
        return None
    erased_at = int(_col(row, "erased_at", 3))
    first = 1
    if erased_at:
        before = conn.execute(_BEFORE_SQL, {**params, "erased_at": erased_at}).fetchone()
        first = int(_col(before, "n", 0)) + 1

    def lookup(entry_id: str) -> bool:
        with conn.cursor() as cur:
            return ledger.entry_position(cur, aggregate_id, entry_id) is not None

    return Conversation.head(
        aggregate_id=aggregate_id, version=int(_col(row, "version", 0)), scope=scope,
        last_position=int(_col(row, "appended", 1)), first_position=first,
        erasures=int(_col(row, "erasures", 2)), at=datetime.now(timezone.utc), lookup=lookup)


def _col(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


class PostgresLedgerStore:
    """``LedgerStore`` on the ledger projection."""

    def __init__(self, log: NoteLog, router: ReplicaRouter | None = None) -> None:
        self.log = log
        self.router = router
        """Issue 25: the reads below (all but :meth:`threads`, which ``erase_scope``
        decides on) are served by a replica that has replayed this fabric's writes."""

    def _read(self, read: Callable[[Connection[Any]], T]) -> T:
        if self.router is not None:
            return self.router.run(read)
        with self.log.datastore.get_connection() as conn:
            return read(conn)

    def entries(self, aggregate_id: UUID, *, after: int | None, before: int | None,
                limit: int, descending: bool) -> list[dict[str, Any]]:
        return self._read(lambda conn: ledger.select_entries(
            conn.cursor(), aggregate_id, after=after, before=before, limit=limit, descending=descending))

    def window(self, aggregate_id: UUID, position: int, limit: int, *,
               backward: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return self._read(lambda conn: ledger.select_window(
            conn.cursor(), aggregate_id, position, limit, backward=backward))

    def position(self, aggregate_id: UUID, entry_id: str) -> int | None:
        return self._read(lambda conn: ledger.entry_position(conn.cursor(), aggregate_id, entry_id))

    def search(self, aggregate_id: UUID, terms: Sequence[str],
               top_k: int) -> tuple[list[dict[str, Any]], int]:
        return self._read(lambda conn: ledger.search_entries(conn.cursor(), aggregate_id, terms, top_k))

    def observation(self, aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None:
        return self._read(lambda conn: ledger.observation(conn.cursor(), aggregate_id, observation_id))

    def search_observations(self, aggregate_ids: Sequence[UUID], words: Sequence[str],
                            limit: int, *, until: datetime | None = None) -> list[dict[str, Any]]:
        return self._read(lambda conn: ledger.search_observations(conn.cursor(), aggregate_ids, words, limit,
                                                                  until=until))

    def threads(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]:
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.threads_in_prefix(cur, tenant_id, resource_id, thread_id)

    def due_threads(self, tenant_id: str, before: datetime, *, after: UUID | None,
                    limit: int) -> list[tuple[UUID, str | None, str]]:
        """:func:`memfabric.projections.ledger.select_due_threads` on the primary."""
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.select_due_threads(cur, tenant_id, before, after=after, limit=limit)

    def live_tenants(self, *, after: str | None) -> list[str]:
        """:func:`memfabric.projections.ledger.select_live_tenants`."""
        with self.log.datastore.get_connection() as conn, conn.cursor() as cur:
            return ledger.select_live_tenants(cur, after=after)

    def load(self, aggregate_id: UUID) -> Conversation | None:
        found = self._read(lambda conn: select_notes(conn.cursor(), self.log.sealing_mapper, [aggregate_id]))
        conv: Any = found[0] if found else None
        return conv if isinstance(conv, Conversation) else None
