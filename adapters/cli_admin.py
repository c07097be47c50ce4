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
import math
import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, NoReturn

import psycopg
from eventsourcing import persistence as es_persistence
import typer
from cryptography.exceptions import InvalidTag
from pydantic import ValidationError
from psycopg.rows import tuple_row
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from memfabric.adapters.audit import (
    CHAIN_TABLE,
    EVENTS_TABLE,
    REMEMBERED_TOPIC,
    LogEntry,
    export_jsonl,
    plain_fields,
    read_log,
    verify_chain,
)
from memfabric.adapters.bootstrap import Fabric, open_fabric, read_only_reason, recorded_embedder
from memfabric.adapters.embedded import resolve_dsn
from memfabric.adapters.log_versions import check_versions
from memfabric.adapters.embedders import HashEmbedder
from memfabric.adapters.cli_replica import ReplicaOpt, topology, topology_table
from memfabric.adapters.replicas import replicas_from_env
from memfabric.domain.errors import FabricError, NoteNotFoundError, ProjectionError, ReadOnlyError
from memfabric.domain.inputs import NOTE_ID_RE
from memfabric.domain.scope import SCOPE_ID_RE
from memfabric.projections import quarantine, tables
from memfabric.adapters.progress import LineReporter, RichReporter
from memfabric.projections.rebuild import ProjectionAdmin, VerifyReport

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

projections_app = typer.Typer(
    help="Projection status, rebuild (in place or blue-green), verify, and the runner.",
    no_args_is_help=True,
)
audit_app = typer.Typer(help="Tamper evidence: the audit chain over the event log.", no_args_is_help=True)
roles_app = typer.Typer(help="Least-privilege PostgreSQL roles: writer, admin, read-only auditor.",
                        no_args_is_help=True)

DsnOpt = Annotated[str | None, typer.Option(
    "--dsn", metavar="URL", help="PostgreSQL URL (default $MEMFABRIC_DSN, else the embedded server).")]
DataDirOpt = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="Data directory of the embedded server (default $MEMFABRIC_HOME/pg).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
KnownAtOpt = Annotated[str | None, typer.Option(
    "--known-at", metavar="TIME",
    help="As the fabric had recorded it at this instant (issue 31; ISO 8601, no timezone means UTC).")]
ProjectionOpt = Annotated[
    str, typer.Option("--projection", "-p", metavar="NAME", help="Projection name, or 'all'.")
]
TenantFilterOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", metavar="ID", help="Only this tenant's notes.")]
EveryOpt = Annotated[int, typer.Option(metavar="N", help="Events per checkpoint.", min=1)]

HANDLED = (FabricError, ValidationError, psycopg.Error, es_persistence.PersistenceError)
"""Errors a command reports in one line (exit 2) instead of a traceback."""
UNREADABLE = (InvalidTag, FabricError, ValueError)
"""What decoding a changed event row raises (``InvalidTag`` from AES-GCM, a named
``FabricError`` from the core, ``ValueError`` for a broken plain part)."""


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


# ------------------------------------------------------------------ helpers
def _index_dim(dsn: str) -> int | None:
    """The vector dimension of an existing recall index, if any."""
    try:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"  # noqa: S608
                " WHERE a.attrelid = to_regclass('" + tables.RECALL_INDEX + "') AND a.attname = 'embedding'"  # noqa: S608
            ).fetchone()
    except psycopg.Error:
        return None
    if row is None or not str(row[0]).startswith("vector("):
        return None
    return int(str(row[0])[len("vector(") : -1])


class RecordedEmbedder:
    """Stands for the database's recorded embedder in admin work, which never embeds
    (no model is loaded); ``embed`` raises."""

    def __init__(self, embedder_id: str, dim: int) -> None:
        self.id, self.dim = embedder_id, dim

    def embed(self, texts: Any) -> Any:
        raise FabricError(f"admin commands do not embed (embedder {self.id})")


def adopt_stand_in(fabric: Fabric) -> bool:
    """After a ``reembed`` by another process: serve an admin fabric with a stand-in of
    the newly recorded embedder and its projections (nothing is embedded here); returns
    whether the record had changed."""
    from memfabric.adapters.reembed import new_projections

    recorded = recorded_embedder(fabric.dsn)
    if recorded is None or recorded["id"] == str(fabric.service.embedder.id):
        return False
    stand_in: Any = RecordedEmbedder(recorded["id"], recorded["dim"])
    fabric.use_embedder(stand_in, new_projections(stand_in, fabric.log.sealing_mapper))
    return True


def can_write(dsn: str) -> bool:
    """Whether the connecting role may write the event log (``INSERT`` on
    ``memfabric_events``); ``True`` before the log exists (the first open creates it).
    ``$MEMFABRIC_READ_ONLY=1`` answers ``False``: read-only commands then open read-only
    whatever the role may do."""
    from memfabric.adapters.cli import env_read_only

    if env_read_only():
        return False
    with psycopg.connect(dsn) as conn:
        return read_only_reason(conn) is None


def require_writable(fabric: Fabric) -> None:
    """``ReadOnlyError`` naming the role's missing privilege when a command that writes
    got a fabric that fell back to read-only (issue 27: one line, not a raw
    ``permission denied``)."""
    if fabric.read_only:
        why = fabric.read_only_reason or "$MEMFABRIC_READ_ONLY is set"
        raise ReadOnlyError(f"this command writes, and {why}: run it as the owner/admin role")


