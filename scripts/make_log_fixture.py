"""Write the log-compatibility fixture ``tests/fixtures/log_v0_1_0.json`` with TODAY's code.

Opens a fabric on a fresh scratch database (a throwaway embedded PostgreSQL unless
``--dsn`` names a server), writes a small fixed set of notes in two scopes that covers
every event type of ``memfabric.domain.note.Note``, and dumps:

- ``events``: every row of ``memfabric_events`` (notification_id, originator_id,
  originator_version, topic, state as base64), in log order;
- ``note_keys``: every row of ``mf_note_keys`` (originator_id, gen, key as base64);
- ``fabric_secret``: the ``mf_fabric_secret`` row (secret as base64);
- ``notes``: the logical names of the notes with their ids, scopes and fixed texts;
- ``expected``: what the public API of this release returns for that log (``get``
  read models, ``history`` event types, ``lineage``, ``working_value``, ``recall`` hit
  order at a fixed ``as_of``, the audit chain head).

``tests/test_log_compat.py`` loads these rows verbatim into an empty database and
checks that the current code still reads them the same way. Re-run this script only
when a new release's format is to be frozen as a *new* fixture file; never regenerate
an existing one to make the test pass.

    python scripts/make_log_fixture.py [--dsn postgresql://...] [--out tests/fixtures/log_v0_1_0.json]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import scratch_database  # noqa: E402

from memfabric.adapters import open_fabric  # noqa: E402
from memfabric.adapters.audit import verify_chain  # noqa: E402
from memfabric.domain.note import Note, note_uuid  # noqa: E402
from memfabric.projections.rebuild import ProjectionAdmin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "log_v0_1_0.json"
FORMAT = "memfabric-log-fixture/1"
RELEASE = "0.1.0"

SCOPES = {
    "A": {"tenant_id": "acme", "resource_id": "user-1", "thread_id": "thread-1"},
    "B": {"tenant_id": "globex", "resource_id": "user-9", "thread_id": None},
}

TEXTS = {
    "prefs": "The user prefers metric units for all measurements",
    "coffee": "The office coffee machine is on the third floor next to the library",
    "deploy_old": "Production deploys happen on Tuesdays",
    "deploy_new": "Production deploys happen on Thursdays after the code freeze",
    "rotation_old": "The staging database password rotates monthly",
    "rotation_new": "The staging database password rotates every two weeks on Friday",
    "restart": "To restart the ingest worker run systemctl restart ingest and watch the logs",
    "runbook": "Runbook for the on-call rotation, paging policy and escalation contacts",
    "address": "The user's home address is 12 Example Street, Springfield",
    "persona_v1": "You are a concise assistant.",
    "persona_v2": "You are a concise assistant who answers in English.",
    "persona_append": "Always use metric units.",
    "task": "Current task: plan the Q3 offsite.",
    "billing": "The customer's billing contact is Dana Okafor in finance",
    "invoices": "Invoices are sent on the first business day of each month",
    "app": "Main application entry point that starts the HTTP server and workers",
    "b_notes": "Follow up on the disputed March invoice.",
}

RECALL_QUERIES = [
    # (scope, query, kinds, as_of: "after" all writes or "before" the first one)
    ("A", "which measurement units does the user prefer", ["fact", "file"], "after"),
    ("A", "when do production deploys happen", ["fact", "file"], "after"),
    ("A", "when do production deploys happen", ["fact"], "before"),  # the superseded note's window
    ("A", "restart the ingest worker", ["procedure"], "after"),
    ("B", "billing contact invoices", ["fact", "file"], "after"),
]


# ------------------------------------------------------------------ serialisation
def jsonable(value: Any) -> Any:
    """JSON form of read-model values: datetimes as ISO strings, tuples as lists."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


VIEW_FIELDS = (
    "id", "kind", "content", "path", "block", "subject", "t_ref", "valid_from", "valid_to",
    "ingested_at", "updated_at", "forgotten_at", "keywords", "tags", "source_entry_ids",
    "context", "links", "supersedes", "superseded_by", "importance", "consent", "version",
    "fold_count", "token_count", "forgotten", "held",
)


def view_json(note: Any) -> dict[str, Any]:
    out = {name: jsonable(getattr(note, name)) for name in VIEW_FIELDS}
    out["scope"] = note.scope.model_dump()
    return out


def b64(raw: Any) -> str:
    return base64.b64encode(bytes(raw)).decode()


