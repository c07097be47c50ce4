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

After the last checkpoint a gap in notification ids may be a rolled-back write (issue
28 tells it apart): every committed append counts its events per tenant in the same
transaction (:mod:`memfabric.adapters.postgres.tenant_heads`), so a tenant with fewer
events than counted lost some (``miscounted``), and a tenant's last committed write is
also named by its projection tracking rows: such a row whose event is gone is reported
as removed (:func:`_acknowledged_missing`). Either fails the verification and nothing
is checkpointed.

The chain proves integrity against anyone who cannot also rewrite ``mf_audit_chain``;
to be independent of the database, record the printed head digest elsewhere and pass it
back as ``anchor`` (``POSITION:HEX``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.persistence import StoredEvent
from psycopg import Connection, sql
from psycopg.rows import tuple_row

from memfabric.domain.errors import EventIntegrityError, SettingsError
from memfabric.projections.engine import advisory_key
from memfabric.adapters.audit_log import LogEntry, export_jsonl, read_log
from memfabric.adapters.postgres import tenant_heads
from memfabric.adapters.postgres.event_rows import (
    CHAIN_DDL, CHAIN_TABLE, EVENTS_TABLE, GENESIS, LEAF_SQL, REMEMBERED_TOPIC, leaf_hash, plain_fields,
)


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
    miscounted: list[tuple[str, int, int]] = field(default_factory=list)
    """Issue 28: ``(tenant, events found, events its appends counted)`` of each tenant whose
    events differ from the count its committed appends kept in the same transaction
    (:mod:`memfabric.adapters.postgres.tenant_heads`): fewer means events were deleted,
    wherever they were, which a gap alone cannot tell from a rolled-back write."""
    acknowledged_missing: list[tuple[str, int]] = field(default_factory=list)
    """Issue 28: ``(tenant, notification id)`` of each tenant's last acknowledged write
    whose event row is gone (:func:`_acknowledged_missing`): a removal, never a
    rolled-back write; the ids are in ``removed`` too."""

    @property
    def ok(self) -> bool:
        return (not (self.changed or self.removed or self.inserted or self.broken or self.unauthenticated
                     or self.miscounted)
                and self.anchor_ok is not False)


def _first_col(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def create_chain_table(datastore: Any) -> None:
    """Create ``mf_audit_chain`` (idempotent), with the log's owner and readers (issue 27)."""
    from memfabric.adapters.postgres.roles import share_new_tables  # noqa: PLC0415
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
                report.miscounted = tenant_heads.miscounted(conn, EVENTS_TABLE)
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
    "AuditReport", "CHAIN_DDL", "CHAIN_TABLE", "EVENTS_TABLE", "GENESIS", "LEAF_SQL", "LogEntry",
    "REMEMBERED_TOPIC", "export_jsonl", "leaf_hash", "plain_fields", "read_log", "verify_chain",
]