@contextmanager
def admin_fabric(dsn: str | None, data_dir: str | None, *, read: bool = False) -> Iterator[Fabric]:
    """An open fabric for admin work: no inline projections, no catch-up on open, and a
    stand-in for the recorded embedder, else a hash embedder of the recall index's
    dimension (admin commands never embed). ``read``: a read-only command, which opens
    read-only (``open_fabric(read_only=True)``) when the role cannot write the log."""
    dsn, embedded = resolve_dsn(dsn, data_dir, read=read)
    try:
        recorded = recorded_embedder(dsn)
        stand_in: Any = (RecordedEmbedder(recorded["id"], recorded["dim"]) if recorded
                         else HashEmbedder(_index_dim(dsn) or 384))
        read_only = not can_write(dsn)
        if read_only and not read:
            with psycopg.connect(dsn) as conn:
                why = read_only_reason(conn) or "$MEMFABRIC_READ_ONLY is set"
            raise ReadOnlyError(f"this command writes, and {why}: run it as the owner/admin role")
        with open_fabric(dsn, embedder=stand_in, inline_projections=False, catch_up=False,
                         read_only=read_only) as fabric:
            fabric.service.embedders.adopter = lambda: adopt_stand_in(fabric)  # admin work never embeds
            fabric.embedded_server = embedded  # started here, not by open_fabric: `status` names it
            yield fabric
    finally:
        if embedded is not None:
            embedded.close()


def _fail(exc: BaseException | str, code: int = 2, *, as_json: bool = False) -> NoReturn:
    """One ``error: ...`` line per error on stderr (pydantic errors as ``field: message``);
    with ``as_json`` one JSON object ``{"error": ..., "type": ...}``."""
    from memfabric.adapters.cli import fail

    fail(exc, code, as_json=as_json)


def _stopped(exc: ProjectionError) -> NoReturn:
    cause = " ".join(str(exc.cause).split())
    err.print(Text(
        f"projection {exc.projection!r} stopped at notification {exc.notification_id} "
        f"({exc.topic}): {_short(cause, 300)}",
        style="red",
    ))
    raise typer.Exit(code=1)


@contextmanager
def _reporter() -> Iterator[RichReporter | None]:
    """Progress bars on stderr when it is a terminal, else none."""
    if not err.is_terminal:
        yield None
        return
    with RichReporter(err) as reporter:
        yield reporter


@contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[..., None]]:
    """``update(completed=...)`` / ``update(advance=...)`` of a progress bar on stderr;
    a no-op when stderr is not a terminal."""
    if not err.is_terminal:
        yield lambda **_: None
        return
    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err) as progress:
        task = progress.add_task(label, total=total)
        yield lambda **kw: progress.update(task, **kw)
        progress.update(task, completed=total)


def _check_filters(note: str | None, tenant: str | None, as_json: bool = False) -> None:
    """Exit 2 on a malformed ``--note`` or ``--tenant`` (they would silently match nothing)."""
    if note is not None and not NOTE_ID_RE.fullmatch(note):
        try:
            uuid.UUID(note)
        except ValueError:
            _fail(f"note: {note!r} is not a note id (12 lowercase hex digits) or an aggregate UUID",
                  as_json=as_json)
    if tenant is not None and not SCOPE_ID_RE.fullmatch(tenant):
        _fail(f"tenant: {tenant!r} is not a tenant id (1-128 letters, digits or ._:@- starting with a "
              "letter or digit)", as_json=as_json)


def _remembered(fabric: Fabric) -> Iterator[dict[str, Any]]:
    """The clear fields of every ``Remembered`` event (note id and scope), streamed."""
    with fabric.log.datastore.get_connection() as conn, conn.transaction():
        with conn.cursor(name="mf_scan_" + uuid.uuid4().hex[:8], row_factory=tuple_row, binary=True) as cur:
            cur.execute(f"SELECT state FROM {EVENTS_TABLE} WHERE topic = %s", (REMEMBERED_TOPIC,))  # noqa: S608
            while rows := cur.fetchmany(2000):
                for row in rows:
                    try:
                        fields = plain_fields(fabric.log.sealing_mapper, bytes(row[0]))
                    except UNREADABLE:  # a changed row: 'log' and 'audit verify' name it
                        continue
                    yield fields


def require_tenant(fabric: Fabric, tenant: str) -> None:
    """``FabricError`` unless some note of the log belongs to ``tenant``."""
    with psycopg.connect(fabric.dsn) as conn:
        have = conn.execute("SELECT to_regclass(%s)", (tables.NOTE_SCOPE,)).fetchone()
        if have and have[0] is not None and conn.execute(
                f"SELECT 1 FROM {tables.NOTE_SCOPE} WHERE tenant_id = %s LIMIT 1", (tenant,)).fetchone():  # noqa: S608
            return
    if not any(f.get("tenant_id") == tenant for f in _remembered(fabric)):
        raise FabricError(f"tenant: no tenant {tenant!r} in this database")


def note_scope(fabric: Fabric, note_id: str, tenant: str | None = None, resource: str | None = None,
               thread: str | None = None) -> Any:
    """The ``Notes`` handle of the scope holding note ``note_id``: the given scope when
    ``tenant`` is given with ``resource``/``thread`` or matches exactly one scope, else
    the only scope of the log with a note of that id. ``NoteNotFoundError`` when none
    has it; ``FabricError`` listing the scopes when several do."""
    if not NOTE_ID_RE.fullmatch(note_id):
        raise FabricError("id: must be 12 lowercase hex digits")
    if tenant is not None and (resource is not None or thread is not None):
        return fabric.scope(tenant, resource, thread)
    found = sorted({
        (f.get("tenant_id"), f.get("resource_id"), f.get("thread_id")) for f in _remembered(fabric)
        if f.get("note_id") == note_id and (tenant is None or f.get("tenant_id") == tenant)
    }, key=lambda k: tuple(x or "" for x in k))
    if not found:
        where = f" of tenant {tenant!r}" if tenant else ""
        raise NoteNotFoundError(f"no note {note_id!r} in any scope{where}")
    if len(found) > 1:
        scopes = ", ".join("/".join(x or "-" for x in k) for k in found)
        raise FabricError(f"note {note_id} is in {len(found)} scopes ({scopes}): give --tenant, "
                          "--resource and --thread")
    t, r, th = found[0]
    return fabric.scope(str(t), r, th)


