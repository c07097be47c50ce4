"""The event log for auditors: decoded reading, JSONL export and tamper evidence.

Reading (:func:`read_log`, :func:`export_jsonl`) streams ``memfabric_events`` in log
order with a server-side cursor, decodes each event with the sealing mapper and names
its note and scope (taken from the note's ``Remembered`` event, whose scope fields are
stored in clear). Protected fields of a note whose key was destroyed read ``<erased>``;
ciphertext is never shown.

Tamper evidence (:func:`verify_chain`): each event row has a leaf hash::

    leaf = SHA-256( i64 notification_id | 16-byte originator_id | i64 originator_version
                    | i32 len(topic) | topic (UTF-8) | state )

(computed inside PostgreSQL, see :data:`LEAF_SQL`) and the chain is
``d_0 = SHA-256(b"memfabric-audit-v1")``, ``d_i = SHA-256(d_{i-1} | leaf_i)``.
Checkpoints in ``mf_audit_chain`` cover consecutive segments of the log (``every``
events, default 1000, the last one ending at the head) and store the segment's
positions, leaves and the chain digest at its end. Verification recomputes the leaves
from the events table and reports every changed, removed or inserted event row of the
checkpointed part, and every checkpoint that no longer matches its own leaves or
predecessor; then (when everything matched) it checkpoints the events since the last
checkpoint. Crypto-shredding deletes keys outside the log, so it never changes a leaf.

After the last checkpoint a gap in notification ids may be a rolled-back write, but a
tenant's last committed write is also named by its projection tracking rows (written
in the append's transaction): such a row whose event is gone is reported as removed,
never checkpointed (:func:`_acknowledged_missing`, issue 28).

The chain proves integrity against anyone who cannot also rewrite ``mf_audit_chain``;
to be independent of the database, record the printed head digest elsewhere and pass it
back as ``anchor`` (``POSITION:HEX``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
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

from memfabric.adapters.crypto import MAGIC, MAGIC_TAGGED, SEALED_OPTIONAL
from memfabric.projections import tables
from memfabric.domain.errors import EventIntegrityError, SettingsError
from memfabric.domain.note import ERASED
from memfabric.projections.engine import advisory_key

EVENTS_TABLE = tables.EVENTS
REMEMBERED_TOPIC = "memfabric.domain.note:Note.Remembered"

CHAIN_TABLE = tables.AUDIT_CHAIN
CHAIN_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHAIN_TABLE} ("
    " position bigint PRIMARY KEY, prev_position bigint NOT NULL, events integer NOT NULL,"
    " digest bytea NOT NULL, positions bigint[] NOT NULL, leaves bytea NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now())"
)
"""Checkpoints: segment ``(prev_position, position]``, its event positions and 32-byte
leaves (concatenated, in order) and the chain digest after its last event."""

GENESIS = hashlib.sha256(b"memfabric-audit-v1").digest()

LEAF_SQL = (
    "sha256(int8send(notification_id) || uuid_send(originator_id)"
    " || int8send(originator_version::bigint)"
    " || int4send(octet_length(convert_to(topic, 'UTF8'))) || convert_to(topic, 'UTF8') || state)"
)
"""The leaf hash of an events-table row, in SQL (only 32 bytes per event leave the server)."""

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def leaf_hash(position: int, originator_id: UUID, version: int, topic: str, state: bytes) -> bytes:
    """The leaf hash of one event row (same bytes as :data:`LEAF_SQL`)."""
    t = topic.encode()
    return hashlib.sha256(
        _I64.pack(position) + originator_id.bytes + _I64.pack(version) + _I32.pack(len(t)) + t + state
    ).digest()


# ------------------------------------------------------------------- reading
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


def plain_fields(mapper: Any, state: bytes) -> dict[str, Any]:
    """The clear (unsealed) fields of a stored state, without any key (and without
    checking its authentication tag: the decoding mapper does that)."""
    if not (state.startswith(MAGIC) or state.startswith(MAGIC_TAGGED)):
        raise EventIntegrityError("not a memfabric event state: its stored bytes were changed")
    (n,) = _U32.unpack_from(state, len(MAGIC))
    start = len(MAGIC) + 4
    fields = dict(mapper.transcoder.decode(state[start : start + n]))
    fields.pop(SEALED_OPTIONAL, None)  # a marker of the mapper, not an event field
    return fields


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


# ------------------------------------------------------------------ the chain
@dataclass(slots=True)
class AuditReport:
    """Outcome of :func:`verify_chain`.

    ``head``: last notification id; ``events``: rows hashed; ``checkpoints``:
    checkpoints compared; ``written``: checkpoints added; ``head_digest``: hex chain
    digest over the rows as they are now (record it to anchor the log);
    ``changed``/``removed``/``inserted``: notification ids of event rows that differ
    from, are missing from, or were not in their checkpoint; ``broken``: checkpoint rows
    that were edited or removed; ``gaps``: ``(first, last)`` missing id ranges after
    the last checkpoint (normal after rolled-back writes; not a failure);
    ``anchor_ok``: result of the ``anchor`` comparison (``None`` when not given);
    ``unauthenticated``: notification ids after the last checkpoint whose event fails
    its authentication tag (checked before any checkpoint is written, so an edit made
    before the first checkpoint is never checkpointed as valid)."""

    head: int = 0
    events: int = 0
    checkpoints: int = 0
    written: int = 0
    head_digest: str = GENESIS.hex()
    changed: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    inserted: list[int] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    anchor_ok: bool | None = None
    unauthenticated: list[int] = field(default_factory=list)
    not_checkpointed: str | None = None
    """Why no checkpoint was written although asked (a read-only role without
    ``INSERT`` on ``mf_audit_chain``); ``None`` otherwise."""
    acknowledged_missing: list[tuple[str, int]] = field(default_factory=list)
    """Issue 28: ``(tenant, notification id)`` of each tenant's last acknowledged write
    whose event row is gone (:func:`_acknowledged_missing`): a removal, never a
    rolled-back write; the ids are in ``removed`` too."""

    @property
    def ok(self) -> bool:
        return (not (self.changed or self.removed or self.inserted or self.broken or self.unauthenticated)
                and self.anchor_ok is not False)


def _first_col(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def create_chain_table(datastore: Any) -> None:
    """Create ``mf_audit_chain`` (idempotent), with the log's owner and readers (issue 27)."""
    from memfabric.adapters.roles import share_new_tables  # noqa: PLC0415
    with datastore.transaction(commit=True) as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("mf-ddl"),))
        cur.execute(CHAIN_DDL)
        share_new_tables(cur)


