"""Note versions with transaction-time ranges (issue 31): what the fabric *knew* at T.

A note's version is its recall-index row (:func:`memfabric.projections.recall_index.row_for`)
after one of its events, recorded from that event's own ``timestamp`` to the next
event's. The **current** version of a note is its live recall-index row, which carries
``recorded_from`` (the state's latest event time): no second copy of it is written.
Two tables keep the **closed** versions, both a pure function of each note's event
sequence:

- ``mf_note_versions``: one row per event of a recallable note whose state after that
  event has a recall-index row and which a later event of the note followed: the
  recall-index columns of that state, primary key ``(aggregate_id, version)``, and
  ``recorded_to`` (the next event's ``timestamp``). A state without a recall row (held,
  not a recallable kind) has no row, but its event still closes the previous one. A
  forgotten note has no row at all: its data key is destroyed, so every earlier state
  replays with its content and vector erased (no recall row) — the versions never keep
  a byte the tombstone erased. A note under legal hold has no row either (its content
  is kept only sealed, whatever T); its release writes its whole history again.
- ``mf_link_versions``: the link-graph edges (:func:`memfabric.projections.link_graph.rows_for`)
  of each version row, keyed by ``(from_aggregate_id, from_version, to_aggregate_id,
  relation)``: an edge is recorded at T exactly when its source's version is.

Why the event's ``timestamp``: eventsourcing's stored events carry no time column; the
domain event's ``timestamp`` (set when the event is triggered, inside the unit of work,
and sealed under the event's authentication tag) is the only recorded time the log
keeps, and every replay, rebuild and ``history`` reads the same value. See
``docs/bitemporal.md``.

Writes: a new note costs nothing here (its live row is its only version). A writer's
note with exactly one new event (``Note.collected``) past its first costs one
``INSERT ... SELECT`` that copies its live recall-index row (the previous state) into
the closed versions, and one more for its live edges, inside the write's one statement
(:class:`~memfabric.projections.batch.RowBatch`; every part of it reads the snapshot
before the statement, so before the recall index's upsert of the new state) — nothing
is read or built on the client. Any other note (several events in one unit of work, a
``Withdrawn`` evolution patch, a released hold, a state applied on a plain cursor: a
catch-up, a tenant's gap, a rebuild) is replayed from the log on the same cursor and its
closed rows written afresh, so the inline rows and a replay from zero are identical.
"""

from __future__ import annotations

import functools
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

COLUMNS: tuple[str, ...] = (*recall_index.COLUMNS, "recorded_to")
"""A version row: the recall-index row of the state (``recorded_from`` included), then
the end of its transaction-time range."""

EDGE_COLUMNS: tuple[str, ...] = ("from_version", *link_graph.COLUMNS)
"""An edge row: the source's version, then the link-graph row."""

_TYPES = (*recall_index._COPY_TYPES, "timestamptz")  # noqa: SLF001 - same columns
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
    """``(row, edges)`` of ``note``'s current state: its recall-index row (with
    ``recorded_from`` = the state's latest event time) and ``recorded_to`` open
    (``None`` when the state has no recall row), and the edges of that row (none
    without it)."""
    try:
        row = recall_index.row_for(note, embedder_id, dim)
    except EmbedderChangedError:  # a state written before a migration to another dimension
        row = None
    if row is None:
        return None, []
    version = int(note.version)
    return (*row, None), [(version, *edge) for edge in link_graph.rows_for(note)]


