"""Issue 29: the link part of the recall statement (``projections/recall_links.py``).

The shipped form must return exactly the rows of the plain join form it replaced
(:data:`REFERENCE_EXPAND`, issue 15's text) and rank the same hits, with the table
statistics stale (right after the writes, as a conversation is recalled once stored)
and after ``ANALYZE``; and its plan must stay estimate-proof: the link graph read by
index only, and no join filter (a nested loop comparing every pair of rows) in the link
CTEs. Real PostgreSQL (fresh database per test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from memfabric.adapters import Fabric, HashEmbedder, open_fabric
from memfabric.adapters.postgres.vectors import VectorTypes
from memfabric.domain.ports import NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import recall_hits, recall_index, recall_links

REFERENCE_EXPAND = (
    # issue 15's form: every join left to the planner's estimates (seeds given by their
    # numbers, as the shipped form returns them)
    ", le AS (SELECT g.to_aggregate_id AS aggregate_id, g.from_aggregate_id AS seed, g.weight"
    " FROM {g} g JOIN c ON g.from_aggregate_id = c.aggregate_id WHERE g.tenant_id = %(t)s"
    " UNION ALL SELECT g.from_aggregate_id, g.to_aggregate_id, g.weight FROM {g} g"
    " JOIN c ON g.to_aggregate_id = c.aggregate_id WHERE g.tenant_id = %(t)s),"
    " lx AS MATERIALIZED (SELECT l.aggregate_id, max(l.weight)::float8 AS lw,"
    # a seed's number (``recall_links.seed_number``) by a sub-select per edge, packed
    # with its weight as the shipped form does (``recall_links.unpack``)
    " string_agg(int4send(coalesce((SELECT rank FROM vr WHERE vr.aggregate_id = l.seed),"
    " %(limit)s::int + (SELECT rank FROM lr WHERE lr.aggregate_id = l.seed))::int4) || float4send(l.weight),"
    " ''::bytea ORDER BY l.seed) AS seeds FROM le l"
    " WHERE l.aggregate_id NOT IN (SELECT aggregate_id FROM c)"
    " AND EXISTS (SELECT 1 FROM {t} WHERE {t}.aggregate_id = l.aggregate_id AND {w})"
    " GROUP BY l.aggregate_id ORDER BY lw DESC, l.aggregate_id LIMIT %(expand)s),"
    " lc AS MATERIALIZED (SELECT l.aggregate_id, string_agg(int4send(coalesce((SELECT rank FROM vr"
    " WHERE vr.aggregate_id = l.seed), %(limit)s::int + (SELECT rank FROM lr WHERE lr.aggregate_id = l.seed))::int4)"
    " || float4send(l.weight), ''::bytea ORDER BY l.seed) AS seeds FROM le l"
    " WHERE l.aggregate_id IN (SELECT aggregate_id FROM c) GROUP BY l.aggregate_id),"
    " ca AS (SELECT c.aggregate_id, NULL::float8 AS lw, lc.seeds FROM c LEFT JOIN lc USING (aggregate_id)"
    " UNION ALL SELECT aggregate_id, lw, seeds FROM lx)"
)

TOPICS = ("cello", "orchestra", "tuesday", "berlin", "paris", "garden", "tomatoes", "marathon",
          "training", "budget", "kiwi", "project")
QUERIES = ("when does the orchestra rehearse", "what does Alice grow in her garden",
           "marathon training plan", "project kiwi budget", "where did Alice move", "cello lessons")


class _Session:
    id = "s-29"


@pytest.fixture
def linked(dsn: str) -> Iterator[Fabric]:
    """A scope of 400 notes (a conversation's size) written with the linker attached (shared rare terms, the
    ``follows`` edge to the previous note): some are procedures (not recalled with
    ``kinds=("fact",)``), some tagged, two forgotten after linking, and a note of another
    resource whose content matches every query."""
    with open_fabric(dsn, consolidate=False, embedder=HashEmbedder(),
                     linker={"enabled": True, "top_k": 8, "by": "terms", "adjacent": 0.5}) as fab:
        notes = fab.scope("acme", "u1")
        att = notes.attach(_Session())
        written = []
        for i in range(400):
            a, b = TOPICS[i % len(TOPICS)], TOPICS[(i * 5 + 3) % len(TOPICS)]
            written.append(dict(
                kind="procedure" if i % 7 == 0 else "fact", tags=["music"] if i % 3 == 0 else [],
                content=f"Alice note {i}: the {a} and the {b} came up again (item {i % 11})"))
        written = list(notes.remember_many(written))
        att.detach()
        for n in written[10:12]:
            notes.forget(id=n.id)
        fab.scope("acme", "u2").remember(kind="fact", content=" ".join(QUERIES))
        yield fab


def _candidates(conn: psycopg.Connection[Any], query: str, kinds: tuple[str, ...],
                filters: NoteFilter | None, cursor: Any = None) -> list[tuple[Any, ...]]:
    emb = _EMBEDDER.embed([query])[0]
    out = recall_index.select_candidates(
        cursor or conn.cursor(), Scope(tenant_id="acme", resource_id="u1"), embedding=emb, query=query,
        kinds=kinds, as_of=datetime.now(timezone.utc), limit=40, require_consent=False, filters=filters,
        expand=40)
    return sorted((c.aggregate_id, c.link, c.link_from, c.similarity, c.lexical, c.vector_rank, c.lexical_rank)
                  for c in out)


def _with_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_links, "EXPAND", REFERENCE_EXPAND)
    recall_index.recall_statement.cache_clear()


def _shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    recall_index.recall_statement.cache_clear()


_EMBEDDER = HashEmbedder()
CASES = [(("fact",), None), (("fact", "procedure"), None), (("fact", "procedure"), NoteFilter(tags=("music",)))]


def _connect(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)
    VectorTypes().ensure(conn)
    return conn


@pytest.mark.parametrize("analyze", [False, True], ids=["stale-statistics", "analyzed"])
def test_rows_and_hits_equal_the_join_form(linked: Fabric, dsn: str, monkeypatch: pytest.MonkeyPatch,
                                           analyze: bool) -> None:
    notes = linked.scope("acme", "u1")
    with _connect(dsn) as conn:
        if analyze:
            conn.execute("ANALYZE")
        edges = {(r["from_aggregate_id"], r["to_aggregate_id"], r["w"]) for r in conn.execute(
            "SELECT from_aggregate_id, to_aggregate_id, weight::float8 AS w FROM mf_link_graph")}
        expanded = 0
        for query in QUERIES:
            for kinds, filters in CASES:
                shipped = _candidates(conn, query, kinds, filters)
                # a list candidate's edges come sorted by (other end, weight), each an
                # edge of the link graph (either direction) to the aggregate named
                assert all(row[2] == tuple(sorted(row[2])) for row in shipped)
                assert all({(row[0], seed, w), (seed, row[0], w)} & edges for row in shipped for seed, w in row[2])
                _with_reference(monkeypatch)
                reference = _candidates(conn, query, kinds, filters)
                _shipped(monkeypatch)
                norm = lambda rows: [(*r[:2], tuple(sorted(r[2])), *r[3:]) for r in rows]  # noqa: E731
                assert norm(shipped) == norm(reference), (query, kinds, filters)
                expanded += sum(r[1] is not None for r in shipped)
            hits = notes.recall(query, top_k=10, kinds=["fact", "procedure"])
            _with_reference(monkeypatch)
            ref_hits = notes.recall(query, top_k=10, kinds=["fact", "procedure"])
            _shipped(monkeypatch)
            assert [(h.id, h.links) for h in hits.hits] == [(h.id, h.links) for h in ref_hits.hits]
            assert [e.link_score for e in hits.explain] == [e.link_score for e in ref_hits.explain]
        assert expanded > 0  # the fixture exercises the expansion


def _plan_nodes(node: dict[str, Any], cte: str | None = None) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan with the name of the CTE it is in."""
    name = node.get("Subplan Name", "")
    cte = name[4:] if name.startswith("CTE ") else cte
    yield cte, node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child, cte)


