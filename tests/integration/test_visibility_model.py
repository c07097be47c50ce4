"""Issue 16: visibility that follows the user across threads, against PostgreSQL.

The table "who sees what from which scope" (docs/api.md, moved from the README) is checked row by row
(:data:`TABLE`: recall AND get from every column's scope), then the consolidation
groups across threads (fold, supersede, thread-only, tenant-wide, batch), the group
locks under real concurrency (spawned writers in different threads), actions by id
from any scope that sees the note, and the agent tools and CLI from the user-level
scope.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.cli import app as cli
from memfabric.domain.errors import FabricError, NoteExistsError, NoteNotFoundError
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch, race_processes

T, R = "acme", "alice"
HOME = (T, R, "thread-1")
READERS: dict[str, tuple[str, str | None, str | None]] = {
    "(T,R,th1)": (T, R, "thread-1"),
    "(T,R,th2)": (T, R, "thread-2"),
    "(T,R)": (T, R, None),
    "(T,R2,*)": (T, "bob", "thread-1"),
    "(T,R2)": (T, "bob", None),
    "(T)": (T, None, None),
    "(T2,...)": ("globex", R, "thread-1"),
}
"""The table's columns: where a note written from ``HOME`` is read from."""

TABLE: dict[str | None, dict[str, bool]] = {
    "thread": {"(T,R,th1)": True, "(T,R,th2)": False, "(T,R)": False, "(T,R2,*)": False,
               "(T,R2)": False, "(T)": False, "(T2,...)": False},
    "resource": {"(T,R,th1)": True, "(T,R,th2)": True, "(T,R)": True, "(T,R2,*)": False,
                 "(T,R2)": False, "(T)": False, "(T2,...)": False},
    "tenant": {"(T,R,th1)": True, "(T,R,th2)": True, "(T,R)": True, "(T,R2,*)": True,
               "(T,R2)": True, "(T)": True, "(T2,...)": False},
}
"""The docs/api.md table: written with visibility (row) from ``HOME``, seen from (column)."""
TABLE[None] = TABLE["resource"]  # a fact written without consent: the default


@pytest.mark.parametrize("vis", ["thread", "resource", "tenant", None])
def test_visibility_table_row(fabric: Fabric, vis: str | None) -> None:
    """One row of the docs/api.md table: recall and get from every column's scope."""
    consent = {"visibility": vis} if vis else None
    n = fabric.scope(*HOME).remember(kind="fact", content="Alice prefers aisle seats on flights",
                                     consent=consent)
    assert n.consent is not None and n.consent.visibility == (vis or "resource")
    for column, expected in TABLE[vis].items():
        reader = fabric.scope(*READERS[column])
        hits = {h.id for h in reader.recall("aisle seats flights").hits}
        assert (n.id in hits) is expected, (vis, column, "recall")
        assert ({x.id for x in reader.list().items} == {n.id}) is expected, (vis, column, "list")
        if expected:
            assert reader.get(n.id).content == n.content, (vis, column)
            assert reader.history(n.id)[0].type == "Remembered"
        else:
            with pytest.raises(NoteNotFoundError):
                reader.get(n.id)
            with pytest.raises(NoteNotFoundError):
                reader.history(n.id)


def test_defaults_per_kind(fabric: Fabric) -> None:
    notes = fabric.scope(*HOME)
    fact = notes.remember(kind="fact", content="Alice is vegetarian")
    proc = notes.remember(kind="procedure", content="To book travel for Alice, ask for the aisle first")
    file = notes.remember(kind="file", path="notes/trip.md", content="Trip plan draft")
    notes.remember(kind="working", block="persona", content="Be brief")
    assert [x.consent.visibility for x in (fact, proc, file) if x.consent] == ["resource", "resource", "thread"]
    rows = dict(fetch(fabric.dsn, "SELECT note_id, consent->>'visibility' FROM mf_recall_index"))
    assert rows == {fact.id: "resource", proc.id: "resource", file.id: "thread"}
    other = fabric.scope(T, R, "thread-2")
    assert {h.id for h in other.recall("Alice travel aisle vegetarian trip", kinds=("fact", "procedure", "file")).hits} \
        == {fact.id, proc.id}
    assert "Be brief" not in json.dumps(other.working_value(), default=str)  # blocks stay per scope
    assert "Be brief" in json.dumps(notes.working_value(), default=str)


