"""Issue 16, nothing migrated silently: notes of an older log keep the visibility they
were written with (``thread``: release 0.1.0 stored ``consent: null``), and a database
whose projection tables predate the ``visibility`` columns gets them filled on open,
verifying equal to a replay of the log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.domain.errors import NoteNotFoundError
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp
from tests.conftest import fetch
from tests.integration.test_log_compat import FIXTURE, load_log_rows


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture
def old_fabric(dsn: str, doc: dict[str, Any]) -> Iterator[Fabric]:
    with open_fabric(dsn):
        pass
    load_log_rows(dsn, doc)
    with open_fabric(dsn) as fabric:
        yield fabric


def _sibling(scope: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """Another thread of the same resource (or a thread of a thread-less scope)."""
    return (scope["tenant_id"], scope["resource_id"], "another-thread")


def test_old_notes_stay_thread_only(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    """0.1.0 stored ``consent: null`` for a note written without consent: it projects
    as ``thread`` (unseen from another thread of its resource), and the one note written
    with an explicit ``resource`` consent stays resource-visible."""
    stored = dict(fetch(old_fabric.dsn, "SELECT note_id, visibility FROM mf_recall_index"))
    seen = {"thread": 0, "resource": 0}
    for name, info in doc["notes"].items():
        if info["id"] not in stored:
            continue  # working blocks, forgotten or held notes have no recall row
        home = doc["scopes"][info["scope"]]
        got = old_fabric.scope(**home).get(info["id"])
        want = got.consent.visibility if got.consent else "thread"
        assert stored[info["id"]] == want, name
        seen[want] += 1
        sibling = old_fabric.scope(*_sibling(home))
        if want == "thread":
            with pytest.raises(NoteNotFoundError):
                sibling.get(info["id"])
            assert info["id"] not in {h.id for h in sibling.recall(info["text"], min_relevance=0).hits}
        elif home["resource_id"] is not None:
            assert sibling.get(info["id"]).id == info["id"]
    assert seen["thread"] >= 5 and seen["resource"] == 1, seen


def test_new_defaults_do_not_touch_old_notes(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    """A repeat of an old (thread-only) fact in its thread folds into it and keeps it
    thread-only; the same fact from another thread is a new resource-visible note."""
    info = doc["notes"]["coffee"]  # a fact 0.1.0 wrote without consent
    home = doc["scopes"][info["scope"]]
    assert old_fabric.scope(**home).get(info["id"]).consent is None
    again = old_fabric.scope(**home).remember(kind="fact", content=info["text"])
    assert (again.outcome, again.id) == ("folded", info["id"])
    assert again.consent is None or again.consent.visibility == "thread"
    other = old_fabric.scope(*_sibling(home)).remember(kind="fact", content=info["text"])
    assert other.outcome == "inserted" and other.consent is not None and other.consent.visibility == "resource"
    admin = ProjectionAdmin.for_fabric(old_fabric)
    assert all(r.ok for r in admin.verify())


def test_tables_of_an_older_release_get_their_visibility_column(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        th = fabric.scope("acme", "alice", "thread-1")
        wide = th.remember(kind="fact", content="Alice's team is platform", consent={"visibility": "tenant"})
        mine = th.remember(kind="fact", content="Alice's badge is blue", consent={"visibility": "thread"})
        held = th.remember(kind="fact", content="Alice's desk is 4B")
        th.forget(id=held.id, hold=True)
    with psycopg.connect(dsn) as conn:  # what the tables of the previous release looked like
        conn.execute("ALTER TABLE mf_consolidation DROP COLUMN visibility")
        conn.execute("ALTER TABLE mf_note_scope DROP COLUMN visibility")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn) as fabric:
        rows = dict(fetch(dsn, "SELECT note_id, visibility FROM mf_note_scope"))
        assert rows == {wide.id: "tenant", mine.id: "thread", held.id: "thread"}  # held: fails closed
        assert dict(fetch(dsn, "SELECT note_id, visibility FROM mf_consolidation")) == {
            wide.id: "tenant", mine.id: "thread"}
        assert fabric.scope("acme", "bob").get(wide.id).id == wide.id
        reports = {r.projection: r.ok for r in ProjectionAdmin.for_fabric(fabric).verify()}
        assert reports["consolidation"] is True
        assert reports["note_scope"] is False  # the held note's row until a rebuild
        ProjectionAdmin.for_fabric(fabric).rebuild()
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify())
        assert dict(fetch(dsn, "SELECT note_id, visibility FROM mf_note_scope"))[held.id] == "resource"
