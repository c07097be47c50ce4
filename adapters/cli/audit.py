"""``memfabric audit verify | checkpoint`` (the tamper-evidence chain) and ``memfabric
roles sql | create`` (least-privilege roles, docs/roles.md); registered by
:func:`memfabric.adapters.cli.admin.register`."""

from __future__ import annotations

import json
from typing import Annotated

import psycopg
import typer
from rich.text import Text

from memfabric.adapters.audit import CHAIN_TABLE, verify_chain
from memfabric.adapters.bootstrap import Fabric
from memfabric.adapters.cli.fabric import (
    DataDirOpt, DsnOpt, EveryOpt, HANDLED, JsonOpt, admin_fabric, console, fail, plural, print_json,
    progress_bar,
)
from memfabric.adapters.postgres.embedded import resolve_dsn

audit_app = typer.Typer(help="Tamper evidence: the audit chain over the event log.", no_args_is_help=True)
roles_app = typer.Typer(help="Least-privilege PostgreSQL roles: writer, admin, read-only auditor.",
                        no_args_is_help=True)


def _checkpoint_counts(fabric: Fabric, written: int) -> tuple[int, int]:
    """(events in the ``written`` newest checkpoints, events in all checkpoints)."""
    with psycopg.connect(fabric.dsn) as conn:
        have = conn.execute("SELECT to_regclass(%s)", (CHAIN_TABLE,)).fetchone()
        if not have or have[0] is None:  # a read-only open never creates the chain table
            return 0, 0
        row = conn.execute(
            f"SELECT coalesce(sum(events) FILTER (WHERE position IN (SELECT position FROM {CHAIN_TABLE}"  # noqa: S608
            f" ORDER BY position DESC LIMIT %s)), 0), coalesce(sum(events), 0) FROM {CHAIN_TABLE}",
            (written,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _audit(dsn: str | None, data_dir: str | None, *, checkpoint: bool, every: int, anchor: str | None,
           as_json: bool, checkpoint_only: bool = False) -> None:
    try:
        with admin_fabric(dsn, data_dir, read=not checkpoint_only) as fabric:
            with progress_bar("audit", fabric.engine.head()) as update:
                report = verify_chain(fabric, checkpoint=checkpoint, every=every, anchor=anchor,
                                      progress=lambda k: update(advance=k))
            new, covered = _checkpoint_counts(fabric, report.written)
    except (*HANDLED, ValueError) as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps({
            "ok": report.ok, "head": report.head, "events": report.events, "checkpoints": report.checkpoints,
            "written": report.written, "checkpointed_events": new if report.written else 0,
            "head_digest": report.head_digest, "changed": report.changed,
            "removed": report.removed, "inserted": report.inserted, "broken": report.broken,
            "gaps": report.gaps, "anchor_ok": report.anchor_ok, "not_checkpointed": report.not_checkpointed,
            "unauthenticated": report.unauthenticated, "miscounted": report.miscounted,
        }))
    elif report.ok:
        if report.not_checkpointed:
            done = f"not checkpointed ({report.not_checkpointed})"
        elif report.written:
            done = f"checkpointed {plural(new, 'new event')} ({plural(report.written, 'checkpoint')} written)"
        elif report.events > covered:
            done = f"{plural(report.events - covered, 'new event')} not checkpointed (--no-checkpoint)"
        else:
            done = "no new events to checkpoint"
        console.print(Text(
            f"OK: {plural(report.events, 'event')} hashed, {plural(report.checkpoints, 'checkpoint')} verified; {done}",
            style="green"))
        if report.gaps:
            console.print("note: ids missing after the last checkpoint (rolled-back writes: every tenant's"
                          f" event count matches): {report.gaps}")
    else:
        console.print(Text("TAMPERED: the event log does not match its audit chain", style="bold red"))
        for label, ids in (("changed", report.changed), ("removed", report.removed), ("inserted", report.inserted),
                           ("unauthenticated (tag fails)", report.unauthenticated)):
            if ids:
                console.print(Text(f"  {label} event rows (notification ids): {ids}", style="red"))
        for tenant, found, counted in report.miscounted:
            console.print(Text(f"  tenant {tenant!r}: {found} events in the log, its appends counted {counted}"
                               f" ({'deleted' if found < counted else 'inserted past the append'})", style="red"))
        for problem in report.broken:
            console.print(Text(f"  {problem}", style="red"))
        if report.anchor_ok is False:
            console.print(Text(f"  the chain no longer gives the anchor {anchor}", style="red"))
        if checkpoint:
            console.print(Text("  nothing was checkpointed", style="red"))
    if not as_json and report.ok:  # a tampered log's digest is no anchor to keep
        console.print(f"anchor: {report.head}:{report.head_digest}")
    if not report.ok:
        raise typer.Exit(code=1)


@audit_app.command("verify")
def audit_verify_command(
    checkpoint: Annotated[bool, typer.Option(
        "--checkpoint/--no-checkpoint", help="Checkpoint the new events when all is well.")] = True,
    every: EveryOpt = 1000,
    anchor: Annotated[str | None, typer.Option(
        metavar="POSITION:HEX", help="Anchor printed by an earlier run; fail unless the chain still gives it.")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recompute the audit chain, report changed, removed or inserted event rows, and checkpoint new events.

    Exits 1 on any difference. When all is well it also writes checkpoints for the events added since the \
last checkpoint, like 'audit checkpoint' (use --no-checkpoint to only verify). Prints the head anchor \
POSITION:HEX to keep outside the database and pass back with --anchor."""
    _audit(dsn, data_dir, checkpoint=checkpoint, every=every, anchor=anchor, as_json=as_json)


@audit_app.command("checkpoint")
def audit_checkpoint_command(
    every: EveryOpt = 1000,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify the audit chain, then checkpoint the events added since the last checkpoint.

    Refused (exit 1) when verification fails. Prints the head anchor POSITION:HEX."""
    _audit(dsn, data_dir, checkpoint=True, every=every, anchor=None, as_json=as_json, checkpoint_only=True)


# -------------------------------------------------------------------- roles
@roles_app.command("sql")
def roles_sql_command(
    database: Annotated[str, typer.Option("--database", metavar="NAME", help="The database to grant on.")] = "memfabric",
    schema: Annotated[str, typer.Option("--schema", metavar="NAME", help="The schema of memfabric's tables.")] = "public",
    checkpoints: Annotated[bool, typer.Option(
        "--auditor-checkpoints", help="Also let the auditor write audit checkpoints (INSERT on mf_audit_chain).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the SQL that creates the owner/admin, writer and read-only auditor roles with their exact grants.

    Connects to nothing. Run the output as a superuser (psql -f), before or after the owner's first open; see docs/roles.md."""
    from memfabric.adapters.postgres.roles import roles_sql

    text = roles_sql(database, schema=schema, checkpoints=checkpoints)
    if as_json:
        print_json({"database": database, "schema": schema, "sql": text})
    else:
        print(text, end="")


@roles_app.command("create")
def roles_create_command(
    kind: Annotated[str, typer.Argument(metavar="KIND", help="auditor, writer or admin.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new login role.")],
    password: Annotated[str | None, typer.Option(
        "--password", metavar="TEXT", help="Its password (default: a new random one, printed once).")] = None,
    schema: Annotated[str, typer.Option("--schema", metavar="NAME", help="The schema of memfabric's tables.")] = "public",
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a login role NAME in the memfabric_<KIND> group (created with its grants when missing) and print its DSN.

    Run it as the owner: on the embedded server simply 'memfabric roles create auditor alice'; on another \
server with --dsn of a superuser. Prints one line, the new role's DSN (password included), for psql and --dsn."""
    import secrets

    from memfabric.adapters.postgres.roles import create_login

    secret = password or secrets.token_urlsafe(18)
    try:
        dsn_, embedded = resolve_dsn(dsn, data_dir, read=True)
        try:
            with psycopg.connect(dsn_, autocommit=True) as conn:
                create_login(conn, kind, name, secret, schema=schema)
                database = str(conn.info.dbname)
            url = (embedded.dsn_for(name, secret, database) if embedded is not None
                   else psycopg.conninfo.make_conninfo(dsn_, user=name, password=secret))
        finally:
            if embedded is not None:
                embedded.close()
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json({"kind": kind, "name": name, "database": database, "dsn": url})
    else:
        print(url)