# ------------------------------------------------------------- consolidation
def test_a_fact_written_from_two_threads_is_one_live_note(fabric: Fabric) -> None:
    th1, th2 = fabric.scope(*HOME), fabric.scope(T, R, "thread-2")
    first = th1.remember(kind="fact", content="Alice lives in Berlin")
    again = th2.remember(kind="fact", content="alice lives in berlin!", tags=["from-th2"])
    assert (again.outcome, again.id) == ("folded", first.id)
    assert again.scope == fabric.scope(*HOME).scope  # the note's home stays thread-1
    assert [e.type for e in th1.history(first.id)] == ["Remembered", "Folded"]
    moved = th2.remember(kind="fact", content="Alice moved to Munich")
    assert moved.outcome == "superseding" and moved.scope.thread_id == "thread-2"
    old = th1.get(first.id)
    assert old.superseded_by == moved.id and old.valid_to is not None
    assert [e.type for e in th1.history(first.id)][-1] == "Superseded"
    user = fabric.scope(T, R)
    assert [h.id for h in user.recall("where does Alice live").hits] == [moved.id]
    lin = user.lineage(moved.id)
    assert lin.predecessors == [first.id] and [r["id"] for r in lin.chain] == [first.id, moved.id]
    assert th1.lineage(first.id).successors == [moved.id]
    assert user.count() == 1  # current, not superseded


def test_thread_only_notes_never_meet_other_threads(fabric: Fabric) -> None:
    th1, th2, th3 = (fabric.scope(T, R, f"thread-{i}") for i in (1, 2, 3))
    thread_only = {"visibility": "thread"}
    a = th1.remember(kind="fact", content="Alice lives in Berlin", consent=thread_only)
    b = th2.remember(kind="fact", content="Alice lives in Berlin", consent=thread_only)
    c = th2.remember(kind="fact", content="Alice moved to Munich", consent=thread_only)
    assert b.outcome == "inserted" and b.id != a.id and c.outcome == "superseding"
    assert th1.get(a.id).superseded_by is None  # thread-1's note is untouched
    # a resource-visible write never meets a thread-only note of another thread
    f = th3.remember(kind="fact", content="Alice lives in Berlin")
    assert f.outcome == "inserted" and f.consent is not None and f.consent.visibility == "resource"
    assert th1.get(a.id).superseded_by is None and th1.get(a.id).fold_count == 0
    # a thread-only write never meets (so never narrows) a resource-visible note
    d = th2.remember(kind="fact", content="Alice likes jazz")
    e = th2.remember(kind="fact", content="Alice likes jazz", consent=thread_only)
    assert e.outcome == "inserted" and e.id != d.id
    assert th3.get(d.id).fold_count == 0 and th3.get(d.id).consent.visibility == "resource"  # type: ignore[union-attr]


def test_an_old_thread_note_absorbs_a_repeat_in_its_thread(fabric: Fabric) -> None:
    """A note written thread-only (as every note of an older release was) keeps its
    visibility: repeating the fact in its thread folds into it (one live note) and a
    fold takes the narrower visibility; a changed value supersedes it with a new
    resource-visible note."""
    th1 = fabric.scope(*HOME)
    old = th1.remember(kind="fact", content="Alice works at Initech", consent={"visibility": "thread"})
    again = th1.remember(kind="fact", content="Alice works at Initech")
    assert (again.outcome, again.id) == ("folded", old.id)
    assert again.consent is not None and again.consent.visibility == "thread"
    assert fabric.scope(T, R, "thread-2").recall("where does Alice work").hits == []
    new = th1.remember(kind="fact", content="Alice now works at Globex")
    assert new.outcome == "superseding" and new.consent is not None and new.consent.visibility == "resource"
    assert [h.id for h in fabric.scope(T, R, "thread-2").recall("where does Alice work").hits] == [new.id]


