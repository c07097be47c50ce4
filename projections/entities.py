"""The entity read model (issue 32): tables ``mf_entities``, ``mf_entity_keys`` and
``mf_entity_notes``, a pure function of ``Entity`` and ``Note`` aggregate states.

- ``mf_entities``: one row per un-forgotten entity (merged ones too): scope ids,
  visibility, entity id, type, ``merged_into``, counts of names and identifiers.
  No name: the names live only in the entity's sealed events.
- ``mf_entity_keys``: one row per lookup key of a *live* (not merged, not forgotten)
  entity: the key's kind and its **keyed digest** (the first 128 bits of HMAC-SHA256
  under the fabric secret of :func:`memfabric.domain.entities.keys.digest_input`,
  computed by the writer and sealed in the entity's events; stored as ``uuid``, 16
  bytes), the name it came from (``source``) and that name's token count. The primary
  key ``(tenant_id, digest, aggregate_id, source) INCLUDE`` :data:`KEY_INCLUDE` is the
  lookup index: a resolution reads each digest's rows, their entity id and everything
  its visibility and type filter checks, from adjacent index entries and nothing else
  (an index-only scan, no join: the table's autovacuum thresholds are 2 % so its pages
  stay all-visible). A btree on ``aggregate_id`` serves the rewrite of one entity's
  rows; a unique index on ``(grp, digest)`` for identifier keys makes an identifier
  unique per visibility group (``grp``: :func:`memfabric.domain.visibility.lock_scope`
  of the entity's home).
- ``mf_entity_notes``: one row per un-forgotten note whose subject key names an
  entity (``entity:<id>``): scope ids, visibility, note id, entity id and the merge
  that last moved it.

Forgetting an entity deletes its rows (and its data key makes the digests in its
events unreadable). Write side: resolution reads it right after a write. Tracking
table ``mf_entities_tracking``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast
from uuid import UUID

from psycopg import Cursor, sql

from memfabric.domain import visibility
from memfabric.domain.entity import Entity, note_entity
from memfabric.domain.note import Note
from memfabric.projections.base import copy_rows, has_table
from memfabric.projections.batch import BatchCursor, LazyCursor, RowBatch, encode_params

NAME = "entities"
ENTITIES = "mf_entities"
KEYS = "mf_entity_keys"
NOTES = "mf_entity_notes"

ENTITY_COLUMNS = ("aggregate_id", "tenant_id", "resource_id", "thread_id", "visibility", "entity_id",
                  "type", "merged_into", "names", "identifiers")
_ENTITY_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "text", "int4", "int4")
KEY_COLUMNS = ("aggregate_id", "tenant_id", "resource_id", "thread_id", "visibility", "grp",
               "entity_id", "type", "kind", "digest", "source", "ntok")
_KEY_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "text", "text", "uuid", "int4", "int4")
_DIGEST = KEY_COLUMNS.index("digest")
KEY_PRIMARY = ("tenant_id", "digest", "aggregate_id", "source")
"""The primary key of ``mf_entity_keys`` (with ``INCLUDE`` :data:`KEY_INCLUDE`): the lookup
index. Every other column of a key row is a function of it (an entity's home, visibility
and type never change; a digest names its kind; a source its token count)."""
KEY_INCLUDE = ("ntok", "entity_id", "type", "resource_id", "thread_id", "visibility")
"""The columns the lookup index carries beside its key: what :func:`select_keys` returns
(``ntok``, ``entity_id``) and what its filter reads (``type`` and the home and
visibility of :data:`_VISIBLE`), so a lookup reads the index alone. A key row exists
only while its entity is live and its home, visibility and type never change, so they
are the entity's own (``mf_entities``) at every commit."""
KEY_RELOPTIONS = "autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_scale_factor = 0.02"
"""Vacuum ``mf_entity_keys`` after 2 % of its rows changed (default 20 %), so nearly all
its pages are all-visible and a lookup stays index-only."""
NOTE_COLUMNS = ("aggregate_id", "tenant_id", "resource_id", "thread_id", "visibility", "note_id",
                "entity_id", "merge_id")
