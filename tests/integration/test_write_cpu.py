"""Issue 24, CPU per write under concurrency: what keeps a writer's process and its
backend from redoing work on every write (docs/write-path.md, "CPU per write")."""

from __future__ import annotations

import psycopg

from memfabric.adapters import Fabric
from memfabric.projections import entities


def test_a_thread_keeps_the_connection_it_used_last(fabric: Fabric) -> None:
    datastore = fabric.store.datastore
    with datastore.get_connection() as first, datastore.get_connection() as second:
        both = {first.info.backend_pid, second.info.backend_pid}  # the pool holds two connections
    assert len(both) == 2
    notes = fabric.scope("acme", "u1", "t1")
    seen = set()
    for i in range(4):
        notes.remember(kind="fact", content=f"Project apollo ships on day {i}")
        with datastore.get_connection() as conn:
            seen.add(conn.info.backend_pid)
    assert len(seen) == 1  # a queue would alternate: each backend planning every statement anew


def test_the_entity_key_lookup_is_planned_once_per_connection(fabric: Fabric, dsn: str) -> None:
    fabric.scope("acme", "u1", "t1").remember(kind="fact", content="Alice Smith works as a nurse in Lisbon")
    digests = [("00000000-0000-0000-0000-000000000001", 4), ("00000000-0000-0000-0000-000000000002", 4)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(8):
            entities.select_keys(conn.cursor(), ("acme", "u1", "t1"), digests, None)
        generic, custom = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s", (f"%FROM {entities.KEYS} k%",)).fetchone() or (0, 0)
    assert generic >= 2 and custom <= 5  # the arrays' lengths no longer make each plan custom
