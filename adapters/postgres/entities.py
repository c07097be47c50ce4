"""The entity index on PostgreSQL (issue 32): the ``EntityStore`` port of
:mod:`memfabric.domain.entities` on the queries of :mod:`memfabric.projections.entities`.

A read inside a write runs on the unit of work's own connection (``uow.conn``: its
transaction and locks; a write never takes a second connection); other reads take a
pooled connection of the log. Entities are replayed by :func:`replay_entities`: their
events and data keys read by one statement. A resolution is one statement in the
common case (:func:`lookup_sql`): the key lookup tallied per entity and name, and the
events and data keys of the entities likely to rank first."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache, partial
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from psycopg import Connection, Cursor
from psycopg.rows import tuple_row

from memfabric.adapters.crypto import BatchKeys, SealingMapper
from memfabric.adapters.crypto_keys import KEYS_TABLE, shredding_topics
from memfabric.adapters.postgres import NoteLog
from memfabric.domain import replay
from memfabric.domain.entities import Ask, EntityRef, KeyHit, Lookup, NoteAbout
from memfabric.domain.entities import keys as ek
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


Row = tuple[UUID, int, str | None, bytes]
"""A row of :data:`_REPLAY`: ``(id, version, topic, state)`` or ``(id, gen, None, key)``."""


def replay_entities(conn: Connection[Any], mapper: SealingMapper, ids: Sequence[UUID]) -> list[Entity]:
    """The entities ``ids`` replayed from the log (absent ones skipped), in order.

    One prepared statement (:data:`_REPLAY`, one round trip and one snapshot: an entity
    forgotten concurrently reads either whole or erased) returns their events and data
    keys (see :func:`replay_rows`)."""
    if not ids:
        return []
    rows = conn.cursor(row_factory=tuple_row).execute(_REPLAY, {"ids": list(ids)}, prepare=True).fetchall()
    return replay_rows(mapper, rows, ids)


def replay_rows(mapper: SealingMapper, rows: Sequence[Row], ids: Sequence[UUID]) -> list[Entity]:
    """The entities ``ids`` replayed from ``rows`` (their events, each entity's by version,
    and data keys; see :data:`Row`), absent ones skipped, in order. Each entity's latest
    tombstone (an event of :func:`shredding_topics`, which tells a destroyed key from a
    missing one) is read off its own events. An entity's events are sealed under its
    own key only, so no other key is looked up."""
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


def _replay_fetched(mapper: SealingMapper, rows: Sequence[Row], ids: Sequence[UUID]) -> list[Entity] | None:
    """:func:`replay_rows` of ``ids`` when ``rows`` hold the events of every one of them,
    else ``None``."""
    wanted = set(ids)
    if not wanted <= {r[0] for r in rows if r[2] is not None}:
        return None
    return replay_rows(mapper, [r for r in rows if r[0] in wanted], ids)


_CODE_TEXT = {kind: str(i) for i, kind in enumerate(ek.KINDS)}
"""A kind's code in :func:`lookup_sql` (its position in ``keys.KINDS``), as text."""
_TOK, _DEL = ek.KINDS.index("tok"), ek.KINDS.index("del")
_TIER = (f"CASE WHEN m & {ek.KIND_BIT['id']} <> 0 THEN 0 WHEN m & {ek.KIND_BIT['name']} <> 0 THEN 1"
         f" WHEN m & {ek.KIND_BIT['alias']} <> 0 THEN 2"
         f" WHEN m & {ek.KIND_BIT['sorted'] | ek.KIND_BIT['concat']} <> 0 THEN 3 ELSE 4 END")
"""The tier of an entity's kind mask ``m``, as the position in ``keys.TIERS``."""
_ABOVE_FUZZY = sum(ek.KIND_BIT[k] for k in ("id", "name", "alias", "sorted", "concat"))
_FUZZY = (f"CASE WHEN m & {_ABOVE_FUZZY} = 0 THEN greatest(o, CASE WHEN m & {ek.KIND_BIT['ndel']} <> 0 THEN 0.9::float8"
          f" ELSE 0 END, CASE WHEN m & {ek.KIND_BIT['init']} <> 0 THEN 0.8::float8 ELSE 0 END) END")
