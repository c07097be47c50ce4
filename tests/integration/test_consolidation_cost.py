"""Issue 24: a consolidating write's neighbour lookup reads a few btree entries, not the
scope. Similarity alone never decides a write (``domain/consolidation.py: choose``), so
the exact nearest-vector scan of the write's consolidation group runs only for the
workers that use it (the similarity linker, evolution). Before, every subject-less
consolidating write scanned its whole group: 96 ms per write in a 20,000-note scope
against 11 ms in a 1,000-note one (2026-12-03, load ~6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from memfabric.adapters import open_fabric
from memfabric.adapters.postgres.vectors import VectorTypes
from memfabric.projections import consolidation_index

SIZE = 1_500
"""Subject-less notes already in the scope (well above any btree branch's LIMIT)."""


class _Session:
    id = "s-1"


def _texts(n: int, start: int = 0) -> list[str]:
    return [f"Sensor {i} in hall {i % 17} reported {i * 13 % 997} lux at shift {i % 3}" for i in range(start, start + n)]


def _scan_rows(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of the consolidation table read (returned, times loops,
    plus those removed by a filter), summed over the plan tree."""
    own = 0
    if plan.get("Relation Name") == consolidation_index.TABLE:
        loops = plan.get("Actual Loops", 1)
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    return own + sum(_scan_rows(p) for p in plan.get("Plans", ()))


@contextmanager
def _explained(dsn: str, seen: list[tuple[str, int]]) -> Iterator[None]:
    """Each neighbour lookup a write makes is also run under ``EXPLAIN ANALYZE`` on a
    connection of its own; ``seen`` gets (statement, rows its scans read)."""
    real = consolidation_index.select_neighbours

    class Explaining:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def execute(self, query: Any, params: Any = None) -> Any:
            with psycopg.connect(dsn) as conn:
                VectorTypes().ensure(conn)
                text = query if isinstance(query, str) else query.decode()
                (plan,), = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchall()
                plan = json.loads(plan) if isinstance(plan, str) else plan
                seen.append((text, _scan_rows(plan[0]["Plan"])))
            return self.inner.execute(query, params)

    def explaining(cur: Any, *args: Any, **kwargs: Any) -> Any:
        return real(Explaining(cur), *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(consolidation_index, "select_neighbours", explaining)
        yield


def _fill(dsn: str) -> None:
    with open_fabric(dsn, consolidate=False) as fab:
        fab.scope("acme", "u1").remember_many([{"kind": "fact", "content": t} for t in _texts(SIZE)])


def test_a_consolidating_write_reads_a_few_rows_whatever_the_scope_size(dsn: str) -> None:
    _fill(dsn)
    seen: list[tuple[str, int]] = []
    with open_fabric(dsn) as fab:
        notes = fab.scope("acme", "u1")
        with _explained(dsn, seen):
            fresh = notes.remember(kind="fact", content=_texts(1, SIZE + 7)[0])
            again = notes.remember(kind="fact", content=_texts(1, 5)[0].upper())  # a repeat: folds
    assert (fresh.outcome, again.outcome) == ("inserted", "folded")
    assert seen and all("ORDER BY n.embedding <=>" not in text for text, _ in seen)
    assert all(rows <= 10 for _, rows in seen), [rows for _, rows in seen]


def test_the_similarity_linker_still_gets_its_nearest_neighbours(dsn: str) -> None:
    _fill(dsn)
    seen: list[tuple[str, int]] = []
    linker = {"enabled": True, "by": "similarity", "top_k": 3, "floor": 0.1}
    with open_fabric(dsn, consolidate=False, linker=linker) as fab:
        notes = fab.scope("acme", "u1")
        with notes.attach(_Session()), _explained(dsn, seen):
            new = notes.remember(kind="fact", content="Sensor 3 in hall 3 reported 39 lux at shift 0 again")
        targets = {notes.get(lk.id).content for lk in new.links}
    assert any("ORDER BY n.embedding <=>" in text and rows >= SIZE for text, rows in seen)  # asked for
    assert len(new.links) == 3 and _texts(1, 3)[0] in targets
