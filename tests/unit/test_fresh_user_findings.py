"""Findings of a fresh user's break-it session, on the in-memory backend (no database)."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters import open_memory_fabric


@pytest.mark.parametrize("bad", [{"importance": "0.5"}, {"importance": True}, {"importance": "1"}])
def test_importance_must_be_a_number_not_a_string_or_bool(bad: dict[str, Any]) -> None:
    with open_memory_fabric() as fab:
        notes = fab.scope("acme")
        with pytest.raises(ValidationError) as info:
            notes.remember(kind="fact", content="x", **bad)
        assert info.value.errors()[0]["loc"] == ("importance",)
        assert fab.log.event_count() == 0


def test_a_bad_per_call_consolidate_names_the_argument() -> None:
    with open_memory_fabric() as fab:
        with pytest.raises(ValidationError) as info:
            fab.scope("acme").remember(kind="fact", content="x", consolidate={"threshold": 5})
        assert all(err["loc"][0] == "consolidate" for err in info.value.errors())


def test_composed_and_decomposed_accents_fold() -> None:
    with open_memory_fabric() as fab:
        notes = fab.scope("acme")
        text = "Zoë likes crème brûlée"
        first = notes.remember(kind="fact", content=unicodedata.normalize("NFC", text))
        again = notes.remember(kind="fact", content=unicodedata.normalize("NFD", text))
        assert (again.outcome, again.id) == ("folded", first.id)


@pytest.mark.parametrize("bad", ["5", True, 5.0])
def test_top_k_must_be_an_integer_not_a_string_or_bool(bad: Any) -> None:
    """A fresh user's finding (2026-12-03): ``recall(top_k="5")`` was coerced to 5 while
    ``importance="0.5"`` is refused; both are strict now."""
    with open_memory_fabric() as fab:
        notes = fab.scope("acme")
        notes.remember(kind="fact", content="Acme ships on Fridays")
        with pytest.raises(ValidationError) as info:
            notes.recall("when does acme ship", top_k=bad)
        assert info.value.errors()[0]["loc"] == ("top_k",)
        assert len(notes.recall("when does acme ship", top_k=5).hits) == 1