def _parse_anchor(anchor: str | None) -> tuple[int, bytes] | None:
    if anchor is None:
        return None
    pos, _, digest = anchor.partition(":")
    try:
        return int(pos), bytes.fromhex(digest)
    except ValueError:
        raise SettingsError(f"anchor must be POSITION:HEX, got {anchor!r}") from None


def verify_chain(
    fabric: Any,
    *,
    checkpoint: bool = True,
    every: int = 1000,
    anchor: str | None = None,
    batch: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> AuditReport:
    """Recompute the audit chain from the events table and compare it with the
    checkpoints (see module doc); with ``checkpoint`` (default) and no problem found,
    checkpoint the events after the last checkpoint in segments of ``every`` events.

    ``anchor``: ``"POSITION:HEX"`` digest recorded earlier (``head_digest`` of a past
    report); ``anchor_ok`` tells whether the chain over today's rows still gives it.
    ``progress(n)`` is called per batch of rows hashed. Raises ``ValueError`` for a
    malformed anchor.
    """
    wanted = _parse_anchor(anchor)
    datastore = fabric.log.datastore
    report = AuditReport()
    if getattr(fabric, "read_only", False):
        with datastore.get_connection() as conn:
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege(%s, 'INSERT')"
                " FROM (SELECT 1) one WHERE to_regclass(%s) IS NOT NULL",
                (CHAIN_TABLE, CHAIN_TABLE, CHAIN_TABLE)).fetchone()
        have_chain = row is not None
        if checkpoint and not (row is not None and _first_col(row)):
            checkpoint = False
            report.not_checkpointed = "read-only: this role cannot write audit checkpoints"
    else:
        create_chain_table(datastore)
        have_chain = True
    lock = advisory_key("mf-audit")
    with datastore.get_connection() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
        try:
            # issue 24: tenants append concurrently, so an id below the head may still be in
            # flight; nothing past the safe head is checkpointed or called a gap
            safe = fabric.engine.safe_head() if hasattr(fabric, "engine") else None
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                if have_chain:
                    report.unauthenticated = _unauthenticated_tail(conn, fabric.log.sealing_mapper, batch)
                if hasattr(fabric, "engine"):
                    report.acknowledged_missing = _acknowledged_missing(conn, fabric.engine)
                    report.removed.extend(pos for _, pos in report.acknowledged_missing)
                _verify(conn, report, checkpoint, every, wanted, batch, progress, have_chain, safe)
                report.removed = sorted(set(report.removed))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    return report


