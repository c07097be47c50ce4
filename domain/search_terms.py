"""Terms and scores of conversation search (``Notes.search_conversation``, issue 29).

A query and an entry are compared through their *search terms* (:func:`search_terms`):
the words (Unicode letters/digits, lower-cased) without English stop words and chat
fillers (:data:`memfabric.domain.link_terms.STOP_WORDS`, ``FILLERS``) and one-letter
words, each Snowball-stemmed through the shared stemmer
(:data:`memfabric.domain.stemming.ENGLISH`; numbers as they are), so "flights" meets
"flight" and "leave" meets "leaves", and "when does my flight leave" has the two terms
``flight``, ``leav``.

An entry's score is its **IDF-weighted coverage** of the query (:func:`coverage`): the
summed weight of the query terms it contains over the summed weight of all query terms,
in [0, 1], with the BM25 weight ``idf(N, df) = ln(1 + (N − df + 0.5) / (df + 0.5))``
(:func:`memfabric.domain.link_terms.idf`), ``N`` the entries of the thread and ``df``
those containing the term. A rare term ("Zanzibar") so counts for more than a common one
("ferry" said every day); an entry with every query term scores 1.0.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from memfabric.domain.link_terms import FILLERS, STOP_WORDS, idf
from memfabric.domain.stemming import ENGLISH

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


_PLAIN = re.compile(r"\w+", re.UNICODE)


def word_terms(text: str) -> list[str]:
    """Lower-case word terms of ``text`` (unique, in order), unstemmed: what the
    observations' ``simple`` tsvector matches (episode recall, ``search_observations``)."""
    return list(dict.fromkeys(w.lower() for w in _PLAIN.findall(text)))


def search_terms(text: str) -> list[str]:
    """The distinct search terms of ``text`` in order of first occurrence (see the module
    doc); ``[]`` for a text of stop words only."""
    found: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS or word in FILLERS or (len(word) < 2 and not word.isdigit()):
            continue
        found.setdefault(word if word.isdigit() else ENGLISH.stemWord(word), None)
    return list(found)


def term_weights(query: Sequence[str], df: Mapping[str, int], n: int) -> dict[str, float]:
    """``{term: idf(n, df[term])}`` for each query term (``df`` 0 when absent)."""
    return {t: idf(n, df.get(t, 0)) for t in query}


def coverage(query: Sequence[str], have: Collection[str], weights: Mapping[str, float]) -> float:
    """Summed weight of the query terms in ``have`` over the summed weight of all query
    terms (0.0 for an empty query)."""
    total = sum(weights[t] for t in query)
    if total <= 0.0:
        return 0.0
    return sum(weights[t] for t in query if t in have) / total