def test_tenant_visible_notes_consolidate_across_the_tenant(fabric: Fabric) -> None:
    wide = {"visibility": "tenant"}
    a = fabric.scope(T, "alice", "t1").remember(kind="fact", content="The office closes at 6pm", consent=wide)
    b = fabric.scope(T, "bob", "t9").remember(kind="fact", content="the office closes at 6pm", consent=wide)
    assert (b.outcome, b.id) == ("folded", a.id)
    c = fabric.scope("globex", "bob", "t9").remember(kind="fact", content="The office closes at 6pm", consent=wide)
    assert c.outcome == "inserted"  # never across tenants
    # a resource-visible write of bob does not meet alice's tenant-visible note
    d = fabric.scope(T, "bob", "t9").remember(kind="fact", content="The office closes at 6pm")
    assert d.outcome == "inserted"


def test_batch_across_threads_equals_one_by_one(dsn: str) -> None:
    items = [{"kind": "fact", "content": "Alice lives in Berlin"},
             {"kind": "fact", "content": "Alice likes green tea"},
             {"kind": "fact", "content": "Alice moved to Munich"},
             {"kind": "fact", "content": "alice likes green tea", "consent": {"visibility": "thread"}},
             {"kind": "fact", "content": "Alice likes green tea"}]
    seed = [{"kind": "fact", "content": "Alice likes green tea"},
            {"kind": "fact", "content": "Alice lives in Berlin", "consent": {"visibility": "thread"}}]

    def run(tenant: str, batch: bool) -> list[tuple[str, str | None, str]]:
        with open_fabric(dsn) as fabric:
            fabric.scope(tenant, R, "thread-1").remember_many(seed)
            th2 = fabric.scope(tenant, R, "thread-2")
            out = th2.remember_many(items) if batch else [th2.remember(**it) for it in items]  # type: ignore[arg-type]
            return [(n.outcome, n.scope.thread_id, n.consent.visibility)  # type: ignore[union-attr]
                    for n in out]

    one_by_one = run("acme-1", batch=False)
    assert one_by_one == run("acme-b", batch=True)
    assert one_by_one == [("inserted", "thread-2", "resource"), ("folded", "thread-1", "resource"),
                          ("superseding", "thread-2", "resource"), ("inserted", "thread-2", "thread"),
                          ("folded", "thread-1", "resource")]


# ---------------------------------------------------------------- concurrency
def _write_same_fact(dsn: str, barrier: Any, out: Any) -> None:
    import os

    with open_fabric(dsn) as fabric:
        notes = fabric.scope(T, R, f"thread-{os.getpid()}")
        barrier.wait()
        n = notes.remember(kind="fact", content="Alice's passport expires in March 2031")
        out.put((n.outcome, n.id))


def test_concurrent_writers_in_different_threads_make_one_note(dsn: str) -> None:
    with open_fabric(dsn):
        pass  # create the tables once, before the race
    results = race_processes(_write_same_fact, dsn, n=4)
    assert sorted(o for o, _ in results) == ["folded", "folded", "folded", "inserted"]
    assert len({i for _, i in results}) == 1
    with open_fabric(dsn) as fabric:
        assert fabric.scope(T, R).count() == 1
        assert fabric.scope(T, R).get(results[0][1]).fold_count == 3
    rows = fetch(dsn, "SELECT count(*) FROM mf_consolidation")
    assert rows == [(1,)]