_NOTE_TYPES = ("uuid", "text", "text", "text", "text", "text", "text", "text")
_KEY_PK = f"PRIMARY KEY ({', '.join(KEY_PRIMARY)}) INCLUDE ({', '.join(KEY_INCLUDE)})"
"""The primary key clause of ``mf_entity_keys`` (see :data:`KEY_INCLUDE`)."""


def group_key(e: Entity) -> str:
    """The visibility group an entity's identifiers are unique in (a scope key)."""
    vis = visibility.of_consent({"visibility": e.visibility})
    return visibility.lock_scope(e.scope, vis).key


def entity_row(e: Entity) -> tuple[Any, ...] | None:
    """The ``mf_entities`` row of an entity, ``None`` once forgotten."""
    if not e.listed:
        return None
    return (e.id, e.tenant_id, e.resource_id or "", e.thread_id or "", e.visibility, e.entity_id,
            e.type, e.merged_into, len(e.names), len(e.identifiers))


def key_rows(e: Entity) -> list[tuple[Any, ...]]:
    """The ``mf_entity_keys`` rows of a live entity (none when merged or forgotten),
    one per distinct ``(kind, digest, source)``."""
    if not e.live:
        return []
    seen: set[tuple[str, str, int]] = set()
    out = []
    grp = group_key(e)
    for kind, digest, source, ntok in e.keys:
        if (kind, digest, source) in seen:
            continue
        seen.add((kind, digest, source))
        out.append((e.id, e.tenant_id, e.resource_id or "", e.thread_id or "", e.visibility, grp,
                    e.entity_id, e.type, kind, digest, int(source), int(ntok)))
    return out


def note_row(note: Note) -> tuple[Any, ...] | None:
    """The ``mf_entity_notes`` row of a note about an entity, ``None`` otherwise."""
    entity_id = note_entity(note) if note.listed else None
    if entity_id is None:
        return None
    return (note.id, note.tenant_id, note.resource_id or "", note.thread_id or "",
            visibility.of_consent(note.consent), note.note_id, entity_id,
            getattr(note, "entity_merge", None))


def _split(aggregates: Iterable[Any]) -> tuple[list[Entity], list[Note]]:
    entities, notes = [], []
    for a in aggregates:
        if isinstance(a, Entity):
            entities.append(a)
        elif isinstance(a, Note):
            notes.append(a)
    return entities, notes


def _upsert(table: str, columns: Sequence[str]) -> sql.Composed:
    return sql.SQL("INSERT INTO {t} ({c}) VALUES ({p}) ON CONFLICT (aggregate_id) DO UPDATE SET {u}").format(
        t=sql.Identifier(table), c=sql.SQL(", ").join(map(sql.Identifier, columns)),
        p=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        u=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in columns[1:]))


def _unnest(columns: Sequence[str], types: Sequence[str]) -> sql.Composed:
    """``SELECT * FROM unnest(%(c)s::type[], ...)``: rows given as one array per column."""
    return sql.SQL("SELECT * FROM unnest({a})").format(a=sql.SQL(", ").join(
        sql.SQL("{p}::" + typ + "[]").format(p=sql.Placeholder(c)) for c, typ in zip(columns, types, strict=True)))


