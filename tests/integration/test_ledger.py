"""Issue 14: the conversation ledger on a real PostgreSQL (fresh database per test)."""

from __future__ import annotations

import math

import threading
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric
from memfabric.domain.errors import NotSupportedError
from memfabric.domain.ledger import (
    Conversation, LedgerAbortedError, LedgerError, NoLedgerError, conversation_uuid,
)
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp
from tests.conftest import fetch
from tests.integration.test_privacy import dump_every_table

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)


def fill(ledger, n: int = 6):  # type: ignore[no-untyped-def]
    texts = [f"message {i} about the {'harbour' if i % 2 else 'garden'} plan" for i in range(n)]
    return [ledger.append("user" if i % 2 == 0 else "assistant", t, timestamp=T0 + timedelta(minutes=i))
            for i, t in enumerate(texts)]


def test_append_entries_pages_and_cursors(fabric: Fabric) -> None:
    ledger = fabric.scope("acme", "u1", "t1").conversation()
    entries = fill(ledger, 7)
    assert [e.position for e in entries] == list(range(1, 8))
    assert all(len(e.id) == 12 for e in entries)
    first = ledger.entries(limit=3)
    assert [e.id for e in first.entries] == [e.id for e in entries[:3]]
    rest = ledger.entries(first.next_cursor, limit=10)
    assert [e.id for e in rest.entries] == [e.id for e in entries[3:]] and rest.next_cursor is None
    back = ledger.entries(limit=2, direction="backward")
    assert [e.id for e in back.entries] == [entries[6].id, entries[5].id]
    page = ledger.page(entries[4].id, limit=3)
    assert [e.id for e in page.entries] == [e.id for e in entries[2:5]]
    assert page.before_cursor == "3" and page.after_cursor == "5"
    assert "message 4 about the garden plan" in page.text and page.text.count("\n") == 2
    fwd = ledger.page(entries[4].id, limit=5, direction="forward", detail="full")
    assert [e.id for e in fwd.entries] == [e.id for e in entries[4:]] and fwd.after_cursor is None
    long = ledger.append("user", "x" * 500)
    assert len(ledger.page(long.id, limit=1).text) < 260
    assert "x" * 500 in ledger.page(long.id, limit=1, detail="full").text


def test_inputs_validated_nothing_written(fabric: Fabric) -> None:
    ledger = fabric.scope("acme", "u1", "t1").conversation()
    e = ledger.append("user", "hello")
    before = fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0]
    for call in (lambda: ledger.append("", "x"), lambda: ledger.append("user", ""),
                 lambda: ledger.append("user", "x", timestamp=datetime(2024, 1, 1)),  # naive
                 lambda: ledger.entries(limit=0), lambda: ledger.entries(direction="up"),  # type: ignore[arg-type]
                 lambda: ledger.page("nothex"), lambda: ledger.observe("o", source_entry_ids=[]),
                 lambda: ledger.bind("zz", "yy"), lambda: ledger.open_work_scope(""),
                 lambda: fabric.scope("acme", "u1", "t1").search_conversation("x", limit=101),
                 lambda: fabric.scope("acme", "u1", "t1").search_conversation("x", top_k=101)):
        with pytest.raises(ValidationError):
            call()
    with pytest.raises(LedgerError):
        ledger.observe("o", source_entry_ids=["0123456789ab"])
    with pytest.raises(LedgerError):
        ledger.page("0123456789ab")
    assert fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0] == before
    assert ledger.entries().entries[0].id == e.id


def test_no_thread_fails_closed(fabric: Fabric) -> None:
    ledger = fabric.scope("acme", "u1").conversation()
    for call in (lambda: ledger.append("user", "x"), lambda: ledger.entries(),
                 lambda: ledger.page("0123456789ab"), lambda: ledger.observe("o", source_entry_ids=["0123456789ab"]),
                 lambda: ledger.reflect("r"), lambda: ledger.open_work_scope("w"),
                 lambda: ledger.close_work_scope("0123456789ab"), lambda: ledger.bind("0123456789ab", "0123456789ab"),
                 lambda: ledger.search("x"), lambda: ledger.erase(),
                 lambda: fabric.scope("acme").search_conversation("x")):
        with pytest.raises(NoLedgerError):
            call()
    assert issubclass(NoLedgerError, Exception)


