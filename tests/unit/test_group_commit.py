"""GroupCommit (issue 24): concurrent requests of one key share a batch, results go
back to their callers in order, and one failing request fails alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from memfabric.domain.group_commit import GroupCommit


class Writer:
    """A ``write`` that blocks its first call until ``release`` is set, records every
    batch it was given and fails any batch holding the item ``"bad"``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.first = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, items: Sequence[str]) -> list[str]:
        with self.lock:
            self.batches.append(list(items))
            first = len(self.batches) == 1
        if first:
            self.first.set()
            assert self.release.wait(10)
        if "bad" in items:
            raise ValueError("bad item")
        return [item.upper() for item in items]


def _submit_all(group: GroupCommit[str, str], writer: Writer, requests: list[list[str]],
                ) -> list[list[str] | BaseException]:
    out: list[list[str] | BaseException] = [[] for _ in requests]

    def run(i: int) -> None:
        try:
            out[i] = group.submit("k", requests[i], writer)
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            out[i] = exc

    first = threading.Thread(target=run, args=(0,))
    first.start()
    assert writer.first.wait(10)
    rest = [threading.Thread(target=run, args=(i,)) for i in range(1, len(requests))]
    for t in rest:
        t.start()
    deadline = time.monotonic() + 10
    while sum(len(q) for q in group._queues.values()) < len(requests) - 1:  # noqa: SLF001 - all queued
        assert time.monotonic() < deadline
        time.sleep(0.005)
    writer.release.set()
    for t in [first, *rest]:
        t.join(10)
    return out


def test_requests_queued_behind_a_batch_share_the_next_one() -> None:
    group: GroupCommit[str, str] = GroupCommit()
    writer = Writer()
    requests = [["a"], ["b", "c"], ["d"], ["e"]]
    out = _submit_all(group, writer, requests)
    assert out == [["A"], ["B", "C"], ["D"], ["E"]]
    assert writer.batches[0] == ["a"]
    assert sorted(writer.batches[1]) == ["b", "c", "d", "e"] and len(writer.batches) == 2
    assert group.coalesced == 3


def test_one_failing_request_fails_alone() -> None:
    group: GroupCommit[str, str] = GroupCommit()
    writer = Writer()
    out = _submit_all(group, writer, [["a"], ["b"], ["bad"], ["c"]])
    assert out[0] == ["A"] and out[1] == ["B"] and out[3] == ["C"]
    assert isinstance(out[2], ValueError)


def test_a_batch_never_takes_more_than_max_items() -> None:
    group: GroupCommit[str, str] = GroupCommit(max_items=2)
    writer = Writer()
    out = _submit_all(group, writer, [["a"], ["b"], ["c"], ["d"], ["e"]])
    assert out == [["A"], ["B"], ["C"], ["D"], ["E"]]
    assert all(len(batch) <= 2 for batch in writer.batches)


def test_keys_never_share_a_batch() -> None:
    group: GroupCommit[str, str] = GroupCommit()
    seen: list[list[str]] = []

    def write(items: Sequence[str]) -> list[str]:
        seen.append(list(items))
        return list(items)

    assert group.submit("x", ["1"], write) == ["1"]
    assert group.submit("y", ["2"], write) == ["2"]
    assert seen == [["1"], ["2"]]
    with pytest.raises(ValueError, match="alone"):
        group.submit("x", ["3"], lambda items: (_ for _ in ()).throw(ValueError("alone")))
    assert group.submit("x", ["4"], write) == ["4"]  # the key is free again after a failure
