"""Reading the event log for auditors: :func:`read_log` and :func:`export_jsonl` (see
:mod:`memfabric.adapters.audit`, which re-exports them, for what they show and check)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg import Connection, sql
from psycopg.rows import tuple_row

from memfabric.domain.errors import EventIntegrityError
from memfabric.domain.note import ERASED
from memfabric.adapters.postgres.event_rows import (
    CHAIN_TABLE, EVENTS_TABLE, REMEMBERED_TOPIC, leaf_hash, plain_fields,
)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One decoded event: ``position`` (notification id), ``timestamp`` (UTC),
    ``aggregate_id``, ``note_id`` and scope (``tenant_id``, ``resource_id``,
    ``thread_id``; ``None`` when the note's ``Remembered`` event is missing), ``type``
    (event class name), ``version`` (1-based per note), ``topic``, ``fields`` (decoded
    event fields; ``embedding`` as raw bytes) and ``erased`` (names of protected fields
    whose key was destroyed; their value reads ``<erased>``)."""

    position: int
    timestamp: datetime | None
    aggregate_id: UUID
    note_id: str | None
    tenant_id: str | None
    resource_id: str | None
    thread_id: str | None
    type: str
    version: int
    topic: str
    fields: dict[str, Any]
    erased: list[str] = field(default_factory=list)
    integrity: str = "ok"
    """``"ok"``, or ``"failed"`` when the row does not decode (a sealed byte changed) or
    differs from the audit checkpoint covering it (``problem`` says why; ``fields`` is
    then empty when it did not decode)."""
    problem: str | None = None
    metadata: str = "unauthenticated"
    """``"checkpointed"`` when an audit checkpoint covers the row and its leaf hash
    matches (the clear metadata, tenant id included, is as it was when checkpointed);
    ``"unauthenticated"`` otherwise (the clear part of the stored state carries no
    authentication tag of its own)."""

    def to_dict(self, *, embeddings: bool = False) -> dict[str, Any]:
        """JSON-ready dict; ``embeddings``: base64 of the float32 bytes, else a size note."""
        fields = {k: _jsonable(v, embeddings) for k, v in self.fields.items()}
        integrity: dict[str, Any] = {"integrity": self.integrity, "metadata": self.metadata}
        if self.problem is not None:
            integrity["problem"] = self.problem
        return integrity | {
            "position": self.position,
            "time": self.timestamp.isoformat() if self.timestamp else None,
            "note_id": self.note_id,
            "aggregate_id": str(self.aggregate_id),
            "scope": {"tenant_id": self.tenant_id, "resource_id": self.resource_id, "thread_id": self.thread_id},
            "type": self.type,
            "version": self.version,
            "topic": self.topic,
            "fields": fields,
            "erased": list(self.erased),
        }


def _jsonable(value: Any, embeddings: bool) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return base64.b64encode(raw).decode() if embeddings else f"<{len(raw)} bytes float32>"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, embeddings) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, embeddings) for v in value]
    return value


_Scope = tuple[str | None, str | None, str | None, str | None]


class _Scopes:
    """Bounded cache: aggregate id -> (note_id, tenant, resource, thread)."""

    def __init__(self, mapper: Any, maxsize: int = 50_000) -> None:
        self.mapper = mapper
        self.maxsize = maxsize
        self.cache: OrderedDict[UUID, _Scope] = OrderedDict()

    def resolve(self, conn: Connection[Any], ids: list[UUID]) -> dict[UUID, _Scope]:
        missing = [i for i in dict.fromkeys(ids) if i not in self.cache]
        if missing:
            rows = conn.cursor(row_factory=tuple_row, binary=True).execute(
                sql.SQL("SELECT originator_id, state FROM {t} WHERE originator_id = ANY(%s)"
                        " AND originator_version = 1").format(t=sql.Identifier(EVENTS_TABLE)),
                (missing,),
            ).fetchall()
            found = {}
            for oid, state in rows:
                try:
                    found[oid] = plain_fields(self.mapper, bytes(state))
                except Exception:  # noqa: BLE001 - the row itself is reported as failed
                    found[oid] = {}
            for oid in missing:
                f = found.get(oid, {})
                self.cache[oid] = (f.get("note_id"), f.get("tenant_id"), f.get("resource_id"), f.get("thread_id"))
        out = {}
        for oid in ids:
            self.cache.move_to_end(oid)
            out[oid] = self.cache[oid]
        while len(self.cache) > self.maxsize:
            self.cache.popitem(last=False)
        return out


