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

    Two notes with equal normalized tokens are "the same note" for folding.
    """
    return tuple(m.group(0).lower() for m in _WORD.finditer(text))


def count_tokens(text: str) -> int:
    """Token estimate used for budgets: the number of word runs plus punctuation marks.

    This is within about ±25% of BPE tokenizers on English prose and needs no model;
    the unit of ``budget`` in recall is this count. Returns at least 1.
    """
    return max(1, sum(1 for _ in _TOKEN.finditer(text)))


FoldOutcome = Literal["insert", "fold", "supersede"]


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The nearest live same-kind note in scope, as the fold policy sees it."""

    note_id: str
    similarity: float
    tokens: tuple[str, ...]
    path: str | None
    subject: str | None


def decide_fold(
    *,
    kind: str,
    tokens: tuple[str, ...],
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
