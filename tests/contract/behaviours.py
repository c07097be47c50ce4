"""The fabric's behaviours, written once and run against every backend.

Like eventsourcing's abstract test cases per recorder: a backend's test module
subclasses :class:`FabricContract` (named without ``Test`` so pytest collects only the
subclasses) and provides the ``backend`` fixture — a :class:`Backend` that opens a
fabric with ``open_fabric``'s settings and counts the events in its log.

Only what every backend guarantees is asserted: lexical scores differ in detail
(PostgreSQL stems, the in-memory reference does not), so the tests use exact words
and compare outcomes, ids, windows and memberships, never raw scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from memfabric.domain.errors import (
    CapacityError,
    ConflictError,
    NoteExistsError,
    NoteNotFoundError,
    NotSupportedError,
)
from memfabric.domain.note import ERASED
from pydantic import ValidationError

NOW = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class Backend:
    """``open(**settings)`` → a fabric (``scope``, ``erase_scope``, context manager);
    ``events()`` → events in the log of the fabric last opened."""

    open: Callable[..., Any]
    events: Callable[[], int]


class FabricContract:
    """Behaviours every backend must show. Subclasses provide ``backend``."""

    @pytest.fixture
    def backend(self) -> Backend:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def fab(self, backend: Backend) -> Any:
        return backend.open()

    # ------------------------------------------------------------ consolidation
    def test_repeat_folds_into_same_note(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1", "t1")
        a = notes.remember(kind="fact", content="The user likes green tea")
        b = notes.remember(kind="fact", content="the user likes green tea!")
        assert (a.outcome, b.outcome) == ("inserted", "folded")
        assert b.id == a.id and b.fold_count == 1
        assert notes.get(a.id).fold_count == 1
        assert len(notes.lineage(a.id).folds) == 1

    def test_supersede_by_subject(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1")
        old = notes.remember(kind="fact", content="Lives in Berlin", subject="home-city")
        new = notes.remember(kind="fact", content="Lives in Paris now", subject="home-city")
        assert new.outcome == "superseding" and new.id != old.id
        assert new.supersedes == old.id
        line = notes.lineage(new.id)
        assert line.predecessors == [old.id]
        assert notes.lineage(old.id).successors == [new.id]
        closed = notes.get(old.id)
        assert closed.superseded_by == new.id and closed.valid_to is not None
        assert [h.id for h in notes.recall("Lives", mode="lexical").hits] == [new.id]

    def test_supersede_explicit(self, fab: Any) -> None:
        notes = fab.scope("acme")
        old = notes.remember(kind="fact", content="The deploy runs on Fridays", valid_from=NOW)
        later = NOW + timedelta(days=10)
        new = notes.remember(kind="fact", content="Deploys moved to Tuesdays", supersedes=old.id,
                             valid_from=later)
        assert new.outcome == "superseding" and new.supersedes == old.id
        assert notes.get(old.id).valid_to == later
        assert notes.lineage(old.id).successors == [new.id]
        assert notes.lineage(new.id).predecessors == [old.id]

    def test_older_news_is_preceding(self, fab: Any) -> None:
        notes = fab.scope("acme")
        june = NOW + timedelta(days=150)
        newer = notes.remember(kind="fact", content="Manager is Dana", subject="manager", valid_from=june)
        older = notes.remember(kind="fact", content="Manager is Sam", subject="manager", valid_from=NOW)
        assert older.outcome == "preceding"
        assert older.valid_to == june
        assert notes.get(newer.id).valid_to is None
        assert notes.get(newer.id).superseded_by is None

    def test_unrelated_fact_is_inserted(self, fab: Any) -> None:
        notes = fab.scope("acme")
        a = notes.remember(kind="fact", content="The office is on the third floor")
        b = notes.remember(kind="fact", content="Quarterly revenue grew by twelve percent")
        assert (a.outcome, b.outcome) == ("inserted", "inserted") and a.id != b.id

    def test_inferred_subject_supersedes_and_similarity_alone_does_not(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1", "t1")
        berlin = notes.remember(kind="fact", content="Alice lives in Berlin")
        munich = notes.remember(kind="fact", content="Alice moved to Munich")
        assert munich.outcome == "superseding" and munich.supersedes == berlin.id
        assert munich.decision is not None and munich.decision["basis"] == "inferred_subject"
        assert notes.lineage(berlin.id).successors == [munich.id]
        first = notes.remember(kind="fact", content="Ticket 4411 is assigned to the network team")
        second = notes.remember(kind="fact", content="Ticket 4412 is assigned to the network team")
        assert second.outcome == "inserted" and second.id != first.id
        assert {h.id for h in notes.recall("ticket assigned network team", top_k=5).hits} >= {first.id, second.id}

    def test_remember_many_equals_one_by_one(self, fab: Any) -> None:
        items: list[dict[str, Any]] = [
            {"kind": "fact", "content": "Prefers window seats"},
            {"kind": "fact", "content": "prefers window seats"},
            {"kind": "fact", "content": "Team size is four", "subject": "team-size"},
            {"kind": "fact", "content": "Team size is six", "subject": "team-size"},
            {"kind": "procedure", "content": "Run make lint before pushing"},
            {"kind": "fact", "content": "Bicycle commuter in summer"},
        ]
        batch = fab.scope("acme", "batch").remember_many(items)
        single_notes = fab.scope("acme", "single")
        single = [single_notes.remember(**item) for item in items]
        assert [n.outcome for n in batch] == [n.outcome for n in single]

        def shape(ns: list[Any]) -> list[int]:
            first: dict[str, int] = {}
            return [first.setdefault(n.id, i) for i, n in enumerate(ns)]

        assert shape(batch) == shape(single)
        assert [n.supersedes is not None for n in batch] == [n.supersedes is not None for n in single]
        assert [n.fold_count for n in batch] == [n.fold_count for n in single]

    # ------------------------------------------------------------ forget / hold
    def test_forget_tombstones_and_erases(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1")
        n = notes.remember(kind="fact", content="Secret project codename bluebird", keywords=["bluebird"])
        res = notes.forget(id=n.id, requested_by="dpo")
        assert (res.deleted, res.held) == (1, False)
        hist = notes.history(n.id)
        assert hist[-1].type == "Forgotten" and hist[-1].fields["requested_by"] == "dpo"
        first = hist[0]
        assert first.fields["content"] == ERASED and "content" in first.erased
        assert {"content", "keywords", "embedding"} <= set(first.erased)
        assert all(first.fields[name] == ERASED for name in first.erased)
        assert notes.get(n.id).content is None
        assert notes.recall("bluebird codename").hits == []
        assert notes.verify_content(n.id, "Secret project codename bluebird")
        assert not notes.verify_content(n.id, "something else")
        assert notes.get(n.id).forgotten
        again = notes.forget(id=n.id)
        assert again.deleted == 0

    def test_hold_keeps_content_but_never_recalls(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1")
        n = notes.remember(kind="fact", content="Litigation memo about invoices")
        res = notes.forget(id=n.id, hold=True)
        assert (res.deleted, res.held) == (0, True)
        got = notes.get(n.id)
        assert got.held and not got.forgotten and got.content == "Litigation memo about invoices"
        assert notes.history(n.id)[0].fields["content"] == "Litigation memo about invoices"
        assert notes.recall("litigation memo invoices").hits == []
        assert notes.forget(id=n.id).held is True

    # ------------------------------------------------------------ working
    def test_working_write_and_append(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1", "t1")
        w = notes.remember(kind="working", block="prefs", content="tea")
        assert w.outcome == "inserted"
        a = notes.append_block("prefs", "coffee")
        assert a.outcome == "appended" and a.content == "tea\ncoffee"
        b = notes.append_block("prefs", "\nmilk")
        assert b.content == "tea\ncoffee\nmilk"
        blocks = notes.working_value()["_fabric"]["blocks"]
        assert blocks["prefs"]["content"] == "tea\ncoffee\nmilk" and blocks["prefs"]["version"] == 3
        r = notes.remember(kind="working", block="prefs", content="water")
        assert r.outcome == "replaced"
        assert notes.working_value()["_fabric"]["blocks"]["prefs"]["version"] == 4
        assert fab.scope("acme", "u1", "t2").working_value()["_fabric"]["blocks"] == {}
        assert notes.recall("water").hits == []

    def test_working_expected_version(self, fab: Any, backend: Backend) -> None:
        notes = fab.scope("acme")
        notes.append_block("todo", "one", expected_version=0)
        notes.append_block("todo", "two", expected_version=1)
        before = backend.events()
        with pytest.raises(ConflictError):
            notes.append_block("todo", "three", expected_version=1)
        assert backend.events() == before
        assert notes.working_value()["_fabric"]["blocks"]["todo"]["content"] == "one\ntwo"

    def test_working_capacity(self, backend: Backend) -> None:
        fab = backend.open(limits={"max_entry_text_chars": 10})
        notes = fab.scope("acme")
        notes.remember(kind="working", block="b", content="12345")
        before = backend.events()
        with pytest.raises(CapacityError):
            notes.append_block("b", "678901")
        assert backend.events() == before
        assert notes.working_value()["_fabric"]["blocks"]["b"]["content"] == "12345"

    def test_forget_block(self, fab: Any) -> None:
        notes = fab.scope("acme")
        notes.remember(kind="working", block="scratch", content="draft")
        res = notes.forget(block="scratch")
        assert res.deleted == 1 and res.block == "scratch"
        assert notes.working_value()["_fabric"]["blocks"] == {}
        again = notes.append_block("scratch", "fresh")
        assert again.outcome == "inserted" and again.content == "fresh"

    # ------------------------------------------------------------ recall
    def test_procedures_only_when_asked(self, fab: Any) -> None:
        notes = fab.scope("acme")
        p = notes.remember(kind="procedure", content="Rotate keys with vault rotate")
        f = notes.remember(kind="fact", content="Keys live in vault")
        assert [h.id for h in notes.recall("vault keys").hits] == [f.id]
        got = {h.id for h in notes.recall("vault keys", kinds=["procedure", "fact"]).hits}
        assert got == {p.id, f.id}
        assert [h.id for h in notes.recall("vault keys", kinds="procedure").hits] == [p.id]

    def test_as_of_respects_windows(self, fab: Any) -> None:
        notes = fab.scope("acme")
        n = notes.remember(kind="fact", content="Promotion campaign banana", valid_from=NOW,
                           valid_to=NOW + timedelta(days=30))
        inside = notes.recall("banana campaign", as_of=NOW + timedelta(days=1)).hits
        assert [h.id for h in inside] == [n.id]
        assert notes.recall("banana campaign", as_of=NOW - timedelta(days=1)).hits == []
        assert notes.recall("banana campaign", as_of=NOW + timedelta(days=30)).hits == []
        assert [h.id for h in notes.recall("banana campaign", as_of=NOW).hits] == [n.id]

    def test_other_tenant_never_sees(self, fab: Any) -> None:
        fab.scope("acme").remember(kind="fact", content="Acme pricing is confidential",
                                   consent={"visibility": "tenant"})
        assert fab.scope("globex").recall("acme pricing confidential").hits == []
        assert fab.scope("globex", "u1", "t1").recall("acme pricing", mode="vector").hits == []

    def test_visibility(self, fab: Any) -> None:
        own = fab.scope("acme", "u1", "t1")
        t = own.remember(kind="fact", content="Thread note zebra", consent={"visibility": "thread"})
        r = own.remember(kind="fact", content="Resource note zebra", consent={"visibility": "resource"})
        a = own.remember(kind="fact", content="Tenant note zebra", consent={"visibility": "tenant"})

        def seen(*scope: str | None) -> set[str]:
            return {h.id for h in fab.scope(*scope).recall("zebra note", top_k=20).hits}

        assert seen("acme", "u1", "t1") == {t.id, r.id, a.id}
        assert seen("acme", "u1", "t2") == {r.id, a.id}
        assert seen("acme", "u1") == {r.id, a.id}
        assert seen("acme", "u2") == {a.id}
        assert seen("acme") == {a.id}

    def test_a_fact_follows_the_user_across_threads(self, fab: Any) -> None:
        """Issue 16: default resource visibility, one live note per fact across the
        user's threads, thread-only notes kept apart, by-id actions from any scope
        that sees the note."""
        th1, th2, user = fab.scope("acme", "u1", "t1"), fab.scope("acme", "u1", "t2"), fab.scope("acme", "u1")
        a = th1.remember(kind="fact", content="The user likes green tea")
        b = th2.remember(kind="fact", content="the user likes green tea!")
        assert (b.outcome, b.id, b.scope) == ("folded", a.id, a.scope)
        assert [h.id for h in user.recall("green tea").hits] == [a.id]
        p = th1.remember(kind="fact", content="The user likes oolong tea", consent={"visibility": "thread"})
        q = th2.remember(kind="fact", content="The user likes oolong tea", consent={"visibility": "thread"})
        assert q.outcome == "inserted" and q.id != p.id
        for where in (th2, user, fab.scope("acme", "u2", "t1"), fab.scope("globex", "u1", "t1")):
            with pytest.raises(NoteNotFoundError):
                where.get(p.id)
            assert where.forget(id=p.id).deleted == 0
        assert user.forget(id=a.id).deleted == 1
        assert th1.get(a.id).forgotten and a.id not in {h.id for h in th2.recall("green tea").hits}

    def test_concurrent_writers_of_one_user_make_one_note(self, fab: Any) -> None:
        """Issue 16: the (tenant, resource) lock serialises writers of two threads."""
        import threading

        barrier, out = threading.Barrier(4), []

        def write(i: int) -> None:
            notes = fab.scope("acme", "u1", f"t{i}")
            barrier.wait()
            out.append(notes.remember(kind="fact", content="The user's locker is number 12"))

        workers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert sorted(n.outcome for n in out) == ["folded", "folded", "folded", "inserted"]
        assert len({n.id for n in out}) == 1 and fab.scope("acme", "u1").count() == 1

    def test_require_consent(self, backend: Backend) -> None:
        fab = backend.open(require_consent=True)
        notes = fab.scope("acme")
        yes = notes.remember(kind="fact", content="Granted walrus", consent={"granted": True})
        notes.remember(kind="fact", content="Unknown walrus")
        notes.remember(kind="fact", content="Refused walrus", consent={"granted": False})
        assert [h.id for h in notes.recall("walrus", top_k=20).hits] == [yes.id]

    def test_refused_consent_never_recalled(self, fab: Any) -> None:
        notes = fab.scope("acme")
        unknown = notes.remember(kind="fact", content="Unknown otter")
        notes.remember(kind="fact", content="Refused otter", consent={"granted": False})
        assert [h.id for h in notes.recall("otter", top_k=20).hits] == [unknown.id]

    def test_budget_keeps_best_hit(self, fab: Any) -> None:
        notes = fab.scope("acme")
        for text in ["Llama facts: llamas hum when anxious and spit rarely",
                     "Llama herd size is eleven animals on the northern farm",
                     "Llama wool is warm"]:
            notes.remember(kind="fact", content=text)
        full = notes.recall("llama", mode="lexical")
        assert len(full.hits) == 3
        one = notes.recall("llama", mode="lexical", budget=1)
        assert [h.id for h in one.hits] == [full.hits[0].id]
        assert len(one.explain) == 1

    def test_recall_hits_carry_fields(self, fab: Any) -> None:
        notes = fab.scope("acme", "u1")
        n = notes.remember(kind="fact", content="Favourite colour teal", tags=["pref"],
                           importance=0.75, source_entry_ids=["D1:3"])
        hit = notes.recall("colour teal").hits[0]
        assert hit.id == n.id and hit.tags == ("pref",) and hit.importance == 0.75
        assert hit.scope == n.scope and hit.source_entry_ids == ("D1:3",)
        assert hit.outcome == "recalled" and hit.content == "Favourite colour teal"

    # ------------------------------------------------------------ erase / files
    def test_counts_name_every_state(self, fab: Any) -> None:
        """Issue 27 item 5: ``Notes.counts()`` names live, superseded, held and forgotten
        for a scope prefix, and ``erase_scope`` reports the same numbers (``left``)."""
        u1, t9 = fab.scope("acme", "u1"), fab.scope("acme", "u1", "t9")
        u1.remember(kind="fact", content="User lives in Lisbon", subject="home")
        u1.remember(kind="fact", content="User lives in Porto", subject="home")  # supersedes
        held = u1.remember(kind="fact", content="User signed the contract")
        gone = u1.remember(kind="fact", content="User likes jazz")
        block = t9.remember(kind="working", block="w", content="block text")
        t9.forget(id=block.id)
        t9.remember(kind="working", block="w", content="block text again")  # a live label again
        t9.forget(id=t9.remember(kind="fact", content="thread fact about plums").id)
        fab.scope("acme", "u2").forget(id=fab.scope("acme", "u2").remember(kind="fact", content="x y").id)
        u1.forget(id=held.id, hold=True)
        u1.forget(id=gone.id)
        assert u1.count() == 1 and u1.count(include_superseded=True) == 2
        c = u1.counts()
        assert (c.live, c.superseded, c.held, c.forgotten) == (2, 1, 1, 2), c
        c = t9.counts()
        assert (c.live, c.superseded, c.held, c.forgotten) == (1, 0, 0, 1), c
        c = fab.scope("acme").counts()
        assert (c.live, c.superseded, c.held, c.forgotten) == (2, 1, 1, 3), c
        res = fab.erase_scope("acme", "u1")
        assert (res.found.live, res.found.superseded, res.found.held) == (2, 1, 1)
        left = res.left
        assert (left.live, left.superseded, left.held, left.forgotten) == (0, 0, 1, 5), left
        assert left == u1.counts() and res.remaining == 0

    def test_erase_scope_counts(self, fab: Any) -> None:
        u1 = fab.scope("acme", "u1")
        u1.remember(kind="fact", content="one fact about apples")
        held = u1.remember(kind="fact", content="two fact about pears")
        u1.remember(kind="working", block="w", content="block text")
        fab.scope("acme", "u1", "t9").remember(kind="fact", content="thread fact about plums")
        other = fab.scope("acme", "u2").remember(kind="fact", content="other resource fact")
        u1.forget(id=held.id, hold=True)
        res = fab.erase_scope("acme", "u1", batch_size=2)
        assert (res.deleted, res.held, res.already_held, res.remaining) == (3, 0, 1, 0)
        assert fab.scope("acme", "u2").get(other.id).forgotten is False
        again = fab.erase_scope("acme", "u1")
        assert (again.deleted, again.already_held, again.batches) == (0, 1, 0)
        with pytest.raises(ValidationError):
            fab.erase_scope("acme", batch_size=0)
        hold = fab.erase_scope("acme", hold=True)
        assert (hold.held, hold.deleted, hold.already_held) == (1, 0, 1)

    def test_repoint_and_delete_path(self, fab: Any) -> None:
        notes = fab.scope("acme", "repo")
        f = notes.remember(kind="file", path="src/a.py", content="module a parses config files")
        moved = notes.repoint("src/a.py", "src/b.py")
        assert moved.repointed == (f.id,)
        assert notes.get(f.id).path == "src/b.py"
        assert notes.repoint("src/a.py", "src/c.py").repointed == ()
        again = notes.remember(kind="file", path="src/b.py", content="module b parses config files")
        assert again.outcome == "superseding" and again.supersedes == f.id
        gone = notes.delete_path("src/b.py")
        assert set(gone.deleted) == {f.id, again.id}  # the superseded note too
        assert notes.recall("config files", kinds="file").hits == []

    # ------------------------------------------------------------ bad input
    @pytest.mark.parametrize(("fields", "name"), [
        ({"kind": "memo", "content": "x"}, "kind"),
        ({"kind": "fact"}, "content"),
        ({"kind": "fact", "content": "x", "id": "abc"}, "id"),
        ({"kind": "file", "content": "x"}, "path"),
        ({"kind": "fact", "content": "x", "valid_from": NOW, "valid_to": NOW}, "valid_to"),
        ({"kind": "fact", "content": "x", "importance": 1.5}, "importance"),
    ])
    def test_bad_input_writes_nothing(self, fab: Any, backend: Backend, fields: dict[str, Any],
                                      name: str) -> None:
        notes = fab.scope("acme")
        notes.remember(kind="fact", content="baseline note")
        before = backend.events()
        with pytest.raises(ValidationError) as info:
            notes.remember(**fields)
        assert name in str(info.value)
        with pytest.raises(ValidationError):
            notes.remember_many([{"kind": "fact", "content": "fine"}, fields])
        assert backend.events() == before

    def test_domain_errors_write_nothing(self, fab: Any, backend: Backend) -> None:
        notes = fab.scope("acme")
        notes.remember(kind="fact", content="taken", id="0123456789ab")
        before = backend.events()
        with pytest.raises(NoteExistsError):
            notes.remember(kind="fact", content="second", id="0123456789ab")
        with pytest.raises(NoteExistsError):
            notes.remember_many([{"kind": "fact", "content": "a new fact about cats"},
                                 {"kind": "fact", "content": "clash", "id": "0123456789ab"}])
        with pytest.raises(NoteNotFoundError):
            notes.remember(kind="fact", content="x", supersedes="aaaaaaaaaaaa")
        with pytest.raises(NotSupportedError):
            notes.remember(kind="episode", content="x")
        with pytest.raises(NoteNotFoundError):
            notes.get("bbbbbbbbbbbb")
        assert backend.events() == before
        assert notes.get("0123456789ab").content == "taken"
