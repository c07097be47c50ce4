"""Shared fixtures: one real embedded PostgreSQL 18 + pgvector per test session and a
fresh database per test (cloned from a template that has the ``vector`` extension).

Set ``MEMFABRIC_TEST_DSN`` to run the suite against another server instead (the user
needs CREATEDB; the template needs ``CREATE EXTENSION vector`` rights once).

The embedded server asks every role but its owner (``postgres``) for a password (issue
27, ``memfabric.adapters.postgres.embedded.secure_hba``): a test that creates a login role gives
it one and puts it in the DSN.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.adapters import Fabric, open_fabric, open_memory_fabric
from memfabric.adapters.postgres.embedded import EmbeddedPostgres

TEMPLATE = "mf_test_template"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """DSN of the session's server (embedded unless ``MEMFABRIC_TEST_DSN`` is set)."""
    external = os.environ.get("MEMFABRIC_TEST_DSN")
    if external:
        yield external
        return
    tmp = tempfile.mkdtemp(prefix="memfabric-test-")
    os.chmod(tmp, 0o755)
    try:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        try:
            yield server.dsn
        finally:
            server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # tests leave no data behind


@pytest.fixture(scope="session")
def _template(pg_server: str) -> str:
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    with psycopg.connect(make_conninfo(pg_server, dbname=TEMPLATE), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return TEMPLATE


def new_database(pg_server: str, template: str) -> str:
    """Create an empty database cloned from the template; return its DSN."""
    name = "mf_t_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
    return make_conninfo(pg_server, dbname=name)


def drop_database(pg_server: str, dsn: str) -> None:
    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def dsn(pg_server: str, _template: str) -> Iterator[str]:
    """A fresh, empty database (with pgvector) for this test."""
    url = new_database(pg_server, _template)
    try:
        yield url
    finally:
        drop_database(pg_server, url)


@pytest.fixture(params=["memory", "postgres"])
def fab(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An open fabric on each backend in turn (default settings): in memory, then on a
    fresh PostgreSQL database. Test modules that need other settings define their own."""
    if request.param == "memory":
        with open_memory_fabric() as f:
            yield f
    else:
        with open_fabric(request.getfixturevalue("dsn")) as f:
            yield f


@pytest.fixture
def fabric(dsn: str) -> Iterator[Fabric]:
    """An open fabric (default settings, hash embedder) on a fresh database."""
    with open_fabric(dsn) as fab:
        yield fab


def event_count(dsn: str) -> int:
    """Rows in the event log."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM memfabric_events").fetchone()
    return int(row[0]) if row else 0


def fetch(dsn: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run a read query on the test database."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()


def race_processes(target: Any, dsn: str, n: int = 4, timeout: float = 120) -> list[Any]:
    """Start ``n`` spawned processes running ``target(dsn, barrier, queue)`` (they meet
    at the barrier, then each puts one result on the queue); every process must exit 0.
    Returns the ``n`` results."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(dsn, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0
    return [out.get(timeout=5) for _ in range(n)]
