"""Log compatibility: the event log written by release 0.1.0 must stay readable.

``tests/fixtures/log_v0_1_0.json`` was written by ``scripts/make_log_fixture.py`` with
the 0.1.0 code: every event row, every note-key row and the fabric secret of a small
fabric covering every ``Note`` event type, plus what that release's public API returned
for it. These tests load the rows verbatim into an empty database and check that
today's code reads the same notes, histories, lineage, working values and recall
order, rebuilds identical projections from the log and verifies the audit chain.

Never regenerate the fixture to make these tests pass: a failure here means stored
logs of 0.1.0 would read differently (or not at all) after the change. Keep the
public entry points only (``open_fabric``, ``Fabric.scope`` handles,
``ProjectionAdmin.for_fabric``, ``verify_chain``); storage details live in
:func:`load_log_rows` alone.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.projections.rebuild import ProjectionAdmin

FIXTURE = Path(__file__).parent.parent / "fixtures" / "log_v0_1_0.json"

ALL_EVENT_TYPES = {
    "Remembered", "Folded", "Superseded", "Linked", "Evolved", "Repointed",
    "BlockWritten", "BlockAppended", "Forgotten",
}


# ------------------------------------------------------- storage internals, here only
EVENTS_TABLE = "memfabric_events"
KEYS_TABLE = "mf_note_keys"
SECRET_TABLE = "mf_fabric_secret"


def load_log_rows(dsn: str, doc: dict[str, Any]) -> None:
    """Insert the fixture's event rows (with their notification ids), note keys and
    fabric secret verbatim into the tables a first ``open_fabric`` created."""
    b64 = base64.b64decode
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {EVENTS_TABLE}"  # noqa: S608
            " (notification_id, originator_id, originator_version, topic, state)"
            " VALUES (%s, %s, %s, %s, %s)",
            [(e["notification_id"], UUID(e["originator_id"]), e["originator_version"],
              e["topic"], b64(e["state"])) for e in doc["events"]],
        )
        cur.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'notification_id'),"
            f" (SELECT max(notification_id) FROM {EVENTS_TABLE}))",  # noqa: S608
            (EVENTS_TABLE,),
        )
        cur.executemany(
            f"INSERT INTO {KEYS_TABLE} (originator_id, gen, key) VALUES (%s, %s, %s)",  # noqa: S608
            [(UUID(k["originator_id"]), k["gen"], b64(k["key"])) for k in doc["note_keys"]],
        )
        cur.execute(f"DELETE FROM {SECRET_TABLE}")  # noqa: S608
        secret = doc["fabric_secret"]
        cur.execute(f"INSERT INTO {SECRET_TABLE} (id, secret) VALUES (%s, %s)",  # noqa: S608
                    (secret["id"], b64(secret["secret"])))


# ------------------------------------------------------------------------ helpers
def jsonable(value: Any) -> Any:
    """The fixture's JSON form of read-model values (same as the generator's; typed
    values of today's read model, such as ``Link`` and ``ConsentInfo``, as their dicts)."""
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def view_json(note: Any, fields: list[str]) -> dict[str, Any]:
    out = {name: jsonable(getattr(note, name)) for name in fields if name != "scope"}
    out["scope"] = note.scope.model_dump()
    return out


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture
def old_fabric(dsn: str, doc: dict[str, Any]) -> Iterator[Fabric]:
    """A fabric whose whole log (and keys and secret) is the fixture's."""
    with open_fabric(dsn):
        pass  # create every table on an empty database
    load_log_rows(dsn, doc)
    with open_fabric(dsn) as fabric:
        yield fabric


def handle(fabric: Fabric, doc: dict[str, Any], scope: str) -> Any:
    return fabric.scope(**doc["scopes"][scope])


# -------------------------------------------------------------------------- tests
def test_fixture_covers_every_event_type(doc: dict[str, Any]) -> None:
    types = Counter(e["topic"].rsplit(".", 1)[-1] for e in doc["events"])
    assert set(types) == ALL_EVENT_TYPES
    assert dict(sorted(types.items())) == doc["expected"]["event_types"]
    kinds = {n["kind"] for n in doc["notes"].values()}
    assert kinds == {"fact", "procedure", "file", "working"}
    reasons = {n["lineage"]["tombstone_reason"] for n in doc["expected"]["notes"].values()}
    assert {"forgotten", "legal_hold"} <= reasons


