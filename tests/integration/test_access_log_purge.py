"""Issue 33: access records have a retention class (``operational`` by default), and the
retention sweep deletes those whose class window has closed — per tenant with a
tenant's own windows, counted in ``SweepResult.access_records``; a dry run deletes
nothing. Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memfabric.adapters import open_fabric, open_memory_fabric

PROFILE = {"read_kinds": ["fact"], "recall_scope": ["*"]}
RETENTION = {"operational": "30d", "tenants": {"globex": {"operational": "365d"}}}


@pytest.fixture(params=["memory", "postgres"])
def fab(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        with open_memory_fabric(retention=RETENTION) as f:
            yield f
    else:
        with open_fabric(request.getfixturevalue("dsn"), retention=RETENTION) as f:
            yield f


def _served(fab: Any, tenant: str, n: int) -> None:
    notes = fab.scope(tenant, "u1", "t1")
    notes.remember(kind="fact", content=f"{tenant} prefers metric units")
    bot = notes.as_principal("bot")
    for _ in range(n):
        bot.recall("metric units")


def test_the_sweep_purges_access_records_past_their_class_window(fab: Any) -> None:
    fab.principals.define("bot", PROFILE)
    _served(fab, "acme", 3)
    _served(fab, "globex", 2)
    assert len(fab.access_log(principal="bot")) == 5
    now = datetime.now(timezone.utc)

    soon = fab.sweep(now + timedelta(days=1))  # inside every window: nothing goes
    assert soon.access_records == 0 and len(fab.access_log(principal="bot")) == 5

    dry = fab.sweep(now + timedelta(days=40), dry_run=True)  # acme's 30 days passed
    assert dry.access_records == 3 and len(fab.access_log(principal="bot")) == 5

    done = fab.sweep(now + timedelta(days=40))
    assert done.access_records == 3
    left = fab.access_log(principal="bot")
    assert {r.tenant_id for r in left} == {"globex"} and len(left) == 2  # its own 365 days

    assert fab.sweep(now + timedelta(days=400), tenant="globex").access_records == 2
    assert fab.access_log(principal="bot") == []


def test_a_tenant_sweep_purges_only_that_tenant(fab: Any) -> None:
    fab.principals.define("bot", PROFILE)
    _served(fab, "acme", 2)
    _served(fab, "initech", 1)
    later = datetime.now(timezone.utc) + timedelta(days=40)
    assert fab.sweep(later, tenant="initech").access_records == 1
    assert {r.tenant_id for r in fab.access_log(principal="bot")} == {"acme"}
