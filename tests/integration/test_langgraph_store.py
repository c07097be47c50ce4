"""MemfabricStore: the InMemoryStore behaviours LangGraph's store tests check, on the
in-memory fabric and PostgreSQL, and a LangMem round trip without network."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from datetime import timezone
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")
from langgraph.store.base import BaseStore  # noqa: E402
from memfabric.adapters.langgraph import MemfabricStore, note_id_for, subject_for  # noqa: E402
from memfabric.adapters.memory import open_memory_fabric  # noqa: E402
from memfabric.domain.errors import (  # noqa: E402
    AccessDenied,
    NamespaceError,
    NoteNotFoundError,
    PrincipalNotFoundError,
    StoreValueError,
)
from tests.conftest import race_processes  # noqa: E402


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[MemfabricStore]:
    if request.param == "memory":
        yield MemfabricStore(open_memory_fabric())
        return
    from memfabric.adapters import open_fabric
    with open_fabric(request.getfixturevalue("dsn")) as fabric:
        yield MemfabricStore(fabric)


def test_put_get_update_delete(store: MemfabricStore) -> None:
    assert isinstance(store, BaseStore)
    ns = ("acme", "user-1")
    store.put(ns, "prefs", {"units": "metric", "lang": "pt"})
    item = store.get(ns, "prefs")
    assert item is not None and item.value == {"units": "metric", "lang": "pt"}
    assert item.key == "prefs" and item.namespace == ns
    store.put(ns, "prefs", {"units": "imperial"})
    again = store.get(ns, "prefs")
    assert again is not None and again.value == {"units": "imperial"}
    assert again.created_at == item.created_at and again.updated_at >= item.updated_at
    notes = store.fabric.scope("acme", "user-1")
    assert notes.count(include_superseded=True) == 2
    store.delete(ns, "prefs")
    assert store.get(ns, "prefs") is None
    assert notes.count(include_superseded=True) == 0
    store.put(ns, "prefs", {"units": "metric"})  # the key is free again
    assert store.get(ns, "prefs").value == {"units": "metric"}  # type: ignore[union-attr]
    assert store.get(("other",), "prefs") is None


def test_search_and_filters(store: MemfabricStore) -> None:
    store.put(("acme", "u1"), "a", {"text": "likes green tea", "color": "green"})
    store.put(("acme", "u1"), "b", {"text": "likes black coffee", "color": "black"})
    store.put(("acme", "u2"), "c", {"text": "likes green apples", "color": "green"})
    listed = store.search(("acme",))
    assert {i.key for i in listed} == {"a", "b", "c"}
    assert {i.key for i in store.search(("acme",), filter={"color": "green"})} == {"a", "c"}
    assert [i.key for i in store.search(("acme", "u1"), limit=1)] == ["a"]
    assert [i.key for i in store.search(("acme", "u1"), limit=1, offset=1)] == ["b"]
    hits = store.search(("acme", "u1"), query="green tea")
    assert hits and hits[0].key == "a" and hits[0].score is not None
    assert [i.key for i in store.search(("acme", "u1"), query="likes", filter={"color": "black"})] == ["b"]
    assert len(store.search((), limit=10)) == 3


def test_list_namespaces(store: MemfabricStore) -> None:
    for ns in [("a", "x", "1"), ("a", "x", "2"), ("a", "y"), ("b", "x")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces() == [("a", "x", "1"), ("a", "x", "2"), ("a", "y"), ("b", "x")]
    assert store.list_namespaces(prefix=("a",)) == [("a", "x", "1"), ("a", "x", "2"), ("a", "y")]
    assert store.list_namespaces(suffix=("x",)) == [("b", "x")]
    assert store.list_namespaces(prefix=("a", "*", "2")) == [("a", "x", "2")]
    assert store.list_namespaces(max_depth=2) == [("a", "x"), ("a", "y"), ("b", "x")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "x", "2"), ("a", "y")]


def test_rejects_bad_namespace_and_ttl(store: MemfabricStore) -> None:
    with pytest.raises(NamespaceError):
        store.put(("a", "b", "c", "d"), "k", {"v": 1})
    with pytest.raises(NamespaceError):
        store.put(("bad label!",), "k", {"v": 1})
    store.put(("t",), "gone", {"v": 1}, ttl=0.002)  # 120 ms
    assert store.get(("t",), "gone") is not None
    time.sleep(0.3)
    assert store.get(("t",), "gone") is None


def test_async_api(store: MemfabricStore) -> None:
    async def main() -> Any:
        await store.aput(("acme",), "k", {"v": 2})
        return await store.aget(("acme",), "k")

    assert asyncio.run(main()).value == {"v": 2}


def test_langmem_round_trip(store: MemfabricStore) -> None:
    langmem = pytest.importorskip("langmem")
    manage = langmem.create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store)
    search = langmem.create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"), store=store)
    config = {"configurable": {"langgraph_user_id": "user-7"}}
    out = manage.invoke({"content": "The user's dog is called Biscuit", "action": "create"}, config=config)
    assert "created" in str(out).lower()
    found = search.invoke({"query": "dog name"}, config=config)
    assert "Biscuit" in str(found)
    assert store.search(("memories", "user-7"))[0].value["content"] == "The user's dog is called Biscuit"


# ------------------------------------------------ issue 26 / issue 28 defects
def _versions(store: MemfabricStore, ns: tuple[str, ...], key: str) -> list[dict[str, Any]]:
    """The value of every version of an item in the log, by generation (0, 1, ...)."""
    notes = store.fabric.scope(*ns)
    out = []
    for gen in range(1000):
        try:
            out.append(json.loads(notes.get(note_id_for(ns, key, gen)).content))
        except NoteNotFoundError:
            return out
    return out


def _threads(n: int, work: Any) -> list[BaseException]:
    barrier, errors = threading.Barrier(n), []

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not any(t.is_alive() for t in threads)
    return errors


def test_16_threads_putting_one_key_last_writer_wins(store: MemfabricStore) -> None:
    """Issue 26 defect 1: no error, one live item, every put one version, and the item
    is the last version committed (it used to raise SupersessionError in 11 of 16)."""
    ns = ("acme",)
    store.put(ns, "k", {"v": -1})
    assert _threads(16, lambda i: store.put(ns, "k", {"v": i})) == []
    notes = store.fabric.scope("acme")
    assert notes.count() == 1 and notes.count(include_superseded=True) == 17
    versions = _versions(store, ns, "k")
    assert len(versions) == 17 and sorted(v["v"] for v in versions[1:]) == list(range(16))
    assert store.get(ns, "k").value == versions[-1]  # type: ignore[union-attr]
    assert [i.value for i in store.search(ns)] == [versions[-1]]


def test_threads_putting_a_new_key_make_one_live_item(store: MemfabricStore) -> None:
    """Issue 26 defect 1: 4 threads putting a new key left 4 live items, and a later
    sequential put + get read a stale one."""
    ns = ("acme", "u1")
    assert _threads(4, lambda i: store.put(ns, "new", {"v": i})) == []
    assert store.fabric.scope(*ns).count() == 1
    store.put(ns, "new", {"v": "after"})
    assert store.get(ns, "new").value == {"v": "after"}  # type: ignore[union-attr]
    assert len(store.search(ns)) == 1


def test_parallel_tool_calls_through_abatch(store: MemfabricStore) -> None:
    """``abatch`` of several puts of one key from concurrent tasks (LangMem's parallel
    tool calls): all succeed, one live item."""
    async def main() -> None:
        await asyncio.gather(*(store.aput(("acme",), "mem", {"n": i}) for i in range(8)))

    asyncio.run(main())
    assert store.fabric.scope("acme").count() == 1
    assert store.get(("acme",), "mem").value == _versions(store, ("acme",), "mem")[-1]  # type: ignore[union-attr]


def _put_from_process(dsn: str, barrier: Any, out: Any) -> None:
    from memfabric.adapters import open_fabric
    with open_fabric(dsn) as fabric:
        store = MemfabricStore(fabric)
        barrier.wait()
        for i in range(5):
            store.put(("acme",), "shared", {"pid": os.getpid(), "i": i})
    out.put("ok")


def test_processes_putting_one_key(dsn: str) -> None:
    """Issue 26 defect 1 across processes: 4 spawned processes x 5 puts of one key."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn):
        pass  # schema created once, before the race
    assert race_processes(_put_from_process, dsn, n=4) == ["ok"] * 4
    with open_fabric(dsn) as fabric:
        store = MemfabricStore(fabric)
        versions = _versions(store, ("acme",), "shared")
        assert len(versions) == 20 and fabric.scope("acme").count() == 1
        assert store.get(("acme",), "shared").value == versions[-1]  # type: ignore[union-attr]


