"""Ports: what the domain needs from the outside world, as Protocols.

Adapters implement them (``memfabric.adapters.postgres.uow`` / ``postgres`` on
PostgreSQL, ``memfabric.adapters.memory`` in memory); the domain imports none of them.

- :class:`UnitOfWork`: one write transaction. Every read a write decision makes goes
  through it, so it sees exactly the state it will commit on top of.
- :class:`NoteStore`: the read side (recall candidates, working value, scope paging,
  decoded history) outside any write.
- :class:`Embedder`: text to unit vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

import numpy as np

from memfabric.domain.consolidation import Neighbour, NeighbourQuery
from memfabric.domain.link_terms import TermPostings
from memfabric.domain.note import Note
from memfabric.domain.results import NoteCounts
from memfabric.domain.principal import AccessFilter
from memfabric.domain.retention import RetentionConfig, Windows
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors.

    ``id`` names the model and its settings (recorded in every event so a rebuild never
    re-embeds and a migration knows what it migrates from); ``dim`` is the vector size;
    ``embed(texts)`` returns an array of shape ``(len(texts), dim)``, dtype float32,
    each row L2-normalised (a zero row is allowed for text with no features).
    """

    id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """One recall candidate as the index returns it (scope filters already applied).

    ``similarity``: cosine in [-1, 1] (``None`` without a vector list); ``lexical``: the
    raw full-text score (``None`` without a lexical list); ranks are 1-based positions
    in each list; ``fields``: the recall-index row (see
    ``memfabric.projections.recall_index.RETURNED``)."""

    aggregate_id: UUID
    note_id: str
    similarity: float | None
    lexical: float | None
    vector_rank: int | None
    lexical_rank: int | None
    fields: dict[str, Any]
    link: float | None = None
    """Set for a note added by link expansion (issue 15): the largest weight of an edge
    joining it to a list candidate. ``fields["links"]``: the note's own edges."""
    link_from: tuple[tuple[UUID, float], ...] = ()
    """``(list candidate aggregate id, edge weight)`` pairs: for an expanded note its
    edges to list candidates; for a list candidate (``link`` None) its edges to the
    other list candidates (only when recall expands)."""
    partial: bool = False
    """Issue 29: ``fields`` holds only what ranking reads (``note_id``, ``importance``,
    ``token_count``, ``t_ref``, ``ingested_at``, ``valid_from``; the rest ``None``):
    :meth:`NoteStore.hits` reads the full row if the candidate becomes a hit."""


@dataclass(frozen=True, slots=True)
class NoteFilter:
    """Row filters recall and listing apply inside the query: ``tags`` (the note carries
    every one), ``subject`` (equal) and ``min_importance`` (``importance >=``); ``access``
    (issue 33): a principal's :class:`~memfabric.domain.principal.AccessFilter`, which
    replaces the plain scope rule (``None``: no principal)."""

    tags: tuple[str, ...] = ()
    subject: str | None = None
    min_importance: float | None = None
    access: AccessFilter | None = None


@dataclass(frozen=True, slots=True)
class ListQuery:
    """Which recall-index rows a listing or count admits.

    ``scope`` with ``prefix=False``: the notes visible from ``scope`` (recall's scope
    and visibility rule); with ``prefix=True``: the notes stored in a scope whose ids
    start with ``scope``'s (``None`` parts match anything; no visibility rule; with a
    principal's ``filters.access``, only the rows it admits, grants of the prefix included).
    ``valid_at``: only notes whose window contains it (``None``: any window);
    ``include_superseded``: also notes a newer note replaced. Held and forgotten notes
    are never in the index; consent as in recall."""

    scope: Scope
    kinds: tuple[str, ...] = ("fact", "procedure", "file")
    filters: NoteFilter = NoteFilter()
    valid_at: datetime | None = None
    include_superseded: bool = False
    require_consent: bool = False
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class NoteRef:
    """An un-forgotten note as the note-scope index lists it (no content)."""

    aggregate_id: UUID
    scope: Scope
    note_id: str
    held: bool


@dataclass(frozen=True, slots=True)
class DueRef:
    """Issue 30: a note a sweep may have to act on, as the retention index lists it (no
    content): aggregate id, home scope, id and visibility (for the batch's write locks)."""

    aggregate_id: UUID
    scope: Scope
    note_id: str
    visibility: str