def _arrays(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    """``rows`` as one list per column (the parameters of :func:`_unnest`)."""
    return {c: [r[i] for r in rows] for i, c in enumerate(columns)}


def _batch_gone(batch: RowBatch, notes: Sequence[Note]) -> list[Note]:
    """Collect into ``batch`` the delete of the rows of the forgotten ones among
    ``notes`` (what :func:`apply_notes` runs for them); returns the others."""
    gone = [n.id for n in notes if not n.listed]
    if gone:
        template = f"DELETE FROM {sql.Identifier(NOTES).as_string(None)} WHERE aggregate_id = ANY({{0}}::uuid[])"  # noqa: S608
        batch.add_statement(template, (gone,), lambda own: _delete_notes(own, gone))
    return [n for n in notes if n.listed]


def _delete_notes(cur: Cursor[Any], ids: list[UUID]) -> None:
    cur.execute(_delete(NOTES), (ids,))


def _delete(table: str) -> sql.Composed:
    return sql.SQL("DELETE FROM {t} WHERE aggregate_id = ANY(%s)").format(t=sql.Identifier(table))


def _stale_keys(table: str) -> sql.Composed:
    """Delete the key rows of ``%(ids)s`` that are not among the rows given (``%(aggregate_id)s``,
    ``%(digest)s``, ``%(source)s`` arrays)."""
    return sql.SQL(
        "DELETE FROM {t} k WHERE k.aggregate_id = ANY(%(ids)s::uuid[]) AND NOT EXISTS ("
        " SELECT 1 FROM unnest(%(aggregate_id)s::uuid[], %(digest)s::uuid[], %(source)s::int4[]) AS n(a, d, s)"
        " WHERE n.a = k.aggregate_id AND n.d = k.digest AND n.s = k.source)").format(t=sql.Identifier(table))


def _insert_keys(table: str) -> sql.Composed:
    """Insert key rows given as arrays, keeping those already there (see :data:`KEY_PRIMARY`)."""
    return sql.SQL("INSERT INTO {t} ({c}) {rows} ON CONFLICT ({k}) DO NOTHING").format(
        t=sql.Identifier(table), c=sql.SQL(", ").join(map(sql.Identifier, KEY_COLUMNS)),
        rows=_unnest(KEY_COLUMNS, _KEY_TYPES), k=sql.SQL(", ").join(map(sql.Identifier, KEY_PRIMARY)))


def stored_key_rows(e: Entity) -> list[tuple[Any, ...]]:
    """:func:`key_rows` as ``mf_entity_keys`` stores them (the digest a ``UUID``)."""
    return [(*k[:_DIGEST], UUID(hex=k[_DIGEST]), *k[_DIGEST + 1:]) for k in key_rows(e)]


def apply_entities(cur: Cursor[Any], entities: Sequence[Entity]) -> None:
    """Bring the rows of ``entities`` up to date in three statements: the key rows they
    no longer have deleted (all of them for a merged or forgotten entity), the entity
    rows upserted, the key rows they gained inserted. Deletes come first, so a merge
    moves an identifier between two entities of one batch without passing through a
    state that holds it twice; an unchanged key row is neither deleted nor written
    again (its index page stays all-visible)."""
    if not entities:
        return
    keys = [k for e in entities for k in stored_key_rows(e)]
    arrays = _arrays(KEY_COLUMNS, keys)
    cur.execute(_stale_keys(KEYS), {"ids": [e.id for e in entities], **arrays})
    gone = [e.id for e in entities if entity_row(e) is None]
    if gone:
        cur.execute(_delete(ENTITIES), (gone,))
    rows = [r for r in map(entity_row, entities) if r is not None]
    if rows:
        cur.executemany(_upsert(ENTITIES, ENTITY_COLUMNS), rows)
    if keys:
        cur.execute(_insert_keys(KEYS), arrays)


def apply_notes(cur: Cursor[Any], notes: Sequence[Note]) -> None:
    """Upsert the rows of notes about an entity (one statement); delete those of
    forgotten notes (a note loses its entity only when it is forgotten, so no other
    note needs a statement)."""
    rows = list({r[0]: r for r in map(note_row, notes) if r is not None}.values())  # the last state of each
    gone = [n.id for n in notes if not n.listed]
    if gone:
        cur.execute(_delete(NOTES), (gone,))
    if rows:
        cur.execute(sql.SQL("INSERT INTO {t} ({c}) {rows} ON CONFLICT (aggregate_id) DO UPDATE SET {u}").format(
            t=sql.Identifier(NOTES), c=sql.SQL(", ").join(map(sql.Identifier, NOTE_COLUMNS)),
            rows=_unnest(NOTE_COLUMNS, _NOTE_TYPES),
            u=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                 for c in NOTE_COLUMNS[1:])), _arrays(NOTE_COLUMNS, rows))


