"""Replaying notes from the log by id, in a transaction (``select_notes``), and its
two statements for a caller that sends them itself (a unit of work on its wire).

A replay that starts from a cached state (``after``) is checked against the log: the
statement also returns, per such note, the MD5 of the stored states of its versions up
to the cached one, concatenated in version order (``md5(string_agg(state))``, computed
by the server), which must equal the digest the cache kept for it
(:func:`state_digest`); a row changed or removed in SQL since is so found and the note
is replayed from its first event, where authentication refuses it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping, Sequence
from functools import lru_cache
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from psycopg import Cursor, sql
from psycopg.rows import tuple_row

from memfabric.adapters.crypto import BatchKeys, SealingMapper, TransactionKeys
from memfabric.domain import replay
from memfabric.domain.note import Note
from memfabric.projections import tables
from memfabric.projections.batch import encode_params


def events_query(ids: Sequence[UUID], tenants: Sequence[str] | None = None,
                 after: Mapping[UUID, int] | None = None) -> tuple[bytes, tuple[Any, ...]]:
    """The statement reading the events of ``ids`` in version order (only in
    ``tenants`` when given: a partitioned log is then read in their partitions; with
    ``after``, of each id only the versions past ``after[id]``, if any) and its
    parameters; rows ``(originator_id, originator_version, topic, state)``. With
    ``after``, each id with ``after[id] > 0`` also has a row ``(id, after[id], NULL,
    digest)`` first: the MD5 (16 bytes) of its stored states up to that version (absent
    when it has none)."""
    scope: tuple[Any, ...] = (list(dict.fromkeys(tenants)),) if tenants else ()
    if after:
        pairs = ([*ids], [after.get(i, 0) for i in ids])
        params = tuple(encode_params((*pairs, *scope, *pairs, *scope)))
        return _statement(bool(tenants), True), params
    return _statement(bool(tenants), False), tuple(encode_params((list(ids), *scope)))


@lru_cache(maxsize=4)
def _statement(by_tenant: bool, after: bool) -> bytes:
    """The statement of :func:`events_query` (array parameters as literals: psycopg's C dumpers)."""
    tenant = sql.SQL(" AND tenant = ANY(%s)" if by_tenant else "")
    if after:
        return sql.SQL("SELECT e.originator_id, e.originator_version, e.topic, e.state FROM {t} e"
                       " JOIN unnest(%s::uuid[], %s::bigint[]) AS a(id, v)"
                       " ON e.originator_id = a.id AND e.originator_version > a.v WHERE true{by}"
                       " UNION ALL SELECT a.id, a.v, NULL,"
                       " decode(md5(string_agg(e.state, ''::bytea ORDER BY e.originator_version)), 'hex')"
                       " FROM {t} e JOIN unnest(%s::uuid[], %s::bigint[]) AS a(id, v)"
                       " ON e.originator_id = a.id AND e.originator_version <= a.v WHERE true{by}"
                       " GROUP BY a.id, a.v"
                       " ORDER BY 1, 2, 3 NULLS FIRST").format(
            t=sql.Identifier(tables.EVENTS), by=tenant).as_bytes(None)
    return sql.SQL("SELECT originator_id, originator_version, topic, state FROM {t}"
                   " WHERE originator_id = ANY(%s){by} ORDER BY originator_id, originator_version").format(
        t=sql.Identifier(tables.EVENTS), by=tenant).as_bytes(None)


def state_digest() -> Any:
    """A new running digest of a note's stored states (``hashlib.md5``, fed each
    event's ``state`` bytes in version order): what :func:`events_query`'s digest row
    is compared with."""
    return hashlib.md5(usedforsecurity=False)


def feed(digests: dict[UUID, Any], events: Sequence[Any], states: Sequence[bytes]) -> dict[UUID, Any]:
    """``digests`` fed the stored ``states`` of ``events`` (in order): a note's first
    event starts a digest; a note with no digest and no first event here gets none."""
    for event, raw in zip(events, states, strict=True):
        oid = event.originator_id
        if oid not in digests and event.originator_version == 1:
            digests[oid] = state_digest()
        if oid in digests:
            digests[oid].update(raw)
    return digests


def stale(rows: Sequence[Sequence[Any]], digests: Mapping[UUID, Any]) -> set[UUID]:
    """The ids of ``digests`` (each the running digest a cached state was kept with)
    whose digest row in ``rows`` is missing or differs: their stored events changed
    since (they are replayed from the first event)."""
    seen = {oid: bytes(state) for oid, _, topic, state in rows if topic is None}
    return {i for i, d in digests.items() if seen.get(i) != d.digest()}


def replay_rows(rows: Sequence[Sequence[Any]], mapper: SealingMapper, ids: Sequence[UUID],
                start: Mapping[UUID, Any] | None = None,
                digests: MutableMapping[UUID, Any] | None = None) -> list[Note]:
    """The aggregates of ``ids`` (in that order; absent ones skipped) replayed from the
    event ``rows`` of :func:`events_query` with ``mapper`` (bound to their keys), each
    from its state in ``start`` when given (rows then hold the later versions only;
    digest rows are skipped). ``digests``: running digests by id, fed every replayed
    state (a note replayed from its first event gets a new one)."""
    found: dict[UUID, Any] = dict(start or {})
    for oid, version, topic, state in rows:
        if topic is None:
            continue
        raw = bytes(state)
        event = mapper.to_domain_event(StoredEvent(oid, version, topic, raw))
        found[oid] = replay.step(event, found.get(oid))  # issue 28: a missing version is typed
        if digests is not None:
            digest = digests.get(oid)
            if digest is None and start is not None and oid in start:
                continue  # a state given without its digest: none is kept for it
            if digest is None:
                digest = digests[oid] = state_digest()
            digest.update(raw)
    return [found[i] for i in ids if i in found]


def select_notes(
    cur: Cursor[Any], mapper: SealingMapper, ids: Sequence[UUID],
    keys: TransactionKeys | None = None, tenants: Sequence[str] | None = None,
) -> list[Note]:
    """Replay the aggregates ``ids`` from the log on ``cur`` (its transaction and
    snapshot), in the order given; absent ids are skipped. Keys are read on the same
    connection: through ``keys`` (a unit of work's vault) or a batch read. ``tenants``:
    the tenants the ids belong to, when the caller knows them (a partitioned log is
    then read in their partitions only; an id of another tenant is not found)."""
    if not ids:
        return []
    # events first, keys second: outside a snapshot, a note committed between the two
    # statements then has its keys too (keys first read its events without them)
    query, params = events_query(ids, tenants)
    rows = cur.connection.cursor(row_factory=tuple_row).execute(query, params).fetchall()
    if keys is None:
        batch = BatchKeys()
        batch.load(cur.connection, list(ids))
        local = mapper.bound(batch)
    else:
        keys.preload(list(ids))
        local = mapper.bound(keys)
    return replay_rows(rows, local, ids)
