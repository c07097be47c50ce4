"""What the console (:mod:`memfabric.adapters.console`) reads, as plain data: the scope
tree with its counts, the tombstones, a note's timeline, a page of the log.

No content is ever read here: counts come from the note-scope index
(``mf_note_scope``: un-forgotten notes, held or not), the ids of the notes the log's
``Superseded`` events name, and the clear fields of its ``Forgotten`` events (scope
ids, note id, time, who asked).
Notes, lineage and history are read through :class:`~memfabric.domain.notes.Notes`;
the log through :func:`memfabric.adapters.audit.read_log`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import sql
from psycopg.rows import tuple_row

from memfabric.adapters.audit import CHAIN_TABLE, EVENTS_TABLE, LogEntry, plain_fields, read_log
from memfabric.domain.note import ERASED
from memfabric.domain.results import HistoryEntry, Lineage
from memfabric.domain.scope import Scope
from memfabric.projections import tables

FORGOTTEN_TOPIC = "memfabric.domain.note:Note.Forgotten"
SUPERSEDED_TOPIC = "memfabric.domain.note:Note.Superseded"
LEVELS = ("tenant_id", "resource_id", "thread_id")
"""The scope columns, outermost first (``''`` in SQL for an absent part)."""
RESCAN = 1_000
"""Notification ids re-read behind the last head on each tombstone refresh that finds a
new head, so an event committed after a higher id was already visible is still seen
(idempotent)."""


# ---------------------------------------------------------------- tombstones
@dataclass(frozen=True, slots=True)
class Tombstone:
    """A forgotten note, from the clear fields of its ``Forgotten`` event: ``scope``
    (``tenant_id``, ``resource_id``, ``thread_id``; ``''`` when absent), ``note_id``,
    ``kind``, ``at`` (UTC) and ``requested_by``."""

    aggregate_id: UUID
    note_id: str
    kind: str
    scope: tuple[str, str, str]
    at: datetime | None
    requested_by: str


class Tombstones:
    """Every forgotten note of the log (legal holds excluded) and every superseded
    note's aggregate id (a note is superseded once and for good), kept up to date
    incrementally: :meth:`refresh` reads only the ``Forgotten`` events after the last
    head (minus :data:`RESCAN`), and nothing while the head has not moved. Thread-safe. A forgotten note stays forgotten, except a
    working block written again (its label starts afresh): :meth:`matching` drops those
    still in the note-scope index."""

    def __init__(self, fabric: Any) -> None:
        self._fabric = fabric
        self._head = 0
        self._by_aggregate: dict[UUID, Tombstone] = {}
        self._superseded: set[UUID] = set()
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Read the ``Forgotten`` events since the last refresh (one indexed range scan)."""
        mapper = self._fabric.log.sealing_mapper
        with self._lock, self._fabric.log.datastore.get_connection() as conn:
            cur = conn.cursor(row_factory=tuple_row, binary=True)
            head_row = cur.execute(sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {t}").format(
                t=sql.Identifier(EVENTS_TABLE))).fetchone()
            head = int(head_row[0]) if head_row else 0
            if head == self._head:
                return
            rows = cur.execute(sql.SQL(
                "SELECT originator_id, topic, CASE WHEN topic = %s THEN state END FROM {t}"
                " WHERE notification_id > %s AND notification_id <= %s AND topic = ANY(%s)").format(
                t=sql.Identifier(EVENTS_TABLE)),
                (FORGOTTEN_TOPIC, max(0, self._head - RESCAN), head, [FORGOTTEN_TOPIC, SUPERSEDED_TOPIC])).fetchall()
            for oid, topic, state in rows:
                if topic == SUPERSEDED_TOPIC:
                    self._superseded.add(oid)
                    continue
                try:
                    f = plain_fields(mapper, bytes(state))
                except Exception:  # noqa: BLE001 - a changed row: the log page flags it
                    continue
                if f.get("reason") == "legal_hold":
                    continue
                self._by_aggregate[oid] = Tombstone(
                    aggregate_id=oid, note_id=str(f.get("note_id")), kind=str(f.get("kind")),
                    scope=(str(f.get("tenant_id") or ""), str(f.get("resource_id") or ""),
                           str(f.get("thread_id") or "")),
                    at=f.get("timestamp"), requested_by=str(f.get("requested_by") or ""))
            self._head = head

    def superseded(self) -> list[UUID]:
        """Aggregate ids of every note ever superseded (held or forgotten ones included:
        the note-scope index tells those apart)."""
        with self._lock:
            return list(self._superseded)

    def matching(self, prefix: tuple[str, ...] = (), note_id: str | None = None) -> list[Tombstone]:
        """The tombstones under a scope ``prefix`` (``()``: all; ``('acme', '')``: the
        tenant's notes without resource...) or of ``note_id``, newest first."""
        with self._lock:
            found = [t for t in self._by_aggregate.values()
                     if t.scope[:len(prefix)] == prefix and (note_id is None or t.note_id == note_id)]
        blocks = [t.aggregate_id for t in found if t.kind == "working"]
        if blocks:
            with self._fabric.log.datastore.get_connection() as conn:
                alive = {r[0] for r in conn.cursor(row_factory=tuple_row).execute(
                    f"SELECT aggregate_id FROM {tables.NOTE_SCOPE} WHERE aggregate_id = ANY(%s)",  # noqa: S608
                    (blocks,)).fetchall()}
            found = [t for t in found if t.aggregate_id not in alive]
        return sorted(found, key=lambda t: (t.at is None, t.at), reverse=True)


