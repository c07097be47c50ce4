"""Issue 32: entities — resolution, upsert, identifiers, merge, undo, re-pointing,
forgetting, rebuild and isolation, on both backends (real PostgreSQL and in memory)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from memfabric.adapters import open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.adapters.memory.entities import InMemoryEntityStore
from memfabric.domain import replay
from memfabric.domain.entity import (
    Entity,
    EntityError,
    EntityNotFoundError,
    IdentifierConflictError,
    entity_uuid,
)
from memfabric.domain.note import ERASED
from memfabric.projections import entities as proj
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp


class Backend:
    """A fabric plus what the tests read beside its API (events, raw tables)."""

    def __init__(self, fabric: Any, dsn: str | None) -> None:
        self.fabric, self.dsn = fabric, dsn

    def events(self) -> int:
        if self.dsn is None:
            return int(self.fabric.log.event_count())
        with psycopg.connect(self.dsn) as conn:
            return int(conn.execute("SELECT count(*) FROM memfabric_events").fetchone()[0])  # type: ignore[index]

    def entity_events(self, aggregate_id: Any) -> list[Any]:
        if self.dsn is None:
            return list(self.fabric.log.events(aggregate_id))
        return list(self.fabric.store.stored_events(aggregate_id))


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        yield Backend(open_memory_fabric(), None)
        return
    dsn = request.getfixturevalue("dsn")
    with open_fabric(dsn) as fab:
        yield Backend(fab, dsn)


def maria(notes: Any) -> Any:
    return notes.entities.upsert("Maria Lopez", type="person",
                                 identifiers=[("email", "maria@acme.example")]).entity


def test_upsert_resolves_by_identifier_and_adds_alias(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    again = notes.entities.upsert("Maria", identifiers=[("email", "MARIA@acme.example")])
    assert (again.outcome, again.tier, again.entity.id) == ("resolved", "identifier", e.id)
    assert again.entity.aliases == ("Maria",)
    tiers = {s: notes.entities.resolve(s)[0].tier for s in
             ("maria@acme.example", "Maria Lopez", "maria", "Lopez, Maria", "Maria Lopes")}
    assert tiers == {"maria@acme.example": "identifier", "Maria Lopez": "exact_name", "maria": "exact_alias",
                     "Lopez, Maria": "normalised", "Maria Lopes": "fuzzy"}
    assert all(notes.entities.resolve(s)[0].id == e.id for s in tiers)


def test_equal_names_with_different_identifiers_stay_apart(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    first = maria(notes)
    other = notes.entities.upsert("Maria Lopez", type="person", identifiers=[("email", "mlopez@globex.example")])
    assert other.outcome == "created" and other.entity.id != first.id
    assert [c.id for c in other.candidates] == [first.id]  # reported as a merge candidate
    # the bare name is now ambiguous: resolve lists both, upsert creates rather than guess
    assert {c.id for c in notes.entities.resolve("Maria Lopez")} == {first.id, other.entity.id}
    assert notes.entities.upsert("Maria Lopez").outcome == "created"


def test_identifier_conflict_is_typed_and_writes_nothing(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    maria(notes)
    notes.entities.upsert("Acme Corp", type="organisation", identifiers=[("url", "https://acme.example")])
    before = backend.events()
    with pytest.raises(IdentifierConflictError):
        notes.entities.upsert("Someone", identifiers=[("email", "maria@acme.example"), ("url", "acme.example/")])
    with pytest.raises(ValidationError):
        notes.entities.upsert("x", identifiers=[("Bad Kind", "v")])
    with pytest.raises(ValidationError, match="not an email address"):
        notes.entities.upsert("Someone", identifiers=[("email", "someone-at-acme")])
    with pytest.raises(ValidationError):
        notes.entities.upsert("x\x00y")
    assert backend.events() == before


def test_a_malformed_entity_id_or_page_is_one_validation_error(backend: Backend) -> None:
    """``get``, ``forget`` and ``undo_merge`` name one entity (field ``entity`` / ``loser``,
    not a winner and a loser), ``list``'s ``after`` is an entity id; nothing is written."""
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    before = backend.events()
    for call, field in ((lambda: notes.entities.get("zzz"), "entity"),
                        (lambda: notes.entities.forget("ZZ-not-an-id"), "entity"),
                        (lambda: notes.entities.undo_merge("abc"), "loser"),
                        (lambda: notes.entities.list(after="zzz"), "after"),
                        (lambda: notes.entities.list(limit=0), "limit")):
        with pytest.raises(ValidationError) as caught:
            call()
        assert [err["loc"] for err in caught.value.errors()] == [(field,)]
    assert [v.id for v in notes.entities.list(after="0" * 12)] == [e.id]
    assert backend.events() == before


