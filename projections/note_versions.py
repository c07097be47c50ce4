"""Note versions with transaction-time ranges (issue 31): what the fabric *knew* at T.

Two tables, both a pure function of each note's event sequence:

- ``mf_note_versions``: one row per event of a recallable note whose state after that
  event has a recall-index row (:func:`memfabric.projections.recall_index.row_for`):
  the recall-index columns of that state, primary key ``(aggregate_id, version)``,
  plus ``recorded_from`` (the event's own ``timestamp``) and ``recorded_to`` (the next
  event's ``timestamp``; ``NULL`` while it is the note's latest event). A state without
  a recall row (held, not a recallable kind) has no row, but its event still closes the
  previous one. A forgotten note has no row at all: its data key is destroyed, so every
  earlier state replays with its content and vector erased (no recall row) — the
  versions never keep a byte the tombstone erased. A note under legal hold has no row
  either (its content is kept only sealed, whatever T); its release writes its whole
  history again.
- ``mf_link_versions``: the link-graph edges (:func:`memfabric.projections.link_graph.rows_for`)
  of each version row, keyed by ``(from_aggregate_id, from_version, to_aggregate_id,
  relation)``: an edge is recorded at T exactly when its source's version is.

Why the event's ``timestamp``: eventsourcing's stored events carry no time column; the
domain event's ``timestamp`` (set when the event is triggered, inside the unit of work,
and sealed under the event's authentication tag) is the only recorded time the log
keeps, and every replay, rebuild and ``history`` reads the same value. See
``docs/bitemporal.md``.

Writes: a unit of work's note with exactly one new event (``Note.collected``) costs one
``UPDATE`` closing the open row of the notes that had one (version > 1), one insert of
the new rows and, for notes with links, one insert of their edges — no read. Any other
note (several events in one unit of work, a ``Withdrawn`` evolution patch, a state
replayed by a catch-up, a rebuild) is replayed from the log on the same cursor and its
rows written afresh, so the inline rows and a replay from zero are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from psycopg import Cursor, sql
from psycopg.rows import tuple_row

from memfabric.domain import replay
from memfabric.domain.errors import EmbedderChangedError
from memfabric.domain.note import Note
from memfabric.projections import base, link_graph, recall_index, tables
from memfabric.projections.batch import BatchCursor

NAME = "note_versions"
TABLE = tables.NOTE_VERSIONS
EDGES = tables.LINK_VERSIONS

COLUMNS: tuple[str, ...] = (*recall_index.COLUMNS, "recorded_from", "recorded_to")
"""A version row: the recall-index row of the state, then its transaction-time range."""

EDGE_COLUMNS: tuple[str, ...] = ("from_version", *link_graph.COLUMNS)
"""An edge row: the source's version, then the link-graph row."""

_TYPES = (*recall_index._COPY_TYPES, "timestamptz", "timestamptz")  # noqa: SLF001 - same columns
_EDGE_TYPES = ("int4", "uuid", "uuid", "text", "text", "text", "text", "text", "text", "float4")

FAST = 1
"""A note with exactly this many new events (and none in :data:`REPLAYED`) is projected
without a replay."""

REPLAYED = frozenset({"Withdrawn", "HoldReleased"})
"""Events after which every version of the note is written afresh from a replay: a
withdrawn evolution patch was sealed under the forgotten source's key, so the note's
earlier versions must lose it too; a released hold brings the versions back."""