def test_observe_reflect_work_scopes(fabric: Fabric) -> None:
    ledger = fabric.scope("acme", "u1", "t1").conversation()
    es = fill(ledger, 4)
    oid = ledger.observe("User is planning the harbour trip", source_entry_ids=[es[1].id])
    rid = ledger.reflect("Plans come in pairs", source_ids=[oid, es[0].id])
    sid = ledger.open_work_scope("trip planning")
    with pytest.raises(LedgerError):
        ledger.bind("0123456789ab", sid)
    ledger.bind(rid, sid)
    state = ledger.state()
    assert isinstance(state, Conversation)
    assert state.bindings == {rid: sid} and not state.work_scopes[sid].closed
    ledger.close_work_scope(sid)
    with pytest.raises(LedgerError):
        ledger.close_work_scope(sid)
    with pytest.raises(LedgerError):
        ledger.bind(rid, sid)
    state = ledger.state()
    assert state is not None and state.promotable(rid)[1] == sid
    assert state.observations[oid].source_ids == [es[1].id]
    topics = [r[0] for r in fetch(fabric.dsn, "SELECT topic FROM memfabric_events WHERE originator_id = %s"
                                  " ORDER BY originator_version", (conversation_uuid(ledger.scope),))]
    assert topics[0] == "memfabric.domain.ledger:Conversation.Started"
    assert "memfabric.domain.ledger:Conversation.ReflectionBound" in topics


def test_text_is_sealed_in_the_log(fabric: Fabric) -> None:
    ledger = fabric.scope("acme", "u1", "t1").conversation()
    ledger.append("user", "my secret is pelican-42")
    raw = b"".join(bytes(r[0]) for r in fetch(fabric.dsn, "SELECT state FROM memfabric_events"))
    assert b"pelican-42" not in raw


