"""Issue 29: the generated supersession phrasings (tests/supersession_phrasings.py).

Every positive row supersedes (100%), no negative row supersedes either way round (0),
every part a family is built from appears in it, and each family is large enough that a
rule written for a few sentences would fail it."""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from memfabric.domain.subjects import RuleSubjectExtractor, SubjectKey, supersedes

from tests import supersession_phrasings as ph

EX = RuleSubjectExtractor()
POSITIVE = ph.positive()
NEGATIVE = ph.negative()


@lru_cache(maxsize=None)
def key(text: str) -> SubjectKey | None:
    return EX.extract(text)


def test_families_are_large_and_built_from_every_part() -> None:
    counts = Counter(r["category"] for r in POSITIVE)
    assert min(counts.values()) >= 50 and set(counts) == {
        "possessive_switch", "adopted_as", "passive_update", "added_value", "quantity_update", "state_negation",
        "state_reaffirmed", "exchanged_name", "subjectless_note", "bare_plural", "exchanged_value", "ended_use", "role_change"}, counts
    texts = " | ".join(r["new"] for r in POSITIVE)
    assert all(thing in texts for thing, _, _ in ph.THINGS)
    assert all(state in texts for state in ph.STATES)
    forms = {r.get("form") for r in POSITIVE + NEGATIVE}
    every = ({f"{verb} … {particle}" for verb, particle in ph.UPDATE_VERBS} | set(ph.ADOPTED) | set(ph.PASSIVE)
             | set(ph.STATE_NEW) | set(ph.EXCHANGES) | set(ph.HEDGES) | set(ph.EXCHANGE_BARE) | set(ph.ENDED_USE)
             | set(ph.ROLE_NEW) | set(ph.ROLE_HEDGES))
    assert every <= forms, every - forms
    negs = Counter(r["category"] for r in NEGATIVE)
    assert len(NEGATIVE) >= 1000 and min(negs.values()) >= 30, negs


def test_every_generated_update_supersedes() -> None:
    missed = [r for r in POSITIVE if supersedes(key(r["new"]), key(r["old"])) is None]
    assert missed == [], f"{len(missed)} of {len(POSITIVE)}, e.g. {missed[:5]}"


def test_no_generated_non_update_supersedes() -> None:
    wrong = [r for r in NEGATIVE
             if supersedes(key(r["new"]), key(r["old"])) or supersedes(key(r["old"]), key(r["new"]))]
    assert wrong == [], f"{len(wrong)} of {len(NEGATIVE)}, e.g. {wrong[:5]}"


def test_the_update_names_the_old_notes_slot() -> None:
    """Not only some supersession: the new key is the old note's slot (or the from-to
    wildcard of an exchanged name), so the decision an auditor reads is the right one."""
    for r in POSITIVE[::7]:
        old, new = key(r["old"]), key(r["new"])
        assert old is not None and new is not None, r
        assert new.key == old.key or (new.attribute == "*" and new.entity == old.entity), r
