"""What every projection of the note log provides."""

from __future__ import annotations

import math

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, Protocol
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain.errors import EmbedderChangedError
from memfabric.domain.note import Note, vector_for


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
    cur: Cursor[Any],
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
    ``vector``)."""
    if isinstance(cur, BatchCursor):
        cur.batch.add(table, tuple(columns), tuple(binary), upserts, deletes)
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


MAX_BATCH_PARAMS = 16_000
"""A :class:`RowBatch` with more parameters than this is run statement by statement
(PostgreSQL takes at most 65,535 parameters in one statement)."""


class RowBatch:
    """The row writes of :func:`write_rows` for several projection tables, collected
    instead of run, to travel as data-modifying CTEs of one statement with the
    tenant's tracking (issue 24: fewer statements for the server to parse, bind and
    execute per write). Sound because each collected write touches its own table's
    rows (a note is either upserted or deleted, never both) and none reads another's:
    every CTE sees the same snapshot, as PostgreSQL runs them.

    The statement uses PostgreSQL's own ``$n`` placeholders (run on a
    ``psycopg.RawCursor``: no client-side parsing of a long query); ``$1`` and ``$2``
    are left to the caller. ``parts``: ``(table, columns, n_upserts, n_deletes)`` per
    call, the statement's cache key; ``params``: their parameters, in order."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, tuple[str, ...], int, int]] = []
        self.params: list[Any] = []
        self._calls: list[tuple[tuple[str, ...], Sequence[Sequence[Any]], Sequence[Delete]]] = []

    def add(self, table: str, columns: tuple[str, ...], binary: tuple[str, ...],
            upserts: Sequence[Sequence[Any]], deletes: Sequence[Delete]) -> None:
        """Collect the delete of ``deletes`` and the upsert of ``upserts`` (as
        :func:`write_rows` would run them) into ``table``."""
        if not upserts and not deletes:
            return
        self.parts.append((table, columns, len(upserts), 1 if deletes else 0))
        self._calls.append((binary, upserts, deletes))
        if deletes:
            self.params.extend(delete_params(deletes))
        for row in upserts:
            self.params.extend(row)

    def too_big(self) -> bool:
        """Whether the collected writes must run one statement each (:data:`MAX_BATCH_PARAMS`)."""
        return len(self.params) > MAX_BATCH_PARAMS

    def run_each(self, cur: Cursor[Any]) -> None:
        """Run the collected writes as :func:`write_rows` does, statement by statement."""
        for (table, columns, _n_up, _n_del), (binary, ups, dels) in zip(self.parts, self._calls, strict=True):
            write_rows(cur, table, columns, ups, dels, binary=binary)

    def ctes(self, first: int = 3) -> list[str]:
        """``d<i> AS (<delete>)``, ``u<i> AS (<multi-row upsert>)`` for each collected
        write; placeholders ``$first`` on, in :attr:`params` order."""
        out: list[str] = []
        n = first
        for i, (table, columns, n_up, n_del) in enumerate(self.parts):
            t = _quoted(table)
            if n_del:
                out.append(f"d{i} AS (DELETE FROM {t} WHERE tenant_id = ANY(${n})"  # noqa: S608 - quoted identifiers
                           f" AND aggregate_id = ANY(${n + 1}))")
                n += 2
            if n_up:
                rows = []
                for _ in range(n_up):
                    rows.append("(" + ", ".join(f"${k}" for k in range(n, n + len(columns))) + ")")
                    n += len(columns)
                cols = ", ".join(map(_quoted, columns))
                sets = ", ".join(f"{_quoted(c)} = EXCLUDED.{_quoted(c)}" for c in columns if c != "aggregate_id")
                out.append(f"u{i} AS (INSERT INTO {t} ({cols}) VALUES {', '.join(rows)}"  # noqa: S608 - quoted identifiers
                           f" ON CONFLICT ON CONSTRAINT {_quoted(primary_key_name(table))} DO UPDATE SET {sets})")
        return out


def _quoted(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


class BatchCursor(Cursor[Any]):
    """A cursor whose :func:`write_rows` calls are collected into :attr:`batch` (a
    :class:`RowBatch`) instead of run; only projections that write through
    :func:`write_rows` alone (``batch_rows = True``) are given one."""

    def __init__(self, connection: Any, batch: RowBatch) -> None:
        super().__init__(connection)
        self.batch = batch


def batch_rows(p: object) -> bool:
    """Whether projection ``p`` writes only through :func:`write_rows` (its class says
    ``batch_rows = True``), so its rows may travel in a :class:`RowBatch`."""
    return bool(getattr(p, "batch_rows", False))


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