def test_a_pool_of_one_connection_serves_store_writers(dsn: str) -> None:
    """Issue 26 defect 2: the store always passes an id; with ``pool_size=1,
    max_overflow=0`` 4 writer threads used to wait for a second connection."""
    from memfabric.adapters import open_fabric
    with open_fabric(dsn, pool_size=1, max_overflow=0) as fabric:
        store = MemfabricStore(fabric)
        started = time.monotonic()
        errors = _threads(4, lambda t: [store.put(("acme", f"u{t}"), f"k{i % 3}", {"i": i}) for i in range(10)])
        assert errors == [] and time.monotonic() - started < 60
        assert sorted(store.list_namespaces()) == [("acme", f"u{t}") for t in range(4)]
        assert fabric.scope("acme", "u0").count() == 3


def test_query_search_with_an_operator_filter_fills_the_page(store: MemfabricStore) -> None:
    """Issue 26 defect 3: the issue's example returned [] (InMemoryStore: 3 items)."""
    for i in range(20):
        store.put(("acme",), f"k{i}", {"text": f"green tea note {i}", "n": i})
    hits = store.search(("acme",), query="green tea", filter={"n": {"$gte": 15}}, limit=3)
    assert len(hits) == 3 and all(h.value["n"] >= 15 for h in hits)
    assert {h.value["n"] for h in store.search(("acme",), query="green tea", filter={"n": {"$gte": 15}},
                                              limit=10)} == {15, 16, 17, 18, 19}
    assert [h.value["n"] for h in store.search(("acme",), query="green tea", filter={"n": 7})] == [7]
    assert [h.value["n"] for h in store.search(("acme",), filter={"n": {"$lt": 2}})] == [0, 1]
    with pytest.raises(StoreValueError):
        store.search(("acme",), filter={"n": {"$regex": "x"}})


