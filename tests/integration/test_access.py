"""Issue 33: principals, profiles pushed into the recall SQL, per-note grants, on both
backends (real embedded PostgreSQL and the in-memory reference)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import open_fabric
from memfabric.domain.errors import AccessDenied, NoteNotFoundError, PrincipalNotFoundError
from memfabric.domain.principal import AccessFilter, ScopePattern
from memfabric.domain.ports import NoteFilter
from memfabric.projections import recall_index

READER = {"read_kinds": ["fact", "file"], "recall_scope": ["acme/u1/*"], "visibility": ["resource", "tenant"]}


def events(fab: Any) -> int:
    if hasattr(fab.log, "event_count"):
        return int(fab.log.event_count())
    with fab.store.connection() as conn:
        return int(conn.execute("SELECT count(*) AS n FROM memfabric_events").fetchone()["n"])


def test_define_records_who_changed_what(fab: Any) -> None:
    first = fab.principals.define("bot", READER)
    assert first.version == 1 and first.updated_by == "host" and first.profile.read_kinds == ("fact", "file")
    n = events(fab)
    assert fab.principals.define("bot", READER).version == 1 and events(fab) == n  # same profile: no event
    second = fab.principals.define("bot", {**READER, "read_kinds": ["fact"]}, by="admin")
    assert (second.version, second.updated_by, second.profile.read_kinds) == (2, "admin", ("fact",))
    assert [p.agent_id for p in fab.principals.list()] == ["bot"]
    with pytest.raises(ValidationError):
        fab.principals.define("bot", {**READER, "recall_scope": ["acme/u1/t1/x"]})
    with pytest.raises(PrincipalNotFoundError):
        fab.scope("acme", "u1").as_principal("nobody")


def test_projection_rebuilds_identically(dsn: str) -> None:
    from memfabric.projections.rebuild import ProjectionAdmin
    with open_fabric(dsn) as fab:
        fab.principals.define("bot", READER)
        note = fab.scope("acme", "u2", "t1").remember(kind="fact", content="The vault code is 1234")
        fab.scope("acme", "u2", "t1").grant(note.id, "bot")
        fab.principals.define("bot", {**READER, "read_kinds": ["fact"]})
        admin = ProjectionAdmin.for_fabric(fab)
        assert all(r.ok for r in admin.verify("principals"))
        admin.rebuild("principals")
        assert all(r.ok for r in admin.verify("principals"))
        assert fab.scope("acme", "u1", "t1").as_principal("bot").get(note.id).content == "The vault code is 1234"


def test_the_profile_is_pushed_into_the_recall_statement(fab: Any) -> None:
    """A post-filter on the candidate lists would find nothing: the 120 tenant-visible
    notes of another user rank above the reader's own note and fill every list."""
    other = fab.scope("acme", "u2", "t1")
    other.remember_many([{"kind": "fact", "content": f"metric units metric units {i}",
                          "consent": {"visibility": "tenant"}} for i in range(120)], consolidate=False)
    mine = fab.scope("acme", "u1", "t1").remember(kind="fact", content="I like metric")
    fab.principals.define("bot", READER)
    plain = fab.scope("acme", "u1", "t1").recall("metric units", top_k=5)
    assert mine.id not in [h.id for h in plain.hits]
    hits = fab.scope("acme", "u1", "t1").as_principal("bot").recall("metric units", top_k=5).hits
    assert [h.id for h in hits] == [mine.id]
    listed = fab.scope("acme", "u1", "t1").as_principal("bot").list(limit=5)
    assert [n.id for n in listed.items] == [mine.id]
    assert fab.scope("acme", "u1", "t1").as_principal("bot").count() == 1


def test_the_statement_carries_the_rule() -> None:
    access = AccessFilter("bot", ("fact",), ("thread",), (ScopePattern.parse("acme/u1/*"),))
    text = recall_index.recall_statement(vector=True, lexical=True, require_consent=False,
                                         filters=NoteFilter(access=access), expand=True).decode()
    assert text.count("mf_principal_grants") == 5  # vector list (graph and tail), lexical list, IDF count, expansion
    plain = recall_index.recall_statement(vector=True, lexical=True, require_consent=False).decode()
    assert "mf_principal_grants" not in plain


def test_a_refused_call_names_the_rule_and_writes_nothing(fab: Any) -> None:
    fab.principals.define("bot", {**READER, "writes": "propose", "write_kinds": ["working", "fact"]})
    bot = fab.scope("acme", "u1", "t1").as_principal("bot")
    n = events(fab)
    for call, rule in [(lambda: bot.remember(kind="fact", content="x"), "writes"),
                       (lambda: bot.recall("x", kinds=["procedure"]), "read_kinds"),
                       (lambda: fab.scope("acme", "u2").as_principal("bot").recall("x"), "recall_scope"),
                       (lambda: bot.remember_many([{"kind": "working", "block": "a", "content": "ok"},
                                                   {"kind": "fact", "content": "no"}]), "writes"),
                       (lambda: bot.verify_content("x", "y"), "operation")]:
        with pytest.raises(AccessDenied) as e:
            call()
        assert e.value.rule == rule, (rule, e.value)
    assert events(fab) == n
    assert bot.append_block("plan", "step one").outcome == "inserted"  # propose: working blocks
    assert events(fab) == n + 1
    with pytest.raises(AccessDenied) as e:
        bot.working_value()  # it may propose working blocks, not read them back
    assert e.value.rule == "read_kinds"
    assert list(fab.scope("acme", "u1", "t1").working_value()["_fabric"]["blocks"]) == ["plan"]


