"""A snowball stemmer that threads can share.

A ``snowballstemmer`` stemmer object keeps the word it is stemming in its own state
(``current``, cursors), so one object used by two threads at once returns one thread's
stem to the other. Writers, a reembed pass and recall run in several threads of one
process, and stems decide link terms, inferred subject keys and hash-embedder
features, so every module stems through :data:`ENGLISH`, which keeps one stemmer per
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import snowballstemmer


class Stemmer:
    """``stemWord(word) -> str`` of a snowball ``language`` stemmer (default
    ``"english"``), one underlying stemmer per thread."""

    def __init__(self, language: str = "english") -> None:
        self._language = language
        self._local = threading.local()
        self._cached: Callable[[str], str] = lru_cache(maxsize=CACHED_STEMS)(self._uncached)

    def _stemmer(self) -> Any:
        stem = getattr(self._local, "stem", None)
        if stem is None:
            stem = self._local.stem = snowballstemmer.stemmer(self._language)
        return stem

    def stemWord(self, word: str) -> str:  # noqa: N802 - snowballstemmer's name
        """The stem of ``word`` (lowercase input expected, as snowball does); the last
        :data:`CACHED_STEMS` distinct words are cached (``functools.lru_cache``,
        thread-safe; a stem is a pure function of the word, and stemming was a tenth of
        a write's client time, issue 24). A word of digits is its own stem (snowball
        strips no suffix from it), so it is neither stemmed nor cached."""
        if word.isdigit():
            return word
        return self._cached(word)

    def _uncached(self, word: str) -> str:
        return str(self._stemmer().stemWord(word))


CACHED_STEMS = 65_536
"""Distinct words whose stems each :class:`Stemmer` keeps."""


ENGLISH = Stemmer()
"""The English stemmer every memfabric module uses."""

__all__ = ["ENGLISH", "Stemmer"]
