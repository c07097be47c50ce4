"""Issue 15, the adjacency edge of the linker (``LinkerSettings.adjacent``) against
PostgreSQL and the in-memory backend: each new note ``follows`` the note inserted just
before it in exactly its scope and kind, within ``adjacent_window`` seconds (by ``t_ref``,
else write time), behind the attach gate, the same from one batch, from single writes
and across batches, never to a forgotten note, and rebuilt identically from the log."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch

ADJ = {"enabled": True, "top_k": 3, "by": "terms", "adjacent": 0.5}
T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
TURNS = [  # (minutes after T0, text): a session, then a second one two days later
    (0, "Melanie: How was the pottery workshop on Saturday?"),
    (0, "Caroline: It went well, my bowl came out of the kiln in one piece."),
    (1, "Melanie: Did you glaze it blue like you planned?"),
    (2880, "Caroline: Back from the lake, the kids loved the canoe."),
    (2881, "Melanie: Did anyone fall in the water?"),
]
SESSION_EDGES = {(1, 0), (2, 1), (4, 3)}
"""Every turn follows the previous one of its session (the 2-day gap links nothing)."""


class Session:
    id = "s-adjacent"


def items() -> list[dict[str, Any]]:
    return [{"kind": "fact", "content": text, "t_ref": T0 + timedelta(minutes=m)} for m, text in TURNS]


def write(notes: Any, how: str) -> list[str]:
    if how == "single":
        return [notes.remember(**item).id for item in items()]
    if how == "two_batches":
        first, rest = items()[:2], items()[2:]
        return [n.id for n in notes.remember_many(first)] + [n.id for n in notes.remember_many(rest)]
    return [n.id for n in notes.remember_many(items())]


def follows(notes: Any, ids: list[str]) -> dict[tuple[int, int], float]:
    pos = {nid: i for i, nid in enumerate(ids)}
    return {(pos[nid], pos[lk.id]): lk.weight for nid in ids for lk in notes.get(nid).links
            if lk.relation == "follows"}


@pytest.fixture
def fabric(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False, linker=ADJ) as fab:
        yield fab


@pytest.mark.parametrize("how", ["batch", "single", "two_batches"])
def test_each_turn_follows_the_previous_turn_of_its_session(fabric: Fabric, how: str) -> None:
    notes = fabric.scope("acme", "u1", f"t-{how}")
    with notes.attach(Session()):
        ids = write(notes, how)
    assert follows(notes, ids) == {edge: 0.5 for edge in SESSION_EDGES}


def test_memory_backend_makes_the_same_follows_edges() -> None:
    with open_memory_fabric(consolidate=False, linker=ADJ) as fab:
        for how in ("batch", "single", "two_batches"):
            notes = fab.scope("acme", "u1", f"m-{how}")
            with notes.attach(Session()):
                ids = write(notes, how)
            assert follows(notes, ids) == {edge: 0.5 for edge in SESSION_EDGES}


def test_the_window_and_the_weight_are_settings(dsn: str) -> None:
    wide = {**ADJ, "adjacent": 0.8, "adjacent_window": 3 * 86400}
    with open_fabric(dsn, consolidate=False, linker=wide) as fab:
        notes = fab.scope("acme", "u1", "t-wide")
        with notes.attach(Session()):
            ids = write(notes, "batch")
        assert follows(notes, ids) == {(1, 0): 0.8, (2, 1): 0.8, (3, 2): 0.8, (4, 3): 0.8}
    with pytest.raises(ValidationError):
        open_fabric(dsn, linker={**ADJ, "adjacent": 1.5})
    with pytest.raises(ValidationError):
        open_fabric(dsn, linker={**ADJ, "adjacent_window": 0})


def test_no_follows_edge_when_off_unattached_or_in_another_scope(dsn: str, fabric: Fabric) -> None:
    write(fabric.scope("acme", "u1", "t-unattached"), "batch")
    assert fetch(dsn, "SELECT count(*) FROM mf_link_graph")[0][0] == 0
    with open_fabric(dsn, consolidate=False, linker={**ADJ, "adjacent": 0.0}) as off:
        notes = off.scope("acme", "u1", "t-off")
        with notes.attach(Session()):
            ids = write(notes, "batch")
        assert follows(notes, ids) == {}
    first = fabric.scope("acme", "u1", "t-a")
    first.remember(kind="fact", content="A note of another thread", t_ref=T0)
    notes = fabric.scope("acme", "u1", "t-b")
    with notes.attach(Session()):
        lone = notes.remember(kind="fact", content="The first note of this thread", t_ref=T0)
    assert [lk for lk in notes.get(lone.id).links if lk.relation == "follows"] == []


def test_a_forgotten_note_is_never_followed(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t-forget")
    with notes.attach(Session()):
        a = notes.remember(kind="fact", content="Melanie: We went camping.", t_ref=T0)
        b = notes.remember(kind="fact", content="Caroline: Where did you camp?", t_ref=T0)
        notes.forget(id=b.id)
        c = notes.remember(kind="fact", content="Melanie: By the lake, near the pines.", t_ref=T0)
    assert [(lk.id, lk.relation) for lk in notes.get(c.id).links if lk.relation == "follows"] == [
        (a.id, "follows")]


def test_similarity_linker_with_adjacency(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False, linker={"enabled": True, "adjacent": 0.5}) as fab:
        notes = fab.scope("acme", "u1", "t-sim")
        with notes.attach(Session()):
            ids = write(notes, "batch")
        assert follows(notes, ids) == {edge: 0.5 for edge in SESSION_EDGES}


def test_follows_edges_are_rebuilt_from_the_log(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t-rebuild")
    with notes.attach(Session()):
        write(notes, "batch")
    query = "SELECT from_aggregate_id, to_aggregate_id, relation, weight FROM mf_link_graph ORDER BY 1, 2, 3"
    before = fetch(dsn, query)
    assert sum(1 for r in before if r[2] == "follows") == len(SESSION_EDGES)
    admin = ProjectionAdmin.for_fabric(fabric)
    admin.rebuild(["link_graph"])
    assert fetch(dsn, query) == before
    assert all(r.ok for r in admin.verify(["link_graph"]))


def test_a_previous_turn_sharing_a_rare_term_gets_one_edge_of_each_relation(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t-both")
    with notes.attach(Session()):
        a = notes.remember(kind="fact", content="Melanie: The pottery class starts today.", t_ref=T0)
        b = notes.remember(kind="fact", content="Caroline: Pottery is so calming, enjoy it!", t_ref=T0)
    edges = sorted((lk.id, lk.relation, lk.weight) for lk in notes.get(b.id).links)
    assert [(i, r) for i, r, _ in edges] == [(a.id, "follows"), (a.id, "related")]
    assert edges[0][2] == 0.5 and 0.0 < edges[1][2] <= 1.0
