"""Quarantine of aggregates whose events cannot be trusted (issue 28, defect 10).

One unauthenticated row appended to the log (or a row whose bytes were changed) used to
stop every projection at its position, so every writer of every tenant (which catches
the projections up in its own transaction) and the projection runner failed from then
on. Now the projections fail closed for that aggregate only:

- :func:`quarantining` wraps the engine's ``load_notes``: when a batch does not load
  because of an event that does not authenticate, decode or follow its predecessor
  (:data:`UNTRUSTED`), the aggregates are loaded one by one and each one that fails is
  recorded in ``mf_quarantine`` (``aggregate_id``, the ``notification_id`` and
  ``topic`` of its first bad row, ``reason``) and left out of the projections; a
  warning names it. The others are projected and every other writer goes on.
- Reads and writes of a quarantined note still fail with the typed
  ``EventIntegrityError`` (its events are never trusted); nothing of it is projected.
- ``projections rebuild`` / ``verify`` (:func:`memfabric.projections.rebuild.replay_notes`)
  leave out the quarantined aggregates that still fail, and stop with
  ``ProjectionError`` on any other bad row, as before. A rebuild releases a quarantined
  aggregate whose events load again (e.g. restored from a backup).
- ``memfabric projections status`` lists the quarantine (:func:`listing`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import TopicError, resolve_topic
from psycopg import Cursor, sql
from psycopg.rows import tuple_row

from memfabric.domain.errors import EventIntegrityError
from memfabric.domain.note import Note
from memfabric.projections import tables

_log = logging.getLogger(__name__)

UNTRUSTED = (EventIntegrityError, TopicError)
"""What loading an aggregate raises when one of its rows cannot be trusted: a failed
authentication or decryption, a missing version (``EventIntegrityError``), a topic
that names no event class (``TopicError``)."""

DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.QUARANTINE} ("
    " aggregate_id uuid PRIMARY KEY, notification_id bigint NOT NULL, topic text NOT NULL,"
    " reason text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
)

LoadNotes = Callable[[Cursor[Any], Sequence[UUID]], list[Note]]


def create(cur: Cursor[Any]) -> None:
    """Create ``mf_quarantine`` (idempotent)."""
    cur.execute(DDL)


def _bad_row(cur: Cursor[Any], mapper: Any, aggregate_id: UUID) -> tuple[int, str] | None:
    """``(notification_id, topic)`` of the first row of the aggregate whose topic or
    authentication tag fails (``mapper.authenticated_body``), else ``None``."""
    rows = cur.connection.cursor(row_factory=tuple_row).execute(
        sql.SQL("SELECT notification_id, originator_version, topic, state FROM {t}"
                " WHERE originator_id = %s ORDER BY originator_version").format(t=sql.Identifier(tables.EVENTS)),
        (aggregate_id,)).fetchall()
    for nid, version, topic, state in rows:
        try:
            resolve_topic(topic)
            mapper.authenticated_body(StoredEvent(aggregate_id, version, topic, bytes(state)))
        except UNTRUSTED:
            return int(nid), str(topic)
    return (int(rows[-1][0]), str(rows[-1][2])) if rows else None


def record(cur: Cursor[Any], mapper: Any, aggregate_id: UUID, exc: BaseException) -> None:
    """Quarantine ``aggregate_id`` (kept when already there) and log a warning naming
    it, its first bad row and why (``exc``)."""
    where = _bad_row(cur, mapper, aggregate_id) or (0, "?")
    reason = " ".join(str(exc).split()) or type(exc).__name__
    cur.execute(
        f"INSERT INTO {tables.QUARANTINE} (aggregate_id, notification_id, topic, reason)"  # noqa: S608
        " VALUES (%s, %s, %s, %s) ON CONFLICT (aggregate_id) DO NOTHING",
        (aggregate_id, where[0], where[1], reason[:2000]))
    _log.warning("quarantined aggregate %s (notification %s, %s): %s; it is left out of the "
                 "projections and its reads fail; run 'memfabric audit verify'",
                 aggregate_id, where[0], where[1], reason)


def quarantining(load: LoadNotes, mapper: Any) -> LoadNotes:
    """The engine's ``load_notes`` (``load``) that quarantines (:func:`record`) each
    aggregate of a batch that fails with :data:`UNTRUSTED` and returns the others'
    states. ``mapper``: the fabric's sealing mapper (its ``authenticated_body`` names
    the bad row)."""
    def guarded(cur: Cursor[Any], ids: Sequence[UUID]) -> list[Note]:
        try:
            return load(cur, ids)
        except UNTRUSTED:
            pass
        out: list[Note] = []
        for aggregate_id in ids:
            try:
                out += load(cur, [aggregate_id])
            except UNTRUSTED as exc:
                record(cur, mapper, aggregate_id, exc)
        return out
    return guarded


def _readable(cur: Cursor[Any]) -> bool:
    row = cur.execute(
        "SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege(to_regclass(%s), 'SELECT')",
        (tables.QUARANTINE, tables.QUARANTINE)).fetchone()
    value = row[0] if isinstance(row, tuple) else (next(iter(row.values())) if row else False)
    return bool(value)


def ids(cur: Cursor[Any]) -> set[UUID]:
    """The quarantined aggregate ids (empty when the table is absent or unreadable, e.g.
    a database opened only read-only so far)."""
    if not _readable(cur):
        return set()
    rows = cur.connection.cursor(row_factory=tuple_row).execute(
        f"SELECT aggregate_id FROM {tables.QUARANTINE}").fetchall()  # noqa: S608
    return {r[0] for r in rows}


def release(cur: Cursor[Any], aggregate_ids: Collection[UUID]) -> None:
    """Take ``aggregate_ids`` (whose events load again) out of the quarantine."""
    if aggregate_ids:
        cur.execute(f"DELETE FROM {tables.QUARANTINE} WHERE aggregate_id = ANY(%s)",  # noqa: S608
                    (list(aggregate_ids),))


def listing(cur: Cursor[Any]) -> list[dict[str, Any]]:
    """Every quarantined aggregate: ``{aggregate_id, notification_id, topic, reason, at}``
    by notification id."""
    if not _readable(cur):
        return []
    rows = cur.connection.cursor(row_factory=tuple_row).execute(
        f"SELECT aggregate_id, notification_id, topic, reason, at FROM {tables.QUARANTINE}"  # noqa: S608
        " ORDER BY notification_id").fetchall()
    return [dict(zip(("aggregate_id", "notification_id", "topic", "reason", "at"), r, strict=True)) for r in rows]
