"""Issue 31: the note-versions projection (transaction-time ranges) is rebuilt from the
log like every projection and verified identical."""

from __future__ import annotations

from typing import Any

import psycopg

from memfabric.adapters import Fabric
from memfabric.projections.rebuild import ProjectionAdmin


def _rows(dsn: str) -> list[tuple[Any, ...]]:
    """Every version: the closed ones and the current ones (the live recall-index rows)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT note_id, version, content, recorded_from, recorded_to, superseded_by FROM mf_note_versions"
            " UNION ALL SELECT note_id, version, content, recorded_from, NULL, superseded_by FROM mf_recall_index"
            " ORDER BY note_id, version").fetchall()


def _edges(dsn: str) -> list[tuple[Any, ...]]:
    """The edges of every version (a current version's: the live link graph's)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT from_note_id, from_version, to_note_id, relation FROM mf_link_versions"
                            " UNION ALL SELECT g.from_note_id, i.version, g.to_note_id, g.relation FROM mf_link_graph g"
                            " JOIN mf_recall_index i ON i.aggregate_id = g.from_aggregate_id"
                            " ORDER BY 1, 2, 3").fetchall()


def _history(fabric: Fabric) -> None:
    notes = fabric.scope("t1", "u1", "th1")
    a = notes.remember(kind="fact", content="the deploy runs on fridays", subject="deploy day")
    notes.remember(kind="fact", content="the deploy runs on fridays", subject="deploy day")  # fold
    b = notes.remember(kind="fact", content="the deploy runs on mondays", subject="deploy day")  # supersedes
    c = notes.remember(kind="fact", content="the cache is redis")
    notes.link(c.id, b.id, "related", 0.5)
    d = notes.remember(kind="fact", content="the password rotates weekly")
    notes.forget(id=d.id)
    e = notes.remember(kind="procedure", content="restart the worker with systemctl")
    notes.forget(id=e.id, hold=True)
    notes.release_hold(e.id)
    assert a.id != b.id


def test_every_event_of_a_recallable_note_is_one_version_closed_by_the_next(fabric: Fabric, dsn: str) -> None:
    _history(fabric)
    rows = _rows(dsn)
    by_note: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_note.setdefault(row[0], []).append(row)
    assert "the password rotates weekly" not in {r[2] for r in rows}  # forgotten: no byte kept
    for versions in by_note.values():
        for older, newer in zip(versions, versions[1:], strict=False):
            assert older[4] is not None and older[4] <= newer[3]  # closed no later than the next opens
        assert versions[-1][4] is None or versions[-1][1] >= 1
    folded = next(v for v in by_note.values() if len(v) >= 3)  # remember, fold, superseded
    assert [r[1] for r in folded][:3] == [1, 2, 3] and folded[2][5] is not None
    held = next(v for v in by_note.values() if v[0][2].startswith("restart"))
    assert [r[1] for r in held] == [1, 3] and held[0][4] is not None  # the held version 2 has no row
    assert _edges(dsn)


def test_verify_and_rebuild_of_note_versions_are_identical(fabric: Fabric, dsn: str) -> None:
    _history(fabric)
    admin = ProjectionAdmin.for_fabric(fabric)
    before = (_rows(dsn), _edges(dsn))
    assert all(r.ok for r in admin.verify("note_versions")), admin.verify("note_versions")
    admin.rebuild("note_versions")
    assert (_rows(dsn), _edges(dsn)) == before
    admin.rebuild("note_versions", blue_green=True)
    assert (_rows(dsn), _edges(dsn)) == before
    assert all(r.ok for r in admin.verify()), [r for r in admin.verify() if not r.ok]


def test_several_events_of_one_note_in_one_unit_of_work_are_each_a_version(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("t1", "u1", "th1")
    notes.remember_many([{"kind": "fact", "content": "the build uses make"},
                         {"kind": "fact", "content": "the build uses make"},
                         {"kind": "fact", "content": "the build uses make"}])
    assert [r[1] for r in _rows(dsn)] == [1, 2, 3]
    assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify("note_versions"))


def test_a_single_event_write_reads_nothing_back(fabric: Fabric, dsn: str, monkeypatch: Any) -> None:
    """Write cost: a remember, a fold, a supersession, a link and a hold each append one
    event per note and project it without replaying the note (no read); a forget
    replays nothing either (its rows are dropped). Only the release of a hold replays
    (the held note's versions come back)."""
    from memfabric.projections import note_versions

    replayed: list[int] = []
    real = note_versions.replay_events

    def counted(cur: Any, mapper: Any, upto: dict[Any, int]) -> Any:
        replayed.append(len(upto))
        return real(cur, mapper, upto)

    monkeypatch.setattr(note_versions, "replay_events", counted)
    _history(fabric)
    assert replayed == [1] and len(_rows(dsn)) >= 8
