"""Admin and auditor commands of the ``memfabric`` CLI (typer + rich).

``register(app)`` attaches:

- ``projections status | rebuild | verify | run``
- ``log``: decoded events in log order (``--note``, ``--tenant``, ``--since``, ``--follow``, ``--json``)
- ``export --out FILE.jsonl``: the whole log or one tenant, streaming
- ``audit verify | checkpoint``: the tamper-evidence chain

Every command takes ``--dsn`` (default ``$MEMFABRIC_DSN``; with neither, the embedded
PostgreSQL in ``--data-dir`` or ``$MEMFABRIC_HOME``). Admin commands open the fabric
without catching projections up (so a projection stopped on an event can still be
inspected and rebuilt) and with the recall index's existing vector dimension.

Exit codes: 0 success; 1 a check failed (verify found differences, the audit chain does
not match, a projection stopped on an event); 2 bad input or another named error.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import psycopg
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from memfabric.adapters.audit import LogEntry, export_jsonl, read_log, verify_chain
from memfabric.adapters.bootstrap import Fabric, open_fabric
from memfabric.adapters.embedded import EmbeddedPostgres
from memfabric.adapters.embedders import HashEmbedder
from memfabric.domain.errors import FabricError, ProjectionError
from memfabric.projections.rebuild import ProjectionAdmin, RichReporter, VerifyReport

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

projections_app = typer.Typer(
    help="Projection status, rebuild (in place or blue-green), verify, and the runner.",
    no_args_is_help=True,
)
audit_app = typer.Typer(help="Tamper evidence: the audit chain over the event log.", no_args_is_help=True)

DsnOpt = Annotated[Optional[str], typer.Option("--dsn", help="PostgreSQL DSN (default $MEMFABRIC_DSN, else embedded).")]
DataDirOpt = Annotated[Optional[str], typer.Option("--data-dir", help="Embedded server data directory.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ProjectionOpt = Annotated[
    str, typer.Option("--projection", "-p", help="Projection name, or 'all'.")
]


def register(app: typer.Typer) -> None:
    """Attach the admin/auditor commands to the ``memfabric`` typer app."""
    app.add_typer(projections_app, name="projections")
    app.add_typer(audit_app, name="audit")
    app.command("log")(log_command)
    app.command("export")(export_command)


# ------------------------------------------------------------------ helpers
def _index_dim(dsn: str) -> int | None:
    """The vector dimension of an existing recall index, if any."""
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
                " WHERE a.attrelid = to_regclass('mf_recall_index') AND a.attname = 'embedding'"
            ).fetchone()
    except psycopg.Error:
        return None
    if row is None or not str(row[0]).startswith("vector("):
        return None
    return int(str(row[0])[len("vector(") : -1])


@contextmanager
def admin_fabric(dsn: str | None, data_dir: str | None) -> Iterator[Fabric]:
    """An open fabric for admin work: no inline projections, no catch-up on open, and a
    hash embedder of the recall index's dimension (admin commands never embed)."""
    embedded = None
    dsn = dsn or os.environ.get("MEMFABRIC_DSN")
    if not dsn:
        embedded = EmbeddedPostgres(data_dir)
        dsn = embedded.dsn
    try:
        dim = _index_dim(dsn) or 384
        with open_fabric(dsn, embedder=HashEmbedder(dim), inline_projections=False, catch_up=False) as fabric:
            yield fabric
    finally:
        if embedded is not None:
            embedded.close()


def _fail(exc: BaseException, code: int = 2) -> None:
    err.print(Text(f"error: {exc}", style="red"))
    raise typer.Exit(code=code)


def _stopped(exc: ProjectionError) -> None:
    err.print(Text(
        f"projection {exc.projection!r} stopped at notification {exc.notification_id} "
        f"({exc.topic}): {exc.cause}",
        style="red",
    ))
    raise typer.Exit(code=1)


def _seconds(value: float) -> str:
    if math.isnan(value):
        return "?"
    return f"{value:.1f}"


