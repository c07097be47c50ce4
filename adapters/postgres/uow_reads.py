"""The reads a write decides on, in its unit of work's transaction (issue 24).

:class:`DecisionReads` is the part of
:class:`~memfabric.adapters.postgres.uow.PostgresUnitOfWork` that reads: the
consolidation neighbours, the shared-term postings, paths, the working value, whether
a note exists and where it lives. Each goes through :meth:`DecisionReads.reader`: on
the wire while the unit of work is there (the read travels with what waits: ``BEGIN``,
the locks, the gap probe), else through psycopg.

**Neighbours sent ahead.** A fact whose subject is known first asks the entity index
whether the subject names an entity (issue 32), then the consolidation index for its
neighbours: two round trips, the second waiting on the first only because resolving
the subject may change the key the neighbours are looked up by. Most writes resolve
nothing, so :meth:`DecisionReads.prefetch_neighbours` sends the neighbour lookup of
the keys as they are *before* the entity read (without waiting), and the later
:meth:`DecisionReads.neighbours` call with the very same scope, query objects, ``now``
and ``per_query`` takes that answer instead of a round trip of its own. A write whose
subject did resolve has new query objects, so its lookup runs again: the answer is the
same as without the prefetch in every case, the statements and their order too (the
prefetched lookup runs after the locks, in the same transaction, as the later one would).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

from psycopg import Connection, Cursor, sql

from memfabric.adapters.postgres import dimension_guard
from memfabric.adapters.postgres.session import SessionReads, TxSession
from memfabric.domain.consolidation import Neighbour, NeighbourQuery
from memfabric.domain.link_terms import TermPostings
from memfabric.domain.note import note_uuid
from memfabric.domain.scope import Scope
from memfabric.domain.working import BlockEntry
from memfabric.projections import consolidation_index, note_scope, tables, working_value

__all__ = ["DecisionReads"]

_Answer = Callable[[], list[dict[str, Any]]]


class _SendAhead:
    """A cursor stand-in that sends each read on the session without waiting and keeps
    the function that answers it (its own ``fetchall`` is empty)."""

    def __init__(self, session: TxSession) -> None:
        self._session = session
        self.answers: list[_Answer] = []

    def execute(self, query: Any, params: Any = None, **_: Any) -> _SendAhead:
        self.answers.append(self._session.send_read(query, params))
        return self

    def fetchall(self) -> list[dict[str, Any]]:
        return []


class _Answered:
    """A cursor stand-in that answers each read, in order, from reads sent ahead."""

    def __init__(self, answers: Sequence[_Answer]) -> None:
        self._answers = list(answers)
        self._rows: list[dict[str, Any]] = []

    def execute(self, query: Any, params: Any = None, **_: Any) -> _Answered:
        self._rows = self._answers.pop(0)()
        return self

    def fetchall(self) -> list[dict[str, Any]]:
        return self._rows


Lookup = tuple[Scope, tuple[NeighbourQuery, ...], datetime, int, bool]
"""A neighbour lookup's arguments: scope, queries, ``now``, ``per_query``, ``near``."""


class DecisionReads:
    """The reads of :class:`~memfabric.adapters.postgres.uow.PostgresUnitOfWork` (see
    the module doc); the unit of work provides the session, the held aggregates, the
    first-read hook (the gap probe) and its psycopg connection."""

    _session: TxSession | None
    _aggregates: dict[Any, Any]
    _ahead: tuple[Lookup, list[_Answer]] | None = None

    def _mark_read(self) -> None:
        raise NotImplementedError

    @property
    def conn(self) -> Connection[Any]:
        raise NotImplementedError

    def reader(self) -> Cursor[Any]:
        """A read-only cursor of the transaction for a read a write decides on (dict
        rows; ``execute`` then ``fetchall`` / ``fetchone``): on the wire while the unit of
        work is there (the read travels with what waits: BEGIN, the locks), else psycopg's.
        While neighbours sent ahead wait, its reads turn pgvector's dimension refusal
        (theirs, answered with this read) into ``EmbedderChangedError``."""
        session = self._session
        if session is not None and session.on_wire:
            self._mark_read()
            return cast("Cursor[Any]", SessionReads(session, dimension_guard if self._ahead else None))
        return self.conn.cursor()

    def prefetch_neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                            now: datetime, per_query: int = 3, near: bool = False) -> None:
        """Send :meth:`neighbours` ``(scope, queries, now, per_query, near)`` ahead, answered
        with the next read (module doc); nothing off the wire or without ``queries``."""
        session = self._session
        if session is None or not session.on_wire or not queries:
            return
        self._mark_read()
        ahead = _SendAhead(session)
        consolidation_index.select_neighbours(cast("Cursor[Any]", ahead), scope, queries, now=now,
                                              per_query=per_query, near=near)
        self._ahead = ((scope, tuple(queries), now, per_query, near), ahead.answers)

    def neighbours(self, scope: Scope, queries: Sequence[NeighbourQuery], *,
                   now: datetime, per_query: int = 3, near: bool = False) -> list[list[Neighbour]]:
        ahead, self._ahead = self._ahead, None
        cur = self.reader()
        if ahead is not None and _same_lookup(ahead[0], (scope, tuple(queries), now, per_query, near)):
            cur = cast("Cursor[Any]", _Answered(ahead[1]))
        with dimension_guard():
            return consolidation_index.select_neighbours(cur, scope, queries, now=now, per_query=per_query,
                                                         near=near)

    def term_postings(self, scope: Scope, kind: str, terms: Sequence[str], *,
                      now: datetime, latest: bool = False) -> TermPostings:
        with self.conn.cursor() as cur:
            return consolidation_index.select_term_postings(cur, scope, kind, terms, now=now, latest=latest)

    def note_ids_by_path(self, scope: Scope, path: str) -> list[str]:
        return note_scope.ids_by_path(self.reader(), scope, path)

    def working_blocks(self, scope: Scope) -> dict[str, BlockEntry]:
        return working_value.select_blocks(self.reader(), scope)

    def exists(self, scope: Scope, note_id: str) -> bool:
        aggregate_id = note_uuid(scope, note_id)
        if aggregate_id in self._aggregates:
            return True
        row = self.reader().execute(
            sql.SQL("SELECT 1 FROM {t} WHERE originator_id = %s LIMIT 1").format(
                t=sql.Identifier(tables.EVENTS)), (aggregate_id,)).fetchone()
        return row is not None

    def resolve(self, scope: Scope, note_id: str) -> list[tuple[Scope, str]]:
        """:func:`memfabric.projections.note_scope.resolve` in this transaction."""
        return list(note_scope.resolve(self.reader(), scope, note_id))


def _same_lookup(a: Lookup, b: Lookup) -> bool:
    """Whether two neighbour lookups are the same call: equal scope, ``now``,
    ``per_query`` and ``near``, and the very same query objects in the same order."""
    return (a[0] == b[0] and a[2:] == b[2:] and len(a[1]) == len(b[1])
            and all(x is y for x, y in zip(a[1], b[1], strict=True)))
