"""Recall ranking: a pure function from index candidates to ranked hits and explain rows.

For each candidate (see ``memfabric.domain.ports.Candidate``)::

    lexical   = raw full-text score / best raw score among the candidates        (in [0, 1])
    relevance = w · max(0, cosine) + (1 − w) · lexical      hybrid, convex (Bruch et al., TOIS 2023)
              | weighted RRF of the two ranks                hybrid, fusion="rrf" (Cormack et al. 2009)
              | max(0, cosine)                                vector mode
              | lexical                                       lexical mode
    score     = relevance + recency_weight · 0.5^(age / half_life) + importance_weight · importance
                                                             (additive, Park et al., UIST 2023)

Bonus margin (issue 29): recency and importance are in [0, 1], so a note whose relevance
is higher than another's by more than ``recency_weight + importance_weight`` (default
0.01 + 0.01 = 0.02) always ranks above it; the bonuses only order notes of near-equal
relevance.

Relevance floor: a candidate whose *evidence* is below ``min_relevance`` (default
0.05, see :data:`memfabric.domain.inputs.DEFAULT_MIN_RELEVANCE`) is dropped before the
cut, so ``top_k`` is never padded with notes that share nothing with the query
(cosine ≈ 0 and no matching term). The evidence is the relevance above, except under
``fusion="rrf"``, whose rank-based values carry no magnitude: there it is the convex
relevance ``w · max(0, cosine) + (1 − w) · lexical`` of the same candidate.

Link expansion (issue 15). A candidate the recall statement added because it is linked
(either direction) to list candidates carries those edges ``(seed, e)``; its score
spreads the relevance of the direct hits it is linked to (one hop of spreading
activation, Collins & Loftus 1975; Crestani 1997)::

    link      = max over its edges to a seed hit h of  e · relevance(h)
    score     = relevance + recency_weight · recency + importance_weight · importance
                + link_weight · link                          (link_weight: Scoring, default 0.7)

(0 when none of its seeds is among the seed hits). The *seed hits* are the ``top_k``
list candidates of highest score without any link term. With expansion, a list
candidate linked (either direction) to a seed hit other than itself gains the same
link term, so a note that is both weakly matched and linked to a strong hit can displace
a weakly matched seed (two linked turns about one thing reinforce each other). The list
candidates passing the floor are then sorted by score and cut at ``top_k`` (the direct
hits). A linked note's own evidence for the query is often low (that is why it is
reached through a link), so it is admitted by its link instead: an expansion candidate,
or a list candidate below the floor, is admitted when its link term passes the floor
(``link`` ≥ ``min_relevance``, and > 0), or when its own evidence does. The candidates
so admitted are sorted by score and cut at ``expand`` (``top_k`` when recall expands);
both are then merged and sorted by score (ties: earlier ``ingested_at``, then id) and cut
at ``budget`` (summed ``token_count`` over the whole result; the best hit is always
returned and ranking stops at the first hit that would not fit). ``explain.link`` is
True exactly for the hits admitted through a link (added by expansion, or a list
candidate below the floor); ``explain.link_score`` is the link term of every hit (0.0
without one). Without expansion no hit has a link term.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from datetime import datetime, timedelta, timezone
from uuid import UUID

from memfabric.domain import policy
from memfabric.domain.inputs import RecallMode, Scoring
from memfabric.domain.ports import Candidate
from memfabric.domain.results import ConsentInfo, Explain, Link, MemoryNote, Outcome, RecallResult
from memfabric.domain.scope import Scope


@dataclass(frozen=True, slots=True)
class Ranking:
    """How to rank one recall: ``mode``, ``as_of``, weights, ``vector_weight`` ``w``
    (already resolved from the embedder), ``top_k`` and ``budget`` (tokens or None)."""

    mode: RecallMode
    as_of: datetime
    scoring: Scoring
    vector_weight: float
    top_k: int
    budget: int | None
    expand: int = 0
    min_relevance: float = 0.0
    half_life_of: Mapping[UUID, timedelta] = field(default_factory=dict)
    """Issue 30: the recency half-life of candidates whose retention class has one
    configured (``Windows.half_life``); the others use ``scoring.half_life``."""


@dataclass(slots=True)
class _Scored:
    """One candidate's score and its parts (never changed once made; not ``frozen``:
    a frozen dataclass sets each field through ``object.__setattr__``, and a linked
    recall makes ~400 of these)."""

    total: float
    relevance: float
    recency: float
    lexical: float | None
    cand: Candidate
    evidence: float
    link: float = 0.0
    via_link: bool = False


HitsOf = Callable[[Sequence[UUID], Sequence[UUID]],
                  tuple[Mapping[UUID, Sequence[dict[str, Any]]], Mapping[UUID, dict[str, Any]]]]
"""``(hits, complete) -> (links, rows)`` (``NoteStore.hits`` for one scope): the link
edges of the hits by aggregate id (``{aggregate_id: [{id, relation, weight}]}``, a
note without edges absent) and the full ``fields`` of the ``complete`` ones (hits whose
candidate is ``partial``; one no longer visible is absent)."""


def rank(candidates: Sequence[Candidate], how: Ranking, hits_of: HitsOf | None = None) -> RecallResult:
    """Ranked hits and their parallel explain rows (see the module doc). ``hits_of``:
    read each hit's link edges (``MemoryNote.links``), and the full row of a hit whose
    candidate is ``partial``, for the hits alone, one call, before the hits are made
    (default: the candidates' ``fields["links"]``, if any; a ``partial`` candidate
    then needs ``hits_of``). A partial hit whose row ``hits_of`` no longer finds (the
    note was forgotten in between) is left out."""
    best_lex = max((c.lexical or 0.0 for c in candidates), default=0.0)
    direct, hit_relevance, weak = _direct(candidates, how, best_lex)
    expanded = (s for s in (_score(c, how, best_lex, hit_relevance) for c in candidates if c.link is not None)
                if s.link >= max(how.min_relevance, 1e-12) or s.evidence >= how.min_relevance)
    linked = sorted([*expanded, *weak], key=_order)[: how.expand]
    kept = _within_budget(sorted([*direct, *linked], key=_order), how.budget)
    links: Mapping[UUID, Sequence[dict[str, Any]]] = {}
    if hits_of is not None and kept:
        links, rows = hits_of([s.cand.aggregate_id for s in kept], [s.cand.aggregate_id for s in kept if s.cand.partial])
        kept = [_completed(s, rows) for s in kept if not s.cand.partial or s.cand.aggregate_id in rows]
    return RecallResult(hits=[candidate_view(s.cand, links=links.get(s.cand.aggregate_id)) for s in kept],
                        explain=[_explain(s) for s in kept])


def _completed(s: _Scored, rows: Mapping[UUID, dict[str, Any]]) -> _Scored:
    """``s`` with its candidate's full row from ``rows`` when it is ``partial``."""
    c = s.cand
    if not c.partial:
        return s
    full = replace(c, fields={**c.fields, **rows[c.aggregate_id]}, partial=False)
    return _Scored(s.total, s.relevance, s.recency, s.lexical, full, s.evidence, s.link, s.via_link)


