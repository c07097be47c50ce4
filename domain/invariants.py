"""Invariant scorers over what was filed (issue 14 step 5).

:func:`case_conclusions_not_procedures` guards the promotion path: a ``procedure`` must
be a reusable way of working, never the conclusion of one case (names, dates, ids, a
past-tense verdict about what happened). Rule-based and deterministic, no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERDICT = re.compile(
    r"\b(was|were|had been|turned out|resolved|fixed|caused|confirmed|approved|rejected|denied|"
    r"failed|found|determined|concluded|closed|refunded|diagnosed|traced|identified|escalated|"
    r"settled|granted|dismissed|ruled|decided|agreed|paid|shipped|returned|cancelled|canceled|"
    r"reverted|restored|replaced|upgraded|crashed|expired|lost|won|broke|came from)\b", re.I)
_DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}(/\d{2,4})?|(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|"
    r"nov|dec)[a-z]*\.? \d{1,2}(st|nd|rd|th)?|(monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday)|yesterday|last (week|month|night|year)|on \d{1,2}(st|nd|rd|th))\b", re.I)
_ID = re.compile(r"(#\d{2,}|\b[A-Z]{2,}-\d+\b|\b[A-Z]{2,}\d{3,}\b|\$\d|\b\d{4,}\b)")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_RULE = re.compile(
    r"^(always|never|when|whenever|if|to|before|after|use|check|run|ask|call|make sure|ensure|"
    r"prefer|avoid|do not|don't|keep|start|first|for any|for every|each time|escalate|confirm|"
    r"verify|send|open|read|write|restart|rotate|log|document|record)\b|\b(should|must|always|"
    r"never|whenever|each time|every time|as a rule|by default)\b", re.I)
_GENERIC_NAMES = frozenset({"The", "This", "That", "When", "If", "Use", "Always", "Never",
                            "Check", "Before", "After", "Then", "Ask", "Call", "Run", "For",
                            "Ensure", "Make", "Prefer", "Avoid", "Keep", "First", "Each",
                            "Every", "Send", "Open", "Read", "Write", "Restart", "Rotate",
                            "Log", "Document", "Record", "Verify", "Confirm", "Escalate",
                            "Start", "Do", "Don", "Monday", "Friday"})


@dataclass(frozen=True, slots=True)
class InvariantScore:
    """``score`` 1.0 (holds) or 0.0 (violated); ``invariant`` marks a hard rule (any 0
    fails the run); ``reasons`` say which signals fired."""

    name: str
    score: float
    invariant: bool
    reasons: tuple[str, ...]


def case_signals(text: str) -> tuple[str, ...]:
    """The case-conclusion signals ``text`` carries (``verdict``, ``date``, ``id``,
    ``name``) and ``rule`` when it reads like a general rule."""
    out = []
    if _VERDICT.search(text):
        out.append("verdict")
    if _DATE.search(text):
        out.append("date")
    if _ID.search(text):
        out.append("id")
    names = [m for m in _NAME.findall(text) if m not in _GENERIC_NAMES]
    if names:
        out.append("name")
    if _RULE.search(text.strip()):
        out.append("rule")
    return tuple(out)


def is_case_conclusion(text: str) -> bool:
    """A past-tense verdict anchored to one case (a date, an id or a name), not phrased
    as a rule; or two or more anchors with a verdict even when phrased like a rule."""
    s = case_signals(text)
    anchors = sum(1 for k in ("date", "id", "name") if k in s)
    if "verdict" not in s or anchors == 0:
        return False
    return "rule" not in s or anchors >= 2


def case_conclusions_not_procedures(kind: str, content: str) -> InvariantScore:
    """0 when a case conclusion was filed as a ``procedure``, 1 otherwise (invariant)."""
    bad = kind == "procedure" and is_case_conclusion(content)
    return InvariantScore("case_conclusions_not_procedures", 0.0 if bad else 1.0, True,
                          case_signals(content))
