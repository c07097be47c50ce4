"""Issue 30 in memory: the ``RetentionStore`` port on the in-memory log's
``mf_retention`` rows, :func:`due` being the twin of ``retention_index.due_sql``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from memfabric.adapters.memory.log import InMemoryEventLog
from memfabric.adapters.memory.rows import home
from memfabric.domain.note import Note
from memfabric.domain.ports import DueRef, UnitOfWork
from memfabric.domain.retention import DECAY_KINDS, ERASABLE, RetentionConfig, Windows


class InMemoryRetentionStore:
    """``RetentionStore`` on the in-memory log: ``retention_index.select_due`` in Python."""

    def __init__(self, log: InMemoryEventLog) -> None:
        self.log = log

    def config(self, *, cached: bool = False) -> RetentionConfig:
        return self.log.retention_config

    def classes(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, str]:
        with self.log.lock:
            rows = self.log.retention_rows
            return {a: str(rows[a]["retention"]) for a in aggregate_ids if a in rows}

    def record(self, config: RetentionConfig) -> None:
        self.log.retention_config = config

    def tenants(self, *, after: str | None) -> list[str]:
        with self.log.lock:
            found = {r["tenant_id"] for r in self.log.retention_rows.values()}
        return sorted(t for t in found if after is None or t > after)

    def due(self, tenant_id: str, windows: Windows, now: datetime, *, after: UUID | None,
            limit: int) -> list[DueRef]:
        with self.log.lock:
            rows = [dict(r) for r in self.log.retention_rows.values()
                    if r["tenant_id"] == tenant_id and (after is None or r["aggregate_id"] > after)
                    and due(r, windows, now)]
        rows.sort(key=lambda r: r["aggregate_id"])
        return [DueRef(aggregate_id=r["aggregate_id"], scope=home(r), note_id=r["note_id"],
                       visibility=r["visibility"]) for r in rows[:limit]]


    def replay(self, tenant_id: str, aggregate_ids: Sequence[UUID]) -> list[Note] | None:
        """``None``: the in-memory log checks no versions on append, so a sweep replays
        its notes in the unit of work (under the scope locks)."""
        return None

    def prepare_erasure(self, uow: UnitOfWork) -> None:
        """Nothing to set in memory."""


def due(row: dict[str, Any], windows: Windows, now: datetime) -> bool:
    """``retention_index.due_sql`` in Python."""
    if (not row["expired"] and not row["superseded"] and row["valid_to"] is not None
            and row["valid_to"] <= now):
        return True
    span = windows.window(row["retention"])
    if (span is not None and row["written_at"] <= now - span
            and (row["retention"] in ERASABLE or not row["expired"])):
        return True
    decay = windows.decay
    if decay is None or row["held"] or row["superseded"] or row["expired"] or row["kind"] not in DECAY_KINDS:
        return False
    idle = now - decay.after
    return (row["importance"] > decay.floor and row["written_at"] <= idle
            and (row["decayed_at"] is None or row["decayed_at"] <= idle))