def _order(s: _Scored) -> tuple[float, object, str]:
    """Best score first; ties: earlier ``ingested_at``, then note id."""
    return (-s.total, s.cand.fields["ingested_at"], s.cand.note_id)


def _direct(candidates: Sequence[Candidate], how: Ranking,
            best_lex: float) -> tuple[list[_Scored], dict[int, float], list[_Scored]]:
    """``(direct hits, relevance of each seed hit by aggregate id (as its 128-bit int: a
    ``UUID``'s hash is a Python call, thousands per recall), list candidates below the
    floor admitted by their link)``: the list candidates (no link of their own)
    passing the floor, boosted by their links to the seed hits when recall expands,
    sorted and cut at ``top_k``."""
    scored = [_score(c, how, best_lex) for c in candidates if c.link is None]
    listed = sorted((s for s in scored if s.evidence >= how.min_relevance), key=_order)
    hit_relevance = {s.cand.aggregate_id.int: s.relevance for s in listed[: how.top_k]}
    weak: list[_Scored] = []
    if how.expand > 0:  # list candidates linked to a seed hit gain the link term too
        listed = sorted((_boost(s, how, hit_relevance) for s in listed), key=_order)
        # below the floor, a list candidate is reached through its link, like an expansion
        weak = [b for b in (_boost(s, how, hit_relevance, via_link=True) for s in scored
                            if s.evidence < how.min_relevance) if b.link >= how.min_relevance]
    return listed[: how.top_k], hit_relevance, weak


def _within_budget(ranked: Sequence[_Scored], budget: int | None) -> list[_Scored]:
    """The first of ``ranked`` up to ``budget`` summed tokens (``None``: all); the
    first is always kept, and ranking stops at the first that would not fit."""
    if budget is None:
        return list(ranked)
    kept: list[_Scored] = []
    used = 0
    for s in ranked:
        tokens = int(s.cand.fields["token_count"])
        if kept and used + tokens > budget:
            break
        used += tokens
        kept.append(s)
    return kept


