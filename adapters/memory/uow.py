"""The in-memory backend's unit of work (the ``UnitOfWork`` port and the ledger's
``LedgerUnitOfWork``): a ``threading.Lock`` per scope key, taken in sorted order;
reads see committed state plus the aggregates it added; :meth:`InMemoryUnitOfWork.commit`
appends the events and updates the read models atomically
(:meth:`memfabric.adapters.memory.log.InMemoryEventLog.append`); leaving without commit
discards everything. Its write-side reads are the Python twins of
``consolidation_index.select_neighbours`` / ``select_term_postings`` and
``note_scope.resolve`` / ``ids_by_path``.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Sequence
from datetime import datetime
from types import TracebackType
from typing import Any
from uuid import UUID

from memfabric.adapters.memory.log import InMemoryEventLog
from memfabric.adapters.memory.rows import blocks_of, cosine, home, resolve_note
from memfabric.domain import link_terms, replay, visibility
from memfabric.domain.consolidation import Neighbour, NeighbourQuery
from memfabric.domain.errors import FabricError
from memfabric.domain.link_terms import TermPostings
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import shreds_keys
from memfabric.domain.working import BlockEntry
from memfabric.projections import consolidation_index


def _in_group(row: dict[str, Any], scope: Scope, vis: visibility.Visibility) -> bool:
    """``consolidation_index._REACH``: the row is in the consolidation group of a write
    of ``vis`` from ``scope`` (issue 16)."""
    return visibility.meets(scope, vis, home(row), visibility.of_consent({"visibility": row["visibility"]}))


def _current(row: dict[str, Any], scope: Scope, q: NeighbourQuery, now: datetime) -> bool:
    return (_in_group(row, scope, q.visibility) and row["kind"] == q.kind
            and (row["valid_to"] is None or row["valid_to"] > now))


def _in_scope_of_kind(row: dict[str, Any], scope: Scope, kind: str, now: datetime) -> bool:
    """A current row of exactly ``scope`` and ``kind`` (the shared-term linker's notes)."""
    t, r, th = scope.sql()
    return (row["tenant_id"] == t and row["resource_id"] == r and row["thread_id"] == th
            and row["kind"] == kind and (row["valid_to"] is None or row["valid_to"] > now))


def _same_inferred(newest: list[dict[str, Any]], q: NeighbourQuery, limit: int) -> list[dict[str, Any]]:
    """Like the ``inferred`` lookup of ``consolidation_index.select_neighbours``: current
    subject-less notes with the query's inferred key (a from-to key: the same entity)."""
    ikey, ient = consolidation_index.inferred_key_of(q), consolidation_index.inferred_entity_of(q)
    if ikey is None and ient is None:
        return []
    found = [r for r in newest if r["subject"] is None and r["inferred_key"] is not None
             and (r["inferred_key"] == ikey
                  or (ient is not None and r["inferred_entity"] == ient))]
    return found[:limit]


class InMemoryUnitOfWork:
    """One write transaction in memory (the ``UnitOfWork`` port; see the module doc)."""

    def __init__(self, log: InMemoryEventLog, scopes: Sequence[Scope]) -> None:
        self._log = log
        self._keys = sorted({s.key for s in scopes})
        self._held: list[threading.Lock] = []
        self._events: list[Any] = []
        self._aggregates: dict[UUID, Note] = {}
        self._others: dict[UUID, Any] = {}
        self._doomed: set[UUID] = set()
        self._open = False
        self._committed = False
        self._position = 0

    def __enter__(self) -> InMemoryUnitOfWork:
        try:
            for key in self._keys:
                lock = self._log.scope_lock(key)
                lock.acquire()
                self._held.append(lock)
        except BaseException:
            self._release()
            raise
        self._open = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._open = False
        if not self._committed:
            self._events.clear()
            self._aggregates.clear()
            self._others.clear()
            self._doomed.clear()
        self._release()

    def _release(self) -> None:
        while self._held:
            self._held.pop().release()

    def _check(self) -> None:
        if not self._open:
            raise FabricError("the unit of work is not open")

    @property
    def position(self) -> int:
        return self._position

    # ------------------------------------------------------------------ reads
    def load(self, scope: Scope, note_id: str) -> Note | None:
        found = self.load_ids([note_uuid(scope, note_id)])
        return found[0] if found else None

    def load_unreadable(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        return self.load_ids(aggregate_ids)  # no keys in memory: nothing can be unreadable

    def load_ids(self, aggregate_ids: Sequence[UUID], *, fresh: bool = False) -> list[Note]:
        self._check()  # (always replayed: ``fresh`` changes nothing here)
        out: list[Note] = []
        for aid in aggregate_ids:
            note = self._aggregates.get(aid) or self._log.replay(aid)
            if note is not None:
                out.append(note)
        return out

    def exists(self, scope: Scope, note_id: str) -> bool:
        self._check()
        aid = note_uuid(scope, note_id)
        return aid in self._aggregates or self._log.has(aid)

    def prefetch_neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                            now: datetime, per_query: int = 3, near: bool = False) -> None:
        """Nothing to send ahead in memory."""

    def neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                   now: datetime, per_query: int = 3, near: bool = False) -> list[list[Neighbour]]:
        """Like ``consolidation_index.select_neighbours`` (``per_query`` per lookup, the
        nearest vectors only with ``near``) on the committed consolidation rows."""
        self._check()
        with self._log.lock:
            rows = list(self._log.consolidation_rows.values())
        out: list[list[Neighbour]] = []
        for q in queries:
            mine = [r for r in rows if _current(r, scope, q, now)]
            newest = sorted(mine, key=lambda r: r["ingested_at"], reverse=True)
            picked: list[dict[str, Any]]
            if q.kind == "file":
                picked = [r for r in newest if r["path"] == q.path][:per_query]
            elif q.subject is not None:
                picked = [r for r in newest if r["subject"] == q.subject][:per_query]
            else:
                plain = [r for r in mine if r["subject"] is None]
                exact = [r for r in newest if r["subject"] is None and r["token_hash"] == q.token_hash][:1]
                nearest = sorted(plain, key=lambda r: -cosine(r["embedding"], q.embedding))[:per_query] if near else []
                picked = exact + nearest + _same_inferred(newest, q, per_query * 3)
            out.append([
                Neighbour(r["note_id"], cosine(r["embedding"], q.embedding), r["token_hash"],
                          r["path"], r["subject"], r["valid_from"], r["valid_to"],
                          consolidation_index.key_of_row(r), home(r),
                          visibility.of_consent({"visibility": r["visibility"]}))
                for r in picked
            ])
        return out

    def term_postings(self, scope: Scope, kind: str, terms: Sequence[str], *,
                      now: datetime, latest: bool = False) -> TermPostings:
        """Like ``consolidation_index.select_term_postings`` on the committed rows."""
        self._check()
        with self._log.lock:
            rows = [r for r in self._log.consolidation_rows.values() if _in_scope_of_kind(r, scope, kind, now)]
        newest = sorted(rows, key=lambda r: r["note_id"])
        newest.sort(key=lambda r: r["ingested_at"], reverse=True)  # ties: note id ascending
        ids: dict[str, list[str]] = {}
        at: dict[str, float] = {}
        wanted = set(terms)
        for r in newest:
            for term in set(r.get("link_terms") or ()) & wanted:
                got = ids.setdefault(term, [])
                if len(got) <= link_terms.DF_CAP:
                    got.append(r["note_id"])
                    at[r["note_id"]] = r["ingested_at"].timestamp()
        return TermPostings(min(len(rows), link_terms.N_CAP), ids, at,
                            newest[0]["note_id"] if newest and latest else None)

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Like :meth:`InMemoryNoteStore.resolve` (the committed note-scope rows)."""
        self._check()
        return resolve_note(self._log, scope, note_id)

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        self._check()
        t, r, th = scope.sql()
        with self._log.lock:
            return sorted(
                row["note_id"] for row in self._log.scope_rows.values()
                if (row["tenant_id"], row["resource_id"], row["thread_id"]) == (t, r, th)
                and row["path"] == path)

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        self._check()
        return blocks_of(self._log, scope)

    def content_hmac(self, text: str) -> str:
        return hmac.digest(self._log.secret, text.encode(), "sha256").hex()

    # ----------------------------------------------------------------- writes
    def add(self, note: Note) -> None:
        """Hold ``note``'s pending events; a shredding one (a tombstone) dooms its keys."""
        self._collect(note)
        self._aggregates[note.id] = note

    def _collect(self, aggregate: Any) -> None:
        self._check()
        events = aggregate.collect_events()
        self._events.extend(events)
        if shreds_keys(events):
            self._doomed.add(aggregate.id)

    # ------------------- issue 14: other aggregates (the ledger), saved, not projected
    def load_aggregate(self, aggregate_id: UUID) -> Any:
        self._check()
        held = self._others.get(aggregate_id)
        if held is not None:
            return held
        found: Any = None
        for event in self._log.events(aggregate_id):
            found = replay.step(event, found)
        return found

    def load_ledger_head(self, aggregate_id: UUID, scope: Scope) -> Any:
        return self.load_aggregate(aggregate_id)  # in memory a replay is the head

    def add_aggregate(self, aggregate: Any) -> None:
        self._collect(aggregate)
        self._others[aggregate.id] = aggregate

    def commit(self) -> None:
        self._check()
        if self._events or self._doomed:
            self._position = self._log.append(self._events, list(self._aggregates.values()),
                                              self._doomed, list(self._others.values()))
        self._committed = True
