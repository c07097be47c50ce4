"""Issue 14: the ``Conversation`` aggregate and the ledger inputs, without PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from memfabric.domain.conversation import AppendInput, SearchInput, render, LedgerEntry
from memfabric.domain.ledger import Conversation, LedgerError, NoLedgerError, conversation_uuid
from memfabric.domain.note import PROTECTED_FIELDS
from memfabric.domain.scope import Scope
from memfabric.domain.search_terms import coverage, search_terms, term_weights, word_terms as terms

AT = datetime(2024, 5, 1, tzinfo=timezone.utc)
SCOPE = Scope(tenant_id="acme", resource_id="u1", thread_id="t1")


def test_ids_and_topics_are_stable() -> None:
    assert conversation_uuid(SCOPE) == conversation_uuid(Scope(tenant_id="acme", resource_id="u1", thread_id="t1"))
    assert conversation_uuid(SCOPE) != conversation_uuid(SCOPE.model_copy(update={"thread_id": "t2"}))
    with pytest.raises(NoLedgerError):
        conversation_uuid(Scope(tenant_id="acme", resource_id="u1"))
    assert Conversation.EntryAppended.__qualname__ == "Conversation.EntryAppended"
    assert Conversation.__module__ == "memfabric.domain.ledger"
    for cls in (Conversation.EntryAppended, Conversation.Observed, Conversation.Reflected):
        assert "text" in cls.__dataclass_fields__ and "text" in PROTECTED_FIELDS  # sealed


def test_lifecycle_rules() -> None:
    c = Conversation.start(SCOPE)
    a = c.append(entry_id="aaaaaaaaaaaa", role="user", text="hello", at=AT)
    with pytest.raises(LedgerError):
        c.append(entry_id="bbbbbbbbbbbb", role="user", text="x", at=AT, parent_id="cccccccccccc")
    c.observe(observation_id="000000000001", text="obs", source_entry_ids=[a.entry_id])
    c.reflect(reflection_id="000000000002", text="ref", source_ids=["000000000001"])
    with pytest.raises(LedgerError):
        c.promotable("000000000002")
    c.open_work_scope(scope_id="000000000003", name="w")
    c.bind(reflection_id="000000000002", scope_id="000000000003")
    with pytest.raises(LedgerError):
        c.promotable("000000000002")
    c.close_work_scope("000000000003")
    assert c.promotable("000000000002")[1] == "000000000003"
    c.retract(a.entry_id)
    with pytest.raises(LedgerError):
        c.observe(observation_id="000000000004", text="o", source_entry_ids=[a.entry_id])
    c.erase(requested_by="dpo")
    assert (c.entries, c.observations, c.reflections, c.first_position) == ([], {}, {}, 2)
    b = c.append(entry_id="bbbbbbbbbbbb", role="user", text="again", at=AT)
    assert b.position == 2


def test_head_accepts_appends_and_retractions_only() -> None:
    h = Conversation.head(aggregate_id=conversation_uuid(SCOPE), version=7, scope=SCOPE,
                          last_position=5, first_position=1, erasures=0, at=AT,
                          lookup=lambda eid: eid == "aaaaaaaaaaaa")
    e = h.append(entry_id="bbbbbbbbbbbb", role="user", text="x", at=AT, parent_id="aaaaaaaaaaaa")
    assert (e.position, h.version) == (6, 8)
    h.retract("aaaaaaaaaaaa")
    with pytest.raises(LedgerError):
        h.retract("aaaaaaaaaaaa")
    with pytest.raises(LedgerError):
        h.open_work_scope(scope_id="000000000003", name="w")
    assert [ev.originator_version for ev in h.collect_events()] == [8, 9]


def test_inputs_and_rendering() -> None:
    with pytest.raises(ValidationError):
        AppendInput(role="user", text="x", timestamp=datetime(2024, 1, 1))
    with pytest.raises(ValidationError):
        SearchInput(query="x", top_k=101)
    assert terms("Ferry, ferry to ZANZIBAR!") == ["ferry", "to", "zanzibar"]


def test_search_terms_stem_and_drop_stop_words() -> None:
    """Issue 29: "flights" meets "flight", "leave" meets "leaves", and stop words do not
    count towards the coverage ("when does my flight leave" scored 0.4 on the right turn)."""
    assert search_terms("When does my flight leave?") == ["flight", "leav"]
    assert set(search_terms("Our flights leaves at 9, gate B12")) >= {"flight", "leav", "9", "b12"}
    assert search_terms("what is it") == []
    q = search_terms("when does my flight leave")
    w = term_weights(q, {"flight": 1, "leav": 1}, 100)
    assert coverage(q, set(search_terms("The flight leaves at 9")), w) == 1.0
    rare = term_weights(["ferri", "zanzibar"], {"ferri": 50, "zanzibar": 1}, 100)
    assert coverage(["ferri", "zanzibar"], {"zanzibar"}, rare) > 0.8 > 0.2 > coverage(
        ["ferri", "zanzibar"], {"ferri"}, rare)
    text = render([LedgerEntry("aaaaaaaaaaaa", 1, "user", "y" * 300, AT)], "summary")
    assert text.startswith("[2024-05-01 00:00] user: ") and len(text) < 240
