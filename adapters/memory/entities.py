"""The entity index in memory (issue 32): the ``EntityStore`` port of
:mod:`memfabric.domain.entities` on the rows of :mod:`memfabric.projections.entities`
(the same pure row functions), kept in dicts and updated with every append of the
in-memory log (:attr:`memfabric.adapters.memory.log.InMemoryEventLog.projectors`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from memfabric.domain import replay
from memfabric.domain.entities import Ask, EntityRef, KeyHit, Lookup, NoteAbout, lookup_by_keys
from memfabric.domain.entity import Entity
from memfabric.domain.note import Note
from memfabric.domain.scope import Scope
from memfabric.projections import entities as proj


def _scope(row: dict[str, Any]) -> Scope:
    return Scope(tenant_id=row["tenant_id"], resource_id=row["resource_id"] or None,
                 thread_id=row["thread_id"] or None)


def _seen(row: dict[str, Any], reader: Scope) -> bool:
    """``visibility.visible`` on a row's plain columns (no Scope built)."""
    t, r, th = reader.sql()
    if row["tenant_id"] != t:
        return False
    if (row["resource_id"], row["thread_id"]) == (r, th) or row["visibility"] == "tenant":
        return True
    return row["visibility"] == "resource" and r != "" and row["resource_id"] == r


class InMemoryEntityStore:
    """``EntityStore`` over the in-memory log (see the module doc)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.entities: dict[UUID, dict[str, Any]] = {}
        self.keys_of: dict[UUID, list[dict[str, Any]]] = {}
        self.by_digest: dict[str, dict[UUID, list[dict[str, Any]]]] = {}
        self.notes: dict[UUID, dict[str, Any]] = {}
        self.by_entity_id: dict[str, set[UUID]] = {}
        log.projectors.append(self.project)

    # ------------------------------------------------------------- projection
    def project(self, aggregates: Sequence[Any]) -> None:
        """Bring the rows of ``aggregates`` up to date (called under the log's lock)."""
        for a in aggregates:
            if isinstance(a, Entity):
                self._entity(a)
            elif isinstance(a, Note):
                row = proj.note_row(a)
                if row is None:
                    self.notes.pop(a.id, None)
                else:
                    self.notes[a.id] = dict(zip(proj.NOTE_COLUMNS, row, strict=True))

    def _entity(self, e: Entity) -> None:
        for old in self.keys_of.pop(e.id, []):
            bucket = self.by_digest.get(old["digest"], {})
            bucket.pop(e.id, None)
        row = proj.entity_row(e)
        if row is None:
            self.entities.pop(e.id, None)
            self.by_entity_id.get(e.entity_id, set()).discard(e.id)
            return
        self.entities[e.id] = dict(zip(proj.ENTITY_COLUMNS, row, strict=True))
        self.by_entity_id.setdefault(e.entity_id, set()).add(e.id)
        keys = [dict(zip(proj.KEY_COLUMNS, k, strict=True)) for k in proj.key_rows(e)]
        self.keys_of[e.id] = keys
        for k in keys:
            self.by_digest.setdefault(k["digest"], {}).setdefault(e.id, []).append(k)

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row by table, sorted (to compare with a rebuild from the log)."""
        with self.log.lock:
            return {
                proj.ENTITIES: sorted(tuple(r.values()) for r in self.entities.values()),
                proj.KEYS: sorted(tuple(k.values()) for ks in self.keys_of.values() for k in ks),
                proj.NOTES: sorted(tuple(str(v) for v in r.values()) for r in self.notes.values()),
            }

    # ------------------------------------------------------------------ reads
    def keys(self, reader: Scope, digests: Sequence[tuple[str, int]], type_: str | None,
             uow: Any = None) -> list[KeyHit]:
        out = []
        with self.log.lock:
            for d, per_key in digests:
                n = 0
                for aid, rows in self.by_digest.get(d, {}).items():
                    first = rows[0]
                    if (type_ is not None and first["type"] != type_) or not _seen(first, reader):
                        continue
                    out += [KeyHit(aid, r["entity_id"], r["digest"], r["source"], r["ntok"]) for r in rows]
                    n += 1
                    if n >= per_key:
                        break
        return out

    def lookup(self, reader: Scope, asks: Sequence[Ask], type_: str | None, *, ntok: int,
               prefetch: int = 0) -> Lookup:
        """:func:`~memfabric.domain.entities.lookup_by_keys` (no events come along)."""
        return lookup_by_keys(self, reader, asks, type_)

    def owner(self, grp: str, digest: str, uow: Any = None) -> str | None:
        with self.log.lock:
            for rows in self.by_digest.get(digest, {}).values():
                for r in rows:
                    if r["kind"] == "id" and r["grp"] == grp:
                        return str(r["entity_id"])
        return None

    def find(self, reader: Scope, entity_id: str, uow: Any = None) -> list[EntityRef]:
        with self.log.lock:
            rows = [dict(self.entities[a]) for a in self.by_entity_id.get(entity_id, ())
                    if _seen(self.entities[a], reader)]
        rows.sort(key=lambda r: _scope(r) != reader)
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows[:3]]

    def homed(self, tenant_id: str, resource_id: str | None, thread_id: str | None,
              limit: int) -> list[EntityRef]:
        with self.log.lock:
            rows = sorted((dict(r) for r in self.entities.values() if r["tenant_id"] == tenant_id
                           and (resource_id is None or r["resource_id"] == resource_id)
                           and (thread_id is None or r["thread_id"] == thread_id)),
                          key=lambda r: r["aggregate_id"])
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows[:limit]]

    def page(self, reader: Scope, *, after: str | None, limit: int) -> list[EntityRef]:
        with self.log.lock:
            rows = sorted((dict(r) for r in self.entities.values()
                           if r["merged_into"] is None and _seen(r, reader) and r["entity_id"] > (after or "")),
                          key=lambda r: r["entity_id"])
        return [EntityRef(r["aggregate_id"], _scope(r), r["visibility"], r["merged_into"], r["type"])
                for r in rows[:limit]]

    def notes_of(self, tenant_id: str, entity_id: str, *, merge_id: str | None,
                 limit: int) -> list[NoteAbout]:
        with self.log.lock:
            rows = sorted((dict(r) for r in self.notes.values()
                           if r["tenant_id"] == tenant_id and r["entity_id"] == entity_id
                           and (merge_id is None or r["merge_id"] == merge_id)),
                          key=lambda r: r["aggregate_id"])
        return [NoteAbout(r["aggregate_id"], _scope(r), r["visibility"], r["note_id"]) for r in rows[:limit]]

    def load_many(self, aggregate_ids: Sequence[UUID]) -> list[Entity]:
        return [e for e in map(self.load, aggregate_ids) if e is not None]

    def load(self, aggregate_id: UUID) -> Entity | None:
        found: Any = None
        for event in self.log.events(aggregate_id):
            found = replay.step(event, found)
        return found if isinstance(found, Entity) else None