def _acknowledged_missing(conn: Connection[Any], engine: Any) -> list[tuple[str, int]]:
    """Issue 28 item 3: a gap after the last checkpoint may be a rolled-back write, but
    a tenant's projection tracking rows name the last event its writer *committed*
    (``ProjectionEngine._record_all`` records the commit's last id in the same
    transaction as the append, so a rollback takes the row back too). A tracking row
    whose event is no longer in the log (or is another tenant's) therefore means that
    event was deleted: the log's last row, a note's last event, anything that was a
    tenant's latest write. Returns ``(tenant, notification id)`` sorted. An earlier
    event of the tenant deleted in the unchecked tail still reads as a gap."""
    from memfabric.projections.engine import TENANT_SEPARATOR  # noqa: PLC0415
    prefix = engine.application_name + TENANT_SEPARATOR
    found: set[tuple[str, int]] = set()
    cur = conn.cursor(row_factory=tuple_row)
    for p in engine.projections:
        table = sql.Identifier(engine.trackers[p.name].tracking_table_name)
        rows = cur.execute(sql.SQL(
            "SELECT substr(t.application_name, %(n)s), t.notification_id FROM {t} t"
            " WHERE starts_with(t.application_name, %(p)s) AND NOT EXISTS (SELECT 1 FROM {e} e"
            " WHERE e.notification_id = t.notification_id"
            " AND (e.tenant IS NULL OR e.tenant = substr(t.application_name, %(n)s)))").format(
            t=table, e=sql.Identifier(EVENTS_TABLE)), {"n": len(prefix) + 1, "p": prefix}).fetchall()
        found |= {(str(tenant), int(pos)) for tenant, pos in rows}
    return sorted(found)


def _unauthenticated_tail(conn: Connection[Any], mapper: Any, batch: int) -> list[int]:
    """Notification ids after the last checkpoint whose authentication tag fails
    (``SealingMapper.authenticated_body``; no key needed, nothing decrypted). Without the
    fabric secret (a read-only auditor role) tags cannot be checked: nothing is reported
    and the chain is the check."""
    if mapper.secret is None:
        return []
    cur = conn.cursor(row_factory=tuple_row)
    row = cur.execute(f"SELECT coalesce(max(position), 0) FROM {CHAIN_TABLE}").fetchone()  # noqa: S608
    after = int(row[0]) if row else 0
    failed: list[int] = []
    while True:
        rows = cur.execute(
            sql.SQL("SELECT notification_id, originator_id, originator_version, topic, state FROM {t}"
                    " WHERE notification_id > %s ORDER BY notification_id LIMIT %s").format(
                t=sql.Identifier(EVENTS_TABLE)), (after, batch)).fetchall()
        for nid, oid, version, topic, state in rows:
            try:
                mapper.authenticated_body(StoredEvent(oid, version, topic, bytes(state)))
            except EventIntegrityError:
                failed.append(int(nid))
        if len(rows) < batch:
            return failed
        after = int(rows[-1][0])


class _ChainWalk:
    """The event leaves in notification order, consumed once across the checkpoints and
    the tail, with the running chain digest ``actual`` (SHA-256 over ``actual + leaf``,
    from :data:`GENESIS`)."""

    def __init__(self, rows: Iterator[tuple[int, bytes]], report: AuditReport,
                 wanted: tuple[int, bytes] | None) -> None:
        self._rows = rows
        self._pending: tuple[int, bytes] | None = None
        self._report = report
        self._wanted = wanted
        self.actual = GENESIS

    def take(self, upto: int | None) -> Iterator[tuple[int, bytes]]:
        """Leaves with position <= ``upto`` (all when None), in order; each is chained."""
        while True:
            if self._pending is None:
                self._pending = next(self._rows, None)
                if self._pending is None:
                    return
            if upto is not None and self._pending[0] > upto:
                return
            (pos, leaf), self._pending = self._pending, None
            self._step(pos, leaf)
            yield pos, leaf

    def _step(self, pos: int, leaf: bytes) -> None:
        self.actual = hashlib.sha256(self.actual + leaf).digest()
        self._report.events += 1
        if self._wanted is not None and pos == self._wanted[0]:
            self._report.anchor_ok = self.actual == self._wanted[1]


def _verify(
    conn: Connection[Any], report: AuditReport, checkpoint: bool, every: int,
    wanted: tuple[int, bytes] | None, batch: int, progress: Callable[[int], None] | None,
    have_chain: bool = True, safe: int | None = None,
) -> None:
    """Fill ``report``: compare today's leaves with every checkpoint, then walk the tail
    after the last one (gaps; new checkpoints of ``every`` events when ``checkpoint`` and
    nothing was found)."""
    cur = conn.cursor(row_factory=tuple_row)
    report.head = int(cur.execute(
        sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {t}").format(t=sql.Identifier(EVENTS_TABLE))
    ).fetchone()[0])  # type: ignore[index]
    walk = _ChainWalk(_leaves(conn, batch, progress), report, wanted)
    last_pos, last_digest = _check_checkpoints(cur, walk, report) if have_chain else (0, GENESIS)
    _walk_tail(cur, walk, report, checkpoint and report.ok, every, last_pos, last_digest, safe)
    report.head_digest = walk.actual.hex()
    if wanted is not None and report.anchor_ok is None:
        report.anchor_ok = False  # the anchored position is gone


