"""What the admin commands share (a leaf: it imports no command module): opening a
fabric for admin work (:func:`admin_fabric`, no catch-up, a stand-in embedder) or for the
lifecycle commands (:func:`notes_fabric`), the filters and scope look-ups they check
(:func:`check_filters`, :func:`require_tenant`, :func:`note_scope`), their options, and
their output (the consoles, progress bars on stderr, JSON, counts in words).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from cryptography.exceptions import InvalidTag
from psycopg.rows import tuple_row
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from memfabric.adapters.postgres.event_rows import EVENTS_TABLE, REMEMBERED_TOPIC, plain_fields
from memfabric.adapters.bootstrap import Fabric, open_fabric, read_only_reason, recorded_embedder
from memfabric.adapters.cli.common import HANDLED, env_read_only, fail, quiet_fallback
from memfabric.adapters.postgres.embedded import resolve_dsn
from memfabric.adapters.embedders import HashEmbedder
from memfabric.adapters.serialize import jsonable
from memfabric.adapters.cli.progress import RichReporter
from memfabric.domain.errors import FabricError, NoteNotFoundError, ProjectionError, ReadOnlyError
from memfabric.domain.inputs import NOTE_ID_RE
from memfabric.domain.scope import SCOPE_ID_RE
from memfabric.projections import tables

__all__ = ["HANDLED", "fail"]  # re-exported for the command modules

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DsnOpt = Annotated[str | None, typer.Option(
    "--dsn", metavar="URL", help="PostgreSQL URL (default $MEMFABRIC_DSN, else the embedded server).")]
DataDirOpt = Annotated[str | None, typer.Option(
    "--data-dir", metavar="DIR", help="Data directory of the embedded server (default $MEMFABRIC_HOME/pg).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
KnownAtOpt = Annotated[str | None, typer.Option(
    "--known-at", metavar="TIME",
    help="As the fabric had recorded it at this instant (ISO 8601, no timezone means UTC).")]
ProjectionOpt = Annotated[
    str, typer.Option("--projection", "-p", metavar="NAME", help="Projection name, or 'all'.")
]
TenantFilterOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", metavar="ID", help="Only this tenant's notes.")]
EveryOpt = Annotated[int, typer.Option(metavar="N", help="Events per checkpoint.", min=1)]
NoteIdArg = Annotated[str, typer.Argument(metavar="ID", help="Note id (12 hex digits).")]
TenantOpt = Annotated[str | None, typer.Option(
    "--tenant", "-t", metavar="ID", help="Tenant id (default: found from the log when the id is unambiguous).")]
ResourceOpt = Annotated[str | None, typer.Option("--resource", "-r", metavar="ID", help="Resource id.")]
ThreadOpt = Annotated[str | None, typer.Option("--thread", metavar="ID", help="Thread id.")]
RequestedByOpt = Annotated[str, typer.Option(
    "--requested-by", metavar="WHO", help="Who asks (recorded in the tombstone).")]

UNREADABLE = (InvalidTag, FabricError, ValueError)
"""What decoding a changed event row raises (``InvalidTag`` from AES-GCM, a named
``FabricError`` from the core, ``ValueError`` for a broken plain part)."""


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


def projection_stopped(exc: ProjectionError) -> NoReturn:
    cause = " ".join(str(exc.cause).split())
    err.print(Text(
        f"projection {exc.projection!r} stopped at notification {exc.notification_id} "
        f"({exc.topic}): {shorten(cause, 300)}",
        style="red",
    ))
    raise typer.Exit(code=1)


@contextmanager
def progress_reporter() -> Iterator[RichReporter | None]:
    """Progress bars on stderr when it is a terminal, else none."""
    if not err.is_terminal:
        yield None
        return
    with RichReporter(err) as reporter:
        yield reporter


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[..., None]]:
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


def check_filters(note: str | None, tenant: str | None, as_json: bool = False) -> None:
    """Exit 2 on a malformed ``--note`` or ``--tenant`` (they would silently match nothing)."""
    if note is not None and not NOTE_ID_RE.fullmatch(note):
        try:
            uuid.UUID(note)
        except ValueError:
            fail(f"note: {note!r} is not a note id (12 lowercase hex digits) or an aggregate UUID",
                  as_json=as_json)
    if tenant is not None and not SCOPE_ID_RE.fullmatch(tenant):
        fail(f"tenant: {tenant!r} is not a tenant id (1-128 letters, digits or ._:@- starting with a "
              "letter or digit)", as_json=as_json)


def remembered_fields(fabric: Fabric) -> Iterator[dict[str, Any]]:
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
    if not any(f.get("tenant_id") == tenant for f in remembered_fields(fabric)):
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
        (f.get("tenant_id"), f.get("resource_id"), f.get("thread_id")) for f in remembered_fields(fabric)
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
        read_only = read and not can_write(dsn)
        with quiet_fallback(), open_fabric(dsn, embedder=stand_in, read_only=read_only,
                                                  replicas=replicas or None) as fabric:
            if not read:
                require_writable(fabric)
            yield fabric
    finally:
        if embedded is not None:
            embedded.close()


def seconds_text(value: float) -> str:
    if math.isnan(value):
        return "?"
    return f"{value:.1f}"


def shorten(value: Any, n: int = 60) -> str:
    text = str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def plural(count: int, noun: str) -> str:
    """``"1 note"``, ``"2 notes"``, ``"3 batches"`` (English regular plurals only)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


def print_json(value: Any) -> None:
    print(json.dumps(jsonable(value), ensure_ascii=False))


def note_dict(note: Any) -> dict[str, Any]:

    return {k: v for k, v in asdict(note).items() if k != "scope"} | {"scope": note.scope.key}


def states_text(counts: dict[str, int]) -> str:
    """``"2 live, 1 superseded, 1 held, 3 forgotten"``: a ``NoteCounts`` dict in words."""
    return ", ".join(f"{n} {state}" for state, n in counts.items())
