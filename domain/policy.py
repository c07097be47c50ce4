"""Pure policy: tokens, token counts and recall scoring (the fold rule is in
:mod:`memfabric.domain.consolidation`).

Nothing here touches storage; every function is deterministic given its inputs.
"""

from __future__ import annotations

import math
import re
import unicodedata
import hashlib
from datetime import datetime, timedelta
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+|[^\w\s]", re.UNICODE)

@lru_cache(maxsize=4096)
def normalized_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens of ``text`` (letters and digits; punctuation dropped).

    Text without any letter or digit (emoji, punctuation) falls back to its
    non-space characters, case-folded, so "👍" and "👎" stay different notes.
    Two notes with equal normalized tokens are "the same note" for folding. The text is
    put in Unicode normal form NFC first, so composed and decomposed accents ("é" as
    one code point or as e + U+0301) give the same tokens. Cached (a write tokenises
    its text for its fold hash and again for the hash embedder).
    """
    text = unicodedata.normalize("NFC", text)
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
    *,
    recency_weight: float,
    importance_weight: float,
) -> float:
    """Final recall score: ``relevance + w_r·recency + w_i·importance``.

    The additive form follows Park et al. (2023), which sums relevance, recency and
    importance; all terms are in [0, 1], so the bonuses of two notes differ by at most the
    *bonus margin* ``w_r + w_i`` (default weights: 0.02): a note whose relevance is higher
    by more than it always scores higher.
    """
    return (
        relevance
        + recency_weight * recency_value
        + importance_weight * importance
    )


def token_hash(tokens: tuple[str, ...]) -> str:
    """Stable 16-hex digest of normalized tokens (BLAKE2b), used for exact-repeat folds."""
    return hashlib.blake2b(" ".join(tokens).encode(), digest_size=8).hexdigest()


@lru_cache(maxsize=4096)
def content_hash(text: str) -> str:
    """``token_hash(normalized_tokens(text))``, cached: a write computes it for its
    decision and again for two projection rows of the same content (issue 24)."""
    return token_hash(normalized_tokens(text))
