"""Issue 24: the unit of work's wire (``adapters/postgres/wire.py``) prepares its
statements once per connection under names of its own and keeps them valid when
psycopg deallocates every statement of the connection; statements lost behind
psycopg's back are prepared again (a write that decided on nothing is written again,
one that read is refused with a typed ``ConflictError``, never a partial write)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.domain.errors import ConflictError
from tests.conftest import event_count


@pytest.fixture
def one_connection(dsn: str) -> Iterator[Fabric]:
    """A fabric whose event-log pool holds one connection (every write uses it)."""
    with open_fabric(dsn, pool_size=1, max_overflow=0, consolidate=False) as fab:
        yield fab


def _on_the_connection(fab: Fabric, command: str, *, behind_psycopg: bool) -> None:
    with fab.log.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        if behind_psycopg:
            conn.pgconn.exec_(command.encode())
        else:
            conn.execute(command)


def test_writes_go_on_after_psycopg_deallocates_every_statement(one_connection: Fabric, dsn: str) -> None:
    notes = one_connection.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the first write prepares the wire's statements")
    for command in ("DEALLOCATE ALL", "DISCARD ALL", "ROLLBACK"):
        _on_the_connection(one_connection, command, behind_psycopg=False)
        before = event_count(dsn)
        got = notes.remember(kind="fact", content=f"written after psycopg ran {command}")
        assert event_count(dsn) == before + 1
        assert [h.id for h in notes.recall(f"psycopg ran {command}").hits][:1] == [got.id]


def test_a_plain_write_is_written_again_when_its_statements_were_lost(one_connection: Fabric, dsn: str) -> None:
    notes = one_connection.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the first write prepares the wire's statements")
    _on_the_connection(one_connection, "DEALLOCATE ALL", behind_psycopg=True)
    before = event_count(dsn)
    got = notes.remember(kind="fact", content="written although the server forgot the statements")
    assert event_count(dsn) == before + 1
    assert [h.id for h in notes.recall("server forgot the statements").hits][:1] == [got.id]


def test_a_guarded_write_whose_statements_were_lost_is_written_again_with_the_read(
        one_connection: Fabric, dsn: str) -> None:
    """A plain write naming a subject sends a guard in place of the entity-key read
    (issue 24): when its statements are gone it is written again, with the read (the
    rewrite of the same events replays no read), once."""
    notes = one_connection.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="Dora works as a cook in Porto")
    _on_the_connection(one_connection, "DEALLOCATE ALL", behind_psycopg=True)
    before = event_count(dsn)
    got = notes.remember(kind="fact", content="Erin works as a nurse in Lisbon")
    assert event_count(dsn) == before + 1
    assert [h.id for h in notes.recall("Erin nurse Lisbon").hits][:1] == [got.id]


def test_a_deciding_write_whose_statements_were_lost_is_refused_whole(one_connection: Fabric, dsn: str) -> None:
    notes = one_connection.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="Alice lives in Lisbon", consolidate=True)
    _on_the_connection(one_connection, "DEALLOCATE ALL", behind_psycopg=True)
    before = event_count(dsn)
    with pytest.raises(ConflictError, match="retry"):
        notes.remember(kind="fact", content="Alice moved to Porto", consolidate=True)
    assert event_count(dsn) == before
    moved = notes.remember(kind="fact", content="Alice moved to Porto", consolidate=True)  # the retry
    assert moved.outcome == "superseding" and event_count(dsn) == before + 2


def test_a_commit_that_fails_in_psycopg_mode_leaves_the_connection_clean(dsn: str) -> None:
    """A failure answered only at COMMIT after the session left the wire (a statement's
    error read with the Sync, as pgvector's dimension check when another process's
    ``reembed`` migrated the index) ends psycopg's pipeline and rolls back before the
    connection goes back to the pool: the next session on it (the pool hands back the
    connection returned last, as ``adopting``'s retry gets) runs normally. Before the
    fix the pipeline stayed entered and the retry failed with "another command is
    already in progress" (CI, test_reembed)."""
    import time

    import psycopg

    from memfabric.adapters.postgres.session import TxSession

    with psycopg.connect(dsn, autocommit=True) as conn:
        session = TxSession(conn)
        session.psycopg().execute("SELECT 1 / 0")  # sent, its error not yet read
        time.sleep(0.5)  # the error has arrived: COMMIT's send reads it (as under load)
        with pytest.raises(psycopg.errors.DivisionByZero):
            session.finish(commit=True)
        assert conn._pipeline is None  # noqa: SLF001 - psycopg's pipeline, ended
        assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        again = TxSession(conn)
        read = again.send(b"SELECT 41 + 1")
        again.psycopg().execute("SELECT 2")
        again.finish(commit=True)
        assert read.rows() == [(42,)]


def _prepared(fab: Fabric) -> int:
    with fab.log.datastore.get_connection() as conn:  # type: ignore[attr-defined]
        row = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements WHERE name LIKE 'mf\\_%'").fetchone()
    assert row is not None
    return int(row["n"])


def test_bulk_chunks_of_one_shape_share_one_prepared_statement(one_connection: Fabric) -> None:
    """Issue 24: a chunk's parameter types do not depend on its values (an inferred
    subject's booleans NULL in some rows, set in others), so chunks of one size reuse the
    prepared row statement: every chunk of an import was parsed and planned afresh and
    stayed prepared on the connection."""
    notes = one_connection.scope("acme", "importer")

    def chunk(k: int) -> list[dict[str, str]]:  # which rows name a subject moves with k
        return [{"kind": "fact", "content": f"person{k}x{i} lives in town{i}" if (i * 7 + k) % 5 < k % 4
                 else f"imported fact {k}/{i} about part {i}"} for i in range(40)]

    for k in (0, 1):  # chunk 1 also prepares the entity lookup (chunk 0 names no subject)
        notes.remember_many(chunk(k))
    after_two = _prepared(one_connection)
    for k in range(2, 10):
        notes.remember_many(chunk(k))
    assert _prepared(one_connection) == after_two