def _seconds(value: float) -> str:
    if math.isnan(value):
        return "?"
    return f"{value:.1f}"


# -------------------------------------------------------------- projections
@projections_app.command("status")
def status_command(dsn: DsnOpt = None, data_dir: DataDirOpt = None, replica: ReplicaOpt = None,
                   as_json: JsonOpt = False) -> None:
    """Position, log head, lag (events, seconds) and state of each projection; then,
    with replicas (``--replica`` or ``$MEMFABRIC_REPLICA_DSNS``), the topology: primary
    and each replica's lag (tables only; ``memfabric replica status --json`` for JSON).

    A projection stopped on an event shows that event's notification id, topic and error; an aggregate \
quarantined because one of its rows does not authenticate (left out of every projection) is listed."""
    topo: dict[str, Any] | None = None
    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric:
            rows = ProjectionAdmin.for_fabric(fabric).status()
            replicas = replicas_from_env(replica or None)
            if replicas and not as_json:
                topo = topology(fabric.dsn, replicas)
            with fabric.log.datastore.get_connection() as conn, conn.cursor() as cur:
                held = quarantine.listing(cur)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps([
            {"name": s.name, "position": s.position, "head": s.head, "lag_events": s.lag_events,
             "lag_seconds": None if math.isnan(s.lag_seconds) else s.lag_seconds,
             "error": None if s.error is None else {**s.error, "at": s.error["at"].isoformat()}}
            for s in rows
        ]))
        return
    table = Table(title="projections", box=box.SIMPLE_HEAD, title_justify="left")
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
    if topo is not None:
        console.print(topology_table(topo))
    for s in rows:
        if s.error is not None:
            console.print(Text(
                f"{s.name} stopped at notification {s.error['notification_id']} ({s.error['topic']}):"
                f" {s.error['error']}", style="red"))
    for q in held:  # issue 28: left out of every projection, reads fail (run 'memfabric audit verify')
        console.print(Text(f"quarantined: aggregate {q['aggregate_id']} at notification {q['notification_id']}"
                           f" ({q['topic']}): {q['reason']}", style="red"))


