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
from typing import Any

import snowballstemmer


class Stemmer:
    """``stemWord(word) -> str`` of a snowball ``language`` stemmer (default
    ``"english"``), one underlying stemmer per thread."""

    def __init__(self, language: str = "english") -> None:
        self._language = language
        self._local = threading.local()

    def _stemmer(self) -> Any:
        stem = getattr(self._local, "stem", None)
        if stem is None:
            stem = self._local.stem = snowballstemmer.stemmer(self._language)
        return stem

    def stemWord(self, word: str) -> str:  # noqa: N802 - snowballstemmer's name
        """The stem of ``word`` (lowercase input expected, as snowball does)."""
        return str(self._stemmer().stemWord(word))


ENGLISH = Stemmer()
"""The English stemmer every memfabric module uses."""

__all__ = ["ENGLISH", "Stemmer"]
