"""Issue 24: the one-round-trip write checks, in its last statement, that its tenant
had no events its projections had not applied (a gap, left e.g. by a writer whose
projections a separate runner keeps). A write that decided on nothing is then written
again through the path that catches the gap up; one that read first asked with its
first read and took that path at once. Either way every event ends up applied once:
``projections verify`` passes and the notes of both writers are recalled."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from memfabric.adapters import ProjectionAdmin, open_fabric
from memfabric.adapters.postgres import uow
from tests.conftest import event_count


def test_a_gap_is_caught_up_by_the_next_inline_write(dsn: str) -> None:
    with open_fabric(dsn) as inline, \
            open_fabric(dsn, inline_projections=False, await_projections=False) as deferred:
        notes = inline.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="the inline writer was here first", consolidate=False)
        deferred.scope("acme", "u1", "t1").remember(kind="fact", content="the deferred writer noted a kiwi",
                                                     consolidate=False)
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            again = uow.PostgresUnitOfWork._write_again  # noqa: SLF001

            def counted(self: Any) -> None:
                seen["written again"] += 1
                again(self)
            mp.setattr(uow.PostgresUnitOfWork, "_write_again", counted)
            before = event_count(dsn)
            plain = notes.remember(kind="fact", content="a plain write behind a gap", consolidate=False)
        assert seen["written again"] == 1 and event_count(dsn) == before + 1
        assert [h.id for h in notes.recall("plain write behind a gap").hits][:1] == [plain.id]
        assert [h.content for h in notes.recall("deferred writer kiwi").hits][:1] == ["the deferred writer noted a kiwi"]

        deferred.scope("acme", "u1", "t1").remember(kind="fact", content="Bob works at Initech")
        with pytest.MonkeyPatch.context() as mp:
            slow = uow.PostgresUnitOfWork._commit_one_tenant  # noqa: SLF001

            def catching_up(self: Any, *a: Any) -> None:
                seen["caught up at once"] += 1
                slow(self, *a)
            mp.setattr(uow.PostgresUnitOfWork, "_commit_one_tenant", catching_up)
            moved = notes.remember(kind="fact", content="Bob now works at Umbrella Pharma")  # reads first
        assert moved.outcome == "superseding"
        assert seen == Counter({"written again": 1, "caught up at once": 1}), seen
        assert [h.id for h in notes.recall("where does Bob work").hits][:1] == [moved.id]
        reports = ProjectionAdmin.for_fabric(inline).verify()
        assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]


def test_a_write_that_guarded_against_entity_keys_behind_a_gap_is_written_again_with_the_read(dsn: str) -> None:
    """A plain write naming a subject sends a guard in place of the entity-key read
    (issue 24); behind a gap its commit is refused, and since the rewrite of the same
    events (``_write_again``) replays no read, the write runs again with the read, which
    asks for the gap and catches it up at once: one event more, every event applied."""
    with open_fabric(dsn) as inline, \
            open_fabric(dsn, inline_projections=False, await_projections=False) as deferred:
        notes = inline.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="the inline writer was here first", consolidate=False)
        deferred.scope("acme", "u1", "t1").remember(kind="fact", content="the deferred writer noted a kiwi",
                                                     consolidate=False)
        seen: Counter[str] = Counter()
        with pytest.MonkeyPatch.context() as mp:
            for name in ("guard", "_write_again", "_commit_one_tenant"):
                method = getattr(uow.PostgresUnitOfWork, name)

                def counted(self: Any, *a: Any, _name: str = name, _method: Any = method) -> Any:
                    out = _method(self, *a)
                    seen[_name] += 1 if out is not False else 0
                    return out
                mp.setattr(uow.PostgresUnitOfWork, name, counted)
            before = event_count(dsn)
            named = notes.remember(kind="fact", content="Carol works as a nurse in Lisbon", consolidate=False)
        assert seen == Counter({"guard": 1, "_commit_one_tenant": 1}), seen
        assert event_count(dsn) == before + 1
        assert [h.id for h in notes.recall("Carol nurse Lisbon").hits][:1] == [named.id]
        reports = ProjectionAdmin.for_fabric(inline).verify()
        assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]