def test_query_search_covers_deeper_namespaces(store: MemfabricStore) -> None:
    """BaseStore: a search finds items of every namespace under the prefix, with or
    without a query (a query search used to see the prefix's own scope only)."""
    store.put(("acme", "u1"), "a", {"text": "likes green tea"})
    store.put(("acme", "u2", "t9"), "b", {"text": "likes green apples"})
    store.put(("other",), "c", {"text": "likes green tea"})
    assert {(i.namespace, i.key) for i in store.search(("acme",), query="green")} == {
        (("acme", "u1"), "a"), (("acme", "u2", "t9"), "b")}
    assert {i.key for i in store.search((), query="green tea")} == {"a", "b", "c"}


def test_index_false_is_not_found_by_a_query(store: MemfabricStore) -> None:
    store.put(("acme",), "hidden", {"text": "secret green tea"}, index=False)
    store.put(("acme",), "shown", {"text": "public green tea"})
    assert [i.key for i in store.search(("acme",), query="green tea")] == ["shown"]
    assert store.get(("acme",), "hidden") is not None
    assert {i.key for i in store.search(("acme",))} == {"hidden", "shown"}


@pytest.mark.parametrize("ttl", [-5, 0, float("inf"), float("-inf"), float("nan"), 1e12, "10"])
def test_bad_ttl_is_a_typed_error_and_writes_nothing(store: MemfabricStore, ttl: Any) -> None:
    """Issue 28 defect 9: ``DataError`` / ``OverflowError`` / ``ValueError`` before."""
    with pytest.raises(StoreValueError, match="ttl"):
        store.put(("acme",), "k", {"v": 1}, ttl=ttl)
    assert store.get(("acme",), "k") is None and store.fabric.scope("acme").count(include_superseded=True) == 0