# ------------------------------------------------------------------------ writing
def write_notes(fabric: Any) -> dict[str, dict[str, Any]]:
    """Write the fixed note set; returns ``{name: {"scope", "id", ...}}``."""
    a = fabric.scope(**SCOPES["A"])
    b = fabric.scope(**SCOPES["B"])
    notes: dict[str, dict[str, Any]] = {}

    def record(name: str, scope: str, note: Any, text: str | None = None, **extra: Any) -> None:
        notes[name] = {"scope": scope, "id": note.id, "kind": note.kind, "text": text, **extra}

    # --- scope A -------------------------------------------------------------
    n = a.remember(kind="fact", content=TEXTS["prefs"], tags=["prefs"], keywords=["units"],
                   source_entry_ids=["msg-1"], importance=0.7, context="settings chat",
                   consent={"visibility": "resource", "granted": True, "purposes": ["personalisation"]})
    assert n.outcome == "inserted", n.outcome
    record("prefs", "A", n, TEXTS["prefs"])
    again = a.remember(kind="fact", content=TEXTS["prefs"], tags=["settings"], source_entry_ids=["msg-7"])
    assert again.outcome == "folded" and again.id == n.id, again.outcome  # Folded

    n = a.remember(kind="fact", content=TEXTS["coffee"], tags=["office"])
    assert n.outcome == "inserted", n.outcome
    record("coffee", "A", n, TEXTS["coffee"])

    old = a.remember(kind="fact", content=TEXTS["deploy_old"], subject="team/deploy-day")
    assert old.outcome == "inserted", old.outcome
    record("deploy_old", "A", old, TEXTS["deploy_old"])
    new = a.remember(kind="fact", content=TEXTS["deploy_new"], subject="team/deploy-day")
    assert new.outcome == "superseding" and new.supersedes == old.id, new.outcome  # Superseded (subject)
    record("deploy_new", "A", new, TEXTS["deploy_new"])

    old = a.remember(kind="fact", content=TEXTS["rotation_old"], tags=["security"])
    assert old.outcome == "inserted", old.outcome
    record("rotation_old", "A", old, TEXTS["rotation_old"])
    new = a.remember(kind="fact", content=TEXTS["rotation_new"], supersedes=old.id)
    assert new.outcome == "superseding", new.outcome  # Superseded (explicit)
    record("rotation_new", "A", new, TEXTS["rotation_new"])

    n = a.remember(kind="procedure", content=TEXTS["restart"], keywords=["ingest"])
    assert n.outcome == "inserted", n.outcome
    record("restart", "A", n, TEXTS["restart"])

    n = a.remember(kind="file", path="docs/runbook.md", content=TEXTS["runbook"])
    assert n.outcome == "inserted", n.outcome
    record("runbook", "A", n, TEXTS["runbook"])
    moved = a.repoint("docs/runbook.md", "docs/oncall/runbook.md")  # Repointed
    assert moved.repointed == (n.id,), moved

    n = a.remember(kind="fact", content=TEXTS["address"], tags=["pii"])
    assert n.outcome == "inserted", n.outcome
    record("address", "A", n, TEXTS["address"])
    gone = a.forget(id=n.id, requested_by="dpo@acme")  # Forgotten, reason forgotten
    assert gone.deleted == 1, gone

    n = a.remember(kind="working", block="persona", content=TEXTS["persona_v1"])
    assert n.outcome == "inserted", n.outcome
    record("persona", "A", n, None, block="persona")
    n = a.remember(kind="working", block="persona", content=TEXTS["persona_v2"])  # BlockWritten
    assert n.outcome == "replaced", n.outcome
    n = a.append_block("persona", TEXTS["persona_append"])  # BlockAppended
    assert n.outcome == "appended", n.outcome
    n = a.remember(kind="working", block="task", content=TEXTS["task"])
    record("task", "A", n, TEXTS["task"], block="task")

    # Linked and Evolved have no public caller in this release: trigger them on an
    # aggregate and save it the way the service saves aggregates.
    service = fabric.service
    scope_a = a.scope

    def change(name: str, fn: Any) -> None:
        agg = service.repository.get(note_uuid(scope_a, notes[name]["id"]))
        assert isinstance(agg, Note)
        fn(agg)
        with service.store.write(scope_a):
            service.save(agg, projected=[agg])

    change("coffee", lambda agg: agg.link(
        [{"id": notes["prefs"]["id"], "relation": "related", "weight": 0.5}], cause="caller"))
    change("restart", lambda agg: agg.evolve(
        context="operations runbook", keywords=["systemctl", "worker"], tags=["ops"], cause="linker"))

    # --- scope B -------------------------------------------------------------
    n = b.remember(kind="fact", content=TEXTS["billing"], tags=["billing"])
    record("billing", "B", n, TEXTS["billing"])
    n = b.remember(kind="fact", content=TEXTS["prefs"])  # same text as in A: another aggregate
    assert n.outcome == "inserted", n.outcome
    record("b_prefs", "B", n, TEXTS["prefs"])
    n = b.remember(kind="fact", content=TEXTS["invoices"], tags=["billing"])
    record("invoices", "B", n, TEXTS["invoices"])
    held = b.forget(id=n.id, hold=True, requested_by="legal@globex")  # Forgotten, reason legal_hold
    assert held.held and held.deleted == 0, held
    n = b.remember(kind="file", path="src/app.py", content=TEXTS["app"])
    record("app", "B", n, TEXTS["app"])
    n = b.remember(kind="working", block="notes", content=TEXTS["b_notes"])
    record("b_notes", "B", n, TEXTS["b_notes"], block="notes")
    return notes