def migrate_keys(cur: Cursor[Any]) -> bool:
    """Bring an ``mf_entity_keys`` of an earlier layout to the current one (see the module
    doc), in place; returns whether anything changed. The catalogue is read first, so a
    current table is neither altered nor locked. Two earlier layouts:

    - the first: a hex ``text`` digest, primary key ``(aggregate_id, kind, digest,
      source)``, btree ``(tenant_id, digest)``: the digest becomes ``uuid``, that btree
      is dropped and the primary key rebuilt as below;
    - the second: the primary key ``INCLUDE (ntok)`` only (a lookup joined
      ``mf_entities``): the primary key is rebuilt with :data:`KEY_INCLUDE` (one
      ``ALTER TABLE``: the table is locked while the index is built)."""
    if not has_table(cur, KEYS):
        return False
    first = _column_type(cur, KEYS, "digest") == "text"
    constraint, included = _primary_key(cur, KEYS)
    if not first and included == KEY_INCLUDE:
        return False
    t = sql.Identifier(KEYS)
    if first:
        cur.execute(sql.SQL("DROP INDEX IF EXISTS {i}").format(i=sql.Identifier(KEYS + "_digest")))
    drop = sql.SQL("DROP CONSTRAINT {c}, ").format(c=sql.Identifier(constraint)) if constraint else sql.SQL("")
    retype = sql.SQL("ALTER COLUMN digest TYPE uuid USING digest::uuid, " if first else "")
    cur.execute(sql.SQL("ALTER TABLE {t} {drop}{retype}ADD CONSTRAINT {c} " + _KEY_PK + ", SET (" + KEY_RELOPTIONS
                        + ")").format(t=t, drop=drop, retype=retype, c=sql.Identifier(KEYS + "_pkey")))
    return True


def _primary_key(cur: Cursor[Any], table: str) -> tuple[str | None, tuple[str, ...]]:
    """``(constraint name, INCLUDE columns in order)`` of ``table``'s primary key
    (``(None, ())`` without one)."""
    row = cur.execute(
        "SELECT c.conname, ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY"
        " AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " WHERE k.n > i.indnkeyatts ORDER BY k.n) AS included"
        " FROM pg_index i JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.contype = 'p'"
        " WHERE i.indrelid = to_regclass(%s) AND i.indisprimary", (table,)).fetchone()
    if row is None:
        return None, ()
    name, included = (row["conname"], row["included"]) if isinstance(row, dict) else row
    return str(name), tuple(included)


def _column_type(cur: Cursor[Any], table: str, column: str) -> str | None:
    row = cur.execute("SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema()"
                      " AND table_name = %s AND column_name = %s", (table, column)).fetchone()
    return None if row is None else str(row["data_type"] if isinstance(row, dict) else row[0])


class EntitiesProjection:
    """The entity read model as a :class:`~memfabric.projections.base.NoteProjection`
    over ``Entity`` and ``Note`` aggregates."""

    name = NAME
    tables: tuple[str, ...] = (ENTITIES, KEYS, NOTES)
    write_side = True
    aggregate_types: tuple[type, ...] = (Entity, Note)
    batch_rows = True
    """May be handed a ``BatchCursor``: the deletes of forgotten notes' rows join its
    batch (issue 30: a sweep batch stays on its unit of work's wire), the rest runs on
    its direct cursor."""

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        s = table_suffix
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid PRIMARY KEY, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, visibility text NOT NULL,"
            " entity_id text NOT NULL, type text NOT NULL, merged_into text, names integer NOT NULL,"
            " identifiers integer NOT NULL)").format(t=sql.Identifier(ENTITIES + s)))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid NOT NULL, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, visibility text NOT NULL,"
            " grp text NOT NULL, entity_id text NOT NULL, type text NOT NULL, kind text NOT NULL,"
            " digest uuid NOT NULL, source integer NOT NULL, ntok integer NOT NULL,"
            " " + _KEY_PK + ") WITH (" + KEY_RELOPTIONS + ")").format(
                t=sql.Identifier(KEYS + s)))
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid PRIMARY KEY, tenant_id text NOT NULL,"
            " resource_id text NOT NULL, thread_id text NOT NULL, visibility text NOT NULL,"
            " note_id text NOT NULL, entity_id text NOT NULL, merge_id text)").format(
                t=sql.Identifier(NOTES + s)))
        if not table_suffix:
            migrate_keys(cur)
            self.create_indexes(cur)

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        s = table_suffix
        for table, cols, suffix, unique in (
                (ENTITIES, "(tenant_id, entity_id)", "ids", ""),
                (KEYS, "(aggregate_id)", "aggregate", ""),
                (KEYS, "(grp, digest) WHERE kind = 'id'", "ident", "UNIQUE "),
                (NOTES, "(tenant_id, entity_id, aggregate_id)", "entity", "")):
            t = table + s
            cur.execute(sql.SQL("CREATE " + unique + "INDEX IF NOT EXISTS {i} ON {t} " + cols).format(
                i=sql.Identifier(f"{t}_{suffix}"), t=sql.Identifier(t)))

    def apply(self, cur: Cursor[Any] | BatchCursor, aggregates: Iterable[Any]) -> None:
        entities, notes = _split(aggregates)
        if isinstance(cur, BatchCursor):
            notes = _batch_gone(cur.batch, notes)
            cur = cast("Cursor[Any]", LazyCursor(cur.direct))  # made only if a statement runs
        apply_entities(cur, entities)
        apply_notes(cur, notes)

    def copy(self, cur: Cursor[Any], aggregates: Iterable[Any], *, table_suffix: str = "") -> int:
        entities, notes = _split(aggregates)
        s = table_suffix
        n = copy_rows(cur, ENTITIES + s, ENTITY_COLUMNS, _ENTITY_TYPES,
                      (r for r in map(entity_row, entities) if r is not None))
        n += copy_rows(cur, KEYS + s, KEY_COLUMNS, _KEY_TYPES, (k for e in entities for k in stored_key_rows(e)))
        n += copy_rows(cur, NOTES + s, NOTE_COLUMNS, _NOTE_TYPES,
                       (r for r in map(note_row, notes) if r is not None))
        return n