def test_bad_values_are_typed_errors(store: MemfabricStore) -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(StoreValueError, match="nested"):  # RecursionError before
        store.put(("acme",), "deep", deep)
    with pytest.raises(StoreValueError, match="JSON"):
        store.put(("acme",), "obj", {"when": object()})
    for bad in (float("nan"), float("inf"), -float("inf")):  # not JSON: they were stored as NaN / Infinity
        with pytest.raises(StoreValueError, match="JSON"):
            store.put(("acme",), "num", {"x": [1, bad]})
    assert store.fabric.scope("acme").count(include_superseded=True) == 0
    store.put(("acme",), "ok", {"x": {"y": [1, 2, {"z": None}]}})  # moderate nesting is fine


def test_a_foreign_note_tagged_lg_item_does_not_break_search(store: MemfabricStore) -> None:
    """Issue 28 defect 9: one non-JSON note tagged ``lg:item`` made every search of
    the tenant raise ``TypeError``."""
    store.put(("acme",), "a", {"text": "green tea"})
    store.fabric.scope("acme").remember(kind="fact", content="green tea, not JSON", tags=["lg:item"])
    store.fabric.scope("acme").remember(kind="fact", content='{"text": "green tea"}', tags=["lg:item"],
                                        context="not json either")
    assert [i.key for i in store.search(("acme",))] == ["a"]
    assert [i.key for i in store.search(("acme",), query="green tea")] == ["a"]
    assert store.list_namespaces() == [("acme",)]


def test_namespace_label_with_a_trailing_newline(store: MemfabricStore) -> None:
    """Issue 26 defect 7: ``$`` let ``"u1\\n"`` pass the label check."""
    with pytest.raises(NamespaceError):
        store.put(("acme", "u1\n"), "k", {"v": 1})
    with pytest.raises(NamespaceError):
        store.search(("acme\n",))


def test_list_namespaces_skips_expired_items(store: MemfabricStore) -> None:
    """Issue 26 defect 7: a namespace whose only item expired was still listed."""
    store.put(("acme", "brief"), "k", {"v": 1}, ttl=0.002)
    store.put(("acme", "kept"), "k", {"v": 1})
    time.sleep(0.3)
    assert store.list_namespaces() == [("acme", "kept")]


def test_timestamps_are_utc_everywhere(store: MemfabricStore) -> None:
    """Issue 26 defect 7: one tz object (``timezone.utc``) from get and search."""
    store.put(("acme",), "k", {"text": "green tea"})
    items = [store.get(("acme",), "k"), *store.search(("acme",)), *store.search(("acme",), query="green tea")]
    assert len(items) == 3
    assert {(i.created_at.tzinfo, i.updated_at.tzinfo) for i in items} == {(timezone.utc, timezone.utc)}  # type: ignore[union-attr]


def test_field_values_are_never_stored_as_plain_tags(store: MemfabricStore) -> None:
    """Issue 28 defect 1: a field value used to become a ``FIELD=JSON`` tag in the
    clear; now only keyed hashes, and equality filters still work."""
    store.put(("acme", "user-1"), "m1", {"content": "User's HIV status is positive", "n": 3})
    note = store.fabric.scope("acme", "user-1").get(note_id_for(("acme", "user-1"), "m1"))
    assert "lg:item" in note.tags and len(note.tags) == 3
    assert not any("HIV" in t or "=" in t for t in note.tags)
    assert [i.key for i in store.search(("acme",), filter={"n": 3.0})] == ["m1"]  # 3 == 3.0
    assert store.search(("acme",), filter={"content": "other"}) == []


