"""Issue 35: the console's words for decisions, causes and events (pure functions of
``memfabric.adapters.console_read``), and that a forgotten note's event never carries
its content."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("jinja2")

from memfabric.adapters.console_read import cause_words, decision_words, event_words, timeline, validity  # noqa: E402
from memfabric.domain.note import ERASED  # noqa: E402
from memfabric.domain.results import HistoryEntry, Lineage  # noqa: E402

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def entry(type_: str, version: int = 1, cause: str = "caller", **fields: object) -> HistoryEntry:
    return HistoryEntry(version=version, type=type_, timestamp=T0, cause=cause, fields={"cause": cause, **fields})


@pytest.mark.parametrize(("decision", "words"), [
    (None, None),
    (ERASED, "the decision was erased with the note"),
    ({"basis": "exact_repeat", "note_id": "abc", "similarity": 1.0},
     "the same text as note abc was written again (cosine similarity 1.0): folded into it"),
    ({"basis": "explicit_subject", "subject": "home", "note_id": "abc"},
     "the same subject “home” as note abc: the newer value replaces it"),
    ({"basis": "inferred_subject", "subject_key": "self|home", "old_value": "Lisbon", "new_value": "Porto",
      "decision_rule": "value_changed", "extraction_rules": "copular/copular", "note_id": "abc"},
     "both state self|home: “Lisbon” became “Porto”, so the newer supersedes note abc"
     " (rule value_changed; extraction copular/copular)"),
    ({"basis": "caller_supersedes", "note_id": "abc"}, "the caller asked to supersede note abc"),
    ({"basis": "path", "path": "a.md"}, "a file note on the same path as an earlier note: the newer content wins"),
])
def test_decisions_in_words(decision: object, words: str | None) -> None:
    assert decision_words(decision) == words


def test_causes_and_windows_in_words() -> None:
    assert cause_words("caller") is None
    assert cause_words("supersession:abc") == "caused by the supersession by note abc"
    assert cause_words("erase_scope") == "caused by an erasure of the scope"
    assert validity(None, None) == "always"
    assert validity(T0, None) == "2026-01-02 03:04:05 UTC → open"


def test_a_forgotten_notes_events_never_carry_content() -> None:
    remembered = entry("Remembered", kind="fact", content="the secret text")
    assert event_words(remembered, forgotten=False) == "remembered as a fact note: “the secret text”"
    assert "secret" not in event_words(remembered, forgotten=True)
    assert "secret" not in event_words(entry("Folded", 2, "fold", content="the secret text"), forgotten=True)
    assert event_words(entry("Remembered", kind="fact", content=ERASED), forgotten=False) == "remembered as a fact note"
    moved = entry("Repointed", 2, from_path="secret/a.md", to_path="secret/b.md")
    assert "secret" not in event_words(moved, forgotten=True)
    hold = entry("Forgotten", 3, reason="legal_hold", requested_by="legal")
    assert event_words(hold, forgotten=False) == "put under legal hold by legal"


def test_timeline_orders_events_and_marks_the_note_asked_for() -> None:
    lin = Lineage(id="b", predecessors=["a"], successors=[], folds=[], links=[], tombstone=None)
    later = HistoryEntry(version=1, type="Remembered", timestamp=T0.replace(second=9), cause="caller",
                         fields={"kind": "fact", "content": "new", "valid_from": T0, "valid_to": None,
                                 "decision": {"basis": "caller_supersedes", "note_id": "a"}})
    rows = timeline(lin, {"a": [entry("Remembered", kind="fact", content="old")], "b": [later]}, forgotten={"a"})
    assert [(r.note_id, r.current) for r in rows] == [("a", False), ("b", True)]
    assert rows[0].words == "remembered as a fact note" and rows[1].reason == "the caller asked to supersede note a"
    assert rows[1].valid == "2026-01-02 03:04:05 UTC → open"
