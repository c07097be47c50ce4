"""MemfabricStore: the InMemoryStore behaviours LangGraph's store tests check, on the
in-memory fabric and PostgreSQL, and a LangMem round trip without network."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")
from langgraph.store.base import BaseStore  # noqa: E402
from memfabric.adapters.langgraph import MemfabricStore  # noqa: E402
from memfabric.adapters.memory import open_memory_fabric  # noqa: E402
from memfabric.domain.errors import NamespaceError  # noqa: E402


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
    store.put(("t",), "gone", {"v": 1}, ttl=-1.0)  # already expired
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
