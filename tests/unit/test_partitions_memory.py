"""Issue 25: ``partitions`` on the in-memory backend is validated like ``open_fabric``'s
and reported; nothing is laid out (there are no tables)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from memfabric.adapters.memory import open_memory_fabric


def test_partitions_are_reported_and_writes_work() -> None:
    fab = open_memory_fabric(partitions=8)
    assert fab.partitions() == 8 and open_memory_fabric().partitions() == 1
    n = fab.scope("acme", "u1").remember(kind="fact", content="the VPN needs a token")
    assert [h.id for h in fab.scope("acme", "u1").recall("VPN token").hits] == [n.id]


@pytest.mark.parametrize("bad", [0, -3, 257, "4", 2.0])
def test_a_bad_partition_count_is_refused(bad: Any) -> None:
    with pytest.raises(ValidationError):
        open_memory_fabric(partitions=bad)