_VISIBLE = ("tenant_id = %(t)s AND ((resource_id = %(r)s AND thread_id = %(th)s) OR visibility = 'tenant'"
            " OR (visibility = 'resource' AND resource_id = %(r)s AND %(r)s <> ''))")
"""``memfabric.domain.visibility.visible`` in SQL (the reader's ``t``, ``r``, ``th``)."""

VISIBLE_KEY = ("k.tenant_id = %(t)s AND ((k.resource_id = %(r)s AND k.thread_id = %(th)s) OR k.visibility = 'tenant'"
              " OR (k.visibility = 'resource' AND k.resource_id = %(r)s AND %(r)s <> ''))")
""":data:`_VISIBLE` on the ``mf_entity_keys`` row ``k`` (its entity's home and visibility)."""


def select_keys(cur: Cursor[Any], reader: tuple[str, str, str], digests: Sequence[tuple[str, int]],
                type_: str | None) -> list[dict[str, Any]]:
    """Key rows of live entities visible from ``reader`` per ``(digest, n)``: at most
    ``n`` rows of that digest (of ``type_`` when given), the first by aggregate id.
    Rows ``{i, aggregate_id, entity_id, source, ntok}``, ``i`` the 1-based position of
    the row's digest in ``digests`` (the caller maps it back: no digest travels back
    or is parsed). One prepared statement: per digest an index-only scan of the
    primary key ``(tenant_id, digest, ...)``, whose :data:`KEY_INCLUDE` columns hold the
    entity id and what the visibility and type filter reads, stopping at ``n`` visible
    rows; no other table is read."""
    query, params = _keys_sql(reader, digests, type_)
    return list(cur.execute(query, params, prepare=True).fetchall())


def _keys_sql(reader: tuple[str, str, str], digests: Sequence[tuple[str, int]],
              type_: str | None) -> tuple[str, dict[str, Any]]:
    """:func:`select_keys`' statement (``%(name)s`` placeholders) and parameters."""
    t, r, th = reader
    only = " AND k.type = %(type)s" if type_ is not None else ""
    return ("SELECT x.* FROM unnest((SELECT %(d)s::uuid[]), (SELECT %(n)s::int[])) WITH ORDINALITY AS q(digest, lim, i)"  # noqa: S608
            f" CROSS JOIN LATERAL (SELECT q.i, k.aggregate_id, k.entity_id, k.source, k.ntok FROM {KEYS} k"
            f" WHERE k.tenant_id = %(t)s AND k.digest = q.digest AND {VISIBLE_KEY}{only}"
            " LIMIT q.lim) x",
            {"d": [d for d, _ in digests], "n": [n for _, n in digests], "t": t, "r": r, "th": th,
             "type": type_})


