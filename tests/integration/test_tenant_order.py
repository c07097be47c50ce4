"""Issue 24: the log is ordered per tenant, not globally.

A writer of tenant A that has drawn its notification ids and not yet committed (held
open on purpose here) must neither make tenant B's writers wait nor be passed over by
any position: the deferred runner, a global catch-up, a blue-green rebuild and verify
all see its event once it commits late, although B's later ids committed first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres.uow import PostgresUnitOfWork
from memfabric.projections.rebuild import ProjectionAdmin


@contextmanager
def held_commit(tenant: str) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Make the next unit of work of ``tenant`` stop after it appended and projected
    (ids drawn, locks held) and before COMMIT, until ``release`` is set; ``reached``
    is set when it stops there."""
    reached, release = threading.Event(), threading.Event()
    original = PostgresUnitOfWork.commit

    def commit(self: PostgresUnitOfWork) -> None:
        original(self)
        if self.tenant() == tenant and not reached.is_set():
            reached.set()
            assert release.wait(60)

    PostgresUnitOfWork.commit = commit  # type: ignore[method-assign]
    try:
        yield reached, release
    finally:
        PostgresUnitOfWork.commit = original  # type: ignore[method-assign]
        release.set()


def _start(target: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _recall_ids(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT note_id FROM mf_recall_index").fetchall()}


def _event_ids(dsn: str, tenant: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT notification_id FROM memfabric_events WHERE tenant = %s ORDER BY 1", (tenant,)).fetchall()]


def test_a_late_commit_is_never_skipped_by_the_deferred_runner(dsn: str) -> None:
    with open_fabric(dsn, inline_projections=False, await_projections=False) as fabric:
        a, b = fabric.scope("tenant-a", "u", "t"), fabric.scope("tenant-b", "u", "t")
        with held_commit("tenant-a") as (reached, release):
            writer, got = _start(lambda: a.remember(kind="fact", content="Alpha committed late"))
            assert reached.wait(30)
            started = time.perf_counter()
            late = [b.remember(kind="fact", content=f"Bravo fact number {i} about kiwis {i}") for i in range(3)]
            assert time.perf_counter() - started < 5.0  # B never queued behind A's open transaction
            assert min(_event_ids(dsn, "tenant-b")) > 0
            runner, done = _start(fabric.engine.catch_up)
            time.sleep(0.5)
            assert runner.is_alive(), "the runner passed an id still in flight"
            release.set()
            writer.join(30)
            runner.join(30)
        assert not isinstance(got[0], BaseException), got
        assert not isinstance(done[0], BaseException), done
        a_id = got[0].id
        # A drew its id before B's, and committed after them
        assert max(_event_ids(dsn, "tenant-a")) < min(_event_ids(dsn, "tenant-b"))
        fabric.engine.catch_up()
        assert {a_id, *(n.id for n in late)} <= _recall_ids(dsn)
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify())


def test_inline_writers_of_other_tenants_run_while_one_is_open(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        a, b = fabric.scope("tenant-a", "u", "t"), fabric.scope("tenant-b", "u", "t")
        with held_commit("tenant-a") as (reached, release):
            writer, got = _start(lambda: a.remember(kind="fact", content="Alpha committed late"))
            assert reached.wait(30)
            started = time.perf_counter()
            late = [b.remember(kind="fact", content=f"Bravo fact number {i} about kiwis {i}") for i in range(3)]
            waited = time.perf_counter() - started
            assert b.recall("kiwis").hits  # read-your-writes while A is open
            release.set()
            writer.join(30)
        assert waited < 5.0
        assert not isinstance(got[0], BaseException), got
        assert {got[0].id, *(n.id for n in late)} <= _recall_ids(dsn)
        admin = ProjectionAdmin.for_fabric(fabric)
        assert all(s.lag_events == 0 for s in admin.status())
        bad = [r for r in admin.verify() if not r.ok]
        assert not bad, bad


def test_a_blue_green_rebuild_keeps_an_event_that_commits_late(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        a, b = fabric.scope("tenant-a", "u", "t"), fabric.scope("tenant-b", "u", "t")
        b.remember(kind="fact", content="Bravo first fact about plums")
        admin = ProjectionAdmin.for_fabric(fabric)
        with held_commit("tenant-a") as (reached, release):
            writer, got = _start(lambda: a.remember(kind="fact", content="Alpha committed late"))
            assert reached.wait(30)
            b.remember(kind="fact", content="Bravo second fact about figs")
            rebuild, report = _start(lambda: admin.rebuild(blue_green=True))
            time.sleep(0.5)
            release.set()
            writer.join(30)
            rebuild.join(60)
        assert not isinstance(report[0], BaseException), report
        assert got[0].id in _recall_ids(dsn)
        bad = [r for r in admin.verify() if not r.ok]
        assert not bad, bad


@pytest.mark.parametrize("inline", [True, False])
def test_positions_are_per_tenant_and_verify_compares_each_tenants_cut(dsn: str, inline: bool) -> None:
    with open_fabric(dsn, inline_projections=inline, await_projections=False) as fabric:
        for t in ("t1", "t2", "t3"):
            fabric.scope(t, "u", "x").remember(kind="fact", content=f"{t} likes green tea")
        fabric.engine.catch_up()
        with psycopg.connect(dsn) as conn:
            rows = dict(conn.execute(
                "SELECT application_name, notification_id FROM mf_recall_index_tracking").fetchall())
        head = max(_event_ids(dsn, "t3"))
        assert max(rows.values()) == head
        if inline:
            assert {"memfabric|t1", "memfabric|t2", "memfabric|t3"} <= set(rows)
        admin = ProjectionAdmin.for_fabric(fabric)
        assert [s.position for s in admin.status()] == [head] * len(admin.status())
        bad = [r for r in admin.verify() if not r.ok]
        assert not bad, bad


def test_blue_green_rebuilds_while_writers_run_never_deadlock(dsn: str) -> None:
    """Round 2's closing note: a blue-green rebuild of the consolidation index while
    writers run could end in a deadlock error (the switch took its advisory lock, then
    the table a writer had read). The switch now gives way instead."""
    with open_fabric(dsn) as fabric:
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            notes = fabric.scope(f"tenant-{w % 2}", f"u{w}", "t")
            i = 0
            while not stop.is_set():
                try:
                    notes.remember(kind="fact", content=f"writer {w} fact {i % 25} about quinces {i % 25}")
                except BaseException as exc:  # noqa: BLE001 - checked below
                    errors.append(exc)
                i += 1

        threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(4)]
        for t in threads:
            t.start()
        admin = ProjectionAdmin.for_fabric(fabric)
        try:
            for names in (["consolidation"], None, ["consolidation", "recall_index"]):
                admin.rebuild(names, blue_green=True)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert not errors, errors[:3]
        bad = [r for r in admin.verify() if not r.ok]
        assert not bad, bad


def test_audit_checkpoints_never_cover_an_id_still_in_flight(dsn: str) -> None:
    from memfabric.adapters.audit import verify_chain

    with open_fabric(dsn) as fabric:
        a, b = fabric.scope("tenant-a", "u", "t"), fabric.scope("tenant-b", "u", "t")
        b.remember(kind="fact", content="Bravo first fact about plums")
        with held_commit("tenant-a") as (reached, release):
            writer, got = _start(lambda: a.remember(kind="fact", content="Alpha committed late"))
            assert reached.wait(30)
            b.remember(kind="fact", content="Bravo second fact about figs")
            audit, report = _start(lambda: verify_chain(fabric, every=1))
            time.sleep(0.5)
            release.set()
            writer.join(30)
            audit.join(60)
        assert not isinstance(report[0], BaseException), report
        assert report[0].ok, report[0]
        again = verify_chain(fabric, every=1)
        assert again.ok and not again.inserted and not again.gaps, again