# ---------------------------------------------------------------- the scope tree
@dataclass(frozen=True, slots=True)
class ScopeRow:
    """One child of a scope prefix: ``key`` (the tenant, resource or thread id; ``''``
    for notes without that part), note counts ``live`` (neither superseded nor held),
    ``superseded``, ``held``, ``forgotten``, and ``children`` (distinct ids one level
    down; 0 at the thread level)."""

    key: str
    live: int
    superseded: int
    held: int
    forgotten: int
    children: int


def _prefix_where(prefix: tuple[str, ...]) -> str:
    return " AND ".join(f"{c} = %s" for c in LEVELS[: len(prefix)]) or "TRUE"


def scope_rows(fabric: Any, tombs: Tombstones, prefix: tuple[str, ...], *, after: str | None = None,
               limit: int = 50) -> tuple[list[ScopeRow], str | None]:
    """One keyset page of the children of scope ``prefix`` (``()``: the tenants;
    ``(tenant,)``: its resources; ``(tenant, resource)``: its threads), ordered by key,
    after key ``after``; returns ``(rows, next_after)`` (``None`` on the last page).
    Scopes whose notes are all forgotten are listed too."""
    col = LEVELS[len(prefix)]
    child = LEVELS[len(prefix) + 1] if len(prefix) < 2 else None
    where = _prefix_where(prefix)
    params: list[Any] = list(prefix)
    if after is not None:
        where += f" AND {col} > %s"
        params.append(after)
    with fabric.log.datastore.get_connection() as conn:
        cur = conn.cursor(row_factory=tuple_row)
        # one aggregate per question: each stays an index-only or narrow scan (a single
        # GROUP BY with FILTER and DISTINCT reads the heap row of every note)
        counted = cur.execute(
            f"SELECT {col}, count(*) FROM {tables.NOTE_SCOPE} WHERE {where}"  # noqa: S608
            f" GROUP BY {col} ORDER BY {col} LIMIT %s", [*params, limit + 1]).fetchall()
        gone: dict[str, int] = {}
        for t in tombs.matching(prefix):
            key = t.scope[len(prefix)]
            if after is None or key > after:
                gone[key] = gone.get(key, 0) + 1
        keys = sorted({str(r[0]) for r in counted} | set(gone))[: limit + 1]
        total = {str(k): int(n) for k, n in counted}
        held, kids, superseded = (_per_key(cur, prefix, col, child, keys, tombs.superseded()) if keys
                                  else ({}, {}, {}))
    rows = []
    for key in keys[:limit]:
        sup, hold = superseded.get(key, 0), held.get(key, 0)
        rows.append(ScopeRow(key=key, live=max(0, total.get(key, 0) - hold - sup), superseded=sup,
                             held=hold, forgotten=gone.get(key, 0), children=kids.get(key, 0)))
    return rows, (keys[limit - 1] if len(keys) > limit else None)


