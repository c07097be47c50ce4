"""Public input models (pydantic v2) of the memory fabric.

They validate everything a caller passes, reject unknown fields and accept camelCase
aliases (``validFrom``, ``sourceEntryIds`` ...). Read models (what calls return) are in
:mod:`memfabric.domain.results`.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    Strict,
    AfterValidator,
    StrictBool,
    StrictStr,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from memfabric.domain.retention import RetentionClass
from memfabric.domain.scope import ScopeId

Kind = Literal["fact", "procedure", "file", "working", "episode"]
RECALLABLE_KINDS: tuple[str, ...] = ("fact", "procedure", "file")
RecallMode = Literal["hybrid", "vector", "lexical"]
NOTE_ID_RE = re.compile(r"^[0-9a-f]{12}$")


def block_id_mark(prefix: str) -> str:
    """The 4 hex digits that end a working block's note id after its 8-hex ``prefix``
    (issue 27): BLAKE2b of the prefix, so whether an id is a block's is a property of
    the id alone (:func:`is_block_id`)."""
    return hashlib.blake2b(b"mf-block-id#" + prefix.encode(), digest_size=2).hexdigest()


def is_block_id(note_id: str) -> bool:
    """Whether ``note_id`` has the form of a working block's derived id (1 in 65,536
    12-hex ids does). No explicit id of another kind may take one (the input is
    refused), and generated ids never do (:func:`fresh_id`), so a label's block id is
    never taken by a fact."""
    return len(note_id) == 12 and block_id_mark(note_id[:8]) == note_id[8:]


def fresh_id() -> str:
    """A random 12-hex id (``uuid4``) that is not of a block id's form."""
    while True:
        candidate = uuid.uuid4().hex[:12]
        if not is_block_id(candidate):
            return candidate
BLOCK_LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

NoteId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]
BlockLabel = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
NonEmpty = Annotated[str, StringConstraints(min_length=1, max_length=512, strip_whitespace=True)]
FLOAT32_MIN_NORMAL = 1.1754943508222875e-38
"""The smallest positive normal float32: the recall index stores weights as ``real``,
so a smaller non-zero value would underflow there."""


def _not_tiny(value: float) -> float:
    if value != 0.0 and abs(value) < FLOAT32_MIN_NORMAL:
        raise ValueError(f"must be 0 or at least {FLOAT32_MIN_NORMAL:.8g} (too small to store)")
    return value


Unit = Annotated[float, Strict(), Field(ge=0.0, le=1.0), AfterValidator(_not_tiny)]
"""A number in [0, 1] (an int or float; never a string or a bool)."""

MIN_INSTANT = datetime(1, 1, 1, tzinfo=timezone.utc)
MAX_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


def _utc_in_range(value: datetime) -> datetime:
    """Reject an instant whose UTC value falls outside years 1-9999 (PostgreSQL would
    store it, but no reader could turn it back into a ``datetime``)."""
    try:
        value.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise ValueError("must lie within years 1-9999 in UTC") from None
    return value


