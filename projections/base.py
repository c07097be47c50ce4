"""What every projection of the note log provides."""

from __future__ import annotations

import functools
import math
import threading

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, Protocol, TypeVar, cast
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.errors import EmbedderChangedError
from memfabric.domain.note import Note, vector_for
from memfabric.projections.batch import BatchCursor


class NoteProjection(Protocol):
    """A read model that is a pure function of ``Note`` aggregate states.

    ``name`` names the projection (and its tracking table ``mf_<name>_tracking``);
    ``tables`` lists the tables it owns (emptied on rebuild); ``write_side`` is True
    for projections that write decisions read (always projected in the writer's
    transaction, whatever ``inline_projections`` says); ``create`` makes them
    (idempotent); ``apply`` brings the rows of the given notes up to date;
    ``rows`` yields ``(table, row)`` pairs for a bulk load; ``create_indexes`` builds
    secondary indexes after a bulk load.
    """

    name: str
    tables: tuple[str, ...]
    write_side: bool

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None: ...

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None: ...

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None: ...

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int: ...


def embedding_for(note: Note, embedder_id: str | None, dim: int) -> bytes | None:
    """The vector a projection configured for embedder ``embedder_id`` and ``dim``
    dimensions stores for ``note`` (:func:`memfabric.domain.note.vector_for`), ``None``
    when the note has none at all. A note without a vector of that embedder keeps its
    write-time vector when it has ``dim`` dimensions (logs written before the embedder
    record); otherwise ``EmbedderChangedError``: a process still writing with the
    embedder the fabric migrated away from."""
    found = vector_for(note, embedder_id)
    if found is not None or note.embedding is None:
        return found
    if len(note.embedding) == 4 * dim:
        return note.embedding
    raise EmbedderChangedError(
        f"note {note.note_id} has no vector of embedder {embedder_id} ({dim} dimensions; it was "
        f"written with {note.embedder_id}): the fabric's embedder changed; reopen or retry")


_RowFn = TypeVar("_RowFn", bound=Callable[..., Any])


def per_state(fn: _RowFn) -> _RowFn:
    """``fn(note, *args)`` (a pure row function of a note's state) remembered per thread
    for each aggregate object at its version, so projections that share a row compute
    it once per write (issue 24: the recall index and the note versions). Every change
    of a note is an event, which moves its version; a replay makes a new object. At
    most 4,096 states are kept per thread (then the memory starts afresh)."""
    local = threading.local()

    @functools.wraps(fn)
    def remembered(note: Any, *args: Any) -> Any:
        recent = getattr(local, "recent", None)
        if recent is None or len(recent) > 4096:
            recent = local.recent = {}
        key = (note.version, *args)
        held = recent.get(id(note))
        if held is not None and held[0] is note and held[1] == key:
            return held[2]
        row = fn(note, *args)
        recent[id(note)] = (note, key, row)
        return row
    return cast(_RowFn, remembered)


def finite(value: float) -> float:
    """Cosine similarity with a zero vector is NaN in pgvector; read it as 0."""
    return 0.0 if math.isnan(value) else value


Delete = tuple[str, UUID]
"""A row to delete: ``(tenant_id, aggregate_id)`` (the tenant prunes a partitioned
table's delete to one partition, issue 25)."""


def split_rows(
    notes: Iterable[Note], row_for: Callable[[Note], tuple[Any, ...] | None]
) -> tuple[list[tuple[Any, ...]], list[Delete]]:
    """``(upserts, deletes)``: the row of each note, or its ``(tenant, aggregate id)``
    when it has none."""
    upserts: list[tuple[Any, ...]] = []
    deletes: list[Delete] = []
    for note in notes:
        row = row_for(note)
        if row is None:
            deletes.append((note.tenant_id, note.id))
        else:
            upserts.append(row)
    return upserts, deletes


def write_rows(
    cur: Cursor[Any] | BatchCursor,
    table: str,
    columns: Sequence[str],
    upserts: Sequence[Sequence[Any]],
    deletes: Sequence[Delete],
    *,
    binary: Sequence[str] = (),
) -> None:
    """Delete the rows ``deletes`` (``(tenant_id, aggregate_id)`` pairs) and upsert
    ``upserts`` (tuples in ``columns`` order, keyed by the table's primary key,
    ``<table>_pkey``: ``(aggregate_id)``, or ``(aggregate_id, tenant_id)`` when the
    table is partitioned). Columns in ``binary`` are sent in binary format (pgvector's
    ``vector``). Handed a :class:`~memfabric.projections.batch.BatchCursor`, the
    writes are collected into its batch instead (issue 24)."""
    if isinstance(cur, BatchCursor):
        cur.batch.add(table, tuple(columns), upserts, delete_params(deletes) if deletes else None,
                      lambda own: write_rows(own, table, columns, upserts, deletes, binary=binary))
        return
    delete, upsert = _statements(table, tuple(columns), tuple(binary))
    if deletes:
        cur.execute(delete, delete_params(deletes), prepare=True)
    if upserts:
        cur.executemany(upsert, upserts)


