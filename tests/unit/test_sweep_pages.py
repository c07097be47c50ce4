"""Issue 30: the sweep's keyset pages (``memfabric.domain.sweep_pages.pages``): pages of
``batch_size`` refs after the last id of the page before, at most ``budget`` refs, an
end after a short or empty page, and the next page read while the caller handles the
current one (read ahead, in another thread). DB-free: ``fetch`` is a fake over a
sorted list of ids."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest

from memfabric.domain.ports import DueRef
from memfabric.domain.scope import Scope
from memfabric.domain.sweep_pages import Fetch, Page, pages

SCOPE = Scope(tenant_id="acme", resource_id="u1")
IDS = [UUID(int=i) for i in range(1, 12)]  # 11 due notes


def fake_fetch(calls: list[tuple[UUID | None, int]]) -> Fetch:
    def fetch(after: UUID | None, size: int) -> Page:
        calls.append((after, size))
        rest = [i for i in IDS if after is None or i > after][:size]
        return Page([DueRef(i, SCOPE, f"n{i.int}", "user") for i in rest], [])
    return fetch


@pytest.mark.parametrize(("batch_size", "budget", "sizes", "fetched"), [
    (4, None, [4, 4, 3], [(None, 4), (IDS[3], 4), (IDS[7], 4)]),   # the short page ends it
    (11, None, [11], [(None, 11), (IDS[10], 11)]),                 # a full last page: one empty read
    (4, 6, [4, 2], [(None, 4), (IDS[3], 2)]),                      # the budget bounds the last page
    (4, 8, [4, 4], [(None, 4), (IDS[3], 4)]),                      # and ends the walk when spent
    (4, 0, [], []),
])
def test_pages_follow_the_keyset_within_the_budget(batch_size: int, budget: int | None,
                                                    sizes: list[int], fetched: list[tuple[UUID | None, int]]) -> None:
    calls: list[tuple[UUID | None, int]] = []
    seen = [page.refs for page in pages(fake_fetch(calls), None, batch_size, budget)]
    assert [len(refs) for refs in seen] == sizes
    assert [r.aggregate_id for refs in seen for r in refs] == IDS[:sum(sizes)]
    assert calls == fetched


def test_the_walk_resumes_after_a_cursor() -> None:
    calls: list[tuple[UUID | None, int]] = []
    seen = [r.aggregate_id for page in pages(fake_fetch(calls), IDS[5], 4, None) for r in page.refs]
    assert seen == IDS[6:]


def test_the_next_page_is_read_while_the_caller_handles_this_one() -> None:
    calls: list[tuple[UUID | None, int]] = []
    inner = fake_fetch(calls)
    second_read = threading.Event()

    def fetch(after: UUID | None, size: int) -> Page:
        page = inner(after, size)
        if after is not None:
            second_read.set()
        return page

    walk = pages(fetch, None, 4, None)
    next(walk)
    assert second_read.wait(5), "page 2 was not read while page 1 was being handled"
    assert len(list(walk)) == 2


def test_an_error_of_the_read_reaches_the_caller() -> None:
    def fetch(after: UUID | None, size: int) -> Page:
        if after is not None:
            raise RuntimeError("the index is gone")
        return Page([DueRef(i, SCOPE, "n", "user") for i in IDS[:4]], [])

    walk = pages(fetch, None, 4, None)
    next(walk)
    with pytest.raises(RuntimeError, match="the index is gone"):
        next(walk)


def test_tombstone_versions_are_read_off_the_fetched_events() -> None:
    """``replay_page`` tells a shredded key from a fault by the page's own events: the
    latest version of a tombstone topic per note (a hold has that topic too, as in
    ``forgotten_versions``); other topics never count."""
    from memfabric.adapters.postgres.retention import tombstone_versions  # noqa: PLC0415
    from memfabric.domain.note import Note  # noqa: PLC0415
    from memfabric.domain.shredding import shredding_topics  # noqa: PLC0415
    tomb = next(t for t in shredding_topics() if t.endswith("Note.Forgotten"))
    other = Note.Remembered.__module__ + ":Note.Remembered"
    a, b, c = UUID(int=1), UUID(int=2), UUID(int=3)
    rows = [(a, 1, other, b""), (a, 2, tomb, b""), (a, 3, other, b""), (a, 4, tomb, b""),
            (b, 1, other, b""), (c, 1, other, b""), (c, 2, tomb, b"")]
    assert tombstone_versions(rows) == {a: 4, c: 2}
