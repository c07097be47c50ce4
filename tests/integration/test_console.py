"""Issue 35: the web console (``memfabric console``) against a real embedded fabric,
through Starlette's TestClient: the scope tree's counts, notes, search with explain
bars, a note's lineage, tombstones only for a forgotten note, the log with a tampered
row flagged, projections actions only when allowed, access control, an auditor role."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.console import ConsoleSettings, build_app, check_settings  # noqa: E402
from memfabric.adapters.console_read import Tombstones, position_at, scope_rows  # noqa: E402
from memfabric.domain.errors import SettingsError  # noqa: E402

SECRET = "User secret PIN is quokkazebra"


def text(html: str) -> str:
    """The visible text of a page (tags dropped, whitespace collapsed)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def world(dsn: str) -> Iterator[dict[str, Any]]:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "u1", "t1")
        old = notes.remember(kind="fact", content="User lives in Lisbon", subject="home")
        new = notes.remember(kind="fact", content="User lives in Porto", subject="home")
        bike = notes.remember(kind="fact", content="User likes cycling on weekends", tags=["hobby"])
        notes.remember(kind="fact", content="User likes cycling on weekends", tags=["sport"])  # a fold
        gone = notes.remember(kind="fact", content=SECRET)
        notes.link(bike.id, new.id, "related", 0.5)
        notes.forget(id=gone.id)
        held = notes.remember(kind="fact", content="User contract number 77")
        notes.forget(id=held.id, hold=True)
        fabric.scope("acme", "u1", "t2").remember(kind="fact", content="Thread two fact about tea")
        fabric.scope("acme", "u2", "t1").remember(kind="fact", content="User two drinks coffee")
        fabric.scope("globex").remember(kind="fact", content="Globex tenant-level fact")
        yield {"fabric": fabric, "old": old.id, "new": new.id, "bike": bike.id, "gone": gone.id,
               "held": held.id, "dsn": dsn}


def client(fabric: Any, **settings: Any) -> TestClient:
    return TestClient(build_app(fabric, ConsoleSettings(**settings)), base_url="http://127.0.0.1")


def test_the_scope_tree_counts_live_superseded_held_and_forgotten(world: dict[str, Any]) -> None:
    c = client(world["fabric"])
    top = c.get("/")
    assert top.status_code == 200
    rows = {r[0]: r[1:] for r in re.findall(
        r'<tr>\s*<td><a href="/\?tenant=(\w+)">\w+</a>.*?<td class="n">(\d+)</td><td class="n">(\d+)</td>'
        r'<td class="n">(\d+)</td><td class="n">(\d+)</td>\s*<td class="n">(\d+)</td>', top.text, re.S)}
    # acme: live Porto, cycling, tea, coffee; superseded Lisbon; held contract; forgotten the secret
    assert rows == {"acme": ("4", "1", "1", "1", "2"), "globex": ("1", "0", "0", "0", "1")}
    users = text(c.get("/?tenant=acme").text)
    assert "u1 3 1 1 1 2" in users and "u2 1 0 0 0 1" in users
    threads = text(c.get("/?tenant=acme&resource=u1").text)
    assert "t1 2 1 1 1" in threads and "t2 1 0 0 0" in threads
    tenant_page = c.get("/?tenant=globex").text
    assert "(no resource) 1 0 0 0 1" in text(tenant_page) and 'id="listed"' not in tenant_page
    assert 'href="/?tenant=globex&amp;resource=-&amp;thread=-"' in tenant_page  # the tenant-level scope's notes
    assert "Globex tenant-level fact" in text(c.get("/?tenant=globex&resource=-&thread=-").text)
    user_level = text(c.get("/?tenant=acme&resource=u1&thread=-").text)
    assert "Notes of scope acme/u1/" in user_level and "User lives in Porto" in user_level


