"""Issue 28 (reliability and security, round three): one regression test per defect
this branch fixes (2, 4, 5, 6, 8, 9 without the LangGraph parts, 10). Each failed on the
code before its fix."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memfabric.adapters import open_fabric


# --- defect 2: every DSN parameter on every connection ------------------------------

def _pool_settings(fabric: Any) -> list[dict[str, Any]]:
    """``application_name``, ``statement_timeout`` and libpq's non-default parameters
    of as many pooled connections of the event-log datastore as it holds at once."""
    pool = fabric.log.datastore.pool
    conns = [pool.getconn() for _ in range(pool.min_size)]
    try:
        out = []
        for conn in conns:
            row = conn.execute("SELECT current_setting('application_name') AS a,"
                               " current_setting('statement_timeout') AS s").fetchone()
            out.append({"application_name": row["a"], "statement_timeout": row["s"],
                        **conn.info.get_parameters()})
        return out
    finally:
        for conn in conns:
            pool.putconn(conn)


def test_dsn_parameters_reach_every_pool(dsn: str) -> None:
    """Defect 2: application_name, options (-c statement_timeout) and sslmode/sslrootcert
    of the DSN are on the event pool's connections (and every backend the fabric opens)."""
    full = make_conninfo(dsn, application_name="mf-round3", sslmode="disable",
                         sslrootcert="/nonexistent/root.crt",
                         options="-c statement_timeout=4321")
    with open_fabric(full) as fabric:
        fabric.scope("acme", "u1").remember(kind="fact", content="User likes tea")
        fabric.scope("acme", "u1").recall("tea")
        settings = _pool_settings(fabric)
        assert len(settings) >= 2
        for s in settings:
            assert s["application_name"] == "mf-round3", s
            assert s["statement_timeout"] == "4321ms", s
            assert s.get("sslmode") == "disable" and s.get("sslrootcert") == "/nonexistent/root.crt", s
        dbname = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(dsn) as conn:
            names = {r[0] for r in conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,)).fetchall()}
        assert names == {"mf-round3"}, names


def test_dsn_role_option_reaches_the_event_pool(dsn: str) -> None:
    """Defect 2: ``options=-c role=...`` (docs/roles.md) is the role of the event pool."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS mf_round3_admin")
        conn.execute("CREATE ROLE mf_round3_admin")
        conn.execute("GRANT mf_round3_admin TO CURRENT_USER")
        conn.execute("GRANT ALL ON SCHEMA public TO mf_round3_admin")
    try:
        with open_fabric(make_conninfo(dsn, options="-c role=mf_round3_admin")) as fabric:
            fabric.scope("acme").remember(kind="fact", content="User likes coffee")
            with fabric.log.datastore.get_connection() as conn:
                assert conn.execute("SELECT current_user AS u").fetchone()["u"] == "mf_round3_admin"
        with psycopg.connect(dsn) as conn:
            owner = conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'memfabric_events'").fetchone()
        assert owner == ("mf_round3_admin",)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("REASSIGN OWNED BY mf_round3_admin TO CURRENT_USER")
            conn.execute("DROP OWNED BY mf_round3_admin")
            conn.execute("DROP ROLE mf_round3_admin")


# --- defect 4: a value belongs to the key of the note it came from ------------------

def test_forgetting_the_successor_erases_its_value_from_the_predecessor(fabric: Any) -> None:
    """Defect 4: after ``forget(new)`` the older note's ``Superseded`` event (history,
    lineage, the decoded log) no longer carries the newer note's value."""
    notes = fabric.scope("acme", "user-1")
    old = notes.remember(kind="fact", content="Bob works at Initech")
    new = notes.remember(kind="fact", content="Bob now works at Umbrella Pharma")
    assert new.supersedes == old.id
    notes.forget(id=new.id)
    texts = [repr(e.fields) for e in notes.history(old.id)]
    assert any("Superseded" == e.type for e in notes.history(old.id))
    assert not [t for t in texts if "umbrella" in t.lower()], texts
    assert "umbrella" not in repr(notes.lineage(old.id)).lower()
    home = notes.get(old.id).scope
    from memfabric.domain.note import note_uuid  # noqa: PLC0415
    decoded = [fabric.log.sealing_mapper.decode_state(s)[0]
               for s in fabric.log.note_recorder.select_events(note_uuid(home, old.id))]
    assert decoded and "umbrella" not in repr(decoded).lower(), decoded