def _check_checkpoints(cur: Any, walk: _ChainWalk, report: AuditReport) -> tuple[int, bytes]:
    """Each checkpoint against its own stored leaves and against today's rows; returns
    ``(position, digest)`` of the last checkpoint (``(0, GENESIS)`` when none)."""
    stored_prev_pos, stored_prev = 0, GENESIS
    checkpoints = cur.execute(
        f"SELECT position, prev_position, events, digest FROM {CHAIN_TABLE} ORDER BY position"  # noqa: S608
    ).fetchall()
    for position, prev_position, count, digest in checkpoints:
        report.checkpoints += 1
        if prev_position != stored_prev_pos:
            report.broken.append(
                f"checkpoint {position} follows {prev_position}, expected {stored_prev_pos}"
                " (a checkpoint row was removed or inserted)"
            )
        positions, leaves = cur.execute(
            f"SELECT positions, leaves FROM {CHAIN_TABLE} WHERE position = %s", (position,)  # noqa: S608
        ).fetchone()
        leaves = bytes(leaves)
        stored = {p: leaves[32 * i : 32 * i + 32] for i, p in enumerate(positions)}
        for i in range(len(positions)):  # the chain over the stored leaves, from genesis
            stored_prev = hashlib.sha256(stored_prev + leaves[32 * i : 32 * i + 32]).digest()
        if stored_prev != bytes(digest) or len(positions) != count or len(leaves) != 32 * count:
            report.broken.append(f"checkpoint {position} does not match its own leaves (checkpoint edited)")
        seen = set()
        for pos, leaf in walk.take(position):
            seen.add(pos)
            if pos not in stored:
                report.inserted.append(pos)
            elif stored[pos] != leaf:
                report.changed.append(pos)
        report.removed.extend(sorted(p for p in stored if p not in seen))
        stored_prev_pos = position
    return stored_prev_pos, stored_prev


def _walk_tail(cur: Any, walk: _ChainWalk, report: AuditReport, write: bool, every: int,
               last_pos: int, last_digest: bytes, safe: int | None = None) -> None:
    """The leaves after the last checkpoint: record gaps in notification ids and, with
    ``write``, insert checkpoints of ``every`` events chained on ``last_digest``. Past
    ``safe`` (``ProjectionEngine.safe_head``: ids there may belong to a transaction
    still in flight, another tenant's) nothing is checkpointed and no gap is recorded."""
    seg_pos: list[int] = []
    seg_leaves: list[bytes] = []
    seg_digest, prev_pos, last = last_digest, last_pos, last_pos
    for pos, leaf in walk.take(None):
        final = safe is None or pos <= safe
        if pos > last + 1 and final:
            report.gaps.append((last + 1, pos - 1))
        last = pos
        if not write or not final:
            write = write and final
            continue
        seg_digest = hashlib.sha256(seg_digest + leaf).digest()
        seg_pos.append(pos)
        seg_leaves.append(leaf)
        if len(seg_pos) >= every:
            prev_pos = _insert_checkpoint(cur, report, prev_pos, seg_pos, seg_leaves, seg_digest)
            seg_pos, seg_leaves = [], []
    if seg_pos:
        _insert_checkpoint(cur, report, prev_pos, seg_pos, seg_leaves, seg_digest)


def _insert_checkpoint(cur: Any, report: AuditReport, prev_pos: int, positions: list[int],
                       leaves: list[bytes], digest: bytes) -> int:
    """Insert one checkpoint row; returns its position (the next one's ``prev_position``)."""
    cur.execute(
        f"INSERT INTO {CHAIN_TABLE} (position, prev_position, events, digest, positions, leaves)"  # noqa: S608
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (positions[-1], prev_pos, len(positions), digest, positions, b"".join(leaves)),
    )
    report.written += 1
    return positions[-1]


def _leaves(
    conn: Connection[Any], batch: int, progress: Callable[[int], None] | None
) -> Iterator[tuple[int, bytes]]:
    with conn.cursor(name="mf_audit_" + uuid.uuid4().hex[:8], row_factory=tuple_row, binary=True) as cur:
        cur.execute(
            sql.SQL("SELECT notification_id, {leaf} FROM {t} ORDER BY notification_id").format(
                leaf=sql.SQL(LEAF_SQL), t=sql.Identifier(EVENTS_TABLE))
        )
        while rows := cur.fetchmany(batch):
            for pos, leaf in rows:
                yield int(pos), bytes(leaf)
            if progress is not None:
                progress(len(rows))


__all__ = [
    "AuditReport", "CHAIN_DDL", "GENESIS", "LEAF_SQL", "LogEntry", "export_jsonl",
    "leaf_hash", "plain_fields", "read_log", "verify_chain",
]
