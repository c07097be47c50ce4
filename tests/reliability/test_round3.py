"""Issue 28 (reliability and security, round three): one regression test per defect
this branch fixes (2, 4, 5, 6, 8, 9 without the LangGraph parts, 10). Each failed on the
code before its fix."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.adapters import open_fabric


# --- defect 2: every DSN parameter on every connection ------------------------------

def _pool_settings(fabric: Any) -> list[dict[str, Any]]:
    """``application_name``, ``statement_timeout`` and libpq's non-default parameters
    of as many pooled connections of the event-log datastore as it holds at once."""
    pool = fabric.log.datastore.pool
    conns = [pool.getconn() for _ in range(pool.min_size)]
    try:
        out = []
        for conn in conns:
            row = conn.execute("SELECT current_setting('application_name') AS a,"
                               " current_setting('statement_timeout') AS s").fetchone()
            out.append({"application_name": row["a"], "statement_timeout": row["s"],
                        **conn.info.get_parameters()})
        return out
    finally:
        for conn in conns:
            pool.putconn(conn)


def test_dsn_parameters_reach_every_pool(dsn: str) -> None:
    """Defect 2: application_name, options (-c statement_timeout) and sslmode/sslrootcert
    of the DSN are on the event pool's connections (and every backend the fabric opens)."""
    full = make_conninfo(dsn, application_name="mf-round3", sslmode="disable",
                         sslrootcert="/nonexistent/root.crt",
                         options="-c statement_timeout=4321")
    with open_fabric(full) as fabric:
        fabric.scope("acme", "u1").remember(kind="fact", content="User likes tea")
        fabric.scope("acme", "u1").recall("tea")
        settings = _pool_settings(fabric)
        assert len(settings) >= 2
        for s in settings:
            assert s["application_name"] == "mf-round3", s
            assert s["statement_timeout"] == "4321ms", s
            assert s.get("sslmode") == "disable" and s.get("sslrootcert") == "/nonexistent/root.crt", s
        dbname = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(dsn) as conn:
            names = {r[0] for r in conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,)).fetchall()}
        assert names == {"mf-round3"}, names


def test_dsn_role_option_reaches_the_event_pool(dsn: str) -> None:
    """Defect 2: ``options=-c role=...`` (docs/roles.md) is the role of the event pool."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS mf_round3_admin")
        conn.execute("CREATE ROLE mf_round3_admin")
        conn.execute("GRANT mf_round3_admin TO CURRENT_USER")
        conn.execute("GRANT ALL ON SCHEMA public TO mf_round3_admin")
    try:
        with open_fabric(make_conninfo(dsn, options="-c role=mf_round3_admin")) as fabric:
            fabric.scope("acme").remember(kind="fact", content="User likes coffee")
            with fabric.log.datastore.get_connection() as conn:
                assert conn.execute("SELECT current_user AS u").fetchone()["u"] == "mf_round3_admin"
        with psycopg.connect(dsn) as conn:
            owner = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'memfabric_events'").fetchone()
        assert owner == ("mf_round3_admin",)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("REASSIGN OWNED BY mf_round3_admin TO CURRENT_USER")
            conn.execute("DROP OWNED BY mf_round3_admin")
            conn.execute("DROP ROLE mf_round3_admin")
