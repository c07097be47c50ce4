"""Read models: what the fabric's calls return (frozen dataclasses).

:class:`MemoryNote` is a note as read back (never the ``Note`` aggregate itself);
:class:`RecallResult` pairs ranked hits with :class:`Explain` rows; the rest report the
outcome of lifecycle calls and the history of a note.
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from memfabric.domain import retention
from memfabric.domain.note import Note
from memfabric.domain.scope import Scope

Outcome = Literal[
    "inserted", "folded", "superseding", "preceding", "replaced", "appended", "recalled", "read",
    "linked", "unlinked", "listed", "released", "retained",
]
"""What a call did to or with a note: ``remember`` gives ``inserted``, ``folded``,
``superseding`` or ``preceding`` (working blocks ``inserted``, ``replaced`` or
``appended``); ``recall`` gives ``recalled``; ``get`` gives ``read``; ``link``/``unlink`` give
``linked``/``unlinked`` (the source note); ``list`` gives ``listed``; ``release_hold`` gives
``released``; ``set_retention`` gives ``retained``."""


@dataclass(frozen=True, slots=True)
class Link:
    """A typed edge from a note to another note of its scope: ``id`` (12 hex),
    ``relation`` (e.g. ``related``) and ``weight`` in [0, 1]."""

    id: str
    relation: str = "related"
    weight: float = 1.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Link:
        return cls(id=str(raw["id"]), relation=str(raw.get("relation", "related")),
                   weight=float(raw.get("weight", 1.0)))


Visibility = Literal["thread", "resource", "tenant"]


@dataclass(frozen=True, slots=True)
class ConsentInfo:
    """A note's consent as stored: ``visibility`` (who may see it), ``granted``
    (``None`` when unknown) and ``purposes`` (free labels)."""

    visibility: Visibility = "thread"
    granted: bool | None = None
    purposes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | str | None) -> ConsentInfo | None:
        """The consent of a recall-index row: its ``consent`` as a mapping or as JSON
        text (what the recall statement returns), ``None`` when it has none."""
        if raw is None:
            return None
        if isinstance(raw, str):
            raw = json.loads(raw)
            assert isinstance(raw, dict)
        return cls(visibility=raw.get("visibility", "thread"), granted=raw.get("granted"),
                   purposes=tuple(raw.get("purposes") or ()))


@dataclass(frozen=True, slots=True)
class MemoryNote:
    """A note as read back from the fabric: the read model callers receive (the
    event-sourced aggregate is :class:`memfabric.domain.note.Note`).

    Times are timezone-aware UTC datetimes; ``token_count`` is the estimate of
    ``memfabric.domain.policy.count_tokens``.
    """

    id: str
    kind: str
    content: str | None
    scope: Scope
    ingested_at: datetime
    token_count: int
    path: str | None = None
    block: str | None = None
    subject: str | None = None
    t_ref: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    keywords: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    source_entry_ids: tuple[str, ...] = ()
    context: str | None = None
    links: tuple[Link, ...] = ()
    supersedes: str | None = None
    superseded_by: str | None = None
    importance: float = 0.5
    consent: ConsentInfo | None = None
    version: int = 1
    fold_count: int = 0
    updated_at: datetime | None = None
    forgotten: bool = False
    held: bool = False
    outcome: Outcome = "inserted"
    forgotten_at: datetime | None = None
    retention: str = "durable"
    """Issue 30: the retention class (:mod:`memfabric.domain.retention`)."""
    expired_at: datetime | None = None
    """Issue 30: when a sweep expired the note (``None``: not expired)."""
    decision: dict[str, Any] | None = None
    """Why this write folded or superseded (``basis``: ``exact_repeat``, ``path``,
    ``explicit_subject``, ``inferred_subject`` with ``subject_key``/``old_value``/
    ``new_value``/``decision_rule``/``extraction_rules``, or ``caller_supersedes``);
    ``None`` for a plain insert."""
    promoted_from: dict[str, Any] | None = None
    """Issue 14/27: ``{reflection_id, scope_id}`` of the ledger reflection a promoted
    note came from (``remember(..., reflection_id=R)``, ``get``, ``history`` readers),
    ``None`` for any other note. Recall hits and ``list`` items (read from the recall
    index) leave it ``None``; ``get(id)`` has it."""


@dataclass(frozen=True, slots=True)
class Explain:
    """Why a hit ranked where it did; ``explain[i]`` describes ``hits[i]``.

    ``score`` = relevance + recency_weight·recency + importance_weight·importance. The components of ``relevance`` (in [0, 1]): ``similarity``,
    the cosine similarity of note and query in [-1, 1] (``None`` in ``lexical`` mode);
    ``lexical``, the note's full-text score (sum of the IDF of the query terms it
    contains) divided by the best one among the candidates, in [0, 1] (0 when no term
    matches, ``None`` in ``vector`` mode). In ``hybrid`` mode with the default
    ``convex`` fusion ``relevance = w·max(0, similarity) + (1-w)·lexical`` with ``w``
    the vector weight; ``vector`` mode uses ``max(0, similarity)``, ``lexical`` mode
    ``lexical``. ``vector_rank`` and ``lexical_rank`` are 1-based ranks in the two
    candidate lists (``None`` outside a list); ``recency`` in (0, 1]; ``importance`` in [0, 1];
    ``link`` is True for a hit added by 1-hop link expansion (issue 15; it was a float,
    always 0.0, before) and ``link_score`` its link term ``link_weight · max(edge weight ·
    relevance of the linked direct hit)``
    (0.0 otherwise; formula in :mod:`memfabric.domain.ranking`); ``valid`` is the note's window ``(valid_from, valid_to)``.
    """

    id: str
    score: float
    similarity: float | None
    recency: float
    importance: float
    link: bool
    valid: tuple[datetime | None, datetime | None]
    relevance: float = 0.0
    lexical: float | None = None
    vector_rank: int | None = None
    lexical_rank: int | None = None
    link_score: float = 0.0
    entity: str | None = None
    """Issue 32: the entity the hit is about, in a ``recall(entity=...)`` (else ``None``)."""


@dataclass(frozen=True, slots=True)
class RecallResult:
    """Ranked ``hits`` and the parallel ``explain`` rows (same length, same order)."""

    hits: list[MemoryNote] = field(default_factory=list)
    explain: list[Explain] = field(default_factory=list)
    served_by: str | None = None
    """Issue 25: the server that answered (``"primary"``, ``"replica:<host>:<port>"``);
    ``None`` for a store without replicas' routing (the in-memory one)."""