def test_alias_supersedes_and_identifier_supersedes(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    notes.entities.upsert("Maria", identifiers=[("email", "maria@acme.example")])
    first = notes.remember(kind="fact", content="Maria Lopez lives in Lisbon")
    second = notes.remember(kind="fact", content="Maria moved to Porto")
    assert second.outcome == "superseding" and second.supersedes == first.id
    assert second.decision is not None and second.decision["subject_key"] == f"entity:{e.id}|residence"
    job = notes.remember(kind="fact", content="maria@acme.example works at Initech")
    moved = notes.remember(kind="fact", content="Maria Lopez works at Globex")
    assert moved.supersedes == job.id
    notes.entities.upsert("Maria", identifiers=[("handle", "@mlopez"), ("email", "maria@acme.example")])
    again = notes.remember(kind="fact", content="@mlopez moved to Faro")
    assert again.supersedes == second.id


def test_namesakes_do_not_supersede_each_other(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    notes.entities.upsert("Sam Lee", type="person", identifiers=[("email", "sam@a.example")])
    notes.entities.upsert("Sam Lee", type="person", identifiers=[("email", "sam@b.example")])
    a = notes.remember(kind="fact", content="sam@a.example lives in Oslo")
    b = notes.remember(kind="fact", content="sam@b.example lives in Rome")
    assert b.outcome == "inserted" and a.id != b.id


def test_merge_repoints_notes_in_batches_and_undo_restores(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    m2 = notes.entities.upsert("M. Lopez", type="person").entity
    facts = [notes.remember(kind="fact", content=f"M. Lopez likes {h}").id
             for h in ("tennis", "chess", "golf", "jazz", "opera")]
    age = notes.remember(kind="fact", content="M. Lopez is 34")
    before = notes.entities.resolve("M. Lopez")[0]
    assert (before.id, before.tier) == (m2.id, "exact_name")
    result = notes.entities.merge(e.id, m2.id, reason="same person", batch=2)
    assert (result.repointed, result.batches) == (6, 3)
    assert notes.entities.get(m2.id).merged_into == e.id
    assert notes.entities.get(e.id).aliases == ("M. Lopez",)
    assert notes.entities.resolve("M. Lopez")[0].id == e.id
    causes = [h.cause for h in notes.history(age.id)]
    assert causes[-1] == f"merge:{result.merge_id}"
    assert notes.remember(kind="fact", content="Maria Lopez is 35").supersedes == age.id
    again = notes.entities.merge(e.id, m2.id)  # resumable: nothing left to move
    assert (again.merge_id, again.repointed) == (result.merge_id, 0)
    undone = notes.entities.undo_merge(m2.id)
    assert undone.repointed == 6  # what the merge moved (the superseded age note too), not the 35
    assert notes.entities.get(m2.id).merged_into is None
    assert notes.entities.get(e.id).aliases == ()
    assert notes.entities.resolve("M. Lopez")[0].id == m2.id
    assert [h.cause for h in notes.history(facts[0])][-1] == f"undo_merge:{result.merge_id}"
    with pytest.raises(EntityError):
        notes.entities.merge(e.id, e.id)


def test_an_interrupted_merge_resumes_where_it_stopped(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge killed after its first batch (one transaction per batch) has moved the
    names and that batch only; the same call again moves the rest under the same merge
    id, and no note is re-pointed twice."""
    import memfabric.domain.entities as entities_module

    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    m2 = notes.entities.upsert("M. Lopez", type="person").entity
    about = [notes.remember(kind="fact", content=f"M. Lopez likes {h}").id
             for h in ("tennis", "chess", "golf", "jazz", "opera")]
    real, opened = entities_module.open_uow, []

    def killed_at_the_second_batch(deps: Any, locks: Any) -> Any:
        opened.append(locks)
        if len(opened) == 2:
            raise RuntimeError("killed")
        return real(deps, locks)

    monkeypatch.setattr(entities_module, "open_uow", killed_at_the_second_batch)
    with pytest.raises(RuntimeError):
        notes.entities.merge(e.id, m2.id, batch=2)
    monkeypatch.undo()
    assert notes.entities.get(m2.id).merged_into == e.id  # step one committed
    causes = {i: [h.cause for h in notes.history(i) if (h.cause or "").startswith("merge:")] for i in about}
    assert sorted(len(c) for c in causes.values()) == [0, 0, 0, 1, 1]  # the first batch only
    result = notes.entities.merge(e.id, m2.id, batch=2)
    assert (result.repointed, result.batches) == (3, 2)
    causes = {i: [h.cause for h in notes.history(i) if (h.cause or "").startswith("merge:")] for i in about}
    assert all(c == [f"merge:{result.merge_id}"] for c in causes.values()), causes
    assert {h.id for h in notes.recall("M. Lopez likes", entity=e.id, top_k=10).hits} == set(about)
    assert notes.recall("M. Lopez likes", entity=m2.id).hits == []  # the loser has no notes left


def test_merge_refuses_other_visibility_and_unknown(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    private = notes.entities.upsert("Mary L", visibility="thread").entity
    with pytest.raises(EntityError):
        notes.entities.merge(e.id, private.id)
    with pytest.raises(EntityNotFoundError):
        notes.entities.merge(e.id, "0123456789ab")
    with pytest.raises(EntityError):
        notes.entities.undo_merge(e.id)


def test_forget_erases_names_and_index_rows(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    notes.entities.upsert("Mariquita", identifiers=[("email", "maria@acme.example")])
    assert notes.entities.forget(e.id) is True
    assert notes.entities.resolve("Maria Lopez") == []
    with pytest.raises(EntityNotFoundError):
        notes.entities.get(e.id)
    events = backend.entity_events(entity_uuid(notes.scope, e.id))
    assert [type(ev).__name__ for ev in events][-1] == "EntityForgotten"
    assert all(getattr(ev, "content", ERASED) == ERASED for ev in events)
    # the email can be used again by a new entity
    assert notes.entities.upsert("New", identifiers=[("email", "maria@acme.example")]).outcome == "created"
    with pytest.raises(EntityNotFoundError):
        notes.entities.forget(e.id)  # a forgotten entity is no longer visible
    if backend.dsn is not None:
        assert_no_plaintext(backend.dsn, ["Mariquita", "maria lopez", "Maria Lopez"])


def assert_no_plaintext(dsn: str, words: list[str]) -> None:
    """No table's text (any column, as text) holds any of ``words``."""
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()]
        for t in tables:
            for w in words:
                hit = conn.execute(f'SELECT count(*) FROM "{t}" x WHERE x::text ILIKE %s',  # noqa: S608
                                   (f"%{w}%",)).fetchone()
                assert hit is not None and hit[0] == 0, (t, w)
        for w in words:
            raw = conn.execute("SELECT count(*) FROM memfabric_events WHERE position(%s in state) > 0",
                               (w.encode(),)).fetchone()
            assert raw is not None and raw[0] == 0, ("memfabric_events", w)


def test_names_never_reach_a_table_in_plaintext(backend: Backend) -> None:
    if backend.dsn is None:
        pytest.skip("PostgreSQL tables only")
    notes = backend.fabric.scope("t1", "u1", "th1")
    notes.entities.upsert("Zebediah Quark", identifiers=[("email", "zq@quark.example")])
    assert_no_plaintext(backend.dsn, ["Zebediah", "quark.example", "zebediah"])
    with pytest.raises(AssertionError):  # the check sees what is stored in the clear
        assert_no_plaintext(backend.dsn, ["EntityCreated"])


def test_cross_scope_isolation(backend: Backend) -> None:
    home = backend.fabric.scope("t1", "u1", "th1")
    e = maria(home)
    private = home.entities.upsert("Secret Person", visibility="thread").entity
    sibling = backend.fabric.scope("t1", "u1", "th2")
    other_user = backend.fabric.scope("t1", "u2", "th1")
    other_tenant = backend.fabric.scope("t2", "u1", "th1")
    assert sibling.entities.resolve("Maria Lopez")[0].id == e.id  # resource-visible
    assert sibling.entities.resolve("Secret Person") == []
    for far in (other_user, other_tenant):
        assert far.entities.resolve("maria@acme.example") == []
        with pytest.raises(EntityNotFoundError):
            far.entities.get(e.id)
        with pytest.raises(EntityNotFoundError):
            far.entities.merge(private.id, e.id)
    # the same identifier in another tenant is another entity
    assert other_tenant.entities.upsert("Maria", identifiers=[("email", "maria@acme.example")]).outcome == "created"
    assert [v.id for v in sibling.entities.list()] == [e.id]


def test_rebuild_is_identical(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    m2 = notes.entities.upsert("M. Lopez").entity
    notes.remember(kind="fact", content="M. Lopez lives in Faro")
    notes.entities.merge(e.id, m2.id)
    gone = notes.entities.upsert("Forget Me").entity
    notes.entities.forget(gone.id)
    if backend.dsn is not None:
        admin = ProjectionAdmin.for_fabric(backend.fabric)
        reports = admin.verify("entities")
        assert {r.table for r in reports} == set(proj.EntitiesProjection.tables)
        assert all(r.ok for r in reports), reports
        for blue_green in (False, True):
            admin.rebuild("entities", blue_green=blue_green)
            assert all(r.ok for r in admin.verify("entities"))
        assert notes.entities.resolve("M. Lopez")[0].id == e.id  # the rebuilt index serves
        with psycopg.connect(backend.dsn) as conn:  # the identifier rule survives the switch
            unique = conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
                                  (proj.KEYS, "CREATE UNIQUE INDEX%grp, digest%")).fetchall()
        assert len(unique) == 1, unique
        return
    log = backend.fabric.log
    fresh = InMemoryEntityStore.__new__(InMemoryEntityStore)
    fresh.log, fresh.entities, fresh.keys_of, fresh.by_digest, fresh.notes, fresh.by_entity_id = log, {}, {}, {}, {}, {}
    for aid in log.aggregate_ids():
        agg: Any = None
        for ev in log.events(aid):
            agg = replay.step(ev, agg)
        fresh.project([agg])
    assert fresh.rows() == backend.fabric.service.entity_store.rows()
    assert any(isinstance(a, Entity) for a in [backend.fabric.service.entity_store.load(entity_uuid(notes.scope, e.id))])


def test_recall_by_entity_covers_every_alias_and_names_it(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    notes.entities.upsert("Mia", identifiers=[("email", "maria@acme.example")])
    about = {notes.remember(kind="fact", content=text).id for text in (
        "Maria Lopez likes tennis", "Mia likes chess", "maria@acme.example likes sailing")}
    other = notes.remember(kind="fact", content="Peter likes tennis").id
    got = notes.recall("likes tennis chess sailing", entity=e.id, top_k=10)
    assert {h.id for h in got.hits} == about and other not in {h.id for h in got.hits}
    assert {x.entity for x in got.explain} == {e.id}
    assert {h.id for h in notes.recall("tennis", entity="Mia", top_k=10, min_relevance=0).hits} <= about
    assert all(x.entity is None for x in notes.recall("tennis").explain)
    with pytest.raises(EntityNotFoundError):
        notes.recall("tennis", entity="Nobody Known")


def test_demo_shows_an_alias_and_a_merge(dsn: str) -> None:
    import io

    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo

    out = io.StringIO()
    summary = run_demo(Console(file=out, width=200), dsn=dsn)["entities"]
    assert summary == {"alias": True, "superseded": True, "merge_in_history": True}
    assert "17. entities" in out.getvalue() and "NoteEntityRepointed (merge:" in out.getvalue()


def test_a_forgotten_note_is_not_repointed_and_leaves_no_row(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    m2 = notes.entities.upsert("M. Lopez").entity
    kept = notes.remember(kind="fact", content="M. Lopez likes tennis")
    gone = notes.remember(kind="fact", content="M. Lopez likes chess")
    store = backend.fabric.service.entity_store
    assert {n.note_id for n in store.notes_of("t1", m2.id, merge_id=None, limit=10)} == {kept.id, gone.id}
    notes.forget(id=gone.id)
    assert {n.note_id for n in store.notes_of("t1", m2.id, merge_id=None, limit=10)} == {kept.id}
    assert notes.entities.merge(e.id, m2.id).repointed == 1


def test_erase_scope_forgets_the_entities_homed_there(backend: Backend) -> None:
    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    kept = backend.fabric.scope("t1", "u2", "th1").entities.upsert("Other Person").entity
    backend.fabric.erase_scope("t1", "u1")
    events = backend.entity_events(entity_uuid(notes.scope, e.id))
    assert type(events[-1]).__name__ == "EntityForgotten" and events[0].content == ERASED
    assert notes.entities.resolve("Maria Lopez") == []
    assert backend.fabric.scope("t1", "u2", "th1").entities.get(kept.id).display_name == "Other Person"
    if backend.dsn is not None:
        assert_no_plaintext(backend.dsn, ["Maria Lopez", "maria@acme.example"])


def test_the_entities_read_tool_resolves_and_reads_within_its_scope(backend: Backend) -> None:
    """The optional read-only agent tool ``memory.entities``: a name or identifier gives the
    ranked candidates ``resolve`` gives, an id the entity; nothing is written; an entity of
    another user is not found; a bad call is a tool error that does not echo the name."""

    class Session:
        id = "s-entities"

    notes = backend.fabric.scope("t1", "u1", "th1")
    e = maria(notes)
    notes.entities.upsert("Mia", identifiers=[("email", "maria@acme.example")])
    tools, session = notes.tools(), Session()
    events = backend.events()
    with notes.attach(session):
        found = tools.call("memory_entities", {"name": "Lopez, Maria"}, session=session)["candidates"]
        assert found[0] == {"id": e.id, "tier": "normalised", "score": 0.8, "type": "person",
                            "display_name": "Maria Lopez"}
        assert found == [dataclasses.asdict(c) for c in notes.entities.resolve("Lopez, Maria")]
        one = tools.call("memory.entities", {"id": e.id}, session=session)["entity"]
        assert (one["display_name"], one["aliases"], one["identifiers"]) == (
            "Maria Lopez", ["Mia"], [["email", "maria@acme.example"]])
        assert one["scope"] == "t1/u1/th1" and one["type"] == "person"
        assert tools.call("memory_entities", {"name": "Zebulon Nobody"}, session=session) == {"candidates": []}
        bad, is_error = tools.call_or_error("memory_entities", {"name": "Maria", "limit": 0}, session=session)
        assert is_error and bad["error"]["type"] == "ValidationError"
    assert backend.events() == events  # read-only
    other = backend.fabric.scope("t1", "u2", "th1")
    with other.attach(session):
        out, is_error = other.tools().call_or_error("memory_entities", {"id": e.id}, session=session)
        assert is_error and out["error"]["type"] == "EntityNotFoundError"
        assert other.tools().call("memory_entities", {"name": "maria@acme.example"}, session=session) == {
            "candidates": []}
    backend.fabric.principals.define("reader", {"read_kinds": ["fact"], "recall_scope": ["t1/u1/*"]})
    reader = notes.as_principal("reader")
    with reader.attach(session):  # memory profiles do not govern entities yet: refused
        out, is_error = reader.tools().call_or_error("memory_entities", {"name": "Maria Lopez"}, session=session)
        assert is_error and out["error"]["type"] == "AccessDenied"


def test_an_index_of_the_first_layout_is_migrated_in_place(dsn: str) -> None:
    """``mf_entity_keys`` made with a hex ``text`` digest and the primary key ``(aggregate_id,
    kind, digest, source)`` is brought to the lookup layout (``uuid`` digest, primary key
    ``(tenant_id, digest, aggregate_id, source) INCLUDE (ntok, entity_id, ...)``) when a
    fabric opens; the rows carry over, resolution serves and the projection verifies."""
    with open_fabric(dsn) as fab:
        e = maria(fab.scope("t1", "u1", "th1"))
    k = proj.KEYS
    with psycopg.connect(dsn, autocommit=True) as conn:  # the first layout, as it was created
        conn.execute(f"ALTER TABLE {k} DROP CONSTRAINT {k}_pkey")
        conn.execute(f"DROP INDEX {k}_aggregate")
        conn.execute(f"ALTER TABLE {k} ALTER COLUMN digest TYPE text USING replace(digest::text, '-', ''),"
                     " ADD PRIMARY KEY (aggregate_id, kind, digest, source), RESET (autovacuum_vacuum_scale_factor)")
        conn.execute(f"CREATE INDEX {k}_digest ON {k} (tenant_id, digest)")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
        before = conn.execute(f"SELECT count(*) FROM {k}").fetchone()
    with open_fabric(dsn) as fab:
        notes = fab.scope("t1", "u1", "th1")
        assert [c.id for c in notes.entities.resolve("maria@acme.example")] == [e.id]
        assert notes.entities.resolve("Lopez, Maria")[0].id == e.id
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify("entities"))
    with psycopg.connect(dsn) as conn:
        pkey = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"{k}_pkey",)).fetchone()
        typ = conn.execute("SELECT data_type FROM information_schema.columns WHERE table_name = %s"
                           " AND column_name = 'digest'", (k,)).fetchone()
        after = conn.execute(f"SELECT count(*) FROM {k}").fetchone()
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s", (k,)).fetchone()
        old = conn.execute("SELECT to_regclass(%s)", (f"{k}_digest",)).fetchone()
    assert pkey is not None and f"(tenant_id, digest, aggregate_id, source) INCLUDE ({LOOKUP_INCLUDE})" in pkey[0]
    assert typ == ("uuid",) and after == before and old == (None,)
    assert options is not None and "autovacuum_vacuum_scale_factor=0.02" in options[0]


LOOKUP_INCLUDE = "ntok, entity_id, type, resource_id, thread_id, visibility"
"""The ``INCLUDE`` columns of the lookup index (``proj.KEY_INCLUDE``), spelled out."""


def _pkey(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"{proj.KEYS}_pkey",)).fetchone()
    assert row is not None
    return str(row[0])


def test_an_index_of_the_second_layout_is_migrated_in_place(dsn: str) -> None:
    """A lookup index of the second layout (``INCLUDE (ntok)`` only: a lookup joined
    ``mf_entities``) gets the columns of ``proj.KEY_INCLUDE`` when a fabric opens, the rows
    carry over and every tier resolves as before; a current table is left as it is (the
    next open changes nothing)."""
    with open_fabric(dsn) as fab:
        notes = fab.scope("t1", "u1", "th1")
        e = maria(notes)
        notes.entities.upsert("Mia", identifiers=[("email", "maria@acme.example")])
        surfaces = ("maria@acme.example", "Maria Lopez", "Mia", "Lopez, Maria", "Maria Lopezz", "M. Lopez")
        expected = [[(c.id, c.tier, c.score) for c in notes.entities.resolve(s)] for s in surfaces]
    assert all(found and found[0][0] == e.id for found in expected)
    k = proj.KEYS
    with psycopg.connect(dsn, autocommit=True) as conn:  # the second layout, as it was created
        conn.execute(f"ALTER TABLE {k} DROP CONSTRAINT {k}_pkey,"
                     " ADD PRIMARY KEY (tenant_id, digest, aggregate_id, source) INCLUDE (ntok)")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
        before = conn.execute(f"SELECT count(*) FROM {k}").fetchone()
    assert "INCLUDE (ntok)" in _pkey(dsn)
    with open_fabric(dsn) as fab:
        notes = fab.scope("t1", "u1", "th1")
        assert [[(c.id, c.tier, c.score) for c in notes.entities.resolve(s)] for s in surfaces] == expected
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify("entities"))
    assert f"INCLUDE ({LOOKUP_INCLUDE})" in _pkey(dsn)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {k}").fetchone() == before
        with conn.cursor() as cur:
            assert proj.migrate_keys(cur) is False  # current: nothing altered


