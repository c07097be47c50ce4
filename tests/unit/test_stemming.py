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


def test_a_word_of_digits_is_its_own_stem_as_snowball_says() -> None:
    """Issue 24: digit words skip the stemmer (and its cache); snowball agrees."""
    import snowballstemmer

    from memfabric.domain.stemming import ENGLISH
    raw = snowballstemmer.stemmer("english")
    for word in ["0", "7", "42", "3813", "2026", "00017", "١٢٣", "²", *(str(i) for i in range(0, 100_000, 97))]:
        assert ENGLISH.stemWord(word) == raw.stemWord(word) == word
    assert ENGLISH.stemWord("servers") == raw.stemWord("servers") == "server"
