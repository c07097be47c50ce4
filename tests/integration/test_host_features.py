"""Host features on PostgreSQL: the shared behaviours, and keyset paging over 1,000
notes while another thread keeps writing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from memfabric.adapters import Fabric, open_fabric

from tests.host_behaviours import HostBehaviours


class TestHostPostgres(HostBehaviours):
    @pytest.fixture
    def fab(self, dsn: str) -> Iterator[Fabric]:
        with open_fabric(dsn) as fabric:
            yield fabric


def test_pagination_under_concurrent_inserts(fabric: Fabric) -> None:
    n = fabric.scope("acme", "u1", "t1")
    made = n.remember_many([{"kind": "fact", "content": f"pre-existing note {i} token{i}"}
                            for i in range(1000)])
    expected = {m.id for m in made}
    assert len(expected) == 1000
    stop = threading.Event()
    written: list[str] = []
    errors: list[BaseException] = []

    def writer() -> None:
        i = 0
        try:
            while not stop.is_set():
                written.append(n.remember(kind="fact", content=f"concurrent note {i} extra{i}").id)
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    seen: list[str] = []
    cursor: Any = None
    try:
        while True:
            page = n.list(limit=37, cursor=cursor)
            seen += [i.id for i in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
    finally:
        stop.set()
        t.join()
    assert not errors
    assert written, "the writer wrote nothing while paging"
    pre = [s for s in seen if s in expected]
    assert len(pre) == len(set(pre)) == 1000
    assert len(seen) == len(set(seen))
    assert n.count() == 1000 + len(written)
