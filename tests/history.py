"""A log history with every event type, shared by the admin and audit tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from memfabric.adapters import Fabric
from memfabric.domain.note import Note, note_uuid

EVENT_TYPES = {
    "Remembered", "Folded", "Superseded", "Linked", "Evolved", "Repointed",
    "BlockWritten", "BlockAppended", "Forgotten",
}


@dataclass
class History:
    """Ids of the notes of :func:`make_history`."""

    folded: str
    old_home: str
    new_home: str
    forgotten: str
    forgotten_text: str
    held: str
    file: str
    linked: str


def _change(fabric: Fabric, notes: object, note_id: str, action: str) -> None:
    """Link, evolve or repoint a note through its aggregate (workers' paths)."""
    scope = notes.scope  # type: ignore[attr-defined]
    with fabric.service.unit_of_work([scope]) as uow:
        note = uow.load(scope, note_id)
        assert isinstance(note, Note)
        if action == "link":
            note.link([{"id": "aaaaaaaaaaaa", "relation": "related", "weight": 0.5}], cause="linker")
        elif action == "evolve":
            note.evolve(context="refined context", keywords=["units"], tags=["evolved"], cause="evolver")
        elif action == "repoint":
            note.repoint(to_path="src/new_place.py")
        uow.add(note)
        uow.commit()


def make_history(fabric: Fabric, tenant: str = "acme") -> History:
    """Remember, fold, supersede, link, evolve, repoint, working blocks (write, append,
    forget, rewrite), forget and hold, in two tenants; returns the ids."""
    notes = fabric.scope(tenant, "u1", "t1")
    other = fabric.scope("globex", "u9", "t9")
    past = datetime(2024, 1, 1, tzinfo=timezone.utc)
    folded = notes.remember(kind="fact", content="User prefers metric units", tags=["prefs"])
    notes.remember(kind="fact", content="User prefers metric units", tags=["units"])  # fold
    old_home = notes.remember(kind="fact", content="User lives in Lisbon", subject="home",
                              valid_from=past)
    new_home = notes.remember(kind="fact", content="User moved to Porto", subject="home",
                              valid_from=past + timedelta(days=30))
    linked = notes.remember(kind="fact", content="User has a dog named Biscuit")
    _change(fabric, notes, linked.id, "link")
    _change(fabric, notes, folded.id, "evolve")
    file = notes.remember(kind="file", path="src/old_place.py", content="def main(): pass")
    _change(fabric, notes, file.id, "repoint")
    text = "User's card number is 4111 1111 1111 1111"
    forgotten = notes.remember(kind="fact", content=text)
    notes.forget(id=forgotten.id)
    held = notes.remember(kind="fact", content="User was in a legal dispute in 2023")
    notes.forget(id=held.id, hold=True)
    notes.remember(kind="procedure", content="To deploy, run make release then tag the commit")
    notes.remember(kind="working", block="persona", content="Terse, friendly assistant.")
    notes.append_block("persona", "Uses metric units.")
    notes.remember(kind="working", block="scratch", content="temporary")
    notes.forget(block="scratch")
    notes.remember(kind="working", block="scratch", content="rewritten after forget")
    other.remember(kind="fact", content="Globex ships anvils on Tuesdays")
    other.remember(kind="working", block="persona", content="Formal.")
    return History(folded.id, old_home.id, new_home.id, forgotten.id, text, held.id, file.id, linked.id)