def test_the_lookup_index_carries_the_entitys_own_home_visibility_and_type(dsn: str) -> None:
    """Every key row's ``INCLUDE`` columns (what a lookup filters on instead of joining
    ``mf_entities``) are its entity's, for entities of each visibility and home, and a
    reader sees exactly the entities a note of that home and visibility would show it."""
    with open_fabric(dsn) as fab:
        for scope, vis in ((("t1", "u1", "th1"), "thread"), (("t1", "u1", "th2"), "resource"),
                           (("t1", "u2", "th1"), "tenant")):
            fab.scope(*scope).entities.upsert(f"Person {vis}", type="person", visibility=vis,
                                              identifiers=[("email", f"{vis}@acme.example")])
        seen = {reader: {c.display_name for s in ("Person", "thread@acme.example", "resource@acme.example",
                                                  "tenant@acme.example") for c in fab.scope(*reader).entities.resolve(s)}
                for reader in (("t1", "u1", "th1"), ("t1", "u1", "th9"), ("t1", "u2", "th1"), ("t2", "u1", "th1"))}
    assert seen == {("t1", "u1", "th1"): {"Person thread", "Person resource", "Person tenant"},
                    ("t1", "u1", "th9"): {"Person resource", "Person tenant"},
                    ("t1", "u2", "th1"): {"Person tenant"}, ("t2", "u1", "th1"): set()}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT count(*), count(*) FILTER (WHERE (k.entity_id, k.type, k.resource_id, k.thread_id,"
            " k.visibility, k.tenant_id) IS DISTINCT FROM (e.entity_id, e.type, e.resource_id, e.thread_id,"
            f" e.visibility, e.tenant_id)) FROM {proj.KEYS} k JOIN {proj.ENTITIES} e USING (aggregate_id)").fetchone()
    assert rows is not None and rows[0] > 30 and rows[1] == 0
