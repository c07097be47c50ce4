"""The conversation ledger: one ``Conversation`` aggregate per thread scope (issue 14).

Event classes are stored by topic (``memfabric.domain.ledger:Conversation.EntryAppended``
...): this module path and the class names are part of the log format, never rename them.

Every ``text`` field (entries, observations, reflections) is sealed with the
conversation's own data key by the storage mapper (``text`` is in
:data:`memfabric.domain.note.PROTECTED_FIELDS`), so :meth:`Conversation.erase` (the
``Erased`` tombstone plus destroying the key) shreds the whole conversation while the
log keeps the tombstones. A conversation can be written again after an erasure (the
mapper makes a fresh key); entry positions keep increasing across erasures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

from memfabric.domain.errors import FabricError
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import Shredding

_CONVERSATION_NAMESPACE = uuid5(NAMESPACE_URL, "https://memfabric.dev/conversation")


class NoLedgerError(FabricError):
    """The handle has no thread: only a thread scope has a conversation ledger."""


class LedgerError(FabricError):
    """A ledger command refers to something the conversation does not hold (or no
    longer: an unknown entry, observation, reflection or work scope, a closed scope)."""


class LedgerAbortedError(FabricError):
    """A ledger query was aborted through its ``signal``."""


def conversation_uuid(scope: Scope) -> UUID:
    """Aggregate id of the conversation of a thread scope (UUIDv5 of
    ``conversation#{scope.key}``)."""
    if scope.thread_id is None:
        raise NoLedgerError(f"scope {scope.key!r} has no thread, so no conversation ledger")
    return uuid5(_CONVERSATION_NAMESPACE, f"conversation#{scope.key}")


@dataclass(slots=True)
class Entry:
    """One entry of the conversation (state of the aggregate)."""

    entry_id: str
    position: int
    role: str
    text: str
    timestamp: datetime
    parent_id: str | None = None
    branch: str | None = None
    retracted: bool = False


@dataclass(slots=True)
class Derived:
    """An observation or a reflection (state of the aggregate)."""

    id: str
    text: str
    source_ids: list[str]
    created_at: datetime


@dataclass(slots=True)
class WorkScope:
    scope_id: str
    name: str
    opened_at: datetime
    closed_at: datetime | None = None

    @property
    def closed(self) -> bool:
        return self.closed_at is not None


class Conversation(Aggregate):
    """The ledger of one thread: entries, observations, reflections, work scopes."""

    class Started(Aggregate.Created):
        tenant_id: str
        resource_id: str | None
        thread_id: str

    class EntryAppended(Aggregate.Event):
        entry_id: str
        role: str
        text: str
        at: datetime
        parent_id: str | None = None
        branch: str | None = None

        def apply(self, c: Conversation) -> None:
            c.last_position += 1
            e = Entry(self.entry_id, c.last_position, self.role, self.text, self.at,
                      self.parent_id, self.branch)
            c.entries.append(e)
            c.by_id[e.entry_id] = e

    class Observed(Aggregate.Event):
        observation_id: str
        text: str
        source_entry_ids: list[str]

        def apply(self, c: Conversation) -> None:
            c.observations[self.observation_id] = Derived(
                self.observation_id, self.text, list(self.source_entry_ids), self.timestamp)

    class Reflected(Aggregate.Event):
        reflection_id: str
        text: str
        source_ids: list[str]

        def apply(self, c: Conversation) -> None:
            c.reflections[self.reflection_id] = Derived(
                self.reflection_id, self.text, list(self.source_ids), self.timestamp)

    class WorkScopeOpened(Aggregate.Event):
        scope_id: str
        name: str

        def apply(self, c: Conversation) -> None:
            c.work_scopes[self.scope_id] = WorkScope(self.scope_id, self.name, self.timestamp)

    class WorkScopeClosed(Aggregate.Event):
        scope_id: str

        def apply(self, c: Conversation) -> None:
            c.work_scopes[self.scope_id].closed_at = self.timestamp

    class ReflectionBound(Aggregate.Event):
        reflection_id: str
        scope_id: str

        def apply(self, c: Conversation) -> None:
            c.bindings[self.reflection_id] = self.scope_id

    class EntryRetracted(Aggregate.Event):
        entry_id: str

        def apply(self, c: Conversation) -> None:
            e = c.by_id.get(self.entry_id)
            if e is not None:
                e.retracted = True
            c.retracted_ids.append(self.entry_id)

    class Erased(Aggregate.Event, Shredding):
        """The tombstone: every text of the conversation is shredded with its key."""

        requested_by: str
        entries: int
        observations: int
        reflections: int
        cause: str

        def apply(self, c: Conversation) -> None:
            c.first_position = c.last_position + 1
            c.entries = []
            c.by_id = {}
            c.observations = {}
            c.reflections = {}
            c.work_scopes = {}
            c.bindings = {}
            c.retracted_ids = []
            c.erasures += 1
            c.erased_at = self.timestamp

    def __init__(self, *, tenant_id: str, resource_id: str | None, thread_id: str) -> None:
        self.tenant_id = tenant_id
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.last_position = 0
        self.first_position = 1
        self.entries: list[Entry] = []
        self.by_id: dict[str, Entry] = {}
        self.observations: dict[str, Derived] = {}
        self.reflections: dict[str, Derived] = {}
        self.work_scopes: dict[str, WorkScope] = {}
        self.bindings: dict[str, str] = {}
        self.erasures = 0
        self.erased_at: datetime | None = None
        self.retracted_ids: list[str] = []
        self.partial = False
        """True for a :meth:`head`: only appends and retractions are allowed, and only
        the new entries are in ``entries`` (the projection then syncs nothing else)."""
        self.lookup: Callable[[str], bool] | None = None
        """A head's check that a live entry exists (the ledger projection)."""

    @classmethod
    def head(cls, *, aggregate_id: UUID, version: int, scope: Scope, last_position: int,
             first_position: int, erasures: int, at: datetime,
             lookup: Callable[[str], bool]) -> Conversation:
        """A write head of a long conversation: its version and positions without its
        history (read from the log's index, not replayed), so an append costs the same
        at entry 100,000 as at entry 1. Accepts ``append`` and ``retract`` only."""
        if scope.thread_id is None:
            raise NoLedgerError(f"scope {scope.key!r} has no thread")
        c = object.__new__(cls)
        c._id = aggregate_id  # noqa: SLF001 - eventsourcing's base state, as __base_init__ sets it
        c._version = version  # noqa: SLF001
        c._created_on = at  # noqa: SLF001
        c._modified_on = at  # noqa: SLF001
        c._pending_events = []  # noqa: SLF001
        cls.__init__(c, tenant_id=scope.tenant_id, resource_id=scope.resource_id,
                     thread_id=scope.thread_id)
        c.last_position, c.first_position, c.erasures = last_position, first_position, erasures
        c.partial, c.lookup = True, lookup
        return c

    def _exists(self, entry_id: str) -> bool:
        e = self.by_id.get(entry_id)
        if e is not None:
            return not e.retracted
        return self.lookup is not None and entry_id not in self.retracted_ids and self.lookup(entry_id)

    def _full(self) -> None:
        if self.partial:
            raise LedgerError("internal: a conversation head only appends and retracts")

    # ----------------------------------------------------------------- commands
    @classmethod
    def start(cls, scope: Scope) -> Conversation:
        if scope.thread_id is None:
            raise NoLedgerError(f"scope {scope.key!r} has no thread")
        return cls._create(cls.Started, id=conversation_uuid(scope), tenant_id=scope.tenant_id,
                           resource_id=scope.resource_id, thread_id=scope.thread_id)

    @property
    def scope(self) -> Scope:
        return Scope(tenant_id=self.tenant_id, resource_id=self.resource_id,
                     thread_id=self.thread_id)

    def append(self, *, entry_id: str, role: str, text: str, at: datetime,
               parent_id: str | None = None, branch: str | None = None) -> Entry:
        if entry_id in self.by_id:
            raise LedgerError(f"entry {entry_id} already exists")
        if parent_id is not None and not self._exists(parent_id):
            raise LedgerError(f"unknown parent entry {parent_id}")
        self.trigger_event(self.EntryAppended, entry_id=entry_id, role=role, text=text, at=at,
                           parent_id=parent_id, branch=branch)
        return self.by_id[entry_id]

    def _live_entry(self, entry_id: str) -> None:
        if not self._exists(entry_id):
            raise LedgerError(f"unknown entry {entry_id}")

    def observe(self, *, observation_id: str, text: str, source_entry_ids: list[str]) -> None:
        self._full()
        for eid in source_entry_ids:
            self._live_entry(eid)
        self.trigger_event(self.Observed, observation_id=observation_id, text=text,
                           source_entry_ids=list(source_entry_ids))

    def reflect(self, *, reflection_id: str, text: str, source_ids: list[str]) -> None:
        self._full()
        for sid in source_ids:
            if sid not in self.observations and sid not in self.reflections:
                self._live_entry(sid)
        self.trigger_event(self.Reflected, reflection_id=reflection_id, text=text,
                           source_ids=list(source_ids))

    def open_work_scope(self, *, scope_id: str, name: str) -> None:
        self._full()
        self.trigger_event(self.WorkScopeOpened, scope_id=scope_id, name=name)

    def _work_scope(self, scope_id: str) -> WorkScope:
        ws = self.work_scopes.get(scope_id)
        if ws is None:
            raise LedgerError(f"unknown work scope {scope_id}")
        return ws

    def close_work_scope(self, scope_id: str) -> None:
        self._full()
        if self._work_scope(scope_id).closed:
            raise LedgerError(f"work scope {scope_id} is already closed")
        self.trigger_event(self.WorkScopeClosed, scope_id=scope_id)

    def bind(self, *, reflection_id: str, scope_id: str) -> None:
        self._full()
        if reflection_id not in self.reflections:
            raise LedgerError(f"unknown reflection {reflection_id}")
        if self._work_scope(scope_id).closed:
            raise LedgerError(f"work scope {scope_id} is closed: nothing more can be bound to it")
        self.trigger_event(self.ReflectionBound, reflection_id=reflection_id, scope_id=scope_id)

    def retract(self, entry_id: str) -> None:
        self._live_entry(entry_id)
        self.trigger_event(self.EntryRetracted, entry_id=entry_id)

    def erase(self, *, requested_by: str, cause: str = "caller") -> None:
        self._full()
        self.trigger_event(self.Erased, requested_by=requested_by, entries=len(self.entries),
                           observations=len(self.observations),
                           reflections=len(self.reflections), cause=cause)

    def promotable(self, reflection_id: str) -> tuple[Derived, str]:
        """The reflection and its closed work scope, or ``LedgerError``."""
        r = self.reflections.get(reflection_id)
        if r is None:
            raise LedgerError(f"unknown reflection {reflection_id}")
        scope_id = self.bindings.get(reflection_id)
        if scope_id is None:
            raise LedgerError(f"reflection {reflection_id} is not bound to a work scope")
        if not self._work_scope(scope_id).closed:
            raise LedgerError(f"work scope {scope_id} of reflection {reflection_id} is still open")
        return r, scope_id

    def live_entries(self) -> list[Entry]:
        return [e for e in self.entries if not e.retracted]

    def summary(self) -> dict[str, Any]:
        return {"entries": len(self.live_entries()), "observations": len(self.observations),
                "reflections": len(self.reflections), "work_scopes": len(self.work_scopes)}
