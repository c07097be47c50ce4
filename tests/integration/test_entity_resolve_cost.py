"""Issue 32: what one ``resolve`` costs on PostgreSQL, and that it ranks as the
in-memory index does.

Every tier (identifier, exact name, exact alias, normalised, fuzzy) is looked up by
one statement on ``mf_entity_keys``, which also brings the events and data keys of the
few entities likely to rank first (``adapters/postgres/entities.py``, ``lookup_sql``):
one statement (one round trip, pooled connections are in autocommit) per resolution,
whatever it finds; a second one replays the candidates only when that guess missed one
of them. The budget is what keeps resolution at 100,000 entities under 5 ms
(``scripts/bench_entities.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain.entities import commands
from tests.entity_cases import WORLD, cases


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every statement psycopg cursors execute from here on."""
    seen: list[str] = []
    original = psycopg.Cursor.execute

    def recording(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(query if isinstance(query, str) else query.as_string(self))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return seen


@pytest.fixture
def notes(dsn: str) -> Iterator[Any]:
    with open_fabric(dsn) as fabric:
        scope = fabric.scope("acme", "user-1", "thread-1")
        scope.entities.upsert("Maria Lopez", type="person", identifiers=[("email", "maria@acme.example")])
        scope.entities.upsert("Maria Lopes", type="person")      # a typo away
        scope.entities.upsert("Mario Lopez", type="person")      # a typo away
        scope.entities.upsert("Lopez Maria Ines", type="person")  # shares both tokens
        yield scope


def _kinds(seen: list[str]) -> list[str]:
    """Each statement as ``lookup`` (the entity index with the events of the likely
    candidates), ``keys`` (the entity index alone), ``replay`` (events and data keys) or itself."""
    return ["lookup" if "mf_entity_keys" in s and "memfabric_events" in s else "keys" if "mf_entity_keys" in s
            else "replay" if "memfabric_events" in s and "mf_note_keys" in s else s for s in seen]


def test_an_exact_match_is_one_statement(notes: Any, statements: list[str]) -> None:
    found = notes.entities.resolve("Maria Lopez")
    assert _kinds(statements) == ["lookup"]
    assert [(c.display_name, c.tier) for c in found[:1]] == [("Maria Lopez", "exact_name")]
    # the fuzzy tiers came from the same lookup: the typos and the namesake are candidates
    assert {c.display_name for c in found[1:]} == {"Maria Lopes", "Mario Lopez", "Lopez Maria Ines"}
    assert {c.tier for c in found[1:]} == {"fuzzy"}


def test_every_tier_and_limit_is_one_statement(notes: Any, statements: list[str]) -> None:
    for surface, tier in (("maria@acme.example", "identifier"), ("Lopez, Maria", "normalised"),
                          ("Maria Lopezz", "fuzzy"), ("M. Lopez", "fuzzy")):
        for limit, kind in ((1, None), (2, "person"), (5, None), (50, "person")):
            statements.clear()
            found = notes.entities.resolve(surface, limit=limit, type=kind)
            assert found[0].tier == tier, surface
            assert 1 <= len(found) <= limit, (surface, limit)
            assert _kinds(statements) == ["lookup"], (surface, limit)


def test_nothing_found_is_one_statement(notes: Any, statements: list[str]) -> None:
    assert notes.entities.resolve("Quentin Zbigniewski") == []
    assert _kinds(statements) == ["lookup"]


def test_a_candidate_beyond_the_guess_is_replayed_by_a_second_statement(
        notes: Any, statements: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """When the lookup brought the events of fewer entities than the ranking picked (here
    forced: two fewer than asked), the candidates are replayed by one more statement and
    the answer is the same."""
    expected = notes.entities.resolve("Maria Lopez")
    assert len(expected) == 4
    monkeypatch.setattr(commands, "PREFETCH_SPARE", -2)
    statements.clear()
    assert notes.entities.resolve("Maria Lopez") == expected
    assert _kinds(statements) == ["lookup", "replay"]


def _relations(plan: dict[str, Any]) -> set[tuple[str, str]]:
    """``(node type, relation)`` of every scan in an ``EXPLAIN (FORMAT JSON)`` plan."""
    here = {(plan["Node Type"], plan["Relation Name"])} if "Relation Name" in plan else set()
    return here.union(*(_relations(p) for p in plan.get("Plans", [])))


def test_the_lookup_reads_the_key_index_alone(notes: Any, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup's plan scans the primary key of ``mf_entity_keys`` index-only and no
    other relation but the events and data keys of the likely candidates, by index: the
    entity id, home, visibility and type are ``INCLUDE`` columns of that index, so no
    ``mf_entities`` row is read per key row (issue 32's p95)."""
    calls: list[tuple[str, Any]] = []
    original = psycopg.Cursor.execute

    def recording(self: Any, query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        calls.append((query if isinstance(query, str) else query.as_string(self), params))
        return original(self, query, params, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    for surface, kind in (("Maria Lopez", None), ("maria@acme.example", "person")):
        calls.clear()
        notes.entities.resolve(surface, type=kind)
        query, params = next(c for c in calls if "mf_entity_keys" in c[0])
        with psycopg.connect(dsn) as conn:
            conn.execute("SET enable_seqscan = off")  # four entities: the plan of a large table
            plan = original(conn.cursor(), "EXPLAIN (FORMAT JSON) " + query, params).fetchone()
        assert plan is not None
        scans = _relations(plan[0][0]["Plan"])
        assert {r for _, r in scans} == {"mf_entity_keys", "memfabric_events", "mf_note_keys"}, surface
        assert {n for n, r in scans if r == "mf_entity_keys"} == {"Index Only Scan"}, surface
        assert not any("Seq" in n for n, _ in scans), scans


def _ranked(scope: Any, surface: str, identifiers: Any) -> list[tuple[str, float, str | None]]:
    found = scope.entities.resolve(surface, limit=50)
    picked = scope.entities.match(surface, identifiers=identifiers)
    return sorted((c.tier, c.score, c.display_name) for c in found) + [("match", 0.0, picked and picked.display_name)]


def test_postgres_ranks_the_case_set_as_the_memory_index_does(dsn: str) -> None:
    """Every case of ``tests/entity_cases.py`` gets the same candidates (tier, score,
    name) and the same auto-resolution on both backends (entity ids are random, so
    they are compared by name)."""
    with open_fabric(dsn) as fabric:
        scopes = [open_memory_fabric().scope("t", "r", "th"), fabric.scope("t", "r", "th")]
        for scope in scopes:
            for e in WORLD:
                scope.entities.upsert(e["name"], type=e["type"], identifiers=e["ids"])
                for alias in e["aliases"]:
                    scope.entities.upsert(alias, identifiers=e["ids"][:1])
        differ = [surface for surface, identifiers, _ in cases()
                  if _ranked(scopes[0], surface, identifiers) != _ranked(scopes[1], surface, identifiers)]
    assert differ == []