def test_a_key_left_with_two_live_versions_heals_on_put(store: MemfabricStore) -> None:
    """A store written before issue 26 could hold several live versions of a key: a
    put still succeeds, and get returns what it wrote."""
    ns, key = ("acme",), "legacy"
    notes = store.fabric.scope(*ns)
    for gen in (0, 1):
        notes.remember(kind="fact", content=json.dumps({"v": gen}), id=note_id_for(ns, key, gen),
                       subject=subject_for(ns, key), tags=["lg:item"], consent={"visibility": "thread"},
                       context=json.dumps({"key": key, "created_at": "2026-01-01T00:00:00+00:00", "gen": gen}),
                       consolidate=False)
    assert store.get(ns, key).value == {"v": 1}  # type: ignore[union-attr]  # the newest of the two
    store.put(ns, key, {"v": "new"})
    assert store.get(ns, key).value == {"v": "new"}  # type: ignore[union-attr]
    assert json.loads(notes.get(note_id_for(ns, key, 2)).content) == {"v": "new"}


def _contract_script(store: BaseStore) -> list[Any]:
    """BaseStore's documented behaviours, observed as plain data (no scores, no order
    where the contract leaves it open)."""
    seen: list[Any] = []

    def items(found: list[Any]) -> list[Any]:
        return sorted((tuple(i.namespace), i.key, json.dumps(i.value, sort_keys=True)) for i in found)

    for i in range(6):
        store.put(("docs", "u1"), f"d{i}", {"n": i, "tag": "even" if i % 2 == 0 else "odd",
                                             "meta": {"lang": "en" if i < 3 else "pt"}, "list": [i, i + 1]})
    store.put(("docs", "u2"), "x", {"n": 100, "tag": "even"})
    store.put(("docs", "u2", "t1"), "y", {"n": 7, "flag": True})
    store.put(("other",), "z", {"n": 1})
    seen.append(items([store.get(("docs", "u1"), "d1")]))
    seen.append(store.get(("docs", "u1"), "missing"))
    store.put(("docs", "u1"), "d1", {"n": 11, "tag": "odd"})  # update
    seen.append(items([store.get(("docs", "u1"), "d1")]))
    store.delete(("docs", "u1"), "d2")
    seen.append(store.get(("docs", "u1"), "d2"))
    for prefix, flt in [(("docs",), None), (("docs",), {"tag": "even"}), (("docs",), {"n": {"$gt": 4}}),
                        (("docs", "u1"), {"n": {"$gte": 3, "$lt": 5}}), (("docs",), {"tag": {"$ne": "odd"}}),
                        (("docs", "u1"), {"meta": {"lang": "pt"}}), (("docs", "u1"), {"list": [3, 4]}),
                        (("docs",), {"flag": True}), (("docs",), {"n": 7.0}), ((), None), (("nope",), None)]:
        seen.append(items(store.search(prefix, filter=flt, limit=50)))
    pages = [store.search(("docs",), limit=3, offset=o) for o in (0, 3, 6)]
    seen.append([len(p) for p in pages])
    seen.append(items([i for p in pages for i in p]) == items(store.search(("docs",), limit=50)))
    for kwargs in [{}, {"prefix": ("docs",)}, {"suffix": ("t1",)}, {"max_depth": 1}, {"max_depth": 2},
                   {"prefix": ("docs", "*")}, {"limit": 2, "offset": 1}]:
        seen.append(store.list_namespaces(**kwargs))  # type: ignore[arg-type]
    store.put(("docs", "u1"), "d2", {"n": 2, "again": True})  # a deleted key can be put again
    seen.append(items([store.get(("docs", "u1"), "d2")]))
    return seen


def test_behaves_like_langgraphs_in_memory_store(store: MemfabricStore) -> None:
    """A differential run against LangGraph's own ``InMemoryStore`` (the reference of
    the ``BaseStore`` docs): the same calls observe the same data."""
    from langgraph.store.memory import InMemoryStore

    reference = _contract_script(InMemoryStore())
    ours = _contract_script(store)
    assert ours == reference
    assert reference[8] and reference[-1]  # the script observes something


