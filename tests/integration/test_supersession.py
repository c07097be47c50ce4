"""Issue 12: supersession by the inferred subject key, not by cosine similarity."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric, open_fabric


def live(notes: Any, query: str = "") -> set[str]:
    return {h.content for h in notes.recall(query or "a", top_k=50).hits}


def test_residence_change_supersedes_and_lineage_explains(fabric: Fabric) -> None:
    notes = fabric.scope("acme", "u1")
    a = notes.remember(kind="fact", content="Alice lives in Berlin")
    b = notes.remember(kind="fact", content="Alice moved to Munich")
    assert b.outcome == "superseding" and b.supersedes == a.id
    assert b.decision is not None and b.decision["basis"] == "inferred_subject"
    assert b.decision["subject_key"] == "alice|residence"
    assert (b.decision["old_value"], b.decision["new_value"]) == ("berlin", "munich")
    lin = notes.lineage(b.id)
    assert lin.predecessors == [a.id]
    row = lin.chain[-1]
    assert row["reason"]["subject_key"] == "alice|residence" and row["reason"]["new_value"] == "munich"
    hist = notes.history(a.id)
    assert hist[-1].type == "Superseded" and hist[-1].fields["decision"]["old_value"] == "berlin"


@pytest.mark.parametrize(("old", "new"), [
    ("Bob works at Acme", "Bob works at Globex"),
    ("Carol drives a Tesla", "Carol drives a Volvo"),
])
def test_job_and_car_changes_supersede(fabric: Fabric, old: str, new: str) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content=old)
    b = notes.remember(kind="fact", content=new)
    assert b.outcome == "superseding" and b.supersedes == a.id


@pytest.mark.parametrize(("one", "two"), [
    ("Ticket 4411 is open", "Ticket 4412 is open"),
    ("Caroline: I went to the support group yesterday", "Melanie: I went to the support group yesterday too"),
    ("I like hiking", "I like painting"),
])
def test_different_subjects_never_supersede(fabric: Fabric, one: str, two: str) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content=one)
    b = notes.remember(kind="fact", content=two)
    assert b.outcome == "inserted" and b.supersedes is None
    assert notes.get(a.id).superseded_by is None


def test_negation_supersedes_and_never_empties(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content="I love jazz")
    b = notes.remember(kind="fact", content="I hate jazz")
    assert b.outcome == "superseding" and b.supersedes == a.id
    assert [h.id for h in notes.recall("jazz").hits] == [b.id]


def test_same_preference_value_is_no_change(fabric: Fabric) -> None:
    # the ``prefers`` rule: a restatement with the same value is no change (a value that
    # adds to it, "metric units and Celsius", is: issue 29, below)
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="User prefers metric units")
    b = notes.remember(kind="fact", content="The user prefers metric units")
    assert b.outcome == "inserted"


def test_explicit_subject_still_wins(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content="Ticket 4411 is open", subject="ticket")
    b = notes.remember(kind="fact", content="Ticket 4412 is open", subject="ticket")
    assert b.outcome == "superseding" and b.supersedes == a.id
    assert b.decision is not None and b.decision["basis"] == "explicit_subject"
    c = notes.remember(kind="fact", content="Alice lives in Berlin")
    d = notes.remember(kind="fact", content="Alice moved to Munich", supersedes=c.id)
    assert d.supersedes == c.id and d.decision["basis"] == "caller_supersedes"


def test_per_call_consolidate(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    a = notes.remember(kind="fact", content="Alice lives in Berlin")
    b = notes.remember(kind="fact", content="Alice moved to Munich", consolidate=False)
    assert b.outcome == "inserted" and notes.get(a.id).superseded_by is None
    c = notes.remember(kind="fact", content="Alice lives in Berlin", consolidate={"threshold": 0.9})
    assert c.outcome == "folded"
    with pytest.raises(ValidationError):
        notes.remember(kind="fact", content="x y", consolidate={"threshold": 2})
    with pytest.raises(ValidationError):
        notes.remember(kind="fact", content="x y", consolidate="yes")


def test_non_english_inserts(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="Alice wohnt in Berlin")
    b = notes.remember(kind="fact", content="Alice wohnt jetzt in München")
    assert b.outcome == "inserted"


def test_inference_off(dsn: str) -> None:
    with open_fabric(dsn, subjects=None) as fab:
        notes = fab.scope("acme")
        notes.remember(kind="fact", content="Alice lives in Berlin")
        assert notes.remember(kind="fact", content="Alice moved to Munich").outcome == "inserted"


STREAM = [
    "Alice lives in Berlin", "Ticket 4411 is open", "Alice moved to Munich", "Ticket 4412 is open",
    "Bob works at Acme", "I love jazz", "Alice moved to Munich", "Bob works at Globex", "I hate jazz",
    "I like hiking", "I like painting", "Alice lives in Hamburg", "Ticket 4411 is closed",
]


def test_batch_equals_one_by_one(dsn: str) -> None:
    with open_fabric(dsn) as fab:
        one = [(n.outcome, n.content) for n in
               (fab.scope("t1").remember(kind="fact", content=t) for t in STREAM)]
        many = [(n.outcome, n.content) for n in
                fab.scope("t2").remember_many([{"kind": "fact", "content": t} for t in STREAM])]
        assert one == many
        assert [o for o, _ in one].count("superseding") == 5


def test_demo_supersession_still_works(dsn: str) -> None:
    from rich.console import Console

    from memfabric.adapters.cli.demo import run_demo
    summary = run_demo(Console(quiet=True), dsn=dsn)
    assert summary["superseded"] and summary["fold_same_id"]
    # step 12, the agent-style tool session: refused before attach, four tool calls, a refused escape
    assert summary["tool_session"] == ["refused before attach", "memory.insert", "memory.recall",
                                       "memory.view", "memory.read", "escape refused"]
    # step 13, the conversation ledger: a search hit among the entries, an episode, a promotion
    assert summary["conversation"] == {"entries": 3, "hit": True, "promoted": "procedure",
                                       "episode": "Staging maintenance is booked for Saturday 06:00 UTC"}


def test_issue_29_seed_example_and_phrasing_families(fabric: Fabric) -> None:
    """Through the real write path: a value that keeps the old one and adds to it
    supersedes, a plain repeat folds; "I use X as my <thing>" → "I switched my <thing> to Y"
    and "I am <state>" → "I am no longer <state>" supersede."""
    notes = fabric.scope("acme", "seed29")
    units = notes.remember(kind="fact", content="User prefers metric units")
    assert notes.remember(kind="fact", content="User prefers metric units").outcome == "folded"
    both = notes.remember(kind="fact", content="User prefers metric units and Celsius")
    assert both.outcome == "superseding" and both.supersedes == units.id
    editor = notes.remember(kind="fact", content="I use Vim as my editor")
    emacs = notes.remember(kind="fact", content="I switched my editor to Emacs")
    assert emacs.outcome == "superseding" and emacs.supersedes == editor.id
    veg = notes.remember(kind="fact", content="I am vegetarian")
    no_veg = notes.remember(kind="fact", content="I am no longer vegetarian")
    assert no_veg.outcome == "superseding" and no_veg.supersedes == veg.id
    assert live(notes, "units editor vegetarian") == {
        "User prefers metric units and Celsius", "I switched my editor to Emacs", "I am no longer vegetarian"}


def test_generated_phrasings_through_the_write_path(fabric: Fabric) -> None:
    """Issue 29: a sample of the generated phrasings (tests/supersession_phrasings.py, every
    family and form) through the real write path, each pair in a fresh scope: a positive
    pair's second note supersedes the first, a negative pair's inserts (or folds a repeat)."""
    from tests import supersession_phrasings as ph

    by_form: dict[tuple[str, str], dict[str, str]] = {}
    for r in ph.positive():
        by_form.setdefault((r["category"], r.get("form", "")), r)
    wrong = []
    for i, r in enumerate(by_form.values()):
        notes = fabric.scope("acme", f"gen-pos-{i}")
        notes.remember(kind="fact", content=r["old"])
        if notes.remember(kind="fact", content=r["new"]).outcome != "superseding":
            wrong.append(r)
    negatives = ph.negative()[::25]
    for i, r in enumerate(negatives):
        notes = fabric.scope("acme", f"gen-neg-{i}")
        notes.remember(kind="fact", content=r["old"])
        if notes.remember(kind="fact", content=r["new"]).outcome == "superseding":
            wrong.append(r)
    assert len(by_form) >= 60 and len(negatives) >= 40 and wrong == []
