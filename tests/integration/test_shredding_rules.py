"""Issue 34, item 2 on both backends: a unit of work destroys a note's data keys because
the note's pending events include a shredding tombstone (``Note.Forgotten`` that is not
a legal hold); the handler that forgets never calls ``shred``."""

from __future__ import annotations

from typing import Any

from memfabric.domain.note import ERASED, LEGAL_HOLD

from tests.unit.test_aggregate_rules import forget_in_uow


def test_the_unit_of_work_shreds_from_pending_events_and_a_hold_keeps_the_keys(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    gone = notes.remember(kind="fact", content="The vault code is 4711").id
    kept = notes.remember(kind="fact", content="The audit is on Monday").id
    forget_in_uow(fab, gone, "forgotten")
    forget_in_uow(fab, kept, LEGAL_HOLD)
    assert notes.history(gone)[0].fields["content"] == ERASED
    assert notes.history(kept)[0].fields["content"] == "The audit is on Monday"
