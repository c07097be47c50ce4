"""Input validation, pure: the pydantic models of memfabric.domain.inputs and Scope
(no database). The "nothing is written" side of the same cases runs against
PostgreSQL in tests/integration/test_validation.py and on every backend in
tests/contract/behaviours.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from memfabric.domain.inputs import EraseScopeInput, RecallInput, RememberInput
from memfabric.domain.scope import Scope
from pydantic import ValidationError

NOW = datetime(2025, 1, 1, tzinfo=UTC)

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
def test_bad_remember_field_is_named(fields: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError) as info:
        RememberInput.model_validate(fields, context={"max_entry_text_chars": 8000})
    assert name in str(info.value)


def test_remember_limit_comes_from_context() -> None:
    with pytest.raises(ValidationError, match="content"):
        RememberInput.model_validate({"kind": "fact", "content": "x" * 11}, context={"max_entry_text_chars": 10})
    ok = RememberInput.model_validate({"kind": "fact", "content": "x" * 10}, context={"max_entry_text_chars": 10})
    assert ok.content == "x" * 10


def test_camel_case_aliases_validate() -> None:
    item = RememberInput.model_validate({"kind": "fact", "content": "Aliased", "validFrom": NOW,
                                         "sourceEntryIds": ["D1:1"]})
    assert item.valid_from == NOW and tuple(item.source_entry_ids) == ("D1:1",)


@pytest.mark.parametrize(
    ("tenant", "resource", "thread"),
    [("", None, None), ("a b", None, None), ("x" * 129, None, None), ("ok", "bad/slash", None), ("ok", None, "-lead")],
)
def test_bad_scope_raises(tenant: str, resource: str | None, thread: str | None) -> None:
    with pytest.raises(ValidationError):
        Scope(tenant_id=tenant, resource_id=resource, thread_id=thread)


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
def test_bad_recall_raises(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValidationError) as info:
        RecallInput.model_validate(kwargs)
    assert name in str(info.value)


@pytest.mark.parametrize("fields", [
    {"tenant_id": "acme", "batch_size": 0},
    {"tenant_id": "acme", "batch_size": 1001},
    {"tenant_id": "acme", "hold": "yes"},
    {"tenant_id": "acme", "requested_by": ""},
    {"tenant_id": "a b"},
])
def test_bad_erase_scope_args(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        EraseScopeInput.model_validate(fields)