def _per_key(cur: Any, prefix: tuple[str, ...], col: str, child: str | None, keys: list[str],
             replaced: list[UUID]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """``(held, children, superseded)`` counts per key of ``keys`` under ``prefix``
    (superseded: of the ``replaced`` aggregates, those neither held nor forgotten)."""
    where = f"{_prefix_where(prefix)} AND {col} = ANY(%s)"
    held = cur.execute(
        f"SELECT {col}, count(*) FROM {tables.NOTE_SCOPE} WHERE {where} AND held GROUP BY {col}",  # noqa: S608
        [*prefix, keys]).fetchall()
    kids = cur.execute(
        f"SELECT {col}, count(*) FROM (SELECT DISTINCT {col}, {child} FROM {tables.NOTE_SCOPE}"  # noqa: S608
        f" WHERE {where}) d GROUP BY {col}", [*prefix, keys]).fetchall() if child else []
    superseded = cur.execute(
        f"SELECT {col}, count(*) FROM {tables.NOTE_SCOPE} WHERE {where} AND NOT held"  # noqa: S608
        f" AND aggregate_id = ANY(%s) GROUP BY {col}", [*prefix, keys, replaced]).fetchall() if replaced else []

    def as_dict(rows: list[Any]) -> dict[str, int]:
        return {str(k): int(n) for k, n in rows}
    return as_dict(held), as_dict(kids), as_dict(superseded)


def held_ids(fabric: Any, scope: Scope, limit: int = 50) -> list[str]:
    """Ids of the notes of exactly ``scope`` under legal hold (at most ``limit``)."""
    with fabric.log.datastore.get_connection() as conn:
        rows = conn.cursor(row_factory=tuple_row).execute(
            f"SELECT note_id FROM {tables.NOTE_SCOPE} WHERE tenant_id = %s AND resource_id = %s"  # noqa: S608
            " AND thread_id = %s AND held ORDER BY note_id LIMIT %s", (*scope.sql(), limit)).fetchall()
    return [str(r[0]) for r in rows]


def homes(fabric: Any, tombs: Tombstones, note_id: str, limit: int = 20) -> list[Scope]:
    """Every scope holding a note ``note_id`` (un-forgotten, from the note-scope index,
    or forgotten, from the tombstones), sorted by key."""
    with fabric.log.datastore.get_connection() as conn:
        rows = conn.cursor(row_factory=tuple_row).execute(
            f"SELECT tenant_id, resource_id, thread_id FROM {tables.NOTE_SCOPE} WHERE note_id = %s"  # noqa: S608
            " LIMIT %s", (note_id, limit)).fetchall()
    found = {(str(a), str(b), str(c)) for a, b, c in rows} | {t.scope for t in tombs.matching(note_id=note_id)}
    return [Scope(tenant_id=t, resource_id=r or None, thread_id=th or None) for t, r, th in sorted(found)]


# ---------------------------------------------------------------- words
def decision_words(decision: Any) -> str | None:
    """Why a write folded into or superseded another note, in words (``None`` without a
    decision; a decision erased with its note says so)."""
    if decision is None:
        return None
    if not isinstance(decision, dict):
        return "the decision was erased with the note" if decision == ERASED else str(decision)
    other = decision.get("note_id")
    of = f" note {other}" if other else " an earlier note"
    sim = decision.get("similarity")
    similar = f" (cosine similarity {sim})" if sim is not None else ""
    basis = decision.get("basis")
    if basis == "exact_repeat":
        return f"the same text as{of} was written again{similar}: folded into it"
    if basis == "path":
        return f"a file note on the same path as{of}{similar}: the newer content wins"
    if basis == "explicit_subject":
        return f"the same subject “{decision.get('subject')}” as{of}: the newer value replaces it"
    if basis == "inferred_subject":
        old, new = decision.get("old_value"), decision.get("new_value")
        change = f": “{old}” became “{new}”" if old is not None else f": now “{new}”"
        return (f"both state {decision.get('subject_key')}{change}, so the newer supersedes{of}"
                f" (rule {decision.get('decision_rule')}; extraction {decision.get('extraction_rules')})")
    if basis == "caller_supersedes":
        return f"the caller asked to supersede{of}"
    return ", ".join(f"{k} {v}" for k, v in decision.items())


def cause_words(cause: str) -> str | None:
    """An event's cause in words (``None`` for the caller's own write)."""
    if not cause or cause == "caller":
        return None
    what, _, rest = cause.partition(":")
    names = {"supersession": "the supersession by note", "fold": "a fold", "forget": "a forget",
             "erase_scope": "an erasure of the scope", "reembed": "a re-embedding", "link": "the linker",
             "evolution": "evolution from note", "promotion": "a promotion"}
    head = names.get(what, what)
    return f"caused by {head} {rest}".strip() if rest else f"caused by {head}"


def _when(ts: Any) -> str:
    return f"{ts:%Y-%m-%d %H:%M:%S} UTC" if isinstance(ts, datetime) else "open"


def validity(lo: Any, hi: Any) -> str:
    """``[valid_from, valid_to)`` in words; ``always`` for an open window."""
    if lo is None and hi is None:
        return "always"
    return f"{_when(lo) if lo else 'open'} → {_when(hi) if hi else 'open'}"


def _clip(text: Any, n: int = 160) -> str:
    s = str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def _links(fields: dict[str, Any]) -> str:
    return ", ".join(f"{lk.get('id')} ({lk.get('relation', 'related')}, {lk.get('weight', 1.0)})"
                     for lk in fields.get("links") or [] if isinstance(lk, dict))


def event_words(h: HistoryEntry, forgotten: bool) -> str:
    """What one event did, in words; never a forgotten note's content (``forgotten``)."""
    f = h.fields
    text = "" if forgotten or f.get("content") in (None, ERASED) else f": “{_clip(f.get('content'))}”"
    if h.type == "Remembered":
        return f"remembered as a {f.get('kind')} note{text}"
    if h.type == "Folded":
        return f"the same note was written again (fold){text}"
    if h.type == "Superseded":
        return f"superseded by note {f.get('successor_id')}: valid until {_when(f.get('valid_to'))}"
    if h.type in ("Linked", "Unlinked"):
        return f"{h.type.lower()} {_links(f) or 'links'}"
    if h.type == "Forgotten":
        if f.get("reason") == "legal_hold":
            return f"put under legal hold by {f.get('requested_by')}"
        digest = str(f.get("content_hmac") or "none")[:16]
        return f"forgotten (tombstone) by {f.get('requested_by')}; content erased, HMAC {digest}…"
    if h.type == "HoldReleased":
        return f"legal hold released by {f.get('requested_by')}"
    if h.type == "Repointed":
        return "file moved" if forgotten else f"file moved from {f.get('from_path')} to {f.get('to_path')}"
    if h.type == "Reembedded":
        return f"re-embedded with {f.get('embedder_id')} ({f.get('dim')} dimensions)"
    if h.type in ("BlockWritten", "BlockAppended"):
        return "working block " + ("written" if h.type == "BlockWritten" else "appended to") + text
    shown = [k for k in f if k not in ("cause", "content", "context", "keywords", "embedding", "text", "decision")]
    return f"{h.type}: " + ", ".join(shown)


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One event on a note's lineage: ``recorded`` (the event's time), ``valid`` (the
    window the event gives the note, in words, or ``''``), ``note_id`` (``current``: the
    note asked for), ``type``, ``words``, ``reason`` (the decision in words) and
    ``cause`` (in words)."""

    recorded: datetime
    valid: str
    note_id: str
    current: bool
    type: str
    words: str
    reason: str | None
    cause: str | None


def timeline(lin: Lineage, history: dict[str, list[HistoryEntry]], forgotten: set[str]) -> list[TimelineRow]:
    """The events of every note of a lineage chain, oldest first (``forgotten``: ids
    whose content is gone; their events never show content)."""
    rows = []
    for nid, entries in history.items():
        for h in entries:
            f = h.fields
            valid = validity(f.get("valid_from"), f.get("valid_to")) if (
                "valid_from" in f or "valid_to" in f) else ""
            if h.type == "Superseded":
                valid = f"closed at {_when(f.get('valid_to'))}"
            rows.append(TimelineRow(recorded=h.timestamp, valid=valid, note_id=nid, current=nid == lin.id,
                                    type=h.type, words=event_words(h, nid in forgotten),
                                    reason=decision_words(f.get("decision")), cause=cause_words(h.cause)))
    return sorted(rows, key=lambda r: r.recorded)


# ---------------------------------------------------------------- the log
@dataclass(frozen=True, slots=True)
class LogPage:
    """One page of the log: ``entries``; ``last`` (position of the last row read, the
    ``after`` of the next page; ``None`` when the log ends there) and ``scanned`` (rows
    read to fill the page)."""

    entries: list[LogEntry] = field(default_factory=list)
    last: int | None = None
    scanned: int = 0


def log_page(fabric: Any, *, after: int = 0, tenant: str | None = None, types: frozenset[str] = frozenset(),
             until: datetime | None = None, limit: int = 50, scan: int = 5000) -> LogPage:
    """Up to ``limit`` decoded events after position ``after`` (exclusive) matching
    ``tenant`` (a failed row without scope is kept, as ``read_log`` does), ``types``
    (event class names; empty: all) and ``until`` (events up to that time); at most
    ``scan`` rows are read, so a rare filter answers in bounded time (then ``last`` says
    where to go on)."""
    out: list[LogEntry] = []
    scanned, last = 0, after
    rows: Iterator[LogEntry] = read_log(fabric, since=after, batch=min(500, max(limit * 2, 50)))
    try:
        for entry in rows:
            scanned += 1
            if until is not None and entry.timestamp is not None and entry.timestamp > until:
                return LogPage(out, None, scanned)
            last = entry.position
            if _keep(entry, tenant, types):
                out.append(entry)
            if len(out) >= limit or scanned >= scan:
                return LogPage(out, last, scanned)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    return LogPage(out, None, scanned)


def _keep(entry: LogEntry, tenant: str | None, types: frozenset[str]) -> bool:
    if tenant is not None and entry.tenant_id != tenant and not (
            entry.integrity == "failed" and entry.tenant_id is None):
        return False
    return not types or entry.type in types


def position_at(fabric: Any, when: datetime) -> int:
    """The position just before the first event at or after ``when`` (binary search over
    notification ids by the events' clear timestamps; ~log2(head) single-row reads), so
    ``log_page(after=position_at(...))`` starts there."""
    mapper = fabric.log.sealing_mapper
    with fabric.log.datastore.get_connection() as conn:
        cur = conn.cursor(row_factory=tuple_row, binary=True)
        row = cur.execute(sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {t}").format(
            t=sql.Identifier(EVENTS_TABLE))).fetchone()
        lo, hi = 0, int(row[0]) if row else 0
        probe = sql.SQL("SELECT notification_id, state FROM {t} WHERE notification_id > %s"
                        " ORDER BY notification_id LIMIT 1").format(t=sql.Identifier(EVENTS_TABLE))
        while lo < hi:  # invariant: every event at or before lo is older than when
            mid = (lo + hi) // 2
            found = cur.execute(probe, (mid,)).fetchone()
            if found is None:
                return lo
            try:
                stamp = plain_fields(mapper, bytes(found[1])).get("timestamp")
            except Exception:  # noqa: BLE001 - a changed row: step over it
                stamp = None
            if isinstance(stamp, datetime) and stamp >= when:
                hi = mid
            else:
                lo = int(found[0]) if stamp is not None else mid + 1
                lo = min(lo, hi)
    return lo


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The newest audit checkpoint: ``position``, ``digest`` (hex), ``created_at``,
    and ``checkpoints`` (how many there are); all ``None``/0 without one."""

    position: int | None = None
    digest: str | None = None
    created_at: datetime | None = None
    checkpoints: int = 0


def chain_head(fabric: Any) -> ChainHead:
    """The newest checkpoint of ``mf_audit_chain`` (none before the first ``audit``)."""
    with fabric.log.datastore.get_connection() as conn:
        cur = conn.cursor(row_factory=tuple_row)
        have = cur.execute("SELECT to_regclass(%s)", (CHAIN_TABLE,)).fetchone()
        if not have or have[0] is None:
            return ChainHead()
        row = cur.execute(
            f"SELECT position, encode(digest, 'hex'), created_at, (SELECT count(*) FROM {CHAIN_TABLE})"  # noqa: S608
            f" FROM {CHAIN_TABLE} ORDER BY position DESC LIMIT 1").fetchone()
    if row is None:
        return ChainHead()
    return ChainHead(position=int(row[0]), digest=str(row[1]), created_at=row[2], checkpoints=int(row[3]))


EVENT_TYPES = ("Remembered", "Folded", "Superseded", "Linked", "Unlinked", "Evolved", "Contributed",
               "Withdrawn", "Repointed", "BlockWritten", "BlockAppended", "Forgotten", "HoldReleased",
               "Reembedded")
"""The note event types the log filter offers (``memfabric.domain.note.Note``)."""
