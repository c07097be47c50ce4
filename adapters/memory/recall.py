"""Recall in memory: the Python twin of ``recall_index.select_candidates``
(:func:`candidates`), with its lexical score and link expansion.

**The lexical score is not PostgreSQL's**: terms are lower-cased word tokens (letters
and digits) with English stop words dropped, and no stemming (PostgreSQL's
``english`` configuration stems: "cats" matches "cat" there, not here); the score is
the same BM25-with-``k1 = 0`` IDF sum ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the
query terms a note contains.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import numpy as np

from memfabric.adapters.memory.rows import Row, admits, cosine, filtered, returned, seen
from memfabric.domain.ports import Candidate, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.projections import recall_index


ENGLISH_STOP_WORDS: frozenset[str] = frozenset(["i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are", "was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but", "if", "or", "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between", "into", "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "should", "now"])
"""English stop words (the Snowball list PostgreSQL's ``english.stop`` also derives from)."""

_WORD = re.compile(r"[^\W_]+")


def lexical_terms(text: str) -> list[str]:
    """Distinct lower-cased word tokens of ``text`` without English stop words, in
    order of first appearance (no stemming: see the module doc)."""
    out: list[str] = []
    for m in _WORD.finditer(text.lower()):
        word = m.group(0)
        if word not in ENGLISH_STOP_WORDS and word not in out:
            out.append(word)
    return out


def lexical_scores(rows: Sequence[dict[str, Any]], terms: Sequence[str]) -> dict[UUID, float]:
    """BM25 IDF sum (``k1 = 0``) of the query ``terms`` each row contains, for rows
    containing at least one; ``N`` = the admitted rows (capped like PostgreSQL's)."""
    if not terms:
        return {}
    n = float(min(len(rows), recall_index.IDF_CORPUS_CAP))
    docs = {r["aggregate_id"]: set(lexical_terms(" ".join(
        part for part in (r["content"], r.get("context"), *(r.get("keywords") or ())) if part)))
        for r in rows}
    matched = {aid: [t for t in terms if t in words] for aid, words in docs.items()}
    matched = {aid: ts for aid, ts in matched.items() if ts}
    df = {t: sum(1 for ts in matched.values() if t in ts) for t in terms}
    idf = {t: math.log(1 + (max(n, df[t]) - df[t] + 0.5) / (df[t] + 0.5)) for t in terms if df[t]}
    return {aid: float(sum(idf[t] for t in ts)) for aid, ts in matched.items()}


def linked_to(edges: Sequence[dict[str, Any]], seeds: set[UUID], admitted: dict[UUID, Any],
            expand: int) -> dict[UUID, list[tuple[UUID, float]]]:
    """``recall_index._EXPAND``: notes linked either way to a seed, admitted by the
    filters, not seeds, with their ``(seed, weight)`` edges sorted by seed; top
    ``expand`` by largest weight, then id."""
    found: dict[UUID, list[tuple[UUID, float]]] = {}
    for e in edges:
        for here, there in ((e["from_aggregate_id"], e["to_aggregate_id"]),
                            (e["to_aggregate_id"], e["from_aggregate_id"])):
            if here in seeds and there not in seeds and there in admitted:
                found.setdefault(there, []).append((here, float(np.float32(e["weight"]))))
    order = sorted(found, key=lambda a: (-max(w for _, w in found[a]), a))[:expand]
    return {a: sorted(found[a], key=lambda x: str(x[0])) for a in order}


def among(edges: Sequence[dict[str, Any]], seeds: set[UUID]) -> dict[UUID, list[tuple[UUID, float]]]:
    """``recall_index._EXPAND`` (``lc``): per seed its edges (either way) to other seeds,
    sorted by seed."""
    found: dict[UUID, list[tuple[UUID, float]]] = {}
    for e in edges:
        a, b = e["from_aggregate_id"], e["to_aggregate_id"]
        if a in seeds and b in seeds:
            w = float(np.float32(e["weight"]))
            found.setdefault(b, []).append((a, w))
            found.setdefault(a, []).append((b, w))
    return {a: sorted(v, key=lambda x: str(x[0])) for a, v in found.items()}


def links_of(aid: UUID, edges: Sequence[dict[str, Any]], indexed: dict[UUID, dict[str, Any]],
              scope: Scope, filters: NoteFilter | None = None) -> list[dict[str, Any]]:
    """``recall_index._LINKS``: a note's edges to targets indexed and visible from ``scope``."""
    out = []
    for e in edges:
        target = indexed.get(e["to_aggregate_id"])
        if e["from_aggregate_id"] != aid or target is None or not seen(target, scope, filters):
            continue
        out.append({"id": e["to_note_id"], "relation": e["relation"],
                    "weight": float(np.float32(e["weight"]))})
    return sorted(out, key=lambda x: (x["id"], x["relation"]))


Ranked = tuple[dict[UUID, float], dict[UUID, int]]
"""``(score by aggregate id, rank by aggregate id)`` of one side of a recall: every
admitted row's score, and the 1-based rank of the top ``limit``."""


def admitted(log: Any, scope: Scope, kinds: Sequence[str], as_of: datetime, require_consent: bool,
             filters: NoteFilter | None) -> list[Row]:
    """Copies of the recall rows every filter of a recall admits (scope, access, kinds,
    validity at ``as_of``, consent, tags / subject / importance)."""
    with log.lock:
        return [copy.deepcopy(r) for r in log.recall_rows.values()
                if admits(r, scope, kinds, as_of, require_consent, filters) and filtered(r, filters)]


def vector_side(rows: Sequence[Row], embedding: np.ndarray | None, limit: int) -> Ranked:
    """Cosine of each row to ``embedding`` and the ranks of the ``limit`` nearest
    (ties: aggregate id); nothing without an embedding."""
    if embedding is None:
        return {}, {}
    q = np.asarray(embedding, np.float32)
    sims = {r["aggregate_id"]: cosine(r["embedding"], q) for r in rows}
    order = sorted(rows, key=lambda r: (1.0 - sims[r["aggregate_id"]], r["aggregate_id"]))
    return sims, {r["aggregate_id"]: i + 1 for i, r in enumerate(order[:limit])}


def lexical_side(rows: Sequence[Row], query: str | None, limit: int) -> Ranked:
    """Lexical score (module doc) of each row containing a query term, and the ranks of
    the top ``limit`` (ties: older first, then aggregate id); like the recall
    statement, at most ``MAX_QUERY_TERMS`` distinct terms, the longest."""
    if query is None:
        return {}, {}
    terms = sorted(lexical_terms(query), key=lambda w: (-len(w), w))[: recall_index.MAX_QUERY_TERMS]
    lex = lexical_scores(rows, terms)
    by_id = {r["aggregate_id"]: r for r in rows}
    order = sorted((by_id[a] for a in lex),
                   key=lambda r: (-lex[r["aggregate_id"]], r["ingested_at"], r["aggregate_id"]))
    return lex, {r["aggregate_id"]: i + 1 for i, r in enumerate(order[:limit])}


Edges = dict[UUID, list[tuple[UUID, float]]]
"""Per aggregate id, its ``(seed, weight)`` link edges."""


def expansion(log: Any, seeds: set[UUID], by_id: dict[UUID, Row], expand: int) -> tuple[Edges, Edges]:
    """``(linked, among)`` of issue 15's expansion: up to ``expand`` admitted notes
    linked to a seed (:func:`linked_to`), and the seeds' edges among themselves
    (:func:`among`); both empty when ``expand`` is 0."""
    if expand <= 0:
        return {}, {}
    with log.lock:
        edges = [dict(e) for es in log.link_rows.values() for e in es]
    return linked_to(edges, seeds, by_id, expand), among(edges, seeds)


def candidates(log: Any, scope: Scope, *, embedding: np.ndarray | None, query: str | None,
               kinds: Sequence[str], as_of: datetime, limit: int, require_consent: bool,
               filters: NoteFilter | None = None, expand: int = 0) -> list[Candidate]:
    """Like ``recall_index.select_candidates`` on ``log``'s recall rows: the top
    ``limit`` by cosine and the top ``limit`` by the lexical score, every filter applied
    first, then (``expand``) that many linked notes; seeds in aggregate-id order."""
    rows = admitted(log, scope, kinds, as_of, require_consent, filters)
    by_id = {r["aggregate_id"]: r for r in rows}
    sims, vranks = vector_side(rows, embedding, limit)
    lex, lranks = lexical_side(rows, query, limit)
    seeds = set(vranks) | set(lranks)
    linked, near = expansion(log, seeds, by_id, expand)
    if embedding is not None:
        q = np.asarray(embedding, np.float32)
        sims.update({aid: cosine(by_id[aid]["embedding"], q) for aid in linked})
    return [Candidate(
        aggregate_id=aid, note_id=by_id[aid]["note_id"],
        similarity=sims[aid] if embedding is not None else None,
        lexical=lex.get(aid, 0.0) if query is not None else None,
        vector_rank=vranks.get(aid), lexical_rank=lranks.get(aid), fields=returned(by_id[aid]),
        link=max(w for _, w in linked[aid]) if aid in linked else None,
        link_from=tuple(linked[aid] if aid in linked else near.get(aid, ())))
        for aid in [*sorted(seeds), *linked]]


def hit_links(log: Any, scope: Scope, aggregate_ids: Sequence[UUID],
              filters: NoteFilter | None = None) -> dict[UUID, list[dict[str, Any]]]:
    """Like ``recall_index.select_links``: each hit's edges to notes its reader sees."""
    with log.lock:
        edges = [dict(e) for es in log.link_rows.values() for e in es]
        indexed = {aid: dict(r) for aid, r in log.recall_rows.items()}
    out = {aid: links_of(aid, edges, indexed, scope, filters) for aid in aggregate_ids}
    return {aid: found for aid, found in out.items() if found}