def test_search_conversation(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    a = ledger.append("user", "We should book the ferry to Zanzibar on Friday")
    ledger.append("assistant", "Sure, anything else?")
    b = ledger.append("user", "Also the ferry back")
    res = notes.search_conversation("ferry Zanzibar", top_k=5, limit=2)
    assert [h.entry_id for h in res.hits] == [a.id, b.id]
    # IDF-weighted coverage (N = 3): "ferry" is in 2 entries, "zanzibar" in 1
    ferry, zanzibar = math.log(1 + 1.5 / 2.5), math.log(1 + 2.5 / 1.5)
    assert res.hits[0].score == 1.0
    assert res.hits[1].score == pytest.approx(ferry / (ferry + zanzibar), abs=1e-6)
    assert res.terms == ("ferri", "zanzibar")
    assert res.scanned == 2 and res.hits[0].page.entries[-1].id == a.id
    assert notes.search_conversation("nothing matches").hits == ()
    ev = threading.Event()
    ev.set()
    with pytest.raises(LedgerAbortedError):
        notes.search_conversation("ferry", signal=ev)
    ledger.retract(b.id)
    assert [h.entry_id for h in notes.search_conversation("ferry").hits] == [a.id]
    other = fabric.scope("acme", "u1", "t2")
    assert other.search_conversation("ferry").hits == ()


def test_search_conversation_stems_and_ignores_stop_words(fabric: Fabric) -> None:
    """Issue 29: "flights" missed "flight", "leave" missed "leaves", and the stop words of
    "when does my flight leave" made the right turn score 0.4."""
    notes = fabric.scope("acme", "u1", "stems")
    ledger = notes.conversation()
    right = ledger.append("user", "Our flights to Lisbon: the first one leaves at 9")
    ledger.append("assistant", "When does my train arrive? I will check and see")
    res = notes.search_conversation("when does my flight leave", top_k=2)
    assert [h.entry_id for h in res.hits] == [right.id] and res.hits[0].score == 1.0
    assert res.terms == ("flight", "leav") and res.scanned == 1


def test_erase_scope_shreds_conversation_raw_dump(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    e = ledger.append("user", "Kestrel-Alpha-991 is my locker code")
    ledger.observe("Observation Wombat-Quartz-17", source_entry_ids=[e.id])
    ledger.reflect("Reflection Narwhal-Ember-55", source_ids=[e.id])
    keep = fabric.scope("acme", "u1", "t9").conversation()
    keep.append("user", "Unrelated Heron-Violet-3")
    dump, _ = dump_every_table(fabric.dsn)
    assert b"Kestrel-Alpha-991" in dump  # the projection holds it while live
    assert fabric.erase_scope("acme", "u1", "t1", requested_by="dpo").conversations == 1
    dump, tables = dump_every_table(fabric.dsn)
    assert "mf_ledger_entries" in tables
    for needle in (b"Kestrel-Alpha-991", b"kestrel", b"Wombat-Quartz-17", b"wombat",
                   b"Narwhal-Ember-55", b"narwhal"):
        assert needle not in dump, needle
    assert b"Heron-Violet-3" in dump
    assert ledger.entries().entries == ()
    topics = [r[0] for r in fetch(fabric.dsn, "SELECT topic FROM memfabric_events WHERE originator_id = %s",
                                  (conversation_uuid(ledger.scope),))]
    assert topics[-1] == "memfabric.domain.ledger:Conversation.Erased"
    assert fetch(fabric.dsn, "SELECT count(*) FROM mf_note_keys WHERE originator_id = %s",
                 (conversation_uuid(ledger.scope),))[0][0] == 0
    # The thread can be written again, with a new key; positions keep increasing.
    again = ledger.append("user", "fresh start")
    assert again.position == 2 and [x.id for x in ledger.entries().entries] == [again.id]


def test_projection_replays_identically(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    es = fill(ledger, 5)
    ledger.observe("harbour plan observed", source_entry_ids=[es[1].id])
    ledger.retract(es[0].id)
    notes.remember(kind="fact", content="User prefers metric units")
    gone = fabric.scope("acme", "u1", "t2").conversation()
    fill(gone, 3)
    gone.erase(requested_by="test")
    admin = ProjectionAdmin.for_fabric(fabric)
    reports = admin.verify()
    assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]
    assert {"mf_ledger_entries", "mf_ledger_observations", "mf_ledger_threads"} <= {r.table for r in reports}
    from memfabric.adapters.audit import verify_chain
    assert verify_chain(fabric).ok  # the audit chain covers conversation events too
    admin.rebuild("ledger")
    assert all(r.ok for r in admin.verify("ledger"))
    assert [e.id for e in ledger.entries().entries] == [e.id for e in es[1:]]


def test_memory_backend_has_the_same_ledger() -> None:
    from memfabric.adapters.memory import open_memory_fabric
    with open_memory_fabric() as fab:
        notes = fab.scope("acme", "u1", "t1")
        ledger = notes.conversation()
        es = fill(ledger, 5)
        assert [e.id for e in ledger.entries(limit=2).entries] == [es[0].id, es[1].id]
        page = ledger.page(es[3].id, limit=2)
        assert [e.id for e in page.entries] == [es[2].id, es[3].id] and page.after_cursor == "4"
        res = notes.search_conversation("harbour plan", top_k=2)
        assert [h.entry_id for h in res.hits] == [es[3].id, es[1].id] and res.hits[0].score == 1.0
        oid = ledger.observe("harbour observation", source_entry_ids=[es[1].id])
        assert notes.remember(kind="episode", id=oid).content == "harbour observation"
        assert [h.id for h in notes.recall("harbour", kinds=["episode"]).hits] == [oid]
        rid = ledger.reflect("Plan the harbour first")
        sid = ledger.open_work_scope("w")
        ledger.bind(rid, sid)
        ledger.close_work_scope(sid)
        n = notes.remember(kind="procedure", reflection_id=rid)
        assert notes.lineage(n.id).promoted_from == {"reflection_id": rid, "scope_id": sid}
        assert fab.erase_scope("acme", "u1", "t1").conversations == 1
        assert ledger.entries().entries == ()
        with pytest.raises(NoLedgerError):
            fab.scope("acme", "u1").conversation().append("user", "x")


def test_remember_episode_reads_the_observation(fabric: Fabric) -> None:
    from memfabric.domain.errors import NoteNotFoundError
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    e = ledger.append("user", "I moved to Porto last spring")
    oid = ledger.observe("User moved to Porto in spring 2024", source_entry_ids=[e.id])
    before = fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0]
    ep = notes.remember(kind="episode", id=oid)
    assert (ep.id, ep.kind, ep.content, ep.source_entry_ids) == (
        oid, "episode", "User moved to Porto in spring 2024", (e.id,))
    assert fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0] == before
    with pytest.raises(NoteNotFoundError):
        notes.remember(kind="episode", id="0123456789ab")
    with pytest.raises(NotSupportedError):
        notes.remember(kind="episode", id=oid, content="x")
    with pytest.raises(ValidationError):
        notes.remember(kind="episode", id="nope")
    with pytest.raises(NoLedgerError):
        fabric.scope("acme", "u1").remember(kind="episode", id=oid)
    with pytest.raises(NoteNotFoundError):  # another thread's ledger never answers
        fabric.scope("acme", "u1", "t2").remember(kind="episode", id=oid)


