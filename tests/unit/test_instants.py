"""An instant (``as_of``, ``known_at``, ``valid_from``/``valid_to``, ``t_ref``) is a
timezone-aware datetime or an ISO 8601 time with a zone; a number, or a string of one,
is refused: pydantic would read it as Unix seconds, so ``as_of=5`` or
``known_at="2026"`` would silently mean an instant of 1970."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import TypeAdapter, ValidationError

from memfabric.adapters import open_memory_fabric
from memfabric.domain.bitemporal import known_at_arg
from memfabric.domain.inputs import Instant

INSTANT: TypeAdapter[datetime] = TypeAdapter(Instant)


@pytest.mark.parametrize("value", [5, 5.5, -3, "5", "2026", " 1700000000 ", "1.5e9".replace("e9", "")])
def test_numbers_are_not_instants(value: object) -> None:
    with pytest.raises(ValidationError, match="number"):
        INSTANT.validate_python(value)
    with pytest.raises(ValidationError, match="known_at"):
        known_at_arg(value)


@pytest.mark.parametrize("value", ["2026-01-31T12:00:00Z", "2026-01-31T12:00:00+01:00",
                                   datetime(2026, 1, 31, tzinfo=timezone.utc)])
def test_iso_times_and_aware_datetimes_are(value: object) -> None:
    assert INSTANT.validate_python(value).astimezone(timezone.utc).date().isoformat() == "2026-01-31"


def test_recall_refuses_a_number_for_as_of_and_known_at() -> None:
    with open_memory_fabric() as fab:
        notes = fab.scope("acme", "u1", "t1")
        notes.remember(kind="fact", content="User prefers metric units")
        for arg in ("as_of", "known_at"):
            with pytest.raises(ValidationError, match=arg):
                notes.recall("metric units", **{arg: 5})


def test_a_missing_principal_reads_as_its_message() -> None:
    """``PrincipalNotFoundError`` is a ``KeyError`` (which quotes its argument): its text
    is the message itself, as ``NoteNotFoundError``'s is."""
    from memfabric.domain.errors import PrincipalNotFoundError

    with open_memory_fabric() as fab:
        with pytest.raises(PrincipalNotFoundError) as caught:
            fab.principals.get("ghost")
    assert str(caught.value).startswith("no principal 'ghost'")
