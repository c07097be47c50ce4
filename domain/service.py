"""The application service: ``MemoryService``, the immutable facade of the fabric's
commands and queries over one frozen :class:`~memfabric.domain.deps.Deps`
(cosmicpython's bootstrap → ``inject_dependencies``).

Each command lives in a module of its own, a function of its inputs and the ``Deps``:
:mod:`~memfabric.domain.remember` (consolidating writes), :mod:`~memfabric.domain.working`
(blocks), :mod:`~memfabric.domain.lifecycle` (forget, hold, erasure, files),
:mod:`~memfabric.domain.links`, :mod:`~memfabric.domain.history` (get, history, lineage)
and :mod:`~memfabric.domain.queries` (recall, list, count). Writes run in one
:class:`~memfabric.domain.ports.UnitOfWork` each; reads use the
:class:`~memfabric.domain.ports.NoteStore`. No handler module imports this one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar
from uuid import UUID

import numpy as np

from memfabric.domain import history, lifecycle, links, queries, remember, working
from memfabric.domain import sweep as sweeping
from memfabric.domain.attach import AttachConfig, Gate
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.deps import Deps, EmbedderSlot
from memfabric.domain.group_commit import GroupCommit
from memfabric.domain.inputs import (
    AppendBlockInput,
    EraseScopeInput,
    Limits,
    ListInput,
    RecallInput,
    RememberInput,
)
from memfabric.domain.settings import EvolutionSettings, LinkerSettings
from memfabric.domain.ports import Embedder, ListQuery, NoteStore, RetentionStore, UnitOfWork
from memfabric.domain.results import (
    EraseResult,
    ForgetResult,
    HistoryEntry,
    Lineage,
    MemoryNote,
    NotePage,
    PathForgetResult,
    RecallResult,
    RepointResult,
)
from memfabric.domain.principal import AccessFilter
from memfabric.domain.scope import Scope

_T = TypeVar("_T")

served_by = queries.served_by


class MemoryService:
    """Every command and query of the fabric over one :class:`Deps`, built once and
    immutable: assigning any attribute raises ``AttributeError`` (the dependencies
    are read through the properties below; what changes while serving lives in
    ``deps.embedders`` and ``deps.gate``). :meth:`replace` gives another service over
    changed dependencies. Construct it through ``memfabric.adapters.open_fabric``
    (PostgreSQL) or ``memfabric.adapters.memory.open_memory_fabric`` (in memory)."""

    __slots__ = ("__weakref__", "deps")

    deps: Deps

    def __init__(self, deps: Deps) -> None:
        object.__setattr__(self, "deps", deps)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"MemoryService is immutable: cannot set {name!r} "
                             "(build it with other Deps, or use MemoryService.replace)")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"MemoryService is immutable: cannot delete {name!r}")

    def replace(self, **changes: Any) -> MemoryService:
        """Another service over these dependencies with ``changes`` (``Deps`` field
        names, e.g. ``clock=...``, ``attach_config=...``)."""
        return MemoryService(self.deps.replace(**changes))

    # ------------------------------------------------------------ dependencies
    @property
    def store(self) -> NoteStore:
        """The read side."""
        return self.deps.store

    @property
    def embedder(self) -> Embedder:
        """The embedder in use (``deps.embedders.current``)."""
        return self.deps.embedder

    @property
    def embedders(self) -> EmbedderSlot:
        """The embedder slot (issue 19: swapped by ``reembed``, adopted after another's)."""
        return self.deps.embedders

    @property
    def consolidation(self) -> Consolidation:
        """The consolidation settings."""
        return self.deps.consolidation

    @property
    def limits(self) -> Limits:
        """The size limits."""
        return self.deps.limits

    @property
    def require_consent(self) -> bool:
        """Whether recall returns only granted notes."""
        return self.deps.require_consent

    @property
    def attach_config(self) -> AttachConfig:
        """Who may attach and what an attached session is granted."""
        return self.deps.attach_config

    @property
    def gate(self) -> Gate:
        """The attach gate of this fabric."""
        return self.deps.gate

    @property
    def linker(self) -> LinkerSettings:
        """The linker worker's settings (issue 15)."""
        return self.deps.linker

    @property
    def evolution(self) -> EvolutionSettings:
        """The evolution worker's settings (issue 15)."""
        return self.deps.evolution

    @property
    def group_commit(self) -> GroupCommit[RememberInput, MemoryNote] | None:
        """The group commit of small concurrent writes (issue 24; ``None``: each alone)."""
        return self.deps.group_commit

    @property
    def ledger_store(self) -> Any:
        """The conversation ledger's read side (issue 14; ``None``: none)."""
        return self.deps.ledger_store

    @property
    def entity_store(self) -> Any:
        """The entity index (issue 32)."""
        return self.deps.entity_store

    @property
    def retention_store(self) -> RetentionStore | None:
        """The retention settings and index (issue 30)."""
        return self.deps.retention_store

    @property
    def access(self) -> Any:
        """The principal registry (issue 33; ``None``: no principals on this backend)."""
        return self.deps.access

    @property
    def clock(self) -> Callable[[], datetime]:
        """"Now" of retention decisions (issue 30)."""
        return self.deps.clock

    # ---------------------------------------------------------------- helpers
    def unit_of_work(self, scopes: Sequence[Scope]) -> UnitOfWork:
        """A unit of work holding the write locks of ``scopes``."""
        return self.deps.unit_of_work(scopes)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The checked ``(n, dim)`` float32 vectors of ``texts`` (see :meth:`Deps.embed`)."""
        return self.deps.embed(texts)

    def redact(self, text: str | None) -> str | None:
        """``text`` through the host's redactor (unchanged without one)."""
        return self.deps.redact(text)

    def adopting(self, call: Callable[[], _T]) -> _T:
        """``call()``, once more after adopting a migrated embedder (see :meth:`Deps.adopting`)."""
        return self.deps.adopting(call)

    # ----------------------------------------------------------------- writes
    def validate_remember(self, fields: dict[str, Any]) -> RememberInput:
        """Validate ``fields`` against :class:`RememberInput` with this fabric's limits."""
        return self.deps.validate_remember(fields)

    def remember(self, scope: Scope, item: RememberInput, *,
                 consolidate: bool | Consolidation | None = None) -> MemoryNote:
        """Write one note (see ``Notes.remember``)."""
        return self.remember_many(scope, [item], consolidate=consolidate)[0]

    def remember_many(self, scope: Scope, items: Sequence[RememberInput], *,
                      consolidate: bool | Consolidation | None = None,
                      chunk_size: int | None = 250) -> list[MemoryNote]:
        """Write notes in order, atomic per chunk (see :func:`memfabric.domain.remember.remember_many`)."""
        return remember.remember_many(self.deps, scope, items, consolidate=consolidate, chunk_size=chunk_size)

    def append_block(self, scope: Scope, item: AppendBlockInput) -> MemoryNote:
        """Append to a working block (see :func:`memfabric.domain.working.append_block`)."""
        return working.append_block(self.deps, scope, item)

    def forget(self, scope: Scope, note_id: str, *, hold: bool, requested_by: str,
               approval: str | None = None) -> ForgetResult:
        """Tombstone (or hold) one note (see :func:`memfabric.domain.lifecycle.forget`)."""
        return lifecycle.forget(self.deps, scope, note_id, hold=hold, requested_by=requested_by,
                                approval=approval)

    def forget_block(self, scope: Scope, label: str, *, hold: bool, requested_by: str,
                     approval: str | None = None) -> ForgetResult:
        """Tombstone (or hold) a working block."""
        return lifecycle.forget_block(self.deps, scope, label, hold=hold, requested_by=requested_by,
                                      approval=approval)

    def set_retention(self, scope: Scope, note_id: str, retention: str, *, requested_by: str,
                      approval: str | None = None) -> MemoryNote:
        """Move a note to another retention class (see :func:`memfabric.domain.lifecycle.set_retention`)."""
        return lifecycle.set_retention(self.deps, scope, note_id, retention, requested_by=requested_by,
                                       approval=approval)

    def sweep(self, now: datetime | None = None, *, tenant: str | None = None, limit: int | None = None,
              dry_run: bool = False, batch_size: int = sweeping.BATCH_SIZE,
              progress: sweeping.Progress | None = None) -> sweeping.SweepResult:
        """Apply the retention rules at ``now`` (see :func:`memfabric.domain.sweep.sweep`)."""
        return sweeping.sweep(self.deps, now, tenant=tenant, limit=limit, dry_run=dry_run,
                              batch_size=batch_size, progress=progress)

    def delete_path(self, scope: Scope, path: str, *, hold: bool, requested_by: str) -> PathForgetResult:
        """Tombstone (or hold) the ``file`` notes of a path."""
        return lifecycle.delete_path(self.deps, scope, path, hold=hold, requested_by=requested_by)

    def repoint(self, scope: Scope, from_path: str, to_path: str) -> RepointResult:
        """Move the ``file`` notes of a path to another path."""
        return lifecycle.repoint(self.deps, scope, from_path, to_path)

    def erase_scope(self, args: EraseScopeInput) -> EraseResult:
        """Tombstone (or hold) every note of a scope prefix (see ``Fabric.erase_scope``)."""
        return lifecycle.erase_scope(self.deps, args)

    def release_hold(self, scope: Scope, note_id: str, *, requested_by: str) -> MemoryNote:
        """Lift a legal hold (see :func:`memfabric.domain.lifecycle.release_hold`)."""
        return lifecycle.release_hold(self.deps, scope, note_id, requested_by=requested_by)

    def link(self, scope: Scope, from_id: str, to_id: str, *, relation: str,
             weight: float) -> MemoryNote:
        """Add a link edge (see :func:`memfabric.domain.links.link`)."""
        return links.link(self.deps, scope, from_id, to_id, relation=relation, weight=weight)

    def unlink(self, scope: Scope, from_id: str, to_id: str, *, relation: str) -> MemoryNote:
        """Remove a link edge (see :func:`memfabric.domain.links.unlink`)."""
        return links.unlink(self.deps, scope, from_id, to_id, relation=relation)

    # ------------------------------------------------------------------ reads
    def recall(self, scope: Scope, query: RecallInput, access: AccessFilter | None = None, *,
               only: Collection[UUID] | None = None) -> RecallResult:
        """Ranked live notes visible from ``scope`` (see :func:`memfabric.domain.queries.recall`)."""
        return queries.recall(self.deps, scope, query, access, only=only)

    def list_query(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> ListQuery:
        """The store query of ``Notes.list`` / ``Notes.count`` arguments."""
        return queries.list_query(self.deps, scope, args, access)

    def list_notes(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> NotePage:
        """One keyset page of the notes visible from ``scope`` (see ``Notes.list``)."""
        return queries.list_notes(self.deps, scope, args, access)

    def count_notes(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> int:
        """How many notes ``Notes.list`` would list over every page."""
        return queries.count_notes(self.deps, scope, args, access)

    def working_value(self, scope: Scope, known_at: datetime | None = None) -> dict[str, Any]:
        """The working value of exactly ``scope`` (see ``Notes.working_value``); with
        ``known_at``, as recorded then (issue 31)."""
        return working.working_value(self.deps.at(known_at).store.working_blocks(scope))

    def get(self, scope: Scope, note_id: str, known_at: datetime | None = None) -> MemoryNote:
        """The note ``note_id`` of ``scope`` (``NoteNotFoundError`` when absent); with
        ``known_at``, as recorded then (issue 31)."""
        return history.get(self.deps.at(known_at), scope, note_id)

    def history(self, scope: Scope, note_id: str) -> list[HistoryEntry]:
        """Every event of the note in version order."""
        return history.history(self.deps, scope, note_id)

    def lineage(self, scope: Scope, note_id: str) -> Lineage:
        """Supersession chain, folds, links and tombstone of a note."""
        return history.lineage(self.deps, scope, note_id)

    def verify_content(self, scope: Scope, note_id: str, text: str) -> bool:
        """Whether ``text`` matches a tombstone's keyed hash."""
        return lifecycle.verify_content(self.deps, scope, note_id, text)
