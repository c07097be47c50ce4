"""Admin and auditor commands of the ``memfabric`` CLI (typer + rich).

``register(app)`` attaches:

- ``projections status | rebuild | verify | run``
- ``log``: decoded events in log order (``--note``, ``--tenant``, ``--since``, ``--follow``, ``--json``)
- ``export --out FILE.jsonl``: the whole log or one tenant, streaming
- ``audit verify | checkpoint``: the tamper-evidence chain
- ``roles sql``: the SQL of the owner/admin, writer and read-only auditor roles (docs/roles.md);
  ``roles create KIND NAME``: a password login in one of them, printed as a one-line DSN
- ``status``: the log, projections, lag, embedder and audit head (``memfabric.adapters.status``)
- ``get | history | forget | hold | release | list | erase-scope | sweep``: one note's state and
  events, tombstones, legal hold and its release, a page of a scope's notes (``--cursor``,
  ``--content``, total), erasure of a scope prefix (counts named live, superseded, held,
  forgotten). A note can be
  given by id alone when a single scope has a note of that id (found from the log, as
  ``log --note`` does); otherwise ``--tenant`` (and ``--resource``/``--thread``) narrow it.
  ``sweep`` applies the retention rules (issue 30, ``docs/retention.md``).

With ``--json`` every command prints JSON, and an error is one JSON object on stderr,
``{"error": "<message>", "type": "<class>"}``. ``--dsn`` and ``--data-dir`` together are
an error; an explicit ``--data-dir`` wins over ``$MEMFABRIC_DSN``. An unknown tenant
(``--tenant nosuch``) is an error (exit 2). SIGTERM and SIGINT stop ``projections run``
cleanly (exit 0), closing the embedded server it started.

Every command takes ``--dsn`` (default ``$MEMFABRIC_DSN``; with neither, the embedded
PostgreSQL in ``--data-dir`` or ``$MEMFABRIC_HOME``). Admin commands open the fabric
without catching projections up (so a projection stopped on an event can still be
inspected and rebuilt) and with the recall index's existing vector dimension.
Progress bars go to stderr, and only when it is a terminal.

Read-only commands (``audit verify``, ``log``, ``export``, ``status``, ``projections
status/verify``, ``get``, ``history``, ``list``, and ``lineage``) open with
``open_fabric(read_only=True)`` when the role cannot write the log (an auditor with
``SELECT`` only): nothing is written, and ``audit verify`` then only verifies unless the
role may insert checkpoints. A command that writes, run by such a role, is one
``ReadOnlyError`` line naming the missing privilege (issue 27).
``log`` and ``export`` check each row as they read it, mark a failing one
(``"integrity": "failed"``) and go on, and exit 1 at the end naming its notification id.

Exit codes: 0 success; 1 a check failed (verify found differences, the audit chain does
not match, a projection stopped on an event, an event cannot be decrypted); 2 bad input
or another named error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from memfabric.adapters.audit import LogEntry, export_jsonl, read_log
from memfabric.adapters.cli.audit import (
    audit_app, audit_checkpoint_command, audit_verify_command, roles_app, roles_create_command, roles_sql_command,
)
from memfabric.adapters.cli.common import parse_time
from memfabric.adapters.cli.fabric import (
    HANDLED, UNREADABLE, DataDirOpt, DsnOpt, EveryOpt, JsonOpt, KnownAtOpt, NoteIdArg, ProjectionOpt,
    RecordedEmbedder, RequestedByOpt, ResourceOpt, TenantFilterOpt, TenantOpt, ThreadOpt, admin_fabric,
    adopt_stand_in, can_write, check_filters, console, err, fail, note_scope, notes_fabric, plural, print_json,
    progress_bar, require_tenant, require_writable,
)
from memfabric.adapters.cli.lifecycle import (
    erase_scope_command, forget_command, get_command, history_command, hold_command, list_command,
    list_notes, release_command, status_top_command, sweep_command,
)
from memfabric.adapters.cli.projections import (
    RunLog, projections_app, rebuild_command, reembed_command, run_command, status_command, verify_command,
)
from memfabric.adapters.log_versions import check_versions
from memfabric.domain.errors import FabricError

__all__ = [  # importable from here as before the split into cli_fabric, cli_projections, ...
    "EveryOpt", "JsonOpt", "KnownAtOpt", "NoteIdArg", "ProjectionOpt", "RecordedEmbedder", "RequestedByOpt",
    "ResourceOpt", "RunLog", "TenantOpt", "ThreadOpt", "admin_fabric", "adopt_stand_in", "audit_checkpoint_command",
    "audit_verify_command", "can_write", "err", "list_notes", "note_scope", "notes_fabric", "read_log",
    "rebuild_command", "register", "require_tenant", "require_writable", "roles_create_command",
    "roles_sql_command", "run_command", "status_command", "verify_command",
]


def register(app: typer.Typer) -> None:
    """Attach the admin/auditor commands to the ``memfabric`` typer app."""
    app.add_typer(projections_app, name="projections", cls=app.info.cls)  # the app's help style
    app.add_typer(audit_app, name="audit", cls=app.info.cls)
    app.add_typer(roles_app, name="roles", cls=app.info.cls)
    app.command("log")(log_command)
    app.command("export")(export_command)
    app.command("get")(get_command)
    app.command("history")(history_command)
    app.command("forget")(forget_command)
    app.command("hold")(hold_command)
    app.command("list")(list_command)
    app.command("release")(release_command)
    app.command("status")(status_top_command)
    app.command("erase-scope")(erase_scope_command)
    app.command("sweep")(sweep_command)
    app.command("reembed")(reembed_command)


# ---------------------------------------------------------------- the log
def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, FabricError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _integrity_failed(failed: list[LogEntry], as_json: bool) -> NoReturn:
    ids = [e.position for e in failed]
    shown = ", ".join(map(str, ids[:20])) + (", ..." if len(ids) > 20 else "")
    fail(f"{plural(len(ids), 'event')} failed the integrity check (notification {shown}): "
          f"{failed[0].problem}; run 'memfabric audit verify'", code=1, as_json=as_json)


def _log_line(entry: LogEntry) -> str:
    scope = "/".join(x or "-" for x in (entry.tenant_id, entry.resource_id, entry.thread_id))
    when = entry.timestamp.isoformat(timespec="milliseconds") if entry.timestamp else "?"
    if entry.integrity == "failed":
        return (f"{entry.position:>8} {when} {entry.note_id or '?'} {scope} {entry.type} v{entry.version}"
                f" INTEGRITY FAILED: {entry.problem}")
    fields = json.dumps(entry.to_dict()["fields"], ensure_ascii=False, separators=(",", ":"))
    return f"{entry.position:>8} {when} {entry.note_id or '?'} {scope} {entry.type} v{entry.version} {fields}"


def log_command(
    note: Annotated[str | None, typer.Option(
        "--note", metavar="ID", help="Only this note (12-hex note id or aggregate UUID).")] = None,
    tenant: TenantFilterOpt = None,
    since: Annotated[int, typer.Option(
        "--since", metavar="POSITION", help="Only events after this position.", min=0)] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    idle_exit: Annotated[float | None, typer.Option(
        "--idle-exit", metavar="SECONDS", help="With --follow: stop after this many seconds without new events.")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", metavar="TIME", help="Only events recorded at or before this instant (ISO 8601, "
        "no timezone means UTC): the log as it stood then.")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print the decoded events in log order: position, time, note id, scope, type and fields.

    Erased protected fields read <erased>; embeddings are shown by size only. Each row is checked as it \
is read: a row that does not decode (its stored bytes were changed) or differs from the audit checkpoint \
covering it, or whose note's previous version is missing (a row deleted), is printed as INTEGRITY FAILED \
(JSON: "integrity": "failed", "problem") and the listing goes on; the command then exits 1 naming the \
notification ids. Works with a read-only (auditor) role."""
    check_filters(note, tenant, as_json)
    failed: list[LogEntry] = []
    last = since
    try:
        stop = parse_time(until, "until")
        with admin_fabric(dsn, data_dir, read=True) as fabric:
            if tenant is not None:
                require_tenant(fabric, tenant)
            entries = read_log(fabric, note=note, tenant=tenant, since=since, follow=follow,
                               idle_exit=idle_exit)
            for entry in check_versions(fabric, entries, batch=1 if follow else 500):
                last = entry.position
                if entry.integrity == "failed":
                    failed.append(entry)
                elif stop is not None and entry.timestamp is not None and entry.timestamp > stop:
                    continue  # recorded after --until (a failed row is always shown)
                if as_json:
                    print(json.dumps(entry.to_dict(), ensure_ascii=False), flush=follow)
                else:
                    print(_log_line(entry), flush=follow)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    except UNREADABLE as exc:  # not a row's: rows are checked one by one
        fail(f"the log cannot be read after notification {last}: {_reason(exc)}; run 'memfabric audit verify'",
              code=1, as_json=as_json)
    except KeyboardInterrupt:
        pass
    if failed:
        _integrity_failed(failed, as_json)


