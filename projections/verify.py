"""What ``projections verify`` reports, and the row-by-row comparison of a live table
with its replay (:meth:`memfabric.projections.rebuild.ProjectionAdmin.verify`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import Cursor, sql

from memfabric.projections import catalog, tables


@dataclass(frozen=True, slots=True)
class RowDifference:
    """One differing row: ``key`` (primary key values), ``kind`` (``missing``: only in
    the replay, ``extra``: only in the live table, ``changed``) and, for ``changed``,
    ``columns`` mapping each differing column to ``(live, replayed)`` text values."""

    key: dict[str, Any]
    kind: str
    columns: dict[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Verify outcome of one table of one projection at ``position``: row counts of the
    live table and of the replay, the number of differing rows and the first ones.
    ``problem``: ``None``, or why the tracked position itself is wrong (issue 28: a
    position past the log head, :func:`tracking_problem`); ``ok`` only when neither."""

    projection: str
    table: str
    position: int
    head: int
    live_rows: int
    replayed_rows: int
    differences: int
    first: list[RowDifference]
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.differences == 0 and self.problem is None


MIGRATION_ROW = "__migration__"
"""The row eventsourcing's single-row tracking table is created with (position 1, the
table layout's version, not an event): never a projection's position."""


def tracking_problem(cur: Cursor[Any], table: str, name: str, head: int) -> str | None:
    """Why projection ``name``'s tracking (table ``table``: its floor row and its
    per-tenant rows) cannot be right against the log whose last notification id is
    ``head``, else ``None``: a row past the head (moved ahead in SQL) makes the replay
    and the live table agree while later writes of the projection fail (their positions
    are not above it)."""
    row = cur.execute(
        sql.SQL("SELECT application_name, notification_id FROM {t} WHERE notification_id > %s"
                " AND application_name <> %s ORDER BY notification_id DESC LIMIT 1").format(
            t=sql.Identifier(table)), (head, MIGRATION_ROW)).fetchone()
    if row is None:
        return None
    app, position = (row["application_name"], row["notification_id"]) if isinstance(row, dict) else row
    return (f"tracked position {position} (row {app!r}) is past the log head {head}: the tracking of "
            f"{name} was changed; writes fail until it is rebuilt (memfabric projections rebuild)")


def compare(
    cur: Cursor[Any], name: str, live: str, scratch: str, position: int, head: int, show: int,
    live_where: sql.Composable | None = None,
) -> VerifyReport:
    """Compare table ``live`` of projection ``name`` (with ``live_where``: its rows that
    meet that condition, e.g. one partition's, issue 25) with its replay ``scratch`` row
    by row (``md5`` of each row's text, matched on the primary key, or the multisets of
    row hashes without one; columns of
    :data:`~memfabric.projections.tables.INDEX_STATE_COLUMNS` are left out); ``show``:
    how many differing rows to describe."""
    cols = [c for c in catalog.columns(cur, live) if c not in tables.INDEX_STATE_COLUMNS]
    keys = catalog.primary_key(cur, live) or ["_row_md5"]
    st = sql.Identifier(scratch)
    lt: sql.Composable = sql.Identifier(live)
    if live_where is not None:
        lt = sql.SQL("(SELECT * FROM {t} WHERE {w}) AS live_rows").format(t=lt, w=live_where)
    row_text = sql.SQL("md5(ROW({c})::text)").format(c=sql.SQL(", ").join(map(sql.Identifier, cols)))
    key_list = sql.SQL(", ").join(map(sql.Identifier, keys))
    if keys == ["_row_md5"]:  # no primary key: compare the multisets of row hashes

        def side(t: sql.Composable) -> sql.Composed:
            return sql.SQL("SELECT {h} AS _row_md5, count(*) AS v FROM {t} GROUP BY 1").format(h=row_text, t=t)
    else:

        def side(t: sql.Composable) -> sql.Composed:
            return sql.SQL("SELECT {k}, {h} AS v FROM {t}").format(k=key_list, h=row_text, t=t)

    diff = sql.SQL(
        "SELECT {k}, a.v AS live, b.v AS replayed FROM ({a}) a FULL JOIN ({b}) b USING ({k})"
        " WHERE a.v IS DISTINCT FROM b.v"
    ).format(k=key_list, a=side(lt), b=side(st))
    count = int(catalog.first(cur.execute(sql.SQL("SELECT count(*) FROM ({d}) d").format(d=diff)).fetchone()))
    first: list[RowDifference] = []
    if count:
        rows = cur.execute(sql.SQL("{d} ORDER BY {o} LIMIT %s").format(d=diff, o=key_list), (show,)).fetchall()
        for row in rows:
            key = {k: row[k] for k in keys}
            if row["live"] is None:
                first.append(RowDifference(key, "missing"))
            elif row["replayed"] is None:
                first.append(RowDifference(key, "extra"))
            elif keys == ["_row_md5"]:
                first.append(RowDifference(key, "changed", {"count": (row["live"], row["replayed"])}))
            else:
                first.append(RowDifference(key, "changed", column_diff(cur, sql.Identifier(live), st, keys, key)))
    live_rows = int(catalog.first(cur.execute(sql.SQL("SELECT count(*) FROM {t}").format(t=lt)).fetchone()))
    replayed = int(catalog.first(cur.execute(sql.SQL("SELECT count(*) FROM {t}").format(t=st)).fetchone()))
    return VerifyReport(name, live, position, head, live_rows, replayed, count, first)

def column_diff(
    cur: Cursor[Any], lt: sql.Identifier, st: sql.Identifier, keys: list[str], key: dict[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Per differing column of the row ``key``: ``(live, replayed)`` (``to_jsonb`` values)."""
    where = sql.SQL(" AND ").join(
        sql.SQL("{k} = %s").format(k=sql.Identifier(k)) for k in keys
    )
    params = [key[k] for k in keys]
    query = sql.SQL("SELECT to_jsonb(t) FROM {t} t WHERE {w}")
    live = catalog.first(cur.execute(query.format(t=lt, w=where), params).fetchone())
    new = catalog.first(cur.execute(query.format(t=st, w=where), params).fetchone())
    return {
        c: (live.get(c), new.get(c))
        for c in sorted(set(live) | set(new))
        if live.get(c) != new.get(c) and c not in tables.INDEX_STATE_COLUMNS
    }
