"""What every projection of the note log provides."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from psycopg import Cursor

from memfabric.domain.note import Note


class NoteProjection(Protocol):
    """A read model that is a pure function of ``Note`` aggregate states.

    ``name`` names the projection (and its tracking table ``mf_<name>_tracking``);
    ``tables`` lists the tables it owns (emptied on rebuild); ``create`` makes them
    (idempotent); ``apply`` brings the rows of the given notes up to date;
    ``rows`` yields ``(table, row)`` pairs for a bulk load; ``create_indexes`` builds
    secondary indexes after a bulk load.
    """

    name: str
    tables: tuple[str, ...]

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None: ...

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None: ...

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None: ...

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int: ...
