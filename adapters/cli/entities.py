"""``memfabric entities list | get | resolve | merge | undo-merge`` (issue 32).

Each command takes the scope (``--tenant``, ``--resource``, ``--thread``: what the
entities are seen from), ``--dsn`` / ``--data-dir`` and ``--json``. Errors are one
``error:`` line (exit 2), as for every command.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from memfabric.adapters.cli.fabric import plural

entities_app = typer.Typer(help="Entities of a scope: list, get, resolve, merge, undo-merge.",
                           no_args_is_help=True)
console = Console()

TenantOpt = Annotated[str, typer.Option("--tenant", "-t", metavar="ID", help="Tenant id.")]
ResourceOpt = Annotated[str | None, typer.Option("--resource", "-r", metavar="ID", help="Resource id.")]
ThreadOpt = Annotated[str | None, typer.Option("--thread", metavar="ID", help="Thread id.")]
DsnOpt = Annotated[str | None, typer.Option("--dsn", metavar="URL", help="PostgreSQL URL (default $MEMFABRIC_DSN).")]
DataDirOpt = Annotated[str | None, typer.Option("--data-dir", metavar="DIR", help="Embedded server's data directory.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
EntityArg = Annotated[str, typer.Argument(metavar="ENTITY", help="Entity id (12 hex digits).")]


def register(app: typer.Typer) -> None:
    """Attach ``memfabric entities ...`` to the app."""
    app.add_typer(entities_app, name="entities", cls=app.info.cls)


def _run(dsn: str | None, data_dir: str | None, tenant: str, resource: str | None, thread: str | None,
         *, read: bool, as_json: bool, call: Any) -> Any:
    """``call(notes.entities)`` on a fabric opened for the command; errors are one line.
    An empty answer for a tenant with no note and no entity in the log is the unknown
    ``--tenant`` error (exit 2), as for ``recall`` and ``sweep`` (docs/api.md)."""
    from memfabric.adapters.cli.common import HANDLED, fail  # noqa: PLC0415
    from memfabric.adapters.cli.fabric import notes_fabric, require_tenant  # noqa: PLC0415

    try:
        with notes_fabric(dsn, data_dir, read=read) as fabric:
            found = call(fabric.scope(tenant, resource, thread).entities)
            if not found and not _tenant_has_entities(fabric, tenant):
                require_tenant(fabric, tenant)
            return found
    except HANDLED as exc:
        fail(exc, as_json=as_json)


def _tenant_has_entities(fabric: Any, tenant: str) -> bool:
    """Whether any entity of ``tenant``, in any scope, is in the entities projection."""
    import psycopg  # noqa: PLC0415

    from memfabric.projections.entities import ENTITIES  # noqa: PLC0415

    with psycopg.connect(fabric.dsn) as conn:
        have = conn.execute("SELECT to_regclass(%s)", (ENTITIES,)).fetchone()
        if not have or have[0] is None:
            return False
        row = conn.execute(f"SELECT 1 FROM {ENTITIES} WHERE tenant_id = %s LIMIT 1",  # noqa: S608
                           (tenant,)).fetchone()
    return row is not None


def _print(value: Any) -> None:
    from memfabric.adapters.serialize import jsonable  # noqa: PLC0415

    print(json.dumps(jsonable(value)))


def _table(rows: list[Any], title: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("id", "type", "name", "aliases", "identifiers", "merged into"):
        table.add_column(col)
    for v in rows:
        table.add_row(v.id, v.type, v.display_name or "-", ", ".join(v.aliases) or "-",
                      ", ".join(f"{k}:{val}" for k, val in v.identifiers) or "-", v.merged_into or "-")
    return table


@entities_app.command("list")
def list_command(tenant: TenantOpt, resource: ResourceOpt = None, thread: ThreadOpt = None,
                 after: Annotated[str | None, typer.Option("--after", metavar="ID", help="Page after this id.")] = None,
                 limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many.")] = 100,
                 dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """The live entities seen from the scope, by id."""
    rows = _run(dsn, data_dir, tenant, resource, thread, read=True, as_json=as_json,
                call=lambda e: e.list(after=after, limit=limit))
    if as_json:
        _print([asdict(v) for v in rows])
        return
    console.print(_table(rows, f"{len(rows)} entities"))


@entities_app.command("get")
def get_command(entity: EntityArg, tenant: TenantOpt, resource: ResourceOpt = None, thread: ThreadOpt = None,
                dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """One entity: names, identifiers, what it was merged into."""
    v = _run(dsn, data_dir, tenant, resource, thread, read=True, as_json=as_json, call=lambda e: e.get(entity))
    if as_json:
        _print(asdict(v))
        return
    console.print(_table([v], f"entity {v.id}"))


@entities_app.command("resolve")
def resolve_command(surface: Annotated[str, typer.Argument(metavar="SURFACE", help="A name or identifier.")],
                    tenant: TenantOpt, resource: ResourceOpt = None, thread: ThreadOpt = None,
                    dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Ranked candidates a name or identifier may be, with the tier that matched."""
    found = _run(dsn, data_dir, tenant, resource, thread, read=True, as_json=as_json,
                 call=lambda e: e.resolve(surface))
    if as_json:
        _print([asdict(c) for c in found])
        return
    table = Table(title=f"{len(found)} candidates", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("id", "tier", "score", "type", "name"):
        table.add_column(col)
    for c in found:
        table.add_row(c.id, c.tier, f"{c.score:.3f}", c.type, c.display_name or "-")
    console.print(table)


@entities_app.command("merge")
def merge_command(winner: Annotated[str, typer.Argument(metavar="WINNER", help="The entity that stays.")],
                  loser: Annotated[str, typer.Argument(metavar="LOSER", help="The entity merged into it.")],
                  tenant: TenantOpt, resource: ResourceOpt = None, thread: ThreadOpt = None,
                  reason: Annotated[str, typer.Option("--reason", help="Why (recorded, sealed).")] = "operator",
                  dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Merge LOSER into WINNER and re-point its notes (resumable: run it again)."""
    r = _run(dsn, data_dir, tenant, resource, thread, read=False, as_json=as_json,
             call=lambda e: e.merge(winner, loser, reason=reason))
    if as_json:
        _print(asdict(r))
        return
    console.print(f"merge {r.merge_id}: {r.loser} into {r.winner}, {plural(r.repointed, 'note')} re-pointed "
                  f"in {plural(r.batches, 'batch')}")


@entities_app.command("undo-merge")
def undo_merge_command(loser: Annotated[str, typer.Argument(metavar="LOSER", help="The merged entity.")],
                       tenant: TenantOpt, resource: ResourceOpt = None, thread: ThreadOpt = None,
                       dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Undo the merge of LOSER: its names and its notes come back (resumable)."""
    r = _run(dsn, data_dir, tenant, resource, thread, read=False, as_json=as_json,
             call=lambda e: e.undo_merge(loser))
    if as_json:
        _print(asdict(r))
        return
    console.print(f"undid merge {r.merge_id}: {r.loser} is its own entity again, {r.repointed} notes back")
