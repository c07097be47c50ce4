"""Issue 31: the note-versions projection (transaction-time ranges) is rebuilt from the
log like every projection and verified identical."""

from __future__ import annotations

from typing import Any

import psycopg

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.postgres import schema_stamp
from memfabric.projections import link_graph, recall_index
from memfabric.projections.note_versions import RecordedCursor
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


def _count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_the_current_version_is_the_live_row(fabric: Fabric, dsn: str) -> None:
    """A new note writes no version row (its live recall-index row, with its
    ``recorded_from``, is its version); a change closes the previous state: the live
    row copied with ``recorded_to`` = the new state's ``recorded_from``."""
    notes = fabric.scope("t1", "u1", "th1")
    a = notes.remember(kind="fact", content="the deploy runs on fridays", subject="deploy day")
    notes.remember(kind="fact", content="the cache is redis")
    assert _count(dsn, "SELECT count(*) FROM mf_note_versions") == 0
    assert _count(dsn, "SELECT count(*) FROM mf_recall_index WHERE recorded_from IS NULL") == 0
    notes.remember(kind="fact", content="the deploy runs on mondays", subject="deploy day")  # supersedes a
    with psycopg.connect(dsn) as conn:
        closed = conn.execute("SELECT v.version, v.recorded_to = i.recorded_from, v.superseded_by IS NULL"
                              " FROM mf_note_versions v JOIN mf_recall_index i USING (aggregate_id)"
                              " WHERE v.note_id = %s", (a.id,)).fetchall()
    assert closed == [(1, True, True)]
    assert _count(dsn, "SELECT count(*) FROM mf_note_versions WHERE recorded_to IS NULL") == 0


def test_a_database_with_open_version_rows_migrates_on_open(dsn: str) -> None:
    """A database written before the change (every version in ``mf_note_versions``, the
    current one open; no ``recorded_from`` on the recall index) is brought over when
    opened: same versions, same ``known_at`` answers, verify clean."""
    with open_fabric(dsn) as fabric:
        _history(fabric)
        notes = fabric.scope("t1", "u1", "th1")
        times = [r[3] for r in _rows(dsn)]
        before = (_rows(dsn), _edges(dsn), [[h.id for h in notes.recall("deploy cache", known_at=t).hits]
                                            for t in times])
    cols = ", ".join(recall_index.COLUMNS)
    edge_cols = ", ".join("g." + c for c in link_graph.COLUMNS)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the layout before
        conn.execute(f"INSERT INTO mf_note_versions ({cols}, recorded_to) SELECT {cols}, NULL FROM mf_recall_index")  # noqa: S608
        conn.execute(f"INSERT INTO mf_link_versions (from_version, {', '.join(link_graph.COLUMNS)})"  # noqa: S608
                     f" SELECT i.version, {edge_cols} FROM mf_link_graph g"
                     " JOIN mf_recall_index i ON i.aggregate_id = g.from_aggregate_id")
        conn.execute("ALTER TABLE mf_recall_index DROP COLUMN recorded_from")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("t1", "u1", "th1")
        after = (_rows(dsn), _edges(dsn), [[h.id for h in notes.recall("deploy cache", known_at=t).hits]
                                           for t in times])
        assert after == before
        assert _count(dsn, "SELECT count(*) FROM mf_note_versions WHERE recorded_to IS NULL") == 0
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify()), ProjectionAdmin.for_fabric(
            fabric).verify()


def _ids_at(dsn: str, known_at: Any, *, in_step: bool) -> list[Any]:
    """The aggregate ids of the recall-index rows as recorded at ``known_at``."""
    with psycopg.connect(dsn) as conn:
        rows = RecordedCursor(conn.cursor(), known_at, in_step=in_step).execute(
            b"SELECT aggregate_id FROM mf_recall_index ORDER BY aggregate_id").fetchall()
    return [r[0] for r in rows]


def test_a_separate_runners_read_never_sees_a_note_twice(fabric: Fabric, dsn: str) -> None:
    """With a separate runner the versions may be a step ahead of the live index: a
    closed copy of a live row's version, before the runner upserts the live row. The
    read of such a fabric (``in_step=False``) leaves that live row out; at rest both
    reads agree."""
    _history(fabric)
    with psycopg.connect(dsn) as conn:
        at = conn.execute("SELECT max(recorded_from) FROM mf_recall_index").fetchone()[0]  # type: ignore[index]
    assert _ids_at(dsn, at, in_step=False) == _ids_at(dsn, at, in_step=True)
    cols = ", ".join(recall_index.COLUMNS)
    with psycopg.connect(dsn) as conn:  # the versions projection applied the next event first
        conn.execute(f"INSERT INTO mf_note_versions ({cols}, recorded_to)"  # noqa: S608
                     f" SELECT {cols}, recorded_from + interval '1 hour' FROM mf_recall_index"
                     " WHERE recorded_from = (SELECT max(recorded_from) FROM mf_recall_index)")
    once = _ids_at(dsn, at, in_step=False)
    assert len(once) == len(set(once)) and len(_ids_at(dsn, at, in_step=True)) == len(once) + 1



def test_a_batch_run_statement_by_statement_still_copies_the_previous_state(fabric: Fabric, dsn: str,
                                                                              monkeypatch: Any) -> None:
    """A write too large for one statement runs its parts one by one, in order: the copy
    of the previous state comes first (``RowBatch.add_statement(first=True)``), before the
    recall index's upsert of the new one, so the closed versions are those of a replay."""
    from memfabric.projections import batch

    monkeypatch.setattr(batch, "MAX_BATCH_PARAMS", 0)
    _history(fabric)
    closed = _count(dsn, "SELECT count(*) FROM mf_note_versions")
    assert closed >= 3 and _count(dsn, "SELECT count(*) FROM mf_note_versions WHERE version = ("
                                       "SELECT version FROM mf_recall_index i WHERE i.aggregate_id ="
                                       " mf_note_versions.aggregate_id)") == 0
    assert all(r.ok for r in ProjectionAdmin.for_fabric(fabric).verify("note_versions"))
