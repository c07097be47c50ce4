"""Issue 32: identifiers given to ``upsert`` / ``match`` are checked before anything is
written: a built-in kind (email, phone, handle, url) takes only a value of its shape, a
host-defined kind is a short lower-case label, and no value has a control character or
nothing left once normalised (pydantic ``ValidationError``, nothing written)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters.memory import open_memory_fabric
from memfabric.domain.entities import keys as ek

BAD = [
    ("email", "not-an-email"), ("email", "maria@acme"), ("email", "two@at@acme.example"),
    ("phone", "abc"), ("phone", "12345"), ("phone", "+1 415 555 0142 ext. 9"),
    ("handle", "has space"), ("handle", "@"), ("handle", "@" + "x" * 65),
    ("url", "nota url"), ("url", "ftp://acme.example"), ("url", "acme"),
    ("crm_id", "a\tb"), ("crm_id", "line\nbreak"), ("crm_id", "\u0301"),
]
GOOD = [
    ("email", "Maria@Acme.Example"), ("phone", "+1 (415) 555-0142"), ("phone", "0034.600.123.456"),
    ("handle", "@mlopez"), ("handle", "m.lopez_2"), ("url", "https://www.acme.example/"),
    ("url", "acme.example/team"), ("crm_id", "  CRM-0042 "), ("github", "octo-cat"),
]
BAD_KINDS = ["Email", "my kind", "1crm", "a:b", "", "k" * 33, "crm\u00e9"]


@pytest.fixture
def fabric() -> Any:
    return open_memory_fabric()


@pytest.fixture
def notes(fabric: Any) -> Any:
    return fabric.scope("t", "r", "th")


@pytest.mark.parametrize(("kind", "value"), BAD)
def test_a_malformed_value_is_refused_and_nothing_is_written(fabric: Any, notes: Any, kind: str,
                                                             value: str) -> None:
    notes.entities.upsert("Someone Else")
    before = fabric.log.event_count()
    with pytest.raises(ValidationError, match=f"identifier {kind}"):
        notes.entities.upsert("Maria Lopez", identifiers=[(kind, value)])
    with pytest.raises(ValidationError, match=f"identifier {kind}"):
        notes.entities.match("Maria Lopez", identifiers=[(kind, value)])
    assert ek.identifier_problem(kind, value) is not None
    assert fabric.log.event_count() == before
    assert [e.display_name for e in notes.entities.list()] == ["Someone Else"]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_a_kind_that_is_not_a_label_is_refused(notes: Any, kind: str) -> None:
    with pytest.raises(ValidationError, match="kind"):
        notes.entities.upsert("Maria Lopez", identifiers=[(kind, "v1")])
    assert notes.entities.list() == []


def test_well_formed_identifiers_are_kept_and_resolve(notes: Any) -> None:
    assert [p for p in GOOD if ek.identifier_problem(*p) is not None] == []
    made = notes.entities.upsert("Maria Lopez", identifiers=GOOD)
    assert made.outcome == "created"
    assert made.entity.identifiers == tuple((k, v.strip()) for k, v in GOOD)
    assert notes.entities.resolve("maria@acme.example")[0].id == made.entity.id
    found = notes.entities.match("M. Lopez", identifiers=[("handle", "MLOPEZ")])  # @mlopez spelled otherwise
    assert found is not None and (found.id, found.tier) == (made.entity.id, "identifier")