"""The fuzzy score of an entity's kind mask ``m`` and best token overlap ``o`` over 0.75
(unrounded: two scores a rounding makes equal may come in either order, see
``PREFETCH_SPARE``), ``NULL`` above the fuzzy tier (one score per tier there)."""


@cache
def lookup_sql(typed: bool, prefetch: bool) -> str:
    """The statement of :meth:`PostgresEntityStore.lookup` (``typed``: with the type filter;
    ``prefetch``: with the events of the ``%(top)s`` entities ranked first), rows as
    :func:`read_lookup` reads them.

    - ``h``: per key ``(digest, lim, code, tok)`` (``code``: the kind's position in
      ``keys.KINDS``; ``tok``: the token index; each parameter one comma-separated
      string, which psycopg sends as it is, no array dumped) at most ``lim`` key rows of live
      entities visible from the reader, an index-only scan of the lookup index (see
      :func:`memfabric.projections.entities.select_keys`);
    - ``s``: one row per entity and source: the kind mask, the distinct surface tokens
      matched exactly (``ex``) and exactly or within one deletion (``un``), the name's
      token count: what :func:`memfabric.domain.entities.keys.score` reads;
    - ``top``: the ``%(top)s`` entities first by ``keys.score``'s order (tier, score,
      entity id), computed here as there; their events and data keys (rows of
      :data:`Row`, in no order) follow the ``s`` rows (state ``NULL``), each entity's
      read by an index scan of its own."""
    only = " AND k.type = %(type)s" if typed else ""
    head = (
        "WITH h AS (SELECT x.* FROM unnest(string_to_array(%(d)s, ',')::uuid[], string_to_array(%(n)s, ',')::int[],"  # noqa: S608
        " string_to_array(%(c)s, ',')::int[], string_to_array(%(tok)s, ',')::int[])"
        " AS q(digest, lim, code, tok) CROSS JOIN LATERAL (SELECT k.aggregate_id, k.entity_id, k.source,"
        f" k.ntok, q.code, q.tok FROM {proj.KEYS} k WHERE k.tenant_id = %(t)s AND k.digest = q.digest"
        f" AND {proj.VISIBLE_KEY}{only} LIMIT q.lim) x),"
        " s AS (SELECT aggregate_id, entity_id, source, bit_or(1 << code) AS mask,"
        f" count(DISTINCT tok) FILTER (WHERE code = {_TOK}) AS ex,"
        f" count(DISTINCT tok) FILTER (WHERE code IN ({_TOK}, {_DEL})) AS un, max(ntok) AS ntok"
        " FROM h GROUP BY aggregate_id, entity_id, source)")
    matches = "SELECT aggregate_id, source::int8, mask, ex::int, (un - ex)::int, ntok, entity_id, NULL::bytea FROM s"
    if not prefetch:
        return f"{head} {matches}"
    return (
        f"{head}, e AS (SELECT aggregate_id, entity_id, bit_or(mask) AS m,"  # noqa: S608
        " max((ex + 0.8::float8 * (un - ex)) / greatest(%(pn)s, ntok, 1)) AS o FROM s GROUP BY 1, 2),"
        f" top AS (SELECT aggregate_id FROM e ORDER BY {_TIER}, {_FUZZY} DESC, entity_id LIMIT %(top)s)"
        f" {matches}"
        " UNION ALL SELECT v.* FROM top CROSS JOIN LATERAL (SELECT originator_id, originator_version, NULL::int,"
        f' NULL::int, NULL::int, NULL::int, topic, state FROM "{EVENTS}" WHERE originator_id = top.aggregate_id'
        " UNION ALL SELECT originator_id, gen, NULL, NULL, NULL, NULL, NULL, key FROM"
        f" {KEYS_TABLE} WHERE originator_id = top.aggregate_id) v")


