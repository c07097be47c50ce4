"""``memfabric replica create | stop | status`` (issue 25) and the ``--replica`` option
of the read commands.

- ``replica create --data-dir DIR --port P (--primary-data-dir PRIMARY | --primary-dsn URL)``:
  a streaming standby of a running primary (:func:`memfabric.adapters.postgres.standby.create_standby`);
  the replica's DSN is the last line printed.
- ``replica stop --data-dir DIR``: stop it (``pg_ctl stop -m fast``).
- ``replica status``: the topology, primary and each replica (``--replica`` or
  ``$MEMFABRIC_REPLICA_DSNS``) with its lag in seconds and replayed WAL position.
"""

from __future__ import annotations

import json
from typing import Annotated

import psycopg
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from memfabric.adapters.postgres import standby
from memfabric.adapters.postgres.replicas import replicas_from_env, safe_dsn, topology
from memfabric.domain.errors import FabricError

replica_app = typer.Typer(help="Streaming read replicas: create, stop, status.", no_args_is_help=True)
console = Console()

ReplicaOpt = Annotated[list[str] | None, typer.Option(
    "--replica", metavar="URL",
    help="Read replica DSN (repeatable; default $MEMFABRIC_REPLICA_DSNS): reads go there.")]


def register(app: typer.Typer) -> None:
    """Attach ``memfabric replica ...`` to the app."""
    app.add_typer(replica_app, name="replica", cls=app.info.cls)


def _fail(exc: BaseException | str) -> None:
    from memfabric.adapters.cli.common import fail  # noqa: PLC0415

    fail(exc)


@replica_app.command("create")
def create_command(
    data_dir: Annotated[str, typer.Option("--data-dir", metavar="DIR", help="Empty directory for the replica.")],
    port: Annotated[int, typer.Option("--port", metavar="P", min=1, max=65535, help="The replica's port.")],
    primary_data_dir: Annotated[str | None, typer.Option(
        "--primary-data-dir", metavar="DIR", help="Data directory of the running embedded primary.")] = None,
    primary_dsn: Annotated[str | None, typer.Option(
        "--primary-dsn", metavar="URL", help="DSN of the primary (a superuser on the same machine).")] = None,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="ADDR", help="TCP addresses to listen on too (e.g. 127.0.0.1; default: socket only).")] = "",
) -> None:
    """Create and start a streaming standby (pg_basebackup -R); prints its DSN last."""
    try:
        if bool(primary_data_dir) == bool(primary_dsn):
            raise FabricError("primary: give exactly one of --primary-data-dir and --primary-dsn")
        source = primary_dsn or standby.primary_dsn_of(str(primary_data_dir))
        console.print(f"base backup of {safe_dsn(source)} into {data_dir} ...")
        dsn = standby.create_standby(data_dir, port, source, listen=listen)
    except (FabricError, psycopg.Error) as exc:
        _fail(exc)
        return
    console.print("replica started; reads: open_fabric(dsn, replicas=[...]), --replica or $MEMFABRIC_REPLICA_DSNS")
    print(dsn)


@replica_app.command("stop")
def stop_command(
    data_dir: Annotated[str, typer.Option("--data-dir", metavar="DIR", help="The replica's data directory.")],
) -> None:
    """Stop a replica started by ``replica create``."""
    try:
        standby.stop_standby(data_dir)
    except FabricError as exc:
        _fail(exc)
        return
    console.print(f"stopped {data_dir}")


@replica_app.command("status")
def status_command(
    dsn: Annotated[str | None, typer.Option("--dsn", metavar="URL", help="The primary (default $MEMFABRIC_DSN).")] = None,
    data_dir: Annotated[str | None, typer.Option(
        "--data-dir", metavar="DIR", help="Data directory of the embedded primary.")] = None,
    replica: ReplicaOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The topology: the primary and each replica with its lag (seconds) and state."""
    from memfabric.adapters.postgres.embedded import resolve_dsn  # noqa: PLC0415

    try:
        primary, embedded = resolve_dsn(dsn, data_dir, read=True)
        try:
            rows = topology(primary, replicas_from_env(replica or None))
        finally:
            if embedded is not None:
                embedded.close()
    except (FabricError, psycopg.Error) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps(rows))
        return
    console.print(topology_table(rows))


def topology_table(rows: dict[str, object]) -> Table:
    """The topology as a table: role, server, lag (s), replayed LSN, state."""
    table = Table(title="topology", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("role", "server", "lag (s)", "replayed", "state"):
        table.add_column(col)
    table.add_row("primary", str(rows["primary"]), "-", "-", "ok")
    replicas = rows["replicas"]
    assert isinstance(replicas, list)
    for r in replicas:
        state = r["state"] if r["error"] is None else f"{r['state']}: {r['error']}"
        table.add_row("replica", r["name"], "-" if r["lag_s"] is None else f"{r['lag_s']:.3f}",
                      r["replayed_lsn"] or "-", state)
    return table
