"""The entity index on PostgreSQL (issue 32): the ``EntityStore`` port of
:mod:`memfabric.domain.entities` on the queries of :mod:`memfabric.projections.entities`.

A read inside a write runs on the unit of work's own connection (``uow.conn``: its
transaction and locks; a write never takes a second connection); other reads take a
pooled connection of the log. Entities are replayed by :func:`replay_entities`: their
events and data keys read by one statement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from psycopg import Connection, Cursor
from psycopg.rows import tuple_row

from memfabric.adapters.crypto import BatchKeys, SealingMapper
from memfabric.adapters.crypto_keys import KEYS_TABLE, shredding_topics
from memfabric.adapters.postgres import NoteLog
from memfabric.domain import replay
from memfabric.domain.entities import EntityRef, KeyHit, NoteAbout
from memfabric.domain.entity import Entity
from memfabric.domain.scope import Scope, stored_scope
from memfabric.projections import entities as proj
from memfabric.projections.tables import EVENTS

_REPLAY = (f'SELECT originator_id, originator_version, topic, state FROM "{EVENTS}"'  # noqa: S608
           " WHERE originator_id = ANY(%(ids)s)"
           f" UNION ALL SELECT originator_id, gen, NULL, key FROM {KEYS_TABLE} WHERE originator_id = ANY(%(ids)s)"
           " ORDER BY 1, 2")
"""The events of the entities ``%(ids)s`` (rows ``(id, version, topic, state)``) and their data
keys (rows ``(id, gen, NULL, key)``), in one statement and so one snapshot."""


def replay_entities(conn: Connection[Any], mapper: SealingMapper, ids: Sequence[UUID]) -> list[Entity]:
    """The entities ``ids`` replayed from the log (absent ones skipped), in order.

    One prepared statement (:data:`_REPLAY`, one round trip and one snapshot: an entity
    forgotten concurrently reads either whole or erased) returns their events and data
    keys; each entity's latest tombstone (an event of :func:`shredding_topics`, which
    tells a destroyed key from a missing one) is read off its own events. An entity's
    events are sealed under its own key only, so no other key is looked up."""
    if not ids:
        return []
    rows = conn.cursor(row_factory=tuple_row).execute(_REPLAY, {"ids": list(ids)}, prepare=True).fetchall()
    tombstones = set(shredding_topics())
    vault = BatchKeys()
    events: list[tuple[UUID, StoredEvent]] = []
    for oid, version, topic, state in rows:
        if topic is None:
            vault.keys[(oid, int(version))] = bytes(state)
            continue
        events.append((oid, StoredEvent(oid, version, topic, bytes(state))))
        if topic in tombstones:
            vault.forgotten[oid] = version  # rows come by version: the last one is the latest
    local = mapper.bound(vault)
    found: dict[UUID, Any] = {}
    for oid, stored in events:
        found[oid] = replay.step(local.to_domain_event(stored), found.get(oid))
    return [e for e in (found.get(i) for i in ids) if isinstance(e, Entity)]


def _scope(row: dict[str, Any]) -> Scope:
    return stored_scope(row["tenant_id"], row["resource_id"], row["thread_id"])


class PostgresEntityStore:
    """``EntityStore`` on the log's pool (see the module doc)."""

    def __init__(self, log: NoteLog) -> None:
        self.log = log

    @contextmanager
    def _cursor(self, uow: Any = None) -> Iterator[Cursor[Any]]:
        reader = getattr(uow, "reader", None) if uow is not None else None
        if reader is not None:  # a unit of work's read (issue 24: on its wire while it can)
            cur = reader()
            try:
                yield cur
            finally:
                cur.close()
            return
        with self.log.datastore.get_connection() as own, own.cursor() as cur:
            yield cur

    def keys(self, reader: Scope, digests: Sequence[tuple[str, int]], type_: str | None,
             uow: Any = None) -> list[KeyHit]:
        with self._cursor(uow) as cur:
            rows = proj.select_keys(cur, reader.sql(), digests, type_)
        return [KeyHit(r["aggregate_id"], r["entity_id"], digests[r["i"] - 1][0], r["source"], r["ntok"])
                for r in rows]

    def owner(self, grp: str, digest: str, uow: Any = None) -> str | None:
        with self._cursor(uow) as cur:
            return proj.select_owner(cur, grp, digest)

    def find(self, reader: Scope, entity_id: str, uow: Any = None) -> list[EntityRef]:
        with self._cursor(uow) as cur:
            rows = proj.select_entity(cur, reader.sql(), entity_id)
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows]

    def homed(self, tenant_id: str, resource_id: str | None, thread_id: str | None,
              limit: int) -> list[EntityRef]:
        with self._cursor() as cur:
            rows = proj.select_homed(cur, tenant_id, resource_id, thread_id, limit)
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows]

    def page(self, reader: Scope, *, after: str | None, limit: int) -> list[EntityRef]:
        with self._cursor() as cur:
            rows = proj.select_page(cur, reader.sql(), after=after, limit=limit)
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows]

    def notes_of(self, tenant_id: str, entity_id: str, *, merge_id: str | None,
                 limit: int) -> list[NoteAbout]:
        with self._cursor() as cur:
            rows = proj.select_notes_of(cur, tenant_id, entity_id, merge_id=merge_id, after=None, limit=limit)
        return [NoteAbout(r["aggregate_id"], _scope(r), r["visibility"], r["note_id"]) for r in rows]

    def load_many(self, aggregate_ids: Sequence[UUID]) -> list[Entity]:
        if not aggregate_ids:
            return []
        with self.log.datastore.get_connection() as conn:
            return replay_entities(conn, self.log.sealing_mapper, aggregate_ids)

    def load(self, aggregate_id: UUID) -> Entity | None:
        found = self.load_many([aggregate_id])
        return found[0] if found else None
