"""Group commit on the real fabric (issue 24): 8 threads writing one scope share
transactions, and the outcome is the one-by-one outcome: one live note per fact."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg

from memfabric.adapters import Fabric

FACTS = [f"Project {name} is owned by team {name}-{i}" for i, name in
         enumerate(["kiwi", "plum", "fig", "lime", "pear", "date", "sloe", "yuzu", "quince", "guava"])]


def test_eight_threads_on_one_scope_coalesce_and_keep_one_live_note_per_fact(fabric: Fabric, dsn: str) -> None:
    notes = fabric.scope("acme", "u1", "t1")
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def writer(w: int) -> None:
        barrier.wait()
        try:
            for i in range(30):
                notes.remember(kind="fact", content=FACTS[(w + i) % len(FACTS)])
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    group = fabric.service.group_commit
    assert group is not None and group.coalesced > 0 and group.batches < 240
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT note_id FROM mf_recall_index WHERE tenant_id = 'acme'").fetchall()
    live = [n for n in notes.list(limit=100).items]
    assert len(rows) == len(FACTS) == len(live)
    assert Counter(n.content for n in live) == Counter(FACTS)
