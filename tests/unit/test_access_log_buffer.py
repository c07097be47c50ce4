"""Issue 33: the access log's bounded buffer (no database)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from memfabric.adapters.access_log import BufferedAccessLog, MemoryAccessSink, Sealer
from memfabric.domain.access import AccessRecord


def rec(i: int) -> AccessRecord:
    return AccessRecord(at=datetime.now(timezone.utc), principal=f"p{i}", operation="recall",
                        outcome="served", tenant_id="acme", resource_id="", thread_id="", ids=(f"{i:012x}",),
                        served=1)


class Stuck:
    """A sink whose writes wait for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.rows: list[AccessRecord] = []

    def write(self, records: Sequence[AccessRecord]) -> None:
        self.entered.set()
        self.release.wait(10)
        self.rows.extend(records)

    def query(self, **kw: Any) -> list[AccessRecord]:
        return list(self.rows)


def test_a_full_buffer_drops_and_counts_instead_of_blocking_forever() -> None:
    sink = Stuck()
    log = BufferedAccessLog(sink, capacity=2, interval=0.001, block_timeout=0.05)  # type: ignore[arg-type]
    log.record(rec(0))
    assert sink.entered.wait(5)  # the writer holds record 0 in a write that does not return
    for i in range(1, 7):
        log.record(rec(i))
    assert log.dropped == 4  # two buffered, four dropped after waiting block_timeout each
    sink.release.set()
    log.flush()
    assert len(sink.rows) == 3
    log.close()


def test_records_are_written_in_the_background_and_sealed() -> None:
    sink = MemoryAccessSink(Sealer(lambda: b"k" * 32))
    log = BufferedAccessLog(sink)
    for i in range(1200):
        log.record(rec(i))
    got = log.query(principal=None, since=None, until=None, outcome=None, limit=10_000, with_ids=True)
    assert len(got) == 1200 and got[5].ids == ("000000000005",)
    assert all(r.ids == () for r, _ in sink.rows)  # at rest: only the sealed bytes
    log.close()


def test_a_failing_sink_never_breaks_the_caller() -> None:
    class Broken(Stuck):
        def write(self, records: Sequence[AccessRecord]) -> None:
            raise OSError("disk full")

    log = BufferedAccessLog(Broken())  # type: ignore[arg-type]
    log.record(rec(1))
    log.flush()
    assert log.failed == 1
    log.close()


class Batches:
    """A sink that keeps the size of each batch it is handed; its first write waits for
    ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.sizes: list[int] = []

    def write(self, records: Sequence[AccessRecord]) -> None:
        if not self.sizes:
            self.entered.set()
            self.release.wait(10)
        self.sizes.append(len(records))

    def query(self, **kw: Any) -> list[AccessRecord]:
        return []


def test_a_flush_writes_what_is_queued_in_full_batches() -> None:
    # issue 33: a flush used to stop the writer from gathering, so a buffer of n records
    # went out in n one-record writes (0.7 ms of client CPU each against PostgreSQL) and a
    # flush of a few thousand outlived its 5 s timeout
    sink = Batches()
    log = BufferedAccessLog(sink, capacity=5000, interval=0.001)  # type: ignore[arg-type]
    log.record(rec(0))
    assert sink.entered.wait(5)  # the writer holds record 0
    for i in range(1, 1201):
        log.record(rec(i))
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    while not log._flushing.is_set():  # noqa: SLF001 - the flush is waiting
        time.sleep(0.001)
    sink.release.set()
    flusher.join(10)
    assert sum(sink.sizes) == 1201
    assert sink.sizes[1:] == [500, 500, 200]
    log.close()
