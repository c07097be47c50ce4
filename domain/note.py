"""The ``Note`` aggregate and its domain events.

Event classes are stored by topic (``memfabric.domain.note:Note.Remembered`` ...), so
this module path and the class names are part of the log format: never rename them
without registering the old topics (``eventsourcing.utils.register_topic``).

Protected fields (``content``, ``context``, ``keywords``, ``embedding``, the ``text``
of appends and a file note's ``path``/``from_path``/``to_path``) are sealed per note
by the storage mapper; see ``memfabric.adapters.crypto`` and ``docs/erasure.md``. The
aggregate itself holds plain values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventsourcing.domain import Aggregate

from memfabric.domain import note_state as state
from memfabric.domain import retention as rules
from memfabric.domain.errors import NoteForgottenError, NotHeldError, RetentionError
from memfabric.domain.inputs import RECALLABLE_KINDS
from memfabric.domain.note_fields import (
    ERASED, OPTIONAL_PROTECTED, PROTECTED_FIELDS, SUCCESSOR_VALUES, note_uuid, replaced_decision,
)
from memfabric.domain.note_state import narrower_consent, vector_for
from memfabric.domain.scope import Scope, stored_scope
from memfabric.domain.shredding import Shredding

__all__ = [
    "ERASED", "LEGAL_HOLD", "OPTIONAL_PROTECTED", "PROTECTED_FIELDS", "SUCCESSOR_VALUES", "Note",
    "narrower_consent", "note_uuid", "replaced_decision", "vector_for",
]

LEGAL_HOLD = "legal_hold"
"""The ``reason`` of a ``Forgotten`` event that puts the note under legal hold: content
and keys kept, never recalled (:meth:`Note.Forgotten.keeps_keys`)."""


class Note(Aggregate):
    """A typed note in a scope; every change is a domain event.

    State (plain, after applying events): scope columns, ``note_id``, ``kind``,
    ``content``, ``path``, ``block``, ``subject``, times, annotations, ``embedding``
    (float32 bytes, ``dim`` and ``embedder_id``), ``supersedes``/``superseded_by``,
    ``importance``, ``consent``, ``fold_count``, ``forgotten``/``held``.
    """

    class Remembered(Aggregate.Created):
        """A note was written for the first time (cause ``caller``)."""

        tenant_id: str
        resource_id: str | None
        thread_id: str | None
        note_id: str
        kind: str
        content: str | None
        path: str | None
        block: str | None
        subject: str | None
        t_ref: datetime | None
        valid_from: datetime | None
        valid_to: datetime | None
        keywords: list[str]
        tags: list[str]
        source_entry_ids: list[str]
        context: str | None
        links: list[dict[str, Any]]
        supersedes: str | None
        importance: float
        consent: dict[str, Any] | None
        embedding: bytes | None
        embedder_id: str | None
        dim: int
        token_count: int
        cause: str
        inferred_subject: dict[str, Any] | None = None
        decision: dict[str, Any] | None = None
        promoted_from: dict[str, Any] | None = None
        """Issue 14: ``{reflection_id, scope_id}`` when the note was promoted from a
        reflection of the conversation ledger (absent in older logs: ``None``)."""
        retention: str | None = None
        """Issue 30: the retention class (absent in older logs: ``None``, read as the
        kind's default, :func:`memfabric.domain.retention.class_of`)."""

    class Folded(Aggregate.Event):
        """The same note was written again: annotations unioned, new content wins, the
        validity window widened to cover both (a bound the write did not give is kept)."""

        content: str | None
        context: str | None
        keywords: list[str]
        tags: list[str]
        source_entry_ids: list[str]
        links: list[dict[str, Any]]
        embedding: bytes | None
        embedder_id: str | None
        token_count: int
        importance: float | None
        consent: dict[str, Any] | None
        t_ref: datetime | None
        valid_from: datetime | None
        valid_to: datetime | None
        cause: str
        decision: dict[str, Any] | None = None

        def apply(self, note: Note) -> None:
            state.fold(note, self)

    class Reembedded(Aggregate.Event):
        """Issue 19: the note's content embedded by another embedder (an embedder
        migration, ``memfabric reembed``). ``embedding`` (float32 bytes, sealed like every
        vector) is kept beside the write-time vector under ``embedder_id`` in
        ``note.vectors``; projections configured for that embedder read it (see
        :func:`vector_for`), so a rebuild never calls an embedder. Every field has a
        default (older logs have no such event)."""

        embedding: bytes | None = None
        embedder_id: str | None = None
        dim: int = 0
        cause: str = "reembed"

        def apply(self, note: Note) -> None:
            if self.embedding is not None and self.embedder_id is not None:
                state.vectors(note)[self.embedder_id] = self.embedding

    class Superseded(Aggregate.Event):
        """A newer note replaced this one: its window closes at ``valid_to``."""

        successor_id: str
        valid_to: datetime
        cause: str
        decision: dict[str, Any] | None = None

        def apply(self, note: Note) -> None:
            note.superseded_by = self.successor_id
            note.supersession = replaced_decision(self.decision)
            if note.valid_to is None or self.valid_to < note.valid_to:
                note.valid_to = self.valid_to
            note.updated_at = self.timestamp

    class Linked(Aggregate.Event):
        """Link edges were added (by a caller or a linker worker)."""

        links: list[dict[str, Any]]
        cause: str

        def apply(self, note: Note) -> None:
            note.links = state.union_links(note.links, self.links)
            note.updated_at = self.timestamp

    class Unlinked(Aggregate.Event):
        """Link edges were removed (``links``: ``{id, relation}`` of each edge)."""

        links: list[dict[str, Any]]
        cause: str

        def apply(self, note: Note) -> None:
            gone = {(link["id"], link.get("relation", "related")) for link in self.links}
            note.links = [link for link in note.links
                          if (link["id"], link.get("relation", "related")) not in gone]
            note.updated_at = self.timestamp

    class Evolved(Aggregate.Event):
        """A worker refined the note's context, keywords or tags (content unchanged).

        The evolution worker (issue 15) writes its patch in ``contributed``
        (``{"keywords": [...], "context": str | None}``) with ``source`` = the aggregate
        id of the note that contributed it: the storage mapper seals ``contributed``
        under the *source's* data key, so forgetting the source makes the patch
        unreadable (it then decodes as ``None`` and applies nothing)."""

        context: str | None
        keywords: list[str]
        tags: list[str]
        cause: str
        source: str | None = None
        contributed: dict[str, Any] | None = None

        def apply(self, note: Note) -> None:
            state.evolve(note, self)

    class Contributed(Aggregate.Event):
        """This note's evolution patches went to the notes ``note_ids`` (same scope);
        forgetting it withdraws them (see :class:`Withdrawn`)."""

        note_ids: list[str]
        cause: str

        def apply(self, note: Note) -> None:
            note.contributed_to = state.union(list(getattr(note, "contributed_to", [])), self.note_ids)
            note.updated_at = self.timestamp

    class Withdrawn(Aggregate.Event):
        """The note that contributed an evolution patch (``source``, an aggregate id)
        was forgotten: the patch's keywords and context leave this note."""

        source: str
        cause: str

        def apply(self, note: Note) -> None:
            state.withdraw(note, self)

    class Repointed(Aggregate.Event):
        """A ``file`` note follows its file to a new path (nothing re-embedded)."""

        from_path: str
        to_path: str
        cause: str

        def apply(self, note: Note) -> None:
            note.path = self.to_path
            note.updated_at = self.timestamp

    class BlockWritten(Aggregate.Event):
        """A ``working`` block's content was replaced."""

        content: str
        token_count: int
        cause: str

        def apply(self, note: Note) -> None:
            note.content = self.content
            note.token_count = self.token_count
            note.forgotten = False
            note.forgotten_at = None
            note.block_version += 1
            note.updated_at = self.timestamp
            note.written_at = self.timestamp
            note.expired_at = None  # a rewritten block is current again

    class BlockAppended(Aggregate.Event):
        """Text was appended to a ``working`` block."""

        text: str
        token_count: int
        cause: str

        def apply(self, note: Note) -> None:
            note.content = (note.content or "") + self.text
            note.token_count = self.token_count
            note.block_version += 1
            note.updated_at = self.timestamp
            note.written_at = self.timestamp
            note.expired_at = None

    class Forgotten(Aggregate.Event, Shredding):
        """The tombstone: content erased (or kept under legal hold), lineage kept.

        ``content_hmac`` is HMAC-SHA256(fabric secret, content) in hex, so an auditor
        holding a candidate text can check it (``verify_content``) while short texts
        cannot be guessed from the log. A shredding event (the unit of work destroys the
        note's keys with it) unless ``reason`` is :data:`LEGAL_HOLD`.
        """

        note_id: str
        kind: str
        tenant_id: str
        resource_id: str | None
        thread_id: str | None
        content_hmac: str | None
        supersedes: str | None
        superseded_by: str | None
        source_entry_ids: list[str]
        link_ids: list[str]
        reason: str
        requested_by: str
        cause: str
        approval: str | None = None
        """Issue 30: the approval reference of a legal erasure before a regulated floor
        (absent in older logs)."""
        retention: str | None = None
        at: datetime | None = None
        """Issue 30: the class and ``now`` of the retention sweep that erased the note (the
        tombstone also expires it at ``at``, unless expired already; older sweeps wrote an
        ``Expired`` event first). ``None``: another erasure, or an older log."""

        def keeps_keys(self) -> bool:
            """A legal hold keeps the content and its keys."""
            return self.reason == LEGAL_HOLD

        def apply(self, note: Note) -> None:
            note.updated_at = self.timestamp
            if self.keeps_keys():
                note.held = True
            else:
                state.erase(note, self)
            if self.at is not None and getattr(note, "expired_at", None) is None:
                state.expire(note, self.at)

    class HoldReleased(Aggregate.Event):
        """A legal hold was lifted: the note is live again (recalled, listed, a fold
        and link candidate). The hold's ``Forgotten`` event stays in the history."""

        requested_by: str
        cause: str

        def apply(self, note: Note) -> None:
            note.held = False
            note.updated_at = self.timestamp

    class RetentionChanged(Aggregate.Event):
        """Issue 30: the note moved to retention class ``retention`` from ``previous``;
        ``approval``: the approval reference that allowed a regulated note into a longer
        class (``None`` otherwise)."""

        retention: str
        previous: str
        requested_by: str
        cause: str
        approval: str | None = None

        def apply(self, note: Note) -> None:
            note.retention = self.retention
            if self.retention == "regulated":
                note.regulated = True
            note.updated_at = self.timestamp

    class Expired(Aggregate.Event):
        """Issue 30: a sweep at ``at`` expired the note: ``reason`` ``interval`` (its
        ``valid_to`` passed) or ``retention`` (its class window closed). From ``at`` on
        it is no longer current (its window closes there: not recalled, never a fold,
        supersession or expansion candidate, no working-value entry) but stays
        readable in ``get``, history, lineage and ``as_of`` reads before ``at``."""

        reason: str
        at: datetime
        retention: str
        cause: str = "sweep"

        def apply(self, note: Note) -> None:
            state.expire(note, self.at)
            note.updated_at = self.timestamp

    class ImportanceDecayed(Aggregate.Event):
        """Issue 30: a sweep at ``at`` lowered the importance of an idle note from
        ``previous`` to ``importance`` (``memfabric.domain.retention.Decay``). Not a
        write: the note's windows and recency do not move."""

        importance: float
        previous: float
        at: datetime

        def apply(self, note: Note) -> None:
            note.importance = self.importance
            note.decayed_at = self.at

    def __init__(  # noqa: PLR0913 - the Remembered event's fields
        self, *, tenant_id: str, resource_id: str | None, thread_id: str | None, note_id: str, kind: str,
        content: str | None, path: str | None, block: str | None, subject: str | None,
        t_ref: datetime | None, valid_from: datetime | None, valid_to: datetime | None,
        keywords: list[str], tags: list[str], source_entry_ids: list[str], context: str | None,
        links: list[dict[str, Any]], supersedes: str | None, importance: float,
        consent: dict[str, Any] | None, embedding: bytes | None, embedder_id: str | None, dim: int,
        token_count: int, cause: str, inferred_subject: dict[str, Any] | None = None,
        decision: dict[str, Any] | None = None, promoted_from: dict[str, Any] | None = None,
        retention: str | None = None,
    ) -> None:
        """The state of a new note from its ``Remembered`` fields (``cause`` is not kept)."""
        self.tenant_id = tenant_id
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.note_id = note_id
        self.kind = kind
        self.content = content
        self.path = path
        self.block = block
        self.subject = subject
        self.t_ref = t_ref
        self.valid_from = valid_from
        self.valid_to = valid_to
        self.keywords = list(keywords)
        self.tags = list(tags)
        self.source_entry_ids = list(source_entry_ids)
        self.context = context
        self.links = list(links)
        self.supersedes = supersedes
        self.superseded_by: str | None = None
        self.importance = importance
        self.consent = consent
        self.embedding = embedding
        self.embedder_id = embedder_id
        self.dim = dim
        self.token_count = token_count
        self.fold_count = 0
        self.block_version = 1 if kind == "working" else 0
        self.updated_at: datetime | None = None
        self.forgotten = False
        self.forgotten_at: datetime | None = None
        self.content_hmac: str | None = None
        self.held = False
        self.inferred_subject = inferred_subject
        self.decision = decision
        self.supersession: dict[str, Any] | None = None
        self.contributions: dict[str, dict[str, Any]] = {}
        self.contributed_to: list[str] = []
        self.vectors: dict[str, bytes] = {}
        self.promoted_from = promoted_from
        self.retention = retention
        self.regulated = retention == "regulated"
        self.written_at: datetime | None = None
        self.expired_at: datetime | None = None
        self.decayed_at: datetime | None = None

    # ------------------------------------------------------------ issue 31
    def collect_events(self) -> Any:
        """eventsourcing's pending events; their type names are also appended to the
        transient ``collected`` list of this in-memory instance (absent on a state
        replayed from the log, never stored), so the note-versions projection
        (:mod:`memfabric.projections.note_versions`) projects a single new event without
        replaying the note."""
        events = super().collect_events()
        self.__dict__.setdefault("collected", []).extend(type(e).__name__ for e in events)
        return events

    # ----------------------------------------------------------------- commands
    @classmethod
    def remember(cls, *, scope: Scope, **fields: Any) -> Note:
        """Create a note; ``fields`` are the ``Remembered`` event's fields (``retention``
        omitted or ``None``: the kind's default class, recorded)."""
        if fields.get("retention") is None:
            fields["retention"] = rules.default_class(fields["kind"], fields.get("promoted_from") is not None)
        return cls._create(
            cls.Remembered,
            id=note_uuid(scope, fields["note_id"]),
            tenant_id=scope.tenant_id,
            resource_id=scope.resource_id,
            thread_id=scope.thread_id,
            **fields,
        )

    @property
    def scope(self) -> Scope:
        """The note's scope (one frozen instance per scope, built without validation: its
        ids were validated when the note was remembered; a write asks for it several
        times, issue 24)."""
        return stored_scope(self.tenant_id, self.resource_id, self.thread_id)

    @property
    def ingested_at(self) -> datetime:
        return self.created_on

    @property
    def live(self) -> bool:
        """Neither forgotten nor held: eligible for recall, folds and links (the link
        graph, consolidation and note-versions rows)."""
        return not self.forgotten and not self.held

    @property
    def erased(self) -> bool:
        """Its content is shredded: a ``Forgotten`` tombstone that is not a legal hold is
        in effect (a working block written again after it is not erased)."""
        return self.forgotten

    @property
    def listed(self) -> bool:
        """Not erased: the note has a note-scope (and retention) row, held or not."""
        return not self.erased

    @property
    def recallable(self) -> bool:
        """A recall-index row: a recallable kind (``RECALLABLE_KINDS``), live (neither
        erased nor held) and with content. Superseded and expired notes stay recallable
        (their windows close, so ``as_of`` reads inside them still find them)."""
        return self.kind in RECALLABLE_KINDS and self.live and self.content is not None

    def _check_live(self) -> None:
        if self.forgotten:
            raise NoteForgottenError(f"note {self.note_id} was forgotten")

    def fold(self, **fields: Any) -> None:
        self._check_live()
        self.trigger_event(self.Folded, **fields)

    def supersede(self, *, successor_id: str, valid_to: datetime, cause: str,
                  decision: dict[str, Any] | None = None) -> None:
        self._check_live()
        self.trigger_event(
            self.Superseded, successor_id=successor_id, valid_to=valid_to, cause=cause,
            decision=replaced_decision(decision),
        )

    def link(self, links: list[dict[str, Any]], cause: str = "caller") -> None:
        self._check_live()
        self.trigger_event(self.Linked, links=links, cause=cause)

    def evolve(
        self, *, context: str | None, keywords: list[str], tags: list[str], cause: str
    ) -> None:
        self._check_live()
        self.trigger_event(
            self.Evolved, context=context, keywords=keywords, tags=tags, cause=cause
        )

    def unlink(self, links: list[dict[str, Any]], cause: str = "caller") -> None:
        self._check_live()
        self.trigger_event(self.Unlinked, links=links, cause=cause)

    def contribute(self, *, source: Note, patch: dict[str, Any], cause: str) -> None:
        """An evolution patch from ``source`` (sealed under its key, see ``Evolved``)."""
        self._check_live()
        self.trigger_event(self.Evolved, context=None, keywords=[], tags=[], cause=cause,
                           source=str(source.id), contributed=patch)

    def record_contributions(self, note_ids: list[str], cause: str) -> None:
        self._check_live()
        self.trigger_event(self.Contributed, note_ids=note_ids, cause=cause)

    def withdraw(self, *, source: Note, cause: str) -> None:
        """Drop what ``source`` contributed (it is being forgotten)."""
        if self.forgotten or str(source.id) not in state.contributions(self):
            return
        self.trigger_event(self.Withdrawn, source=str(source.id), cause=cause)

    def repoint(self, *, to_path: str, cause: str = "caller") -> None:
        self._check_live()
        self.trigger_event(
            self.Repointed, from_path=self.path or "", to_path=to_path, cause=cause
        )

    def write_block(self, *, content: str, token_count: int, cause: str = "caller") -> None:
        self.trigger_event(self.BlockWritten, content=content, token_count=token_count, cause=cause)

    def append_block(self, *, text: str, token_count: int, cause: str = "caller") -> None:
        self._check_live()
        self.trigger_event(self.BlockAppended, text=text, token_count=token_count, cause=cause)

    def forget(
        self, *, content_hmac: str | None, reason: str, requested_by: str, cause: str = "caller",
        approval: str | None = None, retention: str | None = None, at: datetime | None = None,
    ) -> None:
        """``Forgotten`` (``retention``, ``at``: a retention sweep's class and ``now``)."""
        self._check_live()
        self.trigger_event(
            self.Forgotten,
            note_id=self.note_id,
            kind=self.kind,
            tenant_id=self.tenant_id,
            resource_id=self.resource_id,
            thread_id=self.thread_id,
            content_hmac=content_hmac,
            supersedes=self.supersedes,
            superseded_by=self.superseded_by,
            source_entry_ids=list(self.source_entry_ids),
            link_ids=[link["id"] for link in self.links],
            reason=reason,
            requested_by=requested_by,
            cause=cause,
            approval=approval, retention=retention, at=at,
        )

    def reembed(self, *, embedding: bytes, embedder_id: str, dim: int, cause: str = "reembed") -> None:
        """Record the content's vector under another embedder (``Reembedded``);
        ``NoteForgottenError`` for a forgotten note (its content is erased)."""
        self._check_live()
        self.trigger_event(self.Reembedded, embedding=embedding, embedder_id=embedder_id,
                           dim=dim, cause=cause)

    def change_retention(self, *, retention: str, requested_by: str, approval: str | None = None,
                         cause: str = "caller") -> None:
        """Move the note to class ``retention`` (``RetentionChanged``). A note with the
        regulated label moving into a longer class (``retention.RANK``) needs
        ``approval`` (else ``RetentionError``); ``NoteForgottenError`` for a forgotten
        note. The same class again changes nothing."""
        self._check_live()
        previous = rules.class_of(self)
        if retention == previous:
            return
        longer = rules.RANK[retention] > rules.RANK[previous]
        if longer and rules.regulated_label(self) and not approval:
            raise RetentionError(
                f"retention: note {self.note_id} carries the regulated label; moving it from "
                f"{previous!r} to the longer class {retention!r} needs an approval reference: "
                f"notes.set_retention({self.note_id!r}, {retention!r}, approval=...)")
        self.trigger_event(self.RetentionChanged, retention=retention, previous=previous,
                           requested_by=requested_by, cause=cause,
                           approval=approval if longer and rules.regulated_label(self) else None)

    def expire(self, *, reason: str, at: datetime, cause: str = "sweep") -> None:
        """Record that the note expired at ``at`` (``Expired``); ``NoteForgottenError``
        for a forgotten note."""
        self._check_live()
        self.trigger_event(self.Expired, reason=reason, at=at, retention=rules.class_of(self), cause=cause)

    def decay_importance(self, *, importance: float, at: datetime) -> None:
        """Lower the importance to ``importance`` (``ImportanceDecayed``, a sweep at
        ``at``); ``NoteForgottenError`` for a forgotten note."""
        self._check_live()
        self.trigger_event(self.ImportanceDecayed, importance=importance, previous=self.importance, at=at)

    def release_hold(self, *, requested_by: str, cause: str = "caller") -> None:
        """Lift the legal hold (``NoteForgottenError`` for a forgotten note,
        ``NotHeldError`` for one that is not held)."""
        self._check_live()
        if not self.held:
            raise NotHeldError(f"note {self.note_id} is not under legal hold")
        self.trigger_event(self.HoldReleased, requested_by=requested_by, cause=cause)