def test_a_legacy_superseded_event_reads_without_the_successor_value() -> None:
    """Defect 4, logs written before the fix: a ``Superseded`` event that stored the
    successor's ``new_value`` (triggered directly, as the old code did) shows none in
    ``history`` and in the replayed state."""
    from datetime import datetime, timezone  # noqa: PLC0415

    from memfabric.domain import history  # noqa: PLC0415
    from memfabric.domain.note import Note  # noqa: PLC0415
    from memfabric.domain.scope import Scope  # noqa: PLC0415
    note = Note.remember(
        scope=Scope(tenant_id="acme"), note_id="a" * 12, kind="fact", content="Bob works at Initech",
        path=None, block=None, subject=None, t_ref=None, valid_from=None, valid_to=None, keywords=[],
        tags=[], source_entry_ids=[], context=None, links=[], supersedes=None, importance=0.5,
        consent=None, embedding=None, embedder_id=None, dim=0, token_count=4, cause="caller")
    legacy = {"subject_key": "bob/works at", "old_value": "initech", "new_value": "umbrella pharma"}
    note.trigger_event(Note.Superseded, successor_id="b" * 12, valid_to=datetime.now(timezone.utc),
                       cause="supersession:" + "b" * 12, decision=legacy)
    entries = [history._entry(e) for e in note.collect_events()]  # noqa: SLF001
    assert entries[-1].type == "Superseded" and entries[-1].fields["decision"]["old_value"] == "initech"
    assert "umbrella" not in repr(entries) and "umbrella" not in repr(vars(note))

# --- defect 5: history names only notes its reader sees -----------------------------

class _Session:
    id = "s-round3"

    def entries(self) -> list[object]:
        return []


def test_history_hides_ids_the_reader_cannot_see(dsn: str) -> None:
    """Defect 5: a tenant-visible note's ``Contributed`` (evolution) named the
    thread-only notes it patched; read from another user's scope (``history``, the
    ``memory_history`` tool, ``lineage``) no id of such a note appears."""
    with open_fabric(dsn, consolidate=False,
                     evolution={"enabled": True, "max_patches": 8, "floor": 0.0}) as fab:
        t1 = fab.scope("acme", "u1", "t1")
        with t1.attach(_Session()):
            hidden = [t1.remember(kind="fact", content=f"The zeppelin hangar code {i} is 447{i}",
                                  consent={"visibility": "thread"}) for i in range(3)]
            shared = t1.remember(kind="fact", content="The zeppelin hangar code opens at dawn",
                                 consent={"visibility": "tenant"}, keywords=["dawn"])
        own = t1.history(shared.id)
        contributed = [e for e in own if e.type == "Contributed"]
        assert contributed and set(contributed[0].fields["note_ids"]) & {h.id for h in hidden}
        other = fab.scope("acme", "u2", "t9")
        text = repr(other.history(shared.id)) + repr(other.lineage(shared.id))
        session = _Session()
        with other.attach(session):
            text += repr(other.tools().call("memory_history", {"id": shared.id}, session=session))
        leaks = [h.id for h in hidden if h.id in text]
        assert leaks == [], leaks
        assert any(e.type == "Contributed" for e in other.history(shared.id))


# --- defect 6: a hard link in the jail ----------------------------------------------

