"""Recall: ranking with explain, kinds, validity windows, budget, isolation, filtered
HNSW completeness, read-your-writes (issue 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memfabric.adapters import Fabric, open_fabric
from memfabric.adapters.embedders import HashEmbedder

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_explain_is_parallel_and_never_echoes_query(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    ids = [notes.remember(kind="fact", content=c).id for c in (
        "User prefers metric units", "The office is in Lisbon", "Deploys happen on Tuesdays")]
    query = "zebra-unique-query-token preferred units"
    res = notes.recall(query, min_relevance=0)
    assert [h.id for h in res.hits] == [e.id for e in res.explain]
    assert set(ids) == {h.id for h in res.hits}
    assert res.hits[0].id == ids[0]
    for hit, ex in zip(res.hits, res.explain, strict=True):
        assert "zebra" not in repr(hit) and "zebra" not in repr(ex)
        assert ex.score >= 0 and 0 <= ex.recency <= 1 and 0 <= ex.importance <= 1
        assert ex.valid == (hit.valid_from, hit.valid_to)
    scores = [e.score for e in res.explain]
    assert scores == sorted(scores, reverse=True)


def test_procedures_only_when_asked(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    proc = notes.remember(kind="procedure", content="To rotate the API key create a new key then revoke the old one")
    fact = notes.remember(kind="fact", content="The API key was rotated last week")
    f = notes.remember(kind="file", path="ops/rotate_key.sh", content="script that rotates the API key")
    default = notes.recall("rotate the API key", top_k=10)
    assert proc.id not in {h.id for h in default.hits}
    assert {fact.id, f.id} <= {h.id for h in default.hits}
    only = notes.recall("rotate the API key", kinds=("procedure",))
    assert [h.id for h in only.hits] == [proc.id]
    assert notes.recall("rotate the API key", kinds="file").hits[0].path == "ops/rotate_key.sh"


def test_validity_window_from_inclusive_to_exclusive(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    lo, hi = T0, T0 + timedelta(days=10)
    n = notes.remember(kind="fact", content="The promo code is SPRING", valid_from=lo, valid_to=hi)
    def ids(at: datetime) -> list[str]:
        return [h.id for h in notes.recall("promo code", as_of=at).hits]
    assert ids(lo) == [n.id]
    assert ids(hi - timedelta(microseconds=1)) == [n.id]
    assert ids(hi) == []
    assert ids(lo - timedelta(microseconds=1)) == []
    assert notes.recall("promo code").hits == []  # now is after valid_to: dropped by time alone


def test_top_k_and_budget(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    for i in range(12):
        notes.remember(kind="fact", content=f"Server number {i} runs the billing job in region {i}")
    assert len(notes.recall("billing job server", top_k=5).hits) == 5
    full = notes.recall("billing job server", top_k=12)
    first_tokens = full.hits[0].token_count
    tight = notes.recall("billing job server", top_k=12, budget=1)
    assert [h.id for h in tight.hits] == [full.hits[0].id]  # the best hit is always returned
    budget = first_tokens * 3 + 1
    mid = notes.recall("billing job server", top_k=12, budget=budget)
    total = sum(h.token_count for h in mid.hits)
    assert total <= budget and len(mid.hits) == 3
    assert [h.id for h in mid.hits] == [h.id for h in full.hits[:3]]


def test_scoring_reranks_by_importance_and_recency(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    # explicit ids disable consolidation, so both notes stay live
    a = notes.remember(kind="fact", content="The team lunch is on Friday", importance=0.0, t_ref=T0,
                       id="00000000000a")
    b = notes.remember(kind="fact", content="The team lunch is on Friday at noon", importance=1.0,
                       id="00000000000b",
                       t_ref=datetime.now(timezone.utc))
    plain = notes.recall("team lunch Friday", scoring={"recency_weight": 0, "importance_weight": 0}, mode="vector")
    assert plain.hits[0].id == a.id  # closer text wins on similarity alone
    weighted = notes.recall("team lunch Friday", scoring={"recency_weight": 1, "importance_weight": 1}, mode="vector")
    assert weighted.hits[0].id == b.id
    ex = {e.id: e for e in weighted.explain}
    assert ex[b.id].recency > 0.99 and ex[a.id].recency < 0.01
    assert ex[b.id].importance == 1.0 and ex[a.id].importance == 0.0


def test_modes_and_explain_components(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    n = notes.remember(kind="fact", content="Kubernetes upgrade scheduled for March")
    notes.remember(kind="fact", content="Quarterly revenue grew nine percent")
    lexical = notes.recall("kubernetes", mode="lexical")
    assert [h.id for h in lexical.hits] == [n.id]
    assert lexical.explain[0].lexical == 1.0 and lexical.explain[0].similarity is None
    vector = notes.recall("kubernetes", mode="vector", min_relevance=0)
    assert len(vector.hits) == 2 and vector.explain[0].lexical is None
    hybrid = notes.recall("kubernetes upgrade")
    assert hybrid.hits[0].id == n.id
    top = hybrid.explain[0]
    assert top.vector_rank == 1 and top.lexical_rank == 1 and top.lexical == 1.0
    # convex fusion with the hash embedder's default vector weight (0.2)
    assert top.relevance == pytest.approx(0.2 * top.similarity + 0.8, abs=1e-5)


def test_tenant_isolation_in_sql(fabric: Fabric) -> None:
    a = fabric.scope("tenant-a", "r", "t")
    b = fabric.scope("tenant-b", "r", "t")
    a.remember(kind="fact", content="Secret launch date is June 3", consent={"visibility": "thread"})
    assert b.recall("secret launch date", top_k=50).hits == []
    assert b.recall("secret launch date", mode="lexical").hits == []
    other_thread = fabric.scope("tenant-a", "r", "t2")
    assert other_thread.recall("secret launch date").hits == []
    n_b = b.remember(kind="fact", content="Secret launch date is June 3")
    assert [h.id for h in b.recall("launch").hits] == [n_b.id]
    assert [h.scope.tenant_id for h in a.recall("launch").hits] == ["tenant-a"]


def test_same_id_in_two_scopes_is_two_notes(fabric: Fabric) -> None:
    a = fabric.scope("a").remember(kind="fact", content="alpha", id="00000000000a")
    b = fabric.scope("b").remember(kind="fact", content="beta", id="00000000000a")
    assert a.id == b.id
    assert fabric.scope("a").get("00000000000a").content == "alpha"
    assert fabric.scope("b").get("00000000000a").content == "beta"


@pytest.mark.parametrize("exact_search_max", [0, 20_000], ids=["hnsw", "exact"])
def test_filtered_hnsw_returns_top_k_for_a_small_tenant(dsn: str, exact_search_max: int) -> None:
    """10 tenants; the querying tenant owns a tenth of 3,000 rows: all top_k rows come
    back and match exact search, both through the HNSW index (iterative scan) and with
    the exact strategy used for small tenants."""
    emb = HashEmbedder()
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(400)]
    with open_fabric(dsn, consolidate=False) as fab:
        texts = {}
        for t in range(10):
            items = []
            for _ in range(300):
                text = " ".join(rng.choice(words, size=6))
                items.append({"kind": "fact", "content": text})
            notes = fab.scope(f"tenant{t}").remember_many(items)
            texts[t] = [(n.id, n.content) for n in notes]
        query = " ".join(rng.choice(words, size=4))
        fab.store.exact_search_max = exact_search_max
        res = fab.scope("tenant3").recall(query, top_k=25, mode="vector",
                                          scoring={"recency_weight": 0, "importance_weight": 0})
        assert len(res.hits) == 25
        ids = [i for i, _ in texts[3]]
        vecs = emb.embed([c for _, c in texts[3]])
        q = emb.embed([query])[0]
        exact = [ids[i] for i in np.argsort(-(vecs @ q), kind="stable")[:25]]
        got = [h.id for h in res.hits]
        assert len(set(got) & set(exact)) >= 24  # recall@25 >= 0.96 against exact search


def test_custom_embedder_is_used_and_recorded(dsn: str) -> None:
    class Tiny:
        id = "tiny-8"
        dim = 8

        def embed(self, texts):  # type: ignore[no-untyped-def]
            out = np.zeros((len(texts), 8), np.float32)
            for i, t in enumerate(texts):
                out[i, len(t) % 8] = 1.0
            return out

    with open_fabric(dsn, embedder=Tiny()) as fab:
        n = fab.scope("acme").remember(kind="fact", content="abc")
        hist = fab.scope("acme").history(n.id)
        assert hist[0].fields["embedder_id"] == "tiny-8" and hist[0].fields["dim"] == 8
    from memfabric.domain.errors import FabricError

    with pytest.raises(FabricError, match="dimension"):
        open_fabric(dsn)  # 384-d default against an 8-d index


def test_read_your_writes_across_processes(fabric: Fabric, dsn: str) -> None:
    """When remember returns, another process's very next recall sees the note."""
    notes = fabric.scope("acme", "u", "t")
    n = notes.remember(kind="fact", content="The wifi password is hunter2")
    code = textwrap.dedent(f"""
        from memfabric.adapters import open_fabric
        with open_fabric({dsn!r}) as fab:
            hits = fab.scope("acme", "u", "t").recall("wifi password").hits
            print(hits[0].id if hits else "none")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == n.id


def test_projection_replay_gives_identical_rows(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="User prefers metric units")
    notes.remember(kind="fact", content="User prefers metric units")
    notes.remember(kind="fact", content="User prefers metric units and Celsius")
    notes.remember(kind="file", path="a.py", content="module a")
    gone = notes.remember(kind="fact", content="Temporary note to forget")
    notes.forget(id=gone.id)
    import psycopg

    dump = "SELECT * FROM mf_recall_index ORDER BY aggregate_id"
    with psycopg.connect(dsn) as conn:
        before = conn.execute(dump).fetchall()
        conn.execute("TRUNCATE mf_recall_index")
        conn.execute("DELETE FROM mf_recall_index_tracking")  # the floor and every tenant's row
    fabric.catch_up()
    with psycopg.connect(dsn) as conn:
        after = conn.execute(dump).fetchall()
    assert len(before) == 3
    assert after == before


def test_read_your_writes_with_a_separate_runner(dsn: str) -> None:
    """inline_projections=False: remember returns only once `memfabric projections run`
    (another process) has projected the write, so the next recall sees it."""
    import signal

    with open_fabric(dsn) as fab:  # create the tables first
        fab.scope("acme").remember(kind="fact", content="bootstrap note")
    runner = subprocess.Popen([sys.executable, "-m", "memfabric.adapters.cli.app", "projections", "run",
                               "--dsn", dsn, "--poll", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open_fabric(dsn, inline_projections=False) as fab:
            notes = fab.scope("acme", "u", "t")
            for i in range(5):
                n = notes.remember(kind="fact", content=f"Runner-projected fact number {i} about zebras")
                assert n.id in [h.id for h in notes.recall("zebras fact", top_k=10).hits]
    finally:
        runner.send_signal(signal.SIGINT)
        runner.wait(30)


def test_without_runner_a_write_times_out_but_is_durable(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        fab.scope("acme").remember(kind="fact", content="bootstrap note")
    with open_fabric(dsn, inline_projections=False) as fab:
        fab.store.await_timeout = 0.3
        with pytest.raises(TimeoutError):
            fab.scope("acme").remember(kind="fact", content="nobody projects this")
    with open_fabric(dsn) as fab:  # opening catches up: the write was durable
        assert fab.scope("acme").recall("nobody projects this").hits[0].content == "nobody projects this"


def test_importance_never_bridges_a_relevance_gap(fabric: Fabric) -> None:
    """Issue 29: importance 0.9 lifted "Alice note 9: project kiwi9 budget" above "Alice moved
    from Paris to Berlin" for "where does Alice live?" (1.025 vs 1.018 with weights 0.1)."""
    notes = fabric.scope("acme", "alice-rank")
    berlin = notes.remember(kind="fact", content="Alice moved from Paris to Berlin")
    for i in range(10):
        notes.remember(kind="fact", content=f"Alice note {i}: project kiwi{i} budget is {i}00 EUR",
                       importance=i / 10)
    res = notes.recall("where does Alice live?")
    order = [h.content for h in res.hits]
    ex = {e.id: e for e in res.explain}
    kiwi9 = next(h for h in res.hits if "kiwi9" in h.content)
    assert ex[berlin.id].relevance - ex[kiwi9.id].relevance > 0.02  # the documented bonus margin
    assert order.index("Alice moved from Paris to Berlin") < order.index(kiwi9.content)