@projections_app.command("rebuild")
def rebuild_command(
    projection: ProjectionOpt = "all",
    blue_green: Annotated[bool, typer.Option(
        "--blue-green", help="Build new tables while readers keep the old ones, then switch atomically.")] = False,
    batch: Annotated[int, typer.Option(metavar="N", help="Events per fetch.", min=1)] = 2000,
    maintenance_work_mem: Annotated[str | None, typer.Option(
        "--maintenance-work-mem", metavar="SIZE", help="For the index build, e.g. 1GB (default: the server's).")] = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the log from zero into the projection(s).

    In place (the default), writers wait while the tables are emptied and reloaded. With --blue-green the \
live tables keep serving until the switch."""
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            admin = ProjectionAdmin.for_fabric(fabric)
            with _reporter() as reporter:
                report = admin.rebuild(projection, blue_green=blue_green, batch=batch, reporter=reporter,
                                       maintenance_work_mem=maintenance_work_mem)
    except ProjectionError as exc:
        _stopped(exc)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json({"projections": report.projections, "blue_green": report.blue_green, "events": report.events,
                     "notes": report.notes, "rows": report.rows, "position": report.position,
                     "seconds": round(report.seconds, 3), "load_seconds": round(report.load_seconds, 3),
                     "index_seconds": round(report.index_seconds, 3),
                     "events_per_second": round(report.events_per_second, 1)})
        return
    mode = "blue-green" if report.blue_green else "in place"
    rows = ", ".join(f"{k}={v}" for k, v in report.rows.items())
    console.print(
        f"rebuilt {', '.join(report.projections)} ({mode}): {report.events} events, {report.notes} notes,"
        f" rows {rows}; position {report.position}; {report.seconds:.2f}s"
        f" ({report.events_per_second:,.0f} events/s; load {report.load_seconds:.2f}s,"
        f" indexes {report.index_seconds:.2f}s)"
    )


def reembed_command(
    embedder: Annotated[str, typer.Option(
        "--embedder", metavar="NAME", help="The new embedder: hash, hash:<dim>, wordllama or minilm.")],
    batch: Annotated[int, typer.Option(metavar="N", help="Notes per write transaction.", min=1, max=10_000)] = 256,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Migrate the fabric to another embedder without downtime (resumable).

    Appends a Reembedded event with the new vector per note that has content, builds the recall and \
consolidation indexes under the new dimension while recall keeps serving, then switches atomically \
and records the new embedder. Writes meanwhile are caught up before the switch. Run it again after an \
interruption: it resumes without duplicate events."""
    from memfabric.adapters.cli import make_embedder

    dsn_, embedded = (None, None)
    try:
        target = make_embedder(embedder)
        dsn_, embedded = resolve_dsn(dsn, data_dir)
        recorded = recorded_embedder(dsn_)
        stand_in: Any = RecordedEmbedder(recorded["id"], recorded["dim"]) if recorded else None
        from memfabric.adapters.cli import quiet_fallback

        with quiet_fallback(), open_fabric(dsn_, embedder=stand_in) as fabric, _reporter() as reporter:
            require_writable(fabric)
            report = fabric.reembed(target, batch=batch, reporter=reporter or LineReporter(err))
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    finally:
        if embedded is not None:
            embedded.close()
    out = {"embedder_id": report.embedder_id, "dim": report.dim,
           "previous_embedder_id": report.previous_embedder_id, "previous_dim": report.previous_dim,
           "notes": report.notes, "already": report.already, "passes": report.passes,
           "switch_attempts": report.switch_attempts, "seconds": round(report.seconds, 3),
           "rows_per_second": round(report.rows_per_second, 1),
           "embed_seconds": round(report.embed_seconds, 3),
           "rebuild_seconds": round(report.rebuild.seconds, 3) if report.rebuild else 0.0}
    if as_json:
        _print_json(out)
        return
    if report.rebuild is None:
        console.print(f"the fabric already uses {report.embedder_id}: nothing to do")
        return
    console.print(
        f"reembedded {report.notes} notes ({report.already} already done) {report.previous_embedder_id} → "
        f"{report.embedder_id} (dimension {report.previous_dim} → {report.dim}) in {report.seconds:.1f}s "
        f"({report.rows_per_second:,.0f} rows/s; embedding {report.embed_seconds:.1f}s, blue-green rebuild "
        f"{report.rebuild.seconds:.1f}s); {report.passes} passes, switched on attempt {report.switch_attempts}")


def _verify_json(r: VerifyReport) -> dict[str, Any]:
    return {
        "projection": r.projection, "table": r.table, "position": r.position, "head": r.head,
        "live_rows": r.live_rows, "replayed_rows": r.replayed_rows, "differences": r.differences,
        "ok": r.ok, "problem": r.problem,
        "first": [{"key": {k: str(v) for k, v in d.key.items()}, "kind": d.kind,
                   "columns": {c: [str(a), str(b)] for c, (a, b) in d.columns.items()}} for d in r.first],
    }


def _short(value: Any, n: int = 60) -> str:
    text = str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


@projections_app.command("verify")
def verify_command(
    projection: ProjectionOpt = "all",
    show: Annotated[int, typer.Option(metavar="N", help="Differing rows to print per table.", min=0)] = 10,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the live projection(s) with a fresh replay of the log.

    The replay goes into scratch tables (rolled back) and is compared row by row. When they differ, or a \
tracked position is past the log head (a changed tracking row), it \
prints the first differences and exits 1."""
    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric, _reporter() as reporter:
            reports = ProjectionAdmin.for_fabric(fabric).verify(projection, show=show, reporter=reporter)
    except ProjectionError as exc:
        _stopped(exc)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps([_verify_json(r) for r in reports]))
    else:
        for r in reports:
            lag = f" (log head {r.head})" if r.head != r.position else ""
            if r.problem is not None:
                console.print(Text(f"BROKEN  {r.projection} {r.table}: {r.problem}", style="red"))
            if r.ok:
                console.print(Text(
                    f"OK      {r.projection} {r.table}: {r.live_rows} rows identical at position {r.position}{lag}",
                    style="green"))
                continue
            if not r.differences:
                continue
            console.print(Text(
                f"DIFFER  {r.projection} {r.table}: {r.differences} rows differ at position {r.position}{lag}"
                f" (live {r.live_rows} rows, replay {r.replayed_rows})", style="red"))
            table = Table(box=box.SIMPLE_HEAD)
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


class RunLog:
    """What ``projections run`` prints (issue 27): one ``progress`` line per full batch
    of a long catch-up (:meth:`progress`: projection, events, position), one line when
    it has caught up on start, one per catch-up that applied at least ``batch_line``
    events (a batch), and one summary per ``interval`` seconds in which events were
    applied; never a line per event. ``emit(kind, fields)`` prints one line (text or
    JSON)."""

    def __init__(self, emit: Callable[[str, dict[str, Any]], None], *, interval: float,
                 batch_line: int = 1000, clock: Callable[[], float] | None = None) -> None:
        import time

        self.emit, self.interval, self.batch_line = emit, interval, batch_line
        self.clock = clock or time.monotonic
        self.last: dict[str, int] | None = None
        self.started = self.batch_started = self.clock()
        self.events = self.catch_ups = 0

    def __call__(self, positions: dict[str, int]) -> None:
        now = self.clock()
        if self.last is None:
            self.emit("caught_up", {"positions": dict(positions)})
        else:
            applied = max((positions[k] - self.last.get(k, 0) for k in positions), default=0)
            if applied > 0:
                self.events += applied
                self.catch_ups += 1
                if applied >= self.batch_line:
                    self.emit("batch", {"events": applied, "seconds": round(now - self.batch_started, 3),
                                        "positions": dict(positions)})
            if now - self.started >= self.interval:
                self.summary(positions, now)
        self.last, self.batch_started = dict(positions), now

    def progress(self, name: str, events: int, position: int) -> None:
        """One committed batch of ``events`` of projection ``name``, now at notification
        ``position``, with more to apply."""
        self.emit("progress", {"projection": name, "events": events, "position": position})

    def summary(self, positions: dict[str, int], now: float | None = None) -> None:
        """The interval's line (skipped when nothing was applied); starts a new interval."""
        now = self.clock() if now is None else now
        if self.events:
            self.emit("summary", {"seconds": round(now - self.started, 3), "events": self.events,
                                  "catch_ups": self.catch_ups, "positions": dict(positions)})
        self.started, self.events, self.catch_ups = now, 0, 0


def _run_line(as_json: bool) -> Callable[[str, dict[str, Any]], None]:
    def emit(kind: str, fields: dict[str, Any]) -> None:
        if as_json:
            print(json.dumps({"event": kind, **fields}), flush=True)
            return
        if kind == "progress":
            console.print(f"catching up: {fields['projection']} applied {fields['events']} events, "
                          f"at {fields['position']}")
            console.file.flush()
            return
        where = ", ".join(f"{k}={v}" for k, v in fields["positions"].items())
        if kind == "caught_up":
            console.print(f"caught up: {where}")
        elif kind == "batch":
            console.print(f"applied {fields['events']} events in {fields['seconds']:.1f}s: {where}")
        else:
            console.print(f"last {fields['seconds']:.0f}s: {fields['events']} events in "
                          f"{fields['catch_ups']} catch-ups: {where}")
        console.file.flush()
    return emit


@projections_app.command("run")
def run_command(
    once: Annotated[bool, typer.Option("--once", help="Catch up once and exit.")] = False,
    poll: Annotated[float, typer.Option(
        metavar="SECONDS", help="Seconds between checks without notifications.", min=0.05)] = 5.0,
    interval: Annotated[float, typer.Option(
        metavar="SECONDS", help="Seconds between summary lines.", min=0.1)] = 60.0,
    batch: Annotated[int, typer.Option(
        metavar="N", help="Events per projection transaction (a progress line each).", min=10,
        max=100_000)] = 2000,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Keep projections caught up from this process (LISTEN/NOTIFY).

    For writers opened with inline_projections=False. Prints a progress line per --batch of a long \
catch-up, one line once caught up, one per catch-up of 1000 events or more, and a summary per --interval. When a projection fails on an event, it prints the \
notification id, topic and error and exits 1."""
    show = RunLog(_run_line(as_json), interval=interval)

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop at a time: let the cleanup run
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            ProjectionAdmin.for_fabric(fabric).run(fabric.dsn, once=once, poll=min(poll, interval),
                                                   on_catch_up=show, adopt=lambda: adopt_stand_in(fabric),
                                                   batch=batch, on_batch=show.progress)
    except ProjectionError as exc:
        _stopped(exc)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    except KeyboardInterrupt:
        if show.last is not None:
            show.summary(show.last)
        if as_json:
            print(json.dumps({"event": "stopped"}), flush=True)
        else:
            console.print("stopped")
        return
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- the log
def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, FabricError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _integrity_failed(failed: list[LogEntry], as_json: bool) -> NoReturn:
    ids = [e.position for e in failed]
    shown = ", ".join(map(str, ids[:20])) + (", ..." if len(ids) > 20 else "")
    _fail(f"{_n(len(ids), 'event')} failed the integrity check (notification {shown}): "
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
        "--until", metavar="TIME", help="Only events recorded at or before this instant (issue 31; ISO 8601, "
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
    _check_filters(note, tenant, as_json)
    failed: list[LogEntry] = []
    last = since
    try:
        from memfabric.adapters.cli import parse_time

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
        _fail(exc, as_json=as_json)
    except UNREADABLE as exc:  # not a row's: rows are checked one by one
        _fail(f"the log cannot be read after notification {last}: {_reason(exc)}; run 'memfabric audit verify'",
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
    _check_filters(None, tenant, as_json)
    failed: list[LogEntry] = []
    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric:
            if tenant is not None:  # an unknown tenant says so (as `log` does), exit 2
                require_tenant(fabric, tenant)
            with _progress("export", fabric.engine.head()) as update:
                n = export_jsonl(fabric, out, tenant=tenant, embeddings=embeddings,
                                 progress=lambda position: update(completed=position), failed=failed.append)
    except (*HANDLED, OSError) as exc:
        _fail(exc, as_json=as_json)
    except UNREADABLE as exc:  # not a row's: rows are checked one by one
        _fail(f"the log cannot be read: {_reason(exc)}; run 'memfabric audit verify'", code=1, as_json=as_json)
    if as_json:
        _print_json({"events": n, "out": str(out), "failed": [e.position for e in failed]})
    else:
        console.print(f"exported {n} events to {out}")
    if failed:
        _integrity_failed(failed, as_json)


# -------------------------------------------------------------------- audit
def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


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
            with _progress("audit", fabric.engine.head()) as update:
                report = verify_chain(fabric, checkpoint=checkpoint, every=every, anchor=anchor,
                                      progress=lambda k: update(advance=k))
            new, covered = _checkpoint_counts(fabric, report.written)
    except (*HANDLED, ValueError) as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        print(json.dumps({
            "ok": report.ok, "head": report.head, "events": report.events, "checkpoints": report.checkpoints,
            "written": report.written, "checkpointed_events": new if report.written else 0,
            "head_digest": report.head_digest, "changed": report.changed,
            "removed": report.removed, "inserted": report.inserted, "broken": report.broken,
            "gaps": report.gaps, "anchor_ok": report.anchor_ok, "not_checkpointed": report.not_checkpointed,
            "unauthenticated": report.unauthenticated,
        }))
    elif report.ok:
        if report.not_checkpointed:
            done = f"not checkpointed ({report.not_checkpointed})"
        elif report.written:
            done = f"checkpointed {_n(new, 'new event')} ({_n(report.written, 'checkpoint')} written)"
        elif report.events > covered:
            done = f"{_n(report.events - covered, 'new event')} not checkpointed (--no-checkpoint)"
        else:
            done = "no new events to checkpoint"
        console.print(Text(
            f"OK: {_n(report.events, 'event')} hashed, {_n(report.checkpoints, 'checkpoint')} verified; {done}",
            style="green"))
        if report.gaps:
            console.print(f"note: ids missing after the last checkpoint (rolled-back writes?): {report.gaps}")
    else:
        console.print(Text("TAMPERED: the event log does not match its audit chain", style="bold red"))
        for label, ids in (("changed", report.changed), ("removed", report.removed), ("inserted", report.inserted),
                           ("unauthenticated (tag fails)", report.unauthenticated)):
            if ids:
                console.print(Text(f"  {label} event rows (notification ids): {ids}", style="red"))
        for problem in report.broken:
            console.print(Text(f"  {problem}", style="red"))
        if report.anchor_ok is False:
            console.print(Text(f"  the chain no longer gives the anchor {anchor}", style="red"))
        if checkpoint:
            console.print(Text("  nothing was checkpointed", style="red"))
    if not as_json:
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
    from memfabric.adapters.roles import roles_sql

    text = roles_sql(database, schema=schema, checkpoints=checkpoints)
    if as_json:
        _print_json({"database": database, "schema": schema, "sql": text})
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

    from memfabric.adapters.roles import create_login

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
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json({"kind": kind, "name": name, "database": database, "dsn": url})
    else:
        print(url)


# ------------------------------------------------------------ note lifecycle
NoteIdArg = Annotated[str, typer.Argument(metavar="ID", help="Note id (12 hex digits).")]
TenantOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", metavar="ID", help="Tenant id (default: found from the log when the id is unambiguous).")]
ResourceOpt = Annotated[str | None, typer.Option("--resource", "-r", metavar="ID", help="Resource id.")]
ThreadOpt = Annotated[str | None, typer.Option("--thread", metavar="ID", help="Thread id.")]
RequestedByOpt = Annotated[str, typer.Option(
    "--requested-by", metavar="WHO", help="Who asks (recorded in the tombstone).")]


@contextmanager
def notes_fabric(dsn: str | None, data_dir: str | None, *, read: bool = False,
                 replicas: list[str] | None = None) -> Iterator[Fabric]:
    """An open fabric for the lifecycle commands: inline projections, caught up, and a
    stand-in for the recorded embedder (they never embed, so no model is loaded).
    ``read``: a read-only command (get, history, list, lineage), which opens read-only
    (no catch-up) when the role cannot write the log. ``replicas``: read replicas
    (``--replica``; default ``$MEMFABRIC_REPLICA_DSNS``)."""
    dsn, embedded = resolve_dsn(dsn, data_dir, read=read)
    try:
        recorded = recorded_embedder(dsn)
        stand_in: Any = RecordedEmbedder(recorded["id"], recorded["dim"]) if recorded else None
        from memfabric.adapters.cli import quiet_fallback

        read_only = read and not can_write(dsn)
        with quiet_fallback(), open_fabric(dsn, embedder=stand_in, read_only=read_only,
                                                  replicas=replicas or None) as fabric:
            if not read:
                require_writable(fabric)
            yield fabric
    finally:
        if embedded is not None:
            embedded.close()


def _print_json(value: Any) -> None:
    from memfabric.adapters.serialize import jsonable

    print(json.dumps(jsonable(value), ensure_ascii=False))


def _note_dict(note: Any) -> dict[str, Any]:

    return {k: v for k, v in asdict(note).items() if k != "scope"} | {"scope": note.scope.key}


def get_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                thread: ThreadOpt = None, dsn: DsnOpt = None, data_dir: DataDirOpt = None,
                replica: ReplicaOpt = None, as_json: JsonOpt = False, known_at: KnownAtOpt = None) -> None:
    """Print one note: id, kind, scope, content and state (--known-at: as recorded then)."""
    from memfabric.adapters.cli import parse_time

    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            note = note_scope(fabric, note_id, tenant, resource, thread).get(
                note_id, known_at=parse_time(known_at, "known_at"))
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    out = _note_dict(note)
    if as_json:
        _print_json(out)
        return
    from memfabric.adapters.serialize import jsonable

    for key, value in jsonable(out).items():
        if value not in (None, [], {}, ""):
            console.print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")


def history_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                    thread: ThreadOpt = None, dsn: DsnOpt = None, data_dir: DataDirOpt = None,
                    replica: ReplicaOpt = None, as_json: JsonOpt = False) -> None:
    """Print every event of a note in order (erased protected fields read <erased>)."""

    from memfabric.adapters.serialize import jsonable

    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            entries = note_scope(fabric, note_id, tenant, resource, thread).history(note_id)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    rows = []
    for h in entries:
        row = asdict(h)
        row["fields"] = {k: (f"<{len(v)} bytes float32>" if isinstance(v, bytes | bytearray) else v)
                         for k, v in row["fields"].items()}
        rows.append(row)
    if as_json:
        _print_json(rows)
        return
    for row in jsonable(rows):
        fields = json.dumps(row["fields"], ensure_ascii=False, separators=(",", ":"))
        console.print(f"v{row['version']} {row['timestamp']} {row['type']} {fields}")


def _forget(note_id: str, tenant: str | None, resource: str | None, thread: str | None, hold: bool,
            requested_by: str, dsn: str | None, data_dir: str | None, as_json: bool) -> None:
    try:
        with notes_fabric(dsn, data_dir) as fabric:
            notes = note_scope(fabric, note_id, tenant, resource, thread)
            res = notes.forget(id=note_id, hold=hold, requested_by=requested_by)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json({"id": res.id, "scope": notes.scope.key, "deleted": res.deleted, "held": res.held})
    elif res.held:
        console.print(f"{note_id} held" + ("" if hold else " (a held note cannot be forgotten)"))
    else:
        console.print(f"{note_id} forgotten" if res.deleted else f"{note_id}: nothing to forget")


def forget_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                   thread: ThreadOpt = None, requested_by: RequestedByOpt = "operator",
                   dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Tombstone a note and destroy its key (crypto-shredding): its content is gone for good."""
    _forget(note_id, tenant, resource, thread, False, requested_by, dsn, data_dir, as_json)


def hold_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                 thread: ThreadOpt = None, requested_by: RequestedByOpt = "operator",
                 dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Put a note under legal hold: content kept, never recalled, cannot be forgotten."""
    _forget(note_id, tenant, resource, thread, True, requested_by, dsn, data_dir, as_json)


def _cursor(ref: Any) -> str:
    """The opaque ``--cursor`` after note-scope row ``ref``: base64url of
    ``[resource_id, thread_id, aggregate_id]``."""
    import base64

    raw = json.dumps([ref.scope.resource_id or "", ref.scope.thread_id or "", str(ref.aggregate_id)])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _after(cursor: str | None, tenant: str) -> Any:
    """The note-scope row a ``--cursor`` points after (``FabricError`` for a bad one)."""
    if cursor is None:
        return None
    import base64
    import binascii

    from memfabric.domain.ports import NoteRef
    from memfabric.domain.scope import Scope

    try:
        resource, thread, aggregate = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return NoteRef(aggregate_id=uuid.UUID(aggregate), note_id="",
                       scope=Scope(tenant_id=tenant, resource_id=resource or None, thread_id=thread or None),
                       held=False)
    except (ValueError, TypeError, binascii.Error):
        raise FabricError(f"cursor: {cursor!r} is not a cursor printed by 'memfabric list'") from None


def list_notes(fabric: Fabric, tenant: str, resource: str | None, thread: str | None, *, limit: int,
               cursor: str | None = None, content: bool = False) -> dict[str, Any]:
    """One page of the un-forgotten notes (live, superseded or held) of a scope prefix:
    ``{"items": [{"id", "kind", "held", "scope"[, "content"]}], "total", "counts", "next_cursor"}``
    (``total``: every such note of the prefix; ``counts``: its ``NoteCounts`` as a
    dict; ``next_cursor``: pass it back as ``cursor`` for the next page, ``None`` on the last). Keyset-paged by (resource,
    thread, note); ``FabricError`` for a bad cursor."""
    page = fabric.store.notes_in_scope(tenant, resource, thread, after=_after(cursor, tenant), limit=limit + 1)
    more, page = len(page) > limit, page[:limit]
    with psycopg.connect(fabric.dsn) as conn:
        kinds: dict[Any, Any] = dict(conn.execute(
            f"SELECT aggregate_id, kind FROM {tables.NOTE_SCOPE} WHERE aggregate_id = ANY(%s)",  # noqa: S608
            ([r.aggregate_id for r in page],)).fetchall())
    items: list[dict[str, Any]] = []
    for r in page:
        item = {"id": r.note_id, "kind": kinds.get(r.aggregate_id), "held": r.held, "scope": r.scope.key}
        if content:
            note = fabric.scope(r.scope.tenant_id, r.scope.resource_id, r.scope.thread_id).get(r.note_id)
            item["content"] = note.content if note.content is not None else note.path
        items.append(item)
    counts = fabric.store.counts_in_scope(tenant, resource, thread)
    return {"items": items, "total": counts.live + counts.superseded + counts.held,
            "counts": asdict(counts), "next_cursor": _cursor(page[-1]) if more and page else None}


def list_command(
    tenant: Annotated[str, typer.Option("--tenant", "-t", metavar="ID", help="Tenant id.")],
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    limit: Annotated[int, typer.Option(metavar="N", help="Most notes to print.", min=1, max=10_000)] = 100,
    cursor: Annotated[str | None, typer.Option(
        "--cursor", metavar="CURSOR", help="Start after this cursor (printed by the previous page).")] = None,
    content: Annotated[bool, typer.Option("--content", help="Also print each note's content.")] = False,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the un-forgotten notes of a scope prefix (every resource/thread unless given): id, kind, held.

    Prints the total (live, superseded and held; the forgotten are named too) and, when there are more, \
the --cursor of the next page. JSON: {"items": [...], "total": N, "counts": {"live", "superseded", "held", \
"forgotten"}, "next_cursor": CURSOR or null}."""
    _check_filters(None, tenant, as_json)
    try:
        with notes_fabric(dsn, data_dir, read=True) as fabric:
            require_tenant(fabric, tenant)
            out = list_notes(fabric, tenant, resource, thread, limit=limit, cursor=cursor, content=content)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json(out)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("id", "kind", "held", "scope", *(("content",) if content else ())):
        table.add_column(col, no_wrap=col != "content", overflow="fold")
    for row in out["items"]:
        table.add_row(row["id"], str(row["kind"]), "held" if row["held"] else "", row["scope"],
                      *((str(row["content"] or ""),) if content else ()))
    console.print(table if out["items"] else "no notes")
    more = f"; next page: --cursor {out['next_cursor']}" if out["next_cursor"] else ""
    console.print(f"{len(out['items'])} of {out['total']} notes{more}")
    console.print(f"in the prefix: {_states(out['counts'])}")


def release_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                    thread: ThreadOpt = None, requested_by: RequestedByOpt = "operator",
                    dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Lift a note's legal hold: it is recalled and listed again (the hold stays in its history)."""
    try:
        with notes_fabric(dsn, data_dir) as fabric:
            notes = note_scope(fabric, note_id, tenant, resource, thread)
            note = notes.release_hold(note_id, requested_by=requested_by)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json({"id": note.id, "scope": notes.scope.key, "outcome": note.outcome})
    else:
        console.print(f"{note_id} released")


def status_top_command(dsn: DsnOpt = None, data_dir: DataDirOpt = None, replica: ReplicaOpt = None,
                       as_json: JsonOpt = False) -> None:
    """How the fabric is: the log, every projection's position and lag, the embedder, the audit head and the topology
    (primary, replicas with their lag: ``--replica`` or ``$MEMFABRIC_REPLICA_DSNS``; tenant partitions).

    Reads only (works for a read-only auditor). JSON: the dict of memfabric.adapters.status.fabric_status."""
    from memfabric.adapters.status import fabric_status

    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric:
            out = fabric_status(fabric, replica or None)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json(out)
        return
    db, log, audit, emb = out["database"], out["log"], out["audit"], out["embedder"]
    where = f"embedded server in {db['embedded']}" if db["embedded"] else "the --dsn server"
    console.print(f"database {db['name']} as {db['user']} ({where})" + (" read-only" if db["read_only"] else ""))
    console.print(f"log: {_n(log['events'], 'event')}, head {log['head']}")
    console.print(f"embedder: {emb.get('id', emb['in_use'])} (dimension {emb.get('dim', '?')})")
    lag = out["lag"]
    console.print(f"lag: {lag['events']} events, {_seconds(lag['seconds'] or 0.0)}s")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("projection", "position", "lag (events)", "lag (s)", "state"):
        table.add_column(col)
    for p in out["projections"]:
        table.add_row(p["name"], str(p["position"]), str(p["lag_events"]),
                      "?" if p["lag_seconds"] is None else f"{p['lag_seconds']:.1f}", p["state"])
    console.print(table)
    if audit["position"] is None:
        console.print(f"audit: no checkpoint yet ({_n(audit['events_after'], 'event')} to checkpoint)")
    else:
        console.print(f"audit: {_n(audit['checkpoints'], 'checkpoint')}, head {audit['anchor']} at {audit['at']};"
                      f" {_n(audit['events_after'], 'event')} after it")
    topo = out["topology"]
    parts = topo["partitions"]
    console.print(f"partitions: {parts} (hash of the tenant)" if parts > 1 else "partitions: 1 (not partitioned)")
    if topo["replicas"]:
        console.print(topology_table(topo))


def erase_scope_command(
    tenant: Annotated[str, typer.Option("--tenant", "-t", metavar="ID", help="Tenant id.")],
    resource: ResourceOpt = None,
    thread: ThreadOpt = None,
    hold: Annotated[bool, typer.Option("--hold", help="Put the notes under legal hold instead.")] = False,
    requested_by: RequestedByOpt = "operator",
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tombstone (or, with --hold, hold) every note of a scope prefix and print exact counts.

    Without --resource/--thread every resource/thread of the tenant is erased."""
    _check_filters(None, tenant, as_json)

    try:
        with notes_fabric(dsn, data_dir) as fabric:
            require_tenant(fabric, tenant)
            res = fabric.erase_scope(tenant, resource, thread, hold=hold, requested_by=requested_by)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json(asdict(res))
    else:
        found = {k: v for k, v in asdict(res.found).items() if k != "forgotten"}
        console.print(f"found {_states(found)}; forgotten {res.deleted}, put on hold {res.held}; "
                      f"left: {_states(asdict(res.left))} (a held note is kept until 'memfabric release')")


def _states(counts: dict[str, int]) -> str:
    """``"2 live, 1 superseded, 1 held, 3 forgotten"``: a ``NoteCounts`` dict in words."""
    return ", ".join(f"{n} {state}" for state, n in counts.items())


def _sweep_table(res: Any) -> Table:
    table = Table(box=box.SIMPLE, title=f"sweep at {res.now.isoformat()}")
    table.add_column("class")
    for outcome in res.totals:
        table.add_column(outcome.replace("_", " "), justify="right")
    for cls, outcomes in res.counts.items():
        table.add_row(cls, *(str(n) for n in outcomes.values()))
    table.add_row("total", *(str(n) for n in res.totals.values()), style="bold")
    return table


@contextmanager
def _sweep_progress(quiet: bool) -> Iterator[Callable[[int], None]]:
    """A running count of the notes examined, on stderr when it is a terminal."""
    if quiet or not err.is_terminal:
        yield lambda n: None
        return
    with Progress(TextColumn("[bold]sweep"), TextColumn("{task.completed} notes examined"),
                  console=err) as progress:
        task = progress.add_task("sweep", total=None)
        yield lambda n: progress.update(task, advance=n)


def sweep_command(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what a sweep would do; write nothing.")] = False,
    now: Annotated[str | None, typer.Option(
        "--now", metavar="ISO", help="Sweep as of this time (ISO 8601 with a zone; default: now).")] = None,
    tenant: TenantFilterOpt = None,
    limit: Annotated[int | None, typer.Option(metavar="N", min=1, help="Examine at most N due notes.")] = None,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", metavar="N", min=1, max=10000, help="Notes per transaction.")] = 200,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply the retention rules (issue 30, docs/retention.md): expire and forget the notes
    whose windows closed, print exact counts per class and outcome.

    Batched and resumable: run it again with the same --now after an interruption."""
    from datetime import datetime  # noqa: PLC0415
    _check_filters(None, tenant, as_json)
    try:
        at = datetime.fromisoformat(now) if now is not None else None
    except ValueError:
        _fail(f"now: {now!r} is not an ISO 8601 time", as_json=as_json)
    if at is not None and at.tzinfo is None:
        _fail("now: give a time zone (e.g. 2026-01-01T00:00:00+00:00)", as_json=as_json)
    try:
        with notes_fabric(dsn, data_dir) as fabric, _sweep_progress(as_json) as advance:
            if tenant is not None:  # as every command: an unknown --tenant is exit 2, not "0 changed"
                require_tenant(fabric, tenant)
            res = fabric.sweep(at, tenant=tenant, limit=limit, dry_run=dry_run, batch_size=batch_size,
                               progress=advance)
    except HANDLED as exc:
        _fail(exc, as_json=as_json)
    if as_json:
        _print_json(res.as_dict())
        return
    console.print(_sweep_table(res))
    state = "complete" if res.complete else "stopped at --limit (run again with the same --now)"
    ledgers = f", {res.conversations} conversations erased" if res.conversations else ""
    console.print(f"{'dry run: ' if res.dry_run else ''}{res.changed} notes changed{ledgers}, {res.batches} batches, "
                  f"{state}{', resumed' if res.resumed else ''}")
