"""Issue 30: the conversation ledgers follow a retention class (``retention={"ledger":
...}``, default ``operational``): the sweep erases a conversation whose window since
its last write closed — on both backends, on a fake clock (entries carry their time)."""

from __future__ import annotations

from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.adapters import open_fabric
from tests.integration.test_retention import Open, at, make  # noqa: F401 - make: the fixture

WINDOWS = {"operational": "10d", "durable": None}


def _talk(fabric: object, tenant: str, thread: str, days: float) -> object:
    ledger = fabric.scope(tenant, "u1", thread).conversation()  # type: ignore[attr-defined]
    ledger.append("user", f"my bike is blue ({thread})", timestamp=at(days))
    ledger.append("assistant", "noted", timestamp=at(days))
    return ledger


def test_a_conversation_is_erased_when_its_window_since_the_last_entry_closes(make: Open) -> None:
    fabric = make(retention=WINDOWS)
    old = _talk(fabric, "acme", "t-old", 0)
    recent = _talk(fabric, "acme", "t-new", 8)
    assert fabric.sweep(at(9)).conversations == 0
    r = fabric.sweep(at(11))
    assert r.conversations == 1 and r.complete and r.changed == 0
    assert not old.entries().entries  # type: ignore[attr-defined]
    assert old.search("bike").hits == ()  # type: ignore[attr-defined]
    assert old.state().erasures == 1  # type: ignore[attr-defined]
    assert len(recent.entries().entries) == 2  # type: ignore[attr-defined]
    again = fabric.sweep(at(11))
    assert again.conversations == 1 and again.batches == r.batches  # recorded: nothing new
    assert fabric.sweep(at(19)).conversations == 1  # the recent one, 10 days after its last entry
    old.append("user", "back again", timestamp=at(20))  # type: ignore[attr-defined]
    assert len(old.entries().entries) == 1  # type: ignore[attr-defined]


def test_an_entry_appended_later_keeps_the_conversation(make: Open) -> None:
    fabric = make(retention=WINDOWS)
    ledger = _talk(fabric, "acme", "t1", 0)
    ledger.append("user", "one more thing", timestamp=at(6))  # type: ignore[attr-defined]
    assert fabric.sweep(at(11)).conversations == 0
    assert fabric.sweep(at(17)).conversations == 1


def test_durable_ledgers_tenant_overrides_and_dry_runs(make: Open) -> None:
    fabric = make(retention={**WINDOWS, "tenants": {"beta": {"ledger": "durable"}}})
    a = _talk(fabric, "acme", "t1", 0)
    b = _talk(fabric, "beta", "t1", 0)
    dry = fabric.sweep(at(30), dry_run=True)
    assert dry.conversations == 1 and len(a.entries().entries) == 2  # type: ignore[attr-defined]
    assert fabric.sweep(at(30)).conversations == 1
    assert not a.entries().entries  # type: ignore[attr-defined]
    assert len(b.entries().entries) == 2  # type: ignore[attr-defined]


def test_projections_rebuild_identical_after_a_ledger_sweep(dsn: str) -> None:
    with open_fabric(dsn, retention=WINDOWS) as fabric:
        for i in range(3):
            _talk(fabric, "acme", f"t{i}", 0)
        _talk(fabric, "acme", "t9", 8)
        assert fabric.sweep(at(11), batch_size=2).conversations == 3
        admin = ProjectionAdmin.for_fabric(fabric)
        assert all(r.ok for r in admin.verify())
        admin.rebuild()
        assert all(r.ok for r in admin.verify())
