"""Issue 19: the database records its embedder; later opens use it, a different one is refused."""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

from memfabric.adapters import open_fabric
from memfabric.adapters.cli import app as cli
from memfabric.adapters.bootstrap import recorded_embedder
from memfabric.adapters.embedders import HashEmbedder, embedder_from_name
from memfabric.domain.errors import FabricError
from memfabric.projections import tables

runner = CliRunner()


def _build_256(dsn: str) -> str:
    with open_fabric(dsn, embedder=HashEmbedder(256)) as fab:
        return fab.scope("acme", "user-1").remember(kind="fact", content="User prefers metric units").id


def test_first_open_records_the_embedder(dsn: str) -> None:
    _build_256(dsn)
    assert recorded_embedder(dsn) == {"id": "hash-v1-256", "dim": 256, "params": {"vector_weight": 0.2}}
    with psycopg.connect(dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {tables.FABRIC_EMBEDDER}").fetchone() == (1,)  # noqa: S608


def test_open_without_embedder_uses_the_recorded_one(dsn: str) -> None:
    note_id = _build_256(dsn)
    with open_fabric(dsn) as fab:
        assert fab.service.embedder.id == "hash-v1-256"
        res = fab.scope("acme", "user-1").recall("metric units", mode="vector")
        assert [h.id for h in res.hits] == [note_id]


def test_cli_recall_without_embedder_works_on_a_256_dim_database(dsn: str) -> None:
    note_id = _build_256(dsn)
    res = runner.invoke(cli.app, ["recall", "metric units", "-t", "acme", "-r", "user-1", "--json", "--dsn", dsn])
    assert res.exit_code == 0, res.stderr
    assert note_id in res.stdout


def test_an_explicit_different_embedder_fails_with_one_line_naming_both(dsn: str) -> None:
    _build_256(dsn)
    res = runner.invoke(cli.app, ["recall", "metric", "-t", "acme", "--embedder", "hash", "--dsn", dsn])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "hash-v1-384" in lines[0] and "hash-v1-256" in lines[0], lines
    with pytest.raises(FabricError, match="hash-v1-384.*hash-v1-256"):
        open_fabric(dsn, embedder=HashEmbedder(384))
    res = runner.invoke(cli.app, ["remember", "x", "-t", "acme", "--embedder", "hash:384", "--json", "--dsn", dsn])
    assert res.exit_code == 2 and '"type": "FabricError"' in res.stderr


def test_the_same_embedder_opens_and_an_unknown_custom_one_is_named(dsn: str) -> None:
    _build_256(dsn)
    with open_fabric(dsn, embedder=HashEmbedder(256)) as fab:
        assert fab.service.embedder.dim == 256
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {tables.FABRIC_EMBEDDER} SET embedder_id = 'custom-256'")  # noqa: S608
    with pytest.raises(FabricError, match="custom-256"):
        open_fabric(dsn)


def test_embedder_from_name_accepts_recorded_ids() -> None:
    assert embedder_from_name("hash-v1-256").dim == 256
    assert embedder_from_name("hash:64").id == "hash-v1-64"
    with pytest.raises(ValueError, match="unknown"):
        embedder_from_name("nosuch")


def test_unknown_embedder_name_on_the_cli_is_one_line(dsn: str) -> None:
    res = runner.invoke(cli.app, ["remember", "x", "-t", "acme", "--embedder", "nosuch", "--dsn", dsn])
    assert res.exit_code == 2 and res.stderr.strip().startswith("error: embedder:")
