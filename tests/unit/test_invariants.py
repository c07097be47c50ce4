"""Issue 14 step 5: the case-conclusions-vs-procedures invariant on a written fixture."""

from __future__ import annotations

import json
from pathlib import Path

from memfabric.domain.invariants import case_conclusions_not_procedures, is_case_conclusion

FIXTURE = Path(__file__).parents[1] / "data" / "invariants" / "case_vs_procedure.jsonl"


def load() -> list[dict[str, str]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def accuracy() -> tuple[float, list[str]]:
    rows = load()
    wrong = [r["text"] for r in rows if is_case_conclusion(r["text"]) != (r["label"] == "case")]
    return 1 - len(wrong) / len(rows), wrong


def test_fixture_accuracy() -> None:
    acc, wrong = accuracy()
    print(f"case_conclusions_not_procedures accuracy: {acc:.3f} on {len(load())} items; wrong: {wrong}")
    assert len(load()) == 40
    assert acc >= 0.9, wrong


def test_score_is_invariant_and_binary() -> None:
    bad = case_conclusions_not_procedures("procedure", "Ticket #48213 was resolved for Maria on 2024-03-14.")
    assert (bad.score, bad.invariant) == (0.0, True) and "verdict" in bad.reasons
    assert case_conclusions_not_procedures("fact", "Ticket #48213 was resolved for Maria.").score == 1.0
    assert case_conclusions_not_procedures("procedure", "Always confirm the order number first.").score == 1.0