def test_puts_racing_deletes_of_one_key(store: MemfabricStore) -> None:
    """Puts and deletes of one key from 8 threads: no error, never two live items, and
    a final put is what get returns."""
    ns = ("acme",)

    def work(i: int) -> None:
        for n in range(4):
            if (i + n) % 3 == 0:
                store.delete(ns, "k")
            else:
                store.put(ns, "k", {"t": i, "n": n})

    assert _threads(8, work) == []
    assert store.fabric.scope("acme").count() <= 1
    store.put(ns, "k", {"final": True})
    assert store.get(ns, "k").value == {"final": True}  # type: ignore[union-attr]
    assert store.fabric.scope("acme").count() == 1


# ------------------------------------------------ issue 33: a principal's store
WRITER = {"read_kinds": ["fact"], "write_kinds": ["fact"], "writes": "commit", "recall_scope": ["acme/u1/*"]}
READER = {"read_kinds": ["fact"], "recall_scope": ["acme/u1/*"]}


def _log(fabric: Any, principal: str) -> list[tuple[str, str, int, str | None]]:
    """``(operation, outcome, ids served, rule)`` of each access record of ``principal``."""
    return [(r.operation, r.outcome, r.served, r.rule) for r in fabric.access_log(principal=principal)]


def _two_users(store: MemfabricStore) -> None:
    store.put(("acme", "u1"), "a", {"text": "likes green tea"})
    store.put(("acme", "u2"), "b", {"text": "likes green apples"})


def test_a_principal_store_serves_what_its_profile_allows(store: MemfabricStore) -> None:
    """Every op is checked and logged once; reads carry the profile in their query: a
    search of the whole tenant, by listing or by query, and ``list_namespaces`` see only
    ``acme/u1``'s items (``acme/u2``'s are in the same prefix)."""
    fabric = store.fabric
    _two_users(store)
    assert fabric.access_log() == []  # a store without principal logs nothing
    with pytest.raises(PrincipalNotFoundError):
        MemfabricStore(fabric, principal="agent-a")
    fabric.principals.define("agent-a", WRITER)
    agent = MemfabricStore(fabric, principal="agent-a")
    assert agent.get(("acme", "u1"), "a").value == {"text": "likes green tea"}  # type: ignore[union-attr]
    assert agent.get(("acme", "u1"), "missing") is None
    assert [i.key for i in agent.search(("acme",))] == ["a"]
    assert [i.key for i in agent.search(("acme",), query="likes green")] == ["a"]
    assert [i.key for i in agent.search(())] == ["a"]
    assert agent.list_namespaces() == [("acme", "u1")]
    agent.put(("acme", "u1", "t1"), "c", {"text": "prefers tea at noon"})
    assert store.get(("acme", "u1", "t1"), "c").value == {"text": "prefers tea at noon"}  # type: ignore[union-attr]
    agent.delete(("acme", "u1", "t1"), "c")
    assert store.get(("acme", "u1", "t1"), "c") is None
    assert _log(fabric, "agent-a") == [
        ("langgraph.get", "served", 1, None), ("langgraph.get", "served", 0, None),
        ("langgraph.search", "served", 1, None), ("langgraph.search", "served", 1, None),
        ("langgraph.search", "served", 1, None), ("langgraph.list_namespaces", "served", 0, None),
        ("langgraph.put", "served", 1, None), ("langgraph.delete", "served", 1, None)]
    [record] = fabric.access_log(principal="agent-a", with_ids=True)[:1]
    assert record.ids == (note_id_for(("acme", "u1"), "a"),) and (record.tenant_id, record.resource_id) == ("acme", "u1")


