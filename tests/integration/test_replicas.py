"""Issue 25: read replicas against a real streaming standby of the session's embedded
server, made by ``memfabric replica create`` (pg_basebackup -R) and stopped, restarted
and paused (``pg_wal_replay_pause()``) here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres import standby
from memfabric.adapters.postgres.replicas import PRIMARY


PORT = 55432
"""The standby listens on a Unix socket in its own data directory: no port is shared."""


@pytest.fixture(scope="module")
def standby_dsn(pg_server: str) -> Iterator[tuple[str, Path]]:
    """A hot standby of the session's server, created with the CLI: ``(dsn, data_dir)``."""
    if not str(conninfo_to_dict(pg_server).get("host", "")).startswith("/"):
        pytest.skip("needs the embedded server (MEMFABRIC_TEST_DSN is set)")
    with psycopg.connect(pg_server) as conn:
        primary_dir = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
    tmp = Path(tempfile.mkdtemp(prefix="mfr-"))
    tmp.chmod(0o755)
    data_dir = tmp / "r"
    out = subprocess.run(
        [sys.executable, "-m", "memfabric.adapters.cli.app", "replica", "create", "--data-dir", str(data_dir),
         "--port", str(PORT), "--primary-data-dir", str(primary_dir)],
        capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr + out.stdout
    dsn = out.stdout.strip().splitlines()[-1]
    try:
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        yield dsn, data_dir
    finally:
        standby.remove_standby(data_dir)
        standby.shutil.rmtree(tmp, ignore_errors=True)


def on_replica(replica_dsn: str, dsn: str) -> str:
    """The replica's DSN for the test database of ``dsn``."""
    return make_conninfo(replica_dsn, dbname=conninfo_to_dict(dsn)["dbname"])


def wait_db(replica: str, timeout: float = 30.0) -> None:
    """Wait until the standby has replayed the test database's creation."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(replica).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def pause(conn: psycopg.Connection) -> None:
    """``pg_wal_replay_pause()`` on the standby, waiting until replay is paused."""
    conn.execute("SELECT pg_wal_replay_pause()")
    deadline = time.monotonic() + 10
    while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone() != ("paused",):
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def replica(standby_dsn: tuple[str, Path], dsn: str) -> str:
    url = on_replica(standby_dsn[0], dsn)
    wait_db(url)
    return url


def test_reads_are_served_by_the_replica_and_writes_by_the_primary(dsn: str, replica: str) -> None:
    with open_fabric(dsn, replicas=[replica]) as fabric:
        notes = fabric.scope("acme", "u1")
        note = notes.remember(kind="fact", content="The staging database runs on port 6543")
        res = notes.recall("staging database port")
        assert [h.id for h in res.hits] == [note.id]
        assert res.served_by is not None and res.served_by.startswith("replica:")
        assert all("replica" not in h.content for h in res.hits)  # not in the hit text
        page = notes.list()
        assert [n.id for n in page.items] == [note.id] and page.served_by == res.served_by
        assert notes.count() == 1 and fabric.served_by() == res.served_by
        assert notes.get(note.id).content == note.content and fabric.served_by() == res.served_by
        assert [h.version for h in notes.history(note.id)] == [1] and fabric.served_by() == res.served_by
        # a write decision (supersedes) reads on the primary, inside its unit of work
        newer = notes.remember(kind="fact", content="The staging database runs on port 7654",
                               supersedes=note.id)
        assert [h.id for h in notes.recall("staging database port").hits] == [newer.id]
        assert fabric.store.router is not None and fabric.store.router.fallbacks == 0
    with open_fabric(dsn) as plain:  # no replicas: the primary, said so
        assert plain.scope("acme", "u1").recall("staging").served_by == PRIMARY


def test_lineage_conversation_search_and_an_auditor_s_reads_are_served_by_the_replica(
        dsn: str, replica: str) -> None:
    """The reads of issue 25's list beyond recall/list/count/get/history: lineage,
    ``search_conversation`` and a read-only (auditor's) fabric's reads of the log."""
    with open_fabric(dsn, replicas=[replica]) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        old = notes.remember(kind="fact", content="The build server is named orion")
        new = notes.remember(kind="fact", content="The build server is named vega", supersedes=old.id)
        assert notes.lineage(old.id).successors == [new.id]
        assert fabric.served_by().startswith("replica:")
        notes.conversation().append("user", "when does my flight to Lisbon leave?")
        hits = notes.search_conversation("flights lisbon").hits
        assert len(hits) == 1 and fabric.served_by().startswith("replica:")
    with open_fabric(dsn, replicas=[replica], read_only=True) as auditor:
        view = auditor.scope("acme", "u1", "t1")
        assert [h.type for h in view.history(old.id)] == ["Remembered", "Superseded"]
        assert auditor.served_by().startswith("replica:")
        assert view.lineage(new.id).predecessors == [old.id] and auditor.served_by().startswith("replica:")


def test_replica_dsns_from_the_environment(dsn: str, replica: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFABRIC_REPLICA_DSNS", f" {replica} ,")
    with open_fabric(dsn) as fabric:
        fabric.scope("acme").remember(kind="fact", content="alpha beta gamma")
        assert fabric.scope("acme").recall("alpha").served_by.startswith("replica:")  # type: ignore[union-attr]


def test_read_your_writes_under_8_writers(dsn: str, replica: str) -> None:
    """8 threads x 125 write-then-read pairs on one fabric: each recall right after a
    write finds that write (0 misses), most of them served by the replica."""
    misses: list[str] = []
    served: Counter[str] = Counter()
    errors: list[BaseException] = []
    with open_fabric(dsn, replicas=[replica], replica_max_wait=2.0) as fabric:
        def writer(w: int) -> None:
            notes = fabric.scope("acme", f"user-{w}")
            try:
                for i in range(125):
                    token = f"tok{w}x{i}"
                    note = notes.remember(kind="fact", content=f"reading {token} was written by writer {w}")
                    res = notes.recall(token, mode="lexical", top_k=3)
                    served[str(res.served_by).split(":")[0]] += 1
                    if note.id not in [h.id for h in res.hits]:
                        misses.append(token)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert misses == []
    assert sum(served.values()) == 1000
    assert served["replica"] >= 900, served  # the replica served them, not the fallback


def test_without_the_commit_lsn_a_replica_read_can_miss(dsn: str, replica: str) -> None:
    """The check above can fail: with the writer's LSN not recorded, a read right after
    a write on a paused replica misses it (and is served by the replica)."""
    with open_fabric(dsn, replicas=[replica]) as fabric, psycopg.connect(replica, autocommit=True) as rconn:
        router = fabric.store.router
        assert router is not None
        notes = fabric.scope("acme")
        notes.remember(kind="fact", content="warm up the replica connection")
        notes.recall("warm")
        pause(rconn)
        try:
            router.note_write = lambda conn=None: None  # type: ignore[method-assign]
            note = notes.remember(kind="fact", content="zebra crossings are striped")
            res = notes.recall("zebra", mode="lexical")
            assert str(res.served_by).startswith("replica:") and note.id not in [h.id for h in res.hits]
        finally:
            rconn.execute("SELECT pg_wal_replay_resume()")


def test_a_replica_stopped_and_restarted_mid_run_fails_no_read(standby_dsn: tuple[str, Path], dsn: str,
                                                               replica: str) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []
    served: list[str] = []
    with open_fabric(dsn, replicas=[replica]) as fabric:
        router = fabric.store.router
        assert router is not None
        router.backoff, router.check_every = 0.3, 0.1
        notes = fabric.scope("acme")

        def reader(w: int) -> None:
            i = 0
            while not stop.is_set():
                try:
                    note = notes.remember(kind="fact", content=f"entry w{w}n{i} of the run")
                    res = notes.recall(f"w{w}n{i}", mode="lexical", top_k=3)
                    assert note.id in [h.id for h in res.hits]
                    served.append(str(res.served_by).split(":")[0])
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
                    return
                i += 1
        threads = [threading.Thread(target=reader, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        before = len(served)
        standby.stop_standby(standby_dsn[1])
        time.sleep(1.5)
        down = len(served)
        standby.start_standby(standby_dsn[1], PORT)
        wait_db(replica)
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    assert "replica" in served[:before]
    assert served[before:down] and served[down - 1] == "primary"  # down: the primary served
    assert served[-1] == "replica"  # back up after the back-off


def test_a_lagging_replica_is_skipped(dsn: str, replica: str) -> None:
    """Replay paused on the standby: a read after a write waits at most
    ``replica_max_wait`` then the primary serves it (never a state older than the
    write); once its lag passes ``replica_max_lag`` the replica is skipped without
    waiting; after resume and the back-off it serves again."""
    with open_fabric(dsn, replicas=[replica], replica_max_wait=1.0, replica_max_lag=0.5) as fabric, \
            psycopg.connect(replica, autocommit=True) as rconn:
        router = fabric.store.router
        assert router is not None
        router.check_every, router.backoff = 0.05, 0.5
        notes = fabric.scope("acme")
        notes.remember(kind="fact", content="first note before the pause")
        assert str(notes.recall("first", mode="lexical").served_by).startswith("replica:")
        pause(rconn)
        try:
            note = notes.remember(kind="fact", content="second note during the pause")
            res = notes.recall("second", mode="lexical")
            assert res.served_by == PRIMARY and [h.id for h in res.hits] == [note.id]
            time.sleep(0.2)  # with the 1 s wait above: lag > max_lag now
            notes.remember(kind="fact", content="third note during the pause")
            started = time.monotonic()
            res = notes.recall("third", mode="lexical")
            assert res.served_by == PRIMARY and len(res.hits) == 1
            assert time.monotonic() - started < 0.6  # skipped: no 1 s wait for the replica
            assert router.replicas[0].skip_until > time.monotonic() - 0.6
            status = fabric.topology()["replicas"][0]
            assert status["state"] == "skipped" and status["lag_s"] > 0.5 and "lagging" in status["error"]
        finally:
            rconn.execute("SELECT pg_wal_replay_resume()")
        time.sleep(0.8)
        assert str(notes.recall("third", mode="lexical").served_by).startswith("replica:")


def test_replica_status_command_shows_the_lag(dsn: str, replica: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memfabric.adapters.cli.app", "replica", "status", "--dsn", dsn,
         "--replica", replica, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    topo = json.loads(out.stdout)
    assert "password" not in topo["primary"]
    [row] = topo["replicas"]
    assert row["state"] == "ok" and row["lag_s"] is not None and row["replayed_lsn"]


def test_projections_status_shows_the_topology(dsn: str, replica: str) -> None:
    with open_fabric(dsn) as fabric:
        fabric.scope("acme").remember(kind="fact", content="one note for the status")
    out = subprocess.run(
        [sys.executable, "-m", "memfabric.adapters.cli.app", "projections", "status", "--dsn", dsn,
         "--replica", replica], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    assert "topology" in out.stdout and "primary" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("replica "))
    assert "replica:" in line and line.split()[-1] == "ok"