def test_a_note_outside_the_profile_is_never_served_by_id(fab: Any) -> None:
    fab.principals.define("bot", READER)
    thread_only = fab.scope("acme", "u1", "t1").remember(kind="fact", content="secret", consent={"visibility": "thread"})
    bot = fab.scope("acme", "u1", "t1").as_principal("bot")
    with pytest.raises(AccessDenied) as e:
        bot.get(thread_only.id)
    assert e.value.rule == "note"
    with pytest.raises(NoteNotFoundError):
        bot.get("0123456789ab")
    with pytest.raises(AccessDenied):
        bot.history(thread_only.id)


def test_grants_are_honoured_in_recall_get_list_and_links(fab: Any) -> None:
    fab.principals.define("bot", READER)
    owner = fab.scope("acme", "u2", "t7")
    secret = owner.remember(kind="fact", content="The harbour gate code is 4471", consent={"visibility": "thread"})
    mine = fab.scope("acme", "u1", "t1")
    seed = mine.remember(kind="fact", content="The harbour visit is on Monday")
    bot = mine.as_principal("bot")

    def seen() -> dict[str, Any]:
        res = bot.recall("harbour gate code", top_k=5)
        return {"recall": {h.id for h in res.hits}, "list": {n.id for n in bot.list().items},
                "links": {link.id for h in res.hits for link in h.links}}

    assert secret.id not in seen()["recall"] | seen()["list"]
    with pytest.raises(NoteNotFoundError):
        bot.get(secret.id)
    assert owner.grant(secret.id, "bot") is True and owner.grant(secret.id, "bot") is False
    now = seen()
    assert secret.id in now["recall"] and secret.id in now["list"]
    assert bot.get(secret.id).content == "The harbour gate code is 4471"
    # link expansion and hit links: a link from the reader's note to the granted one
    with pytest.raises(AccessDenied):
        bot.link(seed.id, secret.id)  # the reader may not write
    fab.scope("acme", "u1", "t1").remember(kind="fact", content="unrelated")
    assert owner.revoke(secret.id, "bot") is True
    assert secret.id not in seen()["recall"] | seen()["list"]
    with pytest.raises(NoteNotFoundError):
        bot.get(secret.id)
    with pytest.raises(NoteNotFoundError):
        mine.grant(secret.id, "bot")  # only from the note's own scope


def test_links_to_a_granted_note_appear_only_while_granted(fab: Any) -> None:
    fab.principals.define("bot", READER)
    u1 = fab.scope("acme", "u1")
    seed = u1.remember(kind="fact", content="Quarterly budget review meeting")
    target = u1.remember(kind="fact", content="Totally different words here", consent={"visibility": "thread"})
    u1.link(seed.id, target.id)
    reader = fab.scope("acme", "u1", "t3").as_principal("bot")

    def result() -> tuple[set[str], set[str]]:
        res = reader.recall("quarterly budget review", top_k=3)
        return {h.id for h in res.hits}, {link.id for h in res.hits for link in h.links}

    assert result() == ({seed.id}, set())  # thread-only target: neither expanded nor shown
    u1.grant(target.id, "bot")
    hits, links = result()
    assert target.id in hits and target.id in links


def test_a_predecessor_outside_the_profile_is_not_named(fab: Any) -> None:
    """Every id a governed read returns is readable by the principal: a successor's
    ``supersedes`` naming a thread-only note the profile excludes is cleared."""
    fab.principals.define("bot", READER)
    t1 = fab.scope("acme", "u1", "t1")
    old = t1.remember(kind="fact", content="The office wifi password is hunter2", consent={"visibility": "thread"})
    new = t1.remember(kind="fact", content="The office wifi password is now swordfish", supersedes=old.id,
                      consent={"visibility": "resource"})
    assert t1.get(new.id).supersedes == old.id
    bot = t1.as_principal("bot")
    assert bot.get(new.id).supersedes is None
    hits = bot.recall("office wifi password").hits
    assert [h.id for h in hits] == [new.id] and hits[0].supersedes is None
    assert [n.supersedes for n in bot.list().items] == [None]
    fab.scope("acme", "u1", "t1").grant(old.id, "bot")
    assert bot.get(new.id).supersedes == old.id


def test_a_fact_only_principal_gets_its_context_without_naming_kinds(fab: Any) -> None:
    """Fresh-user finding: ``context_provider()`` asked for the working value and files a
    fact-only profile may not read, and was denied; like ``recall`` it now asks for
    what the profile may read."""
    fab.principals.define("facts", {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]})
    notes = fab.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="the units are metric")
    notes.remember(kind="working", block="plan", content="a private plan")
    context = notes.as_principal("facts").context_provider()("units")
    assert "the units are metric" in str(context) and "a private plan" not in str(context)
    with pytest.raises(AccessDenied):
        notes.as_principal("facts").context_provider(include_working=True)("units")


def test_host_operations_are_refused_by_name_on_a_principal_handle(fab: Any) -> None:
    """Fresh-user finding: ``counts()`` and ``entities`` on a principal handle were a
    builtin ``AttributeError``; they are refused like ``grant``, with rule ``operation``."""
    fab.principals.define("facts", {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]})
    bot = fab.scope("acme", "u1", "t1").as_principal("facts")
    for operation in (lambda: bot.counts(), lambda: bot.entities):
        with pytest.raises(AccessDenied) as denied:
            operation()
        assert denied.value.rule == "operation"