class _ExplainCursor:
    """Runs ``EXPLAIN (ANALYZE, FORMAT JSON)`` of the statement instead; keeps the plan."""

    def __init__(self, cur: Any) -> None:
        self._cur = cur
        self.plan: dict[str, Any] = {}

    def execute(self, query: bytes, params: Any = None, **_: Any) -> _ExplainCursor:
        row = self._cur.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
        self.plan = next(iter(row.values()))[0]["Plan"]
        return self

    def fetchall(self) -> list[Any]:
        return []


@pytest.mark.parametrize("analyze", [False, True], ids=["stale-statistics", "analyzed"])
def test_plan_reads_the_link_graph_by_index_without_join_filters(linked: Fabric, dsn: str, analyze: bool) -> None:
    with _connect(dsn) as conn:
        if analyze:
            conn.execute("ANALYZE")
        for query in QUERIES:
            cur = _ExplainCursor(conn.cursor())
            _candidates(conn, query, ("fact", "procedure"), None, cursor=cur)
            nodes = list(_plan_nodes(cur.plan))
            graph = [n for _, n in nodes if n.get("Relation Name", "").startswith("mf_link_graph")]
            assert graph and all(n["Node Type"] in ("Index Scan", "Bitmap Heap Scan", "Index Only Scan")
                                 for n in graph), [n["Node Type"] for n in graph]
            in_links = [n for cte, n in nodes if cte in ("le", "lk", "lv", "lx", "ca")]
            assert in_links and not [n for n in in_links if "Join Filter" in n], query


