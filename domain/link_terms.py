"""Shared-term edges of the linker (issue 15, ``LinkerSettings.by = "terms"``).

Two turns of a conversation that are about the same thing often share a *rare* word
(a name, a place, a named thing, the activity: ``camping``, ``pottery``, ``Sweden``)
but little else, so their vectors are not close. The linker therefore also links a new
note to the earlier notes of its scope and kind that share its distinctive terms.

Terms (:func:`note_terms`): the note's words (Unicode letters/digits, lower-cased),
without English stop words, conversational fillers (:data:`FILLERS`), words shorter
than 3 characters and numbers, Snowball-stemmed (``camping`` → ``camp``), at most
:data:`MAX_TERMS` per note (the longest). They are a pure function of the content, so
the consolidation index (column ``link_terms``) gives identical rows after a replay.

Edges (:func:`term_edges`), for a new note with terms ``T`` in a scope of ``N`` notes
of its kind (itself included, counted up to :data:`N_CAP`):

* a term ``t`` is *rare* when 1 ≤ ``df(t)`` ≤ :data:`DF_CAP`, ``df`` = earlier live,
  current notes of the scope and kind that contain it; its weight is the BM25 IDF
  ``ln(1 + (N − d + 0.5) / (d + 0.5))`` with ``d = df(t) + 1`` (the new note counts);
* ``score(j)`` = the summed weight of the rare terms note ``j`` shares with the new
  note; the ``top_k`` notes of highest score (ties: the newer first, then id) get an
  edge of weight ``min(1, score / WEIGHT_SCALE)``.

A term that is in more than :data:`DF_CAP` earlier notes (a speaker's name, "family")
links nothing: it would join half the scope. The lookup is one indexed statement per
write (``UnitOfWork.term_postings``: per term, at most ``DF_CAP + 1`` note ids, GIN on
``link_terms``), plus the notes written earlier in the same batch.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from memfabric.domain.stemming import ENGLISH


DF_CAP = 4
"""Most earlier notes a term may occur in and still link (``df`` ≤ 4)."""

WEIGHT_SCALE = 20.0
"""Summed IDF at which an edge reaches weight 1 (two or three rare shared terms)."""

MAX_TERMS = 48
"""Most terms kept per note (the longest, then alphabetical)."""

N_CAP = 10_000
"""The scope size ``N`` of the IDF is counted up to this many notes."""

MIN_CHARS = 3

STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more
most other some such no nor not only own same so than too very can will just don should
now ain aren couldn didn doesn hadn hasn haven isn mightn mustn needn shan shouldn wasn
weren won wouldn
""".split())
"""English stop words (NLTK's list without the apostrophe forms)."""

FILLERS = frozenset("""
yeah yes yep wow hey thanks thank really awesome great amazing also like get got one lot
oh okay ok hi hello
""".split())
"""Words of chat that carry no subject (interjections, praise): never a link term."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STEM = ENGLISH


@lru_cache(maxsize=4096)
def note_terms(content: str | None) -> tuple[str, ...]:
    """The sorted distinct link terms of ``content`` (see the module doc); ``()`` for
    ``None`` or a text without any. Cached (a pure function of the text: a write asks
    for the terms of its content for its links and again for its consolidation row)."""
    if not content:
        return ()
    found: set[str] = set()
    for word in _WORD.findall(content.lower()):
        if len(word) < MIN_CHARS or word.isdigit() or word in STOP_WORDS or word in FILLERS:
            continue
        found.add(_STEM.stemWord(word))
    kept = sorted(found, key=lambda t: (-len(t), t))[:MAX_TERMS]
    return tuple(sorted(kept))


def idf(n: int, df: int) -> float:
    """BM25 IDF of a term in ``df`` of ``n`` notes (``ln(1 + (n − df + 0.5) / (df + 0.5))``)."""
    return math.log(1.0 + (max(n, df) - df + 0.5) / (df + 0.5))


@dataclass(frozen=True, slots=True)
class TermPostings:
    """What the store knows of some terms in one scope and kind: ``notes`` = the scope
    size (capped at :data:`N_CAP`), ``ids[term]`` = up to ``DF_CAP + 1`` ids of notes
    containing it (newest first), ``ingested[id]`` their ingestion time (seconds) and
    ``latest`` the id of the newest note of the scope and kind (the previous turn of
    the adjacency edge, ``LinkerSettings.adjacent``; ``None`` in an empty scope or
    when not asked for)."""

    notes: int
    ids: Mapping[str, Sequence[str]]
    ingested: Mapping[str, float]
    latest: str | None = None


def term_edges(terms: Iterable[str], earlier: Mapping[str, Sequence[str]], n: int, k: int,
               order: Mapping[str, float], *, df_cap: int = DF_CAP,
               scale: float = WEIGHT_SCALE) -> list[tuple[str, float]]:
    """Up to ``k`` ``(note id, weight)`` edges for a new note (see the module doc).

    ``earlier[t]``: ids of the earlier notes containing ``t`` (more than ``df_cap``
    means the term is too common); ``n``: notes of the scope and kind, the new one
    included; ``order``: per id its ingestion time in seconds (ties: newer first)."""
    score: dict[str, float] = {}
    for t in terms:
        ids = earlier.get(t, ())
        if not 1 <= len(ids) <= df_cap:
            continue
        w = idf(n, len(ids) + 1)
        for nid in ids:
            score[nid] = score.get(nid, 0.0) + w
    best = sorted(score, key=lambda nid: (-score[nid], -order.get(nid, -1), nid))[:k]
    return [(nid, round(min(1.0, score[nid] / scale), 6)) for nid in best]