def read_lookup(rows: Sequence[tuple[Any, ...]], mapper: SealingMapper) -> Lookup:
    """The :class:`Lookup` of :func:`lookup_sql`'s rows, in any order: ``(aggregate id,
    source, kind mask, exact, near, ntok, entity id, NULL)`` (an entity's matches on one
    name, see ``keys.Match``) and ``(id, version, NULL x4, topic, state)`` / ``(id, gen,
    NULL x5, key)`` (:data:`Row`: its ``replay`` reads these, sorted by id and version)."""
    matches: dict[str, tuple[UUID, ek.Match]] = {}
    fetched: list[Row] = []
    for oid, source, mask, exact, near, ntok, text, blob in rows:
        if blob is not None:
            fetched.append((oid, source, text, blob))
            continue
        got = matches.get(text)
        if got is None:
            matches[text] = (oid, ek.Match(mask, {source: (exact, near, ntok)}))
        else:
            got[1].mask |= mask
            got[1].sources[source] = (exact, near, ntok)
    fetched.sort(key=_by_version)
    return Lookup(matches, partial(_replay_fetched, mapper, fetched))


def _by_version(row: Row) -> tuple[UUID, int]:
    return row[0], row[1]


def _scope(row: dict[str, Any]) -> Scope:
    return stored_scope(row["tenant_id"], row["resource_id"], row["thread_id"])


PRESENT_MAX = 65_536
"""Most ``(tenant, digest)`` pairs :class:`PostgresEntityStore` keeps as found (then it
forgets them all: a write then guards once more and learns them again)."""


class PostgresEntityStore:
    """``EntityStore`` on the log's pool (see the module doc)."""

    def __init__(self, log: NoteLog) -> None:
        self.log = log
        self._present: set[tuple[str, str]] = set()
        """``(tenant, digest)`` of keys this process has found (at most
        :data:`PRESENT_MAX`): a write naming one reads the keys rather than guard
        against them (:meth:`guard_absent`)."""

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
        hits = [KeyHit(r["aggregate_id"], r["entity_id"], digests[r["i"] - 1][0], r["source"], r["ntok"])
                for r in rows]
        if len(self._present) > PRESENT_MAX:
            self._present.clear()
        self._present.update((reader.tenant_id, h.digest) for h in hits)
        return hits

    def guard_absent(self, reader: Scope, digests: Sequence[tuple[str, int]], uow: Any) -> bool:
        """Send, in ``uow``'s transaction, a guard that fails it at COMMIT when
        :meth:`keys` ``(reader, digests, None)`` would return any key (issue 24: the
        write then needs no round trip for the lookup; ``GuardRefusedError`` makes the
        caller write again with it). Not sent (``False``: read the keys) when ``uow``
        cannot (``PostgresUnitOfWork.guard``) or a digest is one this process has found
        in the reader's tenant."""
        send = getattr(uow, "guard", None)
        if send is None or any((reader.tenant_id, d) in self._present for d, _ in digests):
            return False
        return bool(send(*proj.keys_absent_guard(reader.sql(), digests, None)))

    def lookup(self, reader: Scope, asks: Sequence[Ask], type_: str | None, *, ntok: int,
               prefetch: int = 0) -> Lookup:
        """One prepared statement on a pooled connection (:func:`lookup_sql`)."""
        t, r, th = reader.sql()
        params = {"d": ",".join([a[0] for a in asks]), "n": ",".join([str(a[1]) for a in asks]),
                  "c": ",".join([_CODE_TEXT[a[2]] for a in asks]), "tok": ",".join([str(a[3]) for a in asks]),
                  "t": t, "r": r, "th": th, "type": type_, "pn": ntok, "top": prefetch}
        with self.log.datastore.get_connection() as conn:
            rows = conn.cursor(row_factory=tuple_row).execute(
                lookup_sql(type_ is not None, prefetch > 0), params, prepare=True).fetchall()
        return read_lookup(rows, self.log.sealing_mapper)

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
