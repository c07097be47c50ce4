"""Replaying notes from the log by id, in a transaction (``select_notes``), and its
two statements for a caller that sends them itself (a unit of work on its wire)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    parameters; rows ``(originator_id, originator_version, topic, state)``."""
    scope: tuple[Any, ...] = (list(dict.fromkeys(tenants)),) if tenants else ()
    if after:
        params = tuple(encode_params(([*ids], [after.get(i, 0) for i in ids], *scope)))
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
                       " ORDER BY e.originator_id, e.originator_version").format(
            t=sql.Identifier(tables.EVENTS), by=tenant).as_bytes(None)
    return sql.SQL("SELECT originator_id, originator_version, topic, state FROM {t}"
                   " WHERE originator_id = ANY(%s){by} ORDER BY originator_id, originator_version").format(
        t=sql.Identifier(tables.EVENTS), by=tenant).as_bytes(None)


def replay_rows(rows: Sequence[Sequence[Any]], mapper: SealingMapper, ids: Sequence[UUID],
                start: Mapping[UUID, Any] | None = None) -> list[Note]:
    """The aggregates of ``ids`` (in that order; absent ones skipped) replayed from the
    event ``rows`` of :func:`events_query` with ``mapper`` (bound to their keys), each
    from its state in ``start`` when given (rows then hold the later versions only)."""
    found: dict[UUID, Any] = dict(start or {})
    for oid, version, topic, state in rows:
        event = mapper.to_domain_event(StoredEvent(oid, version, topic, bytes(state)))
        found[oid] = replay.step(event, found.get(oid))  # issue 28: a missing version is typed
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