def history_rows(events: Iterable[Any], embedder_id: str | None, dim: int
                 ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The closed version rows and their edges of one note from its decoded events in
    version order: the state after each event, closed at the next event's time. The
    state after the last event is left out: its live recall-index row is that version."""
    rows: list[list[Any]] = []
    edges: list[list[tuple[Any, ...]]] = []
    state: Any = None
    for event in events:
        if rows and rows[-1][-1] is None:
            rows[-1][-1] = event.timestamp
        state = replay.step(event, state)
        row, links = version_rows(state, embedder_id, dim)
        if row is not None:
            rows.append(list(row))
            edges.append(links)
    if rows and rows[-1][-1] is None:
        rows.pop()
        edges.pop()
    return [tuple(r) for r in rows], [edge for links in edges for edge in links]


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
_CLOSE_ROWS = (
    "INSERT INTO {t} ({cols}) SELECT {live_cols}, u.ts FROM unnest({{0}}::uuid[], {{1}}::timestamptz[],"
    " {{2}}::int[]) AS u(id, ts, v) JOIN {ri} ri ON ri.aggregate_id = u.id"
    " WHERE ri.tenant_id = ANY({{3}}::text[]) AND ri.version < u.v ON CONFLICT DO NOTHING"
)
_CLOSE_EDGES = (
    "INSERT INTO {e} ({cols}) SELECT ri.version, {edge_cols} FROM unnest({{0}}::uuid[], {{1}}::int[]) AS u(id, v)"
    " JOIN {ri} ri ON ri.aggregate_id = u.id JOIN {lg} g ON g.from_aggregate_id = ri.aggregate_id"
    " AND g.tenant_id = ri.tenant_id WHERE ri.tenant_id = ANY({{2}}::text[]) AND g.tenant_id = ANY({{2}}::text[])"
    " AND ri.version < u.v"
    " ON CONFLICT DO NOTHING"
)


@lru_cache(maxsize=1)
def close_templates() -> tuple[str, str]:
    """The two statements that close the current version of notes with one new event,
    as :class:`~memfabric.projections.batch.RowBatch` templates: copy each note's live
    recall-index row (the previous state, when it had one and it is older than the new
    version ``v``) into ``mf_note_versions`` with ``recorded_to`` = the new event's time
    (parameters: ids ``uuid[]``, times ``timestamptz[]``, new versions ``int[]``,
    tenants ``text[]``), and its live link-graph edges into ``mf_link_versions``
    (ids, new versions, tenants). A row or edge already there is kept. Both name the
    tenants of each table they read (partition pruning; Citus co-location)."""
    def q(name: str) -> str:
        return sql.Identifier(name).as_string(None)

    rows = _CLOSE_ROWS.format(
        t=q(TABLE), cols=", ".join(map(q, COLUMNS)), ri=q(tables.RECALL_INDEX),
        live_cols=", ".join("ri." + q(c) for c in recall_index.COLUMNS))
    edges = _CLOSE_EDGES.format(
        e=q(EDGES), cols=", ".join(map(q, EDGE_COLUMNS)), ri=q(tables.RECALL_INDEX), lg=q(tables.LINK_GRAPH),
        edge_cols=", ".join("g." + q(c) for c in link_graph.COLUMNS))
    return rows, edges


@lru_cache(maxsize=8)
def _statements(suffix: str) -> dict[str, bytes]:
    """The statements of a replay (:func:`_write_replayed`), composed once per table suffix."""
    t, e = sql.Identifier(TABLE + suffix), sql.Identifier(EDGES + suffix)

    def insert(table: sql.Identifier, columns: Sequence[str], binary: Sequence[str] = ()) -> sql.Composed:
        return sql.SQL("INSERT INTO {t} ({c}) VALUES ({p})").format(
            t=table, c=sql.SQL(", ").join(map(sql.Identifier, columns)),
            p=sql.SQL(", ").join(sql.SQL("%b") if c in binary else sql.Placeholder() for c in columns))

    composed = {
        "drop": sql.SQL("DELETE FROM {t} WHERE aggregate_id = ANY(%s)").format(t=t),
        "drop_edges": sql.SQL("DELETE FROM {e} WHERE from_aggregate_id = ANY(%s)").format(e=e),
        "row": insert(t, COLUMNS, ("embedding",)) + sql.SQL(" ON CONFLICT DO NOTHING"),
        "edge": insert(e, EDGE_COLUMNS) + sql.SQL(" ON CONFLICT DO NOTHING"),
    }
    return {name: stmt.as_bytes(None) for name, stmt in composed.items()}


def apply(cur: Cursor[Any] | BatchCursor, notes: Iterable[Note], mapper: Any, embedder_id: str | None,
          dim: int) -> None:
    """Bring the closed versions of ``notes`` up to date (see the module doc);
    ``mapper``: the sealing mapper a replay uses. A note of this unit of work without
    a new event is left alone, and so is a note at its first event (it has no closed
    version). Handed a :class:`~memfabric.projections.batch.BatchCursor` (a writer's
    one statement), a live note with one new event closes its previous version by the
    copy of :func:`close_templates`, put first in the batch (:meth:`RowBatch.add_statement`
    ``first``: run statement by statement, it still reads the live rows before their
    upsert); every other note is replayed (on the batch's direct cursor). Inserts keep a
    row already there and the copy skips a live row of the new version, so applying a
    state twice changes nothing."""
    fast: list[Note] = []
    slow: list[Note] = []
    batched = isinstance(cur, BatchCursor)
    for note in notes:
        collected = note.__dict__.get("collected")
        if collected == [] or (collected is not None and int(note.version) == 1 and note.live):
            continue
        (fast if batched and _fast(note) and note.live else slow).append(note)
    if fast:
        assert isinstance(cur, BatchCursor)  # (narrows the type: fast needs a batch)
        _close_current(cur, fast)
    if isinstance(cur, BatchCursor):  # notes left with no version (forgotten, held): nothing to replay
        _drop_batched(cur, [n.id for n in slow if not n.live])
        slow = [n for n in slow if n.live]
    if slow:
        _write_replayed(cur.direct() if isinstance(cur, BatchCursor) else cur, slow, mapper, embedder_id, dim)


def _close_current(cur: BatchCursor, notes: Sequence[Note]) -> None:
    """Collect into ``cur``'s batch the copy of each note's live row and edges into the
    closed versions (:func:`close_templates`), at the front of the batch."""
    rows_sql, edges_sql = close_templates()
    ids, versions = [n.id for n in notes], [int(n.version) for n in notes]
    tenants = list(dict.fromkeys(n.tenant_id for n in notes))
    for template, params in ((edges_sql, (ids, versions, tenants)),
                             (rows_sql, (ids, [n.modified_on for n in notes], versions, tenants))):
        text = template.format(*(f"%(p{i})s" for i in range(len(params)))).encode()
        named = {f"p{i}": value for i, value in enumerate(params)}
        cur.batch.add_statement(template, params, functools.partial(_run, query=text, params=named), first=True)


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
    return lambda own: _run(own, query=query, params=params)


def _write_replayed(cur: Cursor[Any], notes: Sequence[Note], mapper: Any, embedder_id: str | None,
                    dim: int) -> None:
    """Write every closed version of ``notes`` afresh from a replay of their events."""
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
    if rows:
        cur.executemany(st["row"], rows)
    if edges:
        cur.executemany(st["edge"], edges)


def _run(cur: Cursor[Any], *, query: bytes, params: Sequence[Any] | dict[str, Any]) -> None:
    cur.execute(query, params, prepare=True)


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
    """Bulk-load every closed version of ``notes`` (final states of a replay) with
    binary COPY; returns the number of version rows."""
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
AS_RECORDED = (
    # the rows at T. No WHERE inside the union's branches: PostgreSQL then pulls them up
    # as members of one append, and the conditions outside are pushed into each (a
    # branch with a WHERE stays a subquery, which a join on aggregate_id cannot probe
    # by its primary key). Inside this first item mf_recall_index is still the live
    # table: a WITH item sees only the items before it.
    "{rows} AS NOT MATERIALIZED (SELECT {cols}, li.recorded_to FROM (SELECT {cols}, NULL::timestamptz AS recorded_to"
    " FROM {ri} li UNION ALL SELECT {cols}, li.recorded_to FROM {t} li) li"
    " WHERE li.recorded_from <= %(known_at)s::timestamptz"
    " AND (li.recorded_to > %(known_at)s::timestamptz OR li.recorded_to IS NULL{not_closed})),"
    # the edges at T: a live edge of a live row at T, a version edge of a closed row at T
    " {lg} AS NOT MATERIALIZED (SELECT {edge_cols} FROM (SELECT {edge_cols}, NULL::integer AS from_version"
    " FROM {lg} g UNION ALL SELECT {edge_cols}, g.from_version FROM {e} g) g JOIN {rows} r"
    " ON r.aggregate_id = g.from_aggregate_id AND r.tenant_id = g.tenant_id"
    " AND (r.version = g.from_version OR (g.from_version IS NULL AND r.recorded_to IS NULL))),"
    " {ri} AS NOT MATERIALIZED (SELECT {cols} FROM {rows} li)"
)
"""Three ``WITH`` items, the last two named like the link graph and the recall index:
inside a statement that starts with them, PostgreSQL resolves those names to these
queries (a ``WITH`` name hides a table of the same name), so the very statements of
:mod:`memfabric.projections.recall_index` read the fabric as recorded at ``known_at``:
the live rows recorded by then (the notes' current versions) and the closed versions
that were current then, with the edges of each. ``NOT MATERIALIZED`` unions of tables
of the same column types: their conditions and join keys reach each table's indexes.
``{not_closed}``: empty when the two projections are written in one transaction
(:data:`NOT_CLOSED` otherwise)."""

ROWS_AT = "mf_known_rows"
"""The name of the first ``WITH`` item of :data:`AS_RECORDED` (no table has it)."""

NOT_CLOSED = (" AND NOT EXISTS (SELECT 1 FROM {t} x WHERE x.aggregate_id = li.aggregate_id"
              " AND x.version >= li.version)")
"""(``{t}``: the versions table; ``li``: a live row.)"""
"""With a separate projection runner the recall index and the versions move one after
the other: a live row whose version (or a later one) is already closed is left out, so
no note is read twice while the runner catches up (one primary-key probe per row)."""


@lru_cache(maxsize=2)
def _ctes(in_step: bool) -> bytes:
    """:data:`AS_RECORDED` composed (with :data:`NOT_CLOSED` unless ``in_step``)."""
    def q(name: str) -> str:
        return sql.Identifier(name).as_string(None)

    t = q(TABLE)
    cols = ", ".join(f"li.{q(c)}" for c in (*recall_index.COLUMNS, "tsv"))
    edge_cols = ", ".join(f"g.{q(c)}" for c in link_graph.COLUMNS)
    return AS_RECORDED.format(
        rows=q(ROWS_AT), lg=q(tables.LINK_GRAPH), ri=q(tables.RECALL_INDEX), t=t, e=q(EDGES), cols=cols,
        edge_cols=edge_cols,
        not_closed="" if in_step else NOT_CLOSED.format(t=t)).encode()


def as_recorded(statement: bytes, *, in_step: bool = True) -> bytes:
    """``statement`` (a ``SELECT`` or ``WITH`` statement over ``mf_recall_index`` /
    ``mf_link_graph``) reading the fabric as recorded at ``%(known_at)s`` instead
    (``in_step``: see :data:`AS_RECORDED`)."""
    ctes = _ctes(in_step)
    head = statement.lstrip()
    if head[:5].upper() == b"WITH ":
        return b"WITH " + ctes + b", " + head[5:]
    return b"WITH " + ctes + b" " + head


class RecordedCursor:
    """A cursor whose statements read the fabric as recorded at ``known_at``
    (:func:`as_recorded`; the parameter is added to each dict of parameters)."""

    def __init__(self, cur: Cursor[Any], known_at: datetime, *, in_step: bool = True) -> None:
        self._cur = cur
        self._known_at = known_at
        self._in_step = in_step

    def execute(self, query: Any, params: dict[str, Any] | None = None, **kwargs: Any) -> Cursor[Any]:
        text = query.as_bytes(self._cur) if isinstance(query, sql.Composable) else bytes(query)
        return self._cur.execute(as_recorded(text, in_step=self._in_step),
                                 {**(params or {}), "known_at": self._known_at}, **kwargs)


RECORDED_VECTOR_LIST = (
    # the notes whose state at T is their current one: the live index's HNSW graph
    # (and its unindexed tail), its rows recorded by T
    "v AS MATERIALIZED (SELECT aggregate_id, dist FROM ("
    "(SELECT li.aggregate_id, li.embedding <=> %(q)b AS dist FROM {live} li WHERE {w} AND li.indexed"
    " AND li.recorded_from <= %(known_at)s::timestamptz ORDER BY li.embedding <=> %(q)b LIMIT %(limit)s)"
    " UNION ALL (SELECT aggregate_id, dist FROM (SELECT li.aggregate_id, li.embedding <=> %(q)b AS dist"
    " FROM {live} li WHERE {w} AND NOT li.indexed AND li.recorded_from <= %(known_at)s::timestamptz OFFSET 0) s"
    " ORDER BY dist LIMIT %(limit)s)"
    # the notes changed since T: their version at T is closed now (exact scan)
    " UNION ALL (SELECT aggregate_id, dist FROM (SELECT li.aggregate_id, li.embedding <=> %(q)b AS dist"
    " FROM {versions} li WHERE {w} AND li.recorded_from <= %(known_at)s::timestamptz AND li.recorded_to > %(known_at)s::timestamptz OFFSET 0) s"
    " ORDER BY dist LIMIT %(limit)s)"
    ") u ORDER BY dist LIMIT %(limit)s),"
    " vr AS (SELECT aggregate_id, row_number() OVER (ORDER BY dist, aggregate_id) AS rank FROM v)"
)
"""The vector list of a ``known_at`` recall of a tenant large enough for HNSW (issue
31): the rows recorded at T are (1) live rows recorded by T (current versions) and (2)
closed versions that were current at T. (1) are read through the live recall index's
HNSW graph, with the live tail's exact scan; (2) are the versions of the notes changed
since T, scanned exactly (the partial btree on ``(tenant_id, recorded_to)`` finds them).
Used when both projections are applied in the writer's transaction (the default); a
fabric with a separate runner keeps the exact scan of :data:`AS_RECORDED`. ``{live}``:
the live table, schema-qualified (the statement's ``mf_recall_index`` names the rows
at T); ``{w}``: as in :data:`memfabric.projections.recall_tail.VECTOR_LIST`."""


def recorded_vector_list(live: sql.Composable) -> str:
    """:data:`RECORDED_VECTOR_LIST` with the live table ``live`` (a qualified
    identifier) filled in; ``{w}`` is left for
    :func:`memfabric.projections.recall_index.recall_statement`."""
    return (RECORDED_VECTOR_LIST.replace("{live}", live.as_string(None))
            .replace("{versions}", sql.Identifier(TABLE).as_string(None)))