def _planted(tmp_path: Any) -> tuple[Any, Any]:
    """A jail root holding ``notes/link.md``, a hard link to ``outside/secret.txt``."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "notes").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("the launch code is 0000\n")
    os.link(secret, root / "notes" / "link.md")
    return root, secret


def test_jail_refuses_a_hard_link_to_a_file_outside(tmp_path: Any) -> None:
    """Defect 6 (the jail alone): read, append and str-replace style writes of a file
    with a second link are refused on the opened descriptor; the outside file keeps its
    bytes. A file in the root with one link still works; a FIFO is not a regular file."""
    from memfabric.adapters.jail import FileJail, FilePathError, JailError  # noqa: PLC0415
    root, secret = _planted(tmp_path)
    jail = FileJail(root)
    with pytest.raises(JailError, match="hard links"):
        jail.read("notes/link.md")
    with pytest.raises(JailError, match="hard links"):
        jail.append("notes/link.md", "appended by the model")
    assert secret.read_text() == "the launch code is 0000\n"
    (root / "notes" / "own.md").write_text("mine")
    assert jail.read("notes/own.md").data == b"mine"
    os.mkfifo(root / "notes" / "pipe")
    with pytest.raises(FilePathError, match="not a regular file"):
        jail.read("notes/pipe")


def test_memory_tools_never_read_or_index_a_hard_linked_file(fabric: Any, tmp_path: Any) -> None:
    """Defect 6 (through the tools): ``memory_read`` does not return the outside file,
    ``memory_insert`` neither appends to it nor indexes its text."""
    from memfabric.adapters.jail import JailError  # noqa: PLC0415
    root, secret = _planted(tmp_path)
    notes = fabric.scope("acme", "u1", "t1")
    tools = notes.tools(root)
    session = _Session()
    with notes.attach(session):
        with pytest.raises(JailError):
            tools.call("memory_read", {"path": "notes/link.md"}, session=session)
        with pytest.raises(JailError):
            tools.call("memory_insert", {"path": "notes/link.md", "text": "more"}, session=session)
    assert secret.read_text() == "the launch code is 0000\n"
    assert all("launch" not in (h.content or "") for h in notes.recall("launch code").hits)


_SWAPPER = """
import os, pathlib, sys
d, out = pathlib.Path(sys.argv[1]), sys.argv[2]
while True:
    try:
        d.mkdir(exist_ok=True)
        for i in range(3):
            (d / f"f{i}.md").write_text("x")
        (d / "sub").mkdir(exist_ok=True)
        (d / "sub" / "z.md").write_text("z")
        os.unlink(d / "sub" / "z.md")
        os.rmdir(d / "sub")
        for i in range(3):
            (d / f"f{i}.md").unlink(missing_ok=True)
        d.rmdir()
        d.symlink_to(out)
        d.unlink()
    except OSError:
        pass
"""


def test_jail_race_errors_are_typed(tmp_path: Any) -> None:
    """Defect 9 (the jail's symlink-swap race): while another process swaps a directory
    of the root for a symlink out of it (and back) and removes its files, every jail
    operation either works or raises a typed ``FabricError``, never a bare ``OSError``
    (before: ``FileNotFoundError`` from ``files_under`` and ``remove``)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    from memfabric.adapters.jail import FileJail  # noqa: PLC0415
    from memfabric.domain.errors import FabricError  # noqa: PLC0415
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "f0.md").write_text("outside")
    jail = FileJail(root)
    ops = [lambda: jail.read("d/f0.md"), lambda: jail.append("d/f1.md", "y"),
           lambda: jail.files_under("d"), lambda: jail.listdir("d"), lambda: jail.remove("d/f2.md"),
           lambda: jail.remove("d/sub"), lambda: jail.write("d/f0.md", b"z"),
           lambda: jail.write("d/new.md", b"z", exclusive=True),
           lambda: jail.rename("d/f1.md", "e/g.md"), lambda: jail.is_dir("d")]
    untyped: list[str] = []
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(root / "d"), str(outside)])
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline and len(untyped) < 5:
            for op in ops:
                try:
                    op()
                except FabricError:
                    pass
                except OSError as exc:
                    untyped.append(repr(exc))
    finally:
        swapper.kill()
        swapper.wait()
    assert (outside / "f0.md").read_text() == "outside"
    assert untyped == [], untyped


# --- defect 8: a deleted middle event is a named integrity error -------------------

