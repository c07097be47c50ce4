"""The standing attack suite, reduced size (``scripts/attack.py`` runs it at full size)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.audit import verify_chain
from memfabric.domain.errors import EventIntegrityError, FabricError
from tests.conftest import event_count
from tests.reliability import _attacks, _isolation, _kills, _soak

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def test_concurrent_same_fact_writers(dsn: str) -> None:
    res = _attacks.concurrent_same_fact(dsn, rounds=1, procs=4)
    assert res["failures"] == 0, res


def test_kill_9_writer_loses_no_acknowledged_write(dsn: str, tmp_path: object) -> None:
    res = _attacks.kill_writer(dsn, str(tmp_path), runs=1, seconds=1.5)
    assert res["attempts"] > 0 and res["lost"] == 0 and res["failures"] == 0, res


def test_raw_dump_erasure_proof(dsn: str) -> None:
    res = _attacks.erasure_dump(dsn, notes_n=5)
    assert res["leaks"] == 0, res


def test_raw_dump_sees_live_content(fabric: Fabric, dsn: str) -> None:
    """The scan itself works: live content is found (in the recall index)."""
    fabric.scope("acme").remember(kind="fact", content="visiblecanary7 lives here")
    assert any("mf_recall_index" in h for h in _attacks.text_tables(dsn, "visiblecanary7"))


TEXT = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["", " ", "\x00", "\ud800x"[1:], "a" * 9000, "'; DROP TABLE mf_recall_index; --", "%_\\", "<erased>"])
IDS = st.none() | st.text(max_size=80) | st.sampled_from(["", "../x", "a" * 300, "\x00", "  "])


@SETTINGS
@given(content=TEXT, note_id=IDS, query=TEXT, tags=st.lists(TEXT, max_size=3))
def test_hostile_inputs_are_typed_errors_or_success(fabric: Fabric, dsn: str, content: str,
                                                    note_id: str | None, query: str, tags: list[str]) -> None:
    notes = fabric.scope("fuzz", "u", "t")
    for action in ("remember", "recall", "forget"):
        before = event_count(dsn)
        try:
            if action == "remember":
                kw = {"id": note_id} if note_id is not None else {}
                notes.remember(kind="fact", content=content, tags=tags, **kw)
            elif action == "recall":
                notes.recall(query)
            else:
                notes.forget(id=note_id if note_id is not None else content)
        except (FabricError, ValidationError, ValueError):
            assert event_count(dsn) == before, action


SCOPES = [("a", "r", "t"), ("a", "r", "t2"), ("a", "r2", "t"), ("ab", "r", "t"), ("a", "", ""), ("ab", "r2", "t2")]


def _visible(note: tuple[str, str, str, str], viewer: tuple[str, str, str]) -> bool:
    t, r, th, vis = note
    return t == viewer[0] and ((r, th) == viewer[1:] or vis == "tenant"
                               or (vis == "resource" and r == viewer[1] and r != ""))


@SETTINGS
@given(ops=st.lists(st.tuples(st.integers(0, len(SCOPES) - 1),
                              st.sampled_from(["thread", "resource", "tenant"])), min_size=1, max_size=8))
def test_model_tenants_and_visibility(fabric: Fabric, dsn: str, ops: list[tuple[int, str]]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("TRUNCATE mf_recall_index")  # projections only: each example starts empty
    model: dict[str, tuple[str, str, str, str]] = {}
    for n, (si, vis) in enumerate(ops):
        t, r, th = SCOPES[si]
        notes = fabric.scope(t, r or None, th or None)
        word = f"zq{n}word"
        m = notes.remember(kind="fact", content=f"fact {word} shared", consent={"visibility": vis},
                           consolidate=False)
        model[m.id] = (t, r, th, vis)
    for viewer in SCOPES:
        notes = fabric.scope(viewer[0], viewer[1] or None, viewer[2] or None)
        expected = {i for i, v in model.items() if _visible(v, viewer)}
        got = {h.id for h in notes.recall("shared", top_k=50).hits} if expected else set()
        assert got == expected, viewer
        assert {n.id for n in notes.list(limit=100).items} == expected, viewer
        assert notes.count() == len(expected), viewer
        for i in model:
            if i not in expected:
                with pytest.raises(FabricError):
                    notes.get(i)


@pytest.mark.parametrize("attack", ["state", "delete", "insert", "reorder"])
def test_tampering_is_detected(fabric: Fabric, dsn: str, attack: str) -> None:
    notes = fabric.scope("acme", "u", "t")
    made = [notes.remember(kind="fact", content=f"ledger line {i}", consolidate=False) for i in range(4)]
    notes.remember(kind="fact", content="ledger line 0 revised", supersedes=made[0].id)
    assert verify_chain(fabric).ok
    with psycopg.connect(dsn) as conn:
        if attack == "state":
            conn.execute("UPDATE memfabric_events SET state = state || '\\x00'::bytea"
                         " WHERE notification_id = 2")
        elif attack == "delete":
            conn.execute("DELETE FROM memfabric_events WHERE notification_id = 2")
        elif attack == "insert":
            # into the checkpointed range (an appended row is a new write, not tampering)
            conn.execute("INSERT INTO memfabric_events (notification_id, originator_id, originator_version,"
                         " topic, state) SELECT 0, originator_id, originator_version + 100, topic, state"
                         " FROM memfabric_events WHERE notification_id = 1")
        else:
            conn.execute("UPDATE memfabric_events SET originator_version = originator_version + 10"
                         " WHERE notification_id = 1")
    assert not verify_chain(fabric, checkpoint=False).ok, attack


def test_altered_key_row_is_detected_on_decode(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="sealed ledger line")
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE mf_note_keys SET key = %s", (bytes(32),))
    fabric.log.keys._cache.clear()  # noqa: SLF001 - read the keys again
    with pytest.raises(EventIntegrityError, match="key fault"):
        notes.get(n.id)


# --- issue 28: kill -9 of every kind of process, isolation reads, a soak ------------

@pytest.mark.parametrize("kind", _kills.KINDS)
def test_kill_9_of_each_kind_loses_no_acknowledged_operation(dsn: str, tmp_path: object, kind: str) -> None:
    """One cycle per kind (scripts/attack.py runs 25-40): the victim killed mid-operation,
    every acknowledged operation readable, the next open / rebuild / migration works,
    projections verify and audit verify clean."""
    res = _kills.kill_kind(dsn, str(tmp_path), kind, cycles=1, seconds=0.5, prefill=min(_kills.PREFILL[kind], 300))
    assert res["kills"] == 1 and res["attempts"] > 0, res
    assert res["lost"] == 0 and res["failures"] == 0, res


def test_kill_check_counts_an_acknowledgement_that_is_not_in_the_log(dsn: str) -> None:
    """The check after a kill is not vacuous: an acknowledged id the log does not hold is
    lost, and a line cut by the kill is no acknowledgement."""
    with open_fabric(dsn) as fabric:
        made = fabric.scope(_kills.TENANT, "u", "bulk").remember(kind="fact", content="a real write")
        entry = fabric.scope(_kills.TENANT, "u", "ledger").conversation().append("user", "a real turn")
    acked = [("n", made.id), ("n", "0123456789ab"), ("l", entry.id), ("l", "ba9876543210")]
    assert _kills.check(dsn, acked, "bulk") == (2, 0)


def test_read_acks_skips_a_line_cut_by_the_kill(tmp_path: Path) -> None:
    path = tmp_path / "acks"
    path.write_text("n 0123456789ab\nl ba9876543210\nn 0123")
    assert _kills.read_acks(str(path)) == [("n", "0123456789ab"), ("l", "ba9876543210")]


def test_isolation_reads_leak_nothing(dsn: str) -> None:
    res = _isolation.isolation_reads(dsn, reads=400, per_visibility=1)
    assert res["attempts"] == 400 and res["failures"] == 0, res
    assert res["leaks"] == 0 and res["cross_tenant"] == 0, res


def test_isolation_check_sees_ids_and_content_of_other_scopes(fabric: Fabric) -> None:
    """The leak check is not vacuous: what a tenant's own reader gets, checked as if
    another tenant's reader or another user had got it, is a leak of ids and content."""
    model = _isolation.seed(fabric, per_visibility=1)
    canaries = {it.canary: it for it in model.values()}
    own = repr(fabric.scope("ta", "r1", "h1").list(limit=1000))
    assert _isolation.check_result(own, ("ta", "r1", "h1"), model, canaries) == {
        "ids": 0, "content": 0, "cross_tenant": 0}
    other_tenant = _isolation.check_result(own, ("tb", "r1", "h1"), model, canaries)
    assert other_tenant["ids"] > 0 and other_tenant["content"] > 0
    assert other_tenant["cross_tenant"] == other_tenant["ids"] + other_tenant["content"]
    other_user = _isolation.check_result(own, ("ta", "r2", "h1"), model, canaries)
    assert other_user["ids"] > 0 and other_user["cross_tenant"] == 0


def test_soak_has_no_unexpected_error(dsn: str) -> None:
    res = _soak.soak(dsn, seconds=2.0, threads=4, procs=2)
    assert res["attempts"] > 0 and res["failures"] == 0 and res["lost"] == 0, res