class RetentionStore(Protocol):
    """Issue 30: the retention settings every process shares and the retention index."""

    def config(self, *, cached: bool = False) -> RetentionConfig:
        """The recorded :class:`~memfabric.domain.retention.RetentionConfig` (the
        defaults when none was recorded); ``cached``: a copy read at most
        ``CONFIG_TTL`` seconds ago will do (recall's half-lives; decisions read fresh)."""
        ...

    def classes(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The retention class of each un-forgotten note among ``aggregate_ids``."""
        ...

    def record(self, config: RetentionConfig) -> None:
        """Record ``config`` for every process (replacing the recorded one)."""
        ...

    def tenants(self, *, after: str | None) -> list[str]:
        """Tenants with un-forgotten notes, sorted, after ``after``."""
        ...

    def due(self, tenant_id: str, windows: Windows, now: datetime, *, after: UUID | None,
            limit: int) -> list[DueRef]:
        """Up to ``limit`` notes of ``tenant_id`` that may be due at ``now`` (a superset
        of :func:`memfabric.domain.retention.decide`), by aggregate id after ``after``."""
        ...

    def replay(self, tenant_id: str, aggregate_ids: Sequence[UUID]) -> list[Note] | None:
        """The notes ``aggregate_ids`` of ``tenant_id`` replayed from the committed log
        outside any unit of work, in the order given (absent ids skipped): a sweep
        decides on them before it takes a batch's locks. Its appends then fail with
        ``ConflictError`` when another write took one of their next versions meanwhile
        (the log's unique ``(originator_id, originator_version)``), and it replays them
        again inside the unit of work. ``None``: replay them in the unit of work (a store
        whose log checks no versions, or a note whose events could not be decoded)."""
        ...

    def prepare_erasure(self, uow: UnitOfWork) -> None:
        """Make ``uow`` (just opened) suited to a sweep batch that erases many notes
        (PostgreSQL: full-page images written uncompressed, see its store); may do
        nothing."""
        ...


class UnitOfWork(Protocol):
    """One write transaction over the scopes it was opened for.

    Opening it takes the scopes' write locks (writers of one scope run one at a time;
    a write also names its consolidation groups' lock scopes,
    :func:`memfabric.domain.visibility.write_locks`);
    every load and query below runs inside it. Aggregates passed to :meth:`add` are
    saved by :meth:`commit` in the order their events were added: their events are
    appended to the log, the data keys of new notes are created, the keys of aggregates
    with a pending shredding event (:mod:`memfabric.domain.shredding`: a tombstone) are
    destroyed, and the write-side projections (and, when the fabric projects inline,
    every projection) are updated — all in one transaction. Leaving
    the ``with`` block without :meth:`commit` (or with an exception) rolls everything
    back: nothing is written.
    """

    def __enter__(self) -> UnitOfWork: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def load(self, scope: Scope, note_id: str) -> Note | None:
        """The note's current state: the in-flight aggregate when this unit of work
        already holds it, else replayed from the log in this transaction; ``None`` when
        the scope has no such note."""
        ...

    def load_ids(self, aggregate_ids: Sequence[UUID], *, fresh: bool = False) -> list[Note]:
        """Like :meth:`load` for many aggregate ids (absent ids are skipped). With
        ``fresh``, every note not held by this unit of work is replayed from its first
        event, never from a cached state: an erasure decrypts every event it
        tombstones, so a key fault is found (and named) before the key is shredded."""
        ...

    def load_unreadable(self, aggregate_ids: Sequence[UUID]) -> list[Note]:
        """Replay notes whose content cannot be decrypted (a key fault) as if their
        keys were destroyed, so that they can still be tombstoned and shredded."""
        ...

    def exists(self, scope: Scope, note_id: str) -> bool:
        """Whether the scope has a note ``note_id`` (in the log or in this unit of work)."""
        ...

    def neighbours(
        self, scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime,
        per_query: int = 3, near: bool = False,
    ) -> list[list[Neighbour]]:
        """Consolidation candidates of each query from the committed consolidation
        index (a superset; :func:`memfabric.domain.consolidation.choose` applies the
        rule): live, current, not superseded notes of the query's kind in its
        consolidation group (issue 16: of the query's visibility and visible from
        ``scope``, or of ``scope`` with a narrower visibility;
        :func:`memfabric.domain.visibility.meets`), each with its ``home`` — same
        ``path`` (file), same ``subject``, same token hash, same inferred key or
        entity, and with ``near`` the ``per_query`` nearest vectors of subject-less
        notes (only the similarity linker and evolution ask for them: similarity alone
        never decides a write, so without ``near`` the lookup's cost does not grow
        with the scope). Bounded SQL, batched."""
        ...

    def prefetch_neighbours(
        self, scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime,
        per_query: int = 3, near: bool = False,
    ) -> None:
        """Issue 24, a speed-up only: start :meth:`neighbours` with these arguments
        now, so that it travels with the unit of work's next read; a later
        ``neighbours`` call with the same scope, ``now``, ``per_query``, ``near`` and the very same
        query objects may take that answer. Never changes a result; a no-op where there
        is no round trip to save."""
        ...

    def term_postings(self, scope: Scope, kind: str, terms: Sequence[str], *,
                      now: datetime, latest: bool = False) -> TermPostings:
        """For the shared-term linker (issue 15): the committed current notes of
        exactly ``scope`` and ``kind`` (counted up to ``link_terms.N_CAP``) and, per
        term, up to ``link_terms.DF_CAP + 1`` ids of those containing it, newest first;
        with ``latest`` also the newest such note (``TermPostings.latest``, for the
        linker's ``follows`` edge). One indexed statement."""
        ...

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Like :meth:`NoteStore.resolve`, in this transaction (issue 26: a write never
        takes a second connection): ``(home scope, visibility)`` of the un-forgotten
        notes ``note_id`` visible from ``scope``, ``scope``'s own first, at most 3."""
        ...

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        """Ids of live or held ``file`` notes of exactly ``scope`` recorded against
        ``path``, sorted (selects on ``path``, never on content)."""
        ...

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        """The committed working value's blocks of exactly ``scope``, by label."""
        ...

    def content_hmac(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under the fabric secret, hex."""
        ...

    def add(self, note: Note) -> None:
        """Take the aggregate's pending events (keeping decision order) and save and
        project it at commit."""
        ...

    def commit(self) -> None:
        """Write everything added, in one transaction."""
        ...

    @property
    def position(self) -> int:
        """The highest notification id this unit of work committed (0 before commit)."""
        ...


UnitOfWorkFactory = Callable[[Sequence[Scope]], UnitOfWork]
"""Opens a unit of work holding the write locks of the given scopes."""


class NoteStore(Protocol):
    """The read side: queries on projections and the log, outside any write."""

    def recall(
        self,
        scope: Scope,
        *,
        embedding: np.ndarray | None,
        query: str | None,
        kinds: Sequence[str],
        as_of: datetime,
        limit: int,
        require_consent: bool,
        filters: NoteFilter | None = None,
        expand: int = 0,
    ) -> list[Candidate]:
        """Up to ``limit`` candidates from the vector list and ``limit`` from the lexical
        list, fused; every scope, kind, validity, consent and ``filters`` condition runs
        in the query. ``expand`` > 0: plus up to that many notes linked to those
        candidates (either direction), under the same conditions, in the same query
        (issue 15)."""
        ...

    def hit_links(self, scope: Scope, aggregate_ids: Sequence[UUID],
                  filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
        """The link edges of each recall hit ``aggregate_ids`` whose target is still
        recallable and visible from ``scope`` (issue 33: and admitted by
        ``filters.access`` when set): ``[{id, relation, weight}]`` sorted by
        ``(id, relation)``; absent when none (candidates of :meth:`recall` carry none)."""
        ...

    def hits(self, scope: Scope, aggregate_ids: Sequence[UUID], filters: NoteFilter | None = None,
             complete: Sequence[UUID] = ()) -> tuple[dict[UUID, list[dict[str, Any]]], dict[UUID, dict[str, Any]]]:
        """``(links, rows)``: :meth:`hit_links` of ``aggregate_ids``, and the full
        ``fields`` of each of ``complete`` (hits whose candidate was ``partial``) still
        recallable and visible from ``scope``, by aggregate id (absent otherwise). One
        round trip."""
        ...

    def list_notes(
        self, query: ListQuery, *, after: tuple[datetime, UUID] | None, limit: int,
    ) -> list[Candidate]:
        """Up to ``limit`` recall-index rows ``query`` admits, ordered by
        ``(ingested_at, aggregate_id)`` and starting after ``after`` (keyset paging);
        the candidates carry no similarity, lexical score or ranks."""
        ...

    def count_notes(self, query: ListQuery) -> int:
        """How many recall-index rows ``query`` admits."""
        ...

    def scopes_with(self, *, tenant_id: str | None, tags: Sequence[str]) -> list[Scope]:
        """The distinct scopes of recall-index rows carrying every tag of ``tags`` (of
        one tenant, or all with ``None``), sorted by ``(tenant, resource, thread)``."""
        ...

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        """The working-value projection's blocks of exactly ``scope``."""
        ...

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        """Up to ``limit`` un-forgotten notes (held included, every kind) of a scope
        prefix (``None`` = any resource / thread), ordered by ``(resource_id,
        thread_id, aggregate_id)`` and starting after ``after`` (keyset paging)."""
        ...

    def counts_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None
    ) -> NoteCounts:
        """Issue 27: the notes of a scope prefix (``None`` = any resource / thread),
        every kind, by state: ``live``, ``superseded``, ``held``, ``forgotten``."""
        ...

    def load(self, aggregate_id: UUID) -> Note | None:
        """The aggregate replayed from the log, or ``None``."""
        ...

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """Issue 16: ``(home scope, visibility)`` of the un-forgotten notes ``note_id``
        visible from ``scope`` (held included, every kind), ``scope``'s own first, at
        most 3; the visibility rule runs in the query (note-scope index)."""
        ...

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        """Decoded domain events of one aggregate in version order."""
        ...

    def content_hmac(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under the fabric secret, hex."""
        ...

    def await_position(self, position: int) -> None:
        """Block until the read side reflects the log up to ``position`` (no-op when
        projections run inline); raises ``ProjectionLagError`` on timeout."""
        ...
