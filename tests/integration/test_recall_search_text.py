"""Recall's full text searches a note's context and keywords besides its content
(``recall_index.search_extra``): the caller's keywords and context, what evolution
contributed (and no longer once the contributor is forgotten), the same in the
in-memory backend, and an index made before the column is migrated in place."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters.postgres import schema_stamp
from tests.conftest import fetch


class Session:
    id = "s-search-text"


@pytest.fixture
def fabric(dsn: str) -> Iterator[Fabric]:
    with open_fabric(dsn, consolidate=False) as fab:
        yield fab


def found(notes: object, query: str) -> set[str]:
    return {h.id for h in notes.recall(query, mode="lexical").hits}  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["postgres", "memory"])
def test_keywords_and_context_are_searched(dsn: str, backend: str) -> None:
    opener = open_fabric(dsn, consolidate=False) if backend == "postgres" else open_memory_fabric(consolidate=False)
    with opener as fab:
        notes = fab.scope("acme", "u1", "t1")
        n = notes.remember(kind="fact", content="The shipment left on Tuesday",
                           keywords=["zebra", "crate"], context="from the giraffe habitat chat")
        notes.remember(kind="fact", content="Lunch is at noon")
        assert found(notes, "zebra") == {n.id}
        assert found(notes, "giraffe habitat") == {n.id}
        assert found(notes, "shipment") == {n.id}
        assert found(notes, "okapi") == set()


def test_what_evolution_contributed_is_searched_until_its_source_is_forgotten(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False, evolution={"enabled": True, "max_patches": 8, "floor": 0.0}) as fab:
        notes = fab.scope("acme", "u1", "t1")
        with notes.attach(Session()):
            b = notes.remember(kind="fact", content="Alice walks her greyhound Zephyr every morning")
            a = notes.remember(kind="fact", content="Alice adopted the greyhound Zephyr in May",
                               keywords=["adoption", "shelter"], context="from the pet chat")
        assert "shelter" in notes.get(b.id).keywords  # evolution patched b
        assert b.id in found(notes, "shelter")
        notes.forget(id=a.id)
        assert b.id not in found(notes, "shelter")
        assert b.id in found(notes, "walks greyhound")
        assert fetch(dsn, "SELECT count(*) FROM mf_recall_index WHERE strpos(search_extra, 'shelter') > 0")[0][0] == 0


def test_an_index_made_before_search_extra_is_migrated(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        n = notes.remember(kind="fact", content="The shipment left on Tuesday", keywords=["zebra"],
                           context="giraffe chat")
        plain = notes.remember(kind="fact", content="No extra text here")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the table as release 0.1.0 made it
        conn.execute("ALTER TABLE mf_recall_index DROP COLUMN tsv")
        conn.execute("ALTER TABLE mf_recall_index DROP COLUMN search_extra")
        conn.execute("ALTER TABLE mf_recall_index ADD COLUMN tsv tsvector"
                     " GENERATED ALWAYS AS (to_tsvector('english', content)) STORED")
        schema_stamp.clear(conn)  # an older release's schema: no stamp of this code
    with open_fabric(dsn, consolidate=False) as fab:
        notes = fab.scope("acme", "u1", "t1")
        assert found(notes, "zebra") == {n.id} and found(notes, "giraffe") == {n.id}
        assert found(notes, "extra text") == {plain.id}
        assert all(r.ok for r in ProjectionAdmin.for_fabric(fab).verify(["recall_index"]))
    assert fetch(dsn, "SELECT count(*) FROM pg_indexes WHERE indexname = 'mf_recall_index_tsv'")[0][0] == 1
