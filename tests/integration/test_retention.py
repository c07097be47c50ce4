"""Issue 30: retention classes, the sweep (expiry and erasure as events), the regulated
floor, holds, approval references, resumable and idempotent sweeps — on both
backends (a real PostgreSQL per test, and the in-memory reference), on a fake clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain import retention as rules
from memfabric.domain.errors import RetentionError, RetentionFloorError, SupersessionError
from memfabric.domain.lifecycle import load_for_erasure, tombstone
from memfabric.domain.note import Note, note_uuid
from memfabric.domain.scope import Scope
from memfabric.domain.visibility import write_locks
from tests.conftest import fetch

T0 = datetime.now(timezone.utc)
RETENTION = {"ephemeral": "1h", "operational": "10d", "durable": "30d",
             "regulated": {"floor": "7d", "ceiling": "60d"}}

Open = Callable[..., Any]


@pytest.fixture(params=["memory", "postgres"])
def make(request: pytest.FixtureRequest) -> Iterator[Open]:
    """Opens a fabric of the parametrised backend (``retention=`` passed through)."""
    opened: list[Any] = []

    def open_(**kw: Any) -> Any:
        if request.param == "memory":
            fabric = open_memory_fabric(**kw)
        else:
            fabric = open_fabric(request.getfixturevalue("dsn"), **kw)
        opened.append(fabric)
        return fabric
    yield open_
    for fabric in opened:
        fabric.close()


def event_total(fabric: Any) -> int:
    """Events in the log of either backend."""
    if hasattr(fabric, "dsn"):
        return int(fetch(fabric.dsn, "SELECT count(*) FROM memfabric_events")[0][0])  # type: ignore[arg-type]
    return int(fabric.log.event_count())


def types(notes: Any, note_id: str) -> list[str]:
    return [h.type for h in notes.history(note_id)]


def at(days: float) -> datetime:
    return T0 + timedelta(days=days)


def test_default_class_per_kind_recorded_and_explicit_class(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme", "u1")
    fact = notes.remember(kind="fact", content="water boils at 100 degrees")
    proc = notes.remember(kind="procedure", content="restart the router then wait")
    block = notes.remember(kind="working", block="scratch", content="draft")
    eph = notes.remember(kind="fact", content="the user is in a hurry", retention="ephemeral")
    assert (fact.retention, proc.retention, block.retention, eph.retention) == (
        "durable", "durable", "operational", "ephemeral")
    assert notes.history(eph.id)[0].fields["retention"] == "ephemeral"
    assert notes.history(fact.id)[0].fields["retention"] == "durable"  # the default, recorded
    with pytest.raises(ValidationError, match="retention"):
        notes.remember(kind="fact", content="x y z", retention="forever")


def test_a_note_of_an_older_log_reads_its_kinds_default() -> None:
    # a Remembered event without the field (logs before issue 30): the default applies
    note = Note.remember(scope=Scope(tenant_id="t"), note_id="a" * 12, kind="working", content="c",
                         path=None, block="b", subject=None, t_ref=None, valid_from=None, valid_to=None,
                         keywords=[], tags=[], source_entry_ids=[], context=None, links=[],
                         supersedes=None, importance=0.5, consent=None, embedding=None,
                         embedder_id=None, dim=4, token_count=1, cause="caller")
    del note.retention, note.regulated, note.written_at, note.expired_at  # an old snapshot's state
    assert rules.class_of(note) == "operational" and not rules.regulated_label(note)
    assert rules.written_at(note) == note.created_on and rules.expired_at(note) is None


def test_every_class_and_outcome_with_exact_counts(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme", "u1")
    eph = notes.remember(kind="fact", content="ephemeral thought about lunch", retention="ephemeral")
    ops = notes.remember(kind="fact", content="deploy ticket 4411 is open", retention="operational")
    dur = notes.remember(kind="fact", content="the office is in lisbon")
    reg = notes.remember(kind="fact", content="invoice 99 for alice totals 40 euros", retention="regulated")
    held = notes.remember(kind="fact", content="litigation memo about the merger", retention="ephemeral")
    notes.forget(id=held.id, hold=True)
    floor = notes.remember(kind="fact", content="payroll entry for bob march", retention="regulated")
    notes.set_retention(floor.id, "ephemeral")  # shorter: allowed, the regulated label stays
    window = notes.remember(kind="fact", content="the promo code is SPRING",
                            valid_to=T0 + timedelta(hours=2))
    keep = notes.remember(kind="fact", content="gravity pulls things down")

    r = fabric.sweep(at(1))  # ephemeral window (1h) closed; valid_to passed; floor (7d) not
    c = r.counts
    assert c["ephemeral"] == {"expired": 0, "forgotten": 1, "skipped_held": 1, "skipped_floor": 1, "decayed": 0}
    assert c["durable"] == {"expired": 1, "forgotten": 0, "skipped_held": 0, "skipped_floor": 0, "decayed": 0}
    assert sum(r.totals.values()) == 4 and r.changed == 2 and r.complete
    assert notes.get(eph.id).forgotten and notes.get(eph.id).content is None
    assert types(notes, eph.id) == ["Remembered", "Forgotten"]  # one event: the tombstone expires it too
    tomb = notes.history(eph.id)[-1].fields
    assert tomb["cause"] == "retention" and tomb["requested_by"] == "retention-sweep"
    assert tomb["retention"] == "ephemeral" and tomb["at"] == at(1)
    assert notes.get(eph.id).expired_at == at(1)
    expired = notes.get(window.id)
    assert expired.expired_at == at(1) and not expired.forgotten
    assert notes.history(window.id)[-1].fields["reason"] == "interval"
    assert notes.get(held.id).held and notes.get(floor.id).content == "payroll entry for bob march"

    r = fabric.sweep(at(20))  # operational (10d) closed; floor passed
    assert r.counts["operational"]["forgotten"] == 1 and notes.get(ops.id).forgotten
    assert r.counts["ephemeral"] == {"expired": 0, "forgotten": 1, "skipped_held": 1, "skipped_floor": 0, "decayed": 0}
    assert notes.get(floor.id).forgotten

    r = fabric.sweep(at(40))  # durable window (30d): expired, kept
    assert r.counts["durable"]["expired"] == 2  # dur and keep (window was already expired)
    assert not notes.get(dur.id).forgotten and notes.get(dur.id).expired_at == at(40)
    assert notes.history(dur.id)[-1].fields["reason"] == "retention"
    assert not notes.get(keep.id).forgotten

    r = fabric.sweep(at(61))  # regulated ceiling (60d): forgotten
    assert r.counts["regulated"]["forgotten"] == 1 and notes.get(reg.id).forgotten
    assert r.counts["durable"]["expired"] == 0  # already expired: nothing more
    assert notes.get(held.id).held and notes.get(held.id).content is not None  # never touched


def test_a_second_sweep_at_the_same_now_changes_nothing(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme")
    for i in range(5):
        notes.remember(kind="fact", content=f"passing thought number {i} about cats", retention="ephemeral")
    first = fabric.sweep(at(1), batch_size=2)
    assert first.counts["ephemeral"]["forgotten"] == 5 and first.batches == 3
    events = event_total(fabric)
    again = fabric.sweep(at(1), batch_size=2)
    assert again.changed == 0 and again.counts == first.counts and again.complete
    assert event_total(fabric) == events
    later = fabric.sweep(at(1) + timedelta(seconds=1))  # a new sweep finds nothing to change
    assert later.changed == 0 and sum(later.totals.values()) == 0 and later.batches == 0
    assert event_total(fabric) == events  # and, finding nothing due, writes nothing


def old_sweep_erasure(fabric: Any, scope: Scope, note_id: str, now: datetime) -> None:
    """Erase a note the way sweeps before the one-event tombstone did: an ``Expired``
    event (reason ``retention``) then a ``Forgotten`` tombstone without class or ``now``,
    in one unit of work (the events an older log holds)."""
    deps = fabric.service.deps
    with deps.unit_of_work(sorted(write_locks(scope, "tenant"), key=lambda s: s.key)) as uow:
        readable, _, _ = load_for_erasure(uow, [note_uuid(scope, note_id)])
        note = readable[0]
        note.expire(reason="retention", at=now)
        tombstone(uow, [note], hold=False, requested_by=rules.SWEEP_REQUESTED_BY, cause="retention")
        uow.commit()
    deps.store.await_position(uow.position)


def test_an_older_log_with_expired_and_forgotten_pairs_still_replays(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme", "u1")
    old = notes.remember(kind="fact", content="an old passing note on kites", retention="ephemeral")
    new = notes.remember(kind="fact", content="a new passing note on kites", retention="ephemeral")
    old_sweep_erasure(fabric, notes.scope, old.id, at(1))
    assert types(notes, old.id) == ["Remembered", "Expired", "Forgotten"]
    tomb = notes.history(old.id)[-1].fields
    assert tomb.get("retention") is None and tomb.get("at") is None  # the older shape
    r = fabric.sweep(at(1))  # the old pair is not due again; the new note gets one event
    assert r.totals["forgotten"] == 1 and r.changed == 1
    assert types(notes, new.id) == ["Remembered", "Forgotten"]
    before, after = notes.get(old.id), notes.get(new.id)
    assert before.forgotten and after.forgotten and before.content is None is after.content
    assert before.expired_at == after.expired_at == at(1)  # both shapes read the same
    assert before.valid_to == after.valid_to == at(1)
    assert fabric.sweep(at(2)).changed == 0


def test_limit_stops_and_the_next_call_resumes_with_exact_totals(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme")
    for i in range(7):
        notes.remember(kind="fact", content=f"note {i} on the weather in porto", retention="ephemeral")
    part = fabric.sweep(at(1), limit=3, batch_size=2)
    assert not part.complete and part.totals["forgotten"] == 3
    rest = fabric.sweep(at(1), batch_size=2)
    assert rest.complete and rest.resumed and rest.totals["forgotten"] == 7 and rest.changed == 4


def test_dry_run_counts_and_writes_nothing(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme")
    n = notes.remember(kind="fact", content="a fleeting idea about tea", retention="ephemeral")
    dry = fabric.sweep(at(1), dry_run=True)
    assert dry.dry_run and dry.counts["ephemeral"]["forgotten"] == 1 and dry.changed == 0
    assert not notes.get(n.id).forgotten and types(notes, n.id) == ["Remembered"]
    assert fabric.sweep(at(1)).counts["ephemeral"]["forgotten"] == 1  # the real one still runs


def test_tenant_filter_and_per_tenant_windows(make: Open) -> None:
    fabric = make(retention={**RETENTION, "tenants": {"beta": {"ephemeral": "3d"}}})
    a = fabric.scope("acme").remember(kind="fact", content="acme fleeting note", retention="ephemeral")
    b = fabric.scope("beta").remember(kind="fact", content="beta fleeting note", retention="ephemeral")
    r = fabric.sweep(at(1), tenant="beta")
    assert sum(r.totals.values()) == 0  # beta's window is 3 days
    assert not fabric.scope("acme").get(a.id).forgotten  # another tenant: untouched
    r = fabric.sweep(at(1))
    assert r.totals["forgotten"] == 1 and fabric.scope("acme").get(a.id).forgotten
    assert fabric.sweep(at(4)).totals["forgotten"] == 1 and fabric.scope("beta").get(b.id).forgotten


def test_regulated_floor_refuses_forget_unless_an_approval_is_named(make: Open) -> None:
    now = [at(1)]
    fabric = make(retention=RETENTION, clock=lambda: now[0])  # the service is immutable: a fake clock
    notes = fabric.scope("acme")
    reg = notes.remember(kind="fact", content="kyc file of carol", retention="regulated")
    with pytest.raises(RetentionFloorError, match="floor") as err:
        notes.forget(id=reg.id)
    assert err.value.floor == notes.get(reg.id).ingested_at + timedelta(days=7)
    assert types(notes, reg.id) == ["Remembered"]  # nothing written
    assert notes.forget(id=reg.id, hold=True).held  # a hold is always allowed
    notes.release_hold(reg.id)
    kept = fabric.erase_scope("acme")
    assert kept.floor_kept == 1 and kept.deleted == 0 and kept.remaining == 1
    done = notes.forget(id=reg.id, approval="LEGAL-2026-17")
    assert done.deleted == 1
    tomb = notes.history(reg.id)[-1].fields
    assert tomb["approval"] == "LEGAL-2026-17" and tomb["reason"] == "forgotten"
    other = notes.remember(kind="fact", content="aml record of dave", retention="regulated")
    now[0] = at(8)  # past the floor: an ordinary forget works
    assert notes.forget(id=other.id).deleted == 1


def test_regulated_into_a_longer_class_needs_an_approval(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme")
    reg = notes.remember(kind="fact", content="medical note of erin", retention="regulated")
    with pytest.raises(RetentionError, match="approval"):
        notes.set_retention(reg.id, "durable")
    assert types(notes, reg.id) == ["Remembered"]
    moved = notes.set_retention(reg.id, "durable", approval="DPO-88")
    assert moved.retention == "durable" and moved.outcome == "retained"
    change = notes.history(reg.id)[-1]
    assert change.type == "RetentionChanged" and change.fields["approval"] == "DPO-88"
    assert change.fields["previous"] == "regulated"
    notes.set_retention(reg.id, "ephemeral")  # shorter: no approval needed
    with pytest.raises(RetentionError):  # the label stays: back up needs one again
        notes.set_retention(reg.id, "operational")
    plain = notes.remember(kind="fact", content="the cafe opens at nine")
    assert notes.set_retention(plain.id, "ephemeral").retention == "ephemeral"
    assert notes.set_retention(plain.id, "durable").retention == "durable"  # no label: free
    assert notes.history(plain.id)[-1].fields["approval"] is None


def test_expired_notes_never_fold_supersede_expand_or_stay_in_working_value(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme", "u1")
    old = notes.remember(kind="fact", content="the meeting room is on floor three")
    hub = notes.remember(kind="fact", content="quarterly planning summary for the team",
                         retention="regulated")  # not due at day 40 (ceiling 60d)
    notes.link(hub.id, old.id)
    fabric.scope("acme", "u1").remember(kind="working", block="plan", content="step one")
    notes.set_retention(_block_id(notes, "plan"), "durable")
    fabric.sweep(at(40))  # durable window 30d: everything durable is expired
    assert notes.get(old.id).expired_at == at(40)
    assert notes.working_value()["_fabric"]["blocks"] == {}  # the expired block dropped
    again = notes.remember(kind="fact", content="the meeting room is on floor three")
    assert again.outcome == "inserted" and again.id != old.id  # never folded into
    with pytest.raises(SupersessionError, match="expired"):
        notes.remember(kind="fact", content="the meeting room moved to floor four", supersedes=old.id)
    hits = notes.recall("quarterly planning summary", as_of=at(41), expand_links=True).hits
    assert hub.id in [h.id for h in hits] and old.id not in [h.id for h in hits]
    past = notes.recall("meeting room floor three", as_of=old.ingested_at + timedelta(minutes=1)).hits
    assert old.id in [h.id for h in past]  # as_of before the expiry still reads it
    assert [h.type for h in notes.history(old.id)][-1] == "Expired"
    notes.remember(kind="working", block="plan", content="step two")  # a rewrite revives it
    assert list(notes.working_value()["_fabric"]["blocks"]) == ["plan"]


def _block_id(notes: Any, label: str) -> str:
    from memfabric.domain.working import block_note_id  # noqa: PLC0415
    return block_note_id(notes.scope, label)


def test_retention_settings_are_validated(make: Open) -> None:
    with pytest.raises(ValidationError):
        make(retention={"operational": "soon"})
    with pytest.raises(ValidationError):
        make(retention={"regulated": {"floor": "10y", "ceiling": "7y"}})
    with pytest.raises(ValidationError):
        make(retention={"tenants": {"acme": {"ephemeral": "-1d"}}})


def test_settings_are_recorded_for_every_process(dsn: str) -> None:
    with open_fabric(dsn, retention={"ephemeral": "2h", "tenants": {"acme": {"operational": "5d"}}}):
        pass
    with open_fabric(dsn) as other:  # no retention=: the recorded settings
        config = other.service.retention_store.config()
        assert config.for_tenant("x").ephemeral == timedelta(hours=2)
        assert config.for_tenant("acme").operational == timedelta(days=5)
        assert config.for_tenant("x").operational == timedelta(days=90)


def test_recency_half_life_per_class(make: Open) -> None:
    fabric = make(retention={**RETENTION, "half_life": {"ephemeral": "1h"}})
    notes = fabric.scope("acme")
    eph = notes.remember(kind="fact", content="weather today in oslo is rainy", retention="ephemeral")
    dur = notes.remember(kind="fact", content="weather in oslo is often rainy")
    hour = eph.ingested_at + timedelta(hours=1)  # not T0: the module may be imported long before
    res = notes.recall("weather oslo rainy", as_of=hour)
    rec = {e.id: e.recency for e in res.explain}
    assert rec[eph.id] == pytest.approx(0.5, abs=0.01)  # the class's half-life: 1 h
    assert rec[dur.id] > 0.99  # the query's default: 30 days
    own = notes.recall("weather oslo rainy", as_of=hour, scoring={"half_life": timedelta(hours=2)})
    assert {e.id: e.recency for e in own.explain}[eph.id] == pytest.approx(2 ** -0.5, abs=0.01)


def test_a_fold_naming_another_class_records_the_change(make: Open) -> None:
    fabric = make(retention=RETENTION)
    notes = fabric.scope("acme")
    first = notes.remember(kind="fact", content="the wifi password is on the fridge")
    again = notes.remember(kind="fact", content="the wifi password is on the fridge", retention="ephemeral")
    assert again.outcome == "folded" and again.id == first.id and again.retention == "ephemeral"
    change = notes.history(first.id)[-1]
    assert change.type == "RetentionChanged" and change.fields["cause"] == "fold"
    same = notes.remember(kind="fact", content="the wifi password is on the fridge")
    assert same.retention == "ephemeral" and notes.history(first.id)[-1].type == "Folded"
    reg = notes.remember(kind="fact", content="passport number of gina", retention="regulated")
    with pytest.raises(RetentionError, match=r"set_retention\(.*approval=\.\.\.\)"):  # remember takes none
        notes.remember(kind="fact", content="passport number of gina", retention="durable")
    assert [h.type for h in notes.history(reg.id)] == ["Remembered"]  # nothing written


def test_sweep_arguments_are_checked(make: Open) -> None:
    from memfabric.domain.errors import SettingsError  # noqa: PLC0415
    fabric = make(retention=RETENTION)
    with pytest.raises(SettingsError, match="timezone"):
        fabric.sweep(datetime(2030, 1, 1))
    with pytest.raises(SettingsError, match="limit"):
        fabric.sweep(at(1), limit=0)
    with pytest.raises(SettingsError, match="batch_size"):
        fabric.sweep(at(1), batch_size=0)
    with pytest.raises(ValidationError):
        fabric.sweep(at(1), tenant="bad tenant!")