PER_QUERY_CTES = {"qt", "nn", "idf"}
"""CTEs a plan may scan once per row: the query's lexemes (at most
``MAX_QUERY_TERMS``), the admitted-note count (one row) and the lexemes' IDF."""


def _generic_plan(conn: psycopg.Connection[Any], query: str) -> dict[str, Any]:
    """The plan of the recall statement as prepared (``prepare=True``) under a generic
    plan, with actual loop counts (``auto_explain`` sent to the client as a notice)."""
    plans: list[str] = []
    conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    for setting in ("LOAD 'auto_explain'", "SET plan_cache_mode = force_generic_plan",
                    "SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
                    "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice"):
        conn.execute(setting)
    plans.clear()
    _candidates(conn, query, ("fact",), None)
    found = [p for p in (json.loads(text[text.index("{"):]) for text in plans if '"Plan"' in text)
             if " vr AS (" in p["Query Text"]]
    assert len(found) == 1, plans
    return dict(found[0]["Plan"])


@pytest.mark.parametrize("analyze", [False, True], ids=["stale-statistics", "analyzed"])
def test_a_generic_plan_scans_no_candidate_cte_per_row(linked: Fabric, dsn: str, analyze: bool) -> None:
    """A pooled connection prepares the statement and PostgreSQL then runs a generic
    plan, whose row estimates for the CTEs are a few rows: the returned rows must not be
    joined to ``vr`` / ``lr`` / ``ls`` (or any CTE of candidates) by a nested loop that
    rescans the CTE per row (issue 29: 120,000 join-filter comparisons, 13 ms of a
    linked recall of a 400-note scope, before ``cf``)."""
    with _connect(dsn) as conn:
        if analyze:
            conn.execute("ANALYZE")
        for query in QUERIES[:3]:
            nodes = [n for _, n in _plan_nodes(_generic_plan(conn, query))]
            rescanned = {n["CTE Name"] for n in nodes if n["Node Type"] == "CTE Scan" and n["Actual Loops"] > 1}
            assert rescanned <= PER_QUERY_CTES, (query, rescanned)
            assert sum(n["Node Type"] == "CTE Scan" for n in nodes) > 10  # the plan was read


JSONB_LINKS = (
    # the former ``select_links`` statement: a jsonb object per edge
    "SELECT g.from_aggregate_id AS aggregate_id, coalesce(jsonb_agg(jsonb_build_object("
    "'id', g.to_note_id, 'relation', g.relation, 'weight', g.weight)"
    " ORDER BY g.to_note_id, g.relation), '[]'::jsonb) AS links FROM {g} g"
    " WHERE g.tenant_id = %(t)s AND g.from_aggregate_id = ANY(%(ids)s) AND EXISTS (SELECT 1 FROM {t} x"
    " WHERE x.aggregate_id = g.to_aggregate_id AND {xs} OFFSET 0) GROUP BY g.from_aggregate_id"
)