# -------------------------------------------------------------- projections
@projections_app.command("status")
def status_command(dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Position, log head, lag (events, seconds) and stop of each projection.

    A projection stopped on an event shows that event's notification id, topic and error."""
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            rows = ProjectionAdmin.for_fabric(fabric).status()
    except (FabricError, ValidationError) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps([
            {"name": s.name, "position": s.position, "head": s.head, "lag_events": s.lag_events,
             "lag_seconds": None if math.isnan(s.lag_seconds) else s.lag_seconds,
             "error": None if s.error is None else {**s.error, "at": s.error["at"].isoformat()}}
            for s in rows
        ]))
        return
    table = Table(title="projections")
    for col in ("projection", "position", "head", "lag (events)", "lag (s)", "state"):
        table.add_column(col)
    for s in rows:
        state = Text("ok", style="green")
        if s.error is not None:
            state = Text(f"stopped at {s.error['notification_id']}", style="red")
        elif s.lag_events:
            state = Text("behind", style="yellow")
        table.add_row(s.name, str(s.position), str(s.head), str(s.lag_events), _seconds(s.lag_seconds), state)
    console.print(table)
    for s in rows:
        if s.error is not None:
            console.print(Text(
                f"{s.name} stopped at notification {s.error['notification_id']} ({s.error['topic']}):"
                f" {s.error['error']}", style="red"))