def _note_aggregates(conn: Connection[Any], mapper: Any, note: str, tenant: str | None) -> list[UUID]:
    """Aggregate ids of note ``note`` (a 12-hex note id, or an aggregate UUID)."""
    try:
        return [UUID(note)]
    except ValueError:
        pass
    out = []
    with conn.cursor(name="mf_note_" + uuid.uuid4().hex[:8], row_factory=tuple_row, binary=True) as cur:
        cur.execute(
            sql.SQL("SELECT originator_id, state FROM {t} WHERE topic = %s").format(t=sql.Identifier(EVENTS_TABLE)),
            (REMEMBERED_TOPIC,),
        )
        while rows := cur.fetchmany(2000):
            for oid, state in rows:
                try:
                    f = plain_fields(mapper, bytes(state))
                except Exception:  # noqa: BLE001 - a changed row is reported when read
                    continue
                if f.get("note_id") == note and (tenant is None or f.get("tenant_id") == tenant):
                    out.append(oid)
    return out


def read_log(
    fabric: Any,
    *,
    note: str | None = None,
    tenant: str | None = None,
    since: int = 0,
    follow: bool = False,
    poll: float = 1.0,
    idle_exit: float | None = None,
    batch: int = 500,
) -> Iterator[LogEntry]:
    """Decoded events after position ``since`` (exclusive, default 0: all), in log order.

    ``note``: only that note's events (12-hex note id, in any scope unless ``tenant``
    narrows it, or an aggregate UUID); ``tenant``: only that tenant's notes. With
    ``follow`` the iterator keeps waiting for new events (LISTEN on the events channel,
    re-checking every ``poll`` seconds) and ends after ``idle_exit`` seconds without new
    events (``None``: never). Memory use is bounded (one batch plus a bounded scope
    cache). ``fabric``: an open ``memfabric.adapters.Fabric``.

    Each row is checked as it is read, and a bad row never stops the listing: a row
    that does not decode (authenticated decryption failed, a broken clear part) or whose
    leaf hash differs from the audit checkpoint covering it comes with
    ``integrity="failed"`` and the reason in ``problem``; see :class:`LogEntry`.
    """
    mapper = fabric.log.sealing_mapper
    keys = fabric.log.keys
    scopes = _Scopes(mapper)
    checks = _Checkpoints()
    datastore = fabric.log.datastore
    ids: list[UUID] | None = None
    if note is not None:
        with datastore.get_connection() as conn, conn.transaction():
            ids = _note_aggregates(conn, mapper, note, tenant)
        if not ids and not follow:
            return
    position = since
    listener: Connection[Any] | None = None
    try:
        last_new = time.monotonic()
        while True:
            got = 0
            with datastore.get_connection() as conn, conn.transaction():
                for entry in _stream(conn, mapper, keys, scopes, position, ids, batch, checks):
                    position = entry.position
                    got += 1
                    if tenant is None or entry.tenant_id == tenant or (
                            entry.integrity == "failed" and entry.tenant_id is None):
                        yield entry
            if not follow:
                return
            now = time.monotonic()
            if got:
                last_new = now
            elif idle_exit is not None and now - last_new >= idle_exit:
                return
            if listener is None:
                listener = psycopg.connect(fabric.dsn, autocommit=True)
                listener.execute(sql.SQL("LISTEN {c}").format(c=sql.Identifier(EVENTS_TABLE)))
                continue  # events may have landed before LISTEN: read again first
            wait = poll if idle_exit is None else max(0.0, min(poll, idle_exit - (now - last_new)))
            for _ in listener.notifies(timeout=wait, stop_after=1):
                pass
    finally:
        if listener is not None:
            listener.close()


class _Checkpoints:
    """The audit checkpoints' leaves for the rows of one batch (``mf_audit_chain``)."""

    def __init__(self) -> None:
        self.exists: bool | None = None

    def load(self, conn: Connection[Any], lo: int, hi: int) -> tuple[dict[int, bytes], list[tuple[int, int]]]:
        """(leaf per checkpointed position, covered ``(prev_position, position]`` ranges)
        for positions ``lo..hi``."""
        if self.exists is None:
            row = conn.cursor(row_factory=tuple_row).execute("SELECT to_regclass(%s)", (CHAIN_TABLE,)).fetchone()
            self.exists = bool(row and row[0] is not None)
        if not self.exists:
            return {}, []
        rows = conn.cursor(row_factory=tuple_row, binary=True).execute(
            f"SELECT prev_position, position, positions, leaves FROM {CHAIN_TABLE}"  # noqa: S608
            " WHERE position >= %s AND prev_position < %s",
            (lo, hi),
        ).fetchall()
        leaves: dict[int, bytes] = {}
        ranges = []
        for prev, pos, positions, blob in rows:
            blob = bytes(blob)
            ranges.append((int(prev), int(pos)))
            for i, p in enumerate(positions):
                leaves[int(p)] = blob[32 * i : 32 * i + 32]
        return leaves, ranges


def _check_leaf(entry: LogEntry, leaf: bytes, leaves: dict[int, bytes],
                ranges: list[tuple[int, int]]) -> LogEntry:
    covering = next(((a, b) for a, b in ranges if a < entry.position <= b), None)
    if covering is None:
        return entry
    stored = leaves.get(entry.position)
    if stored == leaf:
        return entry if entry.integrity == "failed" else _replace(entry, metadata="checkpointed")
    why = (f"the row differs from audit checkpoint {covering[1]} (its stored bytes, clear metadata "
           "included, were changed after the checkpoint)") if stored is not None else (
           f"the row is not in audit checkpoint {covering[1]}, which covers its position (inserted later)")
    problem = why if entry.problem is None else f"{entry.problem}; {why}"
    return _replace(entry, integrity="failed", problem=problem)