# ------------------------------------------------------------------ by id
def test_actions_by_id_resolve_any_visible_note(fabric: Fabric) -> None:
    th1 = fabric.scope(*HOME)
    shared = th1.remember(kind="fact", content="Alice's seat preference is aisle")
    other = th1.remember(kind="fact", content="Alice's meal preference is vegetarian")
    private = th1.remember(kind="fact", content="Alice's door code is 4711", consent={"visibility": "thread"})
    th2, user = fabric.scope(T, R, "thread-2"), fabric.scope(T, R)
    # link / unlink from another thread (both ends live in thread-1)
    linked = th2.link(shared.id, other.id)
    assert linked.scope.thread_id == "thread-1" and [lk.id for lk in linked.links] == [other.id]
    assert not th2.unlink(shared.id, other.id).links
    # hold and release from the user-level scope
    assert user.forget(id=shared.id, hold=True).held is True
    assert shared.id not in {h.id for h in th2.recall("seat preference aisle").hits}
    assert user.release_hold(shared.id).held is False
    assert th2.recall("seat preference aisle").hits[0].id == shared.id
    # forget from the user-level scope, then it is gone for every thread
    assert user.forget(id=shared.id).deleted == 1
    assert th1.get(shared.id).forgotten
    assert th1.verify_content(shared.id, "Alice's seat preference is aisle") is True
    with pytest.raises(NoteNotFoundError):
        th2.get(shared.id)
    # a thread-only note: not found from anywhere else, and never changed from there
    for where in (th2, user, fabric.scope(T, "bob", "thread-1"), fabric.scope("globex", R, "thread-1")):
        with pytest.raises(NoteNotFoundError):
            where.get(private.id)
        with pytest.raises(NoteNotFoundError):
            where.lineage(private.id)
        with pytest.raises(FabricError):
            where.release_hold(private.id)
        assert where.forget(id=private.id).deleted == 0
        with pytest.raises(NoteNotFoundError):
            where.link(private.id, other.id)
    assert th1.get(private.id).content == "Alice's door code is 4711"


def test_explicit_supersedes_resolves_a_visible_note(fabric: Fabric) -> None:
    old = fabric.scope(*HOME).remember(kind="fact", content="Alice's manager is Carol", subject="alice-manager",
                                       consolidate=False)
    new = fabric.scope(T, R, "thread-2").remember(kind="fact", content="Alice reports to Dave",
                                                   supersedes=old.id)
    assert new.outcome == "superseding"
    assert fabric.scope(*HOME).get(old.id).superseded_by == new.id
    private = fabric.scope(*HOME).remember(kind="fact", content="Alice's code is 1", consent={"visibility": "thread"})
    with pytest.raises(NoteNotFoundError):
        fabric.scope(T, R, "thread-2").remember(kind="fact", content="Alice's code is 2", supersedes=private.id)


def test_ambiguous_explicit_ids_are_a_scope_error(fabric: Fabric) -> None:
    """An explicit id visible from the writer is taken (NoteExistsError); two notes whose
    homes do not see each other (thread-1's resource note, a tenant note written later
    from (T)) can still share one, and a scope seeing both gets a ScopeError."""
    fabric.scope(T, R, "thread-1").remember(kind="fact", content="note of thread-1", id="00000000abcd")
    with pytest.raises(NoteExistsError):
        fabric.scope(T, R, "thread-2").remember(kind="fact", content="note of thread-2", id="00000000abcd")
    fabric.scope(T).remember(kind="fact", content="note of the tenant", id="00000000abcd",
                             consent={"visibility": "tenant"})
    assert fabric.scope(T, R, "thread-1").get("00000000abcd").content == "note of thread-1"  # own first
    assert fabric.scope(T).get("00000000abcd").content == "note of the tenant"
    with pytest.raises(FabricError, match="several scopes"):
        fabric.scope(T, R).get("00000000abcd")


# --------------------------------------------------------- tools, CLI, projections
class _Session:
    id = "sess-1"

    def entries(self) -> list[object]:
        return []


def test_agent_tools_from_another_thread_find_and_forget_the_users_facts(fabric: Fabric) -> None:
    fact = fabric.scope(*HOME).remember(kind="fact", content="Alice is allergic to peanuts")
    notes = fabric.scope(T, R, "thread-2")
    tools, session = notes.tools(), _Session()
    with notes.attach(session):
        found = tools.call("memory.recall", {"query": "peanut allergy"}, session=session)
        assert fact.id in json.dumps(found)
        assert tools.call("memory.forget", {"id": fact.id}, session=session)["deleted"] == 1
    assert fabric.scope(T, R).recall("peanut allergy").hits == []


