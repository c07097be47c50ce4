"""Issue 28 defect 7: a session that can connect must not stall writers by taking their
advisory locks. Runtime lock keys are keyed by the fabric secret (an outsider cannot
predict them) and every lock wait is bounded (``LockTimeoutError``, nothing written)."""

from __future__ import annotations

import time

import psycopg
import pytest

from memfabric.adapters import LockTimeoutError, open_fabric
from memfabric.projections.engine import advisory_key
from tests.conftest import event_count


def test_the_predictable_keys_of_a_scope_and_its_tenant_do_not_stall_a_writer(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        with psycopg.connect(dsn, autocommit=True) as outsider:
            for name in ("scope:" + notes.scope.key, "tenant:acme", "recall_index", "consolidation"):
                outsider.execute("SELECT pg_advisory_lock(%s)", (advisory_key(name),))
            started = time.perf_counter()
            notes.remember(kind="fact", content="The build server is in Frankfurt")
            assert time.perf_counter() - started < 5.0


def test_a_held_lock_makes_a_write_fail_typed_after_the_timeout_and_write_nothing(dsn: str) -> None:
    with open_fabric(dsn, lock_timeout=0.5) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="first fact about plums")
        before = event_count(dsn)
        key = fabric.engine.lock_key("tenant:acme")  # only a holder of the secret can compute it
        with psycopg.connect(dsn, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (key,))
            started = time.perf_counter()
            with pytest.raises(LockTimeoutError, match="lock wait ran out"):
                notes.remember(kind="fact", content="second fact about figs")
            assert time.perf_counter() - started < 5.0
        assert event_count(dsn) == before
        notes.remember(kind="fact", content="third fact about limes")  # free again
        assert event_count(dsn) == before + 1


def test_open_waits_for_the_open_lock_at_most_lock_timeout(dsn: str) -> None:
    with open_fabric(dsn):
        pass
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (advisory_key("mf-open"),))
        started = time.perf_counter()
        with pytest.raises(LockTimeoutError, match="open"):
            open_fabric(dsn, lock_timeout=0.5)
        assert time.perf_counter() - started < 5.0
