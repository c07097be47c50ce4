"""The ``PrincipalStore`` port (issue 33) on both backends, and the wiring of
``fabric.principals``.

- :class:`PostgresPrincipalStore`: reads ``mf_principals`` and joins
  ``mf_principal_grants`` (:mod:`memfabric.projections.principals`); its recall never
  needs the grants in Python (:meth:`grants` is ``None``: the SQL joins them).
- :class:`InMemoryPrincipalStore`: replays the ``Principal`` aggregate from the
  in-memory log (the reference semantics of the projection).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from memfabric.adapters.access_log import BufferedAccessLog, MemoryAccessSink, PostgresAccessSink, Sealer
from memfabric.domain import replay
from memfabric.domain.access import Principals, PrincipalView
from memfabric.domain.principal import MemoryProfile, Principal, principal_uuid
from memfabric.domain.scope import Scope
from memfabric.projections import principals as projection


def _view(row: dict[str, Any]) -> PrincipalView:
    return PrincipalView(agent_id=row["agent_id"], profile=MemoryProfile.model_validate(row["profile"]),
                         version=int(row["version"]), updated_at=row["updated_at"],
                         updated_by=row["updated_by"])


class PostgresPrincipalStore:
    """``PrincipalStore`` on the principals projection (routed like recall)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def principal(self, agent_id: str) -> PrincipalView | None:
        rows = self._store.routed(lambda conn: projection.select_principal(conn.cursor(), agent_id))
        return _view(rows[0]) if rows else None

    def principals(self) -> list[PrincipalView]:
        rows = self._store.routed(lambda conn: projection.select_principal(conn.cursor(), None))
        return [_view(r) for r in rows]

    def grants(self, agent_id: str, tenant_id: str) -> frozenset[UUID] | None:
        return None

    def granted_homes(self, agent_id: str, tenant_id: str, note_id: str) -> list[Scope]:
        rows = self._store.routed(lambda conn: projection.select_granted_homes(
            conn.cursor(), agent_id, tenant_id, note_id))
        return [Scope(tenant_id=t, resource_id=r or None, thread_id=th or None) for t, r, th in rows]


class InMemoryPrincipalStore:
    """``PrincipalStore`` on an ``InMemoryEventLog`` (see the module doc)."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def _load(self, agent_id: str) -> Principal | None:
        found: Any = None
        for event in self.log.events(principal_uuid(agent_id)):
            found = replay.step(event, found)
        return found if isinstance(found, Principal) else None

    def principal(self, agent_id: str) -> PrincipalView | None:
        p = self._load(agent_id)
        if p is None:
            return None
        return PrincipalView(agent_id=p.agent_id, profile=p.memory_profile(), version=int(p.version),
                             updated_at=p.updated_at or p.created_on, updated_by=p.updated_by)

    def principals(self) -> list[PrincipalView]:
        views = []
        for aid in self.log.aggregate_ids():
            events = self.log.events(aid)
            if events and isinstance(events[0], Principal.Defined):
                view = self.principal(events[0].agent_id)
                if view is not None:
                    views.append(view)
        return sorted(views, key=lambda v: v.agent_id)

    def grants(self, agent_id: str, tenant_id: str) -> frozenset[UUID] | None:
        p = self._load(agent_id)
        return frozenset() if p is None else p.granted(tenant_id)

    def granted_homes(self, agent_id: str, tenant_id: str, note_id: str) -> list[Scope]:
        granted = self.grants(agent_id, tenant_id) or frozenset()
        with self.log.lock:
            rows = [dict(r) for r in self.log.scope_rows.values()
                    if r["aggregate_id"] in granted and r["note_id"] == note_id]
        return sorted((Scope(tenant_id=r["tenant_id"], resource_id=r["resource_id"] or None,
                             thread_id=r["thread_id"] or None) for r in rows), key=lambda s: s.key)


def wire_postgres(deps: Any, store: Any) -> Principals:
    """``fabric.principals`` of a PostgreSQL fabric over ``deps`` (its note store and
    unit of work): the projection's store and the access log in ``mf_access_log``
    (made at its first record)."""
    sink = PostgresAccessSink(store.connection, Sealer(store.secret))
    return Principals(deps, PostgresPrincipalStore(store), BufferedAccessLog(sink))


def wire_memory(deps: Any, log: Any) -> Principals:
    """``fabric.principals`` of an in-memory fabric over ``deps``."""
    sink = MemoryAccessSink(Sealer(lambda: log.secret))
    return Principals(deps, InMemoryPrincipalStore(log), BufferedAccessLog(sink))
