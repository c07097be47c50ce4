"""``memfabric status``: one dict that says how a fabric is (issue 27).

:func:`fabric_status` gathers it from an open fabric; the CLI renders it (a table, or
``--json`` as it is). Sections are plain JSON-able dicts so that more (replicas,
partitions) can be added as new keys without changing the others.
"""

from __future__ import annotations

import math
from typing import Any

import psycopg

from memfabric.adapters.bootstrap import Fabric, recorded_embedder
from memfabric.projections import tables


def _projections(fabric: Fabric) -> list[dict[str, Any]]:
    from memfabric.projections.rebuild import ProjectionAdmin  # noqa: PLC0415

    return [
        {"name": s.name, "position": s.position, "head": s.head, "lag_events": s.lag_events,
         "lag_seconds": None if math.isnan(s.lag_seconds) else round(s.lag_seconds, 3),
         "state": "stopped" if s.error is not None else ("behind" if s.lag_events else "ok"),
         "error": None if s.error is None else {**s.error, "at": s.error["at"].isoformat()}}
        for s in ProjectionAdmin.for_fabric(fabric).status()
    ]


def _audit(conn: psycopg.Connection[Any], head: int) -> dict[str, Any]:
    """The newest audit checkpoint: its position, digest (the anchor) and time, and how
    many log events come after it (``None`` fields before the first checkpoint)."""
    have = conn.execute("SELECT to_regclass(%s)", (tables.AUDIT_CHAIN,)).fetchone()
    row = None
    if have is not None and have[0] is not None:
        row = conn.execute(
            f"SELECT position, digest, created_at, (SELECT count(*) FROM {tables.AUDIT_CHAIN})"  # noqa: S608
            f" FROM {tables.AUDIT_CHAIN} ORDER BY position DESC LIMIT 1").fetchone()
    if row is None:
        return {"checkpoints": 0, "position": None, "anchor": None, "at": None,
                "events_after": head, "log_head": head}
    after = conn.execute(f"SELECT count(*) FROM {tables.EVENTS} WHERE notification_id > %s",  # noqa: S608
                         (int(row[0]),)).fetchone()
    return {"checkpoints": int(row[3]), "position": int(row[0]), "anchor": f"{int(row[0])}:{bytes(row[1]).hex()}",
            "at": row[2].isoformat(), "events_after": int(after[0]) if after else 0, "log_head": head}


def _topology(fabric: Fabric, replicas: list[str] | None) -> dict[str, Any]:
    """``{"primary", "replicas", "partitions"}``: the primary (DSN without password),
    each replica's ``{"name", "lag_s", "replayed_lsn", "state", "error"}`` (``replicas``
    or ``$MEMFABRIC_REPLICA_DSNS``, else those the fabric was opened with) and the
    tenant hash partitions (1: not partitioned)."""
    from memfabric.adapters.postgres.replicas import topology  # noqa: PLC0415 - one health check
    from memfabric.adapters.postgres.replicas import replicas_from_env  # noqa: PLC0415

    found = replicas_from_env(replicas or None)
    topo = topology(fabric.dsn, found) if found else fabric.topology()
    return {"primary": topo["primary"], "replicas": topo["replicas"], "partitions": fabric.partitions()}


def fabric_status(fabric: Fabric, replicas: list[str] | None = None) -> dict[str, Any]:
    """How the fabric is, as a JSON-able dict:

    - ``database``: ``{"name", "user", "read_only", "read_only_reason", "embedded"}``
      (``embedded``: the data directory of the embedded server, else ``None``);
    - ``log``: ``{"head", "events"}`` (last notification id, event rows);
    - ``projections``: one ``{"name", "position", "head", "lag_events", "lag_seconds",
      "state" (ok / behind / stopped), "error"}`` per projection, and ``lag``:
      ``{"events", "seconds"}``, the largest of them;
    - ``embedder``: the recorded ``{"id", "dim", "params"}`` and ``in_use`` (the id
      this process serves with);
    - ``audit``: ``{"checkpoints", "position", "anchor" ("POSITION:HEX"), "at",
      "events_after", "log_head"}`` of the newest checkpoint (``None`` fields before
      the first one);
    - ``topology`` (issue 25): ``{"primary", "replicas": [{"name", "lag_s",
      "replayed_lsn", "state", "error"}], "partitions"}`` (``replicas``: DSNs to check,
      default ``$MEMFABRIC_REPLICA_DSNS``).

    Reads only (works for a read-only auditor role)."""
    projections = _projections(fabric)
    with psycopg.connect(fabric.dsn) as conn:
        row = conn.execute(
            f"SELECT current_database(), current_user, coalesce(max(notification_id), 0), count(*)"  # noqa: S608
            f" FROM {tables.EVENTS}").fetchone()
        assert row is not None
        head = int(row[2])
        audit = _audit(conn, head)
    embedded = getattr(fabric, "embedded_server", None)
    seconds = [p["lag_seconds"] for p in projections if p["lag_seconds"] is not None]
    return {
        "database": {"name": row[0], "user": row[1], "read_only": fabric.read_only,
                     "read_only_reason": fabric.read_only_reason,
                     "embedded": None if embedded is None else str(embedded.pgdata)},
        "log": {"head": head, "events": int(row[3])},
        "projections": projections,
        "lag": {"events": max((p["lag_events"] for p in projections), default=0),
                "seconds": max(seconds, default=0.0)},
        "embedder": {**(recorded_embedder(fabric.dsn) or {}), "in_use": str(fabric.service.embedder.id)},
        "audit": audit,
        "topology": _topology(fabric, replicas),
    }


__all__ = ["fabric_status"]
