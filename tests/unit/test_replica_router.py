"""Issue 25: the replica router's decisions with stand-in connections (the real
standby cases are in tests/integration/test_replicas.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from memfabric.adapters.postgres.replicas import PRIMARY, ReplicaRouter, lsn_int, replicas_from_env


class Conn:
    """A connection stand-in: ``execute`` answers an LSN query with ``lsn``."""

    def __init__(self, name: str, lsn: str = "0/10") -> None:
        self.name, self.lsn, self.closed = name, lsn, False

    def execute(self, query: str, *_: Any) -> Conn:
        return self

    def fetchone(self) -> dict[str, str]:
        return {"lsn": self.lsn}

    def close(self) -> None:
        self.closed = True


PRIMARY_CONN = Conn("primary", "0/10")


@contextmanager
def primary() -> Iterator[Conn]:
    yield PRIMARY_CONN


def router(replica: Conn) -> ReplicaRouter:
    r = ReplicaRouter(primary, ["host=/tmp/r port=5999 dbname=x"], max_wait=0.01)
    r.replicas[0].idle.append(replica)  # type: ignore[arg-type]
    return r


def test_lsn_text_to_int() -> None:
    assert lsn_int("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert lsn_int(None) == 0 and lsn_int("0/0") == 0


def test_replicas_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFABRIC_REPLICA_DSNS", "a, ,b ")
    assert replicas_from_env(None) == ["a", "b"]
    assert replicas_from_env([]) == []  # an explicit empty list wins over the environment


def test_a_caught_up_replica_serves_the_read() -> None:
    r = router(Conn("replica", "0/20"))
    r.note_write()  # primary at 0/10
    assert r.run(lambda conn: conn.name) == "replica"
    assert r.last_served_by().startswith("replica:/tmp/r:5999")


def test_a_replica_behind_the_write_is_not_used() -> None:
    r = router(Conn("replica", "0/5"))
    r.note_write()
    started = time.monotonic()
    assert r.run(lambda conn: conn.name) == "primary" and r.last_served_by() == PRIMARY
    assert time.monotonic() - started < 0.5 and r.fallbacks == 1


def test_a_recovery_conflict_is_answered_by_the_primary_and_keeps_the_replica() -> None:
    r = router(Conn("replica", "0/20"))

    def read(conn: Any) -> str:
        if conn.name == "replica":
            raise psycopg.errors.SerializationFailure("canceling statement due to conflict with recovery")
        return str(conn.name)
    assert r.run(read) == "primary"
    assert r.replicas[0].skip_until == 0.0 and len(r.replicas[0].idle) == 1


def test_a_lost_replica_connection_is_answered_by_the_primary_and_skips_the_replica() -> None:
    replica = Conn("replica", "0/20")
    r = router(replica)

    def read(conn: Any) -> str:
        if conn.name == "replica":
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return str(conn.name)
    assert r.run(read) == "primary"
    assert r.replicas[0].skip_until > time.monotonic() and replica.closed
    assert "closed" in str(r.replicas[0].error)


def test_lag_is_the_age_of_the_oldest_unreplayed_primary_position() -> None:
    r = ReplicaRouter(primary, [])
    r._samples.extend([(10.0, 100), (11.0, 200), (12.0, 300)])  # noqa: SLF001
    assert r._lag(300, 13.0) == 0.0  # noqa: SLF001
    assert r._lag(150, 13.0) == pytest.approx(2.0)  # noqa: SLF001
    assert r._lag(50, 13.0) == pytest.approx(3.0)  # noqa: SLF001


def test_each_write_is_a_lag_sample() -> None:
    """A replica that has not replayed a write is lagging since that write, whether or
    not a health check sampled the primary in between."""
    r = router(Conn("replica", "0/5"))
    r.note_write()  # primary at 0/10
    assert r._lag(lsn_int("0/5"), time.monotonic() + 1.0) == pytest.approx(1.0, abs=0.05)  # noqa: SLF001
    assert r._lag(lsn_int("0/10"), time.monotonic() + 1.0) == 0.0  # noqa: SLF001


def test_replica_create_refuses_a_non_empty_directory(tmp_path: Any) -> None:
    from memfabric.adapters.postgres import standby
    from memfabric.domain.errors import FabricError

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "keep.txt").write_text("mine")
    with pytest.raises(FabricError, match="not empty"):
        standby.create_standby(tmp_path / "r", 55999, "host=/nonexistent dbname=x")
    assert (tmp_path / "r" / "keep.txt").read_text() == "mine"


def test_replica_create_needs_exactly_one_primary(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from memfabric.adapters.cli.app import app

    res = CliRunner().invoke(app, ["replica", "create", "--data-dir", str(tmp_path / "r"), "--port", "55999"])
    assert res.exit_code == 2 and "exactly one of --primary-data-dir and --primary-dsn" in res.output
    assert not (tmp_path / "r").exists()
