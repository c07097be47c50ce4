"""``AsyncNotes`` offers every public ``Notes`` method except the documented sync handles."""

from __future__ import annotations

import inspect

from memfabric.adapters.aio import SYNC_ONLY, AsyncNotes
from memfabric.domain.notes import Notes


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def test_async_notes_covers_notes_but_the_sync_handles() -> None:
    assert SYNC_ONLY == {"conversation", "entities", "tools"}
    missing = _public(Notes) - _public(AsyncNotes)
    assert missing == SYNC_ONLY, sorted(missing)
    extra = _public(AsyncNotes) - _public(Notes)
    # ``scope``: a property here, an instance attribute of Notes; ``context``: one-shot provider
    assert extra == {"context", "scope"}, sorted(extra)


def test_io_methods_are_coroutines() -> None:
    for name in _public(Notes) - SYNC_ONLY - {"context_provider", "attach", "as_principal"}:  # no I/O
        assert inspect.iscoroutinefunction(getattr(AsyncNotes, name)), name
    assert not inspect.iscoroutinefunction(AsyncNotes.context_provider)
    assert not inspect.iscoroutinefunction(AsyncNotes.attach)
    assert not inspect.iscoroutinefunction(AsyncNotes.as_principal)