def test_recall_episodes_only_when_asked(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    e = ledger.append("user", "I moved to Porto last spring and love the tiles")
    o1 = ledger.observe("User moved to Porto in spring", source_entry_ids=[e.id])
    o2 = ledger.observe("User likes azulejo tiles in Porto " + "very much " * 40, source_entry_ids=[e.id])
    fact = notes.remember(kind="fact", content="User lives in Porto")
    assert [h.id for h in notes.recall("Porto spring").hits] == [fact.id]  # untyped: no episodes
    res = notes.recall("Porto spring", kinds=["episode"], mode="lexical")
    assert [h.id for h in res.hits][0] == o1 and {h.kind for h in res.hits} == {"episode"}
    assert [x.id for x in res.explain] == [h.id for h in res.hits]
    both = notes.recall("Porto spring", kinds=["fact", "episode"])
    assert {h.id for h in both.hits} == {fact.id, o1, o2}
    tight = notes.recall("Porto tiles", kinds=["episode"], budget=20)
    assert len(tight.hits) == 1  # the best hit always, then the budget stops ranking
    assert notes.recall("Porto", kinds=["episode"], as_of=T0).hits == []
    assert fabric.scope("acme", "u1", "t2").recall("Porto", kinds=["episode"]).hits == []
    assert fabric.scope("acme", "u1").recall("Porto", kinds=["episode"]).hits == []


def test_promotion_from_a_closed_work_scope(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ledger = notes.conversation()
    e = ledger.append("user", "deploys failed twice because of stale caches")
    rid = ledger.reflect("Clear the build cache before every deploy", source_ids=[e.id])
    with pytest.raises(LedgerError):  # not bound
        notes.remember(kind="procedure", reflection_id=rid)
    sid = ledger.open_work_scope("deploy hygiene")
    ledger.bind(rid, sid)
    before = fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0]
    with pytest.raises(LedgerError):  # scope still open
        notes.remember(kind="procedure", reflection_id=rid)
    with pytest.raises(ValidationError):
        notes.remember(kind="procedure", reflection_id=rid, content="something else")
    with pytest.raises(NotSupportedError):
        notes.remember(kind="file", reflection_id=rid, path="a.txt")
    with pytest.raises(NoLedgerError):
        fabric.scope("acme", "u1").remember(kind="procedure", reflection_id=rid)
    assert fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0] == before
    ledger.close_work_scope(sid)
    n = notes.remember(kind="procedure", reflection_id=rid, tags=["ops"])
    assert (n.kind, n.content, n.tags) == ("procedure", "Clear the build cache before every deploy", ("ops",))
    assert notes.lineage(n.id).promoted_from == {"reflection_id": rid, "scope_id": sid}
    assert notes.get(n.id).content == n.content
    # issue 27: the note callers get back says where it came from
    assert n.promoted_from == notes.get(n.id).promoted_from == {"reflection_id": rid, "scope_id": sid}
    assert [h.id for h in notes.recall("build cache deploy", kinds=["procedure"]).hits] == [n.id]
    plain = notes.remember(kind="fact", content="User prefers metric units")
    assert notes.lineage(plain.id).promoted_from is None
    assert plain.promoted_from is None and notes.get(plain.id).promoted_from is None


def test_appends_use_the_write_head_and_replay_identically(fabric: Fabric) -> None:
    from memfabric.adapters.postgres.ledger import select_head
    ledger = fabric.scope("acme", "u1", "t1").conversation()
    es = ledger.extend([{"role": "user", "text": f"line {i}"} for i in range(30)])
    ledger.retract(es[3].id)
    child = ledger.append("assistant", "reply", parent_id=es[2].id, branch="b1")
    with pytest.raises(LedgerError):
        ledger.append("assistant", "reply", parent_id=es[3].id)  # retracted parent
    ledger.erase()
    again = ledger.extend([{"role": "user", "text": "after"}, {"role": "user", "text": "more"}])
    with fabric.log.datastore.get_connection() as conn:
        head = select_head(conn, ledger.aggregate_id, ledger.scope)
    state = ledger.state()
    assert head is not None and state is not None
    assert (head.version, head.last_position, head.first_position, head.erasures) == (
        state.version, state.last_position, state.first_position, state.erasures) == (
        state.version, 33, 32, 1)
    assert [e.position for e in again] == [32, 33] and child.position == 31
    assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify("ledger"))


