"""Pure policy: tokens, fold decision, validity and recall scoring.

Nothing here touches storage; every function is deterministic given its inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+|[^\w\s]", re.UNICODE)

DEFAULT_FOLD_THRESHOLD = 0.85
"""Cosine similarity at or above which a changed same-kind note supersedes its neighbour."""


def normalized_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens of ``text`` (letters and digits; punctuation dropped).

    Text without any letter or digit (emoji, punctuation) falls back to its
    non-space characters, case-folded, so "👍" and "👎" stay different notes.
    Two notes with equal normalized tokens are "the same note" for folding.
    """
    words = tuple(m.group(0).lower() for m in _WORD.finditer(text))
    if words:
        return words
    return tuple(ch for ch in text.casefold() if not ch.isspace())


def count_tokens(text: str) -> int:
    """Token estimate used for budgets: the number of word runs plus punctuation marks.

    This is within about ±25% of BPE tokenizers on English prose and needs no model;
    the unit of ``budget`` in recall is this count. Returns at least 1.
    """
    return max(1, sum(1 for _ in _TOKEN.finditer(text)))


FoldOutcome = Literal["insert", "fold", "supersede", "precede"]


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The nearest live same-kind note in scope, as the fold policy sees it."""

    note_id: str
    similarity: float
    tokens: str
    path: str | None
    subject: str | None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


def decide_fold(
    *,
    kind: str,
    tokens: str,
    path: str | None,
    subject: str | None,
    neighbour: Neighbour | None,
    threshold: float,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
) -> FoldOutcome:
    """Decide how a write consolidates with its neighbour (see :func:`_decide`), then
    respect time: a repeat whose window is disjoint from the neighbour's is a recurrence
    (``insert``), and a changed fact that starts before the neighbour starts is history
    the neighbour already replaced (``precede``: inserted with its window closed at the
    neighbour's start)."""
    outcome = _decide(kind=kind, tokens=tokens, path=path, subject=subject,
                      neighbour=neighbour, threshold=threshold)
    if neighbour is None or outcome == "insert":
        return outcome
    if outcome == "fold" and windows_disjoint(
        (valid_from, valid_to), (neighbour.valid_from, neighbour.valid_to)
    ):
        return "insert"
    if (
        outcome == "supersede"
        and valid_from is not None
        and neighbour.valid_from is not None
        and valid_from < neighbour.valid_from
    ):
        return "precede"
    return outcome


def windows_disjoint(
    a: tuple[datetime | None, datetime | None], b: tuple[datetime | None, datetime | None]
) -> bool:
    """True when half-open windows ``[from, to)`` (``None`` = unbounded) neither overlap
    nor touch."""
    (a_from, a_to), (b_from, b_to) = a, b
    if a_to is not None and b_from is not None and a_to < b_from:
        return True
    return b_to is not None and a_from is not None and b_to < a_from


def _decide(
    *,
    kind: str,
    tokens: str,
    path: str | None,
    subject: str | None,
    neighbour: Neighbour | None,
    threshold: float,
) -> FoldOutcome:
    """Decide how a ``fact``/``procedure``/``file`` write consolidates.

    Rules (issue "write path"):
    - no neighbour → ``insert``;
    - ``file``: only a note with the same ``path`` is a candidate (never across paths);
      same path → ``fold`` when the tokens are equal, else ``supersede``;
    - with a ``subject``: the neighbour with the same subject → ``fold`` when tokens are
      equal, else ``supersede``;
    - otherwise equal normalized tokens → ``fold``; similarity ≥ ``threshold`` →
      ``supersede``; below → ``insert``.
    """
    if neighbour is None:
        return "insert"
    same_tokens = neighbour.tokens == tokens
    if kind == "file":
        if neighbour.path != path:
            return "insert"
        return "fold" if same_tokens else "supersede"
    if subject is not None:
        if neighbour.subject != subject:
            return "insert"
        return "fold" if same_tokens else "supersede"
    if same_tokens:
        return "fold"
    if neighbour.subject is not None:
        # A subject-keyed note is only replaced through its subject.
        return "insert"
    if neighbour.similarity >= threshold:
        return "supersede"
    return "insert"


def is_valid_at(
    valid_from: datetime | None, valid_to: datetime | None, at: datetime
) -> bool:
    """``valid_from <= at < valid_to`` with open ends where a bound is ``None``."""
    if valid_from is not None and at < valid_from:
        return False
    return not (valid_to is not None and at >= valid_to)


def recency(reference: datetime, at: datetime, half_life: timedelta) -> float:
    """Exponential recency decay ``0.5 ** (age / half_life)``, clamped to (0, 1].

    Age is ``at - reference`` (future references count as age 0). This is the
    exponential decay of the recency term in Park et al., "Generative Agents:
    Interactive Simulacra of Human Behavior" (UIST 2023), parameterised by half-life.
    """
    age = (at - reference).total_seconds()
    if age <= 0:
        return 1.0
    return math.pow(0.5, age / half_life.total_seconds())


RRF_K = 60
"""Reciprocal-rank-fusion constant k (Cormack, Clarke & Büttcher, SIGIR 2009)."""


def rrf_relevance(vector_rank: int | None, lexical_rank: int | None, k: int = RRF_K) -> float:
    """Reciprocal rank fusion normalised to [0, 1].

    ``(1/(k+r_v) + 1/(k+r_l)) / (2/(k+1))`` with a missing rank contributing 0, so a
    note ranked first in both lists scores 1.0 (Cormack et al., SIGIR 2009).
    """
    total = 0.0
    if vector_rank is not None:
        total += 1.0 / (k + vector_rank)
    if lexical_rank is not None:
        total += 1.0 / (k + lexical_rank)
    return total / (2.0 / (k + 1))


def weighted_rrf_relevance(
    vector_rank: int | None, lexical_rank: int | None, vector_weight: float, k: int = RRF_K
) -> float:
    """Weighted reciprocal rank fusion normalised to [0, 1]:
    ``w/(k+r_v) + (1-w)/(k+r_l)`` divided by its maximum ``1/(k+1)``."""
    total = 0.0
    if vector_rank is not None:
        total += vector_weight / (k + vector_rank)
    if lexical_rank is not None:
        total += (1.0 - vector_weight) / (k + lexical_rank)
    return total * (k + 1)


DEFAULT_VECTOR_WEIGHT = 0.5
"""Weight of the vector component in hybrid recall for an embedder that declares none
(a semantic model): vector and full-text evidence count equally."""


def convex_relevance(similarity: float | None, lexical: float | None, vector_weight: float) -> float:
    """Hybrid relevance: the convex combination ``w·max(0, cos) + (1-w)·lex`` in [0, 1].

    ``similarity`` is the cosine similarity (``None`` counts as 0) and ``lexical`` the
    full-text score already divided by the best full-text score among the query's
    candidates (``None`` counts as 0), both normalised by their theoretical range
    ("theoretical min-max"). A tuned convex combination beats reciprocal rank fusion
    in and out of domain and keeps the scores' magnitudes, which RRF throws away
    (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval",
    ACM TOIS 42(1), 2023).
    """
    vec = max(0.0, similarity or 0.0)
    lex = min(1.0, max(0.0, lexical or 0.0))
    return vector_weight * vec + (1.0 - vector_weight) * lex


def score(
    relevance: float,
    recency_value: float,
    importance: float,
    link: float,
    *,
    recency_weight: float,
    importance_weight: float,
    link_weight: float,
) -> float:
    """Final recall score: ``relevance + w_r·recency + w_i·importance + w_l·link``.

    The additive form follows Park et al. (2023), which sums relevance, recency and
    importance; all terms are in [0, 1].
    """
    return (
        relevance
        + recency_weight * recency_value
        + importance_weight * importance
        + link_weight * link
    )


def token_hash(tokens: tuple[str, ...]) -> str:
    """Stable 16-hex digest of normalized tokens (BLAKE2b), used for exact-repeat folds."""
    import hashlib

    return hashlib.blake2b(" ".join(tokens).encode(), digest_size=8).hexdigest()
