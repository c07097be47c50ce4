"""The ``memfabric`` command line (typer + rich): the app, its four core commands
(``remember``, ``recall``, ``lineage``, ``demo``) and the registration of the others.

The command modules import only leaves, never this module (issue 34: no import
cycle): :mod:`~memfabric.adapters.cli.common` (options, errors, opening a fabric),
:mod:`~memfabric.adapters.cli.render` (tables) and :mod:`~memfabric.adapters.cli.fabric`
(what the admin commands share). ``cli_admin.register`` attaches the admin and auditor
commands (``cli_projections``, ``cli_audit``, ``cli_lifecycle``); ``cli_replica``,
``cli_mcp``, ``cli_console``, ``cli_access`` and ``cli_entities`` register their own.
The shared names stay importable from here (``from memfabric.adapters.cli.app import fail``).

Every command takes ``--dsn`` (default ``$MEMFABRIC_DSN``; with neither, the embedded
PostgreSQL in ``--data-dir`` or ``$MEMFABRIC_HOME``).

Errors print one line each, ``error: <field>: <message>``, on stderr; with ``--json``
an error is one JSON object on stderr, ``{"error": "<message>", "type": "<class>"}``.
Exit codes: 0 success; 1 a check failed; 2 bad input or another named error.

Times given without a timezone (``--as-of 2026-01-01``, ``2026-01-01T12:00``) mean UTC.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Annotated, Any

import psycopg
import typer
from rich.console import Console

from memfabric.adapters.cli.common import (
    HANDLED,
    PATTERNS,
    DataDirOpt,
    DsnOpt,
    EmbedderOpt,
    HelpGroup,
    JsonOpt,
    ResourceOpt,
    TenantOpt,
    ThreadOpt,
    console,
    env_read_only,
    err_console,
    error_lines,
    fail,
    make_embedder,
    parse_time,
    quiet_fallback,
)
from memfabric.adapters.cli import access as cli_access, admin as cli_admin, console as cli_console
from memfabric.adapters.cli import entities as cli_entities, mcp as cli_mcp, replica as cli_replica
from memfabric.adapters.cli.common import open_for_command as _open
from memfabric.adapters.cli.fabric import note_scope, notes_fabric, require_tenant
from memfabric.adapters.cli.render import lineage_summary, lineage_table, recall_table
from memfabric.adapters.cli.replica import ReplicaOpt
from memfabric.adapters.postgres.embedded import require_database
from memfabric.adapters.bootstrap import Fabric
from memfabric.adapters.serialize import jsonable

__all__ = [  # the command modules' shared names, importable from here as before
    "HANDLED", "PATTERNS", "DataDirOpt", "DsnOpt", "EmbedderOpt", "HelpGroup", "JsonOpt", "ResourceOpt",
    "TenantOpt", "ThreadOpt", "app", "console", "env_read_only", "err_console", "error_lines", "fail",
    "lineage_summary", "lineage_table", "make_embedder", "parse_time", "quiet_fallback", "recall_table",
]

app = typer.Typer(
    name="memfabric",
    cls=HelpGroup,
    help=(
        "memfabric: an event-sourced memory fabric for AI agents.\n\n"
        "Every command uses the PostgreSQL server given by --dsn or $MEMFABRIC_DSN; with "
        "neither, it starts an embedded server whose data lives in --data-dir or "
        "$MEMFABRIC_HOME/pg. Try 'memfabric demo'."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.command()
def remember(
    content: Annotated[str, typer.Argument(metavar="CONTENT", help="The note's text.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[str, typer.Option(metavar="KIND", help="fact, procedure, file or working.")] = "fact",
    block: Annotated[str | None, typer.Option(
        metavar="LABEL", help="Label of the working-memory block (required with --kind working).")] = None,
    path: Annotated[str | None, typer.Option(
        metavar="PATH", help="Path of the file (required with --kind file).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", metavar="TAG", help="A tag (repeatable).")] = None,
    subject: Annotated[str | None, typer.Option(
        metavar="KEY", help="Subject key: a new note with the same key supersedes the old one.")] = None,
    importance: Annotated[float | None, typer.Option(
        metavar="0..1", help="Importance between 0 and 1 (default 0.5).")] = None,
    retention: Annotated[str | None, typer.Option(
        metavar="CLASS", help="Retention class: ephemeral, operational, durable or regulated "
                              "(default per kind, see docs/retention.md).")] = None,
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the note as JSON.")] = False,
) -> None:
    """Remember one note and print its id and outcome (inserted, folded, superseding, preceding)."""
    if importance is not None and not (0.0 <= importance <= 1.0):  # also rejects nan
        fail("importance: must be a number between 0 and 1", as_json=as_json)
    fields: dict[str, Any] = {"kind": kind, "content": content}
    for key, value in (("block", block), ("path", path), ("tags", tag or None), ("subject", subject),
                       ("importance", importance), ("retention", retention)):
        if value is not None:
            fields[key] = value
    try:
        with _open(dsn, data_dir, embedder) as fabric:
            note = fabric.scope(tenant, resource, thread).remember(**fields)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable({k: v for k, v in asdict(note).items() if k != "scope"} | {"scope": note.scope.key})))
    else:
        console.print(f"{note.id} {note.outcome}" + (f" (supersedes {note.supersedes})" if note.supersedes else ""))


@app.command()
def recall(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What to look for.")],
    tenant: TenantOpt,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", metavar="KIND", help="Kind to search: fact, procedure, file or episode (repeatable; default fact and file).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", metavar="N", help="Most hits to return.")] = 10,
    budget: Annotated[int | None, typer.Option(
        metavar="TOKENS", help="Token budget: stop at the first hit that does not fit.")] = None,
    as_of: Annotated[str | None, typer.Option(
        "--as-of", metavar="TIME",
        help="Recall as of this instant (ISO 8601, e.g. 2026-01-31 or 2026-01-31T12:00:00+01:00; no timezone means UTC).")] = None,
    mode: Annotated[str, typer.Option(metavar="MODE", help="hybrid, vector or lexical.")] = "hybrid",
    known_at: Annotated[str | None, typer.Option(
        "--known-at", metavar="TIME",
        help="Recall what the fabric had recorded at this instant (ISO 8601, no timezone means UTC).")] = None,
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    replica: ReplicaOpt = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print hits and explain rows (with recency and importance) as JSON.")] = False,
) -> None:
    """Recall the notes that best match QUERY, with their scores."""
    try:
        options: dict[str, Any] = {"top_k": top_k, "budget": budget, "as_of": parse_time(as_of), "mode": mode,
                                   "known_at": parse_time(known_at, "known_at")}
        if kind:
            options["kinds"] = tuple(kind)
        if not dsn:
            require_database(data_dir)
        with _open(dsn, data_dir, embedder, replicas=replica or None) as fabric:
            res = fabric.scope(tenant, resource, thread).recall(query, **options)
            hint = None
            if not res.hits:  # an unknown tenant says so (as `log` does), exit 2
                require_tenant(fabric, tenant)
                hint = recall_hint(fabric, tenant, resource)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        out = {
            "hits": [{k: v for k, v in asdict(h).items() if k != "scope"} | {"scope": h.scope.key} for h in res.hits],
            "explain": [asdict(e) for e in res.explain],
        } | ({"hint": hint} if hint else {})
        print(json.dumps(jsonable(out)))
    elif res.hits:
        console.print(recall_table(res))
    else:
        console.print("no matching notes" + (f"\nhint: {hint}" if hint else ""))


def recall_hint(fabric: Fabric, tenant: str, resource: str | None) -> str | None:
    """Why a tenant-level recall (no ``--resource``) found nothing although the tenant
    has notes: they belong to resources, which a tenant-level scope does not see (unless
    shared tenant-wide). Names up to three of them and how to ask; ``None`` otherwise."""
    if resource is not None:
        return None
    from memfabric.projections import tables

    with psycopg.connect(fabric.dsn) as conn:
        rows = conn.execute(
            f"SELECT resource_id, count(*) FROM {tables.NOTE_SCOPE} WHERE tenant_id = %s AND resource_id <> ''"  # noqa: S608
            " AND NOT held GROUP BY resource_id ORDER BY count(*) DESC, resource_id", (tenant,)).fetchall()
    if not rows:
        return None
    named = ", ".join(f"{r} ({n})" for r, n in rows[:3]) + (", ..." if len(rows) > 3 else "")
    return (f"tenant {tenant!r} has no tenant-level notes that match; its notes belong to {len(rows)} "
            f"resource(s): {named}. A tenant-level scope sees only notes shared tenant-wide: "
            f"pass --resource ID (and --thread ID) to recall as that resource, or 'memfabric list --tenant "
            f"{tenant} --content' to browse the whole tenant")


@app.command()
def lineage(
    note_id: Annotated[str, typer.Argument(metavar="ID", help="Note id (12 hex digits).")],
    tenant: Annotated[str | None, typer.Option(
        "--tenant", "-t", metavar="ID", help="Tenant id (default: found from the log when the id is unambiguous).")] = None,
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    replica: ReplicaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a note's lineage as a timeline: supersession chain, folds, links, tombstone.

    The note can be given by id alone when only one scope has a note of that id."""
    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            notes = note_scope(fabric, note_id, tenant, resource, thread)
            lin = notes.lineage(note_id)
            history = {nid: notes.history(nid) for nid in [*lin.predecessors, note_id, *lin.successors]}
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable({
            "lineage": asdict(lin),
            "history": {k: [asdict(h) for h in v] for k, v in history.items()},
        })))
        return
    console.print(lineage_table(lin, history, title=lineage_summary(lin)))


@app.command()
def demo(
    embedder: EmbedderOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the summary, as JSON.")] = False,
) -> None:
    """Walk through the main job: remember, fold, supersede, recall, forget, working memory.

    Each run uses a fresh thread and writes demo notes for the tenants acme and globex, to the embedded server \
or to the --dsn database. Recall is shown with its scores, a token budget, as of an earlier instant and across \
tenants; lineage shows the supersession chain."""
    from memfabric.adapters.cli.demo import run_demo

    import io

    try:
        out = Console(file=io.StringIO(), width=100) if as_json else console
        summary = run_demo(out, dsn=dsn, data_dir=data_dir, embedder=make_embedder(embedder))
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps(jsonable(summary)))


for _register in (cli_admin.register, cli_replica.register, cli_mcp.register, cli_console.register,
                  cli_access.register, cli_entities.register):
    _register(app)  # cli_mcp and cli_console import mcp / starlette only when their command runs


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
