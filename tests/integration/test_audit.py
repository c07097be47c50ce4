"""The auditor's surface: decoded log, JSONL export and the tamper-evidence chain;
library and CLI, on real PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psycopg
import typer
from typer.testing import CliRunner

from memfabric.adapters.audit import LEAF_SQL, export_jsonl, leaf_hash, read_log, verify_chain
from memfabric.adapters.cli.admin import register
from tests.conftest import event_count, fetch
from tests.history import EVENT_TYPES, make_history

runner = CliRunner()


def invoke(dsn: str, *args: str) -> object:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """memfabric (test app)."""

    register(app)
    return runner.invoke(app, [*args, "--dsn", dsn])


def test_log_decodes_every_event_type_and_never_shows_erased_content(fabric: object, dsn: str) -> None:
    h = make_history(fabric)  # type: ignore[arg-type]
    entries = list(read_log(fabric))
    assert [e.position for e in entries] == list(range(1, event_count(dsn) + 1))
    assert {e.type for e in entries} == EVENT_TYPES
    assert all(e.timestamp is not None and e.note_id and e.tenant_id for e in entries)

    gone = [e for e in entries if e.note_id == h.forgotten]
    assert [e.type for e in gone] == ["Remembered", "Forgotten"]
    assert gone[0].fields["content"] == "<erased>" and "content" in gone[0].erased
    assert gone[1].fields["reason"] == "forgotten"
    held = [e for e in entries if e.note_id == h.held]
    assert held[0].fields["content"] == "User was in a legal dispute in 2023"  # kept under hold
    repointed = next(e for e in entries if e.type == "Repointed")
    assert repointed.note_id == h.file and repointed.fields["to_path"] == "src/new_place.py"
    appended = next(e for e in entries if e.type == "BlockAppended")
    assert appended.fields["text"].endswith("Uses metric units.")

    text = "\n".join(json.dumps(e.to_dict(embeddings=True)) for e in entries)
    assert h.forgotten_text not in text and "4111" not in text

    res = invoke(dsn, "log")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    lines = res.output.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == len(entries)
    assert all(any(f" {t} v" in line for line in lines) for t in EVENT_TYPES)
    assert "4111" not in res.output and "<erased>" in res.output  # type: ignore[attr-defined]
    assert "acme/u1/t1" in res.output and "<1536 bytes float32>" in res.output  # type: ignore[attr-defined]


def test_log_filters_by_note_tenant_and_position(fabric: object, dsn: str) -> None:
    h = make_history(fabric)  # type: ignore[arg-type]
    mine = list(read_log(fabric, note=h.old_home))
    assert [e.type for e in mine] == ["Remembered", "Superseded"]
    assert mine[1].fields["successor_id"] == h.new_home
    globex = list(read_log(fabric, tenant="globex"))
    assert len(globex) == 2 and {e.tenant_id for e in globex} == {"globex"}
    acme = list(read_log(fabric, tenant="acme"))
    assert len(acme) + len(globex) == event_count(dsn)
    assert {e.type for e in acme} == EVENT_TYPES  # Folded etc. carry no tenant: resolved per note
    assert [e.position for e in read_log(fabric, since=event_count(dsn) - 2)] == [
        event_count(dsn) - 1, event_count(dsn)]

    res = invoke(dsn, "log", "--note", h.forgotten, "--json")
    rows = [json.loads(line) for line in res.output.splitlines()]  # type: ignore[attr-defined]
    assert [r["type"] for r in rows] == ["Remembered", "Forgotten"]
    assert rows[0]["fields"]["content"] == "<erased>" and rows[0]["scope"]["tenant_id"] == "acme"
    assert rows[0]["erased"] and rows[0]["fields"]["embedding"] == "<erased>"
    res = invoke(dsn, "log", "--tenant", "globex", "--since", "1")
    assert len(res.output.splitlines()) == 2 and "anvils" in res.output  # type: ignore[attr-defined]


def test_log_follow_prints_new_events(fabric: object) -> None:
    notes = fabric.scope("acme", "u1", "t1")  # type: ignore[attr-defined]
    notes.remember(kind="fact", content="User prefers metric units")

    def write_later() -> None:
        time.sleep(0.5)
        notes.remember(kind="fact", content="User lives in Lisbon")

    thread = threading.Thread(target=write_later)
    thread.start()
    seen = [e.fields["content"] for e in read_log(fabric, follow=True, poll=5.0, idle_exit=3.0)]
    thread.join()
    assert seen == ["User prefers metric units", "User lives in Lisbon"]


def test_export_streams_the_log_as_jsonl(fabric: object, dsn: str, tmp_path: Path) -> None:
    h = make_history(fabric)  # type: ignore[arg-type]
    out = tmp_path / "log.jsonl"
    assert export_jsonl(fabric, out) == event_count(dsn)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["type"] for r in rows} == EVENT_TYPES
    assert [r["position"] for r in rows] == sorted(r["position"] for r in rows)
    first = rows[0]
    assert len(first["fields"]["embedding"]) == 2048  # base64 of 384 float32
    assert h.forgotten_text not in out.read_text()

    res = invoke(dsn, "export", "--out", str(tmp_path / "globex.jsonl"), "--tenant", "globex", "--no-embeddings")
    assert res.exit_code == 0 and "exported 2 events" in res.output  # type: ignore[attr-defined]
    globex = [json.loads(line) for line in (tmp_path / "globex.jsonl").read_text().splitlines()]
    assert {r["scope"]["tenant_id"] for r in globex} == {"globex"}
    assert globex[0]["fields"]["embedding"] == "<1536 bytes float32>"


def test_audit_chain_passes_after_forget_and_flags_edited_rows(fabric: object, dsn: str) -> None:
    h = make_history(fabric)  # type: ignore[arg-type]
    n = event_count(dsn)
    first = verify_chain(fabric, every=5)
    assert first.ok and first.events == n and first.written == -(-n // 5) and first.checkpoints == 0
    again = verify_chain(fabric, every=5)
    assert again.ok and again.checkpoints == first.written and again.written == 0
    assert again.head_digest == first.head_digest
    anchor = f"{n}:{first.head_digest}"

    row = fetch(dsn, f"SELECT notification_id, originator_id, originator_version, topic, state, {LEAF_SQL}"  # noqa: S608
                " FROM memfabric_events WHERE notification_id = 3")[0]
    assert leaf_hash(row[0], row[1], row[2], row[3], bytes(row[4])) == bytes(row[5])  # type: ignore[arg-type]

    fabric.scope("acme", "u1", "t1").forget(id=h.linked)  # type: ignore[attr-defined]
    after = verify_chain(fabric, every=5, anchor=anchor)  # shredding changes no event row
    assert after.ok and after.anchor_ok is True and after.events == n + 1 and after.written == 1

    with psycopg.connect(dsn) as conn:  # hand edits of event rows
        conn.execute("UPDATE memfabric_events SET state = state || '\\x00'::bytea WHERE notification_id = 3")
        conn.execute("DELETE FROM memfabric_events WHERE notification_id = 7")
    bad = verify_chain(fabric, every=5, anchor=anchor)
    assert not bad.ok and bad.changed == [3] and bad.removed == [7] and bad.inserted == []
    assert bad.anchor_ok is False and bad.written == 0 and not bad.broken

    res = invoke(dsn, "audit", "verify")
    assert res.exit_code == 1  # type: ignore[attr-defined]
    assert "TAMPERED" in res.output and "changed event rows (notification ids): [3]" in res.output  # type: ignore[attr-defined]
    assert "removed event rows (notification ids): [7]" in res.output  # type: ignore[attr-defined]
    assert "anchor:" not in res.output  # type: ignore[attr-defined]  # a tampered log's digest is no anchor
    out = json.loads(invoke(dsn, "audit", "verify", "--json", "--no-checkpoint").output.splitlines()[-1])  # type: ignore[attr-defined]
    assert out["ok"] is False and out["changed"] == [3] and out["removed"] == [7]


def test_audit_chain_flags_inserted_rows_and_edited_checkpoints(fabric: object, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")  # type: ignore[attr-defined]
    notes.remember(kind="fact", content="User prefers metric units")
    with psycopg.connect(dsn) as conn:  # a rolled-back write leaves a gap in the ids
        gap = conn.execute("SELECT nextval(pg_get_serial_sequence('memfabric_events', 'notification_id'))"
                           ).fetchone()[0]  # type: ignore[index]
    notes.remember(kind="fact", content="User lives in Lisbon")
    notes.remember(kind="fact", content="User owns a bicycle")
    res = invoke(dsn, "audit", "checkpoint", "--every", "2")
    assert res.exit_code == 0 and "OK: 3 events hashed" in res.output  # type: ignore[attr-defined]
    assert f"[({gap}, {gap})]" in res.output and "anchor: 4:" in res.output  # type: ignore[attr-defined]

    with psycopg.connect(dsn) as conn:  # forge an event into the gap
        conn.execute(
            "INSERT INTO memfabric_events (originator_id, originator_version, topic, state, notification_id)"
            " SELECT originator_id, 2, topic, state, %s FROM memfabric_events WHERE notification_id = 1",
            (gap,),
        )
    report = verify_chain(fabric, checkpoint=False)
    assert not report.ok and report.inserted == [gap] and not report.changed and not report.removed

    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM memfabric_events WHERE notification_id = %s", (gap,))
        conn.execute("UPDATE mf_audit_chain SET digest = sha256(digest) WHERE position = 3")
    report = verify_chain(fabric, checkpoint=False)
    assert not report.ok and report.broken == ["checkpoint 3 does not match its own leaves (checkpoint edited)"]
    assert not (report.changed or report.removed or report.inserted)
    res = invoke(dsn, "audit", "verify", "--anchor", "nonsense")
    assert res.exit_code == 2 and "POSITION:HEX" in res.output  # type: ignore[attr-defined]
