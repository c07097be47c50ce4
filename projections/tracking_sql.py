"""The statements that record projection positions, composed once per shape.

Every inline writer records its tenant's position of each projection with
eventsourcing's single-row tracking statement (``PostgresTrackingRecorder``), composed
here into one statement per write, with the rows the write batched
(:class:`~memfabric.projections.batch.RowBatch`) as data-modifying CTEs before them. A
refused move (a row already past the position) fails the statement with a cast error
naming the projection, so nothing has to be read back: ``memfabric: failed to record
tracking of <name>``; the one-round-trip statement (:meth:`TrackingSQL.fast`) also fails
with :data:`GAP_MESSAGE` when the tenant has events its projections have not applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg import sql

from memfabric.projections.batch import RowBatch

GAP_MESSAGE = "memfabric: tenant gap"
"""What the one-round-trip write statement fails with when the tenant has events its
projections have not applied."""
GAP_SQL = sql.Literal(GAP_MESSAGE + " of ").as_string(None)

_CACHED = 256
"""Statements each cache keeps (the row-count shapes of large batches vary)."""


def tracking_check(i: int, name: str) -> str:
    """The check of tracking CTE ``t<i>`` (projection ``name``): a cast error when the
    row did not move (the message is concatenated with the count so the planner cannot
    fold the cast into a constant error)."""
    message = sql.Literal(f"memfabric: failed to record tracking of {name}: ").as_string(None)
    count = f"(SELECT count(*) FROM t{i})"  # noqa: S608 - a CTE name
    return f"CASE WHEN {count} = 0 THEN ({message} || {count})::int END"


class TrackingSQL:
    """The statements of one engine's projections (``trackers``: eventsourcing's
    tracking recorder per projection name; ``tracking(name)``: its table's
    identifier; ``events_table``: the log's table), each cached by its shape."""

    def __init__(self, trackers: Mapping[str, Any], tracking: Callable[[str], sql.Identifier],
                 events_table: str) -> None:
        self._trackers = trackers
        self._tracking = tracking
        self._events = sql.Identifier(events_table).as_string(None)
        self._cache: dict[tuple[Any, ...], Any] = {}

    def _cached(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > _CACHED:
                self._cache.clear()
            found = self._cache[key] = make()
        return found

    def _trackers_raw(self, names: Sequence[str], position: str) -> list[str]:
        """eventsourcing's tracking insert of each of ``names`` with ``$1`` for the
        tracking row and ``position`` (SQL) for the position."""
        return [self._trackers[n].insert_tracking_statement.as_string(None)
                .replace("%(application_name)s", "$1").replace("%(notification_id)s", position)
                for n in names]

    def tracking(self, names: tuple[str, ...]) -> bytes:
        """``WITH t0 AS (<tracking insert 0>), ... SELECT <checks>`` (psycopg's
        ``%(application_name)s`` / ``%(notification_id)s`` placeholders)."""
        def make() -> bytes:
            ctes = sql.SQL(", ").join(
                sql.SQL("{} AS ({})").format(sql.Identifier(f"t{i}"), self._trackers[n].insert_tracking_statement)
                for i, n in enumerate(names))
            checks = ", ".join(tracking_check(i, n) for i, n in enumerate(names))
            return sql.SQL("WITH {} SELECT {}").format(ctes, sql.SQL(checks)).as_bytes(None)
        return self._cached(("tracking", names), make)  # type: ignore[no-any-return]

    def batched(self, names: tuple[str, ...], batch: RowBatch) -> bytes:
        """:meth:`tracking` with ``batch``'s row writes as CTEs before the tracking
        ones, in ``$n`` placeholders (``$1`` the tenant row, ``$2`` the position)."""
        def make() -> bytes:
            ctes = [*batch.ctes(first=3), *(f"t{i} AS ({q})" for i, q in enumerate(self._trackers_raw(names, "$2")))]
            checks = ", ".join(tracking_check(i, n) for i, n in enumerate(names))
            return ("WITH " + ", ".join(ctes) + " SELECT " + checks).encode()  # noqa: S608
        return self._cached(("batched", names, batch.key), make)  # type: ignore[no-any-return]

    def _lowest_position(self, names: Sequence[str], row: str, floor: str) -> str:
        """SQL: the lowest position of the projections ``names`` of a tenant whose
        tracking row and floor row are the SQL expressions ``row`` and ``floor`` (each
        a primary-key lookup: ``greatest`` of the two rows, ``0`` without either)."""
        lows = (f"coalesce(greatest((SELECT notification_id FROM {t} WHERE application_name = {row}),"  # noqa: S608
                f" (SELECT notification_id FROM {t} WHERE application_name = {floor})), 0)"
                for t in (self._tracking(n).as_string(None) for n in names))
        return "least(" + ", ".join(lows) + ")"

    def _newest(self, tenant: str, skip: str = "0") -> str:
        """SQL: the id of tenant ``tenant``'s newest event after skipping ``skip`` (a
        backward scan of the index ``(tenant, notification_id)``; ``NULL`` past the first)."""
        return (f"(SELECT notification_id FROM {self._events} WHERE tenant = {tenant}"  # noqa: S608
                f" ORDER BY notification_id DESC OFFSET {skip} LIMIT 1)")

    def fast(self, names: tuple[str, ...], batch: RowBatch) -> bytes:
        """The one-round-trip write statement: ``$1`` the tenant's tracking row, ``$2``
        the floor's, ``$3`` the tenant, ``$4`` the events appended, then the batch's;
        its one value is the tenant's newest event id (the position recorded). The gap
        check: the newest event before the ``$4`` appended (``prev``) must be at or
        below the tenant's lowest position."""
        def make() -> bytes:
            head = (f"h AS MATERIALIZED (SELECT {self._newest('$3')} AS top, {self._newest('$3', '$4')} AS prev,"
                    f" {self._lowest_position(names, '$1', '$2')} AS low)")
            trackers = self._trackers_raw(names, "(SELECT top FROM h)")
            ctes = [head, *batch.ctes(first=5), *(f"t{i} AS ({q})" for i, q in enumerate(trackers))]
            gap = f"CASE WHEN (SELECT prev > low FROM h) THEN ({GAP_SQL} || (SELECT prev FROM h))::int END"  # noqa: S608
            checks = ", ".join([gap, *(tracking_check(i, n) for i, n in enumerate(names))])
            return ("WITH " + ", ".join(ctes) + " SELECT (SELECT top FROM h), " + checks).encode()  # noqa: S608
        return self._cached(("fast", names, batch.key), make)  # type: ignore[no-any-return]

    def probe(self, names: tuple[str, ...]) -> bytes:
        """Whether a tenant (``%s``) has events some of ``names`` have not applied
        (then a ``%s`` pair per projection: the tenant's tracking row, the floor's)."""
        def make() -> bytes:
            return (f"SELECT coalesce({self._newest('%s')} > {self._lowest_position(names, '%s', '%s')}, false)"
                    ).encode()
        return self._cached(("probe", names), make)  # type: ignore[no-any-return]

    def positions_array(self, names: tuple[str, ...]) -> tuple[bytes, int]:
        """``ARRAY[<position of each of names>]::bigint[]`` with one ``%s`` (a
        ``text[]`` of tracking rows) per projection, and that count."""
        def make() -> tuple[bytes, int]:
            expr = sql.SQL("ARRAY[{}]::bigint[]").format(sql.SQL(", ").join(
                sql.SQL("(SELECT max(notification_id) FROM {t} WHERE application_name = ANY(%s::text[]))").format(
                    t=self._tracking(n)) for n in names))
            return expr.as_bytes(None), len(names)
        return self._cached(("array", names), make)  # type: ignore[no-any-return]

    def positions(self, names: tuple[str, ...]) -> bytes:
        """Rows ``(name, pos)``: each projection's greatest position over the
        tracking rows ``%(rows)s``."""
        def make() -> bytes:
            reads = sql.SQL(" UNION ALL ").join(
                sql.SQL("(SELECT {n}::text AS name, max(notification_id) AS pos FROM {t}"
                        " WHERE application_name = ANY(%(rows)s))").format(n=sql.Literal(n), t=self._tracking(n))
                for n in names)
            return reads.as_bytes(None)
        return self._cached(("positions", names), make)  # type: ignore[no-any-return]