@dataclass(frozen=True, slots=True)
class NotePage:
    """One page of ``Notes.list``: ``items`` in ``(ingested_at, id)`` order and
    ``next_cursor`` (opaque; ``None`` on the last page)."""

    items: list[MemoryNote] = field(default_factory=list)
    next_cursor: str | None = None
    served_by: str | None = None
    """Issue 25: like ``RecallResult.served_by``."""


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """Outcome of ``forget``: ``deleted`` is 1 for a tombstoned note or block, 0 when
    held or when no such note is in this scope; ``held`` tells a legal hold."""

    id: str | None
    block: str | None
    deleted: int
    held: bool


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One event of a note's history: ``version`` (1-based), ``type`` (event class
    name), ``timestamp`` (UTC), ``cause`` (``caller``, ``fold``, ``supersession:<id>``,
    ``forget`` ...) and the decoded ``fields`` (an ``embedding`` stays float32 bytes).
    Once the note's key is destroyed every protected field of the event reads
    ``"<erased>"`` and ``erased`` names them (empty while the content is readable).

    Both times (issue 31): ``timestamp`` is the transaction time (when the log recorded
    the event; ``recorded_at`` names it too); ``valid_from`` / ``valid_to`` the valid
    time, the note's validity window after the event (``None``: open)."""

    version: int
    type: str
    timestamp: datetime
    cause: str
    fields: dict[str, Any]
    erased: tuple[str, ...] = ()
    valid_from: datetime | None = None
    valid_to: datetime | None = None

    @property
    def recorded_at(self) -> datetime:
        """When the log recorded the event (transaction time): ``timestamp``."""
        return self.timestamp


@dataclass(frozen=True, slots=True)
class Lineage:
    """Supersession chain and fold/link facts of one note.

    ``predecessors``: ids this note replaced, nearest first; ``successors``: ids that
    replaced it, nearest first; ``folds``: timestamps of ``Folded`` events; ``links``:
    link edges ``{id, relation, weight}``; ``tombstone``: the ``Forgotten`` event's
    fields when the note was forgotten or held, else ``None``; ``chain``: one row per
    note of the chain, oldest first (``id``, ``valid_from``, ``valid_to`` — valid time —,
    ``ingested_at`` and ``recorded_at`` — transaction time: its first and its latest
    event's recorded time (issue 31) —, ``version``, ``forgotten``, ``held``,
    ``content``, ``folds``)."""

    id: str
    predecessors: list[str]
    successors: list[str]
    folds: list[datetime]
    links: list[dict[str, Any]]
    tombstone: dict[str, Any] | None
    chain: list[dict[str, Any]] = field(default_factory=list)
    promoted_from: dict[str, Any] | None = None
    """Issue 14: ``{reflection_id, scope_id}`` of the ledger reflection this note was
    promoted from (``None`` otherwise)."""


