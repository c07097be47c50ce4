"""Issue 32: resolution quality on the alias / identifier test set
(``tests/entity_cases.py``): precision of auto-resolution >= 0.99 and recall of true
merges as candidates >= 0.9, no model (in-memory backend; the PostgreSQL index runs
the same scoring on the same digests, see tests/integration/test_entities.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memfabric.adapters.memory import open_memory_fabric
from tests.entity_cases import WORLD, cases


@pytest.fixture(scope="module")
def world() -> tuple[Any, dict[str, str]]:
    notes = open_memory_fabric().scope("t", "r", "th")
    ids: dict[str, str] = {}
    for e in WORLD:
        made = notes.entities.upsert(e["name"], type=e["type"], identifiers=e["ids"])
        assert made.outcome == "created", e["key"]
        ids[e["key"]] = made.entity.id
        for alias in e["aliases"]:
            got = notes.entities.upsert(alias, identifiers=e["ids"][:1])
            assert got.entity.id == ids[e["key"]]
    return notes, ids


def evaluate(notes: Any, ids: dict[str, str]) -> dict[str, Any]:
    """Auto-resolution decisions and candidate hits over every case."""
    auto = correct = merges = listed = 0
    wrong: list[tuple[str, str | None, str]] = []
    missed: list[str] = []
    for surface, identifiers, expected in cases():
        want = ids[expected] if expected is not None else None
        picked = notes.entities.match(surface, identifiers=identifiers)
        if picked is not None:
            auto += 1
            if picked.id == want:
                correct += 1
            else:
                wrong.append((surface, expected, picked.display_name))
        if want is not None:
            merges += 1
            found = [c.id for c in notes.entities.resolve(surface, limit=5)]
            if want in found or (picked is not None and picked.id == want):
                listed += 1
            else:
                missed.append(surface)
    return {"auto": auto, "precision": correct / auto, "merges": merges, "recall": listed / merges,
            "wrong": wrong, "missed": missed}


def test_the_set_is_large_enough() -> None:
    all_cases = cases()
    assert len(all_cases) >= 100
    assert sum(1 for c in all_cases if c[2] is None) >= 30  # must-not-merge cases
    assert {e["type"] for e in WORLD} == {"person", "organisation", "project"}


def test_precision_at_auto_resolve_and_candidate_recall(world: tuple[Any, dict[str, str]]) -> None:
    notes, ids = world
    got = evaluate(notes, ids)
    print(f"\nentity resolution: {len(cases())} cases, {got['auto']} auto-resolved, "
          f"precision {got['precision']:.3f}, candidate recall {got['recall']:.3f} of {got['merges']}")
    assert got["precision"] >= 0.99, got["wrong"]
    assert got["recall"] >= 0.9, got["missed"]


def test_the_evaluation_can_fail(world: tuple[Any, dict[str, str]]) -> None:
    """A resolver that always picks the best candidate (no ambiguity or identifier
    guard) would fall below the precision bar on this set."""
    notes, ids = world
    picks = wrong = 0
    for surface, identifiers, expected in cases():
        found = notes.entities.resolve(surface, limit=1)
        if found:
            picks += 1
            wrong += found[0].id != (ids[expected] if expected else None)
    assert (picks - wrong) / picks < 0.99