def _no_epoch(value: object) -> object:
    """Refuse a number, or a string of one, where an instant is expected: pydantic would
    read it as Unix seconds, so ``as_of=5`` or ``known_at="2026"`` (a year, meant) would
    silently mean 1970."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError("give a timezone-aware datetime or an ISO 8601 time, not a number")
    if isinstance(value, str) and value.strip().lstrip("+-").replace(".", "", 1).isdigit():
        raise ValueError(f"{value!r} is a number, not an ISO 8601 time (e.g. 2026-01-31T12:00:00Z)")
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_no_epoch), AfterValidator(_utc_in_range)]
"""A timezone-aware datetime (or an ISO 8601 time with a zone) whose UTC value lies
within years 1-9999; numbers (Unix seconds to pydantic) are refused."""

DEFAULT_MAX_ENTRY_TEXT_CHARS = 8000

WORKING_FIELDS = frozenset({"kind", "block", "content"})
"""The only fields a ``working`` note accepts (its id is derived from the block label)."""


MAX_NESTING = 32
"""Deepest nesting of lists, tuples and dicts an input may have."""


def reject_nul(value: Any, _depth: int = 0) -> Any:
    """Raise ``ValueError`` when a string (or a string inside a list, tuple or dict)
    holds a NUL character, which PostgreSQL text cannot store, when containers nest
    deeper than :data:`MAX_NESTING` (checked before any recursion can overflow), or for
    ``bytes``: no public input is binary, and pydantic would decode them into text."""
    if isinstance(value, bytes | bytearray | memoryview):
        raise ValueError("must be text (str), not bytes: decode it first")
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("must not contain NUL (\\x00) characters")
    elif isinstance(value, list | tuple | dict):
        if _depth >= MAX_NESTING:
            raise ValueError(f"must not nest lists or objects more than {MAX_NESTING} deep")
        if isinstance(value, dict):
            for key, item in value.items():
                reject_nul(key, _depth + 1)
                reject_nul(item, _depth + 1)
        else:
            for item in value:
                reject_nul(item, _depth + 1)
    return value


class _Input(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return reject_nul(value)


class Link(_Input):
    """A typed edge to another note in the same scope: ``{id, relation?, weight?}``.

    ``weight`` is in [0, 1] (default 1.0); ``relation`` is a short label such as
    ``"related"`` (default) or ``"derived_from"``.
    """

    id: NoteId
    relation: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "related"
    weight: Unit = 1.0


class Consent(_Input):
    """Who may see a note and whether its use was granted.

    ``visibility``: ``thread`` (only the note's own scope), ``resource`` (every thread
    of the note's resource and the user-level scope ``(tenant, resource)``) or
    ``tenant`` (the whole tenant); ``None`` (default): the kind's default, ``resource``
    for ``fact`` and ``procedure``, ``thread`` for ``file``
    (:data:`memfabric.domain.visibility.DEFAULT_VISIBILITY`), stored explicitly.
    ``granted``: ``None`` when unknown; with ``require_consent=True`` on the fabric
    only notes with ``granted=True`` are recalled. ``purposes``: free labels.
    """

    visibility: Literal["thread", "resource", "tenant"] | None = None
    granted: bool | None = None
    purposes: list[NonEmpty] = Field(default_factory=list, max_length=32)


class RememberInput(_Input):
    """What ``Notes.remember(**fields)`` accepts (snake_case, camelCase aliases accepted).

    - ``kind``: ``fact | procedure | file | working | episode``.
    - ``id``: 12 lowercase hex characters; random when omitted; an existing id is never
      overwritten (``NoteExistsError``). Not allowed for ``working`` notes.
    - ``content``: non-empty, at most ``limits.max_entry_text_chars`` characters
      (default 8000); for ``file`` it defaults to ``path``.
    - ``path``: required for ``file`` notes (1-1024 chars), rejected for other kinds.
    - ``block``: the label of a ``working`` block, ``[a-z0-9][a-z0-9._-]{0,63}``; a
      ``working`` note takes only ``kind``, ``block`` and ``content`` (any other field,
      ``id`` included, is rejected).
    - ``t_ref`` / ``valid_from`` / ``valid_to``: timezone-aware datetimes;
      ``valid_from`` is inclusive, ``valid_to`` exclusive, ``valid_to > valid_from``.
    - ``keywords`` / ``tags`` / ``source_entry_ids``: lists of non-empty strings.
    - ``context``: free text about the note (sealed like content).
    - ``links``: list of :class:`Link`.
    - ``supersedes``: the id of a note in the same scope this one replaces.
    - ``subject``: a short key (1-200 chars); notes with the same subject fold or
      supersede by subject equality instead of by similarity.
    - ``importance``: in [0, 1] (default 0.5 when omitted).
    - ``consent``: :class:`Consent`.
    - ``retention``: ``ephemeral | operational | durable | regulated`` (issue 30;
      default: the kind's, :func:`memfabric.domain.retention.default_class`); a fold
      naming another class moves the note there (a ``RetentionChanged`` event, under
      the rules of ``Notes.set_retention``: ``RetentionError`` for a regulated note into
      a longer class), one that names none keeps the note's class.
    """

    kind: Kind
    id: NoteId | None = None
    content: Annotated[str, StringConstraints(min_length=1)] | None = None
    path: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    block: BlockLabel | None = None
    t_ref: Instant | None = None
    valid_from: Instant | None = None
    valid_to: Instant | None = None
    keywords: list[NonEmpty] = Field(default_factory=list, max_length=64)
    tags: list[NonEmpty] = Field(default_factory=list, max_length=64)
    source_entry_ids: list[NonEmpty] = Field(default_factory=list, max_length=256)
    context: Annotated[str, StringConstraints(min_length=1)] | None = None
    links: list[Link] = Field(default_factory=list, max_length=64)
    supersedes: NoteId | None = None
    subject: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    importance: Unit | None = None
    consent: Consent | None = None
    retention: RetentionClass | None = None

    @field_validator("content", "context")
    @classmethod
    def _cap_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("must not be blank")
        limit = (info.context or {}).get("max_entry_text_chars", DEFAULT_MAX_ENTRY_TEXT_CHARS)
        if len(value) > limit:
            raise ValueError(f"is {len(value)} characters; the limit is {limit}")
        return value

    @model_validator(mode="after")
    def _check_kind_rules(self) -> RememberInput:
        if self.kind == "file":
            if self.path is None:
                raise ValueError("path: required for kind 'file'")
        elif self.path is not None:
            raise ValueError(f"path: only allowed for kind 'file', not {self.kind!r}")
        if self.kind == "working":
            if self.block is None:
                raise ValueError("block: required for kind 'working'")
            if self.id is not None:
                raise ValueError("id: a working note's id is derived from its block label")
            extra = sorted(self.model_fields_set - WORKING_FIELDS)
            if extra:
                raise ValueError(f"{extra[0]}: not allowed for kind 'working'")
        elif self.block is not None:
            raise ValueError(f"block: only allowed for kind 'working', not {self.kind!r}")
        elif self.id is not None and is_block_id(self.id):
            raise ValueError(f"id: {self.id} has the form reserved for working-memory block ids "
                             "(1 in 65,536 ids has it); choose another id")
        if self.content is None and self.kind != "file":
            raise ValueError("content: required")
        if self.valid_from and self.valid_to and self.valid_to <= self.valid_from:
            raise ValueError("valid_to: must be later than valid_from")
        if self.id is not None and self.supersedes == self.id:
            raise ValueError("supersedes: a note cannot supersede itself")
        return self

    @property
    def text(self) -> str:
        """The content to store (``path`` for a file note without content)."""
        return self.content if self.content is not None else (self.path or "")


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _recall_kinds(value: Any) -> Any:
    if isinstance(value, str):
        value = (value,)
    if value is not None and len(value) == 0:
        raise ValueError("must name at least one kind")
    return tuple(dict.fromkeys(value)) if value is not None else value


QueryText = Annotated[
    str, StringConstraints(min_length=1, max_length=8000), AfterValidator(_not_blank)
]
"""A recall query: 1-8000 characters, not blank."""
RecallKinds = Annotated[
    tuple[Literal["fact", "procedure", "file", "episode"], ...], BeforeValidator(_recall_kinds)
]
"""A non-empty subset of the recallable kinds (a single string is accepted); ``episode``
(issue 14: observations of the thread's conversation ledger) only when named."""
TopK = Annotated[int, Strict(), Field(ge=1, le=1000)]  # strict: "5" and True are refused, as for importance
Budget = Annotated[int, Strict(), Field(ge=1, le=1_000_000)]


class BlockRef(_Input):
    """A working block named by its label: ``block`` matches ``[a-z0-9][a-z0-9._-]{0,63}``."""

    block: BlockLabel


class AppendBlockInput(BlockRef):
    """What ``Notes.append_block(block, text, expected_version=None)`` accepts.

    - ``text``: non-blank; the stored block (with the separating newline) must stay
      within ``limits.max_entry_text_chars``.
    - ``expected_version``: when given (>= 0), the append only lands if the block's
      version is still this one, else ``ConflictError``: the ``version`` that
      ``working_value()`` shows for the block, or 0 when the block is not in it (never
      written, or forgotten).
    """

    text: Annotated[str, StringConstraints(min_length=1), AfterValidator(_not_blank)]
    expected_version: Annotated[int, Field(ge=0)] | None = None


class Scoring(_Input):
    """Re-ranking weights for recall (see ``memfabric.domain.policy.score``).

    ``recency_weight`` (default 0.01) and ``importance_weight`` (default 0.01) are
    non-negative; ``half_life`` (default 30 days) is the age at which recency is 0.5.
    Both bonuses are in [0, 1] times their weight, so their sum is the **bonus margin**
    ``recency_weight + importance_weight`` (default 0.02, see
    :func:`memfabric.domain.policy.score`): a note whose relevance is higher by more
    than it always ranks above, whatever the two notes' ages and importances (issue 29;
    0.1 each before, which let importance 0.9 lift "project kiwi9 budget" above "Alice moved
    from Paris to Berlin" for "where does Alice live?", a relevance gap of 0.033).

    Hybrid relevance (``mode="hybrid"``): ``fusion`` is ``convex`` (default: the
    weighted sum ``w·max(0, cos) + (1-w)·lexical``, see
    ``memfabric.domain.policy.convex_relevance``) or ``rrf`` (weighted reciprocal rank
    fusion of the two lists). ``vector_weight`` ``w`` in [0, 1] defaults to the
    embedder's ``vector_weight`` (0.2 for the hash embedder, 0.5 for a semantic model).
    """

    recency_weight: Annotated[float, Field(ge=0.0, le=10.0)] = 0.01
    importance_weight: Annotated[float, Field(ge=0.0, le=10.0)] = 0.01
    half_life: timedelta = timedelta(days=30)
    vector_weight: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    fusion: Literal["convex", "rrf"] = "convex"
    link_weight: Annotated[float, Field(ge=0.0, le=10.0)] = 0.7
    """Weight of the link term (issue 15) of a hit added by link expansion or of a list
    candidate linked to a seed hit: its score gains ``link_weight · max(edge weight ·
    relevance of the linked seed hit)`` (see ``memfabric.domain.ranking``). Default 0.7
    (0.5 before the list candidates had a link term; 0.7 measured best on LoCoMo dev with
    the shared-term linker, README "Measured")."""

    @field_validator("half_life")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive")
        return value


class RecallInput(_Input):
    """What ``Notes.recall(query, ...)`` accepts.

    - ``query``: non-empty text (at most 8000 characters); never echoed back.
    - ``kinds``: non-empty subset of ``fact, procedure, file, episode`` (default ``fact, file``).
    - ``as_of``: timezone-aware instant; notes whose window ``[valid_from, valid_to)``
      does not contain it are omitted (default: now, or ``known_at`` when given).
    - ``known_at`` (issue 31): timezone-aware instant; recall what the fabric had
      recorded at that time (transaction time, ``docs/bitemporal.md``; default: now).
    - ``top_k``: 1-1000 (default 10).
    - ``budget``: 1-1,000,000 tokens; the best hit is always returned and ranking stops
      at the first hit that would not fit.
    - ``mode``: ``hybrid`` (default), ``vector`` or ``lexical``.
    - ``expand_links``: add up to ``top_k`` notes linked to the candidates (default
      True; issue 15).
    - ``tags`` (the note carries every one), ``subject`` (equal), ``min_importance``
      (in [0, 1]): filters applied inside the recall query.
    - ``min_relevance``: in [0, 1], default :data:`DEFAULT_MIN_RELEVANCE`; a hit whose
      evidence (see ``memfabric.domain.ranking``) is below it is dropped, so
      ``top_k`` is never padded with notes sharing nothing with the query. 0 disables.
      The floor applies to direct hits; a note added by link expansion is admitted by
      its link score (its own evidence for the query may be low).
    """

    query: QueryText
    kinds: RecallKinds = ("fact", "file")
    as_of: Instant | None = None
    known_at: Instant | None = None
    top_k: TopK = 10
    budget: Budget | None = None
    scoring: Scoring | None = None
    mode: RecallMode = "hybrid"
    expand_links: StrictBool = True
    tags: list[NonEmpty] = Field(default_factory=list, max_length=64)
    subject: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    min_importance: Unit | None = None
    min_relevance: Unit = 0.05


DEFAULT_MIN_RELEVANCE = 0.05
"""Default relevance floor of recall and of the context provider."""


class ContextOptions(_Input):
    """What ``Notes.context_provider(...)`` accepts.

    - ``include_working`` (default True): one ``working-memory`` block per live working
      block of the scope, in label order.
    - ``include_semantic`` (default True): one ``semantic-memory`` block per recalled
      note, in rank order, under exactly the rules of ``recall`` (``kinds``, ``as_of``,
      ``known_at``, ``top_k``, ``budget``, ``min_relevance``: same types, defaults and
      limits as :class:`RecallInput`).
    - ``query``: the query used when a call gives none (no user message either); with
      no query at all a call returns no semantic blocks.
    """

    include_working: bool = True
    include_semantic: bool = True
    query: QueryText | None = None
    kinds: RecallKinds = ("fact", "file")
    as_of: Instant | None = None
    known_at: Instant | None = None
    top_k: TopK = 10
    budget: Budget | None = None
    min_relevance: Unit = DEFAULT_MIN_RELEVANCE


class Limits(BaseModel):
    """Size limits: ``max_entry_text_chars`` (default 8000) caps content, context and
    working blocks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_entry_text_chars: int = Field(default=DEFAULT_MAX_ENTRY_TEXT_CHARS, ge=1, le=1_000_000)


Requester = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
"""Who asked for a forget or an erasure (recorded in the tombstone): 1-200 characters."""

FilePath = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
"""A file note's path: 1-1024 characters."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return reject_nul(value)


class EraseScopeInput(_Args):
    """What ``Fabric.erase_scope`` accepts: scope ids as in :class:`Scope` (``None`` =
    every resource / thread), ``hold`` (strict bool), ``requested_by`` (1-200 chars)
    and ``batch_size`` (1-1000 notes per transaction, default 100)."""

    tenant_id: ScopeId
    resource_id: ScopeId | None = None
    thread_id: ScopeId | None = None
    hold: StrictBool = False
    requested_by: Requester = "operator"
    batch_size: Annotated[int, Field(ge=1, le=1000)] = 100
    approval: Requester | None = None
    """Issue 30: a legal erasure's approval reference (erases regulated notes before
    their floor; recorded in the tombstones)."""


class ForgetArgs(_Args):
    """Arguments of ``Notes.forget``: exactly one of ``id`` (12 hex) and ``block``
    (a label); ``hold`` a bool; ``requested_by`` 1-200 characters or ``None``."""

    id: NoteId | None = None
    block: BlockLabel | None = None
    hold: StrictBool = False
    requested_by: Requester | None = None
    approval: Requester | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ForgetArgs:
        if (self.id is None) == (self.block is None):
            raise ValueError("id: give exactly one of id= or block=")
        return self


class RetentionArgs(_Args):
    """Arguments of ``Notes.set_retention``: ``id`` (12 hex), ``retention`` (a class),
    ``approval`` and ``requested_by`` (1-200 characters or ``None``)."""

    id: NoteId
    retention: RetentionClass
    approval: Requester | None = None
    requested_by: Requester | None = None


class NoteRefArgs(_Args):
    """A note id argument: 12 lowercase hex characters."""

    id: NoteId


class VerifyArgs(NoteRefArgs):
    """Arguments of ``Notes.verify_content``: a note ``id`` and the candidate ``text``."""

    text: StrictStr


class RepointArgs(_Args):
    """Arguments of ``Notes.repoint``: two different paths of 1-1024 characters."""

    from_path: FilePath
    to_path: FilePath

    @model_validator(mode="after")
    def _different(self) -> RepointArgs:
        if self.from_path == self.to_path:
            raise ValueError("to_path: must differ from from_path")
        return self


class DeletePathArgs(_Args):
    """Arguments of ``Notes.delete_path``: ``path`` (1-1024 characters), ``hold`` (a
    bool) and ``requested_by`` (1-200 characters or ``None``)."""

    path: FilePath
    hold: StrictBool = False
    requested_by: Requester | None = None


class ListInput(_Args):
    """Arguments of ``Notes.list`` / ``Notes.count``.

    - ``kinds``: subset of ``fact, procedure, file`` (default all three).
    - ``tags`` (every one), ``subject`` (equal): as in recall.
    - ``valid_at``: timezone-aware; only notes whose ``[valid_from, valid_to)`` contains
      it (default: any window).
    - ``include_superseded``: also list notes a newer note replaced (default False).
    - ``known_at`` (issue 31): list what the fabric had recorded at that instant.
    - ``limit``: 1-1000 (default 100); ``cursor``: the ``next_cursor`` of the previous page.
    """

    kinds: RecallKinds = ("fact", "procedure", "file")
    tags: list[NonEmpty] = Field(default_factory=list, max_length=64)
    subject: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    valid_at: AwareDatetime | None = None
    include_superseded: StrictBool = False
    known_at: Instant | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    cursor: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None


class ReleaseHoldArgs(NoteRefArgs):
    """Arguments of ``Notes.release_hold``: a note ``id`` and ``requested_by`` (1-200
    characters or ``None``)."""

    requested_by: Requester | None = None