def test_reads_match_release_0_1_0(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    for name, info in doc["notes"].items():
        want = doc["expected"]["notes"][name]
        notes = handle(old_fabric, doc, info["scope"])
        got = notes.get(info["id"])
        assert view_json(got, list(want["get"])) == want["get"], name

        hist = notes.history(info["id"])
        assert [e.type for e in hist] == want["history"], name
        assert [e.cause for e in hist] == want["history_causes"], name
        assert [list(e.erased) for e in hist] == want["history_erased"], name

        lin = notes.lineage(info["id"])
        assert lin.predecessors == want["lineage"]["predecessors"], name
        assert lin.successors == want["lineage"]["successors"], name
        assert len(lin.folds) == want["lineage"]["folds"], name
        assert jsonable(lin.links) == want["lineage"]["links"], name
        assert (lin.tombstone or {}).get("reason") == want["lineage"]["tombstone_reason"], name
        if "verify_content" in want:
            assert notes.verify_content(info["id"], info["text"]) is want["verify_content"], name
            assert notes.verify_content(info["id"], info["text"] + " (changed)") is False, name

    for scope, value in doc["expected"]["working_value"].items():
        assert jsonable(handle(old_fabric, doc, scope).working_value()) == value, scope


def test_forgotten_and_held_notes(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    notes = doc["notes"]
    reason = {n: w["lineage"]["tombstone_reason"] for n, w in doc["expected"]["notes"].items()}
    forgotten = [n for n, r in reason.items() if r == "forgotten"]
    held = [n for n, r in reason.items() if r == "legal_hold"]
    assert forgotten and held
    for name in forgotten:
        h = handle(old_fabric, doc, notes[name]["scope"])
        note = h.get(notes[name]["id"])
        assert note.forgotten and not note.held and note.content is None and note.forgotten_at
        hist = h.history(notes[name]["id"])
        assert hist[0].fields["content"] == "<erased>" and "content" in hist[0].erased
        assert notes[name]["text"] not in json.dumps(jsonable([e.fields for e in hist]))
        assert h.verify_content(notes[name]["id"], notes[name]["text"]) is True
    for name in held:
        h = handle(old_fabric, doc, notes[name]["scope"])
        note = h.get(notes[name]["id"])
        assert note.held and not note.forgotten and note.content == notes[name]["text"]
    for query in doc["expected"]["recall"]:
        res = handle(old_fabric, doc, query["scope"]).recall(query["query"], kinds=query["kinds"], min_relevance=0)
        ids = [hit.id for hit in res.hits]
        assert not {notes[n]["id"] for n in forgotten + held} & set(ids)


def test_recall_order_matches_release_0_1_0(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    assert {"id": old_fabric.service.embedder.id, "dim": old_fabric.service.embedder.dim} == doc["embedder"]
    times = {k: datetime.fromisoformat(v) for k, v in doc["expected"]["as_of"].items()}
    for query in doc["expected"]["recall"]:
        res = handle(old_fabric, doc, query["scope"]).recall(
            query["query"], kinds=query["kinds"], as_of=times[query["as_of"]],
            min_relevance=0,  # 0.1.0 had no relevance floor
            expand_links=False,  # nor links in the ranking (issue 15: linked hits gain a link term)
            scoring={"recency_weight": 0.1, "importance_weight": 0.1})  # 0.1.0's bonus weights (issue 29: 0.01)
        assert [hit.id for hit in res.hits] == query["ids"], query


def test_projections_rebuild_and_verify(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    admin = ProjectionAdmin.for_fabric(old_fabric)
    assert all(r.ok for r in admin.verify()), "catch-up projections differ from a replay"
    report = admin.rebuild()
    assert report.events == len(doc["events"])
    assert report.position == doc["events"][-1]["notification_id"]
    reports = admin.verify()
    assert reports and all(r.ok for r in reports), [r for r in reports if not r.ok]
    # the rebuilt projections serve the same reads
    test_recall_order_matches_release_0_1_0(old_fabric, doc)
    for scope, value in doc["expected"]["working_value"].items():
        assert jsonable(handle(old_fabric, doc, scope).working_value()) == value, scope


def test_audit_chain_matches_release_0_1_0(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    want = doc["expected"]["audit"]
    report = verify_chain(old_fabric)
    assert report.ok and not report.gaps, report
    got = (report.head, report.events, report.head_digest)
    assert got == (want["head"], want["events"], want["head_digest"])
    again = verify_chain(old_fabric, anchor=f"{want['head']}:{want['head_digest']}")
    assert again.ok and again.anchor_ok is True and again.checkpoints == 1


def test_new_writes_continue_the_log(old_fabric: Fabric, doc: dict[str, Any]) -> None:
    """Today's writer appends after the old log (the sequence was bumped) and can fold
    into, forget and append to notes and working blocks written by 0.1.0."""
    info = doc["notes"]["prefs"]
    notes = handle(old_fabric, doc, info["scope"])
    folded = notes.remember(kind="fact", content=info["text"], tags=["again"])
    assert folded.outcome == "folded" and folded.id == info["id"]
    assert notes.history(info["id"])[-1].type == "Folded"
    assert notes.forget(id=info["id"]).deleted == 1
    block = doc["notes"]["persona"]  # block ids are derived from (scope, label): must not move
    appended = handle(old_fabric, doc, block["scope"]).append_block(block["block"], "Be brief.")
    assert appended.outcome == "appended" and appended.id == block["id"]
    want = doc["expected"]["notes"]["persona"]["get"]
    assert appended.content == want["content"] + "\nBe brief."
    report = verify_chain(old_fabric, checkpoint=False)
    assert report.ok and report.head == doc["events"][-1]["notification_id"] + 3
