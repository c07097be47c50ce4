"""Issue 24: a process's note cache (``adapters/postgres/note_cache.py``) hands a fold
or a supersession the committed state it last saw; the events another process appended
since are read and replayed on top, inside the writing transaction, so the outcome is
the one a full replay gives; a note erased meanwhile is never served with content."""

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
        assert [n.content for n in cache.get([aggregate_id]).values()] == ["the office code is 4111"]
        with pytest.raises(NoteForgottenError):  # the tombstone, read after the cached version
            ours.remember(kind="fact", content="the office code changed", supersedes=old.id)
        assert cache.get([aggregate_id]) == {}  # an erased note is dropped, never kept
        assert ours.get(old.id).content is None


def test_a_cached_note_whose_key_is_gone_is_a_key_fault_not_a_write(dsn: str) -> None:
    with open_fabric(dsn) as mine:
        ours = mine.scope("acme", "u1", "t1")
        note = ours.remember(kind="fact", content="the vault code is 7731")
        ours.remember(kind="fact", content="the vault code is 7731")  # a fold: cached after COMMIT
        aggregate_id = note_uuid(ours.scope, note.id)
        assert mine.log.note_cache.get([aggregate_id])  # type: ignore[attr-defined]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM mf_note_keys WHERE originator_id = %s", (aggregate_id,))
        mine.log.keys._cache.clear()  # type: ignore[attr-defined]  # noqa: SLF001
        before = fetch(dsn, "SELECT count(*) FROM memfabric_events")
        with pytest.raises(EventIntegrityError, match="key"):
            ours.remember(kind="fact", content="the vault code is 7731")
        assert fetch(dsn, "SELECT count(*) FROM memfabric_events") == before
