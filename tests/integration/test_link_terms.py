"""Issue 15, the shared-term linker (``linker={"by": "terms"}``) against PostgreSQL:
edges by rare shared terms behind the attach gate, the same edges from one batch as from
single writes and from the in-memory backend, the ``link_terms`` column surviving a
rebuild, the link term of list candidates in recall, and the demo's link step."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain import link_terms
from memfabric.projections.rebuild import ProjectionAdmin
from tests.conftest import fetch

TERMS = {"enabled": True, "top_k": 3, "by": "terms"}

TURNS = [
    "Melanie: We took the kids camping at the beach last weekend.",
    "Caroline: I signed up for a pottery class yesterday.",
    "Melanie: The kids painted a sunset together.",
    "Caroline: Melanie, the pottery teacher says my bowls are getting better.",
    "Melanie: Another camping trip is planned, this time in the mountains.",
    "Melanie: Melanie Melanie family kids.",
]


class Session:
    id = "s-terms"


def remember_all(notes: Any, single: bool) -> list[str]:
    if single:
        return [notes.remember(kind="fact", content=t).id for t in TURNS]
    return [n.id for n in notes.remember_many([{"kind": "fact", "content": t} for t in TURNS])]


def edge_map(notes: Any, ids: list[str]) -> dict[tuple[int, int], float]:
    pos = {nid: i for i, nid in enumerate(ids)}
    return {(pos[nid], pos[lk.id]): lk.weight for nid in ids for lk in notes.get(nid).links}


@pytest.fixture
def terms_fabric(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False, linker=TERMS) as fab:
        yield fab


def expected_edges() -> dict[tuple[int, int], float]:
    """The module-doc rule computed by hand over TURNS (one scope, kind fact)."""
    terms = [link_terms.note_terms(t) for t in TURNS]
    out: dict[tuple[int, int], float] = {}
    for i, mine in enumerate(terms):
        earlier = {t: [str(j) for j in range(i) if t in terms[j]] for t in mine}
        got = link_terms.term_edges(mine, earlier, n=i + 1, k=3, order={str(j): float(j) for j in range(i)})
        out.update({(i, int(j)): w for j, w in got})
    return out


@pytest.mark.parametrize("single", [False, True], ids=["batch", "single"])
def test_terms_linker_links_turns_sharing_a_rare_term(terms_fabric: Fabric, single: bool) -> None:
    notes = terms_fabric.scope("acme", "u1", "t-single" if single else "t-batch")
    with notes.attach(Session()):
        ids = remember_all(notes, single)
    got = edge_map(notes, ids)
    assert got == pytest.approx(expected_edges())
    assert (4, 0) in got and (3, 1) in got  # camping ↔ camping, pottery ↔ pottery
    assert all(0.0 < w <= 1.0 for w in got.values())
    assert all(j < i for i, j in got)  # a new note links to earlier notes only


def test_terms_linker_is_inert_until_attached(terms_fabric: Fabric, dsn: str) -> None:
    notes = terms_fabric.scope("acme", "u1", "t-off")
    remember_all(notes, single=False)
    assert fetch(dsn, "SELECT count(*) FROM mf_link_graph")[0][0] == 0


def test_terms_linker_stays_in_its_scope(terms_fabric: Fabric) -> None:
    other = terms_fabric.scope("acme", "u1", "t-other")
    other.remember(kind="fact", content="Camping at the beach again, the pottery was fine")
    notes = terms_fabric.scope("acme", "u1", "t-mine")
    with notes.attach(Session()):
        ids = remember_all(notes, single=True)
    assert edge_map(notes, ids) == pytest.approx(expected_edges())


def test_memory_backend_links_the_same_edges() -> None:
    with open_memory_fabric(consolidate=False, linker=TERMS) as fab:
        for single in (False, True):
            notes = fab.scope("acme", "u1", f"m-{single}")
            with notes.attach(Session()):
                ids = remember_all(notes, single)
            assert edge_map(notes, ids) == pytest.approx(expected_edges())


def test_link_terms_column_is_rebuilt_from_the_log(terms_fabric: Fabric, dsn: str) -> None:
    notes = terms_fabric.scope("acme", "u1", "t-rebuild")
    ids = remember_all(notes, single=False)
    query = "SELECT note_id, link_terms FROM mf_consolidation ORDER BY note_id"
    before = fetch(dsn, query)
    assert {r[0]: tuple(r[1]) for r in before} == {
        nid: link_terms.note_terms(t) for nid, t in zip(ids, TURNS, strict=True)}
    admin = ProjectionAdmin.for_fabric(terms_fabric)
    admin.rebuild(["consolidation"])
    assert fetch(dsn, query) == before
    admin.rebuild(["consolidation"], blue_green=True)
    assert fetch(dsn, query) == before
    assert all(r.ok for r in admin.verify(["consolidation"]))


def test_recall_gives_a_linked_list_candidate_the_link_term(terms_fabric: Fabric) -> None:
    notes = terms_fabric.scope("acme", "u1", "t-recall")
    a = notes.remember(kind="fact", content="Our family camping trip was at the beach")
    b = notes.remember(kind="fact", content="We roasted marshmallows on that trip")
    notes.remember(kind="fact", content="The beach volleyball league starts in June")
    notes.link(b.id, a.id, weight=1.0)
    on = notes.recall("camping trip at the beach", top_k=3)
    off = notes.recall("camping trip at the beach", top_k=3, expand_links=False)
    row = {e.id: e for e in on.explain}[b.id]
    assert row.link is False and row.link_score > 0.0
    assert {e.id: e for e in off.explain}[b.id].link_score == 0.0
    assert on.hits[0].id == a.id


def test_demo_shows_a_link_expanded_recall(dsn: str) -> None:
    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo

    out = io.StringIO()
    summary = run_demo(Console(file=out, width=200), dsn=dsn)["links"]
    assert summary["linked"] == [summary["fix_id"]]
    assert summary["cause_first"] and summary["hit_links"] == [summary["fix_id"]]
    printed = out.getvalue()
    assert "14. links" in printed
    row = next(line for line in printed.splitlines() if summary["fix_id"] in line and "true" in line)
    assert "Alice renewed it" in row
