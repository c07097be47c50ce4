"""The README's tour of the Python API, run as it stands (issue 34 item 8).

The ```python block under "## A tour of the Python API" is read from README.md and
executed: on real PostgreSQL (``open_fabric()`` with no argument opens
``$MEMFABRIC_DSN``, set to this test's fresh database), and its synchronous part on the
in-memory backend (``open_fabric`` swapped for ``open_memory_fabric``). The block's own
``assert`` lines are the checks, so a README that drifts from the code fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memfabric.adapters as api

README = Path(__file__).resolve().parents[2] / "README.md"


def tour() -> str:
    """The first ```python block of the README's tour section."""
    section = README.read_text(encoding="utf-8").split("## A tour of the Python API", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_the_tour_checks_something() -> None:
    code = tour()
    assert code.count("assert ") >= 10
    for call in ("remember(", "recall(", "as_of=", "lineage(", "forget(", "history(", "tools(",
                 "attach(", "open_fabric_async("):
        assert call in code, call


def test_the_tour_runs_on_postgres(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFABRIC_DSN", dsn)
    monkeypatch.delenv("MEMFABRIC_READ_ONLY", raising=False)
    ns: dict[str, object] = {"__name__": "readme_tour"}
    exec(compile(tour(), str(README), "exec"), ns)  # noqa: S102
    assert isinstance(ns["fabric"], api.Fabric)


def test_the_tour_runs_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    sync_part = tour().split("\nasync def main", 1)[0]
    assert "open_memory_fabric" not in sync_part
    monkeypatch.setattr(api, "open_fabric", api.open_memory_fabric)
    ns: dict[str, object] = {"__name__": "readme_tour"}
    exec(compile(sync_part, str(README), "exec"), ns)  # noqa: S102
    assert isinstance(ns["fabric"], api.MemoryFabric)