def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="JSON Lines file to write.")],
    tenant: TenantFilterOpt = None,
    embeddings: Annotated[bool, typer.Option(
        "--embeddings/--no-embeddings", help="Include vectors (base64 float32).")] = True,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON (the file is JSON Lines anyway).")] = False,
) -> None:
    """Export the whole log (or one tenant's part) as JSON Lines.

    Streaming in constant memory: one decoded event per line, in log order."""
    check_filters(None, tenant, as_json)
    failed: list[LogEntry] = []
    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric:
            if tenant is not None:  # an unknown tenant says so (as `log` does), exit 2
                require_tenant(fabric, tenant)
            with progress_bar("export", fabric.engine.head()) as update:
                n = export_jsonl(fabric, out, tenant=tenant, embeddings=embeddings,
                                 progress=lambda position: update(completed=position), failed=failed.append)
    except (*HANDLED, OSError) as exc:
        fail(exc, as_json=as_json)
    except UNREADABLE as exc:  # not a row's: rows are checked one by one
        fail(f"the log cannot be read: {_reason(exc)}; run 'memfabric audit verify'", code=1, as_json=as_json)
    if as_json:
        print_json({"events": n, "out": str(out), "failed": [e.position for e in failed]})
    else:
        console.print(f"exported {n} events to {out}")
    if failed:
        _integrity_failed(failed, as_json)