def test_scope_tree_pages_by_key_and_lists_a_scope_with_only_tombstones(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    only = fabric.scope("acme", "u3", "t9").remember(kind="fact", content="to be forgotten at once")
    fabric.scope("acme", "u3", "t9").forget(id=only.id)
    tombs = Tombstones(fabric)
    tombs.refresh()
    first, after = scope_rows(fabric, tombs, ("acme",), limit=2)
    assert [r.key for r in first] == ["u1", "u2"] and after == "u2"
    rest, more = scope_rows(fabric, tombs, ("acme",), after=after, limit=2)
    assert [(r.key, r.live, r.forgotten) for r in rest] == [("u3", 0, 1)] and more is None


def test_a_scope_lists_its_notes_with_filters_and_keyset_pages(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember_many([{"kind": "fact", "content": f"Numbered fact {i} about item {i * 37}"} for i in range(55)],
                        consolidate=False)
    c = client(fabric)
    base = "/?tenant=acme&resource=u1&thread=t1"
    first = c.get(base)
    ids = re.findall(r'class="id" href="/notes/([0-9a-f]{12})\?tenant=acme&amp;resource=u1&amp;thread=t1">', first.text)
    listed = ids[:50]
    assert len(set(listed)) == 50 and world["old"] not in listed  # superseded left out by default
    nxt = re.search(r'id="notes-next" href="([^"]+)"', first.text)
    assert nxt is not None
    second = c.get(nxt.group(1).replace("&amp;", "&"))
    more = re.findall(r'<td><a class="id" href="/notes/([0-9a-f]{12})', second.text)
    assert len(more) == 3 + 55 - 50 and not set(more) & set(listed)  # Porto, cycling, 5 numbered
    assert 'id="notes-next"' not in second.text
    tagged = c.get(base + "&tag=sport").text
    assert world["bike"] in tagged and world["new"] not in re.sub(r'id="tombstones".*', "", tagged, flags=re.S)
    with_old = c.get(base + "&superseded=1&subject=home").text
    assert world["old"] in with_old and "superseded by " + world["new"] in text(with_old)
    assert world["held"] in c.get(base).text.split('id="held"')[1]  # listed under legal hold
    assert c.get(base + "&kind=nosuch").status_code == 400


def test_search_draws_each_explain_row_as_bars_of_its_parts(world: dict[str, Any]) -> None:
    c = client(world["fabric"])
    page = c.get("/?tenant=acme&resource=u1&thread=t1&q=cycling weekends")
    assert page.status_code == 200
    hits = re.findall(r'<td class="n">1</td><td><a class="id" href="/notes/([0-9a-f]{12})', page.text)
    assert hits == [world["bike"]]
    first_bar = page.text.split('<svg class="bar"')[1].split("</svg>")[0]
    widths = {name: int(w) for name, w in re.findall(r'<rect class="(\w+)" x="\d+" y="1" width="(\d+)"', first_bar)}
    assert set(widths) == {"relevance", "recency", "importance", "link"}
    assert widths["relevance"] > widths["importance"] > 0 and sum(widths.values()) <= 244


def test_a_note_shows_its_lineage_as_a_timeline_with_reasons_in_words(world: dict[str, Any]) -> None:
    c = client(world["fabric"])
    page = c.get(f"/notes/{world['new']}")  # found from the note-scope index: one scope
    body = text(page.text)
    assert page.status_code == 200 and "User lives in Porto" in body
    assert "1 predecessor(s), 0 successor(s)" in body
    assert f"the same subject “home” as note {world['old']}: the newer value replaces it" in body
    events = re.findall(r'<li class="ev (\w+) (current|other)">', page.text)
    assert events == [("remembered", "other"), ("remembered", "current"), ("superseded", "other")]
    assert "superseded by note " + world["new"] in body and "caused by the supersession by note" in body
    assert body.count("valid ") >= 3  # recorded and valid times on the rows
    folded = text(c.get(f"/notes/{world['bike']}").text)
    assert "the same text as note " + world["bike"] + " was written again" in folded
    assert "Linked" in folded and world["new"] in folded


def test_a_forgotten_note_shows_its_tombstone_only_and_no_page_shows_its_content(world: dict[str, Any]) -> None:
    c = client(world["fabric"])
    page = c.get(f"/notes/{world['gone']}")
    assert page.status_code == 200 and 'id="tombstone"' in page.text and 'id="note-content"' not in page.text
    assert "forgotten (tombstone) by caller" in text(page.text)
    for path in ["/", "/?tenant=acme&resource=u1&thread=t1", "/?tenant=acme&resource=u1&thread=t1&q=secret",
                 f"/notes/{world['gone']}", "/log", "/log?type=Remembered", "/log?tenant=acme&verify=1"]:
        html = c.get(path).text
        assert "quokkazebra" not in html and "secret PIN" not in html, path
    log = c.get("/log?type=Forgotten&type=Remembered").text
    assert "&lt;erased&gt;" in log  # the forgotten note's sealed fields in the log


def test_the_log_flags_a_tampered_row_and_shows_the_rest(world: dict[str, Any]) -> None:
    fabric, dsn = world["fabric"], world["dsn"]
    with psycopg.connect(dsn) as conn:
        head = int(conn.execute("SELECT max(notification_id) FROM memfabric_events").fetchone()[0])  # type: ignore[index]
        conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                     " get_byte(state, octet_length(state) - 1) # 1) WHERE notification_id = 3")
    c = client(fabric)
    page = c.get("/log")
    rows = re.findall(r'<tr class="(tampered)?" id="row-(\d+)">', page.text)
    assert [int(p) for _, p in rows] == list(range(1, head + 1))
    assert [int(p) for bad, p in rows if bad] == [3]
    assert "TAMPERED" in page.text.split('id="row-3"')[1].split("</tr>")[0]
    assert "1 failed the integrity check" in text(page.text)
    verified = text(c.get("/log?verify=1").text)
    assert "audit verify: TAMPERED" in verified and "tag fails rows: 3" in verified


def test_the_log_pages_and_filters_by_tenant_type_and_time(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    c = client(fabric)
    globex = re.findall(r'id="row-(\d+)"', c.get("/log?tenant=globex").text)
    assert len(globex) == 1
    forgotten = text(c.get("/log?type=Forgotten").text)
    assert forgotten.count("Forgotten v") == 2  # the forget and the hold
    with psycopg.connect(world["dsn"]) as conn:
        head = int(conn.execute("SELECT max(notification_id) FROM memfabric_events").fetchone()[0])  # type: ignore[index]
    later = c.get(f"/log?after={head - 2}")
    assert re.findall(r'id="row-(\d+)"', later.text) == [str(head - 1), str(head)]
    from datetime import timedelta
    entries = list(__import__("memfabric.adapters.audit", fromlist=["read_log"]).read_log(fabric))
    cut = entries[5].timestamp
    assert position_at(fabric, cut) == entries[4].position
    assert position_at(fabric, entries[-1].timestamp + timedelta(seconds=1)) == entries[-1].position
    since = c.get("/log", params={"since": cut.isoformat()})
    assert re.findall(r'id="row-(\d+)"', since.text)[0] == str(entries[5].position)
    assert c.get("/log?type=NoSuch").status_code == 400
    assert c.get("/log?after=-1").status_code == 400


def test_projections_actions_only_when_not_read_only(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    ro = client(fabric, read_only=True)
    page = ro.get("/projections")
    assert page.status_code == 200 and "recall_index" in page.text and 'id="verify"' not in page.text
    assert ro.post("/projections", data={"do": "rebuild", "projection": "all"}).status_code == 403
    admin_app = build_app(fabric, ConsoleSettings(read_only=False))
    admin = TestClient(admin_app, base_url="http://127.0.0.1")
    form = admin.get("/projections").text
    assert 'id="verify"' in form and 'id="rebuild"' in form
    assert admin.post("/projections", data={"do": "verify", "projection": "all"}).status_code == 403
    token = re.search(r'name="form_token" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    done = admin.post("/projections", data={"do": "verify", "projection": "note_scope", "form_token": token})
    assert done.status_code == 200 and "verify note_scope: OK" in text(done.text)
    rebuilt = admin.post("/projections", data={"do": "rebuild", "projection": "all", "form_token": token})
    assert "rebuild all: OK" in text(rebuilt.text)
    assert admin.post("/projections", data={"do": "drop", "form_token": token}).status_code == 400


def test_access_loopback_by_default_a_token_elsewhere(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    with pytest.raises(SettingsError, match="token"):
        check_settings(ConsoleSettings(host="0.0.0.0"))  # noqa: S104
    assert client(fabric).get("/", headers={"host": "evil.example:8765"}).status_code == 400  # DNS rebinding
    app = build_app(fabric, ConsoleSettings(host="0.0.0.0", token="s3cret"))  # noqa: S104
    c = TestClient(app, base_url="http://10.0.0.5")
    assert c.get("/").status_code == 401 and c.get("/log").status_code == 401
    assert c.get("/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/", headers={"authorization": "Bearer s3cret"}).status_code == 200
    login = c.get("/log?token=s3cret&tenant=acme", follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/log?tenant=acme"
    assert "httponly" in login.headers["set-cookie"].lower() and "samesite=strict" in login.headers["set-cookie"].lower()
    assert c.get("/log?tenant=acme").status_code == 200  # the cookie now
    fresh = TestClient(app, base_url="http://10.0.0.5")
    assert fresh.get("/", params={"token": "wrong"}).status_code == 401


def test_bad_input_is_a_400_page_and_an_unknown_note_a_404(world: dict[str, Any]) -> None:
    c = client(world["fabric"])
    bad = c.get("/?tenant=bad id")
    assert bad.status_code == 400 and "tenant_id:" in text(bad.text)
    assert c.get("/notes/XYZ").status_code == 400
    assert c.get("/notes/0123456789ab").status_code == 404
    assert c.get("/?tenant=acme&resource=u1&thread=t1&valid_at=yesterday").status_code == 400
    assert c.get("/?tenant=acme&resource=u1&thread=t1&cursor=garbage").status_code == 400
    page = c.get("/")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    css = c.get("/static/console.css")
    assert css.status_code == 200 and "rect.relevance" in css.text


def test_a_note_id_in_several_scopes_asks_which(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    fabric.scope("acme", "u1", "t1").remember(kind="fact", content="Explicit id one", id="aaaaaaaaaaaa")
    fabric.scope("globex").remember(kind="fact", content="Explicit id two", id="aaaaaaaaaaaa")
    c = client(fabric)
    page = c.get("/notes/aaaaaaaaaaaa")
    assert page.status_code == 200 and "is in 2 scopes" in text(page.text)
    link = re.findall(r'href="(/notes/aaaaaaaaaaaa\?[^"]+)"', page.text)
    assert len(link) == 2
    one = c.get(link[1].replace("&amp;", "&"))
    assert "Explicit id two" in text(one.text) and "Explicit id one" not in text(one.text)


def test_an_auditor_role_reads_every_page_and_writes_nothing(pg_server: str, world: dict[str, Any]) -> None:
    from tests.integration.test_auditor_role import drop_role, make_auditor, snapshot

    dsn = world["dsn"]
    name, auditor = make_auditor(pg_server, dsn)
    try:
        before = snapshot(dsn)
        with open_fabric(auditor, read_only=True) as fabric:
            c = client(fabric, read_only=True)
            for path in ["/", "/?tenant=acme", "/?tenant=acme&resource=u1&thread=t1",
                         "/?tenant=acme&resource=u1&thread=t1&q=cycling", f"/notes/{world['new']}",
                         f"/notes/{world['gone']}", "/log", "/log?verify=1", "/projections"]:
                page = c.get(path)
                assert page.status_code == 200, (path, text(page.text)[:400])
                assert "quokkazebra" not in page.text
            assert 'id="verify"' not in c.get("/projections").text
        assert snapshot(dsn) == before
    finally:
        drop_role(pg_server, dsn, name)


def test_a_forgotten_predecessor_leaves_no_content_on_its_successors_page(world: dict[str, Any]) -> None:
    fabric = world["fabric"]
    notes = fabric.scope("acme", "u9", "t1")
    first = notes.remember(kind="fact", content="My favourite drink is quokkatea")
    second = notes.remember(kind="fact", content="My favourite drink is espresso")
    assert second.supersedes == first.id, second.decision  # an inferred supersession
    notes.forget(id=first.id)
    c = client(fabric)
    for path in [f"/notes/{second.id}", f"/notes/{first.id}", "/?tenant=acme&resource=u9&thread=t1&superseded=1",
                 "/log?tenant=acme"]:
        page = c.get(path)
        assert page.status_code == 200 and "quokkatea" not in page.text, path
    body = text(c.get(f"/notes/{second.id}").text)
    assert "espresso" in body and "so the newer supersedes" in body


def test_a_note_whose_event_was_tampered_answers_409_in_words(world: dict[str, Any]) -> None:
    from memfabric.domain.note import note_uuid
    from memfabric.domain.scope import Scope

    aggregate = note_uuid(Scope(tenant_id="acme", resource_id="u1", thread_id="t1"), world["bike"])
    with psycopg.connect(world["dsn"]) as conn:
        conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                     " get_byte(state, octet_length(state) - 1) # 1) WHERE originator_id = %s"
                     " AND originator_version = 1", (aggregate,))
    c = client(world["fabric"])
    page = c.get(f"/notes/{world['bike']}?tenant=acme&resource=u1&thread=t1")
    assert page.status_code == 409 and "see /log and run audit verify" in text(page.text)
    assert c.get("/?tenant=acme&resource=u1&thread=t1").status_code == 200  # the scope still lists


def test_a_replay_stopped_by_a_tampered_row_is_reported_on_the_projections_page(world: dict[str, Any]) -> None:
    with psycopg.connect(world["dsn"]) as conn:
        conn.execute("UPDATE memfabric_events SET state = set_byte(state, octet_length(state) - 1,"
                     " get_byte(state, octet_length(state) - 1) # 1) WHERE notification_id = 2")
    admin = TestClient(build_app(world["fabric"], ConsoleSettings(read_only=False)), base_url="http://127.0.0.1")
    token = re.search(r'name="form_token" value="([^"]+)"', admin.get("/projections").text).group(1)  # type: ignore[union-attr]
    done = admin.post("/projections", data={"do": "verify", "projection": "all", "form_token": token})
    assert done.status_code == 200
    assert "verify all: DIFFER" in text(done.text) and "stopped at notification 2" in text(done.text)