def _replace(entry: LogEntry, **changes: Any) -> LogEntry:
    from dataclasses import replace

    return replace(entry, **changes)


def _stream(
    conn: Connection[Any], mapper: Any, keys: Any, scopes: _Scopes, after: int,
    ids: list[UUID] | None, batch: int, checks: _Checkpoints | None = None,
) -> Iterator[LogEntry]:
    where: sql.Composable = sql.SQL("notification_id > %s")
    params: list[Any] = [after]
    if ids is not None:
        where = sql.SQL("{w} AND originator_id = ANY(%s)").format(w=where)
        params.append(ids)
    with conn.cursor(name="mf_log_" + uuid.uuid4().hex[:8], row_factory=tuple_row, binary=True) as cur:
        cur.execute(
            sql.SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {t}"
                " WHERE {w} ORDER BY notification_id"
            ).format(t=sql.Identifier(EVENTS_TABLE), w=where),
            params,
        )
        while rows := cur.fetchmany(batch):
            batch_ids = [r[1] for r in rows]
            keys.preload(list(dict.fromkeys(batch_ids)))
            named = scopes.resolve(conn, batch_ids)
            leaves, ranges = checks.load(conn, rows[0][0], rows[-1][0]) if checks else ({}, [])
            for nid, oid, version, topic, state in rows:
                raw = bytes(state)
                try:
                    entry = _entry(mapper, named[oid], nid, oid, version, topic, raw)
                except Exception as exc:  # noqa: BLE001 - reported in the row, never stops the log
                    entry = _failed(named[oid], nid, oid, version, topic, exc)
                if ranges:
                    entry = _check_leaf(entry, leaf_hash(nid, oid, version, topic, raw), leaves, ranges)
                yield entry


def _failed(scope: _Scope, position: int, oid: UUID, version: int, topic: str, exc: BaseException) -> LogEntry:
    reason = " ".join(str(exc).split()) if isinstance(exc, EventIntegrityError) and str(exc) else ""
    if not reason:
        kind = type(exc).__name__
        reason = ("authenticated decryption failed (InvalidTag): its stored bytes were changed"
                  if kind == "InvalidTag" else f"it does not decode ({kind}): its stored bytes were changed")
    note_id, tenant, resource, thread = scope
    return LogEntry(
        position=position, timestamp=None, aggregate_id=oid, note_id=note_id, tenant_id=tenant,
        resource_id=resource, thread_id=thread, type=topic.rsplit(".", 1)[-1], version=version,
        topic=topic, fields={}, integrity="failed", problem=reason,
    )


def _entry(
    mapper: Any, scope: _Scope, position: int, oid: UUID, version: int, topic: str, state: bytes
) -> LogEntry:
    fields, erased = mapper.decode_state(StoredEvent(oid, version, topic, state))
    for name in erased:
        fields[name] = ERASED
    stamp = fields.pop("timestamp", None)
    fields.pop("originator_topic", None)
    note_id, tenant, resource, thread = scope
    return LogEntry(
        position=position, timestamp=stamp, aggregate_id=oid, note_id=note_id, tenant_id=tenant,
        resource_id=resource, thread_id=thread, type=topic.rsplit(".", 1)[-1], version=version,
        topic=topic, fields=fields, erased=list(erased),
    )


def export_jsonl(
    fabric: Any,
    out: str | Path | IO[str],
    *,
    tenant: str | None = None,
    embeddings: bool = True,
    batch: int = 500,
    progress: Callable[[int], None] | None = None,
    failed: Callable[[LogEntry], None] | None = None,
) -> int:
    """Write the log (or one ``tenant``'s part) as JSON Lines, one :meth:`LogEntry.to_dict`
    per line in log order, streaming in constant memory; returns the number of lines.
    ``embeddings``: include vectors as base64 (default) or only their size.
    ``progress(position)`` is called with the position of each event written;
    ``failed(entry)`` for each row written with ``"integrity": "failed"`` (the export
    carries on past it)."""
    own = not hasattr(out, "write")
    fh: IO[str] = open(out, "w", encoding="utf-8") if own else out  # type: ignore[arg-type, assignment]  # noqa: SIM115
    n = 0
    try:
        for entry in read_log(fabric, tenant=tenant, batch=batch):
            fh.write(json.dumps(entry.to_dict(embeddings=embeddings), ensure_ascii=False) + "\n")
            n += 1
            if failed is not None and entry.integrity == "failed":
                failed(entry)
            if progress is not None:
                progress(entry.position)
    finally:
        if own:
            fh.close()
    return n