def ddl(dim: int, suffix: str = "") -> list[sql.Composed]:
    """CREATE statements of both tables (secondary indexes: :func:`index_ddl`)."""
    t, e = sql.Identifier(TABLE + suffix), sql.Identifier(EDGES + suffix)
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " tenant_id text NOT NULL, resource_id text NOT NULL, thread_id text NOT NULL,"
            " visibility text NOT NULL, consent_granted boolean, kind text NOT NULL,"
            " aggregate_id uuid NOT NULL, note_id text NOT NULL,"
            " valid tstzrange NOT NULL, superseded_by text, importance real NOT NULL,"
            " token_count integer NOT NULL, tags text[] NOT NULL, path text, subject text,"
            " token_hash text NOT NULL, content text NOT NULL, source_entry_ids text[] NOT NULL,"
            " supersedes text, t_ref timestamptz, ingested_at timestamptz NOT NULL,"
            " version integer NOT NULL, embedder_id text, context text, keywords text[] NOT NULL,"
            " fold_count integer NOT NULL, updated_at timestamptz, consent jsonb,"
            " embedding vector({dim}) NOT NULL, search_extra text,"
            " recorded_from timestamptz NOT NULL, recorded_to timestamptz,"
            " tsv tsvector GENERATED ALWAYS AS (" + recall_index.TSV + ") STORED,"
            " PRIMARY KEY (aggregate_id, version))"
        ).format(t=t, dim=sql.Literal(dim)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {e} ("
            " from_version integer NOT NULL, from_aggregate_id uuid NOT NULL, to_aggregate_id uuid NOT NULL,"
            " from_note_id text NOT NULL, to_note_id text NOT NULL, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, relation text NOT NULL,"
            " weight real NOT NULL, PRIMARY KEY (from_aggregate_id, from_version, to_aggregate_id, relation))"
        ).format(e=e),
    ]


def index_ddl(suffix: str = "") -> list[sql.Composed]:
    """Secondary indexes, as few as the reads need (each one costs every write): a
    btree on scope + kind (every read filters by tenant first), GIN on ``tsv``; the
    edges' target; a partial btree on ``(tenant_id, recorded_to)`` of the closed rows
    (issue 31: a large tenant's ``known_at`` recall scans the versions closed since T,
    :data:`RECORDED_VECTOR_LIST`; a new row is open, so only a close pays for it). No
    HNSW: a ``known_at`` recall reads current versions through the live index's graph
    and scans the others exactly, and a ``known_at`` listing sorts them (see
    ``docs/bitemporal.md``)."""
    t, e = TABLE + suffix, EDGES + suffix
    return [
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, resource_id, thread_id, kind)").format(
            i=sql.Identifier(f"{t}_scope"), t=sql.Identifier(t)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (tenant_id, recorded_to) WHERE recorded_to IS NOT NULL").format(
            i=sql.Identifier(f"{t}_closed"), t=sql.Identifier(t)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} USING gin (tsv)").format(
            i=sql.Identifier(f"{t}_tsv"), t=sql.Identifier(t)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {e} (to_aggregate_id)").format(
            i=sql.Identifier(f"{e}_to"), e=sql.Identifier(e)),
    ]


# ------------------------------------------------------------------- rows
def version_rows(note: Note, embedder_id: str | None, dim: int
                 ) -> tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]:
    """``(row, edges)`` of ``note``'s current state: its recall-index row with
    ``recorded_from`` = the state's last event time and ``recorded_to`` open (``None``
    when the state has no recall row), and the edges of that row (none without it)."""
    try:
        row = recall_index.row_for(note, embedder_id, dim)
    except EmbedderChangedError:  # a state written before a migration to another dimension
        row = None
    if row is None:
        return None, []
    version = int(note.version)
    return (*row, note.modified_on, None), [(version, *edge) for edge in link_graph.rows_for(note)]


