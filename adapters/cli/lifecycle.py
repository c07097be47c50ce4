"""The note lifecycle commands: ``memfabric get | history | forget | hold | release | list |
status | erase-scope | sweep`` (registered by :func:`memfabric.adapters.cli.admin.register`;
see its module doc)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any

import psycopg
import typer
from rich import box
from rich.progress import Progress, TextColumn
from rich.table import Table

from memfabric.adapters.bootstrap import Fabric
from memfabric.adapters.cli.common import parse_time
from memfabric.adapters.cli.fabric import (
    DataDirOpt, DsnOpt, HANDLED, JsonOpt, KnownAtOpt, NoteIdArg, RequestedByOpt, ResourceOpt, TenantFilterOpt,
    TenantOpt, ThreadOpt, admin_fabric, check_filters, console, err, fail, note_dict, note_scope, notes_fabric,
    plural, print_json, require_tenant, seconds_text, states_text,
)
from memfabric.adapters.cli.replica import ReplicaOpt, topology_table
from memfabric.adapters.serialize import jsonable
from memfabric.domain.errors import FabricError
from memfabric.domain.sweep import BATCH_SIZE
from memfabric.projections import tables


def get_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                thread: ThreadOpt = None, dsn: DsnOpt = None, data_dir: DataDirOpt = None,
                replica: ReplicaOpt = None, as_json: JsonOpt = False, known_at: KnownAtOpt = None) -> None:
    """Print one note: id, kind, scope, content and state (--known-at: as recorded then)."""
    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            note = note_scope(fabric, note_id, tenant, resource, thread).get(
                note_id, known_at=parse_time(known_at, "known_at"))
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    out = note_dict(note)
    if as_json:
        print_json(out)
        return
    for key, value in jsonable(out).items():
        if value not in (None, [], {}, ""):
            console.print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")


def history_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                    thread: ThreadOpt = None, dsn: DsnOpt = None, data_dir: DataDirOpt = None,
                    replica: ReplicaOpt = None, as_json: JsonOpt = False) -> None:
    """Print every event of a note in order (erased protected fields read <erased>)."""

    try:
        with notes_fabric(dsn, data_dir, read=True, replicas=replica) as fabric:
            entries = note_scope(fabric, note_id, tenant, resource, thread).history(note_id)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    rows = []
    for h in entries:
        row = asdict(h)
        row["fields"] = {k: (f"<{len(v)} bytes float32>" if isinstance(v, bytes | bytearray) else v)
                         for k, v in row["fields"].items()}
        rows.append(row)
    if as_json:
        print_json(rows)
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
        fail(exc, as_json=as_json)
    if as_json:
        print_json({"id": res.id, "scope": notes.scope.key, "deleted": res.deleted, "held": res.held})
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
    check_filters(None, tenant, as_json)
    try:
        with notes_fabric(dsn, data_dir, read=True) as fabric:
            require_tenant(fabric, tenant)
            out = list_notes(fabric, tenant, resource, thread, limit=limit, cursor=cursor, content=content)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json(out)
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
    console.print(f"in the prefix: {states_text(out['counts'])}")


def release_command(note_id: NoteIdArg, tenant: TenantOpt = None, resource: ResourceOpt = None,
                    thread: ThreadOpt = None, requested_by: RequestedByOpt = "operator",
                    dsn: DsnOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Lift a note's legal hold: it is recalled and listed again (the hold stays in its history)."""
    try:
        with notes_fabric(dsn, data_dir) as fabric:
            notes = note_scope(fabric, note_id, tenant, resource, thread)
            note = notes.release_hold(note_id, requested_by=requested_by)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json({"id": note.id, "scope": notes.scope.key, "outcome": note.outcome})
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
        fail(exc, as_json=as_json)
    if as_json:
        print_json(out)
        return
    db, log, audit, emb = out["database"], out["log"], out["audit"], out["embedder"]
    where = f"embedded server in {db['embedded']}" if db["embedded"] else "the --dsn server"
    console.print(f"database {db['name']} as {db['user']} ({where})" + (" read-only" if db["read_only"] else ""))
    console.print(f"log: {plural(log['events'], 'event')}, head {log['head']}")
    console.print(f"embedder: {emb.get('id', emb['in_use'])} (dimension {emb.get('dim', '?')})")
    lag = out["lag"]
    console.print(f"lag: {lag['events']} events, {seconds_text(lag['seconds'] or 0.0)}s")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("projection", "position", "lag (events)", "lag (s)", "state"):
        table.add_column(col)
    for p in out["projections"]:
        table.add_row(p["name"], str(p["position"]), str(p["lag_events"]),
                      "?" if p["lag_seconds"] is None else f"{p['lag_seconds']:.1f}", p["state"])
    console.print(table)
    if audit["position"] is None:
        console.print(f"audit: no checkpoint yet ({plural(audit['events_after'], 'event')} to checkpoint)")
    else:
        console.print(f"audit: {plural(audit['checkpoints'], 'checkpoint')}, head {audit['anchor']} at {audit['at']};"
                      f" {plural(audit['events_after'], 'event')} after it")
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
    check_filters(None, tenant, as_json)

    try:
        with notes_fabric(dsn, data_dir) as fabric:
            require_tenant(fabric, tenant)
            res = fabric.erase_scope(tenant, resource, thread, hold=hold, requested_by=requested_by)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json(asdict(res))
    else:
        found = {k: v for k, v in asdict(res.found).items() if k != "forgotten"}
        console.print(f"found {states_text(found)}; forgotten {res.deleted}, put on hold {res.held}; "
                      f"left: {states_text(asdict(res.left))} (a held note is kept until 'memfabric release')")


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
        "--batch-size", metavar="N", min=1, max=10000, help="Notes per transaction.")] = BATCH_SIZE,
    dsn: DsnOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply the retention rules (issue 30, docs/retention.md): expire and forget the notes
    whose windows closed, print exact counts per class and outcome.

    Batched and resumable: run it again with the same --now after an interruption."""
    from datetime import datetime  # noqa: PLC0415
    check_filters(None, tenant, as_json)
    try:
        at = datetime.fromisoformat(now) if now is not None else None
    except ValueError:
        fail(f"now: {now!r} is not an ISO 8601 time", as_json=as_json)
    if at is not None and at.tzinfo is None:
        fail("now: give a time zone (e.g. 2026-01-01T00:00:00+00:00)", as_json=as_json)
    try:
        with notes_fabric(dsn, data_dir) as fabric, _sweep_progress(as_json) as advance:
            if tenant is not None:  # as every command: an unknown --tenant is exit 2, not "0 changed"
                require_tenant(fabric, tenant)
            res = fabric.sweep(at, tenant=tenant, limit=limit, dry_run=dry_run, batch_size=batch_size,
                               progress=advance)
    except HANDLED as exc:
        fail(exc, as_json=as_json)
    if as_json:
        print_json(res.as_dict())
        return
    console.print(_sweep_table(res))
    state = "complete" if res.complete else "stopped at --limit (run again with the same --now)"
    ledgers = f", {res.conversations} conversations erased" if res.conversations else ""
    ledgers += f", {res.access_records} access records purged" if res.access_records else ""
    console.print(f"{'dry run: ' if res.dry_run else ''}{plural(res.changed, 'note')} changed{ledgers}, {plural(res.batches, 'batch')}, "
                  f"{state}{', resumed' if res.resumed else ''}")