KEYS_FOUND_MESSAGE = "memfabric: entity keys found"
"""The message of :func:`keys_absent_guard`'s refusal (a cast error)."""


def keys_absent_guard(reader: tuple[str, str, str], digests: Sequence[tuple[str, int]],
                      type_: str | None) -> tuple[str, dict[str, Any]]:
    """A statement (and its parameters) that returns one ``NULL`` when
    :func:`select_keys` would return no row, and otherwise fails with
    :data:`KEYS_FOUND_MESSAGE` (a cast of the message and the row count to ``int``,
    evaluated per row, so it is never folded at planning): sent instead of the lookup by
    a write that assumed no key matches (issue 24), it fails that write's transaction
    when one does. Its array parameters are sent as literals (``encode_params``: no
    Python list dumper per write; the statement casts them)."""
    query, params = _keys_sql(reader, digests, type_)
    return (f"SELECT CASE WHEN c.n > 0 THEN ('{KEYS_FOUND_MESSAGE}: ' || c.n)::int END"  # noqa: S608
            f" FROM (SELECT count(*) AS n FROM ({query}) f) c", encode_params(params))


def select_owner(cur: Cursor[Any], grp: str, digest: str) -> str | None:
    """The entity id holding identifier key ``digest`` (hex) in group ``grp``, or ``None``."""
    row = cur.execute(f"SELECT entity_id FROM {KEYS} WHERE grp = %s AND digest = %s::uuid AND kind = 'id'",  # noqa: S608
                      (grp, digest)).fetchone()
    return None if row is None else str(row["entity_id"])


def select_entity(cur: Cursor[Any], reader: tuple[str, str, str], entity_id: str) -> list[dict[str, Any]]:
    """``mf_entities`` rows of ``entity_id`` visible from ``reader`` (own scope first)."""
    t, r, th = reader
    return list(cur.execute(
        f"SELECT * FROM {ENTITIES} WHERE entity_id = %(id)s AND {_VISIBLE}"  # noqa: S608
        " ORDER BY (resource_id = %(r)s AND thread_id = %(th)s) DESC LIMIT 3",
        {"id": entity_id, "t": t, "r": r, "th": th}).fetchall())


def select_page(cur: Cursor[Any], reader: tuple[str, str, str], *, after: str | None,
                limit: int) -> list[dict[str, Any]]:
    """Live entities visible from ``reader`` by entity id after ``after``."""
    t, r, th = reader
    return list(cur.execute(
        f"SELECT * FROM {ENTITIES} WHERE merged_into IS NULL AND {_VISIBLE}"  # noqa: S608
        " AND entity_id > %(after)s ORDER BY entity_id LIMIT %(k)s",
        {"t": t, "r": r, "th": th, "after": after or "", "k": limit}).fetchall())


def select_homed(cur: Cursor[Any], tenant_id: str, resource_id: str | None, thread_id: str | None,
                 limit: int) -> list[dict[str, Any]]:
    """Un-forgotten entities whose home is in a scope prefix (``None``: any), by aggregate id."""
    where, params = "tenant_id = %s", [tenant_id]
    for column, value in (("resource_id", resource_id), ("thread_id", thread_id)):
        if value is not None:
            where += f" AND {column} = %s"
            params.append(value)
    return list(cur.execute(f"SELECT * FROM {ENTITIES} WHERE {where} ORDER BY aggregate_id LIMIT %s",  # noqa: S608
                            [*params, limit]).fetchall())


def select_notes_of(cur: Cursor[Any], tenant_id: str, entity_id: str, *, merge_id: str | None,
                    after: UUID | None, limit: int) -> list[dict[str, Any]]:
    """Notes about ``entity_id`` (moved by ``merge_id`` when given), by aggregate id."""
    only = " AND merge_id = %(m)s" if merge_id is not None else ""
    return list(cur.execute(
        f"SELECT * FROM {NOTES} WHERE tenant_id = %(t)s AND entity_id = %(e)s{only}"  # noqa: S608
        " AND aggregate_id > %(after)s ORDER BY aggregate_id LIMIT %(k)s",
        {"t": tenant_id, "e": entity_id, "m": merge_id,
         "after": after or UUID(int=0), "k": limit}).fetchall())
