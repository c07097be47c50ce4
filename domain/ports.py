"""Ports: what the domain needs from the outside world, as Protocols.

Adapters (``memfabric.adapters``) implement them; the domain imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

import numpy as np

from memfabric.domain.policy import Neighbour
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
    """One recall candidate as the index returns it (scope filters already applied)."""

    aggregate_id: UUID
    note_id: str
    similarity: float | None
    lexical: float | None
    vector_rank: int | None
    lexical_rank: int | None
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NeighbourQuery:
    """One write's consolidation lookup: its kind, vector, token hash, path, subject."""

    kind: str
    embedding: np.ndarray
    token_hash: str
    path: str | None
    subject: str | None


class WriteTransaction(Protocol):
    """A database transaction holding the scope's write lock (see ``NoteStore``)."""

    def nearest_many(
        self, scope: Scope, queries: Sequence[NeighbourQuery], *, now: datetime, per_query: int = 3,
    ) -> list[list[Neighbour]]:
        """Consolidation candidates per query, best first: same exact scope and kind,
        live, currently valid and not superseded. ``file`` queries match on ``path``,
        subject-keyed ones on ``subject``; otherwise an exact token-hash match, then the
        nearest vectors. Bounded SQL (no scan), batched."""
        ...

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        """Ids of live or held ``file`` notes of exactly ``scope`` recorded against
        ``path``, sorted. One indexed SQL read on the note-scope index, selecting on
        ``path`` (never on content), in this transaction."""
        ...


@dataclass(frozen=True, slots=True)
class NoteRef:
    """An un-forgotten note as the note-scope index lists it (no content)."""

    aggregate_id: UUID
    scope: Scope
    note_id: str
    held: bool


class NoteStore(Protocol):
    """Transactions, projections queries and secrets the application service uses."""

    def write(self, scope: Scope) -> AbstractContextManager[WriteTransaction]:
        """Open a transaction that holds ``scope``'s write lock until commit; events
        saved inside it are appended, projected and tracked in that same transaction."""
        ...

    def write_scopes(self, scopes: Sequence[Scope]) -> AbstractContextManager[WriteTransaction]:
        """Like ``write``, holding the write locks of all ``scopes`` (sorted order)."""
        ...

    def notes_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None,
        *, after: NoteRef | None, limit: int,
    ) -> list[NoteRef]:
        """Up to ``limit`` un-forgotten notes (held included, every kind) of a scope
        prefix (``None`` = any resource / thread), ordered by ``(resource_id,
        thread_id, aggregate_id)`` and starting after ``after`` (keyset paging)."""
        ...

    def count_in_scope(
        self, tenant_id: str, resource_id: str | None, thread_id: str | None
    ) -> tuple[int, int]:
        """``(live, held)`` counts of un-forgotten notes of a scope prefix."""
        ...

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
    ) -> list[Candidate]:
        """Up to ``limit`` candidates from the vector list and ``limit`` from the lexical
        list, fused; every scope, kind, validity and consent filter runs in SQL."""
        ...

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        """The working-value projection's blocks of exactly ``scope`` (one indexed read)."""
        ...

    def content_hmac(self, text: str) -> str:
        """HMAC-SHA256 of ``text`` under the fabric secret, hex."""
        ...

    def stored_events(self, aggregate_id: UUID) -> Iterator[Any]:
        """Decoded domain events of one aggregate in version order."""
        ...
