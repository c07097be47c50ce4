"""Regression tests of issue 17's input defects (pure: no database)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memfabric.domain.inputs import ContextOptions, Link, RecallInput, RememberInput

LOW = datetime(1, 1, 1, 5, tzinfo=timezone(timedelta(hours=14)))  # UTC: year 0
HIGH = datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12)))  # UTC: year 10000


@pytest.mark.parametrize("field", ["valid_from", "t_ref", "valid_to"])
@pytest.mark.parametrize("value", [LOW, HIGH])
def test_defect_1_remember_rejects_instants_outside_utc_years(field: str, value: datetime) -> None:
    with pytest.raises(ValidationError) as info:
        RememberInput(kind="fact", content="x", **{field: value})
    assert field in {str(e["loc"][0]) for e in info.value.errors()}


@pytest.mark.parametrize("model", [RecallInput, ContextOptions])
@pytest.mark.parametrize("value", [LOW, HIGH])
def test_defect_1_as_of_outside_utc_years(model: type, value: datetime) -> None:
    extra = {"query": "q"}
    with pytest.raises(ValidationError) as info:
        model(as_of=value, **extra)
    assert "as_of" in {str(e["loc"][0]) for e in info.value.errors()}


def test_defect_1_edge_instants_inside_the_range_still_pass() -> None:
    lo = datetime(1, 1, 1, tzinfo=timezone.utc)
    hi = datetime(9999, 12, 31, 23, tzinfo=timezone.utc)
    assert RememberInput(kind="fact", content="x", valid_from=lo, valid_to=hi).valid_to == hi


@pytest.mark.parametrize("value", [1e-320, 5e-324, 1e-40])
def test_defect_10_tiny_importance_is_a_validation_error(value: float) -> None:
    with pytest.raises(ValidationError) as info:
        RememberInput(kind="fact", content="x", importance=value)
    assert info.value.errors()[0]["loc"] == ("importance",)
    with pytest.raises(ValidationError):
        Link(id="0" * 12, weight=value)
    assert RememberInput(kind="fact", content="x", importance=0.0).importance == 0.0
    assert RememberInput(kind="fact", content="x", importance=1e-30).importance == 1e-30


def test_defect_10_deeply_nested_consent_is_a_validation_error() -> None:
    nested: object = "x"
    for _ in range(1000):
        nested = [nested]
    with pytest.raises(ValidationError) as info:
        RememberInput(kind="fact", content="x", consent={"purposes": nested})
    assert "nest" in str(info.value)
    deep: object = {}
    for _ in range(1000):
        deep = {"a": deep}
    with pytest.raises(ValidationError):
        RememberInput(kind="fact", content="x", consent=deep)


@pytest.mark.parametrize(("field", "value"), [
    ("content", b"abc"), ("content", bytearray(b"abc")), ("context", memoryview(b"abc")),
    ("tags", [b"prefs"]), ("subject", b"editor"),
])
def test_bytes_are_not_text(field: str, value: object) -> None:
    """A fresh-user trial stored ``content=b"abc"`` as the text 'abc' (pydantic decodes
    bytes in lax mode): no public input is binary, so bytes are a validation error."""
    with pytest.raises(ValidationError, match="not bytes") as info:
        RememberInput(kind="fact", **{"content": "x", field: value})
    assert field in {str(e["loc"][0]) for e in info.value.errors()}
    assert RecallInput(query="q").query == "q"
    with pytest.raises(ValidationError, match="not bytes"):
        RecallInput(query=b"q")