# ------------------------------------------------------------------------ reading
def expected_section(
    fabric: Any, notes: dict[str, dict[str, Any]], times: dict[str, datetime]
) -> dict[str, Any]:
    handles = {name: fabric.scope(**s) for name, s in SCOPES.items()}
    out: dict[str, Any] = {"notes": {}, "working_value": {}, "recall": [],
                           "as_of": {k: v.isoformat() for k, v in times.items()}}
    types: Counter[str] = Counter()
    for name, info in notes.items():
        h = handles[info["scope"]]
        hist = h.history(info["id"])
        lin = h.lineage(info["id"])
        types.update(e.type for e in hist)
        entry: dict[str, Any] = {
            "get": view_json(h.get(info["id"])),
            "history": [e.type for e in hist],
            "history_causes": [e.cause for e in hist],
            "history_erased": [list(e.erased) for e in hist],
            "lineage": {
                "predecessors": lin.predecessors,
                "successors": lin.successors,
                "folds": len(lin.folds),
                "links": jsonable(lin.links),
                "tombstone_reason": (lin.tombstone or {}).get("reason"),
            },
        }
        if info["text"] is not None and (lin.tombstone is not None):
            entry["verify_content"] = h.verify_content(info["id"], info["text"])
        out["notes"][name] = entry
    for name, h in handles.items():
        out["working_value"][name] = jsonable(h.working_value())
    for scope, query, kinds, when in RECALL_QUERIES:
        res = handles[scope].recall(query, kinds=kinds, as_of=times[when])
        out["recall"].append({"scope": scope, "query": query, "kinds": kinds, "as_of": when,
                              "ids": [hit.id for hit in res.hits]})
    report = verify_chain(fabric, checkpoint=False)
    assert report.ok, report
    out["audit"] = {"head": report.head, "events": report.events, "head_digest": report.head_digest}
    out["event_types"] = dict(sorted(types.items()))
    return out


def dump_tables(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        events = conn.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state"
            " FROM memfabric_events ORDER BY notification_id").fetchall()
        keys = conn.execute(
            "SELECT originator_id, gen, key FROM mf_note_keys ORDER BY originator_id, gen").fetchall()
        secret = conn.execute("SELECT id, secret FROM mf_fabric_secret").fetchall()
    assert len(secret) == 1, secret
    return {
        "events": [
            {"notification_id": nid, "originator_id": str(oid), "originator_version": ver,
             "topic": topic, "state": b64(state)}
            for nid, oid, ver, topic, state in events
        ],
        "note_keys": [{"originator_id": str(oid), "gen": gen, "key": b64(key)} for oid, gen, key in keys],
        "fabric_secret": {"id": secret[0][0], "secret": b64(secret[0][1])},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=None, help="server to create the scratch database on (default: embedded)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    import memfabric.adapters.embedders as embedders

    with scratch_database(args.dsn, "mf-log-fixture") as dsn:
        with open_fabric(dsn) as fabric:
            before = datetime.now(timezone.utc)
            notes = write_notes(fabric)
            after = datetime.now(timezone.utc)
            admin = ProjectionAdmin.for_fabric(fabric)
            assert all(r.ok for r in admin.verify()), "projections differ from the log"
            expected = expected_section(fabric, notes, {"before": before, "after": after})
            embedder = {"id": fabric.service.embedder.id, "dim": fabric.service.embedder.dim}
            tables = dump_tables(dsn)
    doc = {
        "format": FORMAT,
        "release": RELEASE,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "generator": "scripts/make_log_fixture.py",
        "embedder": embedder,
        "scopes": SCOPES,
        "notes": notes,
        **tables,
        "expected": expected,
    }
    assert embedders.HashEmbedder().id == embedder["id"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text) / 1024:.1f} KB): {len(tables['events'])} events, "
          f"{len(tables['note_keys'])} keys; event types {expected['event_types']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