def test_cli_recall_for_a_resource_without_thread(fabric: Fabric) -> None:
    fact = fabric.scope(*HOME).remember(kind="fact", content="Alice prefers the window seat")
    res = CliRunner().invoke(cli.app, ["recall", "window seat", "-t", T, "-r", R, "--json", "--dsn", fabric.dsn])
    assert res.exit_code == 0, res.output
    assert fact.id in res.output
    res = CliRunner().invoke(cli.app, ["get", fact.id, "-t", T, "-r", R, "--json", "--dsn", fabric.dsn])
    assert res.exit_code == 0 and "window seat" in res.output, res.output


def test_projections_rebuild_identical_with_cross_thread_events(fabric: Fabric) -> None:
    th1, th2 = fabric.scope(*HOME), fabric.scope(T, R, "thread-2")
    th1.remember(kind="fact", content="Alice lives in Berlin")
    th2.remember(kind="fact", content="Alice lives in Berlin")
    th2.remember(kind="fact", content="Alice moved to Munich")
    th1.remember(kind="fact", content="Alice's PIN hint is the cat", consent={"visibility": "thread"})
    admin = ProjectionAdmin.for_fabric(fabric)
    assert all(r.ok for r in admin.verify())
    admin.rebuild()
    assert all(r.ok for r in admin.verify())
    assert sorted(fetch(fabric.dsn, "SELECT thread_id, visibility FROM mf_note_scope")) == [
        ("thread-1", "resource"), ("thread-1", "thread"), ("thread-2", "resource")]


def test_the_demo_runs_twice_with_the_same_outcomes(dsn: str) -> None:
    """Each demo run uses its own user, so a rerun on the same database does not fold
    into the previous run's (resource-visible) notes."""
    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo

    first = run_demo(Console(quiet=True), dsn=dsn)
    second = run_demo(Console(quiet=True), dsn=dsn)
    keys = ("fold_same_id", "superseded", "top_hit_is_successor", "as_of_returns_first",
            "procedure_excluded", "procedure_when_asked", "isolated", "forgotten", "erased")
    assert [second[k] for k in keys] == [first[k] for k in keys] == [True] * len(keys)


UPPER: dict[tuple[str, str], set[str]] = {
    # written from the user-level scope (T, R)
    ("(T,R)", "thread"): {"(T,R)"},
    ("(T,R)", "resource"): {"(T,R,th1)", "(T,R,th2)", "(T,R)"},
    ("(T,R)", "tenant"): {"(T,R,th1)", "(T,R,th2)", "(T,R)", "(T,R2,*)", "(T,R2)", "(T)"},
    # written from the tenant-level scope (T): no resource, so resource = its home only
    ("(T)", "thread"): {"(T)"},
    ("(T)", "resource"): {"(T)"},
    ("(T)", "tenant"): {"(T,R,th1)", "(T,R,th2)", "(T,R)", "(T,R2,*)", "(T,R2)", "(T)"},
}
"""The docs/api.md table's rows for notes written from (T, R) and from (T): who sees them."""


@pytest.mark.parametrize(("home", "vis"), sorted(UPPER))
def test_visibility_table_upper_rows(fabric: Fabric, home: str, vis: str) -> None:
    """The rows for the user-level and tenant-level writers: recall, list and get from
    every column's scope (plus the default visibility, ``resource``, for a fact)."""
    writer = fabric.scope(*READERS[home])
    n = writer.remember(kind="fact", content=f"Alice prefers window seats {vis}",
                        consent=None if vis == "resource" else {"visibility": vis})
    assert n.consent is not None and n.consent.visibility == vis
    for column in READERS:
        reader, expected = fabric.scope(*READERS[column]), column in UPPER[(home, vis)]
        assert (n.id in {h.id for h in reader.recall("window seats").hits}) is expected, (home, vis, column)
        assert (n.id in {x.id for x in reader.list().items}) is expected, (home, vis, column, "list")
        if expected:
            assert reader.get(n.id).content == n.content
        else:
            with pytest.raises(NoteNotFoundError):
                reader.get(n.id)
