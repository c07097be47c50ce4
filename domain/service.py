"""The application service: ``MemoryService`` composes the commands and queries of the
fabric over injected ports (cosmicpython's bootstrap-by-injection).

Each command lives in a module of its own: :mod:`~memfabric.domain.remember`
(consolidating writes), :mod:`~memfabric.domain.working` (blocks),
:mod:`~memfabric.domain.lifecycle` (forget, hold, erasure, files),
:mod:`~memfabric.domain.history` (get, history, lineage) and
:mod:`~memfabric.domain.ranking` (recall). Writes run in one
:class:`~memfabric.domain.ports.UnitOfWork` each; reads use the
:class:`~memfabric.domain.ports.NoteStore`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar
from uuid import UUID

import copy
import dataclasses
import functools

import numpy as np

from memfabric.domain.group_commit import GroupCommit
from memfabric.domain import browse, history, lifecycle, links, policy, ranking, remember, working
from memfabric.domain import sweep as sweeping
from memfabric.domain.consolidation import Consolidation
from memfabric.domain.attach import AttachConfig, AttachSettings
from memfabric.domain.links import EvolutionSettings, LinkerSettings
from memfabric.domain.errors import (ConflictError, EmbedderChangedError, EmbedderError, NotSupportedError,
                                     SettingsError)
from memfabric.domain.inputs import (
    AppendBlockInput,
    EraseScopeInput,
    Limits,
    ListInput,
    RecallInput,
    RememberInput,
    Scoring,
)
from memfabric.domain.ports import (
    Embedder,
    ListQuery,
    NoteFilter,
    NoteStore,
    RetentionStore,
    UnitOfWork,
    UnitOfWorkFactory,
)
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
from memfabric.domain.subjects import RuleSubjectExtractor, SubjectExtractor

_T = TypeVar("_T")

_DEFAULT = object()

OVERSAMPLE = 4
"""Candidates fetched per requested hit (each list), before re-ranking."""

MIN_CANDIDATES = 40
"""Candidates fetched per list at the least."""

ONLY_OVERSAMPLE, ONLY_MAX = 10, 2000
"""Issue 32: candidates fetched per list per note of a ``recall(entity=...)``, at most."""


def _extractor(value: object) -> SubjectExtractor | None:
    if value is _DEFAULT or value is True:
        return RuleSubjectExtractor()
    if value is None or value is False:
        return None
    if not isinstance(value, SubjectExtractor):
        raise SettingsError("subject_extractor: expected an object with extract(text, *, kind) or None")
    return value


class MemoryService:
    """Every command and query of the fabric, over injected ports.

    ``unit_of_work``: opens a write transaction over scopes; ``store``: the read side;
    ``embedder``: text to vectors. Settings: ``consolidation``, ``limits``,
    ``redactor`` (``str -> str`` applied to content and context before embedding),
    ``require_consent`` (recall only granted notes) and ``working_validator``.
    ``subject_extractor``: the :class:`~memfabric.domain.subjects.SubjectExtractor`
    whose inferred key decides subject-less supersession (default
    ``RuleSubjectExtractor()``; ``None``/``False``: no inference, so only exact
    repeats, ``path``, explicit ``subject`` and ``supersedes`` consolidate).
    Construct it through ``memfabric.adapters.open_fabric`` (PostgreSQL) or
    ``memfabric.adapters.memory.open_memory_fabric`` (in memory).
    """

    def __init__(
        self,
        *,
        unit_of_work: UnitOfWorkFactory,
        store: NoteStore,
        embedder: Embedder,
        consolidation: Consolidation | None = None,
        limits: Limits | None = None,
        redactor: Callable[[str], str] | None = None,
        require_consent: bool = False,
        working_validator: working.WorkingValidator | None = None,
        subject_extractor: SubjectExtractor | None | object = _DEFAULT,
        session_id: str | None = None,
    ) -> None:
        self._unit_of_work = unit_of_work
        self.store = store
        self.embedder = embedder
        self.adopt_embedder: Callable[[], bool] | None = None
        """Issue 19: called when a vector of this process's embedder met an index of
        another (``EmbedderChangedError``, the fabric was migrated by ``reembed``); swaps
        in the recorded embedder and returns whether it changed. ``None``: no adoption."""
        self.consolidation = consolidation or Consolidation()
        self.limits = limits or Limits()
        self.redactor = redactor
        self.require_consent = require_consent
        self.working_validator = working_validator
        self.subject_extractor = _extractor(subject_extractor)
        self.attach_config = AttachConfig(session_id=session_id)
        """Who may attach (``session_id``; ``None``: any session) and what is live then."""
        self.ledger_store: Any = None
        """The conversation ledger's read side (``memfabric.domain.conversation.LedgerStore``;
        ``None``: this backend has no ledger). Set by the composition root."""
        self.linker = LinkerSettings()
        """The linker worker (issue 15, :mod:`memfabric.domain.links`): off by default."""
        self.evolution = EvolutionSettings()
        """The evolution worker (issue 15): off by default."""
        self.passive = False
        """``passive``: the write-path workers never run."""
        self.group_commit: GroupCommit[RememberInput, MemoryNote] | None = GroupCommit()
        """Issue 24: concurrent small writes to one scope share a transaction
        (:mod:`memfabric.domain.group_commit`); ``None`` writes each alone."""
        self.entity_store: Any = None
        """Issue 32: the entity index (``memfabric.domain.entities.EntityStore``; set by
        the composition root)."""
        self.retention_store: RetentionStore | None = None
        """Issue 30: the shared retention settings and index (set by the composition root)."""
        self.access: Any = None
        """Issue 33: the principal registry (``memfabric.domain.access.Principals``; set by
        the composition root; ``None``: no principals on this backend)."""
        self.known_at_store: Callable[[datetime], NoteStore] | None = None
        """Issue 31: the read side as recorded at an instant (a
        :class:`memfabric.domain.bitemporal.KnownAtStore`; set by the composition root;
        ``None``: ``known_at`` is refused with ``NotSupportedError``)."""
        self.clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
        """Issue 30: "now" of retention decisions (the floor check, a sweep without
        ``now``); tests inject a fake clock."""

    def configure_workers(self, *, linker: LinkerSettings, evolution: EvolutionSettings,
                          passive: bool) -> None:
        """Set the issue-15 workers and what an attached session is granted."""
        self.linker, self.evolution, self.passive = linker, evolution, passive
        self.attach_config = AttachConfig(
            session_id=self.attach_config.session_id,
            settings=AttachSettings(linker=linker.enabled, evolution=evolution.enabled,
                                    passive=passive))

    # ---------------------------------------------------------------- helpers
    def unit_of_work(self, scopes: Sequence[Scope]) -> UnitOfWork:
        """A unit of work holding the write locks of ``scopes``."""
        return self._unit_of_work(scopes)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The embedder's vectors for ``texts`` as a checked ``(n, dim)`` float32 array;
        raises ``EmbedderError`` for any other shape or a non-finite value."""
        try:
            out = np.asarray(self.embedder.embed(texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbedderError(f"embedder {self.embedder.id!r} returned no float vectors: {exc}") from exc
        if out.shape != (len(texts), self.embedder.dim):
            raise EmbedderError(f"embedder {self.embedder.id!r} returned shape {out.shape}, "
                                f"expected {(len(texts), self.embedder.dim)}")
        if not np.isfinite(out).all():
            raise EmbedderError(f"embedder {self.embedder.id!r} returned NaN or infinite values")
        return out

    def redact(self, text: str | None) -> str | None:
        """``text`` through the host's redactor (unchanged without one)."""
        if text is None or self.redactor is None:
            return text
        return self.redactor(text)

    # ----------------------------------------------------------------- writes
    def validate_remember(self, fields: dict[str, Any]) -> RememberInput:
        """Validate ``fields`` against :class:`RememberInput` with this fabric's limits."""
        return RememberInput.model_validate(
            fields, context={"max_entry_text_chars": self.limits.max_entry_text_chars})

    def remember(self, scope: Scope, item: RememberInput, *,
                 consolidate: bool | Consolidation | None = None) -> MemoryNote:
        """Write one note (see ``Notes.remember``)."""
        return self.remember_many(scope, [item], consolidate=consolidate)[0]

    def remember_many(self, scope: Scope, items: Sequence[RememberInput], *,
                      consolidate: bool | Consolidation | None = None,
                      chunk_size: int | None = 250) -> list[MemoryNote]:
        """Write notes in order, atomic per chunk (see :func:`memfabric.domain.remember.remember_many`)."""
        return remember.remember_many(self, scope, items, consolidate=consolidate, chunk_size=chunk_size)

    def append_block(self, scope: Scope, item: AppendBlockInput) -> MemoryNote:
        """Append to a working block (see ``Notes.append_block``)."""
        with self.unit_of_work([scope]) as uow:
            view = working.BlockWriter(self, uow, scope).change(
                item.block, append=item.text, expected_version=item.expected_version)
            uow.commit()
        self.store.await_position(uow.position)
        return view

    def forget(self, scope: Scope, note_id: str, *, hold: bool, requested_by: str,
               approval: str | None = None) -> ForgetResult:
        """Tombstone (or hold) one note (see :func:`memfabric.domain.lifecycle.forget`)."""
        return lifecycle.forget(self, scope, note_id, hold=hold, requested_by=requested_by,
                                approval=approval)

    def forget_block(self, scope: Scope, label: str, *, hold: bool, requested_by: str,
                     approval: str | None = None) -> ForgetResult:
        """Tombstone (or hold) a working block."""
        return lifecycle.forget_block(self, scope, label, hold=hold, requested_by=requested_by,
                                      approval=approval)

    def set_retention(self, scope: Scope, note_id: str, retention: str, *, requested_by: str,
                      approval: str | None = None) -> MemoryNote:
        """Move a note to another retention class (see :func:`memfabric.domain.lifecycle.set_retention`)."""
        return lifecycle.set_retention(self, scope, note_id, retention, requested_by=requested_by,
                                       approval=approval)

    def sweep(self, now: datetime | None = None, *, tenant: str | None = None, limit: int | None = None,
              dry_run: bool = False, batch_size: int = sweeping.BATCH_SIZE,
              progress: sweeping.Progress | None = None) -> sweeping.SweepResult:
        """Apply the retention rules at ``now`` (see :func:`memfabric.domain.sweep.sweep`)."""
        return sweeping.sweep(self, now, tenant=tenant, limit=limit, dry_run=dry_run,
                              batch_size=batch_size, progress=progress)

    def delete_path(self, scope: Scope, path: str, *, hold: bool, requested_by: str) -> PathForgetResult:
        """Tombstone (or hold) the ``file`` notes of a path."""
        return lifecycle.delete_path(self, scope, path, hold=hold, requested_by=requested_by)

    def repoint(self, scope: Scope, from_path: str, to_path: str) -> RepointResult:
        """Move the ``file`` notes of a path to another path."""
        return lifecycle.repoint(self, scope, from_path, to_path)

    def erase_scope(self, args: EraseScopeInput) -> EraseResult:
        """Tombstone (or hold) every note of a scope prefix (see ``Fabric.erase_scope``)."""
        return lifecycle.erase_scope(self, args)

    # ------------------------------------------------------------------ reads
    def adopting(self, call: Callable[[], _T]) -> _T:
        """``call()``, run once more after adopting the recorded embedder when it raised
        ``EmbedderChangedError`` (or ``ConflictError``: the switch appended to a note this
        write had loaded) and the embedder in use has changed since it started (another
        thread's or process's ``reembed`` switched the fabric)."""
        before = self.embedder
        try:
            return call()
        except (EmbedderChangedError, ConflictError):
            adopted = self.adopt_embedder() if self.adopt_embedder is not None else False
            if not adopted and self.embedder is before:
                raise
        return call()

    def at(self, known_at: datetime | None) -> MemoryService:
        """Issue 31: this service reading the fabric as recorded at ``known_at`` (a
        shallow copy whose ``store`` is :attr:`known_at_store`'s), or itself for
        ``None``. Raises ``NotSupportedError`` when the backend keeps no versions."""
        if known_at is None:
            return self
        if self.known_at_store is None:
            raise NotSupportedError("known_at: this backend keeps no note versions")
        view = copy.copy(self)
        view.store = self.known_at_store(known_at)
        return view

    def recall(self, scope: Scope, query: RecallInput, access: AccessFilter | None = None, *,
               only: Collection[UUID] | None = None) -> RecallResult:
        """Ranked live notes visible from ``scope`` (see ``Notes.recall``); ``access``
        (issue 33): a principal's filter, inside the store's query; ``only``: rank only
        these aggregates (issue 32: the notes about an entity) among the candidates,
        fetching ``ONLY_OVERSAMPLE`` times as many per list as there are of them (at most
        ``ONLY_MAX``): in a scope of more notes an entity's note far from the query in
        both lists can be missed; ``query.known_at`` (issue 31): as recorded then."""
        return self.adopting(lambda: self.at(query.known_at)._recall(scope, query, access, only))  # noqa: SLF001

    def _recall(self, scope: Scope, query: RecallInput, access: AccessFilter | None = None,
                only: Collection[UUID] | None = None) -> RecallResult:
        as_of = query.as_of or query.known_at or datetime.now(timezone.utc)
        limit = max(query.top_k * OVERSAMPLE, MIN_CANDIDATES, min(ONLY_MAX, ONLY_OVERSAMPLE * len(only or ())))
        embedding = self.embed([query.query])[0] if query.mode != "lexical" else None
        candidates = self.store.recall(
            scope, embedding=embedding, query=query.query if query.mode != "vector" else None,
            kinds=query.kinds, as_of=as_of, limit=limit, require_consent=self.require_consent,
            filters=_filters(query.tags, query.subject, query.min_importance, access),
            **({"expand": limit} if query.expand_links else {}))
        if only is not None:
            candidates = [c for c in candidates if c.aggregate_id in only]
        served = served_by(self.store)
        if "episode" in query.kinds and query.mode != "vector":  # issue 14: ledger episodes
            from memfabric.domain import episodes  # noqa: PLC0415
            candidates = [*candidates, *episodes.candidates(
                self.ledger_store, scope, query.query, as_of=as_of, limit=limit,
                require_consent=self.require_consent)]
        scoring = query.scoring or Scoring()
        weight = scoring.vector_weight
        if weight is None:
            weight = float(getattr(self.embedder, "vector_weight", policy.DEFAULT_VECTOR_WEIGHT))
        how = ranking.Ranking(mode=query.mode, as_of=as_of, scoring=scoring, vector_weight=weight,
                              top_k=query.top_k, budget=query.budget,
                              expand=query.top_k if query.expand_links else 0,
                              min_relevance=query.min_relevance,
                              half_life_of=self._half_lives(scope, scoring, candidates))
        hit_links = self.store.hit_links if access is None else functools.partial(
            self.store.hit_links, filters=NoteFilter(access=access))
        result = ranking.with_links(ranking.rank(candidates, how), scope, hit_links)
        if any(h.supersedes and h.scope != scope for h in result.hits):
            result = dataclasses.replace(result, hits=history.hide_predecessors(self, scope, list(result.hits)))
        return dataclasses.replace(result, served_by=served)

    def _half_lives(self, scope: Scope, scoring: Scoring,
                    candidates: Sequence[Any]) -> dict[Any, timedelta]:
        """Issue 30: the recency half-life of each candidate whose retention class has one
        configured for ``scope``'s tenant (none when the query names its own
        ``half_life``, or nothing is configured: then no lookup is made)."""
        if self.retention_store is None or "half_life" in scoring.model_fields_set or not candidates:
            return {}
        per_class = self.retention_store.config(cached=True).for_tenant(scope.tenant_id).half_life
        if not per_class:
            return {}
        classes = self.retention_store.classes([c.aggregate_id for c in candidates])
        return {aid: per_class[cls] for aid, cls in classes.items() if cls in per_class}

    def list_query(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> ListQuery:
        """The store query of ``Notes.list`` / ``Notes.count`` arguments."""
        return ListQuery(scope=scope, kinds=tuple(args.kinds),
                         filters=_filters(args.tags, args.subject, None, access) or NoteFilter(),
                         valid_at=args.valid_at, include_superseded=args.include_superseded,
                         require_consent=self.require_consent)

    def list_notes(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> NotePage:
        """One keyset page of the notes visible from ``scope`` (see ``Notes.list``)."""
        svc = self.at(args.known_at)
        page = browse.page(svc.store, self.list_query(scope, args, access), cursor=args.cursor,
                           limit=args.limit)
        page = dataclasses.replace(page, served_by=served_by(self.store))
        if any(n.supersedes and n.scope != scope for n in page.items):
            page = dataclasses.replace(page, items=history.hide_predecessors(svc, scope, list(page.items)))
        return page

    def count_notes(self, scope: Scope, args: ListInput, access: AccessFilter | None = None) -> int:
        """How many notes ``Notes.list`` would list over every page."""
        return self.at(args.known_at).store.count_notes(self.list_query(scope, args, access))

    def release_hold(self, scope: Scope, note_id: str, *, requested_by: str) -> MemoryNote:
        """Lift a legal hold (see :func:`memfabric.domain.lifecycle.release_hold`)."""
        return lifecycle.release_hold(self, scope, note_id, requested_by=requested_by)

    def link(self, scope: Scope, from_id: str, to_id: str, *, relation: str,
             weight: float) -> MemoryNote:
        """Add a link edge (see :func:`memfabric.domain.links.link`)."""
        return links.link(self, scope, from_id, to_id, relation=relation, weight=weight)

    def unlink(self, scope: Scope, from_id: str, to_id: str, *, relation: str) -> MemoryNote:
        """Remove a link edge (see :func:`memfabric.domain.links.unlink`)."""
        return links.unlink(self, scope, from_id, to_id, relation=relation)

    def working_value(self, scope: Scope) -> dict[str, Any]:
        """The working value of exactly ``scope`` (see ``Notes.working_value``)."""
        return working.working_value(self.store.working_blocks(scope))

    def get(self, scope: Scope, note_id: str, known_at: datetime | None = None) -> MemoryNote:
        """The note ``note_id`` of ``scope`` (``NoteNotFoundError`` when absent); with
        ``known_at``, as recorded then (issue 31)."""
        return history.get(self.at(known_at), scope, note_id)

    def history(self, scope: Scope, note_id: str) -> list[HistoryEntry]:
        """Every event of the note in version order."""
        return history.history(self, scope, note_id)

    def lineage(self, scope: Scope, note_id: str) -> Lineage:
        """Supersession chain, folds, links and tombstone of a note."""
        return history.lineage(self, scope, note_id)

    def verify_content(self, scope: Scope, note_id: str, text: str) -> bool:
        """Whether ``text`` matches a tombstone's keyed hash."""
        return lifecycle.verify_content(self, scope, note_id, text)


def _filters(tags: Sequence[str], subject: str | None, min_importance: float | None,
             access: AccessFilter | None = None) -> NoteFilter | None:
    if not tags and subject is None and min_importance is None and access is None:
        return None
    return NoteFilter(tags=tuple(tags), subject=subject, min_importance=min_importance, access=access)


def served_by(store: object) -> str | None:
    """Where ``store``'s last read on this thread was served (issue 25): its
    ``last_served_by()`` when it routes reads between servers, else ``None``."""
    where = getattr(store, "last_served_by", None)
    return str(where()) if callable(where) else None
