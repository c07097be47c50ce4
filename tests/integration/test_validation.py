"""Bad input: a typed error naming the field, and nothing written (issue 2).

The pure validation cases (models only, no database) are in tests/unit/test_inputs.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from memfabric.adapters import Fabric
from memfabric.domain.errors import (
    FabricError,
    NoteExistsError,
    NoteNotFoundError,
    NotSupportedError,
)
from pydantic import ValidationError

from tests.conftest import event_count
from tests.unit.test_inputs import BAD_REMEMBER

NOW = datetime(2025, 1, 1, tzinfo=UTC)

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


def test_unknown_note_is_named_error(fabric: Fabric) -> None:
    with pytest.raises(NoteNotFoundError):
        fabric.scope("acme").get("0123456789ab")
    with pytest.raises(NoteNotFoundError):
        fabric.scope("acme").history("0123456789ab")
