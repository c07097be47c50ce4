"""The conversation ledger on the in-memory reference backend (issue 14).

``InMemoryLedgerStore`` answers the ``LedgerStore`` port by replaying the
``Conversation`` aggregate from the in-memory log (the reference semantics of
:mod:`memfabric.projections.ledger`, without tables): live entries by position,
search by the same stemmed terms and IDF-weighted coverage, observations, the conversations of a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from memfabric.domain import replay
from memfabric.domain.ledger import Conversation, Entry
from memfabric.domain.search_terms import coverage, search_terms, term_weights, word_terms as terms


def _row(e: Entry) -> dict[str, Any]:
    return {"position": e.position, "entry_id": e.entry_id, "role": e.role, "text": e.text,
            "at": e.timestamp, "parent_id": e.parent_id, "branch": e.branch}


class InMemoryLedgerStore:
    """``LedgerStore`` on an ``InMemoryEventLog`` (see the module doc)."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def load(self, aggregate_id: UUID) -> Conversation | None:
        conv: Any = None
        for event in self.log.events(aggregate_id):
            conv = replay.step(event, conv)
        return conv if isinstance(conv, Conversation) else None

    def _live(self, aggregate_id: UUID) -> list[Entry]:
        conv = self.load(aggregate_id)
        return [] if conv is None else conv.live_entries()

    def entries(self, aggregate_id: UUID, *, after: int | None, before: int | None,
                limit: int, descending: bool) -> list[dict[str, Any]]:
        rows = [e for e in self._live(aggregate_id)
                if (after is None or e.position > after) and (before is None or e.position < before)]
        rows.sort(key=lambda e: e.position, reverse=descending)
        return [_row(e) for e in rows[:limit]]

    def window(self, aggregate_id: UUID, position: int, limit: int, *,
               backward: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if backward:
            page = self.entries(aggregate_id, after=None, before=position + 1, limit=limit, descending=True)
            beyond = self.entries(aggregate_id, after=position, before=None, limit=1, descending=False)
        else:
            page = self.entries(aggregate_id, after=position - 1, before=None, limit=limit, descending=False)
            beyond = self.entries(aggregate_id, after=None, before=position, limit=1, descending=True)
        return page, beyond

    def position(self, aggregate_id: UUID, entry_id: str) -> int | None:
        return next((e.position for e in self._live(aggregate_id) if e.entry_id == entry_id), None)

    def search(self, aggregate_id: UUID, terms: Sequence[str],
               top_k: int) -> tuple[list[dict[str, Any]], int]:
        conv = self.load(aggregate_id)
        if conv is None or not terms:
            return [], 0
        wanted = set(terms)
        held = [(e, set(search_terms(e.text))) for e in conv.live_entries()]
        held = [(e, have) for e, have in held if wanted & have]
        df = {t: sum(1 for _, have in held if t in have) for t in terms}
        weights = term_weights(terms, df, conv.last_position - conv.first_position + 1)
        scored = sorted(((coverage(terms, have, weights), e) for e, have in held),
                        key=lambda s: (-s[0], -s[1].position))
        return [{**_row(e), "score": score} for score, e in scored[:top_k]], len(held)

    def observation(self, aggregate_id: UUID, observation_id: str) -> dict[str, Any] | None:
        conv = self.load(aggregate_id)
        o = None if conv is None else conv.observations.get(observation_id)
        if o is None:
            return None
        return {"observation_id": o.id, "text": o.text, "source_entry_ids": list(o.source_ids),
                "created_at": o.created_at}

    def search_observations(self, aggregate_ids: Sequence[UUID], words: Sequence[str],
                            limit: int, *, until: datetime | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for aid in aggregate_ids:
            conv = self.load(aid)
            for o in ([] if conv is None else conv.observations.values()):
                if until is not None and o.created_at > until:
                    continue
                have = set(terms(o.text))
                rank = sum(1 for w in words if w in have) / max(len(words), 1)
                if rank > 0:
                    out.append({"aggregate_id": aid, "observation_id": o.id, "text": o.text,
                                "source_entry_ids": list(o.source_ids),
                                "created_at": o.created_at, "rank": rank})
        out.sort(key=lambda r: (-float(r["rank"]), -r["created_at"].timestamp()))
        return out[:limit]

    def threads(self, tenant_id: str, resource_id: str | None,
                thread_id: str | None) -> list[tuple[UUID, str, str | None, str]]:
        out = []
        for aid in self.log.aggregate_ids():
            conv = self.load(aid)
            if conv is None or conv.tenant_id != tenant_id:
                continue
            if resource_id is not None and (conv.resource_id or "") != resource_id:
                continue
            if thread_id is not None and conv.thread_id != thread_id:
                continue
            if conv.entries or conv.observations or conv.reflections or conv.work_scopes:
                out.append((aid, conv.tenant_id, conv.resource_id, conv.thread_id))
        return sorted(out)


    def due_threads(self, tenant_id: str, before: datetime, *, after: UUID | None,
                    limit: int) -> list[tuple[UUID, str | None, str]]:
        """Like ``ledger.select_due_threads``: live conversations last written at or
        before ``before`` (:func:`memfabric.domain.sweep_ledger.last_write`)."""
        from memfabric.domain.sweep_ledger import last_write  # noqa: PLC0415
        out = []
        for aid in sorted(self.log.aggregate_ids()):
            conv = self.load(aid)
            if (conv is None or conv.tenant_id != tenant_id or (after is not None and aid <= after)
                    or not (conv.entries or conv.observations or conv.reflections or conv.work_scopes)):
                continue
            wrote = last_write(conv)
            if wrote is None or wrote <= before:
                out.append((aid, conv.resource_id, conv.thread_id))
        return out[:limit]

    def live_tenants(self, *, after: str | None) -> list[str]:
        """The tenants with a live conversation, sorted, after ``after``."""
        found = {conv.tenant_id for conv in map(self.load, self.log.aggregate_ids())
                 if conv is not None and (conv.entries or conv.observations or conv.reflections or conv.work_scopes)}
        return sorted(t for t in found if after is None or t > after)