def test_a_principal_store_refuses_outside_its_profile(store: MemfabricStore) -> None:
    """A read of a namespace outside ``recall_scope``, of a kind the profile does not
    read, a write of a read-only principal or outside ``recall_scope``: ``AccessDenied``
    naming the rule, nothing written (a batch with a refused write runs none of its
    ops), one denied record each."""
    from langgraph.store.base import GetOp, PutOp
    from tests.integration.test_access import events

    fabric = store.fabric
    _two_users(store)
    fabric.principals.define("reader", READER)
    fabric.principals.define("writer", WRITER)
    fabric.principals.define("procedures", {**READER, "read_kinds": ["procedure"]})
    reader, writer = MemfabricStore(fabric, principal="reader"), MemfabricStore(fabric, principal="writer")
    wrong_kind = MemfabricStore(fabric, principal="procedures")
    n = events(fabric)
    refused: list[tuple[Any, str]] = [
        (lambda: reader.get(("acme", "u2"), "b"), "recall_scope"),
        (lambda: reader.search(("acme", "u2")), "recall_scope"),
        (lambda: reader.search(("acme", "u2"), query="green apples"), "recall_scope"),
        (lambda: reader.put(("acme", "u1"), "x", {"v": 1}), "writes"),
        (lambda: reader.delete(("acme", "u1"), "a"), "writes"),
        (lambda: writer.put(("acme", "u2"), "x", {"v": 1}), "recall_scope"),
        (lambda: writer.delete(("acme", "u2"), "b"), "recall_scope"),
        (lambda: wrong_kind.get(("acme", "u1"), "a"), "read_kinds"),
        (lambda: wrong_kind.search(("acme",)), "read_kinds"),
        (lambda: wrong_kind.list_namespaces(), "read_kinds"),
        (lambda: writer.batch([GetOp(("acme", "u1"), "a"), PutOp(("acme", "u2"), "x", {"v": 1})]), "recall_scope"),
    ]
    for call, rule in refused:
        with pytest.raises(AccessDenied) as caught:
            call()
        assert caught.value.rule == rule
    assert events(fabric) == n
    assert store.get(("acme", "u2"), "x") is None and store.get(("acme", "u1"), "a") is not None
    logged = _log(fabric, "reader") + _log(fabric, "writer") + _log(fabric, "procedures")
    assert sorted(logged) == sorted((op, "denied", 0, rule) for op, rule in [
        ("langgraph.get", "recall_scope"), ("langgraph.search", "recall_scope"),
        ("langgraph.search", "recall_scope"), ("langgraph.put", "writes"), ("langgraph.delete", "writes"),
        ("langgraph.put", "recall_scope"), ("langgraph.delete", "recall_scope"), ("langgraph.get", "read_kinds"),
        ("langgraph.search", "read_kinds"), ("langgraph.list_namespaces", "read_kinds"),
        ("langgraph.put", "recall_scope")])


def test_a_grant_lets_a_principal_store_read_an_item_outside_its_scope(store: MemfabricStore) -> None:
    """``notes.grant`` of an item's note: the principal gets it, finds it by listing and
    by query, lists its namespace; revoked, the read is refused again."""
    fabric = store.fabric
    _two_users(store)
    fabric.principals.define("reader", READER)
    reader = MemfabricStore(fabric, principal="reader")
    with pytest.raises(AccessDenied):
        reader.get(("acme", "u2"), "b")
    owner = fabric.scope("acme", "u2")
    owner.grant(note_id_for(("acme", "u2"), "b"), "reader", "read")
    assert reader.get(("acme", "u2"), "b").value == {"text": "likes green apples"}  # type: ignore[union-attr]
    assert [i.key for i in reader.search(("acme", "u2"))] == ["b"]
    assert [i.key for i in reader.search(("acme", "u2"), query="green apples")] == ["b"]
    assert sorted(i.key for i in reader.search(("acme",))) == ["a", "b"]
    assert reader.list_namespaces() == [("acme", "u1"), ("acme", "u2")]
    owner.revoke(note_id_for(("acme", "u2"), "b"), "reader", "read")
    with pytest.raises(AccessDenied):
        reader.get(("acme", "u2"), "b")
    assert reader.list_namespaces() == [("acme", "u1")]
    assert [(op, outcome, n) for op, outcome, n, _ in _log(fabric, "reader")] == [
        ("langgraph.get", "denied", 0), ("langgraph.get", "served", 1), ("langgraph.search", "served", 1),
        ("langgraph.search", "served", 1), ("langgraph.search", "served", 2),
        ("langgraph.list_namespaces", "served", 0), ("langgraph.get", "denied", 0),
        ("langgraph.list_namespaces", "served", 0)]