def _score(cand: Candidate, how: Ranking, best_lex: float,
           hit_relevance: dict[int, float] | None = None) -> _Scored:
    lexical = None if cand.lexical is None else (cand.lexical / best_lex if best_lex > 0 else 0.0)
    if how.mode == "vector":
        relevance = max(0.0, cand.similarity or 0.0)
    elif how.mode == "lexical":
        relevance = lexical or 0.0
    elif how.scoring.fusion == "rrf":
        relevance = policy.weighted_rrf_relevance(cand.vector_rank, cand.lexical_rank, how.vector_weight)
    else:
        relevance = policy.convex_relevance(cand.similarity, lexical, how.vector_weight)
    evidence = relevance
    if how.mode == "hybrid" and how.scoring.fusion == "rrf":
        evidence = policy.convex_relevance(cand.similarity, lexical, how.vector_weight)
    f = cand.fields
    reference = f["t_ref"] or f["valid_from"] or f["ingested_at"]
    rec = policy.recency(reference, how.as_of, how.half_life_of.get(cand.aggregate_id, how.scoring.half_life))
    total = policy.score(relevance, rec, float(f["importance"]),
                         recency_weight=how.scoring.recency_weight,
                         importance_weight=how.scoring.importance_weight)
    link = 0.0
    if cand.link is not None and hit_relevance:
        link = how.scoring.link_weight * _spread(cand.link_from, hit_relevance)
        total += link
    return _Scored(total, relevance, rec, lexical, cand, evidence, link, via_link=cand.link is not None)


def _boost(s: _Scored, how: Ranking, hit_relevance: dict[int, float], *, via_link: bool = False) -> _Scored:
    """A list candidate with the link term of its edges to the seed hits (not itself);
    ``via_link``: it is admitted by that link (below the floor), shown as ``explain.link``."""
    c = s.cand
    spread = _spread(c.link_from, hit_relevance, c.aggregate_id.int)
    if spread <= 0.0:
        return s
    link = how.scoring.link_weight * spread
    return _Scored(s.total + link, s.relevance, s.recency, s.lexical, c, s.evidence, link, via_link)


def _spread(link_from: Sequence[tuple[UUID, float]], hit_relevance: dict[int, float], own: int | None = None) -> float:
    """``max(e · relevance(h))`` over the edges ``(h, e)`` of ``link_from`` to a seed hit
    ``h`` (keyed by ``h.int``) other than ``own``; 0.0 without one."""
    get = hit_relevance.get
    return max((w * r for seed, w in link_from if (r := get(seed.int)) is not None and seed.int != own),
               default=0.0)


def _explain(s: _Scored) -> Explain:
    c, f = s.cand, s.cand.fields
    return Explain(
        id=c.note_id,
        score=round(s.total, 6),
        similarity=None if c.similarity is None else round(c.similarity, 6),
        recency=round(s.recency, 6),
        importance=float(f["importance"]),
        link=s.via_link,
        link_score=round(s.link, 6),
        valid=(f["valid_from"], f["valid_to"]),
        relevance=round(s.relevance, 6),
        lexical=None if s.lexical is None else round(s.lexical, 6),
        vector_rank=c.vector_rank,
        lexical_rank=c.lexical_rank,
    )


def _utc(at: datetime | None) -> datetime | None:
    """``at`` in ``timezone.utc`` (issue 26: the driver returns the session's zone;
    every timestamp memfabric returns uses one tz object)."""
    return at.astimezone(timezone.utc) if at is not None else None


def candidate_view(cand: Candidate, outcome: Outcome = "recalled",
                   links: Sequence[dict[str, Any]] | None = None) -> MemoryNote:
    """The read model of a recall-index row (``outcome="recalled"`` unless told), with
    ``links`` as its link edges (``None`` or empty: the row's ``fields["links"]``, if any)."""
    f = cand.fields
    return MemoryNote(
        id=cand.note_id,
        kind=f["kind"],
        content=f["content"],
        scope=Scope(tenant_id=f["tenant_id"], resource_id=f["resource_id"] or None,
                    thread_id=f["thread_id"] or None),
        ingested_at=f["ingested_at"].astimezone(timezone.utc),
        token_count=int(f["token_count"]),
        path=f["path"],
        subject=f["subject"],
        t_ref=_utc(f["t_ref"]),
        valid_from=_utc(f["valid_from"]),
        valid_to=_utc(f["valid_to"]),
        tags=tuple(f["tags"] or ()),
        source_entry_ids=tuple(f["source_entry_ids"] or ()),
        supersedes=f["supersedes"],
        superseded_by=f.get("superseded_by"),
        importance=float(f["importance"]),
        consent=ConsentInfo.from_dict(f["consent"]),
        version=int(f["version"]),
        context=f["context"],
        keywords=tuple(f["keywords"] or ()),
        links=tuple(Link.from_dict(link) for link in links or f.get("links") or ()),
        fold_count=int(f["fold_count"]),
        updated_at=_utc(f["updated_at"]),
        outcome=outcome,
    )
