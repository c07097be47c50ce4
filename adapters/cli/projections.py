"""``memfabric projections status | rebuild | verify | run`` and ``memfabric reembed``
(registered by :func:`memfabric.adapters.cli.admin.register`; see its module doc)."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from memfabric.adapters.bootstrap import open_fabric, recorded_embedder
from memfabric.adapters.cli.common import make_embedder, quiet_fallback
from memfabric.adapters.cli.fabric import (
    DataDirOpt, DsnOpt, HANDLED, JsonOpt, ProjectionOpt, RecordedEmbedder, admin_fabric, adopt_stand_in,
    console, err, fail, print_json, progress_reporter, projection_stopped, require_writable, seconds_text,
    shorten,
)
from memfabric.adapters.cli.replica import ReplicaOpt, topology_table
from memfabric.adapters.postgres.replicas import topology
from memfabric.adapters.postgres.embedded import resolve_dsn
from memfabric.adapters.cli.progress import LineReporter
from memfabric.adapters.postgres.replicas import replicas_from_env
from memfabric.domain.errors import FabricError, ProjectionError
from memfabric.projections import quarantine
from memfabric.projections.rebuild import ProjectionAdmin, VerifyReport

PartitionOpt = Annotated[int | None, typer.Option(
    "--partition", metavar="N", min=0,
    help="Only tenant partition N (a fabric made with partitions > 1; see 'memfabric status').")]
PartitionTenantOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", metavar="ID", help="Only the tenant partition that holds this tenant.")]


def _one_partition(partition: int | None, tenant: str | None) -> bool:
    """Whether ``--partition`` or ``--tenant`` asks for one partition."""
    return partition is not None or tenant is not None


projections_app = typer.Typer(
    help="Projection status, rebuild (in place or blue-green), verify, and the runner.",
    no_args_is_help=True,
)


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
        fail(exc, as_json=as_json)
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
        table.add_row(s.name, str(s.position), str(s.head), str(s.lag_events), seconds_text(s.lag_seconds), state)
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
    partition: PartitionOpt = None,
    tenant: PartitionTenantOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the log from zero into the projection(s).

    In place (the default), writers wait while the tables are emptied and reloaded. With --blue-green the \
live tables keep serving until the switch. With --partition N or --tenant ID, only that tenant partition's \
rows are replaced, in place: its writers wait, the other partitions' writers and readers go on."""
    if _one_partition(partition, tenant):
        _rebuild_partition(projection, partition, tenant, blue_green=blue_green, batch=batch, dsn=dsn,
                           data_dir=data_dir, as_json=as_json)
        return
    try:
        with admin_fabric(dsn, data_dir) as fabric:
            admin = ProjectionAdmin.for_fabric(fabric)
            with progress_reporter() as reporter:
                report = admin.rebuild(projection, blue_green=blue_green, batch=batch, reporter=reporter,
                                       maintenance_work_mem=maintenance_work_mem)
    except ProjectionError as exc:
        projection_stopped(exc)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json({"projections": report.projections, "blue_green": report.blue_green, "events": report.events,
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


def _rebuild_partition(projection: str, partition: int | None, tenant: str | None, *, blue_green: bool,
                       batch: int, dsn: str | None, data_dir: str | None, as_json: bool) -> None:
    """``projections rebuild --partition N`` / ``--tenant ID`` (issue 25)."""
    try:
        if blue_green:
            raise FabricError("--blue-green rebuilds every partition: drop it, or drop --partition/--tenant")
        with admin_fabric(dsn, data_dir) as fabric, progress_reporter() as reporter:
            r = ProjectionAdmin.for_fabric(fabric).rebuild_partition(
                partition, tenant=tenant, names=projection, batch=batch, reporter=reporter)
    except ProjectionError as exc:
        projection_stopped(exc)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json({"partition": r.remainder, "partitions": r.count, "tenants": r.tenants,
                    "projections": r.projections, "events": r.events, "notes": r.notes, "rows": r.rows,
                    "deleted": r.deleted, "positions": r.positions, "lock_seconds": round(r.lock_seconds, 3),
                    "seconds": round(r.seconds, 3)})
        return
    rows = ", ".join(f"{k}={v}" for k, v in r.rows.items())
    console.print(
        f"rebuilt partition {r.remainder} of {r.count} ({len(r.tenants)} tenants) for {', '.join(r.projections)}:"
        f" {r.events} events, {r.notes} notes, rows {rows}; {r.seconds:.2f}s"
        f" (waited {r.lock_seconds:.2f}s for the partition's writers)")


def reembed_command(
    embedder: Annotated[str, typer.Option(
        "--embedder", metavar="NAME", help="The new embedder: hash, hash:<dim>, wordllama or minilm.")],
    batch: Annotated[int, typer.Option(metavar="N", help="Notes per write transaction.", min=1, max=10_000)] = 256,
    partition: PartitionOpt = None,
    tenant: PartitionTenantOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Migrate the fabric to another embedder without downtime (resumable).

    Appends a Reembedded event with the new vector per note that has content, builds the recall and \
consolidation indexes under the new dimension while recall keeps serving, then switches atomically \
and records the new embedder. Writes meanwhile are caught up before the switch. Run it again after an \
interruption: it resumes without duplicate events. With --partition N or --tenant ID, only that tenant \
partition's notes are embedded, with no switch: run it without them at the end to switch every partition."""
    dsn_, embedded = (None, None)
    try:
        target = make_embedder(embedder)
        dsn_, embedded = resolve_dsn(dsn, data_dir)
        recorded = recorded_embedder(dsn_)
        stand_in: Any = RecordedEmbedder(recorded["id"], recorded["dim"]) if recorded else None
        with quiet_fallback(), open_fabric(dsn_, embedder=stand_in) as fabric, progress_reporter() as reporter:
            require_writable(fabric)
            report = fabric.reembed(target, batch=batch, reporter=reporter or LineReporter(err),
                                    partition=partition, tenant=tenant)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    finally:
        if embedded is not None:
            embedded.close()
    out = {"embedder_id": report.embedder_id, "dim": report.dim,
           "previous_embedder_id": report.previous_embedder_id, "previous_dim": report.previous_dim,
           "notes": report.notes, "already": report.already, "passes": report.passes,
           "switch_attempts": report.switch_attempts, "seconds": round(report.seconds, 3),
           "rows_per_second": round(report.rows_per_second, 1),
           "embed_seconds": round(report.embed_seconds, 3),
           "rebuild_seconds": round(report.rebuild.seconds, 3) if report.rebuild else 0.0,
           "partition": report.partition}
    if as_json:
        print_json(out)
        return
    if report.partition is not None:
        console.print(
            f"embedded {report.notes} notes of partition {report.partition} ({report.already} already done) under "
            f"{report.embedder_id}; the fabric still serves {report.previous_embedder_id}: run reembed without "
            f"--partition/--tenant to embed the rest and switch")
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


@projections_app.command("verify")
def verify_command(
    projection: ProjectionOpt = "all",
    show: Annotated[int, typer.Option(metavar="N", help="Differing rows to print per table.", min=0)] = 10,
    partition: PartitionOpt = None,
    tenant: PartitionTenantOpt = None,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the live projection(s) with a fresh replay of the log.

    The replay goes into scratch tables (rolled back) and is compared row by row. When they differ, or a \
tracked position is past the log head (a changed tracking row), it \
prints the first differences and exits 1. With --partition N or --tenant ID, only that tenant \
partition's rows are replayed and compared."""
    try:
        with admin_fabric(dsn, data_dir, read=True) as fabric, progress_reporter() as reporter:
            admin = ProjectionAdmin.for_fabric(fabric)
            if _one_partition(partition, tenant):
                reports = admin.verify_partition(partition, tenant=tenant, names=projection, show=show,
                                                 reporter=reporter)
            else:
                reports = admin.verify(projection, show=show, reporter=reporter)
    except ProjectionError as exc:
        projection_stopped(exc)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
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
                    table.add_row(key, d.kind, col, shorten(live), shorten(new))
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
        projection_stopped(exc)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
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
