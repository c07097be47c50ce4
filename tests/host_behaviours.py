"""Host-feature behaviours (relevance floor, SQL filters, browsing, release_hold), run on
the in-memory backend (tests/unit/test_host_memory.py) and PostgreSQL
(tests/integration/test_host_features.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from memfabric.domain.errors import NoteForgottenError, NoteNotFoundError, NotHeldError
from pydantic import ValidationError


class HostBehaviours:
    @pytest.fixture
    def fab(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    # -------------------------------------------------------- relevance floor
    def test_floor_drops_unrelated(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        hit = n.remember(kind="fact", content="The user prefers metric units for distances")
        n.remember(kind="fact", content="Quarterly invoices are archived in the vault")
        res = n.recall("metric units", top_k=10)
        assert [h.id for h in res.hits] == [hit.id]
        padded = n.recall("metric units", top_k=10, min_relevance=0)
        assert len(padded.hits) == 2
        none = n.recall("zebra xylophone", top_k=10, mode="lexical")
        assert none.hits == []

    def test_floor_with_budget_keeps_best(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        big = n.remember(kind="fact", content="metric units " + "word " * 300)
        assert [h.id for h in n.recall("metric units", budget=1).hits] == [big.id]

    def test_context_provider_uses_floor(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        n.remember(kind="fact", content="Quarterly invoices are archived in the vault")
        assert n.context_provider(include_working=False)("zebra xylophone") == []

    # ------------------------------------------------------------ SQL filters
    def test_recall_filters(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        a = n.remember(kind="fact", content="coffee order is a flat white", tags=["drinks", "am"],
                       importance=0.9)
        b = n.remember(kind="fact", content="coffee beans come from Kenya", tags=["drinks"],
                       subject="coffee.beans", importance=0.2)
        ids = lambda **kw: {h.id for h in n.recall("coffee", **kw).hits}  # noqa: E731
        assert ids() == {a.id, b.id}
        assert ids(tags=["drinks", "am"]) == {a.id}
        assert ids(subject="coffee.beans") == {b.id}
        assert ids(min_importance=0.5) == {a.id}
        assert ids(tags=["nope"]) == set()

    # --------------------------------------------------------------- browsing
    def test_list_pages_and_count(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        made = [n.remember(kind="fact", content=f"distinct fact number {i} about topic{i}",
                           tags=["even"] if i % 2 == 0 else []) for i in range(25)]
        seen: list[str] = []
        cursor = None
        while True:
            page = n.list(limit=7, cursor=cursor)
            seen += [i.id for i in page.items]
            assert all(i.outcome == "listed" for i in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == [m.id for m in made]
        assert n.count() == 25
        assert n.count(tags=["even"]) == 13
        assert len(n.list(tags=["even"], limit=100).items) == 13
        assert n.count(kinds=["procedure"]) == 0
        other = fab.scope("acme", "u2", "t1")
        assert other.count() == 0

    def test_list_excludes_held_forgotten_superseded(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        a = n.remember(kind="fact", content="alpha one")
        b = n.remember(kind="fact", content="beta two")
        c = n.remember(kind="fact", content="gamma three")
        d = n.remember(kind="fact", content="delta four is newer", supersedes=c.id)
        n.forget(id=a.id)
        n.forget(id=b.id, hold=True)
        assert [i.id for i in n.list().items] == [d.id]
        assert {i.id for i in n.list(include_superseded=True).items} == {c.id, d.id}
        past = datetime.now(timezone.utc) - timedelta(days=3650)
        assert n.count(valid_at=past) == 0

    def test_list_bad_cursor(self, fab: Any) -> None:
        with pytest.raises(ValidationError):
            fab.scope("acme").list(cursor="garbage!!")

    # -------------------------------------------------------------- lifecycle
    def test_release_hold(self, fab: Any) -> None:
        n = fab.scope("acme", "u1", "t1")
        a = n.remember(kind="fact", content="the launch code word is pelican")
        n.forget(id=a.id, hold=True)
        assert n.recall("pelican launch").hits == []
        out = n.release_hold(a.id, requested_by="counsel")
        assert out.outcome == "released" and out.content == "the launch code word is pelican"
        assert [h.id for h in n.recall("pelican launch").hits] == [a.id]
        assert [i.id for i in n.list().items] == [a.id]
        types = [h.type for h in n.history(a.id)]
        assert types[-2:] == ["Forgotten", "HoldReleased"]
        assert n.history(a.id)[-1].fields["requested_by"] == "counsel"
        with pytest.raises(NotHeldError):
            n.release_hold(a.id)
        n.forget(id=a.id)
        with pytest.raises(NoteForgottenError):
            n.release_hold(a.id)
        with pytest.raises(NoteNotFoundError):
            n.release_hold("0123456789ab")
