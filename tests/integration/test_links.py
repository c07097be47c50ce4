"""Issue 15: links that recall uses — link/unlink, the link graph, 1-hop expansion in
the recall statement, the linker and evolution workers behind the attach gate, and
erasure of what a forgotten note contributed. Real PostgreSQL (fresh database per
test); the in-memory backend is checked for the same behaviour at the end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain.errors import NoteForgottenError, NoteNotFoundError
from memfabric.domain.inputs import Scoring
from memfabric.domain.links import LinkError, LinkScopeError, evolution_patch
from memfabric.domain.note import note_uuid
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import event_count, fetch
from tests.integration.test_privacy import dump_every_table


class Session:
    def __init__(self, sid: str = "s-1") -> None:
        self.id = sid


def edges(dsn: str) -> list[tuple[Any, ...]]:
    return fetch(dsn, "SELECT from_note_id, to_note_id, relation, weight FROM mf_link_graph"
                      " ORDER BY 1, 2, 3")


def topics(dsn: str, suffix: str) -> int:
    return int(fetch(dsn, "SELECT count(*) FROM memfabric_events WHERE topic LIKE %s",
                     ("%Note." + suffix,))[0][0])  # type: ignore[arg-type]


@pytest.fixture
def plain(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False) as fab:
        yield fab


@pytest.fixture
def workers(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False, linker={"enabled": True, "top_k": 3},
                     evolution={"enabled": True, "max_patches": 8}) as fab:
        yield fab


# ------------------------------------------------------------------ commands
def test_link_and_unlink_are_events_on_the_source(plain: Fabric, dsn: str) -> None:
    notes = plain.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Alice plays the cello")
    b = notes.remember(kind="fact", content="The orchestra rehearses on Tuesdays")
    out = notes.link(a.id, b.id, relation="related", weight=0.7)
    assert out.outcome == "linked" and [(lk.id, lk.weight) for lk in out.links] == [(b.id, 0.7)]
    assert edges(dsn) == [(a.id, b.id, "related", pytest.approx(0.7))]
    assert notes.get(a.id).links[0].relation == "related"
    notes.link(a.id, b.id, weight=0.4)  # the same edge again replaces its weight
    assert edges(dsn) == [(a.id, b.id, "related", pytest.approx(0.4))]
    assert notes.unlink(a.id, b.id).outcome == "unlinked"
    assert edges(dsn) == [] and notes.get(a.id).links == ()
    assert [h.type for h in notes.history(a.id)][-1].endswith("Unlinked")
    before = event_count(dsn)
    notes.unlink(a.id, b.id)  # no such edge: nothing written
    assert event_count(dsn) == before
    # links on remember, as before, also reach the graph
    c = notes.remember(kind="fact", content="Cello strings are made of steel", links=[{"id": a.id}])
    assert edges(dsn) == [(c.id, a.id, "related", pytest.approx(1.0))]


def test_link_errors_write_nothing(plain: Fabric, dsn: str) -> None:
    notes = plain.scope("acme", "u1", "t1")
    other = plain.scope("acme", "u1", "t2")
    a = notes.remember(kind="fact", content="Alice plays the cello")
    b = notes.remember(kind="fact", content="Bob plays the drums")
    elsewhere = other.remember(kind="fact", content="Carol plays the flute")
    gone = notes.remember(kind="fact", content="Dave plays the oboe")
    held = notes.remember(kind="fact", content="Erin plays the harp")
    notes.forget(id=gone.id)
    notes.forget(id=held.id, hold=True)
    before = event_count(dsn)
    with pytest.raises(LinkScopeError):
        notes.link(a.id, elsewhere.id)  # another thread's note is not in this scope
    with pytest.raises(NoteNotFoundError):
        notes.link("0123456789ab", b.id)
    with pytest.raises(NoteForgottenError):
        notes.link(a.id, gone.id)
    with pytest.raises(NoteForgottenError):
        notes.link(a.id, held.id)
    with pytest.raises(NoteForgottenError):
        notes.link(held.id, a.id)
    with pytest.raises(LinkError):
        notes.link(a.id, a.id)
    with pytest.raises(ValidationError):
        notes.link(a.id, b.id, weight=1.5)
    with pytest.raises(ValidationError):
        notes.link(a.id, "nope")
    with pytest.raises(LinkScopeError):  # the same rule for links given on remember
        notes.remember(kind="fact", content="Frank plays the viola", links=[{"id": elsewhere.id}])
    with pytest.raises(NoteNotFoundError):
        notes.remember(kind="fact", content="Gina plays the lute", links=[{"id": "0123456789ab"}])
    assert event_count(dsn) == before and edges(dsn) == []


# ------------------------------------------------------------- link graph
def test_another_thread_can_neither_probe_nor_see_a_thread_only_target(plain: Fabric, dsn: str) -> None:
    """A user-level fact of thread t1 is visible from t2, a thread-only note of t1 is
    not: from t2, linking or unlinking to it answers exactly as for an id that does
    not exist (nothing written), and ``get`` from t2 does not list its id."""
    t1, t2 = plain.scope("acme", "u1", "t1"), plain.scope("acme", "u1", "t2")
    pub = t1.remember(kind="fact", content="The payments outage came from an expired TLS certificate")
    pub2 = t1.remember(kind="fact", content="Alice renewed the certificate and added an alert")
    secret = t1.remember(kind="fact", content="The root password is hunter2", consent={"visibility": "thread"})
    t1.link(pub.id, secret.id, weight=0.9)
    events = fetch(dsn, "SELECT count(*) FROM memfabric_events")[0][0]
    errors = []
    for target in (secret.id, "0123456789ab"):
        for call in (t2.link, t2.unlink):
            with pytest.raises(NoteNotFoundError) as err:
                call(pub.id, target)
            errors.append(str(err.value).replace(target, "<id>"))
    assert len(set(errors[0::2])) == 1 and len(set(errors[1::2])) == 1  # same answer either way
    assert fetch(dsn, "SELECT count(*) FROM memfabric_events")[0][0] == events
    assert [lk.id for lk in t1.get(pub.id).links] == [secret.id]
    user = plain.scope("acme", "u1")
    for reader in (t2, user):  # every read of the user-level note from elsewhere hides it
        assert reader.get(pub.id).links == ()
        assert reader.lineage(pub.id).links == []
        assert secret.id not in repr(reader.history(pub.id))
    assert secret.id in repr(t1.history(pub.id)) and t1.lineage(pub.id).links[0]["id"] == secret.id
    folded = t2.remember(kind="fact", content="The payments outage came from an expired TLS certificate",
                         consolidate=True)
    assert folded.outcome == "folded" and folded.id == pub.id and folded.links == ()
    t2.link(pub.id, pub2.id)  # a target t2 sees can be linked from t2
    assert [lk.id for lk in t2.get(pub.id).links] == [pub2.id]


def test_a_successor_does_not_name_a_thread_only_predecessor_elsewhere(dsn: str) -> None:
    """A user-level fact that superseded a thread-only note of its thread is read from
    another thread or the user-level scope without the replaced note's id or value
    (get, lineage, history, recall, list); its own thread still sees the chain."""
    with open_fabric(dsn) as fab:
        t1 = fab.scope("acme", "u1", "t1")
        p = t1.remember(kind="fact", content="Zebediah lives in Porto", consent={"visibility": "thread"})
        n = t1.remember(kind="fact", content="Zebediah lives in Lisbon")
        assert n.outcome == "superseding" and n.supersedes == p.id
        assert t1.get(n.id).supersedes == p.id and t1.lineage(n.id).predecessors == [p.id]
        for reader in (fab.scope("acme", "u1", "t2"), fab.scope("acme", "u1")):
            views = [reader.get(n.id), reader.lineage(n.id), reader.history(n.id),
                     reader.recall("where does Zebediah live").hits, reader.list().items]
            assert n.id in repr(views[3]) and n.id in repr(views[4])
            for view in views:
                assert p.id not in repr(view) and "porto" not in repr(view).lower()


def test_forgetting_a_superseded_note_erases_its_value_from_the_successor(dsn: str) -> None:
    """The successor's stored decision keeps no value read from the note it replaced
    (that note's own Superseded event holds it, under its key): once it is forgotten,
    no read of the successor shows it."""
    with open_fabric(dsn) as fab:
        t1 = fab.scope("acme", "u1", "t1")
        a = t1.remember(kind="fact", content="Quentin works at Initech")
        b = t1.remember(kind="fact", content="Quentin now works at Globex")
        assert b.outcome == "superseding" and b.decision is not None and b.decision["old_value"] == "initech"
        t1.forget(id=a.id)
        for reader in (t1, fab.scope("acme", "u1", "t2")):
            for view in (reader.get(b.id), reader.lineage(b.id), reader.history(b.id)):
                assert "initech" not in repr(view).lower()


def test_workers_never_link_to_or_patch_a_note_across_a_narrower_visibility(dsn: str) -> None:
    """A worker edge goes to a note seen at least as widely as the new note, and
    evolution patches only a note seen no more widely (nothing of a thread-only note
    reaches another thread through a user-level note)."""
    conv = {"enabled": True, "top_k": 8, "by": "terms", "adjacent": 0.5}
    with open_fabric(dsn, consolidate=False, linker=conv,
                     evolution={"enabled": True, "max_patches": 8, "floor": 0.0}) as fab:
        t1 = fab.scope("acme", "u1", "t1")
        with t1.attach(Session()):
            secret = t1.remember(kind="fact", content="The zeppelin hangar code is 4471",
                                 consent={"visibility": "thread"}, keywords=["hangar"])
            public = t1.remember(kind="fact", content="The zeppelin hangar opens at dawn", keywords=["dawn"])
            private = t1.remember(kind="fact", content="My zeppelin hangar notes stay here",
                                  consent={"visibility": "thread"}, keywords=["mine"])
        assert t1.get(public.id).links == ()  # neither related (shared terms) nor follows
        assert {(lk.id, lk.relation) for lk in t1.get(private.id).links} == {
            (public.id, "related"), (public.id, "follows"), (secret.id, "related")}
        assert "mine" not in t1.get(public.id).keywords  # the private note patched nothing wider
        history = [h.type for h in t1.history(public.id)]
        assert "Evolved" not in history or all(
            h.fields.get("source") != str(note_uuid(t1.scope, private.id)) for h in t1.history(public.id))




def test_forgotten_or_held_notes_leave_the_graph(plain: Fabric, dsn: str) -> None:
    notes = plain.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Alice plays the cello")
    b = notes.remember(kind="fact", content="The orchestra rehearses on Tuesdays")
    c = notes.remember(kind="fact", content="Tickets cost twenty euros")
    notes.link(a.id, b.id)
    notes.link(c.id, a.id)
    assert {r[0] for r in edges(dsn)} == {a.id, c.id}
    notes.forget(id=c.id)  # a forgotten source's edges go at once
    assert [r[:2] for r in edges(dsn)] == [(a.id, b.id)]
    notes.forget(id=b.id, hold=True)  # a held target is never followed nor listed
    hit = notes.recall("Alice cello").hits[0]
    assert hit.id == a.id and hit.links == ()
    assert b.id not in [h.id for h in notes.recall("Alice cello").hits]
    notes.forget(id=a.id, hold=True)  # a held source's edges go at once
    assert edges(dsn) == []


def test_link_graph_replays_from_the_log(plain: Fabric, dsn: str) -> None:
    notes = plain.scope("acme", "u1", "t1")
    ids = [notes.remember(kind="fact", content=f"Fact number {i} about apples").id for i in range(5)]
    notes.link(ids[0], ids[1], weight=0.5)
    notes.link(ids[0], ids[2], relation="derived_from")
    notes.link(ids[3], ids[4])
    notes.unlink(ids[3], ids[4])
    notes.link(ids[4], ids[0])
    notes.forget(id=ids[4])
    admin = ProjectionAdmin.for_fabric(plain)
    assert "link_graph" in admin.names
    assert all(r.ok for r in admin.verify())
    live = edges(dsn)
    admin.rebuild(["link_graph"])
    assert edges(dsn) == live
    admin.rebuild(["link_graph"], blue_green=True)
    assert edges(dsn) == live and len(live) == 2
    assert all(r.ok for r in admin.verify(["link_graph"]))
    status = {s.name: s for s in admin.status()}["link_graph"]
    assert status.lag_events == 0


# ---------------------------------------------------------------- expansion
def test_recall_expands_one_hop_in_both_directions(plain: Fabric) -> None:
    notes = plain.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr")
    b = notes.remember(kind="fact", content="The vet visit is booked for March")
    c = notes.remember(kind="fact", content="Walks happen along the river each dawn")
    d = notes.remember(kind="fact", content="Unrelated: the boiler needs servicing")
    notes.link(a.id, b.id, weight=0.9)   # outgoing from the seed
    notes.link(c.id, a.id, weight=0.6)   # incoming to the seed
    res = notes.recall("greyhound Zephyr", mode="lexical", top_k=2)
    got = [h.id for h in res.hits]
    assert got[0] == a.id and set(got[1:]) == {b.id, c.id} and d.id not in got
    assert [e.id for e in res.explain] == got
    flags = {e.id: e for e in res.explain}
    assert flags[a.id].link is False and flags[b.id].link is True and flags[c.id].link is True
    assert flags[b.id].link_score == pytest.approx(Scoring().link_weight * 0.9, abs=1e-6)
    assert flags[c.id].link_score == pytest.approx(Scoring().link_weight * 0.6, abs=1e-6)
    assert res.hits[0].links[0].id == b.id
    off = notes.recall("greyhound Zephyr", mode="lexical", top_k=2, expand_links=False)
    assert [h.id for h in off.hits] == [a.id] and len(off.explain) == 1
    # link_weight scales the term
    heavy = notes.recall("greyhound Zephyr", mode="lexical", top_k=2, scoring={"link_weight": 2.0})
    e = {x.id: x for x in heavy.explain}
    assert e[b.id].link_score == pytest.approx(1.8, abs=1e-6)
    # at most top_k extra
    one = notes.recall("greyhound Zephyr", mode="lexical", top_k=1)
    assert [x.link for x in one.explain] == [False, True] and one.hits[1].id == b.id
    # budget covers the whole result; the best hit is always returned
    tight = notes.recall("greyhound Zephyr", mode="lexical", top_k=2, budget=1)
    assert [h.id for h in tight.hits] == [a.id]


def test_expansion_is_capped_at_top_k(plain: Fabric) -> None:
    notes = plain.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr")
    others = [notes.remember(kind="fact", content=f"Item {i} of the inventory list").id for i in range(5)]
    for i, o in enumerate(others):
        notes.link(a.id, o, weight=0.5 + i / 10)
    res = notes.recall("greyhound Zephyr", mode="lexical", top_k=2)
    linked = [x.id for x in res.explain if x.link]
    assert len(linked) == 2 and set(linked) == {others[4], others[3]}


def test_expansion_honours_every_filter(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False, require_consent=False) as fab:
        t1 = fab.scope("acme", "u1", "t1")
        t2 = fab.scope("acme", "u1", "t2")
        now = datetime.now(timezone.utc)
        seed = t1.remember(kind="fact", content="Alice adopted a greyhound named Zephyr",
                           consent={"visibility": "tenant"})
        private = t1.remember(kind="fact", content="Private: the spare key is under the mat",
                              consent={"visibility": "thread"})
        public = t1.remember(kind="fact", content="Shared: the park opens at nine",
                             consent={"visibility": "tenant"})
        expired = t1.remember(kind="fact", content="The old leash was red",
                              valid_from=now - timedelta(days=9), valid_to=now - timedelta(days=1),
                              consent={"visibility": "tenant"})
        refused = t1.remember(kind="fact", content="Medical note about the owner",
                              consent={"visibility": "tenant", "granted": False})
        held = t1.remember(kind="fact", content="Held note about the breeder",
                           consent={"visibility": "tenant"})
        gone = t1.remember(kind="fact", content="Forgotten note about the kennel",
                           consent={"visibility": "tenant"})
        proc = t1.remember(kind="procedure", content="Feed twice a day",
                           consent={"visibility": "tenant"})
        for target in (private, public, expired, refused, held, gone, proc):
            t1.link(seed.id, target.id)
        t1.forget(id=held.id, hold=True)
        t1.forget(id=gone.id)
        other_tenant = fab.scope("other", "u1", "t1")
        other_tenant.remember(kind="fact", content="Alice adopted a greyhound named Zephyr too")

        got = [h.id for h in t2.recall("greyhound Zephyr", mode="lexical", top_k=5).hits]
        assert got == [seed.id, public.id]  # from another thread: only what it may see
        mine = [h.id for h in t1.recall("greyhound Zephyr", mode="lexical", top_k=10).hits]
        assert set(mine) == {seed.id, private.id, public.id}  # window, consent, hold, kind
        with_proc = t1.recall("greyhound Zephyr", mode="lexical", top_k=10, kinds=["fact", "procedure"])
        assert proc.id in [h.id for h in with_proc.hits]
        past = t1.recall("greyhound Zephyr", mode="lexical", top_k=10, as_of=now - timedelta(days=2))
        assert expired.id in [h.id for h in past.hits] or seed.id not in [h.id for h in past.hits]
        seen_links = {lk.id for lk in t2.recall("greyhound Zephyr", mode="lexical").hits[0].links}
        assert private.id not in seen_links and gone.id not in seen_links and held.id not in seen_links
    with open_fabric(dsn, consolidate=False, require_consent=True) as strict:
        t1 = strict.scope("acme", "u1", "t1")
        granted = t1.remember(kind="fact", content="Zephyr greyhound insurance",
                              consent={"granted": True})
        unknown = t1.remember(kind="fact", content="Unknown consent note")
        t1.link(granted.id, unknown.id)
        got = [h.id for h in t1.recall("greyhound Zephyr insurance", mode="lexical").hits]
        assert unknown.id not in got and granted.id in got


def test_expansion_applies_recall_filters_and_the_floor_to_seeds_only(plain: Fabric) -> None:
    """Main's recall filters (tags, subject, min_importance) hold for linked notes too;
    the relevance floor applies to the seeds, a linked note enters by its link."""
    notes = plain.scope("acme", "u1", "t1")
    seed = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr",
                          tags=["pets"], importance=0.9)
    tagged = notes.remember(kind="fact", content="The vet visit is booked for March",
                            tags=["pets"], importance=0.9)
    untagged = notes.remember(kind="fact", content="Walks happen along the river each dawn",
                              importance=0.9)
    minor = notes.remember(kind="fact", content="The leash hangs by the door",
                           tags=["pets"], importance=0.1)
    for target in (tagged, untagged, minor):
        notes.link(seed.id, target.id, weight=0.8)
    res = notes.recall("greyhound Zephyr", mode="lexical", top_k=5, tags=["pets"])
    assert [h.id for h in res.hits][0] == seed.id
    assert {h.id for h in res.hits} == {seed.id, tagged.id, minor.id}
    res = notes.recall("greyhound Zephyr", mode="lexical", top_k=5, tags=["pets"], min_importance=0.5)
    assert {h.id for h in res.hits} == {seed.id, tagged.id}
    assert notes.recall("greyhound Zephyr", mode="lexical", subject="nobody").hits == []
    # the linked notes share no term with the query (relevance 0 < the floor) yet come
    # in through their link; a floor no seed passes leaves nothing to expand from
    high = notes.recall("greyhound Zephyr", mode="lexical", top_k=5, min_relevance=0.5)
    assert {h.id for h in high.hits} == {seed.id, tagged.id, untagged.id, minor.id}
    assert all(e.relevance == 0.0 and e.link for e in high.explain[1:])
    assert notes.recall("boiler", mode="lexical", top_k=5).hits == []


@pytest.mark.parametrize("mode", ["hybrid", "vector", "lexical"])
def test_a_linked_note_among_the_list_candidates_comes_in_through_its_link(plain: Fabric, mode: str) -> None:
    """In a small scope every note is a vector-list candidate, so the expansion adds none
    of them: a list candidate below the floor that is linked to a seed hit is admitted
    by its link (``explain.link``) in every mode; a link too weak to pass the floor, or
    recall without expansion, leaves it out."""
    notes = plain.scope("acme", "u1", f"t-list-{mode}")
    cause = notes.remember(kind="fact", content="The payments outage on Friday came from an expired TLS certificate")
    fix = notes.remember(kind="fact", content="Alice renewed it and added a renewal alert, due again in 90 days")
    faint = notes.remember(kind="fact", content="Bob keeps spare keyboards in the blue cupboard")
    notes.remember(kind="fact", content="The Springfield office printer is on the second floor")
    notes.link(cause.id, fix.id, relation="fixed_by", weight=0.9)
    notes.link(cause.id, faint.id, weight=0.02)
    res = notes.recall("payments outage", mode=mode, top_k=3)
    rows = {e.id: e for e in res.explain}
    assert res.hits[0].id == cause.id
    assert fix.id in rows and rows[fix.id].link_score > 0.05
    # admitted through its link exactly when its own evidence is below the floor (0.05)
    assert rows[fix.id].link == (rows[fix.id].relevance < 0.05)
    if mode != "vector":  # it shares no word with the query
        assert rows[fix.id].link
    assert faint.id not in rows
    off = notes.recall("payments outage", mode=mode, top_k=3, expand_links=False)
    assert (fix.id in {h.id for h in off.hits}) == (not rows[fix.id].link)


# ------------------------------------------------------------------ workers
def _related(notes: Any) -> tuple[Any, Any, Any]:
    a = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr in May",
                       keywords=["dog"])
    far = notes.remember(kind="fact", content="Quarterly tax forms are due in April")
    b = notes.remember(kind="fact", content="Alice walks her greyhound Zephyr every morning",
                       keywords=["pets", "walks"], context="from the pet chat")
    return a, far, b


def test_workers_are_inert_until_attached(workers: Fabric, dsn: str) -> None:
    notes = workers.scope("acme", "u1", "t1")
    _related(notes)
    assert edges(dsn) == [] and topics(dsn, "Evolved") == 0 and topics(dsn, "Linked") == 0
    att = notes.attach(Session())
    other = workers.scope("acme", "u1", "t2")
    _related(other)  # attached to t1 only: t2 stays inert
    assert edges(dsn) == []
    a, far, b = _related(workers.scope("acme", "u9", "t9"))  # another scope, unattached
    assert edges(dsn) == []
    new = notes.remember(kind="fact", content="Alice feeds her greyhound Zephyr at noon")
    rows = edges(dsn)
    assert rows and all(r[0] == new.id for r in rows)
    far_t1 = [h.id for h in notes.recall("Quarterly tax forms", mode="lexical").hits]
    assert not set(far_t1) & {r[1] for r in rows}  # below the floor: no edge
    att.detach()
    n = len(edges(dsn))
    _related(notes)
    assert len(edges(dsn)) == n


def test_passive_fabric_never_runs_workers(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False, linker={"enabled": True}, evolution={"enabled": True},
                     passive=True) as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.attach(Session())
        _related(notes)
        assert edges(dsn) == [] and topics(dsn, "Evolved") == 0


def test_worker_settings_are_capped_and_off_by_default(dsn: str) -> None:
    with pytest.raises(ValidationError):
        open_fabric(dsn, linker={"enabled": True, "top_k": 33})
    with pytest.raises(ValidationError):
        open_fabric(dsn, evolution={"enabled": True, "max_patches": 33})
    with pytest.raises(ValidationError):
        open_fabric(dsn, linker={"enabled": True, "bogus": 1})
    with open_fabric(dsn) as fab:
        assert not fab.service.linker.enabled and not fab.service.evolution.enabled
        notes = fab.scope("acme", "u1", "t1")
        notes.attach(Session())
        _related(notes)
        assert edges(dsn) == [] and topics(dsn, "Evolved") == 0
    with open_fabric(dsn, consolidate=False, linker={"enabled": True, "top_k": 1, "floor": 0.0}) as fab:
        notes = fab.scope("acme", "u2", "t1")
        notes.attach(Session())
        for i in range(4):
            notes.remember(kind="fact", content=f"Greyhound fact number {i}")
        per_source: dict[str, int] = {}
        for src, *_ in edges(dsn):
            per_source[src] = per_source.get(src, 0) + 1
        assert per_source and max(per_source.values()) == 1


def test_bad_worker_settings_create_nothing(dsn: str, tmp_path: Any) -> None:
    """A bad ``linker``/``evolution``/``consolidate``/``limits`` raises before any server,
    table or record is made: on a server, no table appears; without one, no data dir."""
    for bad in ({"linker": {"enabled": "yes"}}, {"evolution": {"max_patches": 0}},
                {"consolidate": {"threshold": 2}}, {"limits": {"bogus": 1}}):
        with pytest.raises(ValidationError):
            open_fabric(dsn, **bad)
        with pytest.raises(ValidationError):
            open_fabric(data_dir=str(tmp_path / "pg"), **bad)
    assert fetch(dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")[0][0] == 0
    assert not (tmp_path / "pg").exists()


def test_linker_weights_are_similarities_and_batches_link_locally(workers: Fabric, dsn: str) -> None:
    notes = workers.scope("acme", "u1", "t1")
    notes.attach(Session())
    out = notes.remember_many([
        {"kind": "fact", "content": "Alice adopted a greyhound named Zephyr in May"},
        {"kind": "fact", "content": "Alice walks her greyhound Zephyr every morning"},
    ])
    rows = edges(dsn)
    assert [(r[0], r[1]) for r in rows] == [(out[1].id, out[0].id)]
    assert 0.3 <= rows[0][3] <= 1.0
    assert notes.get(out[1].id).links[0].weight == pytest.approx(rows[0][3], abs=1e-5)


def test_evolution_patches_only_true_neighbours_that_gain(workers: Fabric, dsn: str) -> None:
    notes = workers.scope("acme", "u1", "t1")
    notes.attach(Session())
    a, far, b = _related(notes)
    got_a, got_far, got_b = notes.get(a.id), notes.get(far.id), notes.get(b.id)
    assert set(got_a.keywords) == {"dog", "pets", "walks"} and got_a.context == "from the pet chat"
    assert got_a.content == a.content and got_a.valid_from == a.valid_from
    assert got_a.source_entry_ids == a.source_entry_ids and got_a.consent == a.consent
    assert got_far.keywords == () and got_far.context is None  # not a neighbour
    assert set(got_b.keywords) == {"pets", "walks"}  # the new note itself is not patched
    ev = [h for h in notes.history(a.id) if h.type.endswith("Evolved")]
    assert len(ev) == 1 and ev[0].cause == f"evolution:{b.id}:v1"
    before = topics(dsn, "Evolved")
    # a neighbour that already has everything gains nothing: no patch
    notes.remember(kind="fact", content="Alice walks greyhound Zephyr each morning too",
                   keywords=["dog"], context="again")
    assert notes.get(a.id).context == "from the pet chat"
    assert topics(dsn, "Evolved") == before + 1  # only b gained "dog"
    assert "dog" in notes.get(b.id).keywords


def test_evolution_patch_is_bounded_in_bytes() -> None:
    fab = open_memory_fabric(consolidate=False)
    notes = fab.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Target note", keywords=[])
    b = notes.remember(kind="fact", content="Source note", context="é" * 2000,
                       keywords=[f"keyword-{i:03d}" for i in range(60)])
    src = fab.service.store.load(note_uuid(notes.scope, b.id))
    tgt = fab.service.store.load(note_uuid(notes.scope, a.id))
    assert src is not None and tgt is not None
    for cap in (64, 200, 512):
        patch = evolution_patch(src, tgt, cap)
        assert patch is not None
        assert len(json.dumps(patch, separators=(",", ":"), ensure_ascii=False).encode()) <= cap
    with pytest.raises(ValidationError):
        open_memory_fabric(evolution={"enabled": True, "max_bytes": 10})


def test_forgetting_erases_contributions(workers: Fabric, dsn: str) -> None:
    notes = workers.scope("acme", "u1", "t1")
    notes.attach(Session())
    target = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr in May")
    source = notes.remember(kind="fact", content="Alice walks her greyhound Zephyr every morning",
                            keywords=["xylophonic", "quixotry"], context="zzcontextmarkerzz")
    patched = notes.get(target.id)
    assert {"xylophonic", "quixotry"} <= set(patched.keywords) and patched.context == "zzcontextmarkerzz"
    dump, _ = dump_every_table(dsn)
    assert b"xylophonic" in dump  # in the source's own rows, before forgetting
    notes.forget(id=source.id)
    dump, tables = dump_every_table(dsn)
    assert "mf_link_graph" in tables
    for needle in (b"xylophonic", b"quixotry", b"zzcontextmarkerzz"):
        assert needle not in dump, needle
    after = notes.get(target.id)
    assert after.content == target.content and after.keywords == () and after.context is None
    assert [h.id for h in notes.recall("greyhound Zephyr adopted").hits][:1] == [target.id]
    assert all(r.ok for r in ProjectionAdmin.for_fabric(workers).verify())
    # a fresh fabric replays the target without the contribution
    with open_fabric(dsn) as again:
        assert again.scope("acme", "u1", "t1").get(target.id).keywords == ()


# ------------------------------------------------------------ memory backend
def test_memory_backend_keeps_in_step() -> None:
    fab = open_memory_fabric(consolidate=False, linker={"enabled": True}, evolution={"enabled": True})
    notes = fab.scope("acme", "u1", "t1")
    a = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr")
    b = notes.remember(kind="fact", content="The vet visit is booked for March")
    notes.link(a.id, b.id, weight=0.9)
    res = notes.recall("greyhound Zephyr", mode="lexical", top_k=1)
    assert [h.id for h in res.hits] == [a.id, b.id] and [e.link for e in res.explain] == [False, True]
    assert res.hits[0].links[0].id == b.id
    assert [h.id for h in notes.recall("greyhound Zephyr", mode="lexical", top_k=1,
                                       expand_links=False).hits] == [a.id]
    notes.forget(id=b.id, hold=True)
    assert [h.id for h in notes.recall("greyhound Zephyr", mode="lexical", top_k=1).hits] == [a.id]
    notes.attach(Session())
    src = notes.remember(kind="fact", content="Alice adopted a greyhound named Zephyr, vet says",
                         keywords=["xylophonic"], context="ctx")
    assert "xylophonic" in notes.get(a.id).keywords
    assert notes.get(src.id).links
    notes.forget(id=src.id)
    assert "xylophonic" not in notes.get(a.id).keywords and notes.get(a.id).context is None