def test_a_deleted_middle_event_is_a_named_integrity_error(fabric: Any, dsn: str) -> None:
    """Defect 8: delete version 2 of a note's 3 events: ``get``, ``lineage`` and
    ``history`` raise ``EventIntegrityError`` naming the note and version 2 (before: a
    bare eventsourcing error, and a quietly partial history); ``memfabric log`` exits 1
    naming it."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from memfabric.adapters.cli import app as cli  # noqa: PLC0415
    from memfabric.domain.errors import EventIntegrityError  # noqa: PLC0415
    from memfabric.domain.note import note_uuid  # noqa: PLC0415
    notes = fabric.scope("acme", "u1")
    a = notes.remember(kind="fact", content="Alice plays the cello")
    b = notes.remember(kind="fact", content="Tickets cost twenty euros")
    notes.link(a.id, b.id)
    notes.unlink(a.id, b.id)
    with psycopg.connect(dsn, autocommit=True) as conn:
        gone = conn.execute("DELETE FROM memfabric_events WHERE originator_id = %s AND originator_version = 2",
                            (note_uuid(notes.scope, a.id),)).rowcount
    assert gone == 1
    for read in (notes.get, notes.lineage, notes.history):
        with pytest.raises(EventIntegrityError, match=rf"{a.id}.*version 2 is missing"):
            read(a.id)
    assert notes.get(b.id).id == b.id  # other notes read on
    res = CliRunner().invoke(cli.app, ["log", "--dsn", dsn])
    assert res.exit_code == 1, res.output
    assert f"{a.id}" in res.stderr and "version 2 is missing" in res.stderr, res.stderr


# --- defect 9: untyped errors ---------------------------------------------------------

def test_a_nul_byte_in_a_ledger_append_is_a_validation_error(fabric: Any, dsn: str) -> None:
    """Defect 9: a NUL in a conversation ``append`` (or ``extend``, ``observe``) is a
    ``pydantic.ValidationError`` naming the field; nothing is written (before:
    eventsourcing's ``DataError`` from PostgreSQL)."""
    from pydantic import ValidationError  # noqa: PLC0415

    from tests.conftest import event_count  # noqa: PLC0415
    conv = fabric.scope("acme", "u1", "t1").conversation()
    first = conv.append("user", "hello there")
    before = event_count(dsn)
    with pytest.raises(ValidationError, match="text"):
        conv.append("user", "bad \x00 byte")
    with pytest.raises(ValidationError, match="NUL"):
        conv.extend([{"role": "user", "text": "fine"}, {"role": "user", "text": "x\x00"}])
    with pytest.raises(ValidationError, match="NUL"):
        conv.observe("seen \x00", source_entry_ids=[first.id])
    assert event_count(dsn) == before
    assert conv.append("user", "still writable").id


def test_projections_verify_checks_tracking_positions_against_the_log(fabric: Any, dsn: str) -> None:
    """Defect 9: a tracking row moved past the log head in SQL (every later write of that
    projection then fails) makes ``projections verify`` fail, naming it (before: ok)."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from memfabric.adapters.cli import app as cli  # noqa: PLC0415
    from memfabric.projections.rebuild import ProjectionAdmin  # noqa: PLC0415
    fabric.scope("acme", "u1").remember(kind="fact", content="User likes tea")
    assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE mf_working_value_tracking SET notification_id = notification_id + 100")
    reports = ProjectionAdmin.for_fabric(fabric).verify()
    bad = [r for r in reports if not r.ok]
    assert bad and {r.projection for r in bad} == {"working_value"}, reports
    assert "past the log head" in (bad[0].problem or "")
    res = CliRunner().invoke(cli.app, ["projections", "verify", "--dsn", dsn])
    assert res.exit_code == 1 and "past the log head" in res.output, res.output


# --- defect 10: token off the command line, bearer in any case, roles sql, one bad row

def test_bearer_scheme_is_case_insensitive() -> None:
    """Defect 10 (RFC 9110 section 11.1): ``bearer``/``BEARER`` work like ``Bearer``;
    another scheme or a wrong token is still 401."""
    pytest.importorskip("mcp")
    from mcp.server.lowlevel import Server  # noqa: PLC0415
    from starlette.testclient import TestClient  # noqa: PLC0415

    from memfabric.adapters.mcp_server import http_app  # noqa: PLC0415
    app = http_app(Server("memfabric"), "127.0.0.1", 8799, "tok")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    hdrs = {"accept": "application/json, text/event-stream", "host": "127.0.0.1:8799"}
    with TestClient(app, base_url="http://127.0.0.1:8799") as client:
        for good in ("bearer tok", "BEARER tok", "Bearer tok", "bEaReR  tok"):
            res = client.post("/mcp", json=init, headers={**hdrs, "authorization": good})
            assert res.status_code == 200, (good, res.status_code)
        for bad in ("Basic tok", "bearer wrong", "bearertok", "tok", "bearer "):
            res = client.post("/mcp", json=init, headers={**hdrs, "authorization": bad})
            assert res.status_code == 401, (bad, res.status_code)


def _free_port() -> int:
    import socket  # noqa: PLC0415
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mcp_token_from_a_file_stays_off_the_command_line(dsn: str, tmp_path: Any) -> None:
    """Defect 10: ``memfabric mcp --token-file FILE`` serves HTTP with the file's token
    (401 without it, accepted with it), and the token is not in ``/proc/PID/cmdline``;
    an unreadable file is a one-line error (exit 2)."""
    pytest.importorskip("mcp")
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    import httpx  # noqa: PLC0415
    from typer.testing import CliRunner  # noqa: PLC0415

    from memfabric.adapters.cli import app as cli  # noqa: PLC0415
    res = CliRunner().invoke(cli.app, ["mcp", "--tenant", "acme", "--transport", "http",
                                       "--token-file", str(tmp_path / "absent"), "--dsn", dsn])
    assert res.exit_code == 2 and "token-file" in res.stderr, res.output
    secret = "s3cret-token-from-file"
    (tmp_path / "token").write_text(secret + "\n")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEMFABRIC_MCP_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "memfabric.adapters.cli.app", "mcp", "--tenant", "acme",
                             "--transport", "http", "--port", str(port), "--token-file",
                             str(tmp_path / "token"), "--dsn", dsn], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert secret.encode() not in f.read()
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        hdrs = {"accept": "application/json, text/event-stream"}
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while True:
            try:
                denied = httpx.post(url, json=init, headers=hdrs, timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        assert denied.status_code == 401
        ok = httpx.post(url, json=init, headers={**hdrs, "authorization": f"bearer {secret}"}, timeout=10)
        assert ok.status_code == 200, ok.text
    finally:
        proc.terminate()
        proc.wait(20)


def test_roles_sql_runs_before_the_first_open(dsn: str) -> None:
    """Defect 10: ``roles sql`` on a database no fabric was opened on yet works (before:
    the REVOKE on the fabric secret failed, the table did not exist), and the first open
    then runs as the owner role (``options=-c role=...``): every table is the owner's,
    the auditor reads the log but never the secret."""
    import uuid  # noqa: PLC0415

    from memfabric.adapters.postgres.roles import roles_sql  # noqa: PLC0415
    tag = uuid.uuid4().hex[:8]
    owner, writer, auditor = f"mf_o_{tag}", f"mf_w_{tag}", f"mf_a_{tag}"
    db = conninfo_to_dict(dsn)["dbname"]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(roles_sql(db, owner=owner, writer=writer, auditor=auditor))  # type: ignore[arg-type]
            conn.execute(f'GRANT "{owner}" TO CURRENT_USER')  # noqa: S608
        with open_fabric(make_conninfo(dsn, options=f"-c role={owner}")) as fabric:
            fabric.scope("acme").remember(kind="fact", content="User likes tea")
        with psycopg.connect(dsn) as conn:
            owners = {r[0] for r in conn.execute(
                "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'"
                " AND (tablename LIKE 'mf%%' OR tablename LIKE 'memfabric%%')").fetchall()}
            secret_rows = conn.execute("SELECT count(*) FROM mf_fabric_secret").fetchone()
            can = conn.execute(
                "SELECT has_table_privilege(%s, 'memfabric_events', 'SELECT'),"
                " has_table_privilege(%s, 'mf_fabric_secret', 'SELECT')", (auditor, auditor)).fetchone()
        assert owners == {owner}, owners
        assert secret_rows == (1,)
        assert can == (True, False)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for role in (auditor, writer, owner):
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    conn.execute(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER')  # noqa: S608
                    conn.execute(f'DROP OWNED BY "{role}"')  # noqa: S608
                    conn.execute(f'DROP ROLE "{role}"')  # noqa: S608


def _append_unauthenticated_row(dsn: str) -> tuple[Any, int]:
    """Append to the log a copy of its first event's bytes under a fresh aggregate id
    (so its tag cannot match): ``(aggregate id, notification id)``."""
    import uuid  # noqa: PLC0415
    with psycopg.connect(dsn, autocommit=True) as conn:
        topic, state = conn.execute("SELECT topic, state FROM memfabric_events ORDER BY notification_id LIMIT 1").fetchone()  # type: ignore[misc]
        oid = uuid.uuid4()
        nid = conn.execute("INSERT INTO memfabric_events (originator_id, originator_version, topic, state)"
                           " VALUES (%s, 1, %s, %s) RETURNING notification_id", (oid, topic, state)).fetchone()[0]  # type: ignore[index]
    return oid, int(nid)


@pytest.mark.parametrize("inline", [True, False])
def test_one_unauthenticated_row_does_not_stop_other_tenants(dsn: str, inline: bool) -> None:
    """Defect 10: after one unauthenticated row is appended to the log, every tenant
    keeps writing and reading its own writes, and the projections' catch-up goes past
    the row (``catch_up`` with inline projections, or a separate runner with
    ``projections run --once``); the row's aggregate is quarantined, named in
    ``mf_quarantine`` and ``projections status``, left out of the projections, and a
    rebuild and verify agree (before: every write raised ``ProjectionError``)."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from memfabric.adapters.cli import app as cli  # noqa: PLC0415
    from memfabric.projections.rebuild import ProjectionAdmin  # noqa: PLC0415
    with open_fabric(dsn, inline_projections=inline, await_projections=False) as fab:
        fab.scope("acme", "u1").remember(kind="fact", content="Alice plays the cello")
        fab.scope("globex", "u1").remember(kind="fact", content="Bob plays the drums")
        if not inline:
            fab.catch_up()
        bad, nid = _append_unauthenticated_row(dsn)
        written = {t: fab.scope(t, "u1").remember(kind="fact", content=f"{t} ships on Fridays")
                   for t in ("acme", "globex", "initech")}
        if inline:
            fab.catch_up()  # the floor passes the row: every projection meets it
        else:
            res = CliRunner().invoke(cli.app, ["projections", "run", "--once", "--dsn", dsn])
            assert res.exit_code == 0, res.output
        for tenant, note in written.items():
            assert fab.scope(tenant, "u1").recall("ships on Fridays").hits[0].id == note.id
        with psycopg.connect(dsn) as conn:
            held = conn.execute("SELECT aggregate_id, notification_id, reason FROM mf_quarantine").fetchall()
            projected = conn.execute("SELECT count(*) FROM mf_note_scope WHERE aggregate_id = %s", (bad,)).fetchone()
        assert [(h[0], h[1]) for h in held] == [(bad, nid)] and "authentication" in held[0][2], held
        assert projected == (0,)
        res = CliRunner().invoke(cli.app, ["projections", "status", "--dsn", dsn])
        assert f"quarantined: aggregate {bad} at notification {nid}" in " ".join(res.output.split()), res.output
        admin = ProjectionAdmin.for_fabric(fab)
        admin.rebuild()
        assert all(r.ok for r in admin.verify())
        fab.scope("acme", "u1").remember(kind="fact", content="Alice also plays the viola")