def history_rows(events: Iterable[Any], embedder_id: str | None, dim: int
                 ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every version row and edge of one note from its decoded events in version
    order: the state after each event, each row closed at the next event's time."""
    rows: list[list[Any]] = []
    edges: list[tuple[Any, ...]] = []
    state: Any = None
    for event in events:
        if rows and rows[-1][-1] is None:
            rows[-1][-1] = event.timestamp
        state = replay.step(event, state)
        row, links = version_rows(state, embedder_id, dim)
        if row is not None:
            rows.append(list(row))
            edges.extend(links)
    return [tuple(r) for r in rows], edges


def replay_events(cur: Cursor[Any], mapper: Any, upto: dict[UUID, int]) -> dict[UUID, list[Any]]:
    """The decoded events of each aggregate in ``upto`` with a version at or below its
    value, in version order, read on ``cur``'s connection (its transaction and
    snapshot; keys read in the same one, so a key destroyed in it reads erased)."""
    ids = list(upto)
    if not ids:
        return {}
    rows = cur.connection.cursor(row_factory=tuple_row).execute(
        sql.SQL("SELECT originator_id, originator_version, topic, state FROM {t}"
                " WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version").format(
            t=sql.Identifier(tables.EVENTS)), (ids,)).fetchall()
    keys = mapper.batch_keys()  # the replay mapper (memfabric.projections.replay.ReplayMapper)
    keys.load(cur.connection, ids)
    local = mapper.bound(keys)
    out: dict[UUID, list[Any]] = {i: [] for i in ids}
    for oid, version, topic, state in rows:
        if version <= upto[oid]:
            out[oid].append(local.to_domain_event(StoredEvent(oid, version, topic, bytes(state))))
    return out


def _fast(note: Note) -> bool:
    """Whether ``note`` gained exactly one event in this unit of work (see module doc)."""
    collected = note.__dict__.get("collected")
    return collected is not None and len(collected) == FAST and not REPLAYED & set(collected)


# ------------------------------------------------------------------ writes
@lru_cache(maxsize=8)
def _statements(suffix: str) -> dict[str, bytes]:
    """The write statements of :func:`apply`, composed once per table suffix (issue 24:
    composing them was a third of this projection's client time per write)."""
    t, e = sql.Identifier(TABLE + suffix), sql.Identifier(EDGES + suffix)

    def insert(table: sql.Identifier, columns: Sequence[str], binary: Sequence[str] = ()) -> sql.Composed:
        return sql.SQL("INSERT INTO {t} ({c}) VALUES ({p})").format(
            t=table, c=sql.SQL(", ").join(map(sql.Identifier, columns)),
            p=sql.SQL(", ").join(sql.SQL("%b") if c in binary else sql.Placeholder() for c in columns))

    composed = {
        "close": sql.SQL(
            "UPDATE {t} SET recorded_to = u.ts FROM unnest(%s::uuid[], %s::timestamptz[], %s::int[])"
            " AS u(id, ts, v) WHERE {t}.aggregate_id = u.id AND {t}.recorded_to IS NULL AND {t}.version < u.v"
        ).format(t=t),
        "drop": sql.SQL("DELETE FROM {t} WHERE aggregate_id = ANY(%s)").format(t=t),
        "drop_edges": sql.SQL("DELETE FROM {e} WHERE from_aggregate_id = ANY(%s)").format(e=e),
        "row": insert(t, COLUMNS, ("embedding",)) + sql.SQL(" ON CONFLICT DO NOTHING"),
        "edge": insert(e, EDGE_COLUMNS) + sql.SQL(" ON CONFLICT DO NOTHING"),
    }
    return {name: stmt.as_bytes(None) for name, stmt in composed.items()}


def apply(cur: Cursor[Any] | BatchCursor, notes: Iterable[Note], mapper: Any, embedder_id: str | None,
          dim: int) -> None:
    """Bring the versions of ``notes`` up to date (see the module doc); ``mapper``: the
    sealing mapper the slow path replays with. A note of this unit of work without a
    new event is left alone. Inserts ignore a row already there (a catch-up of the
    tenant's gap that replayed the note first) and the close never touches a row of
    the new version, so applying a state twice changes nothing. Handed a
    :class:`~memfabric.projections.batch.BatchCursor`, the writes of the notes with
    one new event join its batch (issue 24); a replay runs on its direct cursor."""
    fast: list[Note] = []
    slow: list[Note] = []
    for note in notes:
        collected = note.__dict__.get("collected")
        if collected == []:
            continue
        (fast if _fast(note) and note.live else slow).append(note)
    _write_fast(cur, fast, embedder_id, dim)
    if isinstance(cur, BatchCursor):  # notes left with no version (forgotten, held): nothing to replay
        _drop_batched(cur, [n.id for n in slow if not n.live])
        slow = [n for n in slow if n.live]
    if slow:
        _write_replayed(cur.direct() if isinstance(cur, BatchCursor) else cur, slow, mapper, embedder_id, dim)


def _drop_batched(cur: BatchCursor, ids: list[UUID]) -> None:
    """Delete every version row and edge of notes ``ids`` in ``cur``'s batch (what
    :func:`_write_replayed` does for a note with nothing to replay), so a unit of work
    that forgets notes keeps its writes in one statement (issue 30: the sweep's batch
    stays on the wire)."""
    if not ids:
        return
    st = _statements("")
    for name, template in zip(("drop", "drop_edges"), _drop_templates(""), strict=True):
        cur.batch.add_statement(template, (ids,), _runner(st[name], (ids,)))


def _runner(query: bytes, params: Sequence[Any]) -> Callable[[Cursor[Any]], None]:
    """``RowBatch``'s ``run`` of one statement: ``query`` with ``params`` on a cursor."""
    return lambda own: _run(own, query, params)


def _write_fast(cur: Cursor[Any] | BatchCursor, notes: Sequence[Note], embedder_id: str | None, dim: int) -> None:
    """Close the open row of each note that had one and insert the rows of their new
    states (and edges), batched or run on ``cur``."""
    st = _statements("")
    closing = [n for n in notes if n.version > 1]
    if closing:
        params = ([n.id for n in closing], [n.modified_on for n in closing], [int(n.version) for n in closing])
        if isinstance(cur, BatchCursor):
            cur.batch.add_statement(_close_template(""), params,
                                    lambda own: _run(own, st["close"], params))
        else:
            cur.execute(st["close"], params, prepare=True)
    rows: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    for note in notes:
        row, links = version_rows(note, embedder_id, dim)
        if row is not None:
            rows.append(row)
            edges.extend(links)
    _insert(cur, st, rows, edges)


def _write_replayed(cur: Cursor[Any], notes: Sequence[Note], mapper: Any, embedder_id: str | None,
                    dim: int) -> None:
    """Write every version of ``notes`` afresh from a replay of their events."""
    st = _statements("")
    ids = [n.id for n in notes]
    cur.execute(st["drop"], (ids,), prepare=True)
    cur.execute(st["drop_edges"], (ids,), prepare=True)
    rows: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    for events in _replayable(cur, mapper, notes).values():
        more, more_edges = history_rows(events, embedder_id, dim)
        rows.extend(more)
        edges.extend(more_edges)
    _insert(cur, st, rows, edges)


def _insert(cur: Cursor[Any] | BatchCursor, st: dict[str, bytes], rows: list[tuple[Any, ...]],
            edges: list[tuple[Any, ...]]) -> None:
    """Insert version ``rows`` and ``edges`` (rows already there are kept)."""
    if isinstance(cur, BatchCursor):
        cur.batch.add(TABLE, COLUMNS, rows, None, lambda own: own.executemany(st["row"], rows), conflict="nothing")
        cur.batch.add(EDGES, EDGE_COLUMNS, edges, None, lambda own: own.executemany(st["edge"], edges),
                      conflict="nothing")
        return
    if rows:
        cur.executemany(st["row"], rows)
    if edges:
        cur.executemany(st["edge"], edges)


def _run(cur: Cursor[Any], query: bytes, params: Sequence[Any]) -> None:
    cur.execute(query, params, prepare=True)


@lru_cache(maxsize=8)
def _close_template(suffix: str) -> str:
    """The close statement of :func:`_statements` as a ``RowBatch`` statement template."""
    t = sql.Identifier(TABLE + suffix).as_string(None)
    return (f"UPDATE {t} SET recorded_to = u.ts FROM unnest({{0}}::uuid[], {{1}}::timestamptz[], {{2}}::int[])"  # noqa: S608
            f" AS u(id, ts, v) WHERE {t}.aggregate_id = u.id AND {t}.recorded_to IS NULL AND {t}.version < u.v")


@lru_cache(maxsize=8)
def _drop_templates(suffix: str) -> tuple[str, str]:
    """The drop statements of :func:`_statements` as ``RowBatch`` statement templates."""
    t, e = (sql.Identifier(name + suffix).as_string(None) for name in (TABLE, EDGES))
    return (f"DELETE FROM {t} WHERE aggregate_id = ANY({{0}}::uuid[])",  # noqa: S608 - quoted identifiers
            f"DELETE FROM {e} WHERE from_aggregate_id = ANY({{0}}::uuid[])")  # noqa: S608


def _replayable(cur: Cursor[Any], mapper: Any, notes: Sequence[Note]) -> dict[UUID, list[Any]]:
    """The events to replay of ``notes`` (none for a forgotten note, whose key is gone so
    no state of it has a row, nor for a held one, whose content stays sealed only)."""
    upto = {n.id: int(n.version) for n in notes if n.live}
    return replay_events(cur, mapper, upto) if upto else {}


def copy(cur: Cursor[Any], notes: Iterable[Note], mapper: Any, embedder_id: str | None, dim: int,
         suffix: str = "") -> int:
    """Bulk-load every version of ``notes`` (final states of a replay) with binary COPY;
    returns the number of version rows."""
    rows: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    for events in _replayable(cur, mapper, list(notes)).values():
        more, more_edges = history_rows(events, embedder_id, dim)
        rows.extend(more)
        edges.extend(more_edges)
    n = base.copy_rows(cur, TABLE + suffix, COLUMNS, _TYPES, rows)
    base.copy_rows(cur, EDGES + suffix, EDGE_COLUMNS, _EDGE_TYPES, edges)
    return n


class NoteVersionsProjection:
    """The note versions as a :class:`~memfabric.projections.base.NoteProjection`.
    ``mapper``: the fabric's sealing mapper (set by the composition root), with which
    notes are replayed (see the module doc)."""

    name = NAME
    tables: tuple[str, ...] = (TABLE, EDGES)
    write_side = False
    aggregate_types: tuple[type, ...] = (Note,)
    batch_rows = True
    """May be handed a ``BatchCursor`` (its rows travel in a ``RowBatch``)."""

    def __init__(self, dim: int, embedder_id: str | None = None, mapper: Any = None) -> None:
        self.dim = dim
        self.embedder_id = embedder_id
        self.mapper = mapper

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for stmt in ddl(self.dim, table_suffix):
            cur.execute(stmt)
        if not table_suffix:
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        for stmt in index_ddl(table_suffix):
            cur.execute(stmt)

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        apply(cur, notes, self.mapper, self.embedder_id, self.dim)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        return copy(cur, notes, self.mapper, self.embedder_id, self.dim, table_suffix)


# ------------------------------------------------------------------- reads
def recorded_at(alias: str = "v") -> str:
    """SQL: the version row ``alias`` was the note's state at ``%(known_at)s``."""
    return (f"{alias}.recorded_from <= %(known_at)s::timestamptz"
            f" AND ({alias}.recorded_to IS NULL OR {alias}.recorded_to > %(known_at)s::timestamptz)")


AS_RECORDED = (
    "{ri} AS NOT MATERIALIZED (SELECT * FROM {t} v WHERE {at}),"
    " {lg} AS NOT MATERIALIZED (SELECT e.from_aggregate_id, e.to_aggregate_id, e.from_note_id,"
    " e.to_note_id, e.tenant_id, e.resource_id, e.thread_id, e.relation, e.weight FROM {e} e"
    " JOIN {t} v ON v.aggregate_id = e.from_aggregate_id AND v.version = e.from_version WHERE {at})"
)
"""Two ``WITH`` items named like the recall index and the link graph: inside a
statement that starts with them, PostgreSQL resolves those names to these queries (a
``WITH`` name hides a table of the same name), so the very statements of
:mod:`memfabric.projections.recall_index` read the fabric as recorded at ``known_at``.
``NOT MATERIALIZED``: their conditions are pushed into each use (index scans)."""


def as_recorded(statement: bytes) -> bytes:
    """``statement`` (a ``SELECT`` or ``WITH`` statement over ``mf_recall_index`` /
    ``mf_link_graph``) reading the versions recorded at ``%(known_at)s`` instead."""
    ctes = sql.SQL(AS_RECORDED).format(
        ri=sql.Identifier(tables.RECALL_INDEX), lg=sql.Identifier(tables.LINK_GRAPH),
        t=sql.Identifier(TABLE), e=sql.Identifier(EDGES), at=sql.SQL(recorded_at("v"))).as_bytes(None)
    head = statement.lstrip()
    if head[:5].upper() == b"WITH ":
        return b"WITH " + ctes + b", " + head[5:]
    return b"WITH " + ctes + b" " + head


class RecordedCursor:
    """A cursor whose statements read the fabric as recorded at ``known_at``
    (:func:`as_recorded`; the parameter is added to each dict of parameters)."""

    def __init__(self, cur: Cursor[Any], known_at: datetime) -> None:
        self._cur = cur
        self._known_at = known_at

    def execute(self, query: Any, params: dict[str, Any] | None = None, **kwargs: Any) -> Cursor[Any]:
        text = query.as_bytes(self._cur) if isinstance(query, sql.Composable) else bytes(query)
        return self._cur.execute(as_recorded(text), {**(params or {}), "known_at": self._known_at}, **kwargs)


RECORDED_VECTOR_LIST = (
    # the notes whose state at T is their current one: the live index's HNSW graph
    # (and its unindexed tail) admits a live row only when its own version is the
    # note's current version and was recorded by T, so the row *is* the version at T
    "v AS MATERIALIZED (SELECT aggregate_id, dist FROM ("
    "(SELECT li.aggregate_id, li.embedding <=> %(q)b AS dist FROM {live} li WHERE {w} AND li.indexed"
    " AND {current} ORDER BY li.embedding <=> %(q)b LIMIT %(limit)s)"
    " UNION ALL (SELECT aggregate_id, dist FROM (SELECT li.aggregate_id, li.embedding <=> %(q)b AS dist"
    " FROM {live} li WHERE {w} AND NOT li.indexed AND {current} OFFSET 0) s ORDER BY dist LIMIT %(limit)s)"
    # the notes changed since T: their version at T is closed now (exact scan)
    " UNION ALL (SELECT aggregate_id, dist FROM (SELECT aggregate_id, embedding <=> %(q)b AS dist"
    " FROM {t} WHERE {w} AND recorded_to > %(known_at)s::timestamptz OFFSET 0) s"
    " ORDER BY dist LIMIT %(limit)s)"
    ") u ORDER BY dist LIMIT %(limit)s),"
    " vr AS (SELECT aggregate_id, row_number() OVER (ORDER BY dist, aggregate_id) AS rank FROM v)"
)
"""The vector list of a ``known_at`` recall of a tenant large enough for HNSW (issue
31): the rows recorded at T are (1) current versions recorded by T and (2) versions
recorded by T and closed after it. (1) are read through the live recall index: a live
row whose ``(aggregate_id, version)`` is a current version row recorded by T is that
version (both rows are :func:`memfabric.projections.recall_index.row_for` of the same
state), so its HNSW graph serves them, with the live tail's exact scan; (2) are the
versions of the notes changed since T, scanned exactly. This holds when both
projections are applied in the writer's transaction (the default), so every snapshot
has them in step; a fabric with a separate runner keeps the exact scan of every
version. ``{live}``: the live table, schema-qualified (the statement's
``mf_recall_index`` names the versions at T); ``{w}``/``{t}``: as in
:data:`memfabric.projections.recall_tail.VECTOR_LIST`."""

_CURRENT = ("EXISTS (SELECT 1 FROM {v} cv WHERE cv.aggregate_id = li.aggregate_id AND cv.version = li.version"
            " AND cv.recorded_to IS NULL AND cv.recorded_from <= %(known_at)s::timestamptz)")


def recorded_vector_list(live: sql.Composable) -> str:
    """:data:`RECORDED_VECTOR_LIST` with the live table ``live`` (a qualified
    identifier) filled in; ``{t}`` and ``{w}`` are left for
    :func:`memfabric.projections.recall_index.recall_statement`."""
    current = _CURRENT.replace("{v}", sql.Identifier(TABLE).as_string(None))
    return RECORDED_VECTOR_LIST.replace("{live}", live.as_string(None)).replace("{current}", current)