@projections_app.command("rebuild")
def rebuild_command(
    projection: ProjectionOpt = "all",
    blue_green: Annotated[bool, typer.Option(
        "--blue-green", help="Build new tables while readers keep the old ones, then switch atomically.")] = False,
    batch: Annotated[int, typer.Option(help="Events per fetch.", min=1)] = 2000,
    maintenance_work_mem: Annotated[Optional[str], typer.Option(
        "--maintenance-work-mem", help="For the index build, e.g. 1GB (default: the server's).")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Replay the log from zero into the projection(s).

    In place (default): writers wait while the tables are emptied and reloaded. With
    --blue-green the live tables keep serving until the switch."""
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            admin = ProjectionAdmin.for_fabric(fabric)
            with RichReporter(err) as reporter:
                report = admin.rebuild(projection, blue_green=blue_green, batch=batch, reporter=reporter,
                                       maintenance_work_mem=maintenance_work_mem)
    except ProjectionError as exc:
        _stopped(exc)
        return
    except (FabricError, ValidationError) as exc:
        _fail(exc)
        return
    mode = "blue-green" if report.blue_green else "in place"
    rows = ", ".join(f"{k}={v}" for k, v in report.rows.items())
    console.print(
        f"rebuilt {', '.join(report.projections)} ({mode}): {report.events} events, {report.notes} notes,"
        f" rows {rows}; position {report.position}; {report.seconds:.2f}s"
        f" ({report.events_per_second:,.0f} events/s; load {report.load_seconds:.2f}s,"
        f" indexes {report.index_seconds:.2f}s)"
    )


def _verify_json(r: VerifyReport) -> dict[str, Any]:
    return {
        "projection": r.projection, "table": r.table, "position": r.position, "head": r.head,
        "live_rows": r.live_rows, "replayed_rows": r.replayed_rows, "differences": r.differences,
        "ok": r.ok,
        "first": [{"key": {k: str(v) for k, v in d.key.items()}, "kind": d.kind,
                   "columns": {c: [str(a), str(b)] for c, (a, b) in d.columns.items()}} for d in r.first],
    }


def _short(value: Any, n: int = 60) -> str:
    text = str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


@projections_app.command("verify")
def verify_command(
    projection: ProjectionOpt = "all",
    show: Annotated[int, typer.Option(help="Differing rows to print per table.", min=0)] = 10,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the live projection(s) with a fresh replay of the log.

    The replay goes into scratch tables (rolled back) and is compared row by row; exits 1
    and prints the first differences when they differ."""
    try:
        with admin_fabric(dsn, data_dir) as fabric, RichReporter(err) as reporter:
            reports = ProjectionAdmin.for_fabric(fabric).verify(projection, show=show, reporter=reporter)
    except ProjectionError as exc:
        _stopped(exc)
        return
    except (FabricError, ValidationError) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps([_verify_json(r) for r in reports]))
    else:
        for r in reports:
            lag = f" (log head {r.head})" if r.head != r.position else ""
            if r.ok:
                console.print(Text(
                    f"OK      {r.projection} {r.table}: {r.live_rows} rows identical at position {r.position}{lag}",
                    style="green"))
                continue
            console.print(Text(
                f"DIFFER  {r.projection} {r.table}: {r.differences} rows differ at position {r.position}{lag}"
                f" (live {r.live_rows} rows, replay {r.replayed_rows})", style="red"))
            table = Table()
            for col in ("key", "difference", "column", "live", "replay"):
                table.add_column(col, overflow="fold")
            for d in r.first:
                key = ", ".join(f"{k}={v}" for k, v in d.key.items())
                if not d.columns:
                    what = "only in the replay" if d.kind == "missing" else "only in the live table"
                    table.add_row(key, what, "", "", "")
                for col, (live, new) in d.columns.items():
                    table.add_row(key, d.kind, col, _short(live), _short(new))
            console.print(table)
    if not all(r.ok for r in reports):
        raise typer.Exit(code=1)


@projections_app.command("run")
def run_command(
    once: Annotated[bool, typer.Option("--once", help="Catch up once and exit.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between checks without notifications.", min=0.05)] = 5.0,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Keep projections caught up from this process (LISTEN/NOTIFY).

    For writers opened with inline_projections=False. Stops with exit code 1 and the
    notification id, topic and error when a projection fails on an event."""
    last: dict[str, int] = {}

    def show(positions: dict[str, int]) -> None:
        nonlocal last
        if positions != last:
            console.print("caught up: " + ", ".join(f"{k}={v}" for k, v in positions.items()))
            last = dict(positions)

    try:
        with admin_fabric(dsn, data_dir) as fabric:
            ProjectionAdmin.for_fabric(fabric).run(fabric.dsn, once=once, poll=poll, on_catch_up=show)
    except ProjectionError as exc:
        _stopped(exc)
    except (FabricError, ValidationError) as exc:
        _fail(exc)
    except KeyboardInterrupt:
        return


# ---------------------------------------------------------------- the log
def _log_line(entry: LogEntry) -> str:
    scope = "/".join(x or "-" for x in (entry.tenant_id, entry.resource_id, entry.thread_id))
    when = entry.timestamp.isoformat(timespec="milliseconds") if entry.timestamp else "?"
    fields = json.dumps(entry.to_dict()["fields"], ensure_ascii=False, separators=(",", ":"))
    return f"{entry.position:>8} {when} {entry.note_id or '?'} {scope} {entry.type} v{entry.version} {fields}"


def log_command(
    note: Annotated[Optional[str], typer.Option("--note", help="Only this note (12-hex id or aggregate UUID).")] = None,
    tenant: Annotated[Optional[str], typer.Option("--tenant", "-t", help="Only this tenant's notes.")] = None,
    since: Annotated[int, typer.Option("--since", help="Only events after this position.", min=0)] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    idle_exit: Annotated[Optional[float], typer.Option(
        "--idle-exit", help="With --follow: stop after this many seconds without new events.")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Decoded events in log order: position, time, note id, scope, type and fields.

    Erased protected fields read <erased>; embeddings are shown by size only."""
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            for entry in read_log(fabric, note=note, tenant=tenant, since=since, follow=follow,
                                  idle_exit=idle_exit):
                if as_json:
                    print(json.dumps(entry.to_dict(), ensure_ascii=False), flush=follow)
                else:
                    print(_log_line(entry), flush=follow)
    except (FabricError, ValidationError, ValueError) as exc:
        _fail(exc)
    except KeyboardInterrupt:
        return


def export_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="JSON Lines file to write.")],
    tenant: Annotated[Optional[str], typer.Option("--tenant", "-t", help="Only this tenant's notes.")] = None,
    embeddings: Annotated[bool, typer.Option(
        "--embeddings/--no-embeddings", help="Include vectors (base64 float32).")] = True,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Export the whole log (or one tenant's part) as JSON Lines.

    Streaming in constant memory: one decoded event per line, in log order."""
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            total = fabric.engine.head()
            with Progress(TextColumn("[bold]export"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=err) as progress:
                task = progress.add_task("export", total=total)
                n = export_jsonl(fabric, out, tenant=tenant, embeddings=embeddings,
                                 progress=lambda pos: progress.update(task, completed=pos))
                progress.update(task, completed=total)
    except (FabricError, ValidationError, OSError) as exc:
        _fail(exc)
        return
    console.print(f"exported {n} events to {out}")


# -------------------------------------------------------------------- audit
def _audit(dsn: str | None, data_dir: str | None, *, checkpoint: bool, every: int, anchor: str | None,
           as_json: bool) -> None:
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            total = fabric.engine.head()
            with Progress(TextColumn("[bold]audit"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          console=err) as progress:
                task = progress.add_task("audit", total=total)
                report = verify_chain(fabric, checkpoint=checkpoint, every=every, anchor=anchor,
                                      progress=lambda k: progress.advance(task, k))
    except (FabricError, ValidationError, ValueError) as exc:
        _fail(exc)
        return
    if as_json:
        print(json.dumps({
            "ok": report.ok, "head": report.head, "events": report.events, "checkpoints": report.checkpoints,
            "written": report.written, "head_digest": report.head_digest, "changed": report.changed,
            "removed": report.removed, "inserted": report.inserted, "broken": report.broken,
            "gaps": report.gaps, "anchor_ok": report.anchor_ok,
        }))
    elif report.ok:
        console.print(Text(
            f"OK: {report.events} events hashed, {report.checkpoints} checkpoints verified,"
            f" {report.written} written", style="green"))
        if report.gaps:
            console.print(f"note: ids missing after the last checkpoint (rolled-back writes?): {report.gaps}")
    else:
        console.print(Text("TAMPERED: the event log does not match its audit chain", style="bold red"))
        for label, ids in (("changed", report.changed), ("removed", report.removed), ("inserted", report.inserted)):
            if ids:
                console.print(Text(f"  {label} event rows (notification ids): {ids}", style="red"))
        for problem in report.broken:
            console.print(Text(f"  {problem}", style="red"))
        if report.anchor_ok is False:
            console.print(Text(f"  the chain no longer gives the anchor {anchor}", style="red"))
    if not as_json:
        console.print(f"anchor: {report.head}:{report.head_digest}")
    if not report.ok:
        raise typer.Exit(code=1)


@audit_app.command("verify")
def audit_verify_command(
    checkpoint: Annotated[bool, typer.Option(
        "--checkpoint/--no-checkpoint", help="Checkpoint new events when all is well.")] = True,
    every: Annotated[int, typer.Option(help="Events per checkpoint.", min=1)] = 1000,
    anchor: Annotated[Optional[str], typer.Option(
        help="POSITION:HEX digest recorded earlier; fail unless the chain still gives it.")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recompute the audit chain and report changed, removed or inserted event rows.

    Exits 1 on any difference; otherwise checkpoints new events. Prints the head anchor
    (POSITION:DIGEST) to keep outside the database."""
    _audit(dsn, data_dir, checkpoint=checkpoint, every=every, anchor=anchor, as_json=as_json)


@audit_app.command("checkpoint")
def audit_checkpoint_command(
    every: Annotated[int, typer.Option(help="Events per checkpoint.", min=1)] = 1000,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify, then checkpoint the events since the last checkpoint.

    Refused (exit 1) when verification fails; prints the head anchor."""
    _audit(dsn, data_dir, checkpoint=True, every=every, anchor=None, as_json=as_json)