def test_the_hits_links_equal_the_jsonb_form(linked: Fabric, dsn: str) -> None:
    """``select_links`` returns arrays (issue 29); the edges, weights included, are those
    the jsonb form gave, and an edge to a forgotten note is left out."""
    with _connect(dsn) as conn:
        ids = [r["aggregate_id"] for r in conn.execute(
            "SELECT aggregate_id FROM mf_recall_index WHERE tenant_id = 'acme' ORDER BY aggregate_id")]
        scope = Scope(tenant_id="acme", resource_id="u1")
        shipped = recall_hits.select_links(conn.cursor(), scope, ids)
        text = sql.SQL(JSONB_LINKS).format(g=sql.Identifier("mf_link_graph"), t=sql.Identifier("mf_recall_index"),
                                           xs=recall_index.scope_filter("x"))
        t, r, th = scope.sql()
        former = {row["aggregate_id"]: list(row["links"])
                  for row in conn.execute(text, {"t": t, "r": r, "th": th, "ids": ids})}
        edges = conn.execute("SELECT count(*) AS n FROM mf_link_graph WHERE tenant_id = 'acme'").fetchone()
    assert shipped == former and len(shipped) > 300
    assert sum(map(len, shipped.values())) < edges["n"]  # the edges to the two forgotten notes are left out


def _all_columns_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """The former form: every row of the recall statement carries every column."""
    monkeypatch.setattr(recall_index, "RANKED", frozenset(n for n, _ in recall_index.RETURNED_COLUMNS))
    recall_index.recall_statement.cache_clear()


def test_linked_notes_rows_are_partial_and_the_hits_equal_full_rows(
        linked: Fabric, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: a linked note's candidate row carries only the columns ranking reads
    (``Candidate.partial``); the hits, their links and explain rows equal those of the
    form whose every row is full, and a linked recall is still two statements."""
    notes = linked.scope("acme", "u1")
    with _connect(dsn) as conn:
        emb = _EMBEDDER.embed([QUERIES[0]])[0]
        out = recall_index.select_candidates(
            conn.cursor(), Scope(tenant_id="acme", resource_id="u1"), embedding=emb, query=QUERIES[0],
            kinds=("fact",), as_of=datetime.now(timezone.utc), limit=40, require_consent=False, expand=40)
    expanded = [c for c in out if c.link is not None]
    assert expanded and all(c.partial and c.fields["content"] is None and c.fields["tags"] is None
                            and c.fields["note_id"] and c.fields["ingested_at"] for c in expanded)
    assert all(not c.partial and c.fields["content"] for c in out if c.link is None)
    statements: list[bytes] = []
    orig = psycopg.Cursor.execute

    def spy(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        statements.append(query if isinstance(query, bytes) else b"")
        return orig(self, query, *a, **k)
    via_link = 0
    for query in QUERIES:
        statements.clear()
        monkeypatch.setattr(psycopg.Cursor, "execute", spy)
        shipped = notes.recall(query, top_k=10, kinds=["fact", "procedure"])
        monkeypatch.undo()
        assert len([s for s in statements if s.startswith((b"WITH", b"SELECT"))]) == 2, statements
        _all_columns_full(monkeypatch)
        full = notes.recall(query, top_k=10, kinds=["fact", "procedure"])
        _shipped(monkeypatch)
        assert shipped.hits == full.hits and shipped.explain == full.explain, query
        via_link += sum(e.link for e in shipped.explain)
    assert via_link > 0  # expanded notes became hits, their rows read after the ranking


def test_select_hits_reads_the_full_rows_of_visible_notes_only(linked: Fabric, dsn: str) -> None:
    """``select_hits``' rows are the recall statement's columns of the notes asked for
    that are still visible; a forgotten note (edges still point at it) is absent."""
    scope = Scope(tenant_id="acme", resource_id="u1")
    with _connect(dsn) as conn:
        gone = conn.execute("SELECT DISTINCT to_aggregate_id AS a FROM mf_link_graph g WHERE NOT EXISTS"
                            " (SELECT 1 FROM mf_recall_index i WHERE i.aggregate_id = g.to_aggregate_id)").fetchone()
        other = conn.execute("SELECT aggregate_id AS a FROM mf_recall_index WHERE resource_id = 'u2'").fetchone()
        live = [r["aggregate_id"] for r in conn.execute(
            "SELECT aggregate_id FROM mf_recall_index WHERE resource_id = 'u1' ORDER BY aggregate_id LIMIT 5")]
        asked = [*live, gone["a"], other["a"]]
        links, rows = recall_hits.select_hits(conn.cursor(), scope, live, complete=asked)
        expected = {r.pop("aggregate_id"): r for r in conn.execute(
            sql.SQL("SELECT i.aggregate_id, {ret} FROM mf_recall_index i WHERE i.aggregate_id = ANY(%s)").format(
                ret=sql.SQL(recall_index.RETURNED)), (live,))}
        assert links == recall_hits.select_links(conn.cursor(), scope, live) and links
    assert rows == expected and len(rows) == 5
