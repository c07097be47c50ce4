"""Issue 30: the sweep's optional importance decay of idle notes (``ImportanceDecayed``),
off by default — on both backends, on a fake clock (``now`` injected; the notes are
written at the real time ``T0``)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from memfabric.adapters import open_fabric
from memfabric.domain import retention as rules
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp
from tests.integration.test_retention import Open, at, make, types  # noqa: F401 - make: the fixture

DECAY = {"durable": None, "decay": {"after": "30d", "factor": 0.5, "floor": 0.1}}


def test_decay_is_off_by_default(make: Open) -> None:
    fabric = make()
    notes = fabric.scope("acme", "u1")
    n = notes.remember(kind="fact", content="User owns a red kayak", importance=0.8)
    r = fabric.sweep(at(400))
    assert r.totals["decayed"] == 0 and r.changed == 0
    assert notes.get(n.id).importance == 0.8 and "ImportanceDecayed" not in types(notes, n.id)


def test_an_idle_note_loses_importance_once_per_period_down_to_the_floor(make: Open) -> None:
    fabric = make(retention=DECAY)
    notes = fabric.scope("acme", "u1")
    n = notes.remember(kind="fact", content="User owns a red kayak", importance=0.8)
    assert fabric.sweep(at(29)).totals["decayed"] == 0  # not idle for 30 days yet
    first = fabric.sweep(at(31))
    assert first.counts["durable"]["decayed"] == 1 and first.changed == 1
    assert notes.get(n.id).importance == 0.4
    assert fabric.sweep(at(31)).changed == 0  # the same now: recorded, nothing new
    assert fabric.sweep(at(45)).totals["decayed"] == 0  # idle 14 days since the decay
    fabric.sweep(at(62))
    fabric.sweep(at(93))
    assert notes.get(n.id).importance == 0.1  # 0.2 * 0.5 is below the floor: the floor
    assert fabric.sweep(at(200)).totals["decayed"] == 0  # at the floor: never a candidate
    hist = [h for h in notes.history(n.id) if h.type == "ImportanceDecayed"]
    assert [(h.fields["previous"], h.fields["importance"]) for h in hist] == [(0.8, 0.4), (0.4, 0.2), (0.2, 0.1)]
    assert hist[0].fields["at"] == at(31)
    hit = notes.recall("red kayak").hits[0]
    assert hit.id == n.id and hit.importance == pytest.approx(0.1)


def test_held_superseded_working_and_expired_notes_never_decay(make: Open) -> None:
    fabric = make(retention={**DECAY, "durable": "40d"})
    notes = fabric.scope("acme", "u1", "t1")
    held = notes.remember(kind="fact", content="User signed contract 7", importance=0.9)
    notes.forget(id=held.id, hold=True)
    old = notes.remember(kind="fact", content="User lives in Lisbon", subject="home", importance=0.9)
    notes.remember(kind="fact", content="User lives in Porto", subject="home", importance=0.9)
    block = notes.remember(kind="working", block="plan", content="step one")
    live = notes.remember(kind="procedure", content="Deploy with make ship", importance=0.6)
    r = fabric.sweep(at(31))
    assert r.totals["decayed"] == 2, r.counts  # the procedure and Porto, nothing else
    assert notes.get(live.id).importance == 0.3
    assert notes.get(old.id).importance == 0.9 and notes.get(block.id).importance == block.importance
    notes.release_hold(held.id)
    assert notes.get(held.id).importance == 0.9
    r = fabric.sweep(at(41))  # the durable window closes: expiry wins over decay
    assert r.totals["expired"] == 4 and r.totals["decayed"] == 0, r.counts
    assert fabric.sweep(at(75)).totals["decayed"] == 0  # expired notes never decay


def test_a_dry_run_counts_decays_and_writes_nothing(make: Open) -> None:
    fabric = make(retention=DECAY)
    notes = fabric.scope("acme", "u1")
    n = notes.remember(kind="fact", content="User owns a red kayak", importance=0.8)
    dry = fabric.sweep(at(31), dry_run=True)
    assert dry.totals["decayed"] == 1 and notes.get(n.id).importance == 0.8


def test_decay_settings_are_validated_and_per_tenant(make: Open) -> None:
    for bad in ({"after": "never"}, {"after": "30d", "factor": 1.5}, {"after": "30d", "floor": -1},
                {"factor": 0.5}, {"after": "30d", "speed": 2}):
        with pytest.raises(ValidationError):
            rules.RetentionConfig.of({"decay": bad})
    config = rules.RetentionConfig.of({**DECAY, "tenants": {"beta": {"decay": None}}})
    assert config.for_tenant("beta").decay is None and config.for_tenant("acme").decay is not None
    assert rules.RetentionConfig.of(config.to_json()).for_tenant("acme") == config.for_tenant("acme")
    fabric = make(retention=config.to_json())
    a = fabric.scope("acme", "u1").remember(kind="fact", content="alpha fact", importance=0.8)
    b = fabric.scope("beta", "u1").remember(kind="fact", content="beta fact", importance=0.8)
    assert fabric.sweep(at(31)).totals["decayed"] == 1
    assert fabric.scope("acme", "u1").get(a.id).importance == 0.4
    assert fabric.scope("beta", "u1").get(b.id).importance == 0.8


def test_projections_rebuild_identical_after_decay(dsn: str) -> None:
    with open_fabric(dsn, retention=DECAY) as fabric:
        notes = fabric.scope("acme", "u1")
        for i in range(5):
            notes.remember(kind="fact", content=f"User fact number {i} about boats", importance=0.8)
        assert fabric.sweep(at(31)).totals["decayed"] == 5
        admin = ProjectionAdmin.for_fabric(fabric)
        assert all(r.ok for r in admin.verify())
        admin.rebuild()
        assert all(r.ok for r in admin.verify())


def test_a_retention_index_of_an_older_release_is_rebuilt_on_open(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        n = fabric.scope("acme", "u1").remember(kind="fact", content="User owns a red kayak", importance=0.8)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the table as issue 30 first made it
        conn.execute("ALTER TABLE mf_retention DROP COLUMN importance, DROP COLUMN decayed_at")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn, retention=DECAY) as fabric:
        rows: Any = fabric.store.counts_in_scope("acme", None, None)
        assert rows.live == 1
        assert fabric.sweep(at(31)).totals["decayed"] == 1
        assert fabric.scope("acme", "u1").get(n.id).importance == 0.4
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify())
