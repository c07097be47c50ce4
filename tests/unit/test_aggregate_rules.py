"""Issue 34, item 2: the aggregate owns its rules. ``Note.recallable`` / ``listed`` /
``erased`` (and ``Entity.listed``) are what the projections' rows follow; the tombstone
event classes are marked :class:`~memfabric.domain.shredding.Shredding`, the crypto
layer's shredding topics are derived from them, and a unit of work destroys a note's
keys because its pending events include a shredding one (no handler calls ``shred``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from memfabric.adapters import crypto
from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain.entity import Entity
from memfabric.domain.ledger import Conversation
from memfabric.domain.note import ERASED, LEGAL_HOLD, Note
from memfabric.domain.scope import Scope
from memfabric.domain.shredding import Shredding, shredding_classes, shredding_topics, shreds, shreds_keys
from memfabric.projections import note_scope, recall_index, retention_index

SCOPE = Scope(tenant_id="acme", resource_id="u1", thread_id="t1")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _note(kind: str = "fact", note_id: str = "a" * 12, **over: Any) -> Note:
    fields: dict[str, Any] = dict(
        note_id=note_id, kind=kind, content="User likes tea", path="/tmp/tea.txt" if kind == "file" else None,
        block="persona" if kind == "working" else None, subject=None, t_ref=None, valid_from=None,
        valid_to=None, keywords=[], tags=[], source_entry_ids=[], context=None, links=[], supersedes=None,
        importance=0.5, consent=None, embedding=np.ones(4, np.float32).tobytes(), embedder_id="e4", dim=4,
        token_count=3, cause="caller")
    fields.update(over)
    return Note.remember(scope=SCOPE, **fields)


def _forget(note: Note, reason: str = "forgotten") -> None:
    note.forget(content_hmac=None, reason=reason, requested_by="test")


def _rules(note: Note) -> tuple[bool, bool, bool]:
    return note.recallable, note.listed, note.erased


def _rows(note: Note) -> tuple[bool, bool, bool]:
    """What the projections decide: a recall row, a note-scope row, a retention row."""
    return (recall_index.row_for(note) is not None, note_scope.row_for(note) is not None,
            retention_index.row_for(note) is not None)


@pytest.mark.parametrize("kind", ["fact", "procedure", "file"])
def test_a_live_note_of_a_recallable_kind_is_recallable_and_listed(kind: str) -> None:
    note = _note(kind)
    assert _rules(note) == (True, True, False)
    assert _rows(note) == (True, True, True)


@pytest.mark.parametrize("kind", ["working", "episode"])
def test_working_and_episode_notes_are_listed_but_never_recallable(kind: str) -> None:
    note = _note(kind)
    assert _rules(note) == (False, True, False)
    assert _rows(note) == (False, True, True)


def test_a_forgotten_note_is_erased_and_neither_recallable_nor_listed() -> None:
    note = _note()
    _forget(note)
    assert _rules(note) == (False, False, True)
    assert _rows(note) == (False, False, False)


def test_a_held_note_is_listed_not_erased_and_not_recallable_until_released() -> None:
    note = _note()
    _forget(note, LEGAL_HOLD)
    assert note.held and not note.forgotten
    assert _rules(note) == (False, True, False)
    assert _rows(note) == (False, True, True)
    note.release_hold(requested_by="legal")
    assert _rules(note) == (True, True, False)
    assert _rows(note)[0]


def test_superseded_and_expired_notes_stay_recallable_for_reads_inside_their_window() -> None:
    superseded = _note()
    superseded.supersede(successor_id="b" * 12, valid_to=T0, cause="supersede")
    expired = _note(note_id="c" * 12)
    expired.expire(reason="interval", at=T0 + timedelta(days=1))
    for note in (superseded, expired):
        assert _rules(note) == (True, True, False)
        assert _rows(note)[:2] == (True, True)


def test_a_note_without_content_is_not_recallable() -> None:
    note = _note("file", content=None)
    assert not note.recallable and recall_index.row_for(note) is None and note.listed


def test_an_erased_working_block_written_again_is_listed_and_not_erased() -> None:
    note = _note("working")
    _forget(note)
    assert note.erased and not note.listed
    note.write_block(content="fresh", token_count=1)
    assert not note.erased and note.listed and not note.recallable


def test_an_entity_is_listed_until_forgotten() -> None:
    e = Entity.create(scope=SCOPE, entity_id="e" * 12, type="person", visibility="thread", name="Ada",
                      identifiers=[], keys=[])
    assert e.listed and e.live
    e.forget(reason="forgotten", requested_by="test")
    assert not e.listed and not e.live


# ------------------------------------------------------------------ shredding topics
OLD_TOPICS = ["memfabric.domain.entity:Entity.EntityForgotten", "memfabric.domain.ledger:Conversation.Erased",
              "memfabric.domain.note:Note.Forgotten"]
"""The topic strings the crypto layer listed by hand before issue 34 (stored in logs)."""


class Locker(Aggregate):
    """A test aggregate with a new tombstone class, a plain event and an opted-out one."""

    class Burned(Aggregate.Event, Shredding):
        why: str

    class Painted(Aggregate.Event):
        colour: str

    class Sealed(Aggregate.Event, Shredding):
        shreds = False


def test_the_shredding_topics_are_derived_from_the_marked_classes_and_stay_stable() -> None:
    topics = shredding_topics()
    assert set(OLD_TOPICS) <= set(topics)
    assert crypto.shredding_topics() == topics
    assert [get_topic(c) for c in (Note.Forgotten, Conversation.Erased, Entity.EntityForgotten)] == \
        [OLD_TOPICS[2], OLD_TOPICS[1], OLD_TOPICS[0]]


def test_a_new_tombstone_class_marked_shredding_is_picked_up_and_others_are_not() -> None:
    topics = shredding_topics()
    assert get_topic(Locker.Burned) in topics
    assert get_topic(Locker.Painted) not in topics and get_topic(Locker.Sealed) not in topics
    assert Locker.Burned in shredding_classes() and Note.Remembered not in shredding_classes()
    assert len(topics) == len(set(topics))  # eventsourcing's re-created classes are not doubled


def test_a_forget_shreds_and_a_legal_hold_does_not() -> None:
    forgotten, held = _note(), _note(note_id="b" * 12)
    _forget(forgotten)
    _forget(held, LEGAL_HOLD)
    tomb = forgotten.collect_events()[-1]
    hold = held.collect_events()[-1]
    assert type(tomb) is type(hold) is Note.Forgotten
    assert shreds(tomb) and not shreds(hold)
    assert shreds_keys([_note(note_id="c" * 12).collect_events()[0], tomb])
    assert not shreds_keys(_note(note_id="d" * 12).collect_events()) and not shreds_keys([hold])


# ------------------------------------------------------ the unit of work shreds itself
def forget_in_uow(fab: Any, note_id: str, reason: str) -> None:
    """Tombstone a note through a unit of work the way a handler does, without ``shred``."""
    scope = fab.scope("acme", "u1", "t1").scope
    with fab.service.unit_of_work([scope]) as uow:
        note = uow.load(scope, note_id)
        note.forget(content_hmac=None, reason=reason, requested_by="test")
        uow.add(note)
        uow.commit()


def test_the_in_memory_unit_of_work_shreds_a_forgotten_note_from_its_pending_events() -> None:
    with open_memory_fabric() as fab:
        notes = fab.scope("acme", "u1", "t1")
        gone = notes.remember(kind="fact", content="The vault code is 4711").id
        kept = notes.remember(kind="fact", content="The audit is on Monday").id
        forget_in_uow(fab, gone, "forgotten")
        forget_in_uow(fab, kept, LEGAL_HOLD)
        assert notes.history(gone)[0].fields["content"] == ERASED
        assert notes.history(kept)[0].fields["content"] == "The audit is on Monday"
