"""Issue 16 follow-ups a fresh user found, written once and run on every backend
(``tests/integration/test_fresh_user_postgres.py``, ``tests/unit/test_fresh_user_memory.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from memfabric.adapters import LinkScopeError
from memfabric.domain.errors import NoteExistsError, NoteNotFoundError
from memfabric.domain.note import ERASED

from tests.contract.behaviours import Backend

NOW = datetime(2025, 1, 1, tzinfo=UTC)


class FreshUserContract:
    """Subclasses provide the ``backend`` fixture (see ``tests.contract.behaviours``)."""

    @pytest.fixture
    def fab(self, backend: Backend) -> Any:
        return backend.open()

    def test_superseded_by_agrees_with_get(self, fab: Any) -> None:
        """1. list(include_superseded) and an as_of recall of an old value name its
        successor, as get does."""
        notes = fab.scope("acme", "u1", "t1")
        old = notes.remember(kind="fact", content="The user lives in Paris", subject="home city",
                             valid_from=NOW)
        new = notes.remember(kind="fact", content="The user lives in Lyon", subject="home city",
                             valid_from=NOW + timedelta(days=10))
        assert new.outcome == "superseding" and notes.get(old.id).superseded_by == new.id
        listed = {n.id: n.superseded_by for n in notes.list(include_superseded=True).items}
        assert listed == {old.id: new.id, new.id: None}
        hits = notes.recall("user lives Paris", as_of=NOW + timedelta(days=1)).hits
        assert [(h.id, h.superseded_by) for h in hits] == [(old.id, new.id)]
        assert [h.superseded_by for h in notes.recall("user lives Lyon").hits] == [None]

    def test_explicit_id_visible_from_writer_is_taken(self, fab: Any, backend: Backend) -> None:
        """5. An explicit id that names a note visible from the writer's scope raises
        NoteExistsError and writes nothing (remember and remember_many)."""
        th2, th3 = fab.scope("acme", "u1", "t2"), fab.scope("acme", "u1", "t3")
        first = th2.remember(kind="fact", content="Locker code is 4711", id="abcabcabcabc")
        before = backend.events()
        with pytest.raises(NoteExistsError):
            th3.remember(kind="fact", content="Parking spot is B7", id="abcabcabcabc")
        with pytest.raises(NoteExistsError):
            th3.remember_many([{"kind": "fact", "content": "Gate code 99", "id": "f00d00000001"},
                               {"kind": "fact", "content": "Parking spot is B7", "id": "abcabcabcabc"}])
        with pytest.raises(NoteExistsError):
            fab.scope("acme", "u1").remember(kind="fact", content="Parking spot is B7", id="abcabcabcabc")
        assert backend.events() == before
        with pytest.raises(NoteNotFoundError):
            th3.get("f00d00000001")
        assert th3.get("abcabcabcabc").id == first.id  # unambiguous by-id call
        # Not visible from the writer: another thread's thread-only note does not block.
        th2.remember(kind="fact", content="Desk is 3F", id="dddd00000001", consent={"visibility": "thread"})
        mine = th3.remember(kind="fact", content="Desk is 5A", id="dddd00000001", consent={"visibility": "thread"})
        assert (th3.get(mine.id).content, th2.get(mine.id).content) == ("Desk is 5A", "Desk is 3F")

    def test_forgotten_history_erases_inferred_subject(self, fab: Any) -> None:
        """6. history() of a forgotten note shows <erased> for inferred_subject too."""
        notes = fab.scope("acme", "u1", "t1")
        n = notes.remember(kind="fact", content="The user's favourite colour is teal")
        fields = notes.history(n.id)[0].fields
        assert "inferred_subject" in fields and fields["inferred_subject"] not in (None, ERASED)
        notes.forget(id=n.id)
        first = notes.history(n.id)[0]
        assert first.fields["content"] == ERASED
        assert first.fields["inferred_subject"] == ERASED and "inferred_subject" in first.erased
        assert notes.get(n.id).forgotten

    def test_link_across_threads_is_a_typed_error(self, fab: Any, backend: Backend) -> None:
        """3. Links join two notes of one scope: a target visible from the caller but
        stored in another scope is a LinkScopeError, an invisible one NoteNotFoundError."""
        th1, th2 = fab.scope("acme", "u1", "t1"), fab.scope("acme", "u1", "t2")
        a = th1.remember(kind="fact", content="The user owns a red bicycle")
        b = th2.remember(kind="fact", content="The user commutes twenty minutes")
        hidden = th1.remember(kind="fact", content="Secret thread note", consent={"visibility": "thread"})
        before = backend.events()
        with pytest.raises(LinkScopeError, match="one scope"):
            th2.link(b.id, a.id)
        with pytest.raises(LinkScopeError):
            th2.unlink(b.id, a.id)
        with pytest.raises(NoteNotFoundError):
            th2.link(b.id, hidden.id)
        assert backend.events() == before
        c = th2.remember(kind="fact", content="The user parks at the station")
        assert th2.link(b.id, c.id).links[0].id == c.id  # one scope: allowed
