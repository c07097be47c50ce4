"""The in-memory backend's read side (the ``NoteStore`` port) on the rows of
:class:`memfabric.adapters.memory.log.InMemoryEventLog`: recall
(:mod:`memfabric.adapters.memory.recall`), listing, counts, scope walks and loads,
each the Python twin of the SQL query its docstring names.

``log`` is an ``InMemoryEventLog`` or anything with its ``lock`` and row tables (the
note versions' store reads the rows recorded at ``known_at``,
:mod:`memfabric.adapters.memory.versions`).
"""

from __future__ import annotations

import copy
import hmac
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

from memfabric.adapters.memory import recall as memory_recall
from memfabric.adapters.memory.rows import blocks_of, lists, resolve_note, returned
from memfabric.domain.note import Note
from memfabric.domain.ports import Candidate, ListQuery, NoteFilter, NoteRef
from memfabric.domain.results import NoteCounts
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry


class InMemoryNoteStore:
    """The read side (``NoteStore`` port) on the in-memory read models."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def recall(
        self, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
        kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
        filters: NoteFilter | None = None,
        expand: int = 0,
    ) -> list[Candidate]:
        """Candidates like ``recall_index.select_candidates``
        (:func:`memfabric.adapters.memory.recall.candidates`): the top ``limit`` by
        cosine and the top ``limit`` by the lexical score, every filter applied first;
        ``expand``: plus that many linked notes (issue 15)."""
        return memory_recall.candidates(
            self.log, scope, embedding=embedding, query=query, kinds=kinds, as_of=as_of, limit=limit,
            require_consent=require_consent, filters=filters, expand=expand)

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        """Like ``recall_index.select_links``."""
        return memory_recall.hit_links(self.log, scope, aggregate_ids, filters)

    def hits(self, scope: Scope, aggregate_ids: Sequence[UUID], filters: NoteFilter | None = None,
             complete: Sequence[UUID] = ()) -> tuple[dict[UUID, list[dict[str, Any]]], dict[UUID, dict[str, Any]]]:
        """Like ``recall_hits.select_hits``; this store's candidates are never partial
        (``complete`` is empty), so no row is read."""
        return self.hit_links(scope, aggregate_ids, filters), {}

    def _listed(self, query: ListQuery) -> list[dict[str, Any]]:
        with self.log.lock:
            return [copy.deepcopy(r) for r in self.log.recall_rows.values() if lists(r, query)]

    def list_notes(
        self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int,
    ) -> list[Candidate]:
        """Like ``recall_index.select_page``: ordered by ``(ingested_at, aggregate_id)``."""
        rows = sorted(self._listed(query), key=lambda r: (r["ingested_at"], r["aggregate_id"]))
        if after is not None:
            rows = [r for r in rows if (r["ingested_at"], r["aggregate_id"]) > after]
        return [Candidate(aggregate_id=r["aggregate_id"], note_id=r["note_id"], similarity=None,
                          lexical=None, vector_rank=None, lexical_rank=None, fields=returned(r))
                for r in rows[:limit]]

    def count_notes(self, query: ListQuery) -> int:
        return len(self._listed(query))

    def scopes_with(self, *, tenant_id: str | None, tags: Sequence[str]) -> list[Scope]:
        with self.log.lock:
            keys = {(r["tenant_id"], r["resource_id"], r["thread_id"])
                    for r in self.log.recall_rows.values()
                    if (tenant_id is None or r["tenant_id"] == tenant_id)
                    and all(t in r["tags"] for t in tags)}
        return [Scope(tenant_id=t, resource_id=r or None, thread_id=th or None)
                for t, r, th in sorted(keys)]

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        return blocks_of(self.log, scope)

    def _prefix(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[dict[str, Any]]:
        with self.log.lock:
            return [dict(r) for r in self.log.scope_rows.values()
                    if r["tenant_id"] == tenant_id
                    and (resource_id is None or r["resource_id"] == resource_id)
                    and (thread_id is None or r["thread_id"] == thread_id)]

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        def key(r: dict[str, Any]) -> tuple[str, str, UUID]:
            return (r["resource_id"], r["thread_id"], r["aggregate_id"])

        rows = sorted(self._prefix(tenant_id, resource_id, thread_id), key=key)
        if after is not None:
            start = (after.scope.resource_id or "", after.scope.thread_id or "", after.aggregate_id)
            rows = [r for r in rows if key(r) > start]
        return [
            NoteRef(aggregate_id=r["aggregate_id"],
                    scope=Scope(tenant_id=r["tenant_id"], resource_id=r["resource_id"] or None,
                                thread_id=r["thread_id"] or None),
                    note_id=r["note_id"], held=bool(r["held"]))
            for r in rows[:limit]
        ]

    def counts_in_scope(self, tenant_id: str, resource_id: str | None,
                        thread_id: str | None) -> NoteCounts:
        """Like ``counts_pg.scope_counts``: retention rows by state, and the notes with a
        ``Forgotten`` event and no row (:meth:`InMemoryEventLog.forgotten_scopes`)."""
        def within(t: str, r: str, th: str) -> bool:
            return t == tenant_id and resource_id in (None, r) and thread_id in (None, th)

        with self.log.lock:
            rows = [row for row in self.log.retention_rows.values()
                    if within(row["tenant_id"], row["resource_id"], row["thread_id"])]
            gone = sum(1 for key in self.log.forgotten_scopes() if within(*key))
        held = sum(1 for r in rows if r["held"])
        superseded = sum(1 for r in rows if r["superseded"] and not r["held"])
        return NoteCounts(live=len(rows) - held - superseded, superseded=superseded, held=held,
                          forgotten=gone)

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Like ``note_scope.resolve``: homes of the notes ``note_id`` seen from ``scope``."""
        return resolve_note(self.log, scope, note_id)

    def load(self, aggregate_id: UUID) -> Note | None:
        found: Note | None = self.log.replay(aggregate_id)
        return found

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        yield from self.log.events(aggregate_id)

    def content_hmac(self, text: str) -> str:
        return hmac.digest(self.log.secret, text.encode(), "sha256").hex()

    def await_position(self, position: int) -> None:
        """Projections are updated with the commit: nothing to wait for."""
