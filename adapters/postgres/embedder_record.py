"""The embedder a fabric's database records (``mf_fabric_embedder``): written on the first
open, read by every later one, replaced by ``reembed``'s switch (issue 19).

- :func:`recorded_embedder` reads the record, :func:`record_embedder` writes it once;
- :func:`choose_embedder`: the embedder an open serves with (the given one, refused
  when it is not the recorded one; else the recorded one built by name; else
  ``HashEmbedder()``);
- :func:`check_dim`: the recall index's vector dimension must be the embedder's.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from memfabric.adapters.embedders import HashEmbedder, embedder_from_name
from memfabric.domain.errors import FabricError
from memfabric.domain.ports import Embedder
from memfabric.projections import tables


def embedder_params(embedder: Embedder) -> dict[str, Any]:
    """What ``mf_fabric_embedder.params`` records of an embedder: its plain public
    attributes (``vector_weight``, ``batch_size`` ...), without ``id`` and ``dim``."""
    attrs = {"vector_weight": getattr(embedder, "vector_weight", None), **getattr(embedder, "__dict__", {})}
    return {k: v for k, v in attrs.items()
            if not k.startswith("_") and isinstance(v, str | int | float | bool) and k not in ("id", "dim")}


EMBEDDER_DDL = (
    f"CREATE TABLE IF NOT EXISTS {tables.FABRIC_EMBEDDER} ("
    " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),"
    " embedder_id text NOT NULL, dim integer NOT NULL, params jsonb NOT NULL DEFAULT '{}',"
    " recorded_at timestamptz NOT NULL DEFAULT now())"
)


def recorded_embedder(dsn: str) -> dict[str, Any] | None:
    """The embedder recorded in the database (``{"id", "dim", "params"}``), or ``None``
    for a database opened for the first time (or by a version before the record)."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass(%s)", (tables.FABRIC_EMBEDDER,)).fetchone()
        if not exists or exists[0] is None:
            return None
        row = conn.execute(
            f"SELECT embedder_id, dim, params FROM {tables.FABRIC_EMBEDDER}"  # noqa: S608
        ).fetchone()
    return None if row is None else {"id": row[0], "dim": int(row[1]), "params": dict(row[2] or {})}


def record_embedder(dsn: str, embedder: Embedder) -> None:
    params = embedder_params(embedder)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EMBEDDER_DDL)
        conn.execute(
            f"INSERT INTO {tables.FABRIC_EMBEDDER} (embedder_id, dim, params) VALUES (%s, %s, %s)"  # noqa: S608
            " ON CONFLICT DO NOTHING",
            (str(embedder.id), int(embedder.dim), json.dumps(params)),
        )


def choose_embedder(embedder: Embedder | None, recorded: dict[str, Any] | None) -> Embedder:
    """The given embedder (refused when it is not the recorded one), else the recorded
    one built from its id, else ``HashEmbedder()``."""
    if recorded is None:
        return embedder or HashEmbedder()
    if embedder is None:
        try:
            return embedder_from_name(recorded["id"])
        except ValueError:
            raise FabricError(
                f"the database records embedder {recorded['id']} (dimension {recorded['dim']}), which memfabric "
                "cannot build by itself; pass that embedder to open_fabric(embedder=...)") from None
        except ImportError as exc:
            raise FabricError(
                f"the database records embedder {recorded['id']}, whose package is not installed: {exc}") from None
    if str(embedder.id) != recorded["id"]:
        raise FabricError(
            f"embedder {embedder.id} (dimension {embedder.dim}) does not match the database's recorded embedder "
            f"{recorded['id']} (dimension {recorded['dim']}); open it with the recorded one or without an embedder")
    return embedder


def check_dim(datastore: Any, dim: int) -> None:
    with datastore.get_connection() as conn:
        row = conn.execute(
            "SELECT format_type(a.atttypid, a.atttypmod) AS t FROM pg_attribute a"  # noqa: S608
            " JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname = '" + tables.RECALL_INDEX + "' AND a.attname = 'embedding'"  # noqa: S608
        ).fetchone()
    if row is not None and row["t"] != f"vector({dim})":
        raise FabricError(
            f"embedder dimension {dim} does not match the recall index ({row['t']}); "
            "migrate the embedder or use the original one"
        )
