"""Regression tests of issue 17's defects 2 and 3 (bulk import vs other tenants; a key
fault must not block erasure)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from memfabric.adapters import Fabric
from memfabric.domain.errors import EventIntegrityError
from tests.conftest import fetch


# ------------------------------------------------------------------- defect 2
def test_defect_2_bulk_import_does_not_stall_other_tenants(fabric: Fabric) -> None:
    b = fabric.scope("tenant-b", "u", "t")
    b.remember(kind="fact", content="tenant b knows the password policy")
    stop = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []

    def loop(action: str) -> None:
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                if action == "write":
                    b.remember(kind="fact", content=f"tenant b fact number {i}", consolidate=False)
                else:
                    b.recall("password policy", top_k=3)
            except BaseException as exc:  # noqa: BLE001 - recorded and asserted below
                errors.append(exc)
                return
            latencies.append(time.monotonic() - t0)
            i += 1
            time.sleep(0.02)

    threads = [threading.Thread(target=loop, args=(a,)) for a in ("write", "recall")]
    for t in threads:
        t.start()
    try:
        items = [{"kind": "fact", "content": f"tenant a imported fact {i} about topic {i % 97}"}
                 for i in range(3000)]
        fabric.scope("tenant-a", "u", "t").remember_many(items, consolidate=False)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors
    assert latencies and max(latencies) < 2.0, max(latencies)
    assert fabric.scope("tenant-a", "u", "t").count() == 3000


# ------------------------------------------------------------------- defect 3
def _alter_key(dsn: str, fabric: Fabric, aggregate_id: object) -> None:
    with psycopg.connect(dsn) as conn:
        n = conn.execute("UPDATE mf_note_keys SET key = %s WHERE originator_id = %s",
                         (bytes(32), aggregate_id)).rowcount
        assert n >= 1
    fabric.log.keys._cache.clear()


def _text_everywhere(dsn: str, needle: str) -> int:
    rows = fetch(dsn, "SELECT count(*) FROM mf_recall_index WHERE content LIKE %s", (f"%{needle}%",))
    return int(rows[0][0])  # type: ignore[call-overload]


def test_defect_3_key_fault_is_named_as_such(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="secret pineapple recipe")
    from memfabric.domain.note import note_uuid
    _alter_key(dsn, fabric, note_uuid(notes.scope, n.id))
    with pytest.raises(EventIntegrityError, match=r"key fault or changed bytes") as info:
        notes.get(n.id)
    assert "generation" in str(info.value)


def test_defect_3_forget_destroys_an_undecryptable_note(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="secret pineapple recipe")
    from memfabric.domain.note import note_uuid
    aid = note_uuid(notes.scope, n.id)
    _alter_key(dsn, fabric, aid)
    res = notes.forget(id=n.id)
    assert res.deleted == 1
    assert _text_everywhere(dsn, "pineapple") == 0
    assert fetch(dsn, "SELECT count(*) FROM mf_note_keys WHERE originator_id = %s", (aid,))[0][0] == 0
    tomb = [h for h in notes.history(n.id) if h.type == "Forgotten"]
    assert tomb and tomb[-1].cause == "key_fault"
    assert notes.forget(id=n.id).deleted == 0  # the log reads again: the note is forgotten


def test_defect_3_erase_scope_erases_around_a_key_fault(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u", "t")
    made = notes.remember_many([{"kind": "fact", "content": f"customer record {i} zebra{i}"}
                                for i in range(250)], consolidate=False)
    from memfabric.domain.note import note_uuid
    bad = made[7].id
    _alter_key(dsn, fabric, note_uuid(notes.scope, bad))
    res = fabric.erase_scope("acme", requested_by="dpo")
    assert res.deleted == 250 and res.remaining == 0 and res.failed == ()
    assert res.unreadable == (bad,)
    assert fetch(dsn, "SELECT count(*) FROM mf_recall_index")[0][0] == 0
    assert fetch(dsn, "SELECT count(*) FROM mf_note_keys")[0][0] == 0
