"""Port-level contracts (issue 34): the ``UnitOfWork``, ``NoteStore`` and ``LedgerStore``
ports, written once and run against every backend.

Shaped like eventsourcing's ``ApplicationRecorderTestCase``: each abstract class below
(named without ``Test`` so pytest collects only subclasses) asks a backend for its
ports through one fixture, ``ports`` → :class:`Ports`, and a backend's test module
(``tests/contract/test_ports.py``) subclasses every class once per backend. The fabric
(``Ports.fabric``) only sets up state through the public API; every assertion is on
the port itself. Lexical scores differ between backends (PostgreSQL stems): the
tests use exact words and compare ids, orders and windows, never raw scores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain import policy
from memfabric.domain.errors import FabricError
from memfabric.domain.note import ERASED, Note, note_uuid
from memfabric.domain.ports import ListQuery, NoteFilter
from memfabric.domain.scope import Scope
from memfabric.domain.search_terms import search_terms

HOME = Scope(tenant_id="acme", resource_id="u1", thread_id="t1")
OTHER = Scope(tenant_id="acme", resource_id="u2", thread_id="t9")
KINDS = ("fact", "procedure", "file", "episode")
EMBEDDER = HashEmbedder()


@dataclass
class Ports:
    """One backend's ports on one open fabric: ``unit_of_work(scopes)`` (the
    ``UnitOfWorkFactory``), ``store`` (``NoteStore``), ``ledger`` (``LedgerStore``),
    ``events()`` (events in its log), ``fabric`` (for setting up state)."""

    fabric: Any
    unit_of_work: Callable[[Sequence[Scope]], Any]
    store: Any
    ledger: Any
    events: Callable[[], int]


def new_fact(scope: Scope, note_id: str, content: str, *, kind: str = "fact", path: str | None = None,
             tags: Sequence[str] = ()) -> Note:
    """A ``Note`` as ``remember`` creates it (hash-embedded content, defaults elsewhere)."""
    vector = np.asarray(EMBEDDER.embed([content])[0], dtype=np.float32)
    return Note.remember(
        scope=scope, note_id=note_id, kind=kind, content=content, path=path, block=None, subject=None,
        t_ref=None, valid_from=None, valid_to=None, keywords=[], tags=list(tags), source_entry_ids=[],
        context=None, links=[], supersedes=None, importance=0.5, consent=None,
        embedding=np.ascontiguousarray(vector).tobytes(), embedder_id=str(EMBEDDER.id), dim=EMBEDDER.dim,
        token_count=policy.count_tokens(content), cause="caller")


def commit(ports: Ports, *notes: Note) -> int:
    """Save ``notes`` in one unit of work over their scopes; returns its position."""
    with ports.unit_of_work(list({n.scope.key: n.scope for n in notes}.values())) as uow:
        for note in notes:
            uow.add(note)
        uow.commit()
    return int(uow.position)


class PortsContract:
    """The ``ports`` fixture every port contract uses (overridden per backend)."""

    @pytest.fixture
    def ports(self) -> Ports:  # pragma: no cover - overridden
        raise NotImplementedError


class UnitOfWorkContract(PortsContract):
    """The ``UnitOfWork`` port (``memfabric.domain.ports.UnitOfWork``)."""

    def test_commit_saves_and_a_later_unit_of_work_loads(self, ports: Ports) -> None:
        before = ports.events()
        position = commit(ports, new_fact(HOME, "a" * 12, "The user prefers metric units"))
        assert position > 0 and ports.events() == before + 1
        with ports.unit_of_work([HOME]) as uow:
            note = uow.load(HOME, "a" * 12)
            assert note is not None and note.content == "The user prefers metric units"
            assert uow.exists(HOME, "a" * 12) and not uow.exists(OTHER, "a" * 12)
            assert [n.note_id for n in uow.load_ids([note_uuid(HOME, "a" * 12), note_uuid(OTHER, "x" * 12)])] == [
                "a" * 12]

    def test_leaving_without_commit_writes_nothing(self, ports: Ports) -> None:
        before = ports.events()
        with ports.unit_of_work([HOME]) as uow:
            uow.add(new_fact(HOME, "b" * 12, "never committed"))
            assert uow.exists(HOME, "b" * 12)  # it sees what it added
        assert ports.events() == before and uow.position == 0
        with ports.unit_of_work([HOME]) as uow:
            assert uow.load(HOME, "b" * 12) is None

    def test_an_exception_rolls_back(self, ports: Ports) -> None:
        before = ports.events()
        with pytest.raises(RuntimeError), ports.unit_of_work([HOME]) as uow:
            uow.add(new_fact(HOME, "c" * 12, "rolled back"))
            raise RuntimeError("boom")
        assert ports.events() == before
        assert ports.store.load(note_uuid(HOME, "c" * 12)) is None

    def test_positions_grow_with_each_commit(self, ports: Ports) -> None:
        first = commit(ports, new_fact(HOME, "d" * 12, "first"))
        second = commit(ports, new_fact(HOME, "e" * 12, "second"))
        assert 0 < first < second

    def test_a_pending_tombstone_erases_the_content_of_every_event(self, ports: Ports) -> None:
        commit(ports, new_fact(HOME, "f" * 12, "secret plans for the launch"))
        with ports.unit_of_work([HOME]) as uow:
            note = uow.load(HOME, "f" * 12)
            assert note is not None
            note.forget(content_hmac=uow.content_hmac(note.content or ""), reason="test", requested_by="t")
            uow.add(note)  # no shred call: the pending Forgotten event shreds
            uow.commit()
        with ports.unit_of_work([HOME]) as uow:
            gone = uow.load(HOME, "f" * 12)
        assert gone is not None and gone.forgotten and gone.content in (ERASED, None)
        assert all(getattr(e, "content", ERASED) in (ERASED, None)
                   for e in ports.store.stored_events(note_uuid(HOME, "f" * 12)))

    def test_write_side_reads_see_committed_notes(self, ports: Ports) -> None:
        commit(ports, new_fact(HOME, "1" * 12, "notes on the build", kind="file", path="docs/build.md"))
        with ports.unit_of_work([HOME]) as uow:
            assert uow.note_ids_by_path(HOME, "docs/build.md") == ["1" * 12]
            assert uow.note_ids_by_path(OTHER, "docs/build.md") == []
            assert [home for home, _ in uow.resolve(HOME, "1" * 12)] == [HOME]
            assert uow.resolve(OTHER, "1" * 12) == []  # a thread note is not seen from another resource

    def test_content_hmac_is_keyed_and_stable(self, ports: Ports) -> None:
        with ports.unit_of_work([HOME]) as uow:
            a, b, c = uow.content_hmac("x"), uow.content_hmac("x"), uow.content_hmac("y")
        assert a == b != c and len(a) == 64
        assert a != hashlib.sha256(b"x").hexdigest()  # keyed by the fabric secret

    def test_closed_unit_of_work_refuses_reads(self, ports: Ports) -> None:
        with ports.unit_of_work([HOME]) as uow:
            pass
        with pytest.raises(FabricError):
            uow.load(HOME, "a" * 12)


class NoteStoreContract(PortsContract):
    """The ``NoteStore`` port (``memfabric.domain.ports.NoteStore``)."""

    def _three(self, ports: Ports) -> None:
        commit(ports, new_fact(HOME, "a" * 12, "The user prefers metric units", tags=["prefs"]),
               new_fact(HOME, "b" * 12, "The deploy runs on Fridays", tags=["ops"]))
        commit(ports, new_fact(OTHER, "c" * 12, "metric units in the other thread", tags=["prefs"]))

    def test_recall_finds_by_vector_and_word_within_the_scope(self, ports: Ports) -> None:
        self._three(ports)
        q = np.asarray(EMBEDDER.embed(["The user prefers metric units"])[0], dtype=np.float32)
        hits = ports.store.recall(HOME, embedding=q, query="metric", kinds=KINDS, as_of=datetime.now(UTC),
                                  limit=5, require_consent=False)
        by_id = {c.note_id: c for c in hits}
        assert set(by_id) == {"a" * 12, "b" * 12}  # never the other thread's note
        assert by_id["a" * 12].vector_rank == 1 and by_id["a" * 12].lexical_rank == 1
        assert by_id["b" * 12].lexical_rank is None

    def test_recall_applies_tag_filters(self, ports: Ports) -> None:
        self._three(ports)
        hits = ports.store.recall(HOME, embedding=None, query="deploy metric", kinds=KINDS,
                                  as_of=datetime.now(UTC), limit=5, require_consent=False,
                                  filters=NoteFilter(tags=("ops",)))
        assert [c.note_id for c in hits] == ["b" * 12]

    def test_list_pages_in_write_order_and_counts(self, ports: Ports) -> None:
        self._three(ports)
        query = ListQuery(scope=HOME, kinds=KINDS, require_consent=False)
        first = ports.store.list_notes(query, after=None, limit=1)
        assert [c.note_id for c in first] == ["a" * 12]
        after = (first[0].fields["ingested_at"], first[0].aggregate_id)
        assert [c.note_id for c in ports.store.list_notes(query, after=after, limit=5)] == ["b" * 12]
        assert ports.store.count_notes(query) == 2

    def test_scopes_with_tags_and_scope_walks(self, ports: Ports) -> None:
        self._three(ports)
        assert ports.store.scopes_with(tenant_id="acme", tags=["prefs"]) == sorted([HOME, OTHER], key=lambda s: s.sql())
        refs = ports.store.notes_in_scope("acme", None, None, after=None, limit=2)
        assert {r.note_id for r in refs} == {"a" * 12, "b" * 12}  # resource u1 first, then by aggregate id
        assert [r.aggregate_id for r in refs] == sorted(r.aggregate_id for r in refs)
        rest = ports.store.notes_in_scope("acme", None, None, after=refs[-1], limit=5)
        assert [(r.note_id, r.scope) for r in rest] == [("c" * 12, OTHER)]

    def test_counts_after_forget(self, ports: Ports) -> None:
        self._three(ports)
        ports.fabric.scope("acme", "u1", "t1").forget(id="a" * 12)
        counts = ports.store.counts_in_scope("acme", "u1", None)
        assert (counts.live, counts.superseded, counts.held, counts.forgotten) == (1, 0, 0, 1)

    def test_resolve_load_and_events(self, ports: Ports) -> None:
        self._three(ports)
        assert [home for home, _ in ports.store.resolve(HOME, "a" * 12)] == [HOME]
        note = ports.store.load(note_uuid(HOME, "a" * 12))
        assert note is not None and note.content == "The user prefers metric units"
        assert [type(e).__name__ for e in ports.store.stored_events(note.id)] == ["Remembered"]
        assert ports.store.load(note_uuid(HOME, "9" * 12)) is None

    def test_working_blocks(self, ports: Ports) -> None:
        notes = ports.fabric.scope("acme", "u1", "t1")
        notes.remember(kind="working", block="task", content="Book a hotel")
        blocks = ports.store.working_blocks(HOME)
        assert list(blocks) == ["task"] and blocks["task"]["content"] == "Book a hotel"
        assert ports.store.working_blocks(OTHER) == {}


class LedgerStoreContract(PortsContract):
    """The conversation ledger's ``LedgerStore`` port (``memfabric.domain.conversation``)."""

    def _thread(self, ports: Ports, scope: Scope = HOME) -> tuple[Any, list[Any]]:
        ledger = ports.fabric.scope(scope.tenant_id, scope.resource_id, scope.thread_id).conversation()
        entries = [ledger.append("user", text) for text in
                   ("I booked the hotel", "The flight leaves at nine", "Remember the hotel voucher")]
        return ledger.aggregate_id, entries

    def test_entries_page_both_ways(self, ports: Ports) -> None:
        aid, entries = self._thread(ports)
        rows = ports.ledger.entries(aid, after=None, before=None, limit=10, descending=False)
        assert [r["entry_id"] for r in rows] == [e.id for e in entries]
        assert [r["position"] for r in rows] == sorted(r["position"] for r in rows)
        last = ports.ledger.entries(aid, after=None, before=None, limit=1, descending=True)
        assert [r["entry_id"] for r in last] == [entries[-1].id]
        middle = rows[1]["position"]
        assert [r["entry_id"] for r in ports.ledger.entries(aid, after=middle, before=None, limit=5,
                                                            descending=False)] == [entries[2].id]

    def test_window_and_position(self, ports: Ports) -> None:
        aid, entries = self._thread(ports)
        position = ports.ledger.position(aid, entries[1].id)
        assert position is not None and ports.ledger.position(aid, "0" * 12) is None
        page, beyond = ports.ledger.window(aid, position, 1, backward=True)
        assert [r["entry_id"] for r in page] == [entries[1].id]
        assert [r["entry_id"] for r in beyond] == [entries[2].id]

    def test_search_by_terms(self, ports: Ports) -> None:
        aid, entries = self._thread(ports)
        hits, matched = ports.ledger.search(aid, search_terms("hotel"), 5)
        assert matched == 2 and {h["entry_id"] for h in hits} == {entries[0].id, entries[2].id}
        assert ports.ledger.search(aid, search_terms("submarine"), 5) == ([], 0)

    def test_threads_load_and_tenants(self, ports: Ports) -> None:
        aid, _ = self._thread(ports)
        other, _ = self._thread(ports, OTHER)
        assert [t[0] for t in ports.ledger.threads("acme", "u1", None)] == [aid]
        assert sorted(t[0] for t in ports.ledger.threads("acme", None, None)) == sorted([aid, other])
        assert ports.ledger.threads("globex", None, None) == []
        conv = ports.ledger.load(aid)
        assert conv is not None and len(conv.live_entries()) == 3
        assert ports.ledger.live_tenants(after=None) == ["acme"]

    def test_observations(self, ports: Ports) -> None:
        aid, entries = self._thread(ports)
        ledger = ports.fabric.scope("acme", "u1", "t1").conversation()
        oid = ledger.observe("The user travels by plane", source_entry_ids=[entries[1].id])
        found = ports.ledger.observation(aid, oid)
        assert found is not None and found["text"] == "The user travels by plane"
        assert found["source_entry_ids"] == [entries[1].id]
        assert ports.ledger.observation(aid, "0" * 12) is None
