"""Issue 30 on PostgreSQL: a sweep killed with SIGKILL resumes with exact totals; the
projections rebuild identical after a sweep; a raw dump of every table after a
retention erasure holds none of the erased content."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.postgres.session import TxSession
from memfabric.domain.note import note_uuid
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch
from tests.integration.test_privacy import dump_every_table
from tests.integration.test_retention import old_sweep_erasure

RETENTION = {"ephemeral": "1h", "durable": "30d"}

_CHILD = textwrap.dedent("""
    import sys, time
    from datetime import datetime
    from memfabric.adapters import open_fabric
    fabric = open_fabric(sys.argv[1], catch_up=False)
    def progress(n):
        print("batch", n, flush=True)
        time.sleep(0.5)
    fabric.sweep(datetime.fromisoformat(sys.argv[2]), batch_size=5, progress=progress)
    print("done", flush=True)
""")


def test_a_sweep_killed_mid_way_resumes_with_exact_totals(dsn: str) -> None:
    now = datetime.now(timezone.utc) + timedelta(days=1)
    with open_fabric(dsn, retention=RETENTION) as fabric:
        notes = fabric.scope("acme", "u1")
        doomed = notes.remember_many([{"kind": "fact", "content": f"fleeting note {i} about tide {i * 7}",
                                       "retention": "ephemeral"} for i in range(40)])
        held = notes.remember_many([{"kind": "fact", "content": f"held memo {i} on case {i * 3}",
                                     "retention": "ephemeral"} for i in range(4)])
        for h in held:
            notes.forget(id=h.id, hold=True)
        kept = notes.remember(kind="fact", content="a durable fact about the sea")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, dsn, now.isoformat()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for _ in range(3):
            line = proc.stdout.readline()
            assert line.startswith("batch"), (line, proc.stderr.read() if proc.poll() is not None else "")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    tombs = fetch(dsn, "SELECT count(*) FROM memfabric_events WHERE topic LIKE %s", ("%Note.Forgotten",))
    done_before = int(tombs[0][0]) - 4  # minus the holds
    assert 0 < done_before < 40, "the kill should land mid-sweep"

    with open_fabric(dsn) as fabric:
        result = fabric.sweep(now, batch_size=5)
        notes = fabric.scope("acme", "u1")
        assert result.complete and result.resumed
        assert result.counts["ephemeral"] == {"expired": 0, "forgotten": 40, "skipped_held": 4,
                                              "skipped_floor": 0, "decayed": 0}
        assert result.changed == 40 - done_before
        assert all(notes.get(n.id).forgotten for n in doomed)
        assert all(notes.get(h.id).held for h in held) and not notes.get(kept.id).forgotten
        tombs = fetch(dsn, "SELECT count(*) FROM memfabric_events WHERE topic LIKE %s", ("%Note.Forgotten",))
        assert int(tombs[0][0]) == 44  # every doomed note tombstoned exactly once (plus 4 holds)
        again = fabric.sweep(now, batch_size=5)
        assert again.changed == 0 and again.counts == result.counts


def test_projections_rebuild_identical_after_a_sweep(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    notes.remember(kind="fact", content="a passing note on sailing", retention="ephemeral")
    notes.remember(kind="fact", content="the harbour closes at dusk", valid_to=datetime.now(timezone.utc)
                   + timedelta(hours=1))
    notes.remember(kind="working", block="todo", content="check the ropes")
    reg = notes.remember(kind="fact", content="crew contract of frank", retention="regulated")
    notes.set_retention(reg.id, "ephemeral")
    older = notes.remember(kind="fact", content="an older log's passing note", retention="ephemeral")
    old_sweep_erasure(fabric, notes.scope, older.id, datetime.now(timezone.utc) + timedelta(days=1))
    fabric.sweep(datetime.now(timezone.utc) + timedelta(days=2))  # one-event tombstones beside the old pair
    admin = ProjectionAdmin.for_fabric(fabric)
    reports = admin.verify()
    assert any(r.table == "mf_retention" for r in reports)
    assert all(r.ok for r in reports), [r for r in reports if not r.ok]
    rows = fetch(fabric.dsn, "SELECT note_id, retention, regulated, expired FROM mf_retention ORDER BY 1")
    admin.rebuild()
    assert fetch(fabric.dsn, "SELECT note_id, retention, regulated, expired FROM mf_retention ORDER BY 1") == rows
    assert all(r.ok for r in admin.verify())


def test_raw_dump_after_a_retention_erasure_holds_none_of_the_content(dsn: str) -> None:
    secret = "Ephemeral Zanzibarquokka met Glorbwidget at pier 9"
    with open_fabric(dsn, retention=RETENTION) as fabric:
        notes = fabric.scope("clinic", "p1")
        n = notes.remember(kind="fact", content=secret, context="Snarfleblatt context",
                           keywords=["Wibbleton"], retention="ephemeral")
        block = notes.remember(kind="working", block="scratch", content="Frobnicator draft")
        fabric.service.set_retention(notes.scope, block.id, "ephemeral", requested_by="t")
        blob, _ = dump_every_table(dsn)
        assert b"Zanzibarquokka" in blob  # positive control: the recall index holds it
        result = fabric.sweep(datetime.now(timezone.utc) + timedelta(days=1))
        assert result.counts["ephemeral"]["forgotten"] == 2
        blob, _ = dump_every_table(dsn)
        for needle in (b"Zanzibarquokka", b"Glorbwidget", b"Snarfleblatt", b"Wibbleton", b"Frobnicator"):
            assert needle not in blob and needle.lower() not in blob.lower()
        assert not fetch(dsn, "SELECT 1 FROM mf_note_keys WHERE originator_id = %s",
                         (note_uuid(notes.scope, n.id),))
        assert [h.type for h in notes.history(n.id)] == ["Remembered", "Forgotten"]


def test_the_demo_shows_one_sweep(dsn: str) -> None:
    from rich.console import Console  # noqa: PLC0415

    from memfabric.adapters.cli.demo import run_demo  # noqa: PLC0415
    summary = run_demo(Console(quiet=True), dsn=dsn)["retention"]
    expected = {"expired": 1, "forgotten": 1, "skipped_held": 1, "skipped_floor": 0, "decayed": 0}
    assert summary == {"dry": expected, "totals": expected, "again": 0}


def test_a_write_after_the_page_was_read_is_honoured(dsn: str) -> None:
    """The sweep decides on a page replayed outside its unit of work (one page ahead);
    writes that land on two of its notes after that replay make the batch's append
    conflict on their versions, and the batch is decided again on a replay in its unit
    of work: the note moved to `durable` is kept, the held one counted as held. On a
    pool of one connection: the page read ahead waits for the batch's connection."""
    now = datetime.now(timezone.utc) + timedelta(days=1)
    with open_fabric(dsn, retention=RETENTION, pool_size=1, max_overflow=0) as fabric:
        notes = fabric.scope("acme", "u1")
        made = notes.remember_many([{"kind": "fact", "content": f"passing note {i} on gulls {i * 11}",
                                     "retention": "ephemeral"} for i in range(6)])
        store = fabric.service.retention_store
        assert store is not None
        replay, calls = store.replay, []

        def replay_then_write(tenant_id: str, ids: Any) -> Any:
            found = replay(tenant_id, ids)
            if not calls:  # the first page: change two of its notes after it was replayed
                moved, held = (n for n in made if note_uuid(notes.scope, n.id) in set(ids[:2]))
                notes.set_retention(moved.id, "durable")
                notes.forget(id=held.id, hold=True)
            calls.append(len(ids))
            assert found is not None and len(found) == len(ids)
            return found

        store.replay = replay_then_write  # type: ignore[method-assign]
        result = fabric.sweep(now, batch_size=3)
        assert calls == [3, 3]
        assert result.complete and result.batches == 2
        assert result.counts["ephemeral"] == {"expired": 0, "forgotten": 4, "skipped_held": 1,
                                              "skipped_floor": 0, "decayed": 0}
        states = {n.id: notes.get(n.id) for n in made}
        assert sorted(s.forgotten for s in states.values()) == [False, False, True, True, True, True]
        kept = [s for s in states.values() if not s.forgotten]
        assert sorted([h.type for h in notes.history(s.id)][-1] for s in kept) == ["Forgotten", "RetentionChanged"]
        assert sum(1 for s in kept if s.held) == 1
        assert fabric.sweep(now, batch_size=3).counts == result.counts


