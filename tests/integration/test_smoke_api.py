"""The public API example of the README, end to end on real PostgreSQL."""

from memfabric.adapters import open_fabric


def test_readme_example(dsn: str) -> None:
    with open_fabric(dsn) as fabric:
        notes = fabric.scope("acme", "user-1", "thread-1")
        n = notes.remember(kind="fact", content="User prefers metric units", tags=["prefs"])
        res = notes.recall("preferred units", budget=400)
        assert res.hits[0].id == n.id
        assert res.explain[0].id == n.id
        assert len(res.hits) == len(res.explain) == 1
