"""The shared stemmer is safe across threads (memfabric.domain.stemming): one plain
snowball stemmer shared by 4 threads gives wrong stems and raises IndexError."""

from __future__ import annotations

import threading

import snowballstemmer
from memfabric.domain.stemming import ENGLISH

WORDS = [f"{w}{s}" for w in ("organis", "travell", "runn", "happi", "connect", "generous")
         for s in ("ation", "ing", "ed", "ness", "ly", "es")] * 20


def test_stems_equal_snowball_and_stay_equal_under_threads() -> None:
    reference = snowballstemmer.stemmer("english")
    expected = [reference.stemWord(w) for w in WORDS]
    wrong: list[str] = []

    def work() -> None:
        try:
            for _ in range(20):
                got = [ENGLISH.stemWord(w) for w in WORDS]
                wrong.extend(g for g, e in zip(got, expected, strict=True) if g != e)
        except Exception as exc:  # noqa: BLE001 - a shared stemmer also raises IndexError
            wrong.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
