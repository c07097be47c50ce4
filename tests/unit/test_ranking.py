"""Recall ranking with crafted candidates, pure (no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memfabric.domain.inputs import Scoring
from memfabric.domain.ports import Candidate
from memfabric.domain.ranking import Ranking, rank

AS_OF = datetime(2025, 6, 1, tzinfo=UTC)
FLAT = Scoring(recency_weight=0.0, importance_weight=0.0)


def cand(note_id: str, *, sim: float | None = None, lex: float | None = None, vrank: int | None = None,
         lrank: int | None = None, tokens: int = 5, ingested: datetime = AS_OF, importance: float = 0.5,
         t_ref: datetime | None = None) -> Candidate:
    fields: dict[str, Any] = {
        "tenant_id": "acme", "resource_id": "", "thread_id": "", "kind": "fact", "note_id": note_id,
        "importance": importance, "token_count": tokens, "tags": [], "path": None, "subject": None,
        "content": f"content {note_id}", "source_entry_ids": [], "supersedes": None, "t_ref": t_ref,
        "ingested_at": ingested, "version": 1, "valid_from": None, "valid_to": None,
        "visibility": "thread", "consent_granted": None, "context": None, "keywords": [],
        "fold_count": 0, "updated_at": None, "consent": None,
    }
    return Candidate(uuid.uuid4(), note_id, sim, lex, vrank, lrank, fields)


def how(mode: str = "hybrid", *, scoring: Scoring = FLAT, w: float = 0.5, top_k: int = 10,
        budget: int | None = None) -> Ranking:
    return Ranking(mode=mode, as_of=AS_OF, scoring=scoring, vector_weight=w, top_k=top_k,  # type: ignore[arg-type]
                   budget=budget)


def ids(result: Any) -> list[str]:
    return [h.id for h in result.hits]


def test_convex_fusion_normalises_lexical() -> None:
    a = cand("a", sim=0.9, lex=1.0)
    b = cand("b", sim=0.1, lex=4.0)
    out = rank([a, b], how(w=0.5))
    # a: 0.45 + 0.5*0.25 = 0.575; b: 0.05 + 0.5*1 = 0.55
    assert ids(out) == ["a", "b"]
    assert out.explain[0].relevance == pytest.approx(0.575)
    assert out.explain[1].lexical == pytest.approx(1.0)
    assert ids(rank([a, b], how(w=0.2))) == ["b", "a"]


def test_negative_cosine_counts_as_zero() -> None:
    out = rank([cand("a", sim=-0.7, lex=0.0)], how("vector"))
    assert out.explain[0].relevance == 0.0 and out.explain[0].similarity == -0.7


def test_vector_and_lexical_modes() -> None:
    a = cand("a", sim=0.9, lex=1.0)
    b = cand("b", sim=0.2, lex=3.0)
    assert ids(rank([a, b], how("vector"))) == ["a", "b"]
    out = rank([a, b], how("lexical"))
    assert ids(out) == ["b", "a"]
    assert out.explain[0].relevance == pytest.approx(1.0)
    assert out.explain[1].relevance == pytest.approx(1 / 3)


def test_rrf_uses_ranks_only() -> None:
    a = cand("a", sim=0.99, lex=0.1, vrank=2, lrank=1)
    b = cand("b", sim=0.10, lex=9.0, vrank=1, lrank=2)
    scoring = Scoring(recency_weight=0.0, importance_weight=0.0, fusion="rrf")
    assert ids(rank([a, b], how(scoring=scoring, w=0.8))) == ["b", "a"]
    assert ids(rank([a, b], how(scoring=scoring, w=0.2))) == ["a", "b"]
    top = rank([cand("c", vrank=1, lrank=1)], how(scoring=scoring, w=0.5))
    assert top.explain[0].relevance == pytest.approx(1.0)


def test_recency_and_importance_weights() -> None:
    old = cand("old", sim=0.5, ingested=AS_OF - timedelta(days=300))
    new = cand("new", sim=0.5, ingested=AS_OF - timedelta(days=1))
    scoring = Scoring(recency_weight=1.0, importance_weight=0.0)
    assert ids(rank([old, new], how("vector", scoring=scoring))) == ["new", "old"]
    low = cand("low", sim=0.5, importance=0.1)
    high = cand("high", sim=0.5, importance=0.9)
    scoring = Scoring(recency_weight=0.0, importance_weight=1.0)
    assert ids(rank([low, high], how("vector", scoring=scoring))) == ["high", "low"]
    # t_ref is the recency reference when given
    dated = cand("dated", sim=0.5, ingested=AS_OF, t_ref=AS_OF - timedelta(days=30))
    out = rank([dated], how("vector", scoring=Scoring(recency_weight=1.0, importance_weight=0.0)))
    assert out.explain[0].recency == pytest.approx(0.5)


def test_ties_break_by_ingestion_then_id() -> None:
    t = AS_OF - timedelta(days=1)
    later = cand("aaa", sim=0.5, ingested=AS_OF)
    earlier = cand("zzz", sim=0.5, ingested=t)
    same_b = cand("bbb", sim=0.5, ingested=t)
    assert ids(rank([later, earlier, same_b], how("vector"))) == ["bbb", "zzz", "aaa"]


def test_top_k_and_budget() -> None:
    cands = [cand(f"n{i}", sim=1.0 - i / 10, tokens=t) for i, t in enumerate([4, 3, 10, 1])]
    assert ids(rank(cands, how("vector", top_k=2))) == ["n0", "n1"]
    assert ids(rank(cands, how("vector", budget=7))) == ["n0", "n1"]  # stops at n2, never skips to n3
    assert ids(rank(cands, how("vector", budget=1))) == ["n0"]  # the best hit is always returned
    out = rank(cands, how("vector", budget=100))
    assert ids(out) == ["n0", "n1", "n2", "n3"] and len(out.explain) == 4


def test_empty_candidates() -> None:
    out = rank([], how())
    assert out.hits == [] and out.explain == []


def test_hits_are_views_of_fields() -> None:
    out = rank([cand("x", sim=0.3, lex=0.0)], how())
    hit = out.hits[0]
    assert hit.outcome == "recalled" and hit.content == "content x" and hit.scope.tenant_id == "acme"
    assert hit.scope.resource_id is None and out.explain[0].id == "x"


def test_bonus_margin_holds_for_any_ages_and_importances() -> None:
    """Default weights: relevance higher by more than w_r + w_i (0.02) always ranks first,
    whatever the ages and importances; within the margin the bonuses decide."""
    scoring = Scoring()
    margin = scoring.recency_weight + scoring.importance_weight
    assert margin == pytest.approx(0.02)
    strong = cand("strong", sim=0.5 + margin + 1e-6, importance=0.0, ingested=AS_OF - timedelta(days=3000))
    weak = cand("weak", sim=0.5, importance=1.0, ingested=AS_OF)
    assert ids(rank([weak, strong], how("vector", scoring=scoring))) == ["strong", "weak"]
    close = cand("close", sim=0.5 + margin / 4, importance=0.0)
    assert ids(rank([weak, close], how("vector", scoring=scoring))) == ["weak", "close"]


def test_alice_importance_does_not_lift_a_less_relevant_note() -> None:
    """The candidates of issue 29's case (hash embedder, w = 0.2, both match "alice" alone):
    importance 0.9 no longer outranks a relevance higher by 0.033."""
    berlin = cand("berlin", sim=0.338502, lex=1.0, importance=0.5)
    kiwi9 = cand("kiwi9", sim=0.175454, lex=1.0, importance=0.9)
    out = rank([kiwi9, berlin], how(scoring=Scoring(), w=0.2))
    assert ids(out) == ["berlin", "kiwi9"]
    assert out.explain[0].relevance - out.explain[1].relevance == pytest.approx(0.0326, abs=1e-4)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.floats(-1.0, 1.0), st.floats(0.0, 10.0), st.floats(0.0, 1.0), st.integers(0, 5000)),
        min_size=2, max_size=12),
    mode=st.sampled_from(["hybrid", "vector", "lexical"]),
    w=st.floats(0.0, 1.0),
)
def test_no_bonus_bridges_the_margin_in_any_result(rows: list[tuple[float, float, float, int]], mode: str,
                                                   w: float) -> None:
    """Issue 29, the documented margin as a property: in any ranked result (default
    weights, any cosines, full-text scores, importances and ages), a hit never ranks
    above one whose relevance is higher by more than recency_weight + importance_weight."""
    scoring = Scoring()
    margin = scoring.recency_weight + scoring.importance_weight
    cands = [cand(f"n{i}", sim=sim, lex=lex, importance=imp, ingested=AS_OF - timedelta(days=age))
             for i, (sim, lex, imp, age) in enumerate(rows)]
    out = rank(cands, how(mode, scoring=scoring, w=w, top_k=len(cands)))
    rel = [e.relevance for e in out.explain]
    assert all(rel[j] - rel[i] <= margin + 1e-9 for i in range(len(rel)) for j in range(i + 1, len(rel)))
