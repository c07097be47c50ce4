"""The unit of work: one connection per write, and consolidation decided against
current state in every projection mode (issue 11's two defects)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch, race_processes

FACT = "The deploy freeze starts Friday"


def live_fact_notes(dsn: str) -> list[str]:
    """Ids of live, not superseded facts (from the write-side consolidation index)."""
    return sorted(str(r[0]) for r in fetch(dsn, "SELECT note_id FROM mf_consolidation WHERE kind = 'fact'"))


def test_a_pool_of_one_connection_serves_sequential_and_threaded_writes(dsn: str) -> None:
    """Every read a write makes runs on the write's own connection: a pool of one
    connection suffices (it used to deadlock on the second write, a fold)."""
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fab:
        notes = fab.scope("acme", "u1", "t1")
        texts = [f"alpha{k} bravo{k} charlie{k} delta{k}" for k in range(50)]
        outcomes = [notes.remember(kind="fact", content=texts[i % 50]).outcome for i in range(100)]
        assert outcomes.count("inserted") == 50 and outcomes.count("folded") == 50
        errors: list[BaseException] = []

        def writer(k: int) -> None:
            try:
                for i in range(25):
                    fab.scope("acme", "u1", f"t{k}").remember(kind="fact", content=f"thread{k} echo{i} fox{i}")
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        assert notes.recall("bravo7 charlie7").hits[0].content == texts[7]
    assert len(live_fact_notes(dsn)) == 50 + 100


def test_32_threads_on_one_scope_at_the_default_pool_size(fabric: Fabric, dsn: str) -> None:
    """32 threads × 20 writes on one scope and one Fabric (default pool 2 + 8 overflow):
    no write fails, every distinct fact is one note."""
    errors: list[BaseException] = []
    notes = fabric.scope("acme", "u1", "t1")

    def writer(k: int) -> None:
        try:
            for i in range(20):
                notes.remember(kind="fact", content=f"shared{i} golf{i} hotel{i}")  # all write the same 20
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == []
    assert len(live_fact_notes(dsn)) == 20


@pytest.fixture
def runner(dsn: str) -> Iterator[None]:
    """A separate projection runner (``memfabric projections run``) in a thread."""
    with open_fabric(dsn, inline_projections=False, catch_up=False) as runner_fabric:
        admin = ProjectionAdmin.for_fabric(runner_fabric)
        stop = threading.Event()
        thread = threading.Thread(target=admin.run, args=(runner_fabric.dsn,),
                                  kwargs={"poll": 0.2, "stop": stop.is_set}, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(30)


def test_runner_mode_folds_a_repeat(dsn: str, runner: None) -> None:
    with open_fabric(dsn, inline_projections=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        first = notes.remember(kind="fact", content=FACT)
        again = notes.remember(kind="fact", content=FACT)
        assert (first.outcome, again.outcome, again.id) == ("inserted", "folded", first.id)
        assert [h.id for h in notes.recall("deploy freeze").hits] == [first.id]
    assert live_fact_notes(dsn) == [first.id]


def test_runner_mode_folds_a_repeat_without_waiting_for_the_runner(dsn: str) -> None:
    """No runner at all and no read-your-writes wait: the fold decision still sees the
    first write (the consolidation index is write-side), although recall cannot yet."""
    with open_fabric(dsn, inline_projections=False, await_projections=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        first = notes.remember(kind="fact", content=FACT)
        again = notes.remember(kind="fact", content=FACT)
        assert again.outcome == "folded" and again.id == first.id
        assert notes.recall("deploy freeze").hits == []  # the recall index lags
    assert live_fact_notes(dsn) == [first.id]


def _remember_in_runner_mode(dsn: str, barrier: Any, out: Any) -> None:
    with open_fabric(dsn, inline_projections=False) as fab:
        barrier.wait()
        out.put(fab.scope("acme", "u1", "t1").remember(kind="fact", content=FACT).id)


def test_runner_mode_four_processes_one_note(dsn: str, runner: None) -> None:
    n = 4
    ids = set(race_processes(_remember_in_runner_mode, dsn, n))
    assert len(ids) == 1
    assert live_fact_notes(dsn) == sorted(ids)
    topics = [str(r[0]).rsplit(".", 1)[-1] for r in fetch(dsn, "SELECT topic FROM memfabric_events")]
    assert topics.count("Remembered") == 1 and topics.count("Folded") == n - 1


def test_explicit_ids_and_link_checks_on_a_pool_of_one(dsn: str) -> None:
    """Issue 26 defect 2: the reads an explicit ``id`` or a link needs (``resolve``) run
    in the write's unit of work; with ``pool_size=1, max_overflow=0`` they used to wait
    for a second pooled connection (30 s, then a pool timeout)."""
    from memfabric.domain.errors import NoteExistsError, NoteNotFoundError

    with open_fabric(dsn, pool_size=1, max_overflow=0) as fab:
        notes = fab.scope("acme", "u1", "t1")
        first = notes.remember(kind="fact", content="x", id="0123456789ab")
        assert first.id == "0123456789ab"
        with pytest.raises(NoteExistsError):
            notes.remember(kind="fact", content="x again", id="0123456789ab")
        with pytest.raises(NoteNotFoundError):
            notes.remember(kind="fact", content="linked to nothing", links=[{"id": "ffffffffffff"}])
        with pytest.raises(NoteNotFoundError):
            notes.link(first.id, "ffffffffffff")
        errors: list[BaseException] = []

        def writer(k: int) -> None:
            try:
                for i in range(10):
                    fab.scope("acme", "u1", "t1").remember(kind="fact", content=f"w{k} n{i}", id=f"{k:06x}{i:06x}")
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == [] and notes.count() == 41


def test_a_read_racing_the_commit_of_the_note_it_reads(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay outside a transaction read the keys, then the events: a note committed
    in between came back as a "key fault" (``EventIntegrityError``) although it was
    never forgotten (seen by LangGraph store writers in 4 processes). Events are read
    first now: the racing note is either absent or whole."""
    from memfabric.adapters import crypto
    from memfabric.domain.note import note_uuid
    from memfabric.domain.scope import Scope

    with open_fabric(dsn) as reader, open_fabric(dsn) as writer:
        target = note_uuid(Scope(tenant_id="acme"), "0123456789ab")
        original = crypto.BatchKeys.load
        fired: list[bool] = []

        def load(self: Any, conn: Any, ids: Any) -> Any:
            out = original(self, conn, ids)
            if target in ids and not fired:
                fired.append(True)  # the writer commits between this read and the next
                writer.scope("acme").remember(kind="fact", content="raced in", id="0123456789ab")
            return out

        monkeypatch.setattr(crypto.BatchKeys, "load", load)
        got = reader.service.store.load(target)
        assert fired and (got is None or got.content == "raced in")
        assert reader.service.store.load(target).content == "raced in"  # type: ignore[union-attr]
