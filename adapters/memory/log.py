"""The in-memory event log and the read models it keeps (the in-memory backend's
``EventLog``): stored domain events per aggregate in version order, a global
notification position, aggregates replayed with ``event.mutate``.

Protected fields (:data:`memfabric.domain.note.PROTECTED_FIELDS`) are kept apart per note
in a key-vault-like dict; :meth:`InMemoryEventLog.append` with a note in ``doomed``
empties its entry, and from then on its earlier events read those fields as the
PostgreSQL sealing mapper does (``adapters/crypto.py`` ``SealingMapper.decode_state``):
``keywords`` as ``[]``, ``embedding`` as ``None``, every other one as
:data:`~memfabric.domain.note.ERASED`, with the names listed in ``_erased``.

The read models are the projections of the one registry
(:func:`memfabric.projections.registry.default_projections`): at every append, each
registered projection's in-memory tables (:func:`~memfabric.projections.registry.memory_tables`:
the projection module's own pure row functions) get the rows of the aggregates it
accepts, in :attr:`InMemoryEventLog.tables` (table name → aggregate id → row, or list
of rows); projections served by an in-memory twin (ledger, principals, entities, note
versions) are kept by it.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from memfabric.adapters.memory import versions as memory_versions
from memfabric.adapters.embedders import HashEmbedder
from memfabric.adapters.memory.rows import Row, put, row_dict
from memfabric.domain import replay
from memfabric.domain.note import PROTECTED_FIELDS, Note
from memfabric.domain.note_fields import erased_value
from memfabric.domain.retention import RetentionConfig
from memfabric.projections import tables
from memfabric.projections.base import NoteProjection, accepted
from memfabric.projections.registry import MemoryTable, default_projections, memory_tables


@dataclass(frozen=True, slots=True)
class _Stored:
    """One stored event: its class, plain (unprotected) state, and whether it had
    protected fields (kept in the vault under ``(aggregate, version)``)."""

    cls: type[Any]
    state: dict[str, Any]
    sealed: bool
    position: int


class InMemoryEventLog:
    """The event log and the read models, in memory (see the module doc).

    ``lock`` guards every read and write of the shared state; a commit holds it
    for the whole append-and-project step, so readers never see half a commit."""

    def __init__(self, projections: Sequence[NoteProjection] | None = None) -> None:
        self.lock = threading.RLock()
        self.position = 0
        self.secret = os.urandom(32)
        self._events: dict[UUID, list[_Stored]] = {}
        self._vault: dict[UUID, dict[int, dict[str, Any]]] = {}
        self._contrib: dict[UUID, dict[tuple[UUID, int], Any]] = {}
        """Evolution patches by the note that contributed them (issue 15): shredded with it."""
        self.projections: list[NoteProjection] = list(
            default_projections(HashEmbedder()) if projections is None else projections)
        """The registered projections (their names and in-memory tables; default: every one)."""
        self._memory: list[tuple[NoteProjection, MemoryTable]] = memory_tables(self.projections)
        self.tables: dict[str, dict[UUID, Any]] = {t.table: {} for _, t in self._memory}
        """Table name → aggregate id → row (``Row``), or a list of rows for a ``many`` table."""
        self.retention_config: RetentionConfig = RetentionConfig()
        self.projectors: list[Callable[[Sequence[Any]], None]] = []
        """Issue 32: read models of other aggregates (the entity index), called at every
        append with the notes and other aggregates it saved, under :attr:`lock`."""
        self.version_rows: dict[UUID, list[Any]] = {}
        """Issue 31: each note's recorded versions (:mod:`memfabric.adapters.memory.versions`)."""
        self._scope_locks: dict[str, threading.Lock] = {}

    # ----------------------------------------------------- the read models' tables
    @property
    def recall_rows(self) -> dict[UUID, Row]:
        """``mf_recall_index`` rows by aggregate id."""
        return self.tables[tables.RECALL_INDEX]

    @property
    def consolidation_rows(self) -> dict[UUID, Row]:
        """``mf_consolidation`` rows by aggregate id."""
        return self.tables[tables.CONSOLIDATION_INDEX]

    @property
    def scope_rows(self) -> dict[UUID, Row]:
        """``mf_note_scope`` rows by aggregate id."""
        return self.tables[tables.NOTE_SCOPE]

    @property
    def retention_rows(self) -> dict[UUID, Row]:
        """Issue 30: ``mf_retention`` rows by aggregate id."""
        return self.tables[tables.RETENTION]

    @property
    def link_rows(self) -> dict[UUID, list[Row]]:
        """``mf_link_graph`` edges by source aggregate id."""
        return self.tables[tables.LINK_GRAPH]

    # ---------------------------------------------------------------- locks
    def scope_lock(self, key: str) -> threading.Lock:
        """The write lock of scope ``key`` (created on first use)."""
        with self.lock:
            found = self._scope_locks.get(key)
            if found is None:
                found = self._scope_locks[key] = threading.Lock()
            return found

    # ------------------------------------------------------------------ log
    def event_count(self) -> int:
        """Stored events, all aggregates."""
        with self.lock:
            return sum(len(v) for v in self._events.values())

    def aggregate_ids(self) -> list[UUID]:
        """Every aggregate with events (issue 14: the ledger lists its conversations)."""
        with self.lock:
            return list(self._events)

    def has(self, aggregate_id: UUID) -> bool:
        with self.lock:
            return aggregate_id in self._events

    def events(self, aggregate_id: UUID) -> list[Any]:
        """The aggregate's domain events in version order, decoded as the sealing mapper
        decodes them (protected fields erased once the note was shredded)."""
        with self.lock:
            stored = list(self._events.get(aggregate_id, []))
            vault = self._vault.get(aggregate_id)
            return [self._decode(aggregate_id, s, vault) for s in stored]

    def _decode(self, aggregate_id: UUID, stored: _Stored,
                vault: dict[int, dict[str, Any]] | None) -> Any:
        state = copy.deepcopy(stored.state)
        sealed_by = state.get("contributed")
        if isinstance(sealed_by, dict) and "sealed_by" in sealed_by:
            found = self._contrib.get(UUID(sealed_by["sealed_by"]), {}).get(
                (aggregate_id, int(state["originator_version"])))
            state["contributed"] = copy.deepcopy(found)
        if stored.sealed:
            version = int(state["originator_version"])
            protected = None if vault is None else vault.get(version)
            if protected is None:
                fields = [f for f in PROTECTED_FIELDS
                          if f in getattr(stored.cls, "__dataclass_fields__", {})]
                for f in fields:
                    state[f] = erased_value(f)
                state["_erased"] = fields
            else:
                state.update(copy.deepcopy(protected))
        event = object.__new__(stored.cls)
        object.__setattr__(event, "__dict__", state)
        return event

    def forgotten_scopes(self) -> list[tuple[str, str, str]]:
        """``(tenant, resource, thread)`` (``''`` when absent) of each forgotten note: an
        aggregate with a ``Forgotten`` event and no retention row (issue 27 counts)."""
        with self.lock:
            tombs = (next((s.state for s in reversed(stored) if s.cls is Note.Forgotten), None)
                     for aid, stored in self._events.items() if aid not in self.retention_rows)
            return [(t["tenant_id"], t.get("resource_id") or "", t.get("thread_id") or "")
                    for t in tombs if t is not None]

    def replay(self, aggregate_id: UUID) -> Note | None:
        """The aggregate replayed from its events (``None`` when absent)."""
        note: Any = None
        for event in self.events(aggregate_id):
            note = replay.step(event, note)
        return note if isinstance(note, Note) else None

    def append(self, events: Sequence[Any], notes: Sequence[Note], doomed: set[UUID],
               others: Sequence[Any] = ()) -> int:
        """Append ``events`` (protected fields to the vault), destroy the vault entries
        of ``doomed`` and update the read models from ``notes``; returns the last
        position (one atomic step under :attr:`lock`)."""
        with self.lock:
            for event in events:
                state = copy.deepcopy(dict(vars(event)))
                state.pop("_erased", None)
                aid: UUID = state["originator_id"]
                protected = {k: state.pop(k) for k in PROTECTED_FIELDS if k in state}
                if state.get("contributed") is not None and state.get("source"):
                    source = UUID(state["source"])
                    self._contrib.setdefault(source, {})[(aid, int(state["originator_version"]))] = (
                        state["contributed"])
                    state["contributed"] = {"sealed_by": str(source)}
                if protected:
                    self._vault.setdefault(aid, {})[int(state["originator_version"])] = protected
                self.position += 1
                self._events.setdefault(aid, []).append(
                    _Stored(type(event), state, bool(protected), self.position))
            for aid in doomed:
                self._vault.pop(aid, None)
                self._contrib.pop(aid, None)
            self._project_all([*notes, *others])
            for projector in self.projectors:
                projector([*notes, *others])
            memory_versions.record(self, list(dict.fromkeys(
                [n.id for n in notes if isinstance(n, Note)] + [a for a in doomed if a in self.version_rows])), put)
            return self.position

    def _project(self, note: Note) -> None:
        """The in-memory tables' rows of one note (:meth:`_project_all`)."""
        self._project_all([note])

    def _project_all(self, aggregates: Sequence[Any]) -> None:
        """Each registered projection's in-memory tables, for the aggregates it accepts."""
        for projection, table in self._memory:
            rows = self.tables[table.table]
            for aggregate in accepted(projection, aggregates):
                row = table.row(aggregate)
                if not table.many:
                    put(rows, aggregate.id, table.columns, row)
                elif row:
                    rows[aggregate.id] = [row_dict(table.columns, r) for r in row]
                else:
                    rows.pop(aggregate.id, None)