def test_erase_scope_prefix_counts_only_live_conversations(fabric: Fabric) -> None:
    for thread in ("t1", "t2"):
        fabric.scope("acme", "u1", thread).conversation().append("user", "hi " + thread)
    fabric.scope("acme", "u2", "t1").conversation().reflect("a reflection without entries")
    fabric.scope("other", "u1", "t1").conversation().append("user", "other tenant")
    assert fabric.erase_scope("acme", "u1").conversations == 2
    assert fabric.erase_scope("acme", "u1").conversations == 0  # nothing left to erase
    assert fabric.erase_scope("acme").conversations == 1
    assert fabric.scope("other", "u1", "t1").conversation().entries().entries[0].text == "other tenant"
    assert fabric.erase_scope("acme", hold=True).conversations == 0


def test_a_session_carrying_the_ledger_attaches(fabric: Fabric) -> None:
    """``conversation().session(id)`` exposes ``id`` and ``entries()``: the attach gate
    accepts it, and ``entries()`` is the conversation so far, oldest first."""
    notes = fabric.scope("acme", "u1", "t1")
    chat = notes.conversation()
    chat.append("user", "hello there")
    chat.append("assistant", "hi, how can I help")
    session = chat.session("agent-7")
    assert [e.text for e in session.entries()] == ["hello there", "hi, how can I help"]
    with notes.attach(session) as att:
        assert att.session.id == "agent-7"


def test_entries_table_of_an_older_release_is_migrated_on_open(fabric: Fabric) -> None:
    """Issue 29: an entries table with the ``simple`` tsvector and no ``terms`` gets its
    terms filled from the text when a fabric opens on it, and search finds stems."""
    import psycopg

    from memfabric.adapters import open_fabric

    notes = fabric.scope("acme", "u1", "old-release")
    entry = notes.conversation().append("user", "The flights leave from gate 12")
    with psycopg.connect(fabric.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE mf_ledger_entries DROP COLUMN terms")
        conn.execute("ALTER TABLE mf_ledger_entries ADD COLUMN tsv tsvector"
                     " GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(fabric.dsn) as again:
        res = again.scope("acme", "u1", "old-release").search_conversation("flight leaving")
        assert [h.entry_id for h in res.hits] == [entry.id] and res.hits[0].score == 1.0
    columns = {r[0] for r in fetch(fabric.dsn, "SELECT column_name FROM information_schema.columns"
                                               " WHERE table_name = 'mf_ledger_entries'")}
    assert "terms" in columns and "tsv" not in columns


def test_ledger_timestamps_are_one_tz_object(fabric: Fabric) -> None:
    """Issue 26 defect 7: ``append`` returned ``timezone.utc``, search and pages the
    driver's ``ZoneInfo('Etc/UTC')``."""
    notes = fabric.scope("acme", "u1", "tz-thread")
    chat = notes.conversation()
    made = chat.append("user", "the wombat ate my homework")
    res = notes.search_conversation("wombat homework")
    page = chat.entries()
    stamps = [made.timestamp, *(h.timestamp for h in res.hits), *(e.timestamp for e in page.entries),
              *(e.timestamp for h in res.hits for e in h.page.entries)]
    assert len(stamps) >= 4 and {s.tzinfo for s in stamps} == {timezone.utc}


def test_note_timestamps_are_one_tz_object(fabric: Fabric) -> None:
    """Issue 26 defect 7, notes: ``remember`` answered in ``timezone.utc``, recall and
    listing in the driver's zone."""
    notes = fabric.scope("acme", "u1")
    made = notes.remember(kind="fact", content="the wombat prefers carrots", valid_from=T0)
    hit = notes.recall("wombat carrots").hits[0]
    listed = notes.list().items[0]
    stamps = [made.ingested_at, hit.ingested_at, hit.valid_from, listed.ingested_at, listed.valid_from]
    assert {s.tzinfo for s in stamps if s is not None} == {timezone.utc} and hit.valid_from == T0
