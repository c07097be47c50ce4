"""Bad input: a typed error naming the field, and nothing written (issue 2)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import Fabric
from memfabric.domain.errors import FabricError, NoteExistsError, NoteNotFoundError, NotSupportedError
from tests.conftest import event_count

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)

BAD_REMEMBER: list[tuple[dict[str, Any], str]] = [
    ({"kind": "memo", "content": "x"}, "kind"),
    ({"content": "x"}, "kind"),
    ({"kind": "fact"}, "content"),
    ({"kind": "fact", "content": ""}, "content"),
    ({"kind": "fact", "content": "   "}, "content"),
    ({"kind": "fact", "content": "x" * 8001}, "content"),
    ({"kind": "fact", "content": "x", "id": "ABCDEF012345"}, "id"),
    ({"kind": "fact", "content": "x", "id": "abc"}, "id"),
    ({"kind": "file", "content": "x"}, "path"),
    ({"kind": "fact", "content": "x", "path": "a.py"}, "path"),
    ({"kind": "fact", "content": "x", "valid_from": datetime(2025, 1, 1)}, "valid_from"),
    ({"kind": "fact", "content": "x", "t_ref": "yesterday"}, "t_ref"),
    ({"kind": "fact", "content": "x", "valid_from": NOW, "valid_to": NOW}, "valid_to"),
    ({"kind": "fact", "content": "x", "valid_from": NOW, "valid_to": NOW - timedelta(days=1)}, "valid_to"),
    ({"kind": "fact", "content": "x", "tags": [""]}, "tags"),
    ({"kind": "fact", "content": "x", "keywords": ["ok", " "]}, "keywords"),
    ({"kind": "fact", "content": "x", "source_entry_ids": [""]}, "source_entry_ids"),
    ({"kind": "fact", "content": "x", "importance": 1.5}, "importance"),
    ({"kind": "fact", "content": "x", "importance": -0.1}, "importance"),
    ({"kind": "fact", "content": "x", "links": [{"id": "nothex"}]}, "links"),
    ({"kind": "fact", "content": "x", "links": [{"id": "0123456789ab", "weight": 2}]}, "links"),
    ({"kind": "fact", "content": "x", "consent": {"visibility": "world"}}, "consent"),
    ({"kind": "fact", "content": "x", "supersedes": "zz"}, "supersedes"),
    ({"kind": "fact", "content": "x", "colour": "red"}, "colour"),
    ({"kind": "fact", "content": "x", "block": "prefs"}, "block"),
    ({"kind": "fact", "content": "x", "subject": ""}, "subject"),
    ({"kind": "fact", "content": "x", "context": " "}, "context"),
]


@pytest.mark.parametrize(("fields", "name"), BAD_REMEMBER)
def test_bad_remember_field_raises_and_writes_nothing(fabric: Fabric, dsn: str, fields: dict[str, Any], name: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="baseline note")
    before = event_count(dsn)
    with pytest.raises(ValidationError) as info:
        notes.remember_many([fields])
    assert name in str(info.value)
    if "kind" in fields and "colour" not in fields:  # the typed signature takes them all
        with pytest.raises(ValidationError) as info:
            notes.remember(**fields)
        assert name in str(info.value)
    assert event_count(dsn) == before


def test_typed_remember_rejects_unknown_keywords(fabric: Fabric, dsn: str) -> None:
    """``remember`` has typed keyword parameters: a misspelled field is a TypeError
    (and a mypy error), never silently ignored, and nothing is written."""
    notes = fabric.scope("acme")
    with pytest.raises(TypeError, match="colour"):
        notes.remember(kind="fact", content="x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="kind"):
        notes.remember(content="x")  # type: ignore[call-arg]
    assert event_count(dsn) == 0


def test_camel_case_aliases_accepted(fabric: Fabric) -> None:
    notes = fabric.scope("acme")
    [n] = notes.remember_many([{"kind": "fact", "content": "Aliased", "validFrom": NOW,
                                "sourceEntryIds": ["D1:1"]}])
    assert n.valid_from == NOW and n.source_entry_ids == ("D1:1",)


def test_limit_is_configurable(dsn: str) -> None:
    from memfabric.adapters import open_fabric

    with open_fabric(dsn, limits={"max_entry_text_chars": 10}) as fab:
        with pytest.raises(ValidationError, match="content"):
            fab.scope("acme").remember(kind="fact", content="x" * 11)
        assert event_count(dsn) == 0
        assert fab.scope("acme").remember(kind="fact", content="x" * 10).content == "x" * 10


@pytest.mark.parametrize("kind", ["episode"])
def test_unsupported_kind_is_a_named_error(fabric: Fabric, dsn: str, kind: str) -> None:
    with pytest.raises(NotSupportedError):
        fabric.scope("acme").remember(kind=kind, content="x")
    assert event_count(dsn) == 0


@pytest.mark.parametrize(
    ("tenant", "resource", "thread"),
    [("", None, None), ("a b", None, None), ("x" * 129, None, None), ("ok", "bad/slash", None), ("ok", None, "-lead")],
)
def test_bad_scope_raises(fabric: Fabric, tenant: str, resource: str | None, thread: str | None) -> None:
    with pytest.raises(ValidationError):
        fabric.scope(tenant, resource, thread)


def test_explicit_id_never_overwrites(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="first", id="0123456789ab")
    before = event_count(dsn)
    with pytest.raises(NoteExistsError):
        notes.remember(kind="fact", content="second", id="0123456789ab")
    assert event_count(dsn) == before
    assert notes.get("0123456789ab").content == "first"
    assert isinstance(NoteExistsError("x"), FabricError)


def test_remember_many_is_all_or_nothing(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme")
    notes.remember(kind="fact", content="taken", id="0123456789ab")
    before = event_count(dsn)
    with pytest.raises(NoteExistsError):
        notes.remember_many([
            {"kind": "fact", "content": "a new fact about cats"},
            {"kind": "fact", "content": "clash", "id": "0123456789ab"},
        ])
    assert event_count(dsn) == before
    with pytest.raises(ValidationError):
        notes.remember_many([{"kind": "fact", "content": "fine"}, {"kind": "fact"}])
    assert event_count(dsn) == before
    assert all("cats" not in (h.content or "") for h in notes.recall("cats", top_k=50).hits)


BAD_RECALL: list[tuple[dict[str, Any], str]] = [
    ({"query": ""}, "query"),
    ({"query": "   "}, "query"),
    ({"query": "x", "kinds": ()}, "kinds"),
    ({"query": "x", "kinds": ("working",)}, "kinds"),
    ({"query": "x", "kinds": ("nope",)}, "kinds"),
    ({"query": "x", "top_k": 0}, "top_k"),
    ({"query": "x", "budget": 0}, "budget"),
    ({"query": "x", "as_of": datetime(2025, 1, 1)}, "as_of"),
    ({"query": "x", "mode": "magic"}, "mode"),
    ({"query": "x", "scoring": {"recency_weight": -1}}, "recency_weight"),
    ({"query": "x", "scoring": {"half_life": 0}}, "half_life"),
]


@pytest.mark.parametrize(("kwargs", "name"), BAD_RECALL)
def test_bad_recall_raises(fabric: Fabric, kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError) as info:
        fabric.scope("acme").recall(**kwargs)
    assert name in str(info.value)


def test_unknown_note_is_named_error(fabric: Fabric) -> None:
    with pytest.raises(NoteNotFoundError):
        fabric.scope("acme").get("0123456789ab")
    with pytest.raises(NoteNotFoundError):
        fabric.scope("acme").history("0123456789ab")