@lru_cache(maxsize=64)
def _statements(table: str, columns: tuple[str, ...], binary: tuple[str, ...]) -> tuple[bytes, bytes]:
    """The DELETE and upsert statements of :func:`write_rows`, composed once."""
    t = sql.Identifier(table)
    delete = sql.SQL("DELETE FROM {t} WHERE tenant_id = ANY(%s) AND aggregate_id = ANY(%s)").format(t=t)
    upsert = sql.SQL(
        "INSERT INTO {t} ({cols}) VALUES ({ph}) ON CONFLICT ON CONSTRAINT {k} DO UPDATE SET {up}"
    ).format(
        t=t, k=sql.Identifier(primary_key_name(table)),
        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
        ph=sql.SQL(", ").join(sql.SQL("%b") if c in binary else sql.Placeholder() for c in columns),
        up=sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
            for c in columns if c != "aggregate_id"
        ),
    )
    return delete.as_bytes(None), upsert.as_bytes(None)


def primary_key_name(table: str) -> str:
    """The primary key constraint of a projection table (PostgreSQL's default name, kept
    by the blue-green switch's index renames): the conflict target of its upserts, right
    for the plain layout's ``(aggregate_id)`` and the partitioned one's
    ``(aggregate_id, tenant_id)`` alike."""
    return f"{table}_pkey"


def delete_params(deletes: Sequence[Delete]) -> tuple[list[str], list[UUID]]:
    """The two arrays of a delete: the distinct tenants and the aggregate ids (an id
    names one note, so the tenant condition only prunes partitions)."""
    return list(dict.fromkeys(t for t, _ in deletes)), [a for _, a in deletes]


def prefix_where(tenant_id: str, resource_id: str | None,
                 thread_id: str | None) -> tuple[str, list[Any]]:
    """``("tenant_id = %s AND ...", params)``: the rows of a scope prefix (``None`` =
    every resource / thread), for tables with ``tenant_id, resource_id, thread_id``."""
    where, params = "tenant_id = %s", [tenant_id]
    if resource_id is not None:
        where += " AND resource_id = %s"
        params.append(resource_id)
    if thread_id is not None:
        where += " AND thread_id = %s"
        params.append(thread_id)
    return where, params


def in_pipeline(cur: Cursor[Any]) -> bool:
    """Whether ``cur``'s connection is in pipeline mode (a unit of work's: no COPY)."""
    if isinstance(cur, BatchCursor):  # the rows join a write statement (issue 24)
        return True
    return cur.connection._pipeline is not None  # noqa: SLF001 - psycopg has no public flag


def copy_rows(
    cur: Cursor[Any], table: str, columns: Sequence[str], types: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> int:
    """Bulk-load ``rows`` with ``COPY ... FROM STDIN (FORMAT BINARY)``; returns the count."""
    n = 0
    with cur.copy(
        sql.SQL("COPY {t} ({cols}) FROM STDIN (FORMAT BINARY)").format(
            t=sql.Identifier(table), cols=sql.SQL(", ").join(map(sql.Identifier, columns))
        )
    ) as copy:
        copy.set_types(list(types))
        for row in rows:
            copy.write_row(row)
            n += 1
    return n


def accepted(projection: Any, aggregates: Iterable[Any]) -> list[Any]:
    """The aggregates ``projection`` reads: those of its ``aggregate_types`` (default
    ``(Note,)``), so note projections never see a conversation and vice versa."""
    types = getattr(projection, "aggregate_types", (Note,))
    return [a for a in aggregates if isinstance(a, types)]


def has_table(cur: Cursor[Any], table: str) -> bool:
    """Whether ``table`` exists in the current search path."""
    row = cur.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (table,)).fetchone()
    return bool(row and (row["found"] if isinstance(row, dict) else row[0]))


def has_column(cur: Cursor[Any], table: str, column: str) -> bool:
    """Whether ``table`` (in the current schema) has ``column``."""
    row = cur.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = %s AND column_name = %s", (table, column)).fetchone()
    return row is not None


def add_visibility(cur: Cursor[Any], table: str, recall_table: str = "mf_recall_index") -> bool:
    """Issue 16: give a table of an older release its ``visibility`` column (text),
    filled from the recall index's row of each note where it has one, else ``thread``
    (what a note written without a stored visibility means; a held note, which has no
    recall row, reads ``thread`` until the projection is rebuilt, failing closed).
    Returns whether the column was added (nothing is done when it exists)."""
    if not has_table(cur, table) or has_column(cur, table, "visibility"):
        return False
    t = sql.Identifier(table)
    cur.execute(sql.SQL("ALTER TABLE {t} ADD COLUMN visibility text").format(t=t))
    if has_table(cur, recall_table):
        cur.execute(sql.SQL("UPDATE {t} n SET visibility = r.visibility FROM {r} r"
                            " WHERE r.aggregate_id = n.aggregate_id").format(
            t=t, r=sql.Identifier(recall_table)))
    cur.execute(sql.SQL("UPDATE {t} SET visibility = 'thread' WHERE visibility IS NULL").format(t=t))
    return True
