"""In-memory reference implementations of the ports: no database, no threads.

Faithful enough to be the contract reference the PostgreSQL adapters are checked
against (``tests/contract``), and fast enough for unit tests. One module per port:

- :mod:`memfabric.adapters.memory.log`: :class:`InMemoryEventLog`, the event log and
  the read models of the one projection registry
  (:func:`memfabric.projections.registry.default_projections`);
- :mod:`memfabric.adapters.memory.uow`: :class:`InMemoryUnitOfWork` (``UnitOfWork``);
- :mod:`memfabric.adapters.memory.store`: :class:`InMemoryNoteStore` (``NoteStore``),
  recall in :mod:`memfabric.adapters.memory.recall` (its lexical score is not
  PostgreSQL's: no stemming), the shared row predicates in
  :mod:`memfabric.adapters.memory.rows`;
- :mod:`memfabric.adapters.memory.ledger` (``LedgerStore``),
  :mod:`memfabric.adapters.memory.retention` (``RetentionStore``),
  :mod:`memfabric.adapters.memory.entities` (``EntityStore``),
  :mod:`memfabric.adapters.memory.versions` (``KnownAtStore``).

This module wires them into a :class:`MemoryFabric` (:func:`open_memory_fabric`) and
re-exports the names it always offered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, TypeAdapter
from memfabric.adapters.memory import versions as memory_versions
from memfabric.adapters.embedders import HashEmbedder
from memfabric.adapters.memory.log import InMemoryEventLog
from memfabric.adapters.memory.recall import ENGLISH_STOP_WORDS, lexical_terms
from memfabric.adapters.memory.retention import InMemoryRetentionStore
from memfabric.adapters.memory.store import InMemoryNoteStore
from memfabric.adapters.memory.uow import InMemoryUnitOfWork
from memfabric.adapters.tools import MemoryTools
from memfabric.domain import links
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.inputs import EraseScopeInput, Limits
from memfabric.domain.notes import Notes
from memfabric.domain.ports import Embedder
from memfabric.domain.retention import RetentionConfig
from memfabric.domain.sweep import BATCH_SIZE, Progress, SweepResult
from memfabric.domain.results import EraseResult
from memfabric.domain.scope import Scope
from memfabric.domain.deps import Deps
from memfabric.domain.service import MemoryService
from memfabric.domain.working import WorkingValidator

__all__ = [
    "ENGLISH_STOP_WORDS", "InMemoryEventLog", "InMemoryNoteStore", "InMemoryRetentionStore",
    "InMemoryUnitOfWork", "MemoryFabric", "lexical_terms", "open_memory_fabric",
]


class MemoryFabric:
    """An in-memory fabric: the same service as ``Fabric``, on in-memory ports.

    - ``scope(tenant_id, resource_id=None, thread_id=None)`` → :class:`Notes`
    - ``erase_scope(...)``: as ``Fabric.erase_scope``.
    - ``log``: the :class:`InMemoryEventLog` (``log.event_count()`` for tests).
    """

    def __init__(self, service: MemoryService, log: InMemoryEventLog, store: InMemoryNoteStore) -> None:
        self.service = service
        self.log = log
        self.store = store

    partition_count: int = 1
    """``open_memory_fabric(partitions=N)`` (issue 25; nothing is laid out in memory)."""

    def partitions(self) -> int:
        """The partition count the fabric was opened with (1 by default)."""
        return self.partition_count

    def scope(self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None) -> Notes:
        """The handle of one scope; raises ``pydantic.ValidationError`` for bad ids."""
        return Notes(self.service, Scope(tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id),
                     tools=MemoryTools)

    def erase_scope(
        self, tenant_id: str, resource_id: str | None = None, thread_id: str | None = None,
        hold: bool = False, *, requested_by: str = "operator", batch_size: int = 100,
        approval: str | None = None,
    ) -> EraseResult:
        """Tombstone (or hold) every un-forgotten note of a scope prefix (see
        ``Fabric.erase_scope``); ``pydantic.ValidationError`` for bad arguments."""
        args = EraseScopeInput(
            tenant_id=tenant_id, resource_id=resource_id, thread_id=thread_id, hold=hold,
            requested_by=requested_by, batch_size=batch_size, approval=approval,
        )
        result = self.service.erase_scope(args)
        if args.hold:
            return result
        from memfabric.domain.conversation import erase_conversations  # noqa: PLC0415
        n = erase_conversations(self.service.deps, args.tenant_id, args.resource_id, args.thread_id,
                                args.requested_by)  # issue 14
        from memfabric.domain.entities.commands import erase_entities  # noqa: PLC0415
        erase_entities(self.service.deps, args.tenant_id, args.resource_id, args.thread_id,
                       args.requested_by)  # issue 32
        return dataclasses.replace(result, conversations=n)

    def sweep(self, now: datetime | None = None, *, tenant: str | None = None, limit: int | None = None,
              dry_run: bool = False, batch_size: int = BATCH_SIZE,
              progress: Progress | None = None) -> SweepResult:
        """Apply the retention rules at ``now`` (see ``Fabric.sweep``)."""
        return self.service.sweep(now, tenant=tenant, limit=limit, dry_run=dry_run,
                                  batch_size=batch_size, progress=progress)

    def catch_up(self) -> dict[str, int]:
        """Projections are always at the log head: the position of every registered
        projection (:attr:`InMemoryEventLog.projections`)."""
        return {p.name: self.log.position for p in self.log.projections}

    @property
    def principals(self) -> Any:
        """Issue 33: the principal registry (``memfabric.domain.access.Principals``)."""
        return self.service.access

    def access_log(self, **query: Any) -> Any:
        """Issue 33: access records (see ``Principals.access_log``)."""
        return self.service.access.access_log(**query)

    def close(self) -> None:
        """Flush the access log (nothing else to release)."""
        self.service.access.log.close()

    def __enter__(self) -> MemoryFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_memory_fabric(
    *,
    embedder: Embedder | None = None,
    consolidate: bool | Consolidation | dict[str, Any] = True,
    limits: Limits | dict[str, Any] | None = None,
    redactor: Callable[[str], str] | None = None,
    require_consent: bool = False,
    working_validator: WorkingValidator | None = None,
    linker: Any = None,
    evolution: Any = None,
    passive: bool = False,
    retention: RetentionConfig | dict[str, Any] | None = None,
    partitions: int | None = None,
    clock: Callable[[], datetime] | None = None,
) -> MemoryFabric:
    """An in-memory fabric with ``open_fabric``'s settings (no ``dsn``, no projections
    runner: projections always update with the write). ``partitions`` (issue 25) is
    validated like ``open_fabric``'s (1..256) and reported by ``partitions()``; it lays
    nothing out (there are no tables). ``clock``: "now" of retention decisions
    (default: the wall clock, UTC; tests pass a fake one). Raises ``pydantic.ValidationError`` for bad
    ``consolidate`` / ``limits`` / ``retention`` / ``partitions`` settings."""
    count = _PARTITIONS.validate_python(1 if partitions is None else partitions)
    consolidation = Consolidation.of(consolidate)
    retention_config = RetentionConfig.of(retention)
    limits_model = limits if isinstance(limits, Limits) else Limits.model_validate(limits or {})
    log = InMemoryEventLog()
    store = InMemoryNoteStore(log)

    def unit_of_work(scopes: Sequence[Scope]) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(log, scopes)

    from memfabric.adapters.memory.entities import InMemoryEntityStore  # noqa: PLC0415
    from memfabric.adapters.memory.ledger import InMemoryLedgerStore  # noqa: PLC0415
    from memfabric.adapters.principals_store import wire_memory  # noqa: PLC0415
    retention_store = InMemoryRetentionStore(log)  # issue 30
    deps = Deps.build(
        unit_of_work=unit_of_work, store=store, embedder=embedder or HashEmbedder(),
        consolidation=consolidation, limits=limits_model, redactor=redactor,
        require_consent=require_consent, working_validator=working_validator, clock=clock,
        **links.worker_settings(linker, evolution, passive),
        ledger_store=InMemoryLedgerStore(log),  # issue 14: the conversation ledger
        retention_store=retention_store,
        entity_store=InMemoryEntityStore(log),  # issue 32: the entity index
        known_at_store=lambda known_at: memory_versions.MemoryKnownAtStore(store, known_at),  # issue 31
    )
    retention_store.record(retention_config)
    service = MemoryService(deps.replace(access=wire_memory(deps, log)))  # issue 33: principals, access log
    fabric = MemoryFabric(service, log, store)
    fabric.partition_count = count
    return fabric


_PARTITIONS: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(strict=True, ge=1, le=256)])