def test_a_sweep_batch_writes_its_page_images_uncompressed(dsn: str) -> None:
    """On a server compressing full-page images with pglz (the embedded default) a sweep
    batch's transaction turns that off for itself only (`SET LOCAL`): its connection's
    session keeps the server's setting (a pool of one connection: the same one)."""
    server_setting = fetch(dsn, "SHOW wal_compression")[0][0]
    if server_setting not in ("pglz", "on"):
        pytest.skip(f"the server compresses with {server_setting}")
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        store = fabric.service.retention_store
        assert store is not None
        with fabric.service.deps.unit_of_work([]) as uow:
            store.prepare_erasure(uow)
            inside = uow.conn.execute("SHOW wal_compression").fetchone()  # type: ignore[attr-defined]
            pid = uow.conn.info.backend_pid  # type: ignore[attr-defined]
        with fabric.store.connection() as conn:
            after = conn.execute("SHOW wal_compression").fetchone()
            assert conn.info.backend_pid == pid
    assert inside is not None and next(iter(dict(inside).values())) == "off"
    assert after is not None and next(iter(dict(after).values())) == server_setting


def test_every_sweep_batch_commits_on_the_wire(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep batch never leaves its unit of work's wire for psycopg's pipeline mode,
    where the append's multi-row ``VALUES`` statement was parsed again every batch and
    each statement was its own send: its ``wal_compression`` setting travels with the
    locks (``send_setting``), the note-version deletes of its forgotten notes in the row
    batch. Every transaction the sweep commits (its batches, its completion) is
    committed on the wire."""
    committed: list[bool] = []
    finish = TxSession.finish

    def recording(session: TxSession, commit: bool) -> None:
        if commit:
            committed.append(session.on_wire)
        finish(session, commit)

    now = datetime.now(timezone.utc) + timedelta(days=1)
    with open_fabric(dsn, retention=RETENTION) as fabric:
        notes = fabric.scope("acme", "u1")
        notes.remember_many([{"kind": "fact", "content": f"wire note {i} on larches {i * 17}",
                              "retention": "ephemeral"} for i in range(12)], consolidate=False)
        monkeypatch.setattr(TxSession, "finish", recording)
        result = fabric.sweep(now, batch_size=5)
    assert result.complete and result.batches == 3 and result.totals["forgotten"] == 12
    assert committed == [True] * 4  # three batches, then the completion


def test_no_lock_is_held_across_batches_nor_against_other_tenants(dsn: str) -> None:
    """A writer whose lock waits run out after 0.5 s (``LockTimeoutError`` then) writes
    into the swept scope between two batches (the sweep's progress callback), and into
    another tenant while a batch holds its locks (inside the batch's unit of work, the
    locks taken): a batch's locks go with its commit, and they are its own tenant's
    scopes' only."""
    now = datetime.now(timezone.utc) + timedelta(days=1)
    with open_fabric(dsn, retention=RETENTION) as fabric, open_fabric(dsn, lock_timeout=0.5) as other:
        fabric.scope("acme", "u1").remember_many([
            {"kind": "fact", "content": f"brief note {i} on herons {i * 13}", "retention": "ephemeral"}
            for i in range(12)])
        same, elsewhere = other.scope("acme", "u1"), other.scope("globex", "u9")
        between: list[str] = []
        during: list[str] = []

        def progress(n: int) -> None:
            between.append(same.remember(kind="fact", content=f"written between batches {len(between)}",
                                         retention="durable", consolidate=False).id)

        store = fabric.service.retention_store
        assert store is not None
        prepare = store.prepare_erasure

        def prepare_then_write(uow: Any) -> None:
            prepare(uow)
            uow.conn.execute("SELECT 1").fetchone()  # the batch's locks are held from here
            during.append(elsewhere.remember(kind="fact", content=f"another tenant's note {len(during)}",
                                             consolidate=False).id)

        store.prepare_erasure = prepare_then_write  # type: ignore[method-assign]
        result = fabric.sweep(now, batch_size=4, progress=progress)
        assert result.complete and result.batches == 3 and result.totals["forgotten"] == 12
        assert len(between) == 3 and len(during) == 3
        assert all(not same.get(i).forgotten for i in between)
        assert all(elsewhere.get(i) is not None for i in during)


def test_a_page_replay_reads_tombstones_off_the_events_it_fetched(dsn: str) -> None:
    """The read-ahead replay (``replay_page``: events, then keys) tells a shredded key
    from a key fault by the tombstones among the events it fetched: a working block
    forgotten (its key destroyed) and written again (a fresh key) replays on the page
    with its new content, not as a fault (``None``), and the sweep erases it."""
    now = datetime.now(timezone.utc) + timedelta(days=1)
    with open_fabric(dsn, retention=RETENTION) as fabric:
        notes = fabric.scope("acme", "u1")
        notes.remember(kind="working", block="scratch", content="Quibblestone first draft")
        notes.forget(block="scratch")
        again = notes.remember(kind="working", block="scratch", content="second draft of the plan")
        fabric.service.set_retention(notes.scope, again.id, "ephemeral", requested_by="t")
        store = fabric.service.retention_store
        assert store is not None
        aid = note_uuid(notes.scope, again.id)
        page = store.replay("acme", [aid])
        assert page is not None and [n.content for n in page] == ["second draft of the plan"]
        result = fabric.sweep(now)
        assert result.totals["forgotten"] == 1 and notes.get(again.id).forgotten
        assert [h.type for h in notes.history(again.id)][-1] == "Forgotten"
