"""Issue 24: a process's note cache (``adapters/postgres/note_cache.py``) hands a fold
or a supersession the committed state it last saw; the events another process appended
since are read and replayed on top, inside the writing transaction, so the outcome is
the one a full replay gives; a note erased meanwhile is never served with content, and
an event row changed or removed in SQL after the note was cached is found by the next
write (the cached state's digest of its stored events no longer matches the log's)."""

from __future__ import annotations

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.domain.errors import EventIntegrityError, NoteForgottenError
from memfabric.domain.note import note_uuid
from tests.conftest import fetch


def test_another_process_s_events_are_replayed_on_the_cached_state(dsn: str) -> None:
    with open_fabric(dsn) as mine, open_fabric(dsn) as theirs:
        ours = mine.scope("acme", "u1", "t1")
        first = ours.remember(kind="fact", content="the deploy runs on fridays")
        cache = mine.log.note_cache  # type: ignore[attr-defined]
        assert len(cache) == 1
        for _ in range(2):
            assert theirs.scope("acme", "u1", "t1").remember(
                kind="fact", content="the deploy runs on Fridays").outcome == "folded"
        hits = cache.hits
        again = ours.remember(kind="fact", content="The deploy runs on fridays")
        assert (again.outcome, again.id, again.fold_count, again.version) == ("folded", first.id, 3, 4)
        assert cache.hits == hits + 1
        assert [e.type for e in ours.history(first.id)] == ["Remembered", "Folded", "Folded", "Folded"]
        assert fetch(dsn, "SELECT count(*) FROM memfabric_events") == [(4,)]


def test_a_note_forgotten_elsewhere_is_not_served_from_the_cache(dsn: str) -> None:
    with open_fabric(dsn) as mine, open_fabric(dsn) as theirs:
        ours = mine.scope("acme", "u1", "t1")
        old = ours.remember(kind="fact", content="the office code is 4111")
        ours.remember(kind="fact", content="the office code is 4111")  # a fold: cached after COMMIT
        theirs.scope("acme", "u1", "t1").forget(id=old.id)
        cache = mine.log.note_cache  # type: ignore[attr-defined]
        aggregate_id = note_uuid(ours.scope, old.id)
        assert [n.content for n in cache.get([aggregate_id])[0].values()] == ["the office code is 4111"]
        with pytest.raises(NoteForgottenError):  # the tombstone, read after the cached version
            ours.remember(kind="fact", content="the office code changed", supersedes=old.id)
        assert cache.get([aggregate_id]) == ({}, {})  # an erased note is dropped, never kept
        assert ours.get(old.id).content is None


def test_a_cached_note_whose_key_is_gone_is_a_key_fault_not_a_write(dsn: str) -> None:
    with open_fabric(dsn) as mine:
        ours = mine.scope("acme", "u1", "t1")
        note = ours.remember(kind="fact", content="the vault code is 7731")
        ours.remember(kind="fact", content="the vault code is 7731")  # a fold: cached after COMMIT
        aggregate_id = note_uuid(ours.scope, note.id)
        assert mine.log.note_cache.get([aggregate_id])[0]  # type: ignore[attr-defined]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM mf_note_keys WHERE originator_id = %s", (aggregate_id,))
        mine.log.keys._cache.clear()  # type: ignore[attr-defined]  # noqa: SLF001
        before = fetch(dsn, "SELECT count(*) FROM memfabric_events")
        with pytest.raises(EventIntegrityError, match="key"):
            ours.remember(kind="fact", content="the vault code is 7731")
        assert fetch(dsn, "SELECT count(*) FROM memfabric_events") == before


def _cached_fold(dsn: str, mine: object, content: str) -> tuple[object, str]:
    ours = mine.scope("acme", "u1", "t1")  # type: ignore[attr-defined]
    note = ours.remember(kind="fact", content=content)
    ours.remember(kind="fact", content=content)  # a fold: cached after COMMIT
    assert mine.log.note_cache.get([note_uuid(ours.scope, note.id)])[0]  # type: ignore[attr-defined]
    return ours, note.id


@pytest.mark.parametrize("change", [
    "UPDATE memfabric_events SET state = overlay(state placing '\\xff'::bytea from 40 for 1)"
    " WHERE originator_id = %s AND originator_version = 1",
    "DELETE FROM memfabric_events WHERE originator_id = %s AND originator_version = 1",
])
def test_an_event_changed_in_sql_after_caching_refuses_the_next_write(dsn: str, change: str) -> None:
    with open_fabric(dsn) as mine:
        ours, note_id = _cached_fold(dsn, mine, "Frank lives in Rome")
        aggregate_id = note_uuid(ours.scope, note_id)  # type: ignore[attr-defined]
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(change, (aggregate_id,)).rowcount == 1
        before = fetch(dsn, "SELECT count(*) FROM memfabric_events")
        for content in ("frank lives in rome", "Frank moved to Milan"):  # a fold, a supersession
            with pytest.raises(EventIntegrityError):
                ours.remember(kind="fact", content=content)  # type: ignore[attr-defined]
        assert fetch(dsn, "SELECT count(*) FROM memfabric_events") == before
        assert mine.log.note_cache.get([aggregate_id]) == ({}, {})  # type: ignore[attr-defined]


def test_an_unchanged_log_keeps_serving_the_cache(dsn: str) -> None:
    with open_fabric(dsn) as mine:
        ours, note_id = _cached_fold(dsn, mine, "the build uses python 3.12")
        cache = mine.log.note_cache  # type: ignore[attr-defined]
        hits = cache.hits
        for n in range(3, 6):
            again = ours.remember(kind="fact", content="the build uses python 3.12")  # type: ignore[attr-defined]
            assert (again.outcome, again.id, again.version) == ("folded", note_id, n)
        assert cache.hits == hits + 3  # each fold started from the cached state, its digest matching
