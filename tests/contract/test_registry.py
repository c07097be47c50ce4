"""Issue 34: one projection registry (``memfabric.projections.registry``).

Adding a projection is one class plus one registry line: the fixture below registers a
tiny extra projection (``note_kinds``: one row per live note, its kind) exactly as a
new projection would be, and both backends, rebuild (in place and blue-green) and
verify pick it up without any other change. Also: the table list derives from the
registry, and ``projections/`` imports nothing from ``adapters/``.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import Cursor, sql

from memfabric.adapters import open_fabric, open_memory_fabric
from memfabric.domain.note import Note
from memfabric.projections import base, registry, tables
from memfabric.projections.rebuild import ProjectionAdmin
from memfabric.projections.registry import MemoryTable, Registration

NAME = "note_kinds"
TABLE = "mf_note_kinds"
COLUMNS = ("aggregate_id", "tenant_id", "note_id", "kind")


def row_for(note: Note) -> tuple[Any, ...] | None:
    """A live note's row; none for a forgotten or held one."""
    return (note.id, note.tenant_id, note.note_id, note.kind) if note.live else None


class NoteKindsProjection:
    """The whole extra projection: its table, its rows, inline writes and bulk copy."""

    name = NAME
    tables = (TABLE,)
    write_side = False

    def create(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        cur.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id uuid, tenant_id text NOT NULL, note_id text NOT NULL,"
            " kind text NOT NULL, CONSTRAINT {k} PRIMARY KEY (aggregate_id))").format(
            t=sql.Identifier(TABLE + table_suffix), k=sql.Identifier(base.primary_key_name(TABLE + table_suffix))))

    def create_indexes(self, cur: Cursor[Any], *, table_suffix: str = "") -> None:
        """No secondary index."""

    def apply(self, cur: Cursor[Any], notes: Iterable[Note]) -> None:
        upserts, deletes = base.split_rows(notes, row_for)
        base.write_rows(cur, TABLE, COLUMNS, upserts, deletes)

    def copy(self, cur: Cursor[Any], notes: Iterable[Note], *, table_suffix: str = "") -> int:
        rows = [r for r in map(row_for, notes) if r is not None]
        return base.copy_rows(cur, TABLE + table_suffix, COLUMNS, ["uuid", "text", "text", "text"], rows)


@pytest.fixture
def extra_projection() -> Iterator[None]:
    """The one registry line of the extra projection (removed after the test)."""
    line = Registration(NAME, lambda s: NoteKindsProjection(), memory=(MemoryTable(TABLE, COLUMNS, row_for),))
    registry.REGISTRY.append(line)
    try:
        yield
    finally:
        registry.REGISTRY.remove(line)


def _write(fab: Any) -> None:
    notes = fab.scope("acme", "u1", "t1")
    notes.remember(kind="fact", content="The user prefers metric units", id="a" * 12)
    notes.remember(kind="procedure", content="Deploy with the blue-green script", id="b" * 12)
    notes.forget(id="a" * 12)


def test_the_memory_backend_keeps_a_registered_projection(extra_projection: None) -> None:
    with open_memory_fabric() as fab:
        _write(fab)
        rows = fab.log.tables[TABLE]
        assert [(r["note_id"], r["kind"]) for r in rows.values()] == [("b" * 12, "procedure")]
        assert NAME in fab.catch_up()


def test_postgres_rebuild_and_verify_pick_up_a_registered_projection(extra_projection: None, dsn: str) -> None:
    with open_fabric(dsn) as fab:
        _write(fab)
        live = _rows(dsn)
        assert live == [("b" * 12, "procedure")]  # projected inline with the write
        admin = ProjectionAdmin.for_fabric(fab)
        assert NAME in admin.names and NAME in fab.catch_up()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {TABLE}")  # noqa: S608 - a fixed test table
        report = admin.rebuild([NAME])
        assert report.rows == {NAME: 1} and _rows(dsn) == live
        assert admin.rebuild([NAME], blue_green=True).rows == {NAME: 1} and _rows(dsn) == live
        checked = {r.table: r for r in admin.verify()}
        assert checked[TABLE].ok and checked[TABLE].live_rows == 1
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLE} SET kind = 'fact'")  # noqa: S608 - a fixed test table
        assert not {r.table: r for r in admin.verify([NAME])}[TABLE].ok


def _rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT note_id, kind FROM {TABLE} ORDER BY note_id").fetchall()  # noqa: S608


def test_registry_order_and_vector_projections() -> None:
    class Dim:
        id, dim = "hash-v1-8", 8

    names = [p.name for p in registry.default_projections(Dim())]
    assert names == [r.name for r in registry.REGISTRY] and len(set(names)) == len(names)
    assert [p.name for p in registry.vector_projections(Dim())] == ["recall_index", "consolidation", "note_versions"]
    with pytest.raises(Exception, match="no projection 'nope'"):
        registry.registration("nope")


def test_the_table_list_derives_from_the_registry() -> None:
    owned = registry.projection_tables()
    for table in ("mf_ledger_threads", "mf_ledger_entries", "mf_ledger_observations", "mf_recall_index",
                  "mf_note_versions", "mf_link_versions", "mf_ledger_tracking"):
        assert table in owned


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _imports(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_projections_import_nothing_from_adapters() -> None:
    bad = {p.name: sorted(m for m in _imports(p) if m.startswith("memfabric.adapters"))
           for p in (ROOT / "projections").glob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize(("a", "b"), [("bootstrap", "reembed"), ("memory", "memory.versions"),
                                      ("memory.log", "memory.versions"), ("memory.store", "memory.versions")])
def test_no_import_cycle(a: str, b: str) -> None:
    def path(module: str) -> pathlib.Path:
        base = ROOT / "adapters" / module.replace(".", "/")
        return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")

    imports_a, imports_b = _imports(path(a)), _imports(path(b))
    assert not (f"memfabric.adapters.{b}" in imports_a and f"memfabric.adapters.{a}" in imports_b)
