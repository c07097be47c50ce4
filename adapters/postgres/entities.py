"""The entity index on PostgreSQL (issue 32): the ``EntityStore`` port of
:mod:`memfabric.domain.entities` on the queries of :mod:`memfabric.projections.entities`.

A read inside a write runs on the unit of work's own connection (``uow.conn``: its
transaction and locks; a write never takes a second connection); other reads take a
pooled connection of the log."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from psycopg import Cursor

from memfabric.adapters.postgres import NoteLog, select_notes
from memfabric.domain.entities import EntityRef, KeyHit, NoteAbout
from memfabric.domain.entity import Entity
from memfabric.domain.scope import Scope, stored_scope
from memfabric.projections import entities as proj


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
        return [KeyHit(r["aggregate_id"], r["entity_id"], r["digest"], int(r["source"]), int(r["ntok"]))
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
        with self._cursor() as cur:
            found: list[Any] = select_notes(cur, self.log.sealing_mapper, list(aggregate_ids))
        return [e for e in found if isinstance(e, Entity)]

    def load(self, aggregate_id: UUID) -> Entity | None:
        with self._cursor() as cur:
            found = select_notes(cur, self.log.sealing_mapper, [aggregate_id])
        return found[0] if found and isinstance(found[0], Entity) else None
