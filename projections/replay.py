"""Replaying the log into final aggregate states, for rebuild and verify.

:func:`replay_notes` streams the events of the log in aggregate order and yields the
final states. The events are decoded by a :class:`ReplayMapper`, which the adapter
that owns the sealing supplies (``memfabric.adapters.replaying.ReplayingMapper``: the
sealing mapper plus its per-batch key reader), so nothing here imports an adapter.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from psycopg import Connection, sql
from psycopg.rows import tuple_row

from memfabric.domain import replay
from memfabric.domain.errors import ProjectionError
from memfabric.domain.note import Note
from memfabric.projections import quarantine


class KeyReader(Protocol):
    """The data keys of a batch of aggregates, read on one connection (one snapshot):
    ``load(conn, ids)`` reads the keys of ``ids`` (replacing the previous batch's);
    the reader is then handed to :meth:`ReplayMapper.bound`."""

    def load(self, conn: Connection[Any], ids: list[UUID]) -> None: ...


class ReplayMapper(Protocol):
    """What a replay decodes events with: ``batch_keys()`` → a fresh :class:`KeyReader`,
    ``bound(keys)`` → a mapper that unseals with those keys (``to_domain_event``),
    ``decode_state(stored)`` → ``(fields, erased)`` of one stored event."""

    def batch_keys(self) -> KeyReader: ...

    def bound(self, keys: Any) -> Any: ...

    def decode_state(self, stored: StoredEvent) -> Any: ...


def replay_notes(
    conn: Connection[Any],
    events_table: str,
    mapper: ReplayMapper,
    upto: int,
    *,
    batch: int = 2000,
    label: str = "replay",
    advance: Callable[[int], None] | None = None,
    cut: Cut | None = None,
    skip: Collection[UUID] = (),
    skipped: set[UUID] | None = None,
) -> Iterator[list[Note]]:
    """Final ``Note`` states of every aggregate with events at positions ``<= upto``
    (with ``cut``: the events each tenant's tracking row covers, see :class:`Cut`).

    Must run inside a transaction on ``conn`` (a server-side cursor streams the events
    in ``batch``-sized fetches); yields lists of completed aggregates between fetches, so
    the caller may use ``conn`` (for ``COPY``) while consuming. ``mapper``: the
    :class:`ReplayMapper` (the sealing mapper with its batch key reader); keys are read
    per batch in the same snapshot. ``advance(n)`` is called with the number of events per batch.

    Raises ``ProjectionError(label, notification_id, topic, error)`` on the first event
    that cannot be decoded or applied, unless its aggregate is in ``skip`` (the
    quarantine, :mod:`memfabric.projections.quarantine`) and the error is one of
    :data:`~memfabric.projections.quarantine.UNTRUSTED`: that aggregate is then left out
    (and added to ``skipped``).
    """
    keys = mapper.batch_keys()
    local = mapper.bound(keys)
    name = "mf_replay_" + uuid.uuid4().hex[:8]
    with conn.cursor(name=name, row_factory=tuple_row, binary=True) as cur:
        cur.itersize = batch
        where, params = upto_where(upto, cut)
        cur.execute(
            sql.SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {t} e"
                " WHERE {w} ORDER BY originator_id, originator_version"
            ).format(t=sql.Identifier(events_table), w=where),
            params,
        )
        current: Any = None
        current_id: UUID | None = None
        dropped: UUID | None = None
        while rows := cur.fetchmany(batch):
            keys.load(conn, list({r[1] for r in rows}))
            done: list[Note] = []
            for nid, oid, version, topic, state in rows:
                if oid != current_id:
                    if current is not None:
                        done.append(current)
                    current, current_id = None, oid
                if oid == dropped:
                    continue
                try:
                    event = local.to_domain_event(StoredEvent(oid, version, topic, bytes(state)))
                    current = replay.step(event, current)
                except quarantine.UNTRUSTED as exc:
                    if oid not in skip:  # name the event, never skip it unless quarantined
                        raise ProjectionError(label, nid, topic, repr(exc)) from exc
                    current, dropped = None, oid
                    if skipped is not None:
                        skipped.add(oid)
                except Exception as exc:  # name the event, never skip it
                    raise ProjectionError(label, nid, topic, repr(exc)) from exc
            if advance is not None:
                advance(len(rows))
            if done:
                yield done
        if current is not None:
            yield [current]




@dataclass(frozen=True)
class Cut:
    """What a projection with per-tenant tracking rows contains: the events at or below
    its floor, and each tenant's events at or below that tenant's row
    (``projections/engine.py``). ``tracking``: its tracking table; ``prefix``: the
    tenant rows' ``application_name`` prefix."""

    tracking: str
    prefix: str


def upto_where(upto: int, cut: Cut | None) -> tuple[sql.Composable, list[Any]]:
    """The ``WHERE`` of the events (aliased ``e``) a replay to ``upto`` reads."""
    if cut is None:
        return sql.SQL("e.notification_id <= %s"), [upto]
    return sql.SQL(
        "(e.notification_id <= %s OR e.notification_id <= (SELECT t.notification_id FROM {t} t"
        " WHERE t.application_name = %s || e.tenant))").format(t=sql.Identifier(cut.tracking)), [upto, cut.prefix]