@dataclass(frozen=True, slots=True)
class NoteCounts:
    """Notes by state (issue 27), so that every count says what it counts: ``live``
    (neither superseded, held nor forgotten: what ``Notes.count()`` counts),
    ``superseded`` (replaced by a successor; ``count(include_superseded=True)`` adds
    them), ``held`` (under legal hold: kept, never recalled or listed) and
    ``forgotten`` (tombstoned)."""

    live: int = 0
    superseded: int = 0
    held: int = 0
    forgotten: int = 0


@dataclass(frozen=True, slots=True)
class EraseResult:
    """Exact counts of one ``erase_scope`` call over the scope prefix
    ``(tenant_id, resource_id, thread_id)`` (``None`` = every resource / thread).

    ``deleted``: notes tombstoned and crypto-shredded by this call; ``held``: notes this
    call put under legal hold (``hold=True``); ``already_held``: notes found under an
    earlier hold and left as they are (content kept; they are still in the prefix after
    the call); ``remaining``: un-forgotten notes, live or superseded, neither held nor
    erased after the call (0 unless notes were written into the scope while it was
    erased: run it again; held notes are not counted here but in ``found.held`` and
    ``held``); ``batches``: write transactions used.
    ``unreadable``: ids of notes (counted in ``deleted``/``held``) whose content could
    not be decrypted (key fault or changed bytes): tombstoned without a content hash,
    with cause ``key_fault``, their keys destroyed; ``failed``: ids of notes that could
    not be tombstoned at all (their events cannot be decoded; counted in ``remaining``)."""

    tenant_id: str
    resource_id: str | None
    thread_id: str | None
    deleted: int
    held: int
    already_held: int
    remaining: int
    batches: int
    unreadable: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    conversations: int = 0
    """Issue 14: conversation ledgers of the prefix's threads erased (crypto-shredded)."""
    floor_kept: int = 0
    """Issue 30: regulated notes kept because their floor has not passed (no approval
    reference given); counted in ``remaining``."""
    found: NoteCounts = field(default_factory=NoteCounts)
    """Issue 27: the un-forgotten notes the call found in the prefix, by state: ``live``
    and ``superseded`` (both erased, or held with ``hold=True``: ``deleted + held ==
    found.live + found.superseded`` unless some ``failed``), ``held`` (under an earlier
    hold: ``already_held``, kept) and ``forgotten`` (tombstoned by this call:
    ``deleted``). ``Notes.count()`` counts only the live ones."""
    left: NoteCounts = field(default_factory=NoteCounts)
    """Issue 27: the prefix after the call, by state, as ``Notes.counts()`` answers it:
    ``live + superseded == remaining``, ``held`` (every held note, kept), ``forgotten``
    (every tombstone of the prefix, earlier erasures included)."""


@dataclass(frozen=True, slots=True)
class PathForgetResult:
    """Outcome of ``Notes.delete_path``: ids of the ``file`` notes recorded against
    ``path`` that were tombstoned (``deleted``) or are under legal hold (``held``:
    put on hold by this call or kept under an earlier hold)."""

    path: str
    deleted: tuple[str, ...]
    held: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RepointResult:
    """Outcome of ``Notes.repoint``: ids of the ``file`` notes moved from
    ``from_path`` to ``to_path`` (``repointed``) and of held notes on ``from_path``
    that stay where the hold froze them (``held``)."""

    from_path: str
    to_path: str
    repointed: tuple[str, ...]
    held: tuple[str, ...]


def note_view(note: Note, outcome: Outcome = "inserted", *,
              decision: dict[str, Any] | None = None) -> MemoryNote:
    """The read model of a ``Note`` aggregate's current state."""
    return MemoryNote(
        id=note.note_id,
        kind=note.kind,
        content=note.content,
        scope=note.scope,
        ingested_at=note.created_on,
        token_count=note.token_count,
        path=note.path,
        block=note.block,
        subject=note.subject,
        t_ref=note.t_ref,
        valid_from=note.valid_from,
        valid_to=note.valid_to,
        keywords=tuple(note.keywords),
        tags=tuple(note.tags),
        source_entry_ids=tuple(note.source_entry_ids),
        context=note.context,
        links=tuple(Link.from_dict(link) for link in note.links),
        supersedes=note.supersedes,
        superseded_by=note.superseded_by,
        importance=note.importance,
        consent=ConsentInfo.from_dict(note.consent),
        version=note.version,
        fold_count=note.fold_count,
        updated_at=note.updated_at,
        forgotten=note.forgotten,
        held=note.held,
        outcome=outcome,
        forgotten_at=note.forgotten_at,
        retention=retention.class_of(note),
        expired_at=retention.expired_at(note),
        decision=decision if decision is not None else getattr(note, "decision", None),
        promoted_from=getattr(note, "promoted_from", None),
    )
